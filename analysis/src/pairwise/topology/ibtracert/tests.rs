//! ibtracert output read as routes and a topology, on published outputs
//! (analysis/tests/data/ibtracert/README.md names each source): LLNL's hype cluster (a QLogic
//! director's line and spine cards between two qib HCAs) and a leaf-spine-leaf route on an
//! ibsim fabric; concatenations and edits of them for `--ports-file` output and the refusals.

use super::*;
use crate::pairwise::topology::{HostLink, Topology};

const HYPE: &str = include_str!("../../../../tests/data/ibtracert/hype.txt");
const HXA: &str = include_str!("../../../../tests/data/ibtracert/hxa-ibsim.txt");

fn hop(switch: &str, in_port: u32, out_port: u32) -> Hop {
    Hop {
        switch: switch.into(),
        in_port,
        out_port,
    }
}

fn hype() -> Route {
    Route {
        src: "hype281".into(),
        dst: "hype353".into(),
        src_hca: "qib0 port 1".into(),
        dst_hca: "qib0 port 1".into(),
        hops: vec![
            hop("ibcore1 L109 (S-00066a00ec002eec)", 9, 27),
            hop("ibcore1 S205A (S-00066a00eb002d14)", 11, 3),
            hop("ibcore1 L101 (S-00066a02e8001313)", 36, 9),
        ],
    }
}

fn hxa() -> Route {
    Route {
        src: "hxa-gpu01".into(),
        dst: "hxa-gpu03".into(),
        src_hca: "mlx5_0 port 1".into(),
        dst_hca: "mlx5_0 port 1".into(),
        hops: vec![
            hop("hxa-su1-leaf-r1 (S-0000000000200002)", 1, 33),
            hop("hxa-spine01 (S-0000000000200000)", 1, 3),
            hop("hxa-su2-leaf-r1 (S-0000000000200004)", 33, 1),
        ],
    }
}

#[test]
fn each_published_route_gives_exactly_its_switch_hops() {
    assert!(looks_like(HYPE) && looks_like(HXA));
    assert_eq!(parse(HYPE).unwrap(), [hype()]);
    assert_eq!(parse(HXA).unwrap(), [hxa()]);
    assert_eq!(
        hxa().phrase(),
        "hxa-su1-leaf-r1 (S-0000000000200002) [1>33] > hxa-spine01 (S-0000000000200000) [1>3] > \
         hxa-su2-leaf-r1 (S-0000000000200004) [33>1]"
    );
    // As a traced path's hops: each switch by the port the route arrived on.
    let arrivals: Vec<String> = hype().hops.iter().map(Hop::arrival).collect();
    assert_eq!(
        arrivals,
        [
            "ibcore1 L109 (S-00066a00ec002eec) port 9",
            "ibcore1 S205A (S-00066a00eb002d14) port 11",
            "ibcore1 L101 (S-00066a02e8001313) port 36",
        ]
    );
}

#[test]
fn routes_place_each_end_under_its_leaf_with_the_cable() {
    let t = Topology::parse(HXA, "routes.txt").unwrap();
    assert_eq!(t.switch_of("hxa-gpu01"), Some("hxa-su1-leaf-r1 (S-0000000000200002)"));
    assert_eq!(t.switch_of("hxa-gpu03"), Some("hxa-su2-leaf-r1 (S-0000000000200004)"));
    assert_eq!(
        t.link_of("hxa-gpu03"),
        Some(&HostLink {
            host_end: "mlx5_0 port 1".into(),
            switch_port: "1".into()
        })
    );
    assert_eq!(t.route("hxa-gpu01", "hxa-gpu03"), Some(&hxa()));
    assert_eq!(t.route("hxa-gpu03", "hxa-gpu01"), None, "a route is one direction");
    let t = Topology::parse(HYPE, "hype.txt").unwrap();
    assert_eq!(t.link_of("hype353").map(|l| l.switch_port.as_str()), Some("9"));
    assert_eq!(t.leaves().len(), 2);
}

#[test]
fn concatenated_routes_and_ports_file_output_are_all_read() {
    // One per pair with the operator's own header lines, then --ports-file's closing line.
    let text = format!("hype281 hype353\n{HYPE}\nhxa-gpu01 hxa-gpu03\n{HXA}2 lid/guid pairs processed from pairs\n");
    assert_eq!(parse(&text).unwrap(), [hype(), hxa()]);
    let t = Topology::parse(&text, "all.txt").unwrap();
    assert_eq!(t.routes().count(), 2);
    assert_eq!(t.leaves().len(), 4);
}

#[test]
fn refusals_name_the_line_and_the_fix() {
    let cases: [(String, usize, &str); 7] = [
        (
            "From {0x0000000000100002}[1]\n[1] -> {0x0000000000200002}[1]\n".into(),
            1,
            "ibtracert's simple format (-n) names no node; run it without -n",
        ),
        (
            HXA.lines().take(3).collect::<Vec<_>>().join("\n"),
            1,
            "this route has no `To` line",
        ),
        (
            HXA.replace("[33] -> switch", "ibwarn: [33] -> switch"),
            3,
            "`ibwarn: [33] -> switch port",
        ),
        (
            HXA.replace("hxa-gpu01 mlx5_0", "MT25408 ConnectX Mellanox Technologies"),
            1,
            "the CA `MT25408 ConnectX Mellanox Technologies` names no host; run ibtracert with --node-name-map",
        ),
        (
            HXA.replace("{0x0000000000200000}", "{0xspine}"),
            3,
            "`spine` is not a GUID",
        ),
        (HXA.replace("From ca", "From switch"), 0, "no route between two hosts"),
        (
            format!("{HXA}{}", HXA.replace("[3] -> switch", "[4] -> switch")),
            0,
            "two different routes from hxa-gpu01 to hxa-gpu03",
        ),
    ];
    for (text, line, why) in cases {
        let e = Topology::parse(&text, "r.txt").unwrap_err();
        assert_eq!(e.line, line, "{e}");
        assert!(e.why.starts_with(why), "{e}");
        assert_eq!(e.to_string().lines().count(), 1, "{e}");
    }
}

#[test]
fn other_topology_forms_are_not_ibtracert() {
    assert!(!looks_like("leaf1: node[01-16]\n"));
    assert!(!looks_like(include_str!(
        "../../../../tests/data/ibnetdiscover/X5.topofile"
    )));
    assert!(!looks_like("{\"lldp\": {}}"));
}
