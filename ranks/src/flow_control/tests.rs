use std::path::Path;

use nix::errno::Errno;

use super::*;
use crate::netlink::attr_bytes;

/// A recorded datagram (see the fixtures' README.md).
fn recorded(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/netlink")
        .join(name);
    let hex = std::fs::read_to_string(&p).unwrap();
    let hex = hex.trim();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// A reply message as the kernel builds it: header (type, seq), then `body`.
fn reply(kind: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0x0e1eu32.to_ne_bytes());
    m.extend_from_slice(body);
    m
}

/// `ETHTOOL_MSG_PAUSE_GET_REPLY` as `pause_fill_reply` writes it: the header nest (index, name),
/// then autoneg, rx and tx as u8 attributes.
fn pause_reply(seq: u32, autoneg: u8, rx: u8, tx: u8) -> Vec<u8> {
    let mut header = attr_bytes(1, &4u32.to_ne_bytes());
    header.extend(attr_bytes(2, b"eth2\0"));
    let mut body = vec![ETHTOOL_MSG_PAUSE_GET_REPLY, 1, 0, 0];
    body.extend(attr_bytes(ETHTOOL_A_PAUSE_HEADER | NLA_F_NESTED, &header));
    body.extend(attr_bytes(ETHTOOL_A_PAUSE_AUTONEG, &[autoneg]));
    body.extend(attr_bytes(ETHTOOL_A_PAUSE_RX, &[rx]));
    body.extend(attr_bytes(ETHTOOL_A_PAUSE_TX, &[tx]));
    reply(21, seq, &body)
}

/// `RTM_GETDCB` `DCB_CMD_IEEE_GET` as `dcbnl_ieee_fill` writes it for mlx5: dcbmsg, the name,
/// the IEEE nest (ETS, then PFC: `struct ieee_pfc`, 136 bytes, with `pfc_en`), DCBX mode.
fn dcb_reply(seq: u32, pfc_en: Option<u8>) -> Vec<u8> {
    let mut ieee = attr_bytes(1, &[0u8; 59]);
    if let Some(en) = pfc_en {
        let mut pfc = [0u8; 136];
        pfc[0] = 8; // pfc_cap: 8 traffic classes
        pfc[1] = en;
        ieee.extend(attr_bytes(DCB_ATTR_IEEE_PFC, &pfc));
    }
    let mut body = vec![0, DCB_CMD_IEEE_GET, 0, 0];
    body.extend(attr_bytes(DCB_ATTR_IFNAME, b"eth2\0"));
    body.extend(attr_bytes(DCB_ATTR_IEEE | NLA_F_NESTED, &ieee));
    body.extend(attr_bytes(14, &[0x0c]));
    reply(RTM_GETDCB, seq, &body)
}

#[test]
fn the_recorded_family_answer_names_ethtool_s_id() {
    let d = recorded("ethtool-family-seq1.hex");
    let m = netlink::answer(&d, 1).unwrap().unwrap();
    assert_eq!(netlink::family_id(&m), Ok(21));
}

#[test]
fn drivers_without_pause_or_dcb_answer_eopnotsupp() {
    let pause = recorded("pause-virtio-eopnotsupp-seq1.hex");
    assert_eq!(parse_pause(&pause, 1), Err(NetlinkError::Kernel(Errno::EOPNOTSUPP)));
    let dcb = recorded("dcb-virtio-eopnotsupp-seq1.hex");
    assert_eq!(parse_pfc(&dcb, 1), Err(NetlinkError::Kernel(Errno::EOPNOTSUPP)));
    let nodev = recorded("dcb-nodev-seq1.hex");
    assert_eq!(parse_pfc(&nodev, 1), Err(NetlinkError::Kernel(Errno::ENODEV)));
    // The request each answer echoes is the one this module builds.
    assert_eq!(&pause[20..], &pause_request(21, "eth0", 1)[..]);
    assert_eq!(&dcb[20..], &dcb_ieee_request("eth0", 1)[..]);
}

#[test]
fn pause_and_pfc_from_the_kernel_s_answers() {
    assert_eq!(
        parse_pause(&pause_reply(3, 0, 1, 1), 3),
        Ok(Pause {
            autoneg: false,
            rx: true,
            tx: true
        })
    );
    assert_eq!(
        parse_pause(&pause_reply(3, 1, 0, 0), 3).map(|p| p.describe()),
        Ok("off".to_string())
    );
    assert_eq!(
        parse_pause(&pause_reply(3, 0, 1, 0), 3).map(|p| p.describe()),
        Ok("rx".to_string())
    );
    assert!(
        parse_pause(&pause_reply(3, 0, 1, 0), 4).is_err(),
        "another request's answer"
    );
    assert_eq!(parse_pfc(&dcb_reply(5, Some(0x08)), 5), Ok(0x08));
    assert_eq!(describe_pfc(0x08), "3");
    assert_eq!(describe_pfc(0x18), "3,4");
    assert_eq!(describe_pfc(0), "off");
    assert_eq!(
        parse_pfc(&dcb_reply(5, None), 5),
        Err(NetlinkError::Kernel(Errno::EOPNOTSUPP)),
        "a driver with DCB but no IEEE PFC"
    );
}

/// This machine's interfaces answer or refuse; either way the reading returns.
#[test]
fn reading_this_machine_s_loopback_returns() {
    assert!(read_pause("lo").is_err());
    assert!(read_pfc("lo").is_err());
    assert!(read_pfc("no-such-if0").is_err());
}
