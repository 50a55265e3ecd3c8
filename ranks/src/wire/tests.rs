use super::*;
use std::net::Ipv4Addr;

fn endpoint(k: u8) -> QpEndpoint {
    QpEndpoint {
        qpn: 0x11 + u32::from(k),
        psn: 0xabcdef,
        lid: 0x12,
        gid: [7 + k; 16],
        mtu: 5,
        addr: 0xdead_beef_0000,
        rkey: 0x42,
    }
}

fn round_trip<T: Record + PartialEq + std::fmt::Debug>(v: T) {
    let b = v.to_bytes();
    assert_eq!(b.len(), T::LEN);
    assert_eq!(T::from_bytes(&b), Some(v));
    assert_eq!(T::from_bytes(&b[..T::LEN - 1]), None, "a short record is refused");
}

#[test]
fn every_record_round_trips() {
    round_trip(endpoint(0));
    round_trip(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), 40_000));
    round_trip(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 1));
    round_trip(Hello {
        token: [9; 16],
        rank: 3,
        size: 8,
    });
    round_trip(WindowKey {
        addr: 0x7f00_0000_1000,
        rkey: 0x1234,
    });
    round_trip(ClearToSend {
        addr: 0x7f00_dead_beef_0000,
        rkey: 0x1234_5678,
        len: 3 << 20,
    });
    let k = WindowKey {
        addr: 0x7f00_0000_1000,
        rkey: 0x1234,
    };
    assert_eq!(WindowKey::from_array(&k.to_array()), k);
    let c = ClearToSend {
        addr: 1,
        rkey: 2,
        len: 3,
    };
    assert_eq!(ClearToSend::from_array(&c.to_array()), c);
    round_trip(12_345_678_901u64);
    round_trip(-1.25e-7f64);
    round_trip(ControlEndpoint {
        addr: Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 41_000)),
        pid: 4242,
    });
    round_trip(ControlEndpoint { addr: None, pid: 7 });
    round_trip(ControlFrame {
        token: [3; 16],
        kind: ControlKind::Alarm,
        report: report("pairwise round 3", "rank 2 (b): timed out waiting for rank 1 (a)"),
    });
}

fn report(phase: &str, detail: &str) -> StallReport {
    StallReport {
        rank: 2,
        pid: 999,
        state: WaitState::WaitingOnPeer,
        peer: Some(1),
        waited_ms: 10_000,
        phase: phase.into(),
        detail: detail.into(),
    }
}

#[test]
fn stall_reports_cut_long_text_and_refuse_bad_frames() {
    // Text longer than its field is cut at a character boundary, not refused.
    let long = "é".repeat(PHASE_MAX);
    let b = report(&long, "x").to_bytes();
    let back = StallReport::from_bytes(&b).unwrap();
    assert_eq!(back.phase.len(), PHASE_MAX);
    assert!(long.starts_with(&back.phase));
    let frame = ControlFrame {
        token: [1; 16],
        kind: ControlKind::Query,
        report: report("", ""),
    };
    let mut b = frame.to_bytes();
    assert_eq!(ControlFrame::check(&b, &[1; 16]), Some(frame.clone()));
    assert_eq!(ControlFrame::check(&b, &[2; 16]), None, "another job's token");
    b[24] = 9;
    assert_eq!(ControlFrame::from_bytes(&b), None, "unknown kind");
    let mut b = frame.to_bytes();
    b[..4].copy_from_slice(b"XXXX");
    assert_eq!(ControlFrame::from_bytes(&b), None, "bad magic");
    // A text length past its field, or text that is not UTF-8, is refused.
    let mut b = report("ab", "").to_bytes();
    b[21..23].copy_from_slice(&u16::MAX.to_le_bytes());
    assert_eq!(StallReport::from_bytes(&b), None);
    let mut b = report("ab", "").to_bytes();
    b[23] = 0xff;
    assert_eq!(StallReport::from_bytes(&b), None);
}

/// The layouts are what peers of this version expect, byte for byte.
#[test]
fn layouts_are_fixed() {
    let e = endpoint(0).to_bytes();
    assert_eq!(&e[0..4], &0x11u32.to_le_bytes());
    assert_eq!(&e[10..26], &[7; 16]);
    assert_eq!(&e[38..42], &0x42u32.to_le_bytes());
    assert_eq!(&e[42..], &[0; 6]);
    let a = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), 0x1234).to_bytes();
    assert_eq!(a, [4, 10, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x34, 0x12, 0]);
    let h = Hello {
        token: [9; 16],
        rank: 3,
        size: 8,
    }
    .to_bytes();
    assert_eq!(&h[0..8], b"MSHR\x02\x00\x00\x00");
    assert_eq!(&h[24..], &[3, 0, 0, 0, 8, 0, 0, 0]);
}

#[test]
fn hello_checks_token_rank_and_size() {
    let token = [5u8; 16];
    let h = |rank, size, token| Hello { token, rank, size }.to_bytes();
    assert_eq!(Hello::check(&h(2, 4, token), &token, 4), Some(2));
    assert_eq!(Hello::check(&h(2, 4, [6; 16]), &token, 4), None, "another job's token");
    assert_eq!(Hello::check(&h(2, 5, token), &token, 4), None, "another job's size");
    assert_eq!(Hello::check(&h(4, 4, token), &token, 4), None, "no such rank");
    let mut bad = h(2, 4, token);
    bad[0] = b'X';
    assert_eq!(Hello::check(&bad, &token, 4), None, "no magic");
    assert_eq!(Hello::check(b"GET / HTTP/1.1\r\n\r\n", &token, 4), None);
}

#[test]
fn an_unknown_address_family_is_refused() {
    let mut a = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 1).to_bytes();
    a[0] = 5;
    assert_eq!(SocketAddr::from_bytes(&a), None);
}

#[test]
fn connect_records_round_trip_and_failed_ranks_are_zeros() {
    let rec = ConnectRecord {
        summary: Some(GidSummary {
            ethernet: true,
            kind: 2,
            ipv4: true,
            describe: "RoCE v2, IPv4-mapped".into(),
        }),
    };
    let b = rec.to_bytes();
    assert_eq!(b.len(), ConnectRecord::LEN);
    assert_eq!(&b[..5], &[1, 1, 2, 1, b'R']);
    assert_eq!(ConnectRecord::from_bytes(&b), Some(rec));
    let failed = ConnectRecord { summary: None };
    let b = failed.to_bytes();
    assert!(b.iter().all(|&x| x == 0));
    assert_eq!(ConnectRecord::from_bytes(&b), Some(failed));
    assert_eq!(ConnectRecord::from_bytes(&b[..10]), None);
}

#[test]
fn gathered_numbers_decode_or_name_the_rank() {
    let mut b = Vec::new();
    for v in [1.5f64, 2.5, -0.0] {
        b.extend(v.to_bytes());
    }
    assert_eq!(decode_all::<f64>(&b, "time").unwrap(), vec![1.5, 2.5, -0.0]);
    let e = decode_all::<u64>(&b[..20], "count").unwrap_err();
    assert_eq!(e.rank, 2);
    assert!(e.to_string().starts_with("count: what rank 2 sent"), "{e}");
}
