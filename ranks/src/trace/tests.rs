//! The trace's matching of answers to probes and its reading of a path, without sockets.

use super::*;

fn conn() -> Connection {
    Connection {
        local: "10.80.0.10:40000".parse().expect("address"),
        remote: "10.80.2.10:5000".parse().expect("address"),
    }
}

/// A datagram: a 20-byte IPv4 header (protocol, source, destination) and `payload`.
fn ip(proto: u8, src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    let mut d = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 1, proto, 0, 0];
    d.extend(src.octets());
    d.extend(dst.octets());
    d.extend(payload);
    d
}

fn time_exceeded(router: Ipv4Addr, probe: &[u8; 20], c: Connection) -> Datagram {
    let mut icmp = vec![11, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend(ip(6, *c.local.ip(), *c.remote.ip(), &probe[..8]));
    Datagram::Icmp(ip(1, router, *c.local.ip(), &icmp))
}

/// An ICMP error of `kind`/`code` from `from` quoting UDP probe `probe` of `c`.
fn icmp_about_udp(kind: u8, code: u8, from: Ipv4Addr, probe: &[u8], c: Connection) -> Datagram {
    let mut icmp = vec![kind, code, 0, 0, 0, 0, 0, 0];
    icmp.extend(ip(17, *c.local.ip(), *c.remote.ip(), &probe[..8]));
    Datagram::Icmp(ip(1, from, *c.local.ip(), &icmp))
}

#[test]
fn a_roce_probe_is_answered_by_its_length_and_ends_at_port_unreachable() {
    let c = Connection {
        local: "10.80.0.10:49153".parse().expect("address"),
        remote: SocketAddrV4::new(Ipv4Addr::new(10, 80, 2, 10), ROCE_V2_PORT),
    };
    let roce = (c, Probe::RoceV2);
    let router = Ipv4Addr::new(10, 101, 0, 2);
    let len = probe_len(2, 1, 2);
    let probe = udp_probe(c.local, c.remote, len);
    let te = icmp_about_udp(11, 0, router, &probe, c);
    assert_eq!(answer(&te, roce, u32::from(len)), Some(Reply::Router(router)));
    // Another probe's length; the same quote read as a TCP probe's.
    assert_eq!(answer(&te, roce, u32::from(probe_len(2, 0, 2))), None);
    assert_eq!(answer(&te, (c, Probe::Tcp), u32::from(len)), None);
    // Port unreachable from the far end: arrived; from a router: the path ends there.
    let far = icmp_about_udp(3, 3, *c.remote.ip(), &probe, c);
    assert_eq!(answer(&far, roce, u32::from(len)), Some(Reply::Destination));
    let mid = icmp_about_udp(3, 3, router, &probe, c);
    assert_eq!(answer(&mid, roce, u32::from(len)), Some(Reply::Unreachable(router, 3)));
    // UDP seen coming in on the probe socket answers nothing.
    let udp_in = Datagram::Tcp(ip(17, *c.remote.ip(), *c.local.ip(), &probe));
    assert_eq!(answer(&udp_in, roce, u32::from(len)), None);
    // Every probe of a trace has a length of its own.
    let lens: std::collections::BTreeSet<u16> =
        (1..=16).flat_map(|t| (0..2).map(move |a| probe_len(t, a, 2))).collect();
    assert_eq!(lens.len(), 32);
}

#[test]
fn an_icmp_error_answers_only_its_own_probe() {
    let c = conn();
    let router = Ipv4Addr::new(10, 101, 0, 2);
    let seq = probe_seq(7, 2, 0);
    let probe = tcp_probe(c.local, c.remote, seq, 0);
    assert_eq!(
        answer(&time_exceeded(router, &probe, c), (c, Probe::Tcp), seq),
        Some(Reply::Router(router))
    );
    // The probe of another TTL or attempt; the same probe of another connection.
    assert_eq!(
        answer(&time_exceeded(router, &probe, c), (c, Probe::Tcp), probe_seq(7, 2, 1)),
        None
    );
    let other = Connection {
        local: "10.80.0.10:40001".parse().expect("address"),
        ..c
    };
    assert_eq!(
        answer(&time_exceeded(router, &probe, c), (other, Probe::Tcp), seq),
        None
    );
}

#[test]
fn a_segment_from_the_far_end_is_the_destination_and_nothing_else_is() {
    let c = conn();
    let back = tcp_probe(c.remote, c.local, 1, 1);
    let from_far = Datagram::Tcp(ip(6, *c.remote.ip(), *c.local.ip(), &back));
    assert_eq!(answer(&from_far, (c, Probe::Tcp), 0), Some(Reply::Destination));
    // A segment of another connection of the same hosts.
    let other = tcp_probe("10.80.2.10:5001".parse().expect("address"), c.local, 1, 1);
    let not_ours = Datagram::Tcp(ip(6, *c.remote.ip(), *c.local.ip(), &other));
    assert_eq!(answer(&not_ours, (c, Probe::Tcp), 0), None);
}

#[test]
fn probe_sequence_numbers_are_distinct_within_a_trace() {
    let mut seen = std::collections::HashSet::new();
    for ttl in 1..=u8::MAX {
        for attempt in 0..4 {
            assert!(seen.insert(probe_seq(u32::MAX - 300, ttl, attempt)));
        }
    }
}

#[test]
fn a_trace_reads_as_its_routers_and_whether_it_arrived() {
    let hop = |ttl, reply| Hop { ttl, reply, rtt: None };
    let (leaf, spine) = (Ipv4Addr::new(10, 80, 0, 1), Ipv4Addr::new(10, 101, 0, 2));
    let t = Trace {
        connection: conn(),
        hops: vec![
            hop(1, Reply::Router(leaf)),
            hop(2, Reply::Silent),
            hop(3, Reply::Router(spine)),
            hop(4, Reply::Destination),
        ],
    };
    assert!(t.reached());
    assert_eq!(t.routers(), vec![Some(leaf), None, Some(spine)]);
    let cut = Trace {
        hops: t.hops[..3].to_vec(),
        ..t
    };
    assert!(!cut.reached());
}

#[test]
fn options_that_cannot_probe_are_refused_before_any_socket() {
    for o in [
        TraceOptions {
            max_hops: 0,
            ..Default::default()
        },
        TraceOptions {
            attempts: 0,
            ..Default::default()
        },
        TraceOptions {
            probe_timeout: Duration::ZERO,
            ..Default::default()
        },
        TraceOptions {
            total: Duration::ZERO,
            ..Default::default()
        },
    ] {
        assert!(matches!(trace(conn(), &o), Err(TraceError::Options(_))));
    }
}

#[test]
fn a_socket_refused_for_want_of_cap_net_raw_is_the_refusal_and_other_failures_are_not() {
    let refused = |errno| socket::opening_failed("raw TCP socket", io::Error::from_raw_os_error(errno));
    assert!(matches!(refused(libc::EPERM), TraceError::NotPermitted));
    assert!(matches!(refused(libc::EACCES), TraceError::NotPermitted));
    let other = refused(libc::EMFILE);
    assert!(matches!(other, TraceError::Io { .. }), "{other}");
    assert!(other.to_string().starts_with("path trace: raw TCP socket: "), "{other}");
}

#[test]
fn the_refusal_says_what_to_do() {
    let s = TraceError::NotPermitted.to_string();
    assert!(
        s.contains("CAP_NET_RAW") && s.contains("setcap cap_net_raw+ep meshrun"),
        "{s}"
    );
}
