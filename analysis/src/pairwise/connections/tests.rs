//! The connections' paths grouped and phrased, their JSON, and the text report's section.

use super::*;
use crate::pairwise::report::{json, text};
use crate::pairwise::{verdict, OpName, PairwiseConfig, PairwiseOutcome};

fn conn(sport: u16, gbps: f64, path: Option<Path>) -> Connection {
    Connection {
        from: SocketAddr::from(([10, 80, 0, 10], sport)),
        to: SocketAddr::from(([10, 80, 2, 10], 5000)),
        bytes: 1 << 20,
        gbps,
        path,
    }
}

fn via(spine: u8) -> Path {
    Path::Traced {
        hops: vec![
            Some([10, 80, 0, 1].into()),
            Some([10, 100 + spine, 0, 2].into()),
            Some([10, 100 + spine, 2, 1].into()),
        ],
        reached: true,
    }
}

#[test]
fn distinct_paths_group_connections_by_their_hops() {
    let conns = [
        conn(40000, 0.09, Some(via(0))),
        conn(40001, 0.02, Some(via(1))),
        conn(40002, 0.09, Some(via(0))),
        conn(40003, 0.09, None),
        conn(40004, 0.02, Some(via(1))),
    ];
    let d = distinct_paths(&conns);
    assert_eq!(d.len(), 2);
    assert_eq!((d[0].0, d[0].1.clone()), (&via(0), vec![0, 2]));
    assert_eq!((d[1].0, d[1].1.clone()), (&via(1), vec![1, 4]));
    assert!(distinct_paths(&[]).is_empty());
}

#[test]
fn a_path_reads_as_its_hops() {
    assert_eq!(via(1).phrase(), "10.80.0.1 > 10.101.0.2 > 10.101.2.1");
    let gap = Path::Traced {
        hops: vec![Some([10, 80, 0, 1].into()), None],
        reached: false,
    };
    assert_eq!(gap.phrase(), "10.80.0.1 > * > ...");
    let direct = Path::Traced {
        hops: vec![],
        reached: true,
    };
    assert_eq!(direct.phrase(), "direct");
}

#[test]
fn untraced_reasons_are_counted_once_each() {
    let no_raw = || {
        Some(Path::Untraced {
            reason: "no CAP_NET_RAW".into(),
        })
    };
    let mut a = Measurement::bandwidth(0, 1, 65536, 10, 1.0, false);
    a.connections = vec![conn(1, 1.0, no_raw()), conn(2, 1.0, no_raw())];
    let mut b = Measurement::bandwidth(1, 0, 65536, 10, 1.0, false);
    b.connections = vec![
        conn(3, 1.0, no_raw()),
        conn(4, 1.0, Some(Path::Untraced { reason: "IPv6".into() })),
        conn(5, 1.0, Some(via(0))),
    ];
    assert_eq!(untraced(&[a, b]), vec![("no CAP_NET_RAW", 3), ("IPv6", 1)]);
}

#[test]
fn a_connection_round_trips_through_json_with_its_path_or_reason() {
    let c = conn(40000, 0.5, Some(via(1)));
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["from"], "10.80.0.10:40000");
    assert_eq!(v["path"]["traced"]["hops"][1], "10.101.0.2");
    assert_eq!(v["path"]["traced"]["reached"], true);
    assert_eq!(serde_json::from_value::<Connection>(v).unwrap(), c);
    let u = conn(
        40001,
        0.5,
        Some(Path::Untraced {
            reason: "no CAP_NET_RAW".into(),
        }),
    );
    let v = serde_json::to_value(&u).unwrap();
    assert_eq!(v["path"]["untraced"]["reason"], "no CAP_NET_RAW");
    // Tracing off: no path key at all.
    let off = serde_json::to_value(conn(1, 0.5, None)).unwrap();
    assert!(off.get("path").is_none(), "{off}");
}

/// A 3-rank TCP run with `-q 2`: ranks 0 and 2 under different leaves, their connections over
/// both spines one way and over one the other; the run could not trace 1's connections.
fn outcome() -> PairwiseOutcome {
    let hosts: Vec<String> = ["h0", "h1", "h2"].map(String::from).to_vec();
    let no_raw = || {
        Some(Path::Untraced {
            reason: "tracing needs CAP_NET_RAW".into(),
        })
    };
    let mut ms = Vec::new();
    for (src, dst) in [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)] {
        let mut m = Measurement::bandwidth(src, dst, 65536, 100, 0.5, false);
        m.connections = match (src, dst) {
            (0, 2) => vec![conn(40000, 0.3, Some(via(0))), conn(40001, 0.2, Some(via(1)))],
            (2, 0) => vec![conn(40002, 0.25, Some(via(0))), conn(40003, 0.25, Some(via(0)))],
            (1, _) => vec![conn(40004, 0.25, no_raw()), conn(40005, 0.25, no_raw())],
            _ => vec![conn(40006, 0.25, None), conn(40007, 0.25, None)],
        };
        ms.push(m);
    }
    let config = PairwiseConfig {
        qps: 2,
        ..PairwiseConfig::synthetic(OpName::Send, 65536, 100)
    };
    let plan = verdict::plan_retests(&ms, &config, &hosts);
    let v = verdict::judge_pairs(&ms, &[], &config, &hosts, &plan, None);
    PairwiseOutcome::synthetic(config, "tcp", hosts, 3, ms, Vec::new(), v)
}

#[test]
fn the_text_gives_each_connections_figure_and_its_path_where_they_differ() {
    let t = text::render(&outcome());
    let lines: Vec<&str> = t.lines().filter(|l| l.starts_with("# ")).collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("# Connections: 2 TCP connections per test"))
        .unwrap_or_else(|| panic!("no section:\n{t}"));
    assert_eq!(
        &lines[at + 1..at + 9],
        [
            "#    0 -> 1      h0 -> h1      65536B: 40006 0.25  40007 0.25",
            "#    0 -> 2      h0 -> h2      65536B: 40000 0.30 A  40001 0.20 B",
            "#   2 paths: A: 10.80.0.1 > 10.100.0.2 > 10.100.2.1; B: 10.80.0.1 > 10.101.0.2 > 10.101.2.1",
            "#    1 -> 0      h1 -> h0      65536B: 40004 0.25  40005 0.25",
            "#    1 -> 2      h1 -> h2      65536B: 40004 0.25  40005 0.25",
            "#    2 -> 0      h2 -> h0      65536B: 40002 0.25  40003 0.25",
            "#    2 -> 1      h2 -> h1      65536B: 40006 0.25  40007 0.25",
            "# Paths not traced (4 of 12 connections): tracing needs CAP_NET_RAW",
        ]
    );
    // The section comes after the rows, before the matrix.
    let rows_end = t.find(" #bytes").expect("rows");
    assert!(rows_end < t.find("# Connections:").expect("section"));
}

#[test]
fn the_json_keeps_each_connection_with_its_path_or_why_not() {
    let j: serde_json::Value = serde_json::from_slice(&json::render(&outcome())).expect("json");
    let r = &j["results"];
    // Results are in the order measured: (0, 2) second.
    let c = &r[1]["connections"];
    assert_eq!(c.as_array().map(Vec::len), Some(2));
    assert_eq!(c[0]["from"], "10.80.0.10:40000");
    assert_eq!(c[0]["gbps"], 0.3);
    assert_eq!(c[1]["path"]["traced"]["hops"][1], "10.101.0.2");
    assert_eq!(
        r[2]["connections"][0]["path"]["untraced"]["reason"],
        "tracing needs CAP_NET_RAW"
    );
    assert!(r[0]["connections"][0].get("path").is_none());
    // Read back (`meshrun verdict`), the connections are there again.
    let back = crate::pairwise::saved::parse(&json::render(&outcome())).expect("read back");
    assert_eq!(back.measurements[1].connections, outcome().measurements[1].connections);
}

#[test]
fn without_connections_the_reports_say_nothing_of_them() {
    let mut o = outcome();
    for m in &mut o.measurements {
        m.connections.clear();
    }
    let t = text::render(&o);
    assert!(!t.contains("Connections") && !t.contains("not traced"), "{t}");
    let j = String::from_utf8(json::render(&o)).expect("utf-8");
    assert!(!j.contains("connections"), "{j}");
}

mod hops {
    use super::*;
    use crate::pairwise::router_names::RouterNames;

    /// The leaf-spine bed's traced run (leaf0-spine1 slowed), read back.
    fn bed() -> PairwiseOutcome {
        let json = include_str!(
            "../../../../docs/evidence/leafspine-paths-2026-12-06/pairwise-q4-cable-leaf0-spine1-60mbit.json"
        );
        crate::pairwise::saved::parse(json.as_bytes()).expect("a pairwise --json run")
    }

    #[test]
    fn the_traced_hops_are_every_router_address_once() {
        let hops = traced_hops(&bed());
        let want: BTreeSet<IpAddr> = [
            "10.80.0.1",
            "10.80.1.1",
            "10.80.2.1",
            "10.100.0.2",
            "10.100.1.2",
            "10.100.2.2",
            "10.100.0.1",
            "10.100.1.1",
            "10.100.2.1",
            "10.101.0.2",
            "10.101.1.2",
            "10.101.2.2",
            "10.101.0.1",
            "10.101.1.1",
            "10.101.2.1",
        ]
        .into_iter()
        .map(|a| a.parse().expect("an address"))
        .collect();
        // Every first router, spine end and far leaf end; nothing else (no host address).
        assert!(hops.is_subset(&want), "{hops:?}");
        assert!(hops.contains(&"10.80.0.1".parse::<IpAddr>().expect("an address")));
        assert!(hops.contains(&"10.101.0.2".parse::<IpAddr>().expect("an address")));
        // A run with nothing traced has nothing to ask.
        let mut untraced = bed();
        for m in untraced.measurements.iter_mut().chain(untraced.retests.iter_mut()) {
            m.connections.clear();
        }
        assert!(traced_hops(&untraced).is_empty());
    }

    #[test]
    fn the_names_travel_in_the_json_and_only_where_there_are_some() {
        let mut o = bed();
        let plain = crate::pairwise::report::json::render(&o);
        assert!(!String::from_utf8_lossy(&plain).contains("router_names"));
        let a: IpAddr = "10.101.0.2".parse().expect("an address");
        o.router_names = RouterNames::from([(a, "mrls-spine1-leaf0".to_string())]);
        let with = crate::pairwise::report::json::render(&o);
        let text = String::from_utf8_lossy(&with);
        assert!(
            text.contains("\"router_names\": {\n    \"10.101.0.2\": \"mrls-spine1-leaf0\""),
            "{text}"
        );
        let back = crate::pairwise::saved::parse(&with).expect("read back");
        assert_eq!(back.router_names, o.router_names);
    }
}
