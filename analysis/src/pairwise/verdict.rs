//! Which pairs are slow, and which part of the fabric they point to.
//!
//! By default the bar comes from the distribution ([`Bulk`]): a direction (Gb/s; 1/latency for
//! latency tests) is suspect when it lies well below the healthy bulk of its own population,
//! pairs between hosts and pairs within a host being judged apart (they use different paths).
//! Suspect pairs are retested alone, with a few reference pairs from the middle of the bulk
//! retested alone the same way, [`RETEST_PASSES`] times over (and the pairs still slow then
//! [`CONFIRM_PASSES`](super::defaults::CONFIRM_PASSES) more), each direction counting at its best pass: a suspect is confirmed
//! when, alone, it is still below a bar set under where the references ran alone, by four
//! deviations of the retests' own noise ([`alone_spread`], never less than the 7% floor) or,
//! with too few retests to measure it, by the first pass's relative drop; so a pair is never
//! judged alone against figures measured under load, nor by the first pass's contention. `--threshold F` instead sets the bar at F times
//! the median of all directions (retests judged against the same bar), and `--expect-gbps` is a
//! floor under either rule. Confirmed pairs are then blamed on an uplink, a node, a host link, a
//! NIC or a single rank pair ([`super::blame`]).

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::blame::{blame, host_indices};
pub use super::blame::{Part, SlowPair};
use super::bulk::Bulk;
use super::defaults::{
    ALONE_DIFFS, DEVIATIONS, FEW_SUSPECTS, MIN_DROP, MIN_RETEST_ITERATIONS, MIN_RETEST_WARMUP, OWN_NOISE_CELLS,
    QUIET_SPREAD, REFERENCES, RETEST_PASSES, RETEST_SECONDS,
};
use super::topology::Topology;
use super::{Amount, Measurement, PairwiseConfig, TestKind};
use crate::schedule::{host_disjoint_groups, Pair};
use crate::stats::{median, sd_from_abs_lower_median, MAD_TO_SD};

/// The pairs to retest once more before the verdict is final: those confirmed slow by their
/// retests (never those confirmed without one).
pub fn to_confirm(v: &Verdict) -> Vec<Pair> {
    let mut p: Vec<Pair> = v
        .confirmed
        .iter()
        .filter(|c| c.retest.is_some())
        .map(|c| (c.a, c.b))
        .collect();
    p.sort_unstable();
    p.dedup();
    p
}

/// Whether the pairs still slow after [`RETEST_PASSES`] (`still`, from [`to_confirm`]) are
/// settled without the [`CONFIRM_PASSES`](super::defaults::CONFIRM_PASSES): the retests ran at
/// once on a quiet first pass and stayed steady ([`RetestPlan::at_once`], no
/// [`RetestPlan::at_once_noise`]), at most [`FEW_SUSPECTS`] pairs were suspect, and every
/// retested direction of `still` read alike within [`QUIET_SPREAD`] in each of its passes. The
/// confirmation passes guard against chance: with hundreds of suspects some healthy direction is
/// slowed in both passes, while with two suspect pairs there are four directions for chance to
/// hit twice, alike within 2.5%, and a slow link reads alike every pass. Evidence:
/// `docs/evidence/settled-in-two-2026-12-05/` and `docs/evidence/confirm-skip-tail-model-2026-12-05/`.
pub fn settled_in_two(plan: &RetestPlan, retests: &[Measurement], still: &[Pair]) -> bool {
    let few = plan.suspects.len() <= FEW_SUSPECTS && plan.paths.is_empty();
    if still.is_empty() || !plan.at_once || plan.at_once_noise.is_some() || !few {
        return false;
    }
    let alike = |src: usize, dst: usize| {
        let v: Vec<f64> = retests
            .iter()
            .filter(|m| (m.src, m.dst) == (src, dst))
            .map(Measurement::score)
            .filter(|s| s.is_finite() && *s > 0.0)
            .collect();
        let (lo, hi) = v
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), &s| (lo.min(s), hi.max(s)));
        v.len() >= RETEST_PASSES && (hi / lo).ln() <= QUIET_SPREAD
    };
    still.iter().all(|&(a, b)| alike(a, b) && alike(b, a))
}

/// How the bar was set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// From the distribution (the default).
    Robust,
    /// `--threshold F`: F times the median of all directions.
    Threshold(f64),
}

/// Pairs on one host, or on two: judged apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Population {
    BetweenHosts,
    WithinHost,
}

/// One population's bar, and what the references showed alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judged {
    pub population: Population,
    pub bulk: Bulk,
    /// Reference pairs retested alone (robust rule, when there were suspects).
    pub references: Vec<Pair>,
    /// Median score of the references alone.
    pub reference_alone: Option<f64>,
    /// The bar a retest is judged against.
    pub bar_alone: f64,
    /// What this run could detect: the least drop of a direction's score below the healthy
    /// bulk's median that the rule names (0.07 for 7%; `1 - bar / median`, floor included).
    /// A PASS means no direction fell this far, or none that stayed there when retested alone.
    #[serde(default)]
    pub sensitivity: f64,
    /// How much a direction's score varied from one retest pass to the next (robust standard
    /// deviation of one retest, log units), where it set the bar alone (wider or narrower than
    /// the first pass's relative drop): see [`alone_spread`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alone_spread: Option<f64>,
    /// The retests ran pairs that share no host at once ([`RetestPlan::at_once`]) rather than
    /// one pair at a time: apart from the rounds' traffic either way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retested_at_once: bool,
    /// Retests at once that varied this much from pass to pass and ran again one pair at a time
    /// ([`RetestPlan::at_once_noise`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_once_noise: Option<f64>,
    /// The pairs still slow after two passes were decided on them, without the confirmation
    /// passes ([`RetestPlan::settled`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub settled_in_two_passes: bool,
}

/// The outcome of the checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub rule: Rule,
    /// Per population (between hosts first).
    pub judged: Vec<Judged>,
    /// Suspects of the first pass that were fine when retested alone (slow only under load).
    pub cleared: Vec<Pair>,
    /// Every confirmed slow pair.
    pub confirmed: Vec<SlowPair>,
    /// Where the confirmed pairs point, most general part first.
    pub blamed: Vec<Part>,
    pub pass: bool,
}

/// What to retest alone after the first pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RetestPlan {
    pub suspects: Vec<Pair>,
    pub references: Vec<Pair>,
    /// Pairs with a queue pair slower than its others (`-q`, [`super::paths`]), retested with
    /// all their queue pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<Pair>,
    /// Retest the pairs that share no host at once ([`crate::schedule::host_disjoint_groups`])
    /// instead of one at a time: set where the first pass, which ran disjoint pairs at once,
    /// shows that doing so did not disturb the figures ([`QUIET_SPREAD`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_once: bool,
    /// Retests at once that varied this much from pass to pass ([`unsteady_at_once`]) and were
    /// therefore run again one pair at a time (the largest such spread, log units).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_once_noise: Option<f64>,
    /// Fewer messages per retest than the first pass sent ([`retest_amount`]); None: the
    /// first pass's count and warm-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<RetestAmount>,
    /// The pairs still slow after [`RETEST_PASSES`] were not retested [`CONFIRM_PASSES`](super::defaults::CONFIRM_PASSES) more:
    /// few suspects, retested at once and steady, their passes alike ([`settled_in_two`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub settled: bool,
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

fn at_matrix_size<'a>(ms: &'a [Measurement], cfg: &PairwiseConfig) -> impl Iterator<Item = &'a Measurement> {
    let size = cfg.matrix_size() as u64;
    ms.iter().filter(move |m| m.bytes == size)
}

/// Measurements indexed by their (unordered) pair.
fn by_pair<'a>(ms: impl Iterator<Item = &'a Measurement>) -> HashMap<Pair, Vec<&'a Measurement>> {
    let mut index: HashMap<Pair, Vec<&Measurement>> = HashMap::new();
    for m in ms {
        index.entry(unordered(m)).or_default().push(m);
    }
    index
}

fn unordered(m: &Measurement) -> Pair {
    (m.src.min(m.dst), m.src.max(m.dst))
}

fn population(hosts: &[String], m: &Measurement) -> Population {
    if hosts[m.src] == hosts[m.dst] {
        Population::WithinHost
    } else {
        Population::BetweenHosts
    }
}

/// The scores of `first` at the matrix size in population `p` (every population for None).
fn scores_in(first: &[Measurement], cfg: &PairwiseConfig, hosts: &[String], p: Option<Population>) -> Vec<f64> {
    at_matrix_size(first, cfg)
        .filter(|m| p.is_none_or(|p| population(hosts, m) == p))
        .map(Measurement::score)
        .collect()
}

/// The bars of the first pass: one per population under the robust rule, one over all
/// directions under `--threshold` (reported as the population of most directions).
fn bars(first: &[Measurement], cfg: &PairwiseConfig, hosts: &[String]) -> Vec<(Population, Bulk)> {
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
fn bar_for(bars: &[(Population, Bulk)], rule: Rule, hosts: &[String], m: &Measurement) -> f64 {
    match rule {
        Rule::Threshold(_) => bars.first().map_or(0.0, |b| b.1.bar),
        Rule::Robust => bars
            .iter()
            .find(|b| b.0 == population(hosts, m))
            .map_or(0.0, |b| b.1.bar),
    }
}

pub(super) fn rule(cfg: &PairwiseConfig) -> Rule {
    cfg.threshold.map_or(Rule::Robust, Rule::Threshold)
}

/// Pairs with a direction below its bar in the first pass.
fn suspect_pairs(
    first: &[Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    bars: &[(Population, Bulk)],
) -> Vec<Pair> {
    let mut v: Vec<Pair> = at_matrix_size(first, cfg)
        .filter(|m| m.score() < bar_for(bars, rule(cfg), hosts, m))
        .map(unordered)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// What to retest alone: the suspects, and (robust rule) up to [`REFERENCES`] pairs per
/// population with suspects whose worst direction is nearest the bulk's median.
pub fn plan_retests(first: &[Measurement], cfg: &PairwiseConfig, hosts: &[String]) -> RetestPlan {
    let bars = bars(first, cfg, hosts);
    let suspects = suspect_pairs(first, cfg, hosts, &bars);
    let suspect_set: HashSet<Pair> = suspects.iter().copied().collect();
    let has_suspects = |p: Population| {
        at_matrix_size(first, cfg)
            .filter(|m| population(hosts, m) == p)
            .any(|m| suspect_set.contains(&unordered(m)))
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
            let in_pop = |m: &&Measurement| population(hosts, m) == *p;
            // Each pair's worst distance from the bulk's median, in log units.
            let mut distance: HashMap<Pair, f64> = HashMap::new();
            for m in at_matrix_size(first, cfg).filter(in_pop) {
                let pair = unordered(m);
                if suspect_set.contains(&pair) {
                    continue;
                }
                let d = (m.score().max(f64::MIN_POSITIVE) / bulk.median).ln().abs();
                let e = distance.entry(pair).or_insert(d);
                *e = e.max(d);
            }
            let mut candidates: Vec<(f64, Pair)> = distance.into_iter().map(|(p, d)| (d, p)).collect();
            candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let candidates: Vec<Pair> = candidates.into_iter().map(|c| c.1).collect();
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

/// How much one retest alone varies, from the retests themselves: each direction retested in
/// [`RETEST_PASSES`] passes gives the differences of its log scores from pass to pass, and their
/// lower median (scaled, a difference being two draws: [`sd_from_abs_lower_median`]) is the
/// robust standard deviation of one retest (log units). The lower median, since with the fewest
/// differences (six: one suspect and two references) a stall that slowed one pass of three
/// directions takes the plain median with it and widens the bar alone past a slow link; the
/// best-of-passes scores and the confirmation passes, not this bar, are what stand against such
/// a tail (evidence: `docs/evidence/settled-in-two-2026-12-05/`, the lower-median runs). A slow
/// link is slow in every pass, so a fault does not add to it: it is the measurement's own noise
/// alone, which the first pass under load cannot show. On a quiet fabric it is about 1% and
/// changes nothing; on a busy machine (TCP ranks outnumbering cores) a pair alone can vary by a
/// quarter between passes, and a bar 7% below the references would confirm healthy pairs; and
/// where the first pass's contention spread the cells over a factor of several while a pair
/// alone varies by a few percent, the first pass's bar would clear a pair alone at a fiftieth of
/// the references. None for fewer than [`ALONE_DIFFS`] differences.
///
/// The differences follow the order of `retests`, which is pass order: each rank appends its
/// passes as it runs them, the gather keeps each rank's order, and a confirmation pass
/// ([`CONFIRM_PASSES`](super::defaults::CONFIRM_PASSES)) comes after both others, adding one
/// difference per direction and pass.
pub fn alone_spread(retests: &[Measurement], hosts: &[String], p: Population) -> Option<f64> {
    let mut diffs = pass_diffs(retests, hosts, p);
    (diffs.len() >= ALONE_DIFFS).then(|| sd_from_abs_lower_median(&mut diffs) / std::f64::consts::SQRT_2)
}

/// Whether retests run at once ([`RetestPlan::at_once`]) kept the first pass's promise: the
/// largest pass-to-pass spread (robust standard deviation of one retest, log units, as
/// [`alone_spread`]) of a population in `retests` when it is above [`QUIET_SPREAD`], else None.
/// The first pass being quiet says pairs at once did not disturb each other then; a machine
/// whose load changes after it (another job) can still make the retests at once vary by a tenth
/// from pass to pass, and the bar alone, four such deviations wide, would then clear a node at
/// 85% (evidence: `docs/evidence/retest-idle-barrier-2026-12-05/`). Retests that fail this are
/// run again one pair at a time. Any difference counts here (a gate, not a bar): a population
/// with a single pair retested twice is judged on it.
pub fn unsteady_at_once(retests: &[Measurement], hosts: &[String]) -> Option<f64> {
    [Population::BetweenHosts, Population::WithinHost]
        .into_iter()
        .filter_map(|p| pass_to_pass(retests, hosts, p))
        .filter(|&sd| sd > QUIET_SPREAD)
        .reduce(f64::max)
}

/// The robust standard deviation of one measurement from its pass-to-pass differences (log
/// units, their plain median), None where there is no difference.
fn pass_to_pass(retests: &[Measurement], hosts: &[String], p: Population) -> Option<f64> {
    let mut diffs = pass_diffs(retests, hosts, p);
    (!diffs.is_empty()).then(|| MAD_TO_SD * median(&mut diffs) / std::f64::consts::SQRT_2)
}

/// The absolute differences of each direction's log scores from one retest pass to the next.
fn pass_diffs(retests: &[Measurement], hosts: &[String], p: Population) -> Vec<f64> {
    let mut by_dir: HashMap<(usize, usize), Vec<f64>> = HashMap::new();
    for m in retests.iter().filter(|m| population(hosts, m) == p) {
        let s = m.score();
        if s > 0.0 {
            by_dir.entry((m.src, m.dst)).or_default().push(s.ln());
        }
    }
    by_dir
        .values()
        .flat_map(|v| v.windows(2).map(|w| (w[1] - w[0]).abs()))
        .collect()
}

/// Bars alone closer than this (as a fraction of the references alone) are the same bar: the
/// retests' noise is reported only where it moved the bar.
const KEEP_EPSILON: f64 = 1e-9;

/// The population a pair was judged in: under a threshold the one judgement, else the pair's
/// own population (within a host or between hosts).
pub fn judged_for<'a>(judged: &'a [Judged], rule: Rule, hosts: &[String], pair: Pair) -> Option<&'a Judged> {
    let p = if hosts.get(pair.0) == hosts.get(pair.1) {
        Population::WithinHost
    } else {
        Population::BetweenHosts
    };
    match rule {
        Rule::Threshold(_) => judged.first(),
        Rule::Robust => judged.iter().find(|j| j.population == p),
    }
}

/// A pair's figure alone, as the verdict judges it: its worst direction, each direction at its
/// best retest pass (score units). None when the pair was not retested.
pub fn alone_score(retests: &[Measurement], pair: Pair) -> Option<f64> {
    let key = (pair.0.min(pair.1), pair.0.max(pair.1));
    let re: Vec<&Measurement> = retests.iter().filter(|m| unordered(m) == key).collect();
    (!re.is_empty()).then(|| worst_of_best(&re))
}

/// The worst direction of a pair's retests, each direction at its best pass.
fn worst_of_best(re: &[&Measurement]) -> f64 {
    let mut best: HashMap<(usize, usize), f64> = HashMap::new();
    for m in re {
        let b = best.entry((m.src, m.dst)).or_insert(f64::NEG_INFINITY);
        *b = b.max(m.score());
    }
    best.into_values().fold(f64::INFINITY, f64::min)
}

/// Decide, from the first pass and the retests (of suspects and references).
pub fn judge_pairs(
    first: &[Measurement],
    retests: &[Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    plan: &RetestPlan,
    topology: Option<&Topology>,
) -> Verdict {
    let rule = rule(cfg);
    let bars = bars(first, cfg, hosts);
    let judged: Vec<Judged> = bars
        .iter()
        .map(|(p, bulk)| {
            let refs: Vec<Pair> = plan
                .references
                .iter()
                .copied()
                .filter(|&(a, b)| (hosts[a] == hosts[b]) == (*p == Population::WithinHost))
                .collect();
            let mut alone: Vec<f64> = retests
                .iter()
                .filter(|m| refs.contains(&unordered(m)))
                .map(Measurement::score)
                .collect();
            let reference_alone = (!alone.is_empty()).then(|| median(&mut alone));
            // Below where the references ran alone: by four deviations of the retests' own
            // noise where there are enough retests to measure it (never less than the floor),
            // else by the first pass's relative drop. The retests run one pair at a time, so
            // their noise is theirs, not the first pass's contention: it widens the bar where a
            // pair alone varies more than the first pass showed, and narrows it where the first
            // pass was far noisier than a pair alone (a busy machine's first pass can spread over
            // a factor of 3, and a node at a fiftieth was cleared alone against a bar at 2%).
            let mut keep = bulk.bar / bulk.median.max(f64::MIN_POSITIVE);
            let mut from_noise = None;
            if let (Rule::Robust, Some(_)) = (rule, reference_alone) {
                if let Some(sd) = alone_spread(retests, hosts, *p) {
                    let k = (-(DEVIATIONS * sd).max(MIN_DROP)).exp();
                    if (k - keep).abs() > KEEP_EPSILON {
                        keep = k;
                        from_noise = Some(sd);
                    }
                }
            }
            let mut bar_alone = reference_alone.map_or(bulk.bar, |r| r * keep);
            if let (TestKind::Bw, Some(f)) = (cfg.test, cfg.expect_gbps) {
                bar_alone = bar_alone.max(f);
            }
            Judged {
                population: *p,
                sensitivity: bulk.drop_fraction().max(1.0 - keep),
                bulk: *bulk,
                references: refs,
                reference_alone,
                bar_alone,
                alone_spread: from_noise,
                retested_at_once: plan.at_once && reference_alone.is_some(),
                at_once_noise: plan.at_once_noise.filter(|_| reference_alone.is_some()),
                settled_in_two_passes: plan.settled && reference_alone.is_some(),
            }
        })
        .collect();
    let alone_bar = |pair: Pair| judged_for(&judged, rule, hosts, pair).map_or(0.0, |j| j.bar_alone);
    let mut confirmed = Vec::new();
    let mut cleared = Vec::new();
    let first_of = by_pair(at_matrix_size(first, cfg));
    let retest_of = by_pair(retests.iter());
    for (a, b) in suspect_pairs(first, cfg, hosts, &bars) {
        let slow_dirs: Vec<&Measurement> = first_of
            .get(&(a, b))
            .into_iter()
            .flatten()
            .copied()
            .filter(|m| m.score() < bar_for(&bars, rule, hosts, m))
            .collect();
        let worst_first = slow_dirs.iter().map(|m| m.score()).fold(f64::INFINITY, f64::min);
        let re: Vec<&Measurement> = retest_of.get(&(a, b)).cloned().unwrap_or_default();
        let worst_re = worst_of_best(&re);
        let retested = !re.is_empty();
        if retested && worst_re >= alone_bar((a, b)) {
            cleared.push((a, b));
            continue;
        }
        confirmed.push(SlowPair {
            a,
            b,
            host_a: hosts[a].clone(),
            host_b: hosts[b].clone(),
            first: worst_first,
            retest: retested.then_some(worst_re),
            directions: slow_dirs.iter().map(|m| (m.src, m.dst)).collect(),
        });
    }
    let tested: Vec<Pair> = {
        let mut v: Vec<Pair> = at_matrix_size(first, cfg).map(unordered).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    Verdict {
        rule,
        judged,
        cleared,
        blamed: blame(hosts, &tested, &confirmed, topology),
        pass: confirmed.is_empty(),
        confirmed,
    }
}

#[cfg(test)]
mod tests;
