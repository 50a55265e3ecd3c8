//! Just enough netlink to ask the kernel one question and read its one answer: messages and
//! attributes built and parsed as bytes (`linux/netlink.h`, `linux/genetlink.h`), generic
//! netlink families resolved by name, and one request-reply exchange over a socket of nix's safe
//! API. What is asked lives with its user ([`crate::flow_control`]). Parsing is pure, so replies
//! recorded on a real machine test it anywhere.

use std::os::fd::AsRawFd;

use nix::sys::socket::{self, AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType};

/// `NLMSG_ERROR`: the payload is the errno (negated) and the request's header.
const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
const NLMSG_DONE: u16 = 3;
/// `NLM_F_REQUEST`.
const NLM_F_REQUEST: u16 = 1;
/// `NLA_F_NESTED`: set on a nested attribute; masked off with `NLA_F_NET_BYTEORDER` when read.
pub const NLA_F_NESTED: u16 = 1 << 15;
const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | (1 << 14));
/// `GENL_ID_CTRL`, `CTRL_CMD_GETFAMILY`, `CTRL_ATTR_FAMILY_ID`, `CTRL_ATTR_FAMILY_NAME`.
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;

/// Why a question to the kernel got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetlinkError {
    /// The kernel refused: `EOPNOTSUPP` (the driver does not do it), `ENODEV`, `EPERM`, ...
    #[error("the kernel answered {}", .0.desc())]
    Kernel(nix::errno::Errno),
    /// No generic netlink family of that name (a kernel older than it).
    #[error("this kernel has no `{0}` netlink family")]
    NoFamily(String),
    /// The socket could not be opened, written or read (or the answer did not come in time).
    #[error("netlink socket: {}", .0.desc())]
    Socket(nix::errno::Errno),
    /// An answer that is not what the request gets.
    #[error("unexpected netlink reply: {0}")]
    Malformed(&'static str),
}

/// A request being built: the 16-byte header (its length filled in by [`Request::finish`]),
/// then a fixed header of the family's and attributes.
#[derive(Debug, Clone)]
pub struct Request {
    bytes: Vec<u8>,
}

impl Request {
    /// A request of message type `kind` (a generic family's id, or `RTM_*`) with sequence `seq`.
    pub fn new(kind: u16, seq: u32) -> Request {
        let mut bytes = Vec::with_capacity(64);
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        bytes.extend_from_slice(&seq.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        Request { bytes }
    }

    /// Append raw bytes (a `genlmsghdr`, a `dcbmsg`), padded to 4.
    pub fn raw(mut self, b: &[u8]) -> Request {
        self.bytes.extend_from_slice(b);
        self.pad();
        self
    }

    /// Append an attribute.
    pub fn attr(mut self, kind: u16, payload: &[u8]) -> Request {
        self.bytes.extend_from_slice(&attr_bytes(kind, payload));
        self
    }

    /// Append a NUL-terminated string attribute.
    pub fn attr_str(self, kind: u16, s: &str) -> Request {
        let mut p = s.as_bytes().to_vec();
        p.push(0);
        self.attr(kind, &p)
    }

    fn pad(&mut self) {
        self.bytes.resize(self.bytes.len().next_multiple_of(4), 0);
    }

    /// The message, its length written in.
    pub fn finish(mut self) -> Vec<u8> {
        self.pad();
        let len = self.bytes.len() as u32;
        self.bytes[..4].copy_from_slice(&len.to_ne_bytes());
        self.bytes
    }
}

/// One attribute's bytes, padded: length, type, payload.
pub fn attr_bytes(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + payload.len() + 3);
    b.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(payload);
    b.resize(b.len().next_multiple_of(4), 0);
    b
}

/// One message of a reply: its type, sequence number and payload (after the 16-byte header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    pub kind: u16,
    pub seq: u32,
    pub payload: &'a [u8],
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|x| u16::from_ne_bytes([x[0], x[1]]))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4).map(|x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]))
}

/// The messages of one datagram, in order; an error where a length runs past the end.
pub fn messages(mut b: &[u8]) -> Result<Vec<Message<'_>>, NetlinkError> {
    let mut out = Vec::new();
    while b.len() >= 16 {
        let len = u32_at(b, 0).unwrap_or(0) as usize;
        if len < 16 || len > b.len() {
            return Err(NetlinkError::Malformed("a message length runs past the datagram"));
        }
        out.push(Message {
            kind: u16_at(b, 4).unwrap_or(0),
            seq: u32_at(b, 8).unwrap_or(0),
            payload: &b[16..len],
        });
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    Ok(out)
}

/// The attributes in `b` as (type without its flags, payload); an error where one runs past the end.
pub fn attrs(mut b: &[u8]) -> Result<Vec<(u16, &[u8])>, NetlinkError> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = u16_at(b, 0).unwrap_or(0) as usize;
        if len < 4 || len > b.len() {
            return Err(NetlinkError::Malformed("an attribute length runs past its message"));
        }
        out.push((u16_at(b, 2).unwrap_or(0) & NLA_TYPE_MASK, &b[4..len]));
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    Ok(out)
}

/// The payload of the first attribute of type `kind`.
pub fn find<'a>(attrs: &[(u16, &'a [u8])], kind: u16) -> Option<&'a [u8]> {
    attrs.iter().find(|(k, _)| *k == kind).map(|(_, p)| *p)
}

/// The answer to request `seq` in `datagram`: the first message with that sequence number that
/// is not an acknowledgement; `None` where the datagram holds none (read the next one).
pub fn answer(datagram: &[u8], seq: u32) -> Result<Option<Message<'_>>, NetlinkError> {
    for m in messages(datagram)? {
        if m.seq != seq {
            continue;
        }
        match m.kind {
            NLMSG_ERROR => {
                let code = u32_at(m.payload, 0).ok_or(NetlinkError::Malformed("a short error message"))? as i32;
                if code != 0 {
                    return Err(NetlinkError::Kernel(nix::errno::Errno::from_raw(-code)));
                }
            }
            NLMSG_DONE => return Err(NetlinkError::Malformed("an empty answer")),
            _ => return Ok(Some(m)),
        }
    }
    Ok(None)
}

/// The request that asks the generic netlink controller for family `name`'s id.
pub fn family_request(name: &str, seq: u32) -> Vec<u8> {
    Request::new(GENL_ID_CTRL, seq)
        .raw(&[CTRL_CMD_GETFAMILY, 1, 0, 0])
        .attr_str(CTRL_ATTR_FAMILY_NAME, name)
        .finish()
}

/// The family id in the controller's answer (its payload: `genlmsghdr`, then attributes).
pub fn family_id(answer: &Message<'_>) -> Result<u16, NetlinkError> {
    let a = attrs(answer.payload.get(4..).unwrap_or_default())?;
    find(&a, CTRL_ATTR_FAMILY_ID)
        .and_then(|p| u16_at(p, 0))
        .ok_or(NetlinkError::Malformed("no family id in the controller's answer"))
}

/// An open netlink socket of one protocol (`NETLINK_ROUTE`, `NETLINK_GENERIC`) that waits at
/// most a second for an answer.
pub struct Socket {
    fd: std::os::fd::OwnedFd,
    seq: u32,
}

impl Socket {
    pub fn open(protocol: SockProtocol) -> Result<Socket, NetlinkError> {
        let fd = socket::socket(AddressFamily::Netlink, SockType::Raw, SockFlag::SOCK_CLOEXEC, protocol)
            .map_err(NetlinkError::Socket)?;
        let second = nix::sys::time::TimeVal::new(1, 0);
        socket::setsockopt(&fd, socket::sockopt::ReceiveTimeout, &second).map_err(NetlinkError::Socket)?;
        Ok(Socket { fd, seq: 0 })
    }

    /// The next sequence number, for the request about to be built.
    pub fn next_seq(&mut self) -> u32 {
        self.seq += 1;
        self.seq
    }

    /// Send `request` (sequence `seq`) to the kernel and return the datagram that answers it.
    pub fn ask(&mut self, request: &[u8], seq: u32) -> Result<Vec<u8>, NetlinkError> {
        // An unbound netlink socket sends to the kernel (port 0) and is bound by the kernel.
        socket::send(self.fd.as_raw_fd(), request, MsgFlags::empty()).map_err(NetlinkError::Socket)?;
        let mut buf = vec![0u8; 32 * 1024];
        for _ in 0..16 {
            let n = socket::recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(NetlinkError::Socket)?;
            if answer(&buf[..n], seq)?.is_some() {
                buf.truncate(n);
                return Ok(buf);
            }
        }
        Err(NetlinkError::Malformed("no answer to the request among 16 datagrams"))
    }

    /// The id of generic netlink family `name` (`ethtool`).
    pub fn family(&mut self, name: &str) -> Result<u16, NetlinkError> {
        let seq = self.next_seq();
        let reply = self.ask(&family_request(name, seq), seq).map_err(|e| match e {
            NetlinkError::Kernel(nix::errno::Errno::ENOENT) => NetlinkError::NoFamily(name.to_string()),
            e => e,
        })?;
        let m = answer(&reply, seq)?.ok_or(NetlinkError::Malformed("no answer"))?;
        family_id(&m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_padded_and_measured() {
        let r = family_request("ethtool", 7);
        // 16 header + 4 genlmsghdr + 4 attribute header + "ethtool\0" (8) = 32.
        assert_eq!(r.len(), 32);
        assert_eq!(u32_at(&r, 0), Some(32));
        assert_eq!(u16_at(&r, 4), Some(GENL_ID_CTRL));
        assert_eq!(u32_at(&r, 8), Some(7));
        let m = messages(&r).unwrap();
        assert_eq!(m.len(), 1);
        let a = attrs(&m[0].payload[4..]).unwrap();
        assert_eq!(find(&a, CTRL_ATTR_FAMILY_NAME), Some(&b"ethtool\0"[..]));
    }

    #[test]
    fn errors_acks_and_truncation() {
        // NLMSG_ERROR with -EOPNOTSUPP (95) for sequence 3, then an ack (0) for sequence 4.
        let mut d = Vec::new();
        for (seq, code) in [(3u32, -95i32), (4, 0)] {
            d.extend_from_slice(&36u32.to_ne_bytes());
            d.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
            d.extend_from_slice(&0u16.to_ne_bytes());
            d.extend_from_slice(&seq.to_ne_bytes());
            d.extend_from_slice(&0u32.to_ne_bytes());
            d.extend_from_slice(&code.to_ne_bytes());
            d.extend_from_slice(&[0u8; 16]);
        }
        assert_eq!(answer(&d, 3), Err(NetlinkError::Kernel(nix::errno::Errno::EOPNOTSUPP)));
        assert_eq!(answer(&d, 4), Ok(None), "an ack is not the answer");
        assert!(matches!(answer(&d[..60], 4), Err(NetlinkError::Malformed(_))));
        assert!(attrs(&[8, 0, 1, 0, 1]).is_err());
    }
}
