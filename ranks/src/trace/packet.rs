//! The bytes of a path trace, pure: the TCP probe segment (with its checksum over the IPv4
//! pseudo-header), and what comes back read from raw sockets: an ICMP error quoting a probe, or a
//! TCP segment of the traced connection from its far end.

use std::net::{Ipv4Addr, SocketAddrV4};

/// A TCP header without options.
pub const TCP_HEADER: usize = 20;

const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_ICMP: u8 = 1;
/// A UDP header.
pub const UDP_HEADER: usize = 8;
const ICMP_UNREACHABLE: u8 = 3;
const ICMP_TIME_EXCEEDED: u8 = 11;
const FLAG_ACK: u8 = 0x10;
const FLAG_FIN: u8 = 0x01;
const FLAG_SYN: u8 = 0x02;
const FLAG_RST: u8 = 0x04;

/// The probe for one TTL: a bare ACK of the connection (its own source and destination ports, so
/// an L4 hash sends it the connection's way), no data, sequence number `seq` (which names the
/// probe in the ICMP error's quote). Only the TCP header: the kernel puts the IPv4 header on.
///
/// Sent from `from` to `to`, the checksum covers the pseudo-header of those addresses.
pub fn tcp_probe(from: SocketAddrV4, to: SocketAddrV4, seq: u32, ack: u32) -> [u8; TCP_HEADER] {
    let mut s = [0u8; TCP_HEADER];
    s[0..2].copy_from_slice(&from.port().to_be_bytes());
    s[2..4].copy_from_slice(&to.port().to_be_bytes());
    s[4..8].copy_from_slice(&seq.to_be_bytes());
    s[8..12].copy_from_slice(&ack.to_be_bytes());
    s[12] = (TCP_HEADER as u8 / 4) << 4;
    s[13] = FLAG_ACK;
    // A window an ordinary ACK would carry; the checksum (16..18) and urgent pointer stay 0.
    s[14..16].copy_from_slice(&502u16.to_be_bytes());
    let sum = tcp_checksum(*from.ip(), *to.ip(), &s);
    s[16..18].copy_from_slice(&sum.to_be_bytes());
    s
}

/// The probe for one TTL of a RoCE v2 path: a UDP datagram of the queue pair's own source port
/// to `to` (port 4791), so an L4 hash sends it where the queue pair's packets go, `len` bytes in
/// all (header included, at least [`UDP_HEADER`]): the length names the probe in the ICMP error's
/// quote, and is in no hash. Checksum 0, as RoCE v2 sends it over IPv4. Zeros after the header:
/// a RoCE NIC at the far end drops it as a malformed packet (no opcode 0 request of a queue pair
/// it has), a host without RoCE answers port unreachable.
pub fn udp_probe(from: SocketAddrV4, to: SocketAddrV4, len: u16) -> Vec<u8> {
    let mut d = vec![0u8; usize::from(len).max(UDP_HEADER)];
    d[0..2].copy_from_slice(&from.port().to_be_bytes());
    d[2..4].copy_from_slice(&to.port().to_be_bytes());
    let total = d.len() as u16;
    d[4..6].copy_from_slice(&total.to_be_bytes());
    d
}

/// The TCP checksum of `segment` (its checksum field taken as it is: zero when computing, the
/// sent value when checking, which then gives 0) between `src` and `dst`.
pub fn tcp_checksum(src: Ipv4Addr, dst: Ipv4Addr, segment: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            let hi = u32::from(pair[0]) << 8;
            let lo = pair.get(1).map_or(0, |b| u32::from(*b));
            sum += hi | lo;
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&[0, PROTO_TCP]);
    // A TCP segment is far shorter than 64 KiB on any path traced here: the IPv4 length field
    // bounds it.
    add(&(segment.len() as u16).to_be_bytes());
    add(segment);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// What an ICMP error said about a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpKind {
    /// Time to live exceeded in transit: a router on the path, `from` its address.
    TimeExceeded,
    /// Destination unreachable, with its code: the path ends here.
    Unreachable(u8),
}

/// An ICMP error about a TCP segment or a UDP datagram, as a raw ICMP socket reads it (IPv4
/// header first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpError {
    /// Who sent the error.
    pub from: Ipv4Addr,
    pub kind: IcmpKind,
    /// The quoted segment's addresses and ports, as it was sent.
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    /// Which probe it was: the quoted TCP segment's sequence number, or the quoted UDP
    /// datagram's length.
    pub seq: u32,
    /// Whether the quote is of a UDP datagram (else a TCP segment).
    pub udp: bool,
}

/// The IPv4 header at the start of `b`: its length, protocol, source and destination; `None`
/// where it is not a whole IPv4 header.
fn ipv4(b: &[u8]) -> Option<(usize, u8, Ipv4Addr, Ipv4Addr)> {
    let first = *b.first()?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < 20 || b.len() < ihl {
        return None;
    }
    let addr = |at: usize| Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3]);
    Some((ihl, b[9], addr(12), addr(16)))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// An ICMP time-exceeded or unreachable error quoting a TCP segment or a UDP datagram (its
/// first 8 bytes at least: ports, and the sequence number or the length), from a datagram read on a raw ICMP socket; `None` for any
/// other ICMP message, or one cut short.
pub fn parse_icmp_error(datagram: &[u8]) -> Option<IcmpError> {
    let (ihl, proto, from, _) = ipv4(datagram)?;
    if proto != PROTO_ICMP {
        return None;
    }
    let icmp = &datagram[ihl..];
    let kind = match (*icmp.first()?, *icmp.get(1)?) {
        (ICMP_TIME_EXCEEDED, 0) => IcmpKind::TimeExceeded,
        (ICMP_UNREACHABLE, code) => IcmpKind::Unreachable(code),
        _ => return None,
    };
    let quoted = icmp.get(8..)?;
    let (qihl, qproto, qsrc, qdst) = ipv4(quoted)?;
    let l4 = &quoted[qihl..];
    let (seq, udp) = match qproto {
        PROTO_TCP => (be32(l4, 4)?, false),
        PROTO_UDP => (u32::from(be16(l4, 4)?), true),
        _ => return None,
    };
    Some(IcmpError {
        from,
        kind,
        src: SocketAddrV4::new(qsrc, be16(l4, 0)?),
        dst: SocketAddrV4::new(qdst, be16(l4, 2)?),
        seq,
        udp,
    })
}

/// A TCP segment read on a raw TCP socket (IPv4 header first): its source and destination.
pub fn parse_tcp(datagram: &[u8]) -> Option<(SocketAddrV4, SocketAddrV4)> {
    let (ihl, proto, src, dst) = ipv4(datagram)?;
    if proto != PROTO_TCP {
        return None;
    }
    let tcp = &datagram[ihl..];
    Some((
        SocketAddrV4::new(src, be16(tcp, 0)?),
        SocketAddrV4::new(dst, be16(tcp, 2)?),
    ))
}

/// Whether a TCP segment read on a raw socket (IPv4 header first) is the connection's own
/// traffic rather than an answer to a probe: it carries data, or a SYN or FIN. The far end answers
/// a probe with a bare ACK (a duplicate) or a reset; its FIN when it closes the connection, or a
/// late data segment, must not read as the probe's answer.
pub fn is_own_traffic(datagram: &[u8]) -> bool {
    let Some((ihl, _, _, _)) = ipv4(datagram) else {
        return false;
    };
    let total = be16(datagram, 2).map_or(datagram.len(), usize::from);
    let tcp = &datagram[ihl..];
    let (Some(&offset), Some(&flags)) = (tcp.get(12), tcp.get(13)) else {
        return false;
    };
    let header = ihl + usize::from(offset >> 4) * 4;
    flags & FLAG_RST == 0 && (flags & (FLAG_SYN | FLAG_FIN) != 0 || total > header)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddrV4 {
        s.parse().expect("test address")
    }

    /// An IPv4 header of 20 bytes: protocol, source, destination (checksum left 0: not read).
    fn ip_header(proto: u8, src: Ipv4Addr, dst: Ipv4Addr, payload: usize) -> Vec<u8> {
        let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 1, proto, 0, 0];
        h[2..4].copy_from_slice(&((20 + payload) as u16).to_be_bytes());
        h.extend(src.octets());
        h.extend(dst.octets());
        h
    }

    #[test]
    fn probe_carries_the_connections_ports_and_a_checksum_that_verifies() {
        let (from, to) = (a("10.80.0.10:40000"), a("10.80.2.10:5000"));
        let p = tcp_probe(from, to, 0xdead_beef, 7);
        assert_eq!(u16::from_be_bytes([p[0], p[1]]), 40000);
        assert_eq!(u16::from_be_bytes([p[2], p[3]]), 5000);
        assert_eq!(u32::from_be_bytes([p[4], p[5], p[6], p[7]]), 0xdead_beef);
        assert_eq!(p[12], 0x50, "data offset 5 words");
        assert_eq!(p[13], FLAG_ACK, "a bare ACK: no SYN, RST or FIN");
        // Summed with its own checksum in place, a segment gives 0.
        assert_eq!(tcp_checksum(*from.ip(), *to.ip(), &p), 0);
        // Another source address gives another checksum: the pseudo-header is in it.
        assert_ne!(tcp_checksum(Ipv4Addr::new(10, 80, 0, 11), *to.ip(), &p), 0);
    }

    #[test]
    fn checksum_matches_a_known_segment() {
        // A SYN from 192.168.0.1:1 to 192.168.0.2:2, seq 0, window 0; its checksum by hand:
        // pseudo 0xc0a8+0x0001+0xc0a8+0x0002+0x0006+0x0014 = 0x1816d; header 0x0001+0x0002+
        // 0x5002 = 0x5005; 0x1816d+0x5005 = 0x1d172 -> 0xd173 -> !0xd173 = 0x2e8c.
        let mut s = [0u8; 20];
        s[1] = 1;
        s[3] = 2;
        s[12] = 0x50;
        s[13] = 0x02;
        assert_eq!(
            tcp_checksum(Ipv4Addr::new(192, 168, 0, 1), Ipv4Addr::new(192, 168, 0, 2), &s),
            0x2e8c
        );
        // An odd length pads with a zero byte.
        assert_eq!(
            tcp_checksum(Ipv4Addr::UNSPECIFIED, Ipv4Addr::UNSPECIFIED, &[0xff]),
            !(0xff00u16 + 6 + 1)
        );
    }

    fn icmp_quoting(kind: u8, code: u8, router: Ipv4Addr, probe: &[u8], quote_len: usize) -> Vec<u8> {
        icmp_quoting_proto(PROTO_TCP, kind, code, router, probe, quote_len)
    }

    fn icmp_quoting_proto(proto: u8, kind: u8, code: u8, router: Ipv4Addr, probe: &[u8], quote_len: usize) -> Vec<u8> {
        let (src, dst) = (Ipv4Addr::new(10, 80, 0, 10), Ipv4Addr::new(10, 80, 2, 10));
        let mut inner = ip_header(proto, src, dst, probe.len());
        inner.extend(&probe[..quote_len]);
        let mut icmp = vec![kind, code, 0, 0, 0, 0, 0, 0];
        icmp.extend(inner);
        let mut d = ip_header(PROTO_ICMP, router, src, icmp.len());
        d.extend(icmp);
        d
    }

    #[test]
    fn time_exceeded_names_the_router_and_the_probe() {
        let p = tcp_probe(a("10.80.0.10:40000"), a("10.80.2.10:5000"), 42, 0);
        let router = Ipv4Addr::new(10, 101, 0, 2);
        // Routers quote 8 bytes at least (RFC 792); Linux quotes more.
        for quote in [8, 20] {
            let e = parse_icmp_error(&icmp_quoting(11, 0, router, &p, quote)).expect("an error about the probe");
            assert_eq!(e.from, router);
            assert_eq!(e.kind, IcmpKind::TimeExceeded);
            assert_eq!(e.src, a("10.80.0.10:40000"));
            assert_eq!(e.dst, a("10.80.2.10:5000"));
            assert_eq!(e.seq, 42);
        }
        let u = parse_icmp_error(&icmp_quoting(3, 1, router, &p, 8)).expect("unreachable");
        assert_eq!(u.kind, IcmpKind::Unreachable(1));
    }

    #[test]
    fn a_roce_probe_is_the_queue_pairs_ports_and_its_length_names_it() {
        // RoCE v2 from the UDP source port of flow label 1 (0xc001) to 4791.
        let (from, to) = (a("10.80.0.10:49153"), a("10.80.2.10:4791"));
        let p = udp_probe(from, to, 40);
        assert_eq!(p.len(), 40);
        assert_eq!(
            &p[..8],
            &[0xc0, 0x01, 0x12, 0xb7, 0, 40, 0, 0],
            "ports, length, checksum 0"
        );
        assert!(p[8..].iter().all(|&b| b == 0));
        assert_eq!(udp_probe(from, to, 3).len(), UDP_HEADER, "never shorter than a header");
        let router = Ipv4Addr::new(10, 101, 0, 2);
        for quote in [8, 28] {
            let e = parse_icmp_error(&icmp_quoting_proto(PROTO_UDP, 11, 0, router, &p, quote)).expect("quoted");
            assert_eq!(
                (e.from, e.kind, e.src, e.dst, e.seq, e.udp),
                (router, IcmpKind::TimeExceeded, from, to, 40, true)
            );
        }
        // The far end without RoCE: port unreachable, from the destination.
        let far = *to.ip();
        let u = parse_icmp_error(&icmp_quoting_proto(PROTO_UDP, 3, 3, far, &p, 8)).expect("unreachable");
        assert_eq!((u.from, u.kind, u.udp), (far, IcmpKind::Unreachable(3), true));
        // A quote of another protocol (ICMP in ICMP) is no probe's.
        assert_eq!(
            parse_icmp_error(&icmp_quoting_proto(PROTO_ICMP, 11, 0, router, &p, 8)),
            None
        );
        let tcp = parse_icmp_error(&icmp_quoting(11, 0, router, &tcp_probe(from, to, 9, 0), 8)).expect("tcp");
        assert!(!tcp.udp);
    }

    #[test]
    fn other_icmp_and_short_datagrams_are_not_errors_about_probes() {
        let p = tcp_probe(a("10.80.0.10:40000"), a("10.80.2.10:5000"), 42, 0);
        let router = Ipv4Addr::new(10, 101, 0, 2);
        // An echo reply; a time exceeded in reassembly (code 1); a quote of 7 bytes.
        assert_eq!(parse_icmp_error(&icmp_quoting(0, 0, router, &p, 8)), None);
        assert_eq!(parse_icmp_error(&icmp_quoting(11, 1, router, &p, 8)), None);
        assert_eq!(parse_icmp_error(&icmp_quoting(11, 0, router, &p, 7)), None);
        let whole = icmp_quoting(11, 0, router, &p, 8);
        for cut in 0..whole.len() {
            assert_eq!(parse_icmp_error(&whole[..cut]), None, "cut at {cut}");
        }
        // Not IPv4; a TCP datagram.
        assert_eq!(parse_icmp_error(&[0x60; 60]), None);
        let mut tcp = ip_header(PROTO_TCP, router, router, 20);
        tcp.extend(p);
        assert_eq!(parse_icmp_error(&tcp), None);
    }

    #[test]
    fn tcp_segment_from_the_far_end_reads_back() {
        let back = tcp_probe(a("10.80.2.10:5000"), a("10.80.0.10:40000"), 1, 1);
        let mut d = ip_header(
            PROTO_TCP,
            Ipv4Addr::new(10, 80, 2, 10),
            Ipv4Addr::new(10, 80, 0, 10),
            20,
        );
        d.extend(back);
        assert_eq!(parse_tcp(&d), Some((a("10.80.2.10:5000"), a("10.80.0.10:40000"))));
        assert_eq!(parse_tcp(&d[..23]), None);
        assert!(!is_own_traffic(&d), "a bare ACK answers a probe");
        // A reset answers it too; a FIN, a SYN or data is the connection's own traffic.
        for (flags, own) in [
            (FLAG_RST | FLAG_ACK, false),
            (FLAG_FIN | FLAG_ACK, true),
            (FLAG_SYN, true),
        ] {
            let mut f = d.clone();
            f[20 + 13] = flags;
            assert_eq!(is_own_traffic(&f), own, "flags {flags:#04x}");
        }
        let mut data = ip_header(
            PROTO_TCP,
            Ipv4Addr::new(10, 80, 2, 10),
            Ipv4Addr::new(10, 80, 0, 10),
            28,
        );
        data.extend(back);
        data.extend([0u8; 8]);
        assert!(is_own_traffic(&data), "8 bytes of data");
        d[9] = PROTO_ICMP;
        assert_eq!(parse_tcp(&d), None);
    }
}
