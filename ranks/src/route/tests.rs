use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;

/// A route message as the kernel's `rt_fill_info` lays it out: the netlink header (type
/// `RTM_NEWROUTE`, sequence 1), `struct rtmsg` with route type `rtype`, then `attrs`.
fn answer(rtype: u8, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = vec![2u8, 32, 0, 0, 254, 0, 0, rtype, 0, 2, 0, 0];
    for (k, p) in attrs {
        body.extend(netlink::attr_bytes(*k, p));
    }
    let mut m = Vec::new();
    m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&RTM_NEWROUTE.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend(body);
    m
}

/// `struct rtnexthop` with its attributes.
fn nexthop(attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let a: Vec<u8> = attrs.iter().flat_map(|(k, p)| netlink::attr_bytes(*k, p)).collect();
    let mut n = Vec::new();
    n.extend_from_slice(&((8 + a.len()) as u16).to_ne_bytes());
    n.extend_from_slice(&[0, 0]);
    n.extend_from_slice(&3i32.to_ne_bytes());
    n.extend(a);
    n
}

const OIF: u16 = 4;

#[test]
fn the_request_is_ip_route_get() {
    let r = request(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), 7);
    let m = netlink::messages(&r).expect("one message");
    assert_eq!((m.len(), m[0].kind, m[0].seq), (1, RTM_GETROUTE, 7));
    assert_eq!(&m[0].payload[..2], &[2, 32], "AF_INET, a /32");
    let a = netlink::attrs(&m[0].payload[RTMSG..]).expect("attributes");
    assert_eq!(netlink::find(&a, RTA_DST), Some(&[10u8, 1, 2, 3][..]));
    let r6 = request(IpAddr::V6(Ipv6Addr::LOCALHOST), 1);
    let m6 = netlink::messages(&r6).expect("one message");
    assert_eq!(&m6[0].payload[..2], &[10, 128], "AF_INET6, a /128");
}

#[test]
fn local_on_link_and_routed_answers() {
    let dst = (RTA_DST, vec![10, 0, 1, 5]);
    assert_eq!(
        parse(&answer(RTN_LOCAL, std::slice::from_ref(&dst)), 1),
        Ok(NextHop::Local)
    );
    // A peer on the bridge: an output interface, no gateway.
    let on_link = answer(1, &[dst.clone(), (OIF, 3u32.to_ne_bytes().to_vec())]);
    assert_eq!(parse(&on_link, 1), Ok(NextHop::OnLink));
    // Behind the leaf: its address as the gateway.
    let gw = answer(1, &[dst.clone(), (RTA_GATEWAY, vec![10, 0, 0, 1])]);
    let hop = parse(&gw, 1).expect("a route");
    assert_eq!(hop, NextHop::Gateway(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
    assert!(hop.routed() && !NextHop::OnLink.routed() && !NextHop::Local.routed());
    // An IPv4 route over an IPv6 next hop (RTA_VIA: family, then the address).
    let mut v = 10u16.to_ne_bytes().to_vec();
    v.extend_from_slice(&Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1).octets());
    assert!(parse(&answer(1, &[dst.clone(), (RTA_VIA, v)]), 1)
        .expect("a route")
        .routed());
    // Several next hops: the first with a gateway.
    let mut mp = nexthop(&[]);
    mp.extend(nexthop(&[(RTA_GATEWAY, vec![10, 0, 0, 9])]));
    assert_eq!(
        parse(&answer(1, &[dst, (RTA_MULTIPATH, mp)]), 1),
        Ok(NextHop::Gateway(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9))))
    );
}

#[test]
fn refusals_and_garbage_are_errors() {
    // NLMSG_ERROR -ENETUNREACH, as `ip route get` to an address with no route gets.
    let mut e = Vec::new();
    e.extend_from_slice(&36u32.to_ne_bytes());
    e.extend_from_slice(&2u16.to_ne_bytes());
    e.extend_from_slice(&0u16.to_ne_bytes());
    e.extend_from_slice(&1u32.to_ne_bytes());
    e.extend_from_slice(&0u32.to_ne_bytes());
    e.extend_from_slice(&(-101i32).to_ne_bytes());
    e.extend_from_slice(&[0u8; 16]);
    assert_eq!(parse(&e, 1), Err(NetlinkError::Kernel(nix::errno::Errno::ENETUNREACH)));
    // A route message cut short.
    let mut short = answer(1, &[]);
    short.truncate(20);
    short[..4].copy_from_slice(&20u32.to_ne_bytes());
    assert!(parse(&short, 1).is_err());
    // A next hop whose length runs past the route.
    let mut bad = nexthop(&[(RTA_GATEWAY, vec![10, 0, 0, 9])]);
    bad[0] = 200;
    assert!(parse(&answer(1, &[(RTA_MULTIPATH, bad)]), 1).is_err());
}

/// The kernel here: its own loopback address is local.
#[test]
fn this_hosts_loopback_is_local() {
    let hops = next_hops(&[IpAddr::V4(Ipv4Addr::LOCALHOST)]).expect("the kernel answers over netlink");
    assert_eq!(hops, [NextHop::Local]);
}
