//! The first pass's bars (one per population, or one under `--threshold`) and the suspects
//! below them.

use super::cells::{at_matrix_size, distinct_pairs, population, scores_in};
use super::small::noise_apart;
use super::{Population, Rule};
use crate::pairwise::blame::SlowPair;
use crate::pairwise::bulk::Bulk;
use crate::pairwise::defaults::OWN_NOISE_CELLS;
use crate::pairwise::{Measurement, PairwiseConfig, TestKind};
use crate::schedule::Pair;
use crate::stats::median;

/// The bars of the first pass: one per population under the robust rule, one over all
/// directions under `--threshold` (reported as the population of most directions); under the
/// `--expect-gbps` floor either way.
pub(super) fn bars(first: &[Measurement], cfg: &PairwiseConfig, hosts: &[String]) -> Vec<(Population, Bulk)> {
    let bars = match cfg.threshold {
        Some(f) => threshold_bar(first, cfg, hosts, f).into_iter().collect(),
        None => robust_bars(first, cfg, hosts),
    };
    bars.into_iter()
        .map(|(p, mut b)| {
            if let (TestKind::Bw, Some(f)) = (cfg.test, cfg.expect_gbps) {
                b.bar = b.bar.max(f);
            }
            (p, b)
        })
        .collect()
}

/// `--threshold F`: F times the median of all directions, reported as the population of most
/// directions; None with nothing measured.
fn threshold_bar(first: &[Measurement], cfg: &PairwiseConfig, hosts: &[String], f: f64) -> Option<(Population, Bulk)> {
    let mut all = scores_in(first, cfg, hosts, None);
    let cells = all.len();
    if cells == 0 {
        return None;
    }
    let between = at_matrix_size(first, cfg)
        .filter(|m| population(hosts, m) == Population::BetweenHosts)
        .count();
    let med = median(&mut all);
    let p = if between * 2 >= cells {
        Population::BetweenHosts
    } else {
        Population::WithinHost
    };
    let b = Bulk {
        median: med,
        spread: 0.0,
        bar: f * med,
        healthy: cells,
        cells,
        small_noise: None,
    };
    Some((p, b))
}

/// The robust rule: each population's bar from its own distribution ([`Bulk`]).
fn robust_bars(first: &[Measurement], cfg: &PairwiseConfig, hosts: &[String]) -> Vec<(Population, Bulk)> {
    // A small population between hosts (a rail, or a few hosts' pairs) has its noise measured
    // from its pairs' two directions, where the bulk is too small to measure its own.
    let apart = |p: Population| match p {
        Population::BetweenHosts => {
            let cells: Vec<&Measurement> = at_matrix_size(first, cfg)
                .filter(|m| population(hosts, m) == p)
                .collect();
            noise_apart(&cells)
        }
        Population::WithinHost => None,
    };
    let bulk = |s: &[f64], min_spread: f64, noise: Option<f64>| match noise {
        Some(n) => Bulk::of_small(s, min_spread, n),
        None => Bulk::of_at_least(s, min_spread),
    };
    let own: Vec<(Population, Vec<f64>, Option<f64>, Bulk)> = [Population::BetweenHosts, Population::WithinHost]
        .into_iter()
        .filter_map(|p| {
            let s = scores_in(first, cfg, hosts, Some(p));
            let noise = apart(p);
            bulk(&s, 0.0, noise).map(|b| (p, s, noise, b))
        })
        .collect();
    // A population too small to show the run's noise (a few ranks per host: 8 cells at
    // 4 hosts of 2) is judged with at least the spread the other, larger one measured:
    // on a busy machine 8 loopback cells can agree within 7% by chance while the run's
    // noise is +-30%. On a quiet fabric the other spread is small too, and nothing changes.
    let noise = |p: Population| {
        own.iter()
            .filter(|(q, s, _, _)| *q != p && s.len() >= OWN_NOISE_CELLS)
            .map(|(_, _, _, b)| b.spread)
            .fold(0.0, f64::max)
    };
    own.iter()
        .filter_map(|(p, s, apart, b)| {
            let run_noise = noise(*p);
            let b = if s.len() < OWN_NOISE_CELLS && run_noise > b.spread {
                bulk(s, run_noise, *apart)?
            } else {
                *b
            };
            Some((*p, b))
        })
        .collect()
}

/// The bar that applies to `m`.
pub(super) fn bar_for(bars: &[(Population, Bulk)], rule: Rule, hosts: &[String], m: &Measurement) -> f64 {
    match rule {
        Rule::Threshold(_) => bars.first().map_or(0.0, |b| b.1.bar),
        Rule::Robust => bars
            .iter()
            .find(|b| b.0 == population(hosts, m))
            .map_or(0.0, |b| b.1.bar),
    }
}

/// Pair `(a, b)` as a slow pair from its first-pass measurements `ms`: its directions below their
/// bar and the worst of them (none below: no direction, and `first` infinite), not retested.
/// The one way the verdict reads a pair's first pass, confirmed or set aside alike.
pub(super) fn slow_pair(
    (a, b): Pair,
    ms: &[&Measurement],
    bars: &[(Population, Bulk)],
    rule: Rule,
    hosts: &[String],
) -> SlowPair {
    let slow: Vec<&Measurement> = ms
        .iter()
        .copied()
        .filter(|m| m.score() < bar_for(bars, rule, hosts, m))
        .collect();
    SlowPair {
        a,
        b,
        host_a: hosts[a].clone(),
        host_b: hosts[b].clone(),
        first: slow.iter().map(|m| m.score()).fold(f64::INFINITY, f64::min),
        retest: None,
        directions: slow.iter().map(|m| (m.src, m.dst)).collect(),
    }
}

pub(in crate::pairwise) fn rule(cfg: &PairwiseConfig) -> Rule {
    cfg.threshold.map_or(Rule::Robust, Rule::Threshold)
}

/// Pairs with a direction below its bar in the first pass.
pub(super) fn suspect_pairs(
    first: &[Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    bars: &[(Population, Bulk)],
) -> Vec<Pair> {
    distinct_pairs(at_matrix_size(first, cfg).filter(|m| m.score() < bar_for(bars, rule(cfg), hosts, m)))
}
