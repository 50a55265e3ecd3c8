//! What to retest alone after the first pass: the suspects, the reference pairs beside them,
//! whether they run at once, and how many messages each retest sends.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::bars::{bars, suspect_pairs};
use super::cells::{at_matrix_size, population, scores_in};
use super::on_links::off_links;
use super::on_paths::on_paths;
use super::Population;
use crate::pairwise::blame::host_indices;
use crate::pairwise::bulk::Bulk;
use crate::pairwise::defaults::{MIN_RETEST_ITERATIONS, MIN_RETEST_WARMUP, QUIET_SPREAD, REFERENCES, RETEST_SECONDS};
use crate::pairwise::topology::Topology;
use crate::pairwise::{Amount, Measurement, PairwiseConfig, TestKind};
use crate::schedule::{host_disjoint_groups, Pair};
use crate::stats::median;

/// What to retest alone after the first pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RetestPlan {
    pub suspects: Vec<Pair>,
    pub references: Vec<Pair>,
    /// Pairs with a queue pair slower than its others (`-q`, [`crate::pairwise::paths`]), retested with
    /// all their queue pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<Pair>,
    /// Retest the pairs that share no host at once ([`crate::schedule::host_disjoint_groups`])
    /// instead of one at a time: set where the first pass, which ran disjoint pairs at once,
    /// shows that doing so did not disturb the figures ([`QUIET_SPREAD`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_once: bool,
    /// Retests at once that varied this much from pass to pass
    /// ([`unsteady_at_once`](super::unsteady_at_once)) and were therefore run again one pair at a
    /// time (the largest such spread, log units).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_once_noise: Option<f64>,
    /// Fewer messages per retest than the first pass sent ([`retest_amount`]); None: the
    /// first pass's count and warm-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<RetestAmount>,
    /// The pairs still slow after [`RETEST_PASSES`](crate::pairwise::defaults::RETEST_PASSES)
    /// were not retested [`CONFIRM_PASSES`](crate::pairwise::defaults::CONFIRM_PASSES) more: few
    /// suspects, retested at once and steady, their passes alike
    /// ([`settled_in_two`](super::settled_in_two)).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub settled: bool,
}

impl RetestPlan {
    /// Every pair to retest, one at a time, in this order (each once).
    pub fn pairs(&self) -> Vec<Pair> {
        let mut v: Vec<Pair> = self.suspects.iter().chain(&self.references).copied().collect();
        for p in &self.paths {
            if !v.contains(p) {
                v.push(*p);
            }
        }
        v
    }
}

/// How many messages one retest direction sends (and warms up with), where fewer than the first
/// pass's ([`retest_amount`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetestAmount {
    pub iterations: u64,
    pub warmup: u64,
}

impl RetestAmount {
    /// `cfg` with this count and warm-up: what the retests run.
    pub fn applied(&self, cfg: &PairwiseConfig) -> PairwiseConfig {
        PairwiseConfig {
            amount: Amount::Iterations(self.iterations),
            warmup: self.warmup,
            ..cfg.clone()
        }
    }
}

/// The retests' count and warm-up, where the first pass's count (`-n`) of bandwidth messages
/// takes longer than [`RETEST_SECONDS`] a direction at the slowest population's median rate in
/// `first`: the count that fills those seconds (at least [`MIN_RETEST_ITERATIONS`]), and the
/// warm-up cut in the same proportion (at least [`MIN_RETEST_WARMUP`], or the first pass's where
/// it was smaller). None for
/// latency, durations (`-D`) and counts already that short.
pub fn retest_amount(first: &[Measurement], cfg: &PairwiseConfig, hosts: &[String]) -> Option<RetestAmount> {
    let Amount::Iterations(iters) = cfg.amount else {
        return None;
    };
    if cfg.test != TestKind::Bw || iters <= MIN_RETEST_ITERATIONS {
        return None;
    }
    let size = cfg.matrix_size() as f64;
    let slowest = [Population::BetweenHosts, Population::WithinHost]
        .into_iter()
        .filter_map(|p| {
            let mut v = scores_in(first, cfg, hosts, Some(p));
            (!v.is_empty()).then(|| median(&mut v))
        })
        .fold(f64::INFINITY, f64::min);
    if !(slowest.is_finite() && slowest > 0.0) {
        return None;
    }
    // Bytes one message puts on the wire: every queue pair posts the count, and a
    // bidirectional test moves it both ways.
    let per_message = size * 8.0 * cfg.qps.max(1) as f64 * if cfg.bidirectional { 2.0 } else { 1.0 };
    let seconds_each = per_message / (slowest * 1e9);
    let fit = (RETEST_SECONDS / seconds_each).ceil() as u64;
    let iterations = fit.max(MIN_RETEST_ITERATIONS);
    if iterations >= iters {
        return None;
    }
    let warmup = (cfg.warmup * iterations)
        .div_ceil(iters)
        .max(cfg.warmup.min(MIN_RETEST_WARMUP));
    Some(RetestAmount { iterations, warmup })
}

/// What to retest alone: the suspects, and (robust rule) up to [`REFERENCES`] pairs per
/// population with suspects whose worst direction is nearest the bulk's median.
pub fn plan_retests(first: &[Measurement], cfg: &PairwiseConfig, hosts: &[String]) -> RetestPlan {
    plan_retests_in(first, cfg, hosts, None)
}

/// [`plan_retests`] on a fabric of known `topology`: without traces, the pairs slow through
/// one of an uplink's paths are not retested (`on_paths.rs`).
pub fn plan_retests_in(
    first: &[Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    topology: Option<&Topology>,
) -> RetestPlan {
    // Pairs slow through a slow fabric link are not the hosts' to retest (`on_links.rs`).
    let apart = off_links(first, cfg, hosts, topology);
    let first: &[Measurement] = &apart.rest;
    let bars = bars(first, cfg, hosts);
    let on_paths = on_paths(first, cfg, hosts, topology);
    let suspects: Vec<Pair> = suspect_pairs(first, cfg, hosts, &bars)
        .into_iter()
        .filter(|p| !on_paths.contains(p))
        .collect();
    let suspect_set: HashSet<Pair> = suspects.iter().copied().collect();
    let has_suspects = |p: Population| {
        at_matrix_size(first, cfg)
            .filter(|m| population(hosts, m) == p)
            .any(|m| suspect_set.contains(&m.pair()))
    };
    // Retests at once: bandwidth under the robust rule (latency figures are a CPU's response
    // time, which a neighbour's interrupts change), every population with suspects quiet.
    let at_once = cfg.test == TestKind::Bw
        && cfg.threshold.is_none()
        && bars
            .iter()
            .filter(|(p, _)| has_suspects(*p))
            .all(|(_, b)| b.spread <= QUIET_SPREAD && 2 * b.healthy > b.cells);
    let mut references = Vec::new();
    if cfg.threshold.is_none() {
        for (p, bulk) in &bars {
            if !has_suspects(*p) {
                continue;
            }
            let candidates = reference_candidates(first, cfg, hosts, (*p, bulk), &suspect_set);
            if at_once {
                let planned: Vec<Pair> = suspects.iter().chain(&references).copied().collect();
                references.extend(references_beside(&candidates, &planned, hosts));
            } else {
                references.extend(candidates.into_iter().take(REFERENCES));
            }
        }
    }
    RetestPlan {
        suspects,
        references,
        paths: Vec::new(),
        at_once,
        at_once_noise: None,
        amount: None,
        settled: false,
    }
}

/// The pairs of population `p` that could be references, nearest the bulk's median first: each
/// pair at its worst distance from the median (log units), suspects left out.
fn reference_candidates(
    first: &[Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    (p, bulk): (Population, &Bulk),
    suspects: &HashSet<Pair>,
) -> Vec<Pair> {
    let mut distance: HashMap<Pair, f64> = HashMap::new();
    for m in at_matrix_size(first, cfg).filter(|m| population(hosts, m) == p) {
        let pair = m.pair();
        if suspects.contains(&pair) {
            continue;
        }
        let d = (m.score().max(f64::MIN_POSITIVE) / bulk.median).ln().abs();
        let e = distance.entry(pair).or_insert(d);
        *e = e.max(d);
    }
    let mut candidates: Vec<(f64, Pair)> = distance.into_iter().map(|(p, d)| (d, p)).collect();
    candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    candidates.into_iter().map(|c| c.1).collect()
}

/// [`REFERENCES`] of `candidates` (nearest the bulk's median first) for retests at once: those
/// that run beside the suspects without adding a group of their own (sharing no host with the
/// pairs of some group of [`host_disjoint_groups`]) first, then the nearest of the rest. On a
/// quiet fabric every candidate is within a percent or two of the median, so the choice costs
/// nothing in what the references show, and a pass over one suspect and its references takes
/// one pair's time.
fn references_beside(candidates: &[Pair], suspects: &[Pair], hosts: &[String]) -> Vec<Pair> {
    let (node_of, _) = host_indices(hosts);
    let host = |r: usize| node_of.get(r).copied().unwrap_or(usize::MAX - r);
    let mut used: Vec<HashSet<usize>> = host_disjoint_groups(suspects, &node_of)
        .iter()
        .map(|g| g.iter().flat_map(|&(a, b)| [host(a), host(b)]).collect())
        .collect();
    let mut picked = Vec::new();
    for &(a, b) in candidates {
        if picked.len() == REFERENCES {
            break;
        }
        if let Some(g) = used.iter_mut().find(|g| !g.contains(&host(a)) && !g.contains(&host(b))) {
            g.extend([host(a), host(b)]);
            picked.push((a, b));
        }
    }
    for &c in candidates {
        if picked.len() == REFERENCES {
            break;
        }
        if !picked.contains(&c) {
            picked.push(c);
        }
    }
    picked
}
