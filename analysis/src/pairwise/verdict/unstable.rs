//! Parts slow at times and fine at others. A suspect of the first pass that is fine alone was
//! either slowed by what ran beside it (contention: a busy machine, a shared switch) or by a
//! moment of its own (a link that flaps, a NIC that drops to a fraction of its rate for seconds).
//! The two look alike pair by pair, but not slot by slot: contention slows the directions that
//! ran at the same time as the suspect too, while a part's own slow moment leaves them at the
//! bulk's speed. So a suspect direction is *slow apart* when most of the directions of its slot
//! (its pair's other direction left out) were above their bars. The suspects with a direction
//! slow apart, those clearly fine alone and those slow alone (a flapping part can be caught slow
//! in every retest of one pair), are blamed together as confirmed pairs are ([`blame`]): a node,
//! a NIC or a host link of several rank pairs so named, with at least one member fine alone, is
//! unstable, and its pairs slow alone are blamed as it, not again on their own. Single rank
//! pairs are not named (one slow moment of one stream is too little to call a part unstable),
//! nor uplinks yet.
//!
//! Chance is held off by the rest of the run: the part's share of directions slow apart must be
//! one chance would not give (a binomial tail under the rate outside it, by Laplace's rule so a
//! clean outside is not a rate of zero, below [`CHANCE`] over the parts named).

use std::collections::BTreeMap;

use super::alone::{alone_score, judged_for};
use super::bars::{bar_for, rule};
use super::cells::{at_matrix_size, distinct_pairs};
use super::{Evidence, Judged, Population, Rule};
use crate::pairwise::blame::{blame, Part, SlowPair};
use crate::pairwise::bulk::Bulk;
use crate::pairwise::topology::Topology;
use crate::pairwise::{Measurement, PairwiseConfig};
use crate::schedule::Pair;
use crate::stats::median;

use serde::{Deserialize, Serialize};

/// The most a part's share of directions slow apart may be explained by chance, for the rate of
/// such directions outside it.
const CHANCE: f64 = 1e-3;

/// A part whose pairs were slow in the first pass while the directions beside them were not,
/// and fine alone: its speed changed while the run lasted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unstable {
    /// The part, with the counts of its members slow apart and their first-pass and alone figures.
    pub part: Part,
    /// The first pass's slots (0 first) in which its directions were slow apart.
    pub slow_in: Vec<u32>,
    /// Slots in the first pass.
    pub slots: u32,
    /// Its slowest direction in the first pass (score units) and the median of the directions
    /// that ran beside it then.
    pub worst: f64,
    pub beside: f64,
    /// Its pairs alone: the lowest and highest of each pair's figure alone.
    pub alone_min: f64,
    pub alone_max: f64,
}

/// What the first pass's slots hold, and which directions were below their bars.
struct Slots<'a> {
    of: BTreeMap<u32, Vec<&'a Measurement>>,
    slow: Box<dyn Fn(&Measurement) -> bool + 'a>,
}

impl<'a> Slots<'a> {
    /// The cells of the first pass by slot; None where a cell has no slot (a run saved before
    /// slots were kept): then nothing can be told.
    fn of(
        cells: &[&'a Measurement],
        cfg: &'a PairwiseConfig,
        hosts: &'a [String],
        bars: &'a [(Population, Bulk)],
    ) -> Option<Slots<'a>> {
        let mut of: BTreeMap<u32, Vec<&Measurement>> = BTreeMap::new();
        for m in cells {
            of.entry(m.slot?).or_default().push(m);
        }
        let rule = rule(cfg);
        Some(Slots {
            of,
            slow: Box::new(move |m: &Measurement| m.score() < bar_for(bars, rule, hosts, m)),
        })
    }

    /// The directions of `m`'s slot other than `m`'s pair's.
    fn beside(&self, m: &Measurement) -> Vec<&'a Measurement> {
        let slot = m.slot.and_then(|k| self.of.get(&k)).map_or(&[][..], |v| v.as_slice());
        slot.iter().copied().filter(|o| o.pair() != m.pair()).collect()
    }

    /// Whether `m` was slow while most of the directions beside it were not.
    fn slow_apart(&self, m: &Measurement) -> bool {
        let beside = self.beside(m);
        let fine = beside.iter().filter(|o| !(self.slow)(o)).count();
        (self.slow)(m) && !beside.is_empty() && fine * 2 > beside.len()
    }
}

/// The unstable parts among the first pass's suspects: the `cleared` pairs that were clearly
/// fine alone (their figure alone nearer the references' than the bar, by [`judged`]'s
/// populations) and the `confirmed` ones, wherever a direction was slow apart, blamed together;
/// a part with at least one member fine alone (else it is slow, not unstable).
pub(super) fn unstable_parts(
    evidence: Evidence<'_>,
    bars: &[(Population, Bulk)],
    judged: &[Judged],
    cleared: &[Pair],
    confirmed: &[SlowPair],
    topology: Option<&Topology>,
) -> Vec<Unstable> {
    let Evidence {
        first,
        retests,
        cfg,
        hosts,
    } = evidence;
    let cells: Vec<&Measurement> = at_matrix_size(first, cfg).collect();
    let Some(slots) = Slots::of(&cells, cfg, hosts, bars) else {
        return Vec::new();
    };
    // Each cell with whether it was slow apart, decided once: the parts below count them.
    let flagged: Vec<(&Measurement, bool)> = cells.iter().map(|&m| (m, slots.slow_apart(m))).collect();
    let apart: Vec<&Measurement> = flagged.iter().filter(|x| x.1).map(|x| x.0).collect();
    let fine_alone: Vec<Pair> = cleared
        .iter()
        .copied()
        .filter(|&p| clearly_fine_alone(retests, judged, rule(cfg), hosts, p))
        .collect();
    let suspects = fine_alone.iter().copied().chain(confirmed.iter().map(|c| (c.a, c.b)));
    let candidates: Vec<SlowPair> = suspects
        .filter_map(|(a, b)| {
            let dirs: Vec<&Measurement> = apart.iter().copied().filter(|m| m.pair() == (a, b)).collect();
            let worst = dirs.iter().map(|m| m.score()).fold(f64::INFINITY, f64::min);
            (!dirs.is_empty()).then(|| SlowPair {
                a,
                b,
                host_a: hosts[a].clone(),
                host_b: hosts[b].clone(),
                first: worst,
                retest: alone_score(retests, (a, b)),
                directions: dirs.iter().map(|m| (m.src, m.dst)).collect(),
            })
        })
        .collect();
    if !candidates.iter().any(|c| fine_alone.contains(&(c.a, c.b))) {
        return Vec::new();
    }
    let tested = distinct_pairs(cells.iter().copied());
    let parts = blame(hosts, &tested, &candidates, topology);
    let named = parts.len().max(1) as f64;
    parts
        .into_iter()
        .filter_map(|part| {
            let inside = |m: &Measurement| touches(&part, hosts, m);
            let some_fine = candidates
                .iter()
                .any(|c| fine_alone.contains(&(c.a, c.b)) && holds(&part, hosts, c));
            if !several(&part) || !some_fine {
                return None;
            }
            let (ins, outs): (Vec<&(&Measurement, bool)>, Vec<_>) = flagged.iter().partition(|x| inside(x.0));
            let apart_in: Vec<&Measurement> = ins.iter().filter(|x| x.1).map(|x| x.0).collect();
            let apart_out = outs.iter().filter(|x| x.1).count();
            // Laplace's rule for the rate outside: a clean outside is not a rate of zero. On a
            // small population (4 hosts: 12 directions, 6 outside a node) a clean outside says
            // little, and one or two directions slow apart inside are what chance gives there.
            let rate = (apart_out as f64 + 1.0) / (outs.len() as f64 + 2.0);
            let by_chance = upper_tail(ins.len(), apart_in.len(), rate) >= CHANCE / named;
            if by_chance || apart_in.is_empty() {
                return None;
            }
            Some(describe(part, &apart_in, &slots, &candidates, hosts))
        })
        .collect()
}

/// Whether pair `p`, cleared, ran alone nearer where the references of its population ran alone
/// than its bar: fine, not a slow pair that crept over the bar (a steady fault near the bar is
/// slow, not unstable).
fn clearly_fine_alone(retests: &[Measurement], judged: &[Judged], rule: Rule, hosts: &[String], p: Pair) -> bool {
    let (Some(alone), Some(j)) = (alone_score(retests, p), judged_for(judged, rule, hosts, p)) else {
        return false;
    };
    let healthy = j.reference_alone.unwrap_or(j.bulk.median);
    alone >= (j.bar_alone + healthy) / 2.0
}

/// Whether pair `p` is one of `part`'s members (its pair crosses the part).
pub(super) fn holds(part: &Part, hosts: &[String], p: &SlowPair) -> bool {
    part_holds(part, hosts, (p.a, p.b))
}

/// Whether the rank pair `(a, b)` crosses `part`.
pub fn part_holds(part: &Part, hosts: &[String], (a, b): Pair) -> bool {
    touches(part, hosts, &Measurement::bandwidth(a, b, 0, 0, 0.0, false))
}

/// Whether a part stands for several members slow apart (a node's or NIC's host links or pairs,
/// a host link's rank pairs); a single rank pair is not named unstable, nor an uplink yet.
fn several(part: &Part) -> bool {
    match part {
        Part::Node { counts, .. }
        | Part::Nic { counts, .. }
        | Part::RailNic { counts, .. }
        | Part::HostLink { counts, .. } => counts.slow >= 2,
        Part::Uplink { .. } | Part::RankPair { .. } => false,
    }
}

/// Whether direction `m` crosses `part`.
fn touches(part: &Part, hosts: &[String], m: &Measurement) -> bool {
    let (hs, hd) = (&hosts[m.src], &hosts[m.dst]);
    match part {
        Part::Node { host, .. } => hs == host || hd == host,
        Part::Nic { rank, .. } | Part::RailNic { rank, .. } => m.src == *rank || m.dst == *rank,
        Part::HostLink { host_a, host_b, .. } => (hs == host_a && hd == host_b) || (hs == host_b && hd == host_a),
        Part::Uplink { .. } => false,
        Part::RankPair { pair } => m.pair() == (pair.a, pair.b),
    }
}

/// The figures of an unstable part from its directions slow apart.
fn describe(
    part: Part,
    apart_in: &[&Measurement],
    slots: &Slots<'_>,
    candidates: &[SlowPair],
    hosts: &[String],
) -> Unstable {
    let mut slow_in: Vec<u32> = apart_in.iter().filter_map(|m| m.slot).collect();
    slow_in.sort_unstable();
    slow_in.dedup();
    let worst = apart_in
        .iter()
        .copied()
        .min_by(|x, y| x.score().total_cmp(&y.score()))
        .expect("a part slow apart has a direction slow apart");
    let mut beside: Vec<f64> = slots
        .beside(worst)
        .iter()
        .filter(|o| !touches(&part, hosts, o))
        .map(|o| o.score())
        .collect();
    let alone: Vec<f64> = candidates
        .iter()
        .filter(|c| apart_in.iter().any(|m| m.pair() == (c.a, c.b)))
        .filter_map(|c| c.retest)
        .collect();
    Unstable {
        slow_in,
        slots: slots.of.keys().next_back().map_or(0, |k| k + 1),
        worst: worst.score(),
        beside: if beside.is_empty() { 0.0 } else { median(&mut beside) },
        alone_min: alone.iter().copied().fold(f64::INFINITY, f64::min),
        alone_max: alone.iter().copied().fold(0.0, f64::max),
        part,
    }
}

/// P(X >= k) for X ~ Binomial(n, p).
fn upper_tail(n: usize, k: usize, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    let ln_choose = |n: usize, i: usize| -> f64 { (1..=i).map(|j| ((n + 1 - j) as f64 / j as f64).ln()).sum() };
    (k..=n)
        .map(|i| (ln_choose(n, i) + i as f64 * p.ln() + (n - i) as f64 * (1.0 - p).ln()).exp())
        .sum::<f64>()
        .min(1.0)
}

#[cfg(test)]
mod tests {
    use super::upper_tail;

    #[test]
    fn the_binomial_tail_against_values_worked_by_hand() {
        // P(X >= 2), n = 3, p = 1/2: (3 + 1) / 8.
        assert!((upper_tail(3, 2, 0.5) - 0.5).abs() < 1e-12);
        // P(X >= 5), n = 5, p = 1/22: (1/22)^5.
        assert!((upper_tail(5, 5, 1.0 / 22.0) - (1.0f64 / 22.0).powi(5)).abs() < 1e-18);
        // P(X >= 1), n = 10, p = 0.1: 1 - 0.9^10 = 0.6513215599.
        assert!((upper_tail(10, 1, 0.1) - 0.651_321_559_9).abs() < 1e-9);
        assert_eq!(upper_tail(4, 0, 0.3), 1.0);
    }
}
