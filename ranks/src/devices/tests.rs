use super::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

#[test]
fn infiniband_hdr_node() {
    let devs = discover(&fixture("mlx5-ib")).unwrap();
    assert_eq!(devs.len(), 2);
    let d = &devs[0];
    assert_eq!(
        (d.name.as_str(), d.node_type, d.pci.as_deref()),
        ("mlx5_0", NodeType::Ca, Some("0000:3b:00.0"))
    );
    let p = &d.ports[0];
    assert_eq!(
        (p.num, p.is_active(), p.link_layer, p.lid, p.sm_lid),
        (1, true, LinkLayer::InfiniBand, 0x12, 1)
    );
    assert_eq!(p.rate, "200 Gb/sec (4X HDR)");
    assert_eq!(p.gids.len(), 1, "zero entries are not GIDs");
    let c = choose_device(&devs, None, None, None).unwrap();
    assert_eq!(
        c.describe(),
        "mlx5_0 port 1 GID 0 (IB, fe80:0000:0000:0000:b859:9f03:00a1:b2c0)"
    );
    assert_eq!(choose_device(&devs, Some("mlx5_1"), None, None).unwrap().lid, 0x13);
}

#[test]
fn roce_picks_ipv4_mapped_v2_like_perftest() {
    let devs = discover(&fixture("mlx5-roce")).unwrap();
    let p = &devs[0].ports[0];
    assert_eq!(
        p.gids.iter().map(|g| g.roce_version()).collect::<Vec<_>>(),
        vec!["v1", "v2", "v1", "v2"]
    );
    let c = choose_device(&devs, None, None, None).unwrap();
    assert_eq!(c.gid.index, 3);
    assert_eq!(c.describe(), "mlx5_0 port 1 GID 3 (RoCE v2, 10.0.1.5)");
    assert_eq!(c.gid.netdev.as_deref(), Some("eth2"));
    // Explicit -x wins.
    assert_eq!(
        choose_device(&devs, None, None, Some(1)).unwrap().gid.kind,
        Some(GidKind::RoceV2)
    );
}

#[test]
fn rxe_and_show_gids() {
    let devs = discover(&fixture("rxe")).unwrap();
    assert_eq!(devs[0].pci, None);
    let c = choose_device(&devs, None, None, None).unwrap();
    assert_eq!(c.describe(), "rxea port 1 GID 1 (RoCE v2, 10.2.0.1)");
    let t = show_gids(&devs);
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].starts_with("DEV\tPORT\tINDEX\tGID"));
    assert_eq!(
        lines[3].split('\t').map(str::trim).collect::<Vec<_>>(),
        vec![
            "rxea",
            "1",
            "1",
            "0000:0000:0000:0000:0000:ffff:0a02:0001",
            "10.2.0.1",
            "v2",
            "va"
        ]
    );
    assert_eq!(lines.last().copied(), Some("n_gids_found=2"));
}

#[test]
fn iwarp_is_refused_with_reason() {
    let devs = discover(&fixture("siw")).unwrap();
    assert_eq!(devs[0].node_type, NodeType::Rnic);
    let e = choose_device(&devs, Some("siw0"), None, None).unwrap_err();
    assert!(matches!(e, SelectError::Iwarp(_)));
    assert!(e.to_string().contains("iWARP"));
    assert!(e.to_string().contains("add -R (--rdma-cm)"), "{e}");
    // Without -d it is skipped, and nothing else is there.
    assert!(matches!(
        choose_device(&devs, None, None, None),
        Err(SelectError::NoActivePort(_))
    ));
    // Through the connection manager it is chosen when named, its GID read as the MAC it holds;
    // a job left to choose still skips it.
    let c = choose_device_with(&devs, Some("siw0"), None, None, true).unwrap();
    assert!(c.iwarp);
    assert_eq!(c.describe(), "siw0 port 1 (iWARP, MAC 52:54:00:12:34:56)");
    assert_eq!(c.gid_summary().kind, 3);
    assert!(matches!(
        choose_device_with(&devs, None, None, None, true),
        Err(SelectError::NoActivePort(_))
    ));
}

/// A RoCE rank and an iWARP rank cannot talk: named before any traffic, with the fix; two iWARP
/// ranks can.
#[test]
fn iwarp_beside_roce_is_named() {
    let roce = choose_device(&discover(&fixture("mlx5-roce")).unwrap(), None, None, None)
        .unwrap()
        .gid_summary();
    let iw = choose_device_with(&discover(&fixture("siw")).unwrap(), Some("siw0"), None, None, true)
        .unwrap()
        .gid_summary();
    let e = check_consistent(&[(0, "a".into(), roce.clone()), (1, "b".into(), iw.clone())]).unwrap_err();
    assert_eq!(
        e,
        "iWARP and InfiniBand/RoCE cannot talk to each other: rank 0 (a) uses mlx5_0 port 1 GID 3 (RoCE v2, 10.0.1.5) \
         but rank 1 (b) uses siw0 port 1 (iWARP, MAC 52:54:00:12:34:56); give every rank a device of the same kind \
         with -d/--devices (see meshrun devices)"
    );
    assert!(check_consistent(&[(0, "a".into(), iw.clone()), (1, "b".into(), iw)]).is_ok());
}

#[test]
fn bad_selections_say_what_is_valid() {
    let devs = discover(&fixture("mlx5-roce")).unwrap();
    assert_eq!(
        choose_device(&devs, Some("mlx5_9"), None, None)
            .unwrap_err()
            .to_string(),
        "-d mlx5_9: no such RDMA device; devices here: mlx5_0"
    );
    let e = choose_device(&devs, None, Some(2), None).unwrap_err().to_string();
    assert!(e.starts_with("mlx5_0 port 2 is DOWN, not ACTIVE"), "{e}");
    let e = choose_device(&devs, None, Some(3), None).unwrap_err().to_string();
    assert_eq!(e, "mlx5_0 has no port 3; its ports: 1, 2");
    let e = choose_device(&devs, None, None, Some(7)).unwrap_err().to_string();
    assert_eq!(
        e,
        "mlx5_0 port 1 has no GID index 7; valid indexes: 0, 1, 2, 3 (see meshrun devices)"
    );
}

#[test]
fn no_rdma_and_no_devices_give_different_advice() {
    let e = discover(&fixture("no-rdma")).unwrap_err().to_string();
    assert!(
        e.contains("no RDMA support loaded") && e.contains("--transport tcp"),
        "{e}"
    );
    let e = discover(&fixture("no-devices")).unwrap_err().to_string();
    assert!(e.contains("no RDMA device") && e.contains("rdma link add"), "{e}");
}

#[test]
fn v1_against_v2_is_named() {
    let v2 = choose_device(&discover(&fixture("mlx5-roce")).unwrap(), None, None, None).unwrap();
    let v1 = choose_device(&discover(&fixture("mlx5-roce-v1only")).unwrap(), None, None, None).unwrap();
    assert_eq!(v1.gid.kind, Some(GidKind::IbRoceV1));
    let (v1, v2) = (v1.gid_summary(), v2.gid_summary());
    let e = check_consistent(&[
        (0, "a".into(), v2.clone()),
        (1, "b".into(), v2.clone()),
        (2, "c".into(), v1),
    ])
    .unwrap_err();
    assert!(e.starts_with("RoCE versions differ: rank 0 (a) uses mlx5_0 port 1 GID 3 (RoCE v2, 10.0.1.5) but rank 2 (c) uses mlx5_0 port 1 GID 1 (RoCE v1, 10.0.1.6)"), "{e}");
    assert!(check_consistent(&[(0, "a".into(), v2.clone()), (1, "b".into(), v2)]).is_ok());
}

#[test]
fn gid_parsing() {
    let raw = parse_gid("0000:0000:0000:0000:0000:ffff:0a00:0105").unwrap();
    let g = Gid {
        index: 0,
        raw,
        kind: None,
        netdev: None,
    };
    assert_eq!(g.ipv4(), Some(Ipv4Addr::new(10, 0, 1, 5)));
    assert!(!g.is_link_local());
    assert!(parse_gid("fe80::1").is_none());
}
