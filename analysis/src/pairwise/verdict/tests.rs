//! The verdict's unit tests, by topic (bars, suspects, references and what a retest confirms):
//! the shared fixtures here, the tests in `tests/`.

mod at_once;
mod bar_alone;
mod retest_amount;
mod robust_rule;
mod settling;
mod small_populations;
mod threshold_rule;
mod unstable;

use super::bars::{bars, suspect_pairs};
use super::*;
use crate::pairwise::defaults::{
    FEW_SUSPECTS, MIN_DROP, MIN_RETEST_ITERATIONS, QUIET_SPREAD, REFERENCES, RETEST_PASSES,
};
use crate::pairwise::formulas::BwResult;
use crate::pairwise::OpName;
use crate::pairwise::{Amount, Measurement, PairwiseConfig, TestKind};
use crate::stats::median;

fn cfg() -> PairwiseConfig {
    PairwiseConfig {
        window: 4,
        threshold: Some(0.9),
        ..PairwiseConfig::synthetic(OpName::Send, 65536, 10)
    }
}

/// [`cfg`] under the default rule (the bar from the distribution, no threshold).
fn robust_cfg() -> PairwiseConfig {
    PairwiseConfig {
        threshold: None,
        ..cfg()
    }
}

fn m(src: usize, dst: usize, gbps: f64) -> Measurement {
    let bw = BwResult {
        bytes: 65536,
        iterations: 10,
        peak_gbps: gbps,
        avg_gbps: gbps,
        msg_rate_mpps: 0.0,
        low_gbps: None,
    };
    Measurement {
        src,
        dst,
        bytes: 65536,
        bw: Some(bw),
        lat: None,
        iterations: 10,
        retest: false,
        paths: Vec::new(),
        connections: Vec::new(),
        slot: None,
        path: None,
    }
}

/// Every ordered pair of `n` ranks at `fast`, except those listed.
fn matrix(n: usize, fast: f64, slow: &[(usize, usize, f64)]) -> Vec<Measurement> {
    let mut v = Vec::new();
    for s in 0..n {
        for d in 0..n {
            if s != d {
                let g = slow.iter().find(|x| x.0 == s && x.1 == d).map_or(fast, |x| x.2);
                v.push(m(s, d, g));
            }
        }
    }
    v
}

fn hosts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("h{i}")).collect()
}

fn judge_with(first: &[Measurement], retests: &[Measurement], c: &PairwiseConfig, h: &[String]) -> Verdict {
    let plan = plan_retests(first, c, h);
    judge_pairs(first, retests, c, h, &plan, None)
}

/// Six hosts of one rank, every direction at 10 Gb/s but both of pair (1, 4) at `slow`, under the
/// default rule: the configuration, the hosts, the first pass and its retest plan.
fn one_slow_pair(slow: f64) -> (PairwiseConfig, Vec<String>, Vec<Measurement>, RetestPlan) {
    let c = robust_cfg();
    let h = hosts(6);
    let first = matrix(6, 10.0, &[(1, 4, slow), (4, 1, slow)]);
    let plan = plan_retests(&first, &c, &h);
    (c, h, first, plan)
}

fn levels(v: &Verdict) -> Vec<String> {
    v.blamed.iter().map(Part::label).collect()
}

/// Retests of the suspect (0, 1) and of the references: both directions, [`RETEST_PASSES`]
/// passes, the passes apart by the factor `jitter`; the suspect runs at `suspect` (its better
/// pass), the references at 10.
fn retests_with_jitter(plan: &RetestPlan, suspect: f64, jitter: f64) -> Vec<Measurement> {
    retests_of(plan, (0, 1), suspect, jitter)
}

/// [`retests_with_jitter`] with the suspect pair `slow`.
fn retests_of(plan: &RetestPlan, slow: Pair, suspect: f64, jitter: f64) -> Vec<Measurement> {
    let mut v = Vec::new();
    for pass in 0..RETEST_PASSES {
        let f = if pass % 2 == 0 { 1.0 } else { 1.0 / jitter };
        for &(a, b) in &plan.pairs() {
            let at = if (a, b) == slow { suspect } else { 10.0 };
            for (s, d) in [(a, b), (b, a)] {
                let mut x = m(s, d, at * f);
                x.retest = true;
                v.push(x);
            }
        }
    }
    v
}
