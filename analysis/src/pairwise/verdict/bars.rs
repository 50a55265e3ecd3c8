//! The first pass's bars (one per population, or one under `--threshold`) and the suspects
//! below them.

use super::cells::{at_matrix_size, distinct_pairs, population, scores_in};
use super::{Population, Rule};
use crate::pairwise::bulk::Bulk;
use crate::pairwise::defaults::OWN_NOISE_CELLS;
use crate::pairwise::{Measurement, PairwiseConfig, TestKind};
use crate::schedule::Pair;
use crate::stats::median;

/// The bars of the first pass: one per population under the robust rule, one over all
/// directions under `--threshold` (reported as the population of most directions).
pub(super) fn bars(first: &[Measurement], cfg: &PairwiseConfig, hosts: &[String]) -> Vec<(Population, Bulk)> {
    let floor = |mut b: Bulk| {
        if let (TestKind::Bw, Some(f)) = (cfg.test, cfg.expect_gbps) {
            b.bar = b.bar.max(f);
        }
        b
    };
    let scores = |p: Option<Population>| scores_in(first, cfg, hosts, p);
    match cfg.threshold {
        Some(f) => {
            let mut all = scores(None);
            let cells = all.len();
            if cells == 0 {
                return Vec::new();
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
            };
            vec![(p, floor(b))]
        }
        None => {
            let own: Vec<(Population, Vec<f64>, Bulk)> = [Population::BetweenHosts, Population::WithinHost]
                .into_iter()
                .filter_map(|p| {
                    let s = scores(Some(p));
                    Bulk::of(&s).map(|b| (p, s, b))
                })
                .collect();
            // A population too small to show the run's noise (a few ranks per host: 8 cells at
            // 4 hosts of 2) is judged with at least the spread the other, larger one measured:
            // on a busy machine 8 loopback cells can agree within 7% by chance while the run's
            // noise is +-30%. On a quiet fabric the other spread is small too, and nothing changes.
            let noise = |p: Population| {
                own.iter()
                    .filter(|(q, s, _)| *q != p && s.len() >= OWN_NOISE_CELLS)
                    .map(|(_, _, b)| b.spread)
                    .fold(0.0, f64::max)
            };
            own.iter()
                .filter_map(|(p, s, b)| {
                    let run_noise = noise(*p);
                    let b = if s.len() < OWN_NOISE_CELLS && run_noise > b.spread {
                        Bulk::of_at_least(s, run_noise)?
                    } else {
                        *b
                    };
                    Some((*p, floor(b)))
                })
                .collect()
        }
    }
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
