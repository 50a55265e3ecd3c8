//! The paths verdict on synthetic runs: which queue pair is named, and what is not.

use super::*;
use crate::pairwise::OpName;
use std::time::Duration;

fn cfg(retest: bool) -> PairwiseConfig {
    PairwiseConfig {
        window: 128,
        warmup: 8,
        retest,
        op_timeout: Duration::from_secs(10),
        qps: 4,
        ..PairwiseConfig::synthetic(OpName::Write, 1 << 20, 100)
    }
}

/// A deterministic spread within +-`frac` (log-uniform) around 1.
fn noise(seed: u64, frac: f64) -> impl FnMut() -> f64 {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    move || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let u = (x >> 11) as f64 / (1u64 << 53) as f64;
        (1.0 + frac).powf(2.0 * u - 1.0)
    }
}

/// Every direction among `n` ranks, 4 queue pairs each at 10 Gb/s times noise; `slow` scales
/// one queue pair of one direction.
fn run(n: usize, frac: f64, seed: u64, slow: Option<(usize, usize, usize, f64)>, retest: bool) -> Vec<Measurement> {
    let mut next = noise(seed, frac);
    let mut out = Vec::new();
    for src in 0..n {
        for dst in 0..n {
            if src == dst {
                continue;
            }
            let mut paths: Vec<f64> = (0..4).map(|_| 10.0 * next()).collect();
            if let Some((s, d, k, f)) = slow {
                if (s, d) == (src, dst) {
                    paths[k] *= f;
                }
            }
            let mut m = Measurement::bandwidth(
                src,
                dst,
                1 << 20,
                100,
                4.0 * paths.iter().copied().fold(f64::MAX, f64::min),
                retest,
            );
            m.paths = paths;
            out.push(m);
        }
    }
    out
}

#[test]
fn one_slow_queue_pair_of_a_quiet_fabric_is_named_alone() {
    // 4 ranks, 12 directions of 4 queue pairs within +-1%; queue pair 2 of 1 -> 3 at 85%.
    let slow = Some((1, 3, 2, 0.85));
    let first = run(4, 0.01, 7, slow, false);
    let again = run(4, 0.01, 8, slow, true);
    let c = cfg(true);
    assert_eq!(pairs_with_suspect_paths(&first, &c), vec![(1, 3)]);
    let v = judge_paths(&first, &again, &c).expect("several queue pairs");
    assert_eq!(v.qps, 4);
    assert_eq!(v.confirmed.len(), 1, "{v:?}");
    let p = &v.confirmed[0];
    assert_eq!((p.src, p.dst, p.qp, p.qps, p.flow_label), (1, 3, 2, 4, 3));
    assert!(p.ratio < 0.9 && p.ratio_alone.is_some_and(|r| r < 0.9), "{p:?}");
    assert!((p.gbps / p.others_gbps - p.ratio).abs() < 1e-12);
    assert!(v.cleared.is_empty());
    // Quiet: the floor (7%) is the bar.
    assert!((v.sensitivity - 0.07).abs() < 0.001, "{}", v.sensitivity);
    assert!(!v.pass());
}

#[test]
fn a_suspect_path_fine_alone_is_cleared() {
    let c = cfg(true);
    let first = run(4, 0.01, 7, Some((0, 2, 1, 0.5)), false);
    let again = run(4, 0.01, 9, None, true);
    let v = judge_paths(&first, &again, &c).expect("several queue pairs");
    assert!(v.confirmed.is_empty() && v.pass(), "{v:?}");
    assert_eq!(v.cleared, vec![(0, 2, 1)]);
    // Without retests the first pass decides.
    let v = judge_paths(&first, &[], &cfg(false)).expect("several queue pairs");
    assert_eq!(v.confirmed.len(), 1);
    assert_eq!(v.confirmed[0].ratio_alone, None);
}

#[test]
fn a_noisy_fabric_names_no_healthy_path_and_still_a_halved_one_when_quiet_enough() {
    // +-30% between queue pairs of a test: its own spread sets the bar, and nothing is suspect.
    for seed in 0..50 {
        let first = run(6, 0.3, seed, None, false);
        let c = cfg(true);
        assert!(pairs_with_suspect_paths(&first, &c).is_empty(), "seed {seed}");
        let v = judge_paths(&first, &[], &c).expect("several queue pairs");
        assert!(v.pass() && v.sensitivity > 0.3, "seed {seed}: {v:?}");
    }
    // +-5%: a path at half speed stands out.
    let slow = Some((5, 0, 0, 0.5));
    let v = judge_paths(&run(6, 0.05, 3, slow, false), &run(6, 0.05, 4, slow, true), &cfg(true)).unwrap();
    assert_eq!(
        v.confirmed.iter().map(|p| (p.src, p.dst, p.qp)).collect::<Vec<_>>(),
        vec![(5, 0, 0)]
    );
}

#[test]
fn under_a_threshold_the_bar_is_that_fraction_of_the_others() {
    // +-5% noise and a path at 60% of its others: the distribution's bar names it; --threshold
    // 0.5 (slow below half the others) does not, --threshold 0.7 does, alone.
    let slow = Some((2, 1, 3, 0.6));
    let (first, again) = (run(6, 0.05, 11, slow, false), run(6, 0.05, 12, slow, true));
    let named = |v: &PathVerdict| v.confirmed.iter().map(|p| (p.src, p.dst, p.qp)).collect::<Vec<_>>();
    let robust = judge_paths(&first, &again, &cfg(true)).expect("several queue pairs");
    assert_eq!(named(&robust), vec![(2, 1, 3)]);
    let at = |f: f64| PairwiseConfig {
        threshold: Some(f),
        ..cfg(true)
    };
    let v = judge_paths(&first, &again, &at(0.5)).expect("several queue pairs");
    assert!(v.pass() && v.cleared.is_empty(), "{v:?}");
    assert_eq!((v.bulk.bar, v.sensitivity), (0.5, 0.5));
    assert_eq!(pairs_with_suspect_paths(&first, &at(0.5)), vec![]);
    let v = judge_paths(&first, &again, &at(0.7)).expect("several queue pairs");
    assert_eq!(named(&v), vec![(2, 1, 3)]);
    assert!((v.sensitivity - 0.3).abs() < 1e-12);
}

#[test]
fn one_queue_pair_per_test_has_no_paths_verdict() {
    let mut first = run(3, 0.01, 1, None, false);
    for m in &mut first {
        m.paths.clear();
    }
    assert!(judge_paths(&first, &[], &cfg(true)).is_none());
    assert!(pairs_with_suspect_paths(&first, &cfg(true)).is_empty());
}

#[test]
fn udp_source_ports_by_hand() {
    // The kernel's rdma_flow_label_to_udp_sport: (low 14 bits ^ bits 14-19) | 0xC000.
    assert_eq!(udp_source_port(1), 0xc001);
    assert_eq!(udp_source_port(4), 0xc004);
    // 0x12345: low 0x2345, high 0x12345 & 0xFC000 = 0x10000, >> 14 = 4; 0x2345 ^ 4 = 0x2341.
    assert_eq!(udp_source_port(0x12345), 0xe341);
    assert_eq!(udp_source_port(0xf_ffff), 0xc000 | (0x3fff ^ 0x3f));
}

#[test]
fn the_reports_name_the_path_and_the_run_fails() {
    use crate::pairwise::report::{json, text};
    use crate::pairwise::{verdict, PairwiseOutcome};
    let c = cfg(true);
    let slow = Some((1, 3, 2, 0.5));
    let (first, again) = (run(4, 0.01, 7, slow, false), run(4, 0.01, 8, slow, true));
    let hosts: Vec<String> = (0..4).map(|i| format!("h{i}")).collect();
    let plan = verdict::RetestPlan {
        paths: pairs_with_suspect_paths(&first, &c),
        ..verdict::plan_retests(&first, &c, &hosts)
    };
    assert_eq!(
        plan.pairs(),
        vec![(1, 3)],
        "the pair of the slow path is retested, once"
    );
    let v = verdict::judge_pairs(&first, &again, &c, &hosts, &plan, None);
    let o = PairwiseOutcome {
        paths: judge_paths(&first, &again, &c),
        ..PairwiseOutcome::synthetic(c.clone(), "verbs", hosts.clone(), 3, first, again, v)
    };
    assert!(o.verdict.pass && !o.pass(), "the pairs pass, the run does not");
    let t = text::render_judged(&o);
    assert!(
        t.contains(
            "# Slow path: one of the 4 paths from h1 (rank 1) to h3 (rank 3) is slow: queue pair 3 (flow label 3, \
             RoCE v2 UDP source port 49155 = 0xc003) 5.0"
        ),
        "{t}"
    );
    assert!(
        t.contains("# Sensitivity (paths): a queue pair 7% or more below the others of its test"),
        "{t}"
    );
    assert!(
        t.contains("# FAIL: 1 slow path(s) (one queue pair of a pair slower than its others), no slow pair\n"),
        "{t}"
    );
    assert!(!t.contains("# PASS"), "{t}");
    let j: serde_json::Value = serde_json::from_slice(&json::render(&o)).expect("json");
    assert_eq!(j["paths"]["confirmed"][0]["qp"], 2);
    assert_eq!(j["paths"]["confirmed"][0]["flow_label"], 3);
    assert_eq!(j["results"][0]["paths"].as_array().map(Vec::len), Some(4));
}
