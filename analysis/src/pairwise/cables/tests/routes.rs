//! A slow InfiniBand cable found from the subnet manager's routes (no traces): synthetic fabrics
//! of 3 leaves x 4 hosts x 2 spines whose routes are written as `ibtracert` prints them (the
//! format of `analysis/tests/data/ibtracert/`, read by `Topology::parse`), one rank a host, one
//! figure a direction.

use super::super::*;
use super::Rng;
use crate::pairwise::report::text;
use crate::pairwise::topology::Topology;
use crate::pairwise::verdict::{judge_pairs, plan_retests_in, RetestPlan, Verdict};
use crate::pairwise::{OpName, PairwiseConfig, PairwiseOutcome};

const LEAVES: usize = 3;
const PER_LEAF: usize = 4;
const SPINES: usize = 2;
const HOSTS: usize = LEAVES * PER_LEAF;
const SIZE: usize = 1 << 22;

fn host(h: usize) -> String {
    format!("ib-h{h:02}")
}

/// Host `h`'s port on its leaf, the leaf's port to spine `s`, and the spine's port to leaf `l`.
fn host_port(h: usize) -> usize {
    h % PER_LEAF + 1
}
fn up_port(s: usize) -> usize {
    33 + s
}
fn down_port(l: usize) -> usize {
    l + 1
}

/// The spine a route from a host to `dst` on another leaf crosses: by destination, as OpenSM's
/// min-hop routing spreads the destinations' LIDs over the equal-cost ports.
fn spine_to(dst: usize) -> usize {
    dst % SPINES
}

/// `ibtracert` output for every route from a host to another, but those `skip` leaves out.
fn ibtracert(skip: impl Fn(usize, usize) -> bool) -> String {
    let ca = |h: usize| {
        format!(
            "{{0x0002c903000001{h:02x}}} portnum 1 lid {l}-{l} \"{} mlx5_0\"",
            host(h),
            l = 100 + h
        )
    };
    let leaf = |l: usize| format!("{{0x0002c9030000100{l}}}");
    let spine = |s: usize| format!("{{0x0002c9030000200{s}}}");
    let mut out = String::new();
    for a in 0..HOSTS {
        for b in (0..HOSTS).filter(|&b| b != a && !skip(a, b)) {
            let (la, lb) = (a / PER_LEAF, b / PER_LEAF);
            out += &format!("From ca {}\n", ca(a));
            out += &format!(
                "[1] -> switch port {}[{}] lid {} \"ib-leaf{la}\"\n",
                leaf(la),
                host_port(a),
                10 + la
            );
            if la != lb {
                let s = spine_to(b);
                out += &format!(
                    "[{}] -> switch port {}[{}] lid {} \"ib-spine{s}\"\n",
                    up_port(s),
                    spine(s),
                    down_port(la),
                    20 + s
                );
                out += &format!(
                    "[{}] -> switch port {}[{}] lid {} \"ib-leaf{lb}\"\n",
                    down_port(lb),
                    leaf(lb),
                    up_port(s),
                    10 + lb
                );
            }
            out += &format!(
                "[{}] -> ca port {{0x0002c903000002{b:02x}}}[1] lid {l}-{l} \"{} mlx5_0\"\n",
                host_port(b),
                host(b),
                l = 100 + b
            );
            out += &format!("To ca {}\n", ca(b));
        }
    }
    out
}

fn topology(skip: impl Fn(usize, usize) -> bool) -> Topology {
    Topology::parse(&ibtracert(skip), "routes.txt").expect("ibtracert routes")
}

/// Every direction between hosts at 100 Gb/s times a spread of +-5%; those whose route crosses
/// the cable between leaf `cable.0` and spine `cable.1` (either way) at 0.6 of that, and those
/// from or to host `node` at 0.6 as well.
fn fabric(seed: u64, cable: Option<(usize, usize)>, node: Option<usize>) -> Vec<Measurement> {
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    for a in 0..HOSTS {
        for b in (0..HOSTS).filter(|&b| b != a) {
            let (la, lb) = (a / PER_LEAF, b / PER_LEAF);
            let s = spine_to(b);
            let crosses = la != lb && cable.is_some_and(|c| c == (la, s) || c == (lb, s));
            let slow_node = node.is_some_and(|n| n == a || n == b);
            let mut gbps = 100.0 * (1.0 + 0.05 * (2.0 * rng.unit() - 1.0));
            if crosses {
                gbps *= 0.6;
            }
            if slow_node {
                gbps *= 0.6;
            }
            out.push(Measurement::bandwidth(a, b, SIZE as u64, 100, gbps, false));
        }
    }
    out
}

fn judged(ms: &[Measurement], t: &Topology) -> Verdict {
    let cfg = PairwiseConfig::synthetic(OpName::Write, SIZE, 100);
    let hosts: Vec<String> = (0..HOSTS).map(host).collect();
    judge_pairs(ms, &[], &cfg, &hosts, &RetestPlan::default(), Some(t))
}

/// leaf0's end and spine1's end of their cable, as the routes name them.
fn cable_ends() -> [End; 2] {
    let port = |name: &str, guid: &str, p: usize| End::Port {
        switch: format!("{name} (S-{guid})"),
        port: Some(p as u32),
    };
    [
        port("ib-leaf0", "0002c90300001000", up_port(1)),
        port("ib-spine1", "0002c90300002001", down_port(0)),
    ]
}

#[test]
fn a_slow_ib_cable_is_named_alone_by_both_its_switch_ports() {
    let t = topology(|_, _| false);
    let [leaf_end, spine_end] = cable_ends();
    for seed in 0..20 {
        let v = judged(&fabric(seed, Some((0, 1)), None), &t);
        assert!(v.blamed.is_empty(), "seed {seed}: no host part: {:?}", v.blamed);
        assert!(v.confirmed.is_empty(), "seed {seed}: {:?}", v.confirmed);
        assert!(!v.links.is_empty(), "seed {seed}");
        for l in &v.links {
            // Up the cable (leaf0's port to spine1's) or down it: both ends named.
            let up = l.link.from == [leaf_end.clone()] && l.link.to == spine_end;
            let down = l.link.from == [spine_end.clone()] && l.link.to == leaf_end;
            assert!(up || down, "seed {seed}: {:?}", l.link);
        }
        // Every pair across the cable is the cable's: leaf0's hosts to the other leaves' hosts
        // routed over spine1, and back.
        let fabric: BTreeSet<Pair> = v.fabric.iter().map(|p| (p.a, p.b)).collect();
        for p in &fabric {
            assert!(p.0 / PER_LEAF == 0 || p.1 / PER_LEAF == 0, "seed {seed}: {p:?}");
        }
        assert!(fabric.len() >= 8, "seed {seed}: {fabric:?}");
        assert!(v.unrouted.is_empty());
        // The links fail the run (the outcome's `cables` are the verdict's links).
        let mut o = PairwiseOutcome::synthetic(
            PairwiseConfig::synthetic(OpName::Write, SIZE, 100),
            "verbs",
            (0..HOSTS).map(host).collect(),
            HOSTS - 1,
            Vec::new(),
            Vec::new(),
            v,
        );
        o.cables = o.verdict.links.clone();
        assert!(!o.pass(), "seed {seed}");
    }
}

#[test]
fn without_the_routes_the_same_fabric_blames_hosts() {
    // What the routes change: the same figures judged without them scatter the cable's pairs
    // over host parts, as the leaf-spine bed did before traces (issue 57).
    let cfg = PairwiseConfig::synthetic(OpName::Write, SIZE, 100);
    let hosts: Vec<String> = (0..HOSTS).map(host).collect();
    let ms = fabric(3, Some((0, 1)), None);
    let v = judge_pairs(&ms, &[], &cfg, &hosts, &RetestPlan::default(), None);
    assert!(v.links.is_empty() && !v.blamed.is_empty(), "{v:?}");
}

#[test]
fn a_clean_ib_fabric_passes() {
    let t = topology(|_, _| false);
    for seed in 100..120 {
        let v = judged(&fabric(seed, None, None), &t);
        assert!(
            v.pass && v.links.is_empty() && v.blamed.is_empty(),
            "seed {seed}: {v:?}"
        );
    }
}

#[test]
fn a_slow_node_on_an_ib_fabric_stays_a_node() {
    let t = topology(|_, _| false);
    for seed in 200..220 {
        let v = judged(&fabric(seed, None, Some(5)), &t);
        let labels: Vec<String> = v.blamed.iter().map(|p| p.label()).collect();
        assert_eq!(labels, ["node ib-h05"], "seed {seed}");
        assert!(v.links.is_empty() && v.fabric.is_empty(), "seed {seed}: {:?}", v.links);
    }
}

#[test]
fn directions_without_a_route_are_listed_not_guessed() {
    // No route given from or to ib-h11 (leaf 2): its directions are left out of the search and
    // listed; the cable is still found from the others.
    let t = topology(|a, b| a == 11 || b == 11);
    let cfg = PairwiseConfig::synthetic(OpName::Write, SIZE, 100);
    let hosts: Vec<String> = (0..HOSTS).map(host).collect();
    let ms = fabric(7, Some((0, 1)), None);
    let v = judge_pairs(&ms, &[], &cfg, &hosts, &RetestPlan::default(), Some(&t));
    let expect: Vec<(usize, usize)> = (0..HOSTS)
        .filter(|&h| h != 11)
        .flat_map(|h| [(h, 11), (11, h)])
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(v.unrouted, expect);
    let [leaf_end, spine_end] = cable_ends();
    assert!(!v.links.is_empty());
    assert!(
        v.links.iter().all(|l| [&leaf_end, &spine_end].contains(&&l.link.to)),
        "{:?}",
        v.links
    );
    // ib-h11's pairs across the cable had no path: judged as host pairs, not the cable's.
    assert!(v.fabric.iter().all(|p| p.a != 11 && p.b != 11), "{:?}", v.fabric);
    // The retest plan sets the cable's pairs aside the same way.
    let plan = plan_retests_in(&ms, &cfg, &hosts, Some(&t));
    let fabric: BTreeSet<Pair> = v.fabric.iter().map(|p| (p.a, p.b)).collect();
    assert!(plan.suspects.iter().all(|p| !fabric.contains(p)), "{plan:?}");
    // The report names the cable by both ends and says which directions had no route.
    let mut o = PairwiseOutcome::synthetic(cfg, "verbs", hosts, HOSTS - 1, ms, Vec::new(), v);
    o.cables = o.verdict.links.clone();
    let out = text::render(&o);
    assert!(
        out.contains(&format!(
            "# SLOW FABRIC LINK: {leaf_end} -> {spine_end} (the subnet manager's routes)"
        )) || out.contains(&format!(
            "# SLOW FABRIC LINK: {spine_end} -> {leaf_end} (the subnet manager's routes)"
        )),
        "{out}"
    );
    assert!(
        out.contains("# No route given for 22 direction(s) between hosts") && out.contains("0->11 (ib-h00 -> ib-h11)"),
        "{out}"
    );
}

#[test]
fn routed_links_are_written_as_switch_ports_and_read_back() {
    let [leaf_end, spine_end] = cable_ends();
    let l = Link {
        from: vec![leaf_end],
        to: spine_end,
    };
    let json = serde_json::to_string(&l).expect("json");
    assert_eq!(
        json,
        r#"{"from":[{"switch":"ib-leaf0 (S-0002c90300001000)","port":34}],"to":{"switch":"ib-spine1 (S-0002c90300002001)","port":1}}"#
    );
    assert_eq!(serde_json::from_str::<Link>(&json).expect("back"), l);
    // A traced link is written as its addresses, as before.
    let ip = Link {
        from: vec![End::Ip("10.80.0.1".parse().expect("ip"))],
        to: End::Ip("10.101.0.2".parse().expect("ip")),
    };
    let json = serde_json::to_string(&ip).expect("json");
    assert_eq!(json, r#"{"from":["10.80.0.1"],"to":"10.101.0.2"}"#);
    assert_eq!(serde_json::from_str::<Link>(&json).expect("back"), ip);
}
