//! A pairwise run repeated (`--repeat N`, `--repeat-for DURATION`), judged across its passes.
//!
//! Each pass is a whole run as without repeats (rounds, retests alone, its own verdict), so
//! contention still clears within each pass. What one pass cannot see is a part slow in some
//! whole passes and fine in others; across passes that is plain. A part (by level and name)
//! named in every pass, slow each time, stays **slow**; a part named in some passes and not in
//! others, or unstable within the passes it was named in, is **unstable** over time. Parts are
//! only ever named from the passes' own verdicts, so noise that no pass confirmed names nothing.
//!
//! Beside the judgement, each direction's figure over the passes (lowest, median, highest, and
//! the pass it was worst in), each named part's figure pass by pass (the median of its
//! directions), and the counters that moved in each pass ([`CounterMoves`]).
//!
//! [`plan`] decides whether another pass starts (a pure function of the passes' times).

pub mod plan;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::blame::Part;
use super::report::{score_to_value, unit, value};
use super::verdict::part_holds;
use super::{paths, PairwiseOutcome};
use crate::counters::{meaning, Meaning, Moved};
use crate::stats::median;

/// One pass of a repeated run: its whole outcome and when it ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pass {
    /// 1 first.
    pub index: usize,
    /// When it started: seconds after the first pass started, and the wall clock (Unix seconds).
    pub start_s: f64,
    pub started_at: f64,
    /// How long it took, counters and gathers included.
    pub seconds: f64,
    pub outcome: PairwiseOutcome,
}

/// The lowest, median and highest of figures over the passes (in the report's unit).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    /// Of `values`; None when there are none.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        let (min, max) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
        Some(Spread {
            min,
            median: median(&mut v),
            max,
        })
    }
}

/// A part some pass named, and how it read in every pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Named {
    /// The part as the pass that named it first described it (its counts are that pass's).
    pub part: Part,
    /// The passes (1 first) whose verdict named it slow, and those that named it unstable
    /// within the pass.
    pub slow_in: Vec<usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unstable_in: Vec<usize>,
    /// Its figure in each pass, in the report's unit: the median of its directions in the
    /// pass's rounds (None where it had none).
    pub figures: Vec<Option<f64>>,
    /// Those figures' spread, and the pass (1 first) it was worst in.
    pub spread: Option<Spread>,
    pub worst_pass: usize,
}

impl Named {
    /// The passes that named it, either way, in order.
    pub fn named_in(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.slow_in.iter().chain(&self.unstable_in).copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// One direction's figure over the passes (bandwidth: source to destination; latency and `-b`:
/// the pair, lower rank first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionSpread {
    pub src: usize,
    pub dst: usize,
    pub spread: Spread,
    /// The pass (1 first) it was worst in.
    pub worst_pass: usize,
}

/// What one counter source (a host's NIC port, interface or TCP) counted beyond traffic, over
/// the passes it counted in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterMoves {
    pub host: String,
    pub source: String,
    pub ranks: Vec<usize>,
    /// The passes (1 first) in which a counter other than traffic moved.
    pub passes: Vec<usize>,
    /// Those counters, summed over the passes.
    pub deltas: BTreeMap<String, u64>,
}

impl CounterMoves {
    /// As [`Moved`], for its lines.
    pub fn moved(&self) -> Moved {
        Moved {
            host: self.host.clone(),
            source: self.source.clone(),
            ranks: self.ranks.clone(),
            deltas: self.deltas.clone(),
        }
    }

    /// Whether an error counter (not congestion) moved.
    pub fn counted_errors(&self) -> bool {
        self.moved().counted_errors()
    }
}

/// The judgement across the passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverTime {
    pub passes: usize,
    /// The unit of every figure below (`Gb/sec`, `usec`).
    pub unit: String,
    /// Parts named slow in every pass.
    pub slow: Vec<Named>,
    /// Parts named in some passes and not in others (or unstable within a pass).
    pub unstable: Vec<Named>,
    /// Passes (1 first) with a slow queue-pair path (`-q`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slow_paths_in: Vec<usize>,
    /// Each pass's median direction, in order.
    pub medians: Vec<Option<f64>>,
    /// Every direction's spread over the passes.
    pub directions: Vec<DirectionSpread>,
    /// Counters that moved beyond traffic, per source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counters: Vec<CounterMoves>,
    /// `--on-unstable warn`: unstable parts do not fail the run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unstable_warns: bool,
    pub pass: bool,
}

/// The parts a pass's verdict named: slow (blamed) and unstable. With rails the run's verdict
/// holds every rail's parts, a node slow on all its rails as the node instead of its NICs, so
/// the rails' own verdicts are not read again.
fn named_by(o: &PairwiseOutcome) -> (Vec<&Part>, Vec<&Part>) {
    let slow = o.verdict.blamed.iter().collect();
    let unstable = o.verdict.unstable.iter().map(|u| &u.part).collect();
    (slow, unstable)
}

/// A part's identity across passes: its level and name (its counts differ from pass to pass).
fn key(p: &Part) -> String {
    format!("{} {}", p.level(), p.name())
}

/// Each direction's figure in one pass, as a score and in the report's unit.
type Figures = BTreeMap<(usize, usize), (f64, f64)>;

/// Each direction's figure at the matrix size in a pass's rounds (not its retests), as a score
/// (higher is better) and in the report's unit.
fn figures(o: &PairwiseOutcome) -> Figures {
    let size = o.config.matrix_size() as u64;
    o.measurements
        .iter()
        .filter(|m| m.bytes == size)
        .map(|m| ((m.src, m.dst), (m.score(), value(o.config.test, m))))
        .collect()
}

/// The median of a part's directions in one pass, as a score; None where it had none.
fn part_score(part: &Part, o: &PairwiseOutcome, fig: &Figures) -> Option<f64> {
    let mut v: Vec<f64> = fig
        .iter()
        .filter(|((a, b), _)| *a < o.hosts.len() && *b < o.hosts.len() && part_holds(part, &o.hosts, (*a, *b)))
        .map(|(_, (score, _))| *score)
        .collect();
    (!v.is_empty()).then(|| median(&mut v))
}

/// The index (1 first) of the lowest score, ties to the earliest.
fn worst_of(scores: &[Option<f64>]) -> usize {
    scores
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|s| (i, s)))
        .fold(None, |best: Option<(usize, f64)>, (i, s)| match best {
            Some((_, b)) if b <= s => best,
            _ => Some((i, s)),
        })
        .map_or(1, |(i, _)| i + 1)
}

/// Judge `passes` (in order): which parts are slow in every pass or unstable over them, each
/// direction's spread, the counters that moved. `unstable_warns`: `--on-unstable warn`.
pub fn judge(passes: &[Pass], unstable_warns: bool) -> OverTime {
    let n = passes.len();
    let test = passes.first().map_or(super::TestKind::Bw, |p| p.outcome.config.test);
    let to_value = |s: f64| score_to_value(test, s);
    let figs: Vec<_> = passes.iter().map(|p| figures(&p.outcome)).collect();

    // Every part named, by key, in the order first named.
    let mut order: Vec<String> = Vec::new();
    let mut named: BTreeMap<String, Named> = BTreeMap::new();
    for p in passes {
        let (slow, unstable) = named_by(&p.outcome);
        for (part, is_slow) in slow
            .iter()
            .map(|x| (*x, true))
            .chain(unstable.iter().map(|x| (*x, false)))
        {
            let k = key(part);
            let entry = named.entry(k.clone()).or_insert_with(|| {
                order.push(k);
                Named {
                    part: part.clone(),
                    slow_in: Vec::new(),
                    unstable_in: Vec::new(),
                    figures: Vec::new(),
                    spread: None,
                    worst_pass: 1,
                }
            });
            let list = if is_slow {
                &mut entry.slow_in
            } else {
                &mut entry.unstable_in
            };
            if !list.contains(&p.index) {
                list.push(p.index);
            }
        }
    }
    let (mut slow, mut unstable) = (Vec::new(), Vec::new());
    for k in order {
        let Some(mut x) = named.remove(&k) else { continue };
        let scores: Vec<Option<f64>> = passes
            .iter()
            .zip(&figs)
            .map(|(p, f)| part_score(&x.part, &p.outcome, f))
            .collect();
        x.figures = scores.iter().map(|s| s.map(to_value)).collect();
        x.spread = Spread::of(&x.figures.iter().flatten().copied().collect::<Vec<_>>());
        x.worst_pass = worst_of(&scores);
        if x.slow_in.len() == n && x.unstable_in.is_empty() {
            slow.push(x);
        } else {
            unstable.push(x);
        }
    }

    let slow_paths_in: Vec<usize> = passes
        .iter()
        .filter(|p| !p.outcome.paths.as_ref().is_none_or(paths::PathVerdict::pass))
        .map(|p| p.index)
        .collect();
    let medians = figs
        .iter()
        .map(|f| {
            let mut v: Vec<f64> = f.values().map(|(_, v)| *v).collect();
            (!v.is_empty()).then(|| median(&mut v))
        })
        .collect();
    let pass = slow.is_empty() && (unstable.is_empty() || unstable_warns) && slow_paths_in.is_empty();
    OverTime {
        passes: n,
        unit: unit(test).to_string(),
        slow,
        unstable,
        slow_paths_in,
        medians,
        directions: directions(&figs, to_value),
        counters: counter_moves(passes),
        unstable_warns,
        pass,
    }
}

/// Every direction measured in any pass, with its spread over the passes it ran in.
fn directions(figs: &[Figures], to_value: impl Fn(f64) -> f64) -> Vec<DirectionSpread> {
    let mut all: BTreeMap<(usize, usize), Vec<Option<f64>>> = BTreeMap::new();
    for (i, f) in figs.iter().enumerate() {
        for (&d, &(score, _)) in f {
            all.entry(d).or_insert_with(|| vec![None; figs.len()])[i] = Some(score);
        }
    }
    all.into_iter()
        .filter_map(|((src, dst), scores)| {
            let values: Vec<f64> = scores.iter().flatten().map(|&s| to_value(s)).collect();
            Some(DirectionSpread {
                src,
                dst,
                spread: Spread::of(&values)?,
                worst_pass: worst_of(&scores),
            })
        })
        .collect()
}

/// Per counter source, the passes in which a counter other than traffic moved, and those
/// counters summed.
fn counter_moves(passes: &[Pass]) -> Vec<CounterMoves> {
    let mut out: Vec<CounterMoves> = Vec::new();
    for p in passes {
        for m in &p.outcome.counters {
            let moved: BTreeMap<&String, u64> = m
                .deltas
                .iter()
                .filter(|(k, _)| meaning(&m.source, k) != Meaning::Traffic)
                .map(|(k, v)| (k, *v))
                .collect();
            if moved.is_empty() {
                continue;
            }
            let i = match out.iter().position(|c| c.host == m.host && c.source == m.source) {
                Some(i) => i,
                None => {
                    out.push(CounterMoves {
                        host: m.host.clone(),
                        source: m.source.clone(),
                        ranks: m.ranks.clone(),
                        passes: Vec::new(),
                        deltas: BTreeMap::new(),
                    });
                    out.len() - 1
                }
            };
            let c = &mut out[i];
            c.passes.push(p.index);
            for (k, v) in moved {
                *c.deltas.entry(k.clone()).or_insert(0) += v;
            }
        }
    }
    out
}
