//! An Ethernet interface's flow control, read from the kernel without ethtool or dcb: global
//! pause (what `ethtool -a` shows) through ethtool's generic netlink (`ETHTOOL_MSG_PAUSE_GET`,
//! kernel 5.6 or later), and priority flow control (PFC, what `dcb pfc show` and `mlnx_qos`
//! show) through DCB netlink (`RTM_GETDCB`, `DCB_CMD_IEEE_GET`, the `pfc_en` bitmap of
//! `struct ieee_pfc`). Upstream mlx5 has no sysfs file for PFC: DCB netlink is where the
//! driver (`mlx5e_dcbnl_ieee_getpfc`) answers. Neither needs privileges to read. A driver
//! without them (veth, virtio, loopback) answers `EOPNOTSUPP`.

use nix::sys::socket::SockProtocol;

use crate::netlink::{self, attrs, find, NetlinkError, Request, Socket, NLA_F_NESTED};

/// `ETHTOOL_MSG_PAUSE_GET` (user to kernel) and `ETHTOOL_MSG_PAUSE_GET_REPLY`.
const ETHTOOL_MSG_PAUSE_GET: u8 = 21;
const ETHTOOL_MSG_PAUSE_GET_REPLY: u8 = 22;
/// `ETHTOOL_A_PAUSE_HEADER` (nest of `ETHTOOL_A_HEADER_*`), `_AUTONEG`, `_RX`, `_TX` (u8 each).
const ETHTOOL_A_PAUSE_HEADER: u16 = 1;
const ETHTOOL_A_PAUSE_AUTONEG: u16 = 2;
const ETHTOOL_A_PAUSE_RX: u16 = 3;
const ETHTOOL_A_PAUSE_TX: u16 = 4;
const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;
/// `RTM_GETDCB`, `DCB_CMD_IEEE_GET`, `DCB_ATTR_IFNAME`, `DCB_ATTR_IEEE`, `DCB_ATTR_IEEE_PFC`.
const RTM_GETDCB: u16 = 78;
const DCB_CMD_IEEE_GET: u8 = 21;
const DCB_ATTR_IFNAME: u16 = 1;
const DCB_ATTR_IEEE: u16 = 13;
const DCB_ATTR_IEEE_PFC: u16 = 2;

/// Global pause as `ethtool -a` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    pub autoneg: bool,
    pub rx: bool,
    pub tx: bool,
}

impl Pause {
    /// `off`, `rx`, `tx` or `rx tx`: the value preflight prints and an `--expect` file names.
    pub fn describe(&self) -> String {
        match (self.rx, self.tx) {
            (false, false) => "off".into(),
            (true, false) => "rx".into(),
            (false, true) => "tx".into(),
            (true, true) => "rx tx".into(),
        }
    }
}

/// The priorities with PFC enabled, from `pfc_en`: `3`, `3,4`, or `off` where none is.
pub fn describe_pfc(pfc_en: u8) -> String {
    let on: Vec<String> = (0..8)
        .filter(|p| pfc_en & (1 << p) != 0)
        .map(|p| p.to_string())
        .collect();
    if on.is_empty() {
        "off".into()
    } else {
        on.join(",")
    }
}

/// The `ETHTOOL_MSG_PAUSE_GET` request for `netdev` to family `family` (its id).
pub fn pause_request(family: u16, netdev: &str, seq: u32) -> Vec<u8> {
    let mut name = netdev.as_bytes().to_vec();
    name.push(0);
    let header = netlink::attr_bytes(ETHTOOL_A_HEADER_DEV_NAME, &name);
    Request::new(family, seq)
        .raw(&[ETHTOOL_MSG_PAUSE_GET, 1, 0, 0])
        .attr(ETHTOOL_A_PAUSE_HEADER | NLA_F_NESTED, &header)
        .finish()
}

/// Pause from the answer to [`pause_request`] (the datagram; `seq` the request's).
pub fn parse_pause(datagram: &[u8], seq: u32) -> Result<Pause, NetlinkError> {
    let m = netlink::answer(datagram, seq)?.ok_or(NetlinkError::Malformed("no answer"))?;
    if m.payload.first() != Some(&ETHTOOL_MSG_PAUSE_GET_REPLY) {
        return Err(NetlinkError::Malformed("not a PAUSE_GET reply"));
    }
    let a = attrs(m.payload.get(4..).unwrap_or_default())?;
    let flag = |k| find(&a, k).and_then(|p| p.first()).map(|b| *b != 0);
    Ok(Pause {
        autoneg: flag(ETHTOOL_A_PAUSE_AUTONEG).unwrap_or(false),
        rx: flag(ETHTOOL_A_PAUSE_RX).ok_or(NetlinkError::Malformed("no rx pause in the reply"))?,
        tx: flag(ETHTOOL_A_PAUSE_TX).ok_or(NetlinkError::Malformed("no tx pause in the reply"))?,
    })
}

/// The `RTM_GETDCB` `DCB_CMD_IEEE_GET` request for `netdev`.
pub fn dcb_ieee_request(netdev: &str, seq: u32) -> Vec<u8> {
    // struct dcbmsg: dcb_family (AF_UNSPEC), cmd, pad.
    Request::new(RTM_GETDCB, seq)
        .raw(&[0, DCB_CMD_IEEE_GET, 0, 0])
        .attr_str(DCB_ATTR_IFNAME, netdev)
        .finish()
}

/// `pfc_en` (bit N: priority N has PFC) from the answer to [`dcb_ieee_request`].
pub fn parse_pfc(datagram: &[u8], seq: u32) -> Result<u8, NetlinkError> {
    let m = netlink::answer(datagram, seq)?.ok_or(NetlinkError::Malformed("no answer"))?;
    let top = attrs(m.payload.get(4..).unwrap_or_default())?;
    let ieee = find(&top, DCB_ATTR_IEEE).ok_or(NetlinkError::Malformed("no IEEE DCB attributes in the reply"))?;
    let inner = attrs(ieee)?;
    // struct ieee_pfc { __u8 pfc_cap; __u8 pfc_en; ... }: a driver without ieee_getpfc leaves it out.
    let pfc = find(&inner, DCB_ATTR_IEEE_PFC).ok_or(NetlinkError::Kernel(nix::errno::Errno::EOPNOTSUPP))?;
    pfc.get(1).copied().ok_or(NetlinkError::Malformed("a short ieee_pfc"))
}

/// `netdev`'s global pause, asked of this machine's kernel (in this network namespace).
pub fn read_pause(netdev: &str) -> Result<Pause, NetlinkError> {
    let mut s = Socket::open(SockProtocol::NetlinkGeneric)?;
    let family = s.family("ethtool")?;
    let seq = s.next_seq();
    let reply = s.ask(&pause_request(family, netdev, seq), seq)?;
    parse_pause(&reply, seq)
}

/// `netdev`'s PFC-enabled priorities (`pfc_en`), asked of this machine's kernel.
pub fn read_pfc(netdev: &str) -> Result<u8, NetlinkError> {
    let mut s = Socket::open(SockProtocol::NetlinkRoute)?;
    let seq = s.next_seq();
    let reply = s.ask(&dcb_ieee_request(netdev, seq), seq)?;
    parse_pfc(&reply, seq)
}

#[cfg(test)]
mod tests;
