//! How this host reaches an address: on this host, on a link of its own, or through a router
//! (`ip route get ADDR`, asked of the kernel over netlink with `RTM_GETROUTE`). A peer behind a
//! router is on a routed fabric, where flows between two hosts may take any of several
//! equal-cost paths: what makes pairwise spread a test over several connections by default.

use std::net::IpAddr;

use nix::sys::socket::SockProtocol;

use crate::netlink::{self, NetlinkError, Request, Socket};

/// `RTM_NEWROUTE`, `RTM_GETROUTE` (`linux/rtnetlink.h`).
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
/// `RTA_DST`, `RTA_GATEWAY`, `RTA_MULTIPATH`, `RTA_VIA`.
const RTA_DST: u16 = 1;
const RTA_GATEWAY: u16 = 5;
const RTA_MULTIPATH: u16 = 9;
const RTA_VIA: u16 = 18;
/// `RTN_LOCAL`: an address of this host.
const RTN_LOCAL: u8 = 2;
/// `struct rtmsg`'s size, before the attributes.
const RTMSG: usize = 12;

/// How the kernel sends to one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextHop {
    /// An address of this host (loopback included).
    Local,
    /// On a link of this host: no router between.
    OnLink,
    /// Through a router: its address (the first of several where the route has many).
    Gateway(IpAddr),
}

impl NextHop {
    /// Whether a router stands between this host and the address.
    pub fn routed(&self) -> bool {
        matches!(self, NextHop::Gateway(_))
    }
}

/// The request `ip route get DST` sends (sequence `seq`).
pub fn request(dst: IpAddr, seq: u32) -> Vec<u8> {
    let (family, addr): (u8, Vec<u8>) = match dst {
        IpAddr::V4(a) => (libc_af(false), a.octets().to_vec()),
        IpAddr::V6(a) => (libc_af(true), a.octets().to_vec()),
    };
    let bits = (addr.len() * 8) as u8;
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags (u32).
    let mut rtmsg = [0u8; RTMSG];
    rtmsg[0] = family;
    rtmsg[1] = bits;
    Request::new(RTM_GETROUTE, seq)
        .raw(&rtmsg)
        .attr(RTA_DST, &addr)
        .finish()
}

/// `AF_INET` or `AF_INET6`.
fn libc_af(v6: bool) -> u8 {
    if v6 {
        10
    } else {
        2
    }
}

/// An address attribute's payload (4 or 16 bytes) as an address.
fn address(p: &[u8]) -> Option<IpAddr> {
    match p.len() {
        4 => <[u8; 4]>::try_from(p).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(p).ok().map(IpAddr::from),
        _ => None,
    }
}

/// `RTA_VIA`'s payload: the family (u16), then the address.
fn via(p: &[u8]) -> Option<IpAddr> {
    address(p.get(2..)?)
}

/// The first gateway of an `RTA_MULTIPATH` payload: `struct rtnexthop` (length u16, flags u8,
/// hops u8, ifindex i32), then its attributes, one after another.
fn multipath_gateway(mut p: &[u8]) -> Result<Option<IpAddr>, NetlinkError> {
    while p.len() >= 8 {
        let len = u16::from_ne_bytes([p[0], p[1]]) as usize;
        if len < 8 || len > p.len() {
            return Err(NetlinkError::Malformed("a next hop's length runs past its route"));
        }
        let a = netlink::attrs(&p[8..len])?;
        if let Some(g) = netlink::find(&a, RTA_GATEWAY).and_then(address) {
            return Ok(Some(g));
        }
        if let Some(g) = netlink::find(&a, RTA_VIA).and_then(via) {
            return Ok(Some(g));
        }
        p = &p[len.next_multiple_of(4).min(p.len())..];
    }
    Ok(None)
}

/// The next hop in the kernel's answer to [`request`] (one datagram).
pub fn parse(datagram: &[u8], seq: u32) -> Result<NextHop, NetlinkError> {
    let m = netlink::answer(datagram, seq)?.ok_or(NetlinkError::Malformed("no answer to the route request"))?;
    if m.kind != RTM_NEWROUTE {
        return Err(NetlinkError::Malformed("the answer is not a route"));
    }
    let head = m
        .payload
        .get(..RTMSG)
        .ok_or(NetlinkError::Malformed("a short route message"))?;
    if head[7] == RTN_LOCAL {
        return Ok(NextHop::Local);
    }
    let a = netlink::attrs(&m.payload[RTMSG..])?;
    let gateway = match netlink::find(&a, RTA_GATEWAY).and_then(address) {
        Some(g) => Some(g),
        None => match netlink::find(&a, RTA_VIA).and_then(via) {
            Some(g) => Some(g),
            None => netlink::find(&a, RTA_MULTIPATH)
                .map(multipath_gateway)
                .transpose()?
                .flatten(),
        },
    };
    Ok(gateway.map_or(NextHop::OnLink, NextHop::Gateway))
}

/// How this host (the calling thread's network namespace) reaches each of `dsts`, asked of the
/// kernel over one netlink socket (each answer within a second).
pub fn next_hops(dsts: &[IpAddr]) -> Result<Vec<NextHop>, NetlinkError> {
    let mut s = Socket::open(SockProtocol::NetlinkRoute)?;
    dsts.iter()
        .map(|&d| {
            let seq = s.next_seq();
            let reply = s.ask(&request(d, seq), seq)?;
            parse(&reply, seq)
        })
        .collect()
}

#[cfg(test)]
mod tests;
