//! The judgement over time on synthetic passes: verdicts made by hand, so what is tested is the
//! step across passes, not the verdict of one.

use std::collections::BTreeMap;

use super::*;
use crate::counters::Moved;
use crate::pairwise::blame::SlowCounts;
use crate::pairwise::report::text;
use crate::pairwise::verdict::{Rule, Verdict};
use crate::pairwise::{Measurement, OpName, PairwiseConfig};

const SIZE: usize = 1 << 20;
const HOSTS: usize = 4;

fn hosts() -> Vec<String> {
    (0..HOSTS).map(|h| format!("h{h}")).collect()
}

fn link(a: usize, b: usize) -> Part {
    Part::HostLink {
        host_a: format!("h{a}"),
        host_b: format!("h{b}"),
        counts: SlowCounts {
            slow: 1,
            of: 1,
            slow_pairs: 1,
            worst: 2.0,
            worst_retest: Some(2.1),
        },
        port_a: None,
        port_b: None,
    }
}

/// A pass of 4 hosts (one rank each): every direction at `fine` Gb/s times a small wobble, the
/// directions across `slow` at 2 Gb/s, and a verdict naming `slow` (as slow, or as unstable
/// within the pass when `within`).
fn pass(index: usize, fine: f64, slow: Option<(usize, usize)>, within: bool) -> Pass {
    let mut measurements = Vec::new();
    for s in 0..HOSTS {
        for d in (0..HOSTS).filter(|&d| d != s) {
            let wobble = 1.0 + 0.01 * ((s * 7 + d * 3 + index) % 5) as f64;
            let on_slow = slow.is_some_and(|(a, b)| (s, d) == (a, b) || (s, d) == (b, a));
            let gbps = if on_slow { 2.0 } else { fine * wobble };
            measurements.push(Measurement::bandwidth(s, d, SIZE as u64, 100, gbps, false));
        }
    }
    let named: Vec<Part> = slow.map(|(a, b)| link(a, b)).into_iter().collect();
    let (blamed, unstable) = if within {
        let u = named
            .into_iter()
            .map(|part| crate::pairwise::verdict::Unstable {
                part,
                slow_in: vec![0],
                slots: 3,
                worst: 2.0,
                beside: fine,
                alone_min: fine,
                alone_max: fine,
            })
            .collect();
        (Vec::new(), u)
    } else {
        (named, Vec::new())
    };
    let pass = blamed.is_empty() && unstable.is_empty();
    let verdict = Verdict {
        rule: Rule::Robust,
        judged: Vec::new(),
        cleared: Vec::new(),
        confirmed: Vec::new(),
        blamed,
        unstable,
        pass,
        fabric: Vec::new(),
        links: Vec::new(),
        uplink_paths: Vec::new(),
        unrouted: Vec::new(),
    };
    let config = PairwiseConfig::synthetic(OpName::Send, SIZE, 100);
    let outcome = PairwiseOutcome::synthetic(config, "tcp", hosts(), 3, measurements, Vec::new(), verdict);
    Pass {
        index,
        start_s: (index - 1) as f64 * 30.0,
        started_at: 1_765_000_000.0 + (index - 1) as f64 * 30.0,
        seconds: 29.0,
        outcome,
    }
}

fn labels(v: &[Named]) -> Vec<String> {
    v.iter().map(|x| x.part.label()).collect()
}

#[test]
fn a_part_slow_in_some_passes_is_unstable_with_its_passes() {
    let passes: Vec<Pass> = (1..=10)
        .map(|i| {
            let slow = [3, 6, 9].contains(&i).then_some((1, 2));
            pass(i, 10.0, slow, false)
        })
        .collect();
    let t = judge(&passes, false);
    assert!(t.slow.is_empty(), "{:?}", labels(&t.slow));
    assert_eq!(labels(&t.unstable), ["link h1-h2"]);
    let x = &t.unstable[0];
    assert_eq!(x.named_in(), [3, 6, 9]);
    assert_eq!(x.worst_pass, 3, "the first of its slowest passes");
    let sp = x.spread.unwrap();
    assert_eq!(
        (sp.min, sp.max),
        (2.0, x.figures.iter().flatten().copied().fold(0.0, f64::max))
    );
    assert!(sp.median > 9.0, "fine in most passes: {sp:?}");
    assert!(!t.pass);
    // --on-unstable warn: reported, and the run passes.
    let warned = judge(&passes, true);
    assert!(warned.pass && warned.unstable.len() == 1);
}

#[test]
fn a_part_slow_in_every_pass_is_slow_once() {
    let passes: Vec<Pass> = (1..=5).map(|i| pass(i, 10.0, Some((0, 3)), false)).collect();
    let t = judge(&passes, false);
    assert_eq!(labels(&t.slow), ["link h0-h3"], "named once, not once per pass");
    assert!(t.unstable.is_empty());
    assert_eq!(t.slow[0].slow_in, [1, 2, 3, 4, 5]);
    assert!(!t.pass);
}

#[test]
fn a_part_unstable_within_every_pass_stays_unstable() {
    let passes: Vec<Pass> = (1..=3).map(|i| pass(i, 10.0, Some((0, 3)), true)).collect();
    let t = judge(&passes, false);
    assert!(t.slow.is_empty());
    assert_eq!(labels(&t.unstable), ["link h0-h3"]);
    assert_eq!(t.unstable[0].unstable_in, [1, 2, 3]);
}

#[test]
fn clean_passes_pass() {
    let passes: Vec<Pass> = (1..=4).map(|i| pass(i, 10.0, None, false)).collect();
    let t = judge(&passes, false);
    assert!(t.pass && t.slow.is_empty() && t.unstable.is_empty());
    assert_eq!(t.passes, 4);
    assert_eq!(t.directions.len(), HOSTS * (HOSTS - 1));
    assert!(t.medians.iter().all(|m| m.is_some_and(|m| m > 9.9)));
}

#[test]
fn noisy_but_healthy_passes_name_nothing() {
    // Whole passes at 10, 6, 9.5 and 7 Gb/s: the fabric moved, no pass's verdict named a part.
    let passes: Vec<Pass> = [10.0, 6.0, 9.5, 7.0]
        .iter()
        .enumerate()
        .map(|(i, &g)| pass(i + 1, g, None, false))
        .collect();
    let t = judge(&passes, false);
    assert!(t.pass && t.slow.is_empty() && t.unstable.is_empty());
    // The spread shows it all the same: pass 2 the worst of every direction.
    assert!(t
        .directions
        .iter()
        .all(|d| d.worst_pass == 2 && d.spread.min < 6.3 && d.spread.max > 9.9));
}

#[test]
fn counters_are_kept_per_pass_and_named_with_their_passes() {
    let mut passes: Vec<Pass> = (1..=3).map(|i| pass(i, 10.0, None, false)).collect();
    let carrier = |n: u64| Moved {
        host: "h2".into(),
        source: "eth0".into(),
        ranks: vec![2],
        deltas: BTreeMap::from([("carrier_down_count".to_string(), n), ("rx_bytes".to_string(), 9)]),
    };
    let traffic = Moved {
        deltas: BTreeMap::from([("rx_bytes".to_string(), 9)]),
        ..carrier(0)
    };
    passes[0].outcome.counters = vec![traffic.clone()];
    passes[1].outcome.counters = vec![carrier(1)];
    passes[2].outcome.counters = vec![traffic];
    let t = judge(&passes, false);
    assert_eq!(t.counters.len(), 1);
    assert_eq!(t.counters[0].passes, [2], "traffic alone is no move");
    assert_eq!(
        t.counters[0].deltas,
        BTreeMap::from([("carrier_down_count".to_string(), 1)])
    );
    // The bandwidth looked fine: the counter is named all the same, with its pass.
    let mut o = passes[2].outcome.clone();
    o.repeats = passes;
    o.over_time = Some(t);
    let report = text::render_judged(&o);
    assert!(
        report.contains(
            "# Counters: h2 eth0: carrier_down_count +1 (the link went down), in pass 2: errors counted during the run"
        ),
        "{report}"
    );
    assert!(report.contains("# PASS over 3 passes"), "{report}");
}

#[test]
fn the_report_names_the_unstable_part_with_its_worst_pass() {
    let passes: Vec<Pass> = (1..=4)
        .map(|i| pass(i, 10.0, (i == 3).then_some((1, 2)), false))
        .collect();
    let t = judge(&passes, false);
    let mut o = passes[3].outcome.clone();
    o.repeats = passes;
    o.over_time = Some(t);
    let report = text::render_judged(&o);
    assert!(
        report.contains("# UNSTABLE HOST LINK: h1 <-> h2: named in 1 of 4 passes (pass 3), fine in the others"),
        "{report}"
    );
    assert!(report.contains("worst pass 3 (+1m, "), "{report}");
    assert!(report.contains("# FAIL over 4 passes: 1 unstable part(s)"), "{report}");
    assert!(!o.pass());
}

#[test]
fn a_node_slow_on_every_rail_is_the_node_once_not_its_nics_too() {
    // With rails the run's verdict holds the node (slow on both its rails); the rails' own
    // verdicts name its NIC on each rail. Across passes the node alone is named, as in a pass.
    let rail_nic = |rail: usize| Part::RailNic {
        rail,
        rank: 2 + rail,
        host: "h1".into(),
        nic: Some(format!("eth{rail}")),
        counts: SlowCounts {
            slow: 1,
            of: 1,
            slow_pairs: 1,
            worst: 2.0,
            worst_retest: Some(2.1),
        },
    };
    let passes: Vec<Pass> = (1..=4)
        .map(|i| {
            let mut p = pass(i, 10.0, None, false);
            if i == 2 {
                let node = Part::Node {
                    host: "h1".into(),
                    counts: SlowCounts {
                        slow: 2,
                        of: 2,
                        slow_pairs: 2,
                        worst: 2.0,
                        worst_retest: Some(2.1),
                    },
                };
                p.outcome.verdict.blamed = vec![node];
                p.outcome.verdict.pass = false;
                p.outcome.rails = (0..2)
                    .map(|rail| crate::pairwise::rails::RailOutcome {
                        rail,
                        ranks: vec![rail, 2 + rail],
                        nics: vec![None, Some(format!("eth{rail}"))],
                        verdict: Verdict {
                            blamed: vec![rail_nic(rail)],
                            ..p.outcome.verdict.clone()
                        },
                    })
                    .collect();
            }
            p
        })
        .collect();
    let t = judge(&passes, false);
    assert!(t.slow.is_empty(), "{:?}", labels(&t.slow));
    assert_eq!(
        labels(&t.unstable),
        ["node h1"],
        "the node, not also its NIC on each rail"
    );
    assert_eq!(t.unstable[0].named_in(), [2]);
    assert!(!t.pass);
}
