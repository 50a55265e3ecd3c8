//! Parts slow at times and fine at others. A suspect of the first pass that is fine alone was
//! either slowed by what ran beside it (contention: a busy machine, a shared switch) or by a
//! moment of its own (a link that flaps, a NIC that drops to a fraction of its rate for seconds).
//! The two look alike pair by pair, but not slot by slot: contention slows the directions that
//! ran at the same time as the suspect too, while a part's own slow moment leaves them at the
//! bulk's speed. So a suspect direction is *slow apart* when most of the directions of its slot
//! (its pair's other direction left out) were above their bars. The suspects with a direction
//! slow apart, those clearly fine alone and those slow alone (a flapping part can be caught slow
//! in every retest of one pair), are the moments a changing part may explain; the parts that
//! explain them are chosen by the cover of [`super::cover`] (the fewest parts, each holding more
//! slow moments than the rest of the run makes likely by chance), among nodes, host links and
//! NICs of two rank pairs or more with at least one member fine alone (else the part is slow,
//! not unstable). Its pairs slow alone are blamed as it, not again on their own. Single rank
//! pairs are not named (one slow moment of one stream is too little to call a part unstable),
//! nor uplinks yet.

use std::collections::BTreeMap;

use std::collections::BTreeSet;

use super::alone::{alone_score, judged_for};
use super::bars::{bar_for, rule};
use super::cells::{at_matrix_size, distinct_pairs};
use super::cover::{cover, Moments, Need, Piece, CHANCE, SCREEN};
use super::{Evidence, Judged, Population, Rule};
use crate::pairwise::blame::{blame, host_indices, slow_counts, Part, SlowPair, SwitchEnd};
use crate::pairwise::bulk::Bulk;
use crate::pairwise::defaults::{MAX_WATCHED, WATCHED_A_PART, WATCH_REFERENCES};
use crate::pairwise::topology::Topology;
use crate::pairwise::{Measurement, PairwiseConfig};
use crate::schedule::Pair;
use crate::stats::median;

use serde::{Deserialize, Serialize};

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
    /// The watch's passes (0 first; its pairs retested spaced over time) in which its
    /// directions were slow apart, of `watch_passes`; none where nothing was watched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watch_slow_in: Vec<u32>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub watch_passes: u32,
    /// Its slowest direction in the first pass (score units) and the median of the directions
    /// that ran beside it then.
    pub worst: f64,
    pub beside: f64,
    /// Its pairs alone: the lowest and highest of each pair's figure alone.
    pub alone_min: f64,
    pub alone_max: f64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The passes of the watch: one more than the highest slot of its retests.
fn slots_in(watched: &[Measurement]) -> usize {
    watched
        .iter()
        .filter_map(|m| m.slot)
        .max()
        .map_or(0, |k| k as usize + 1)
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
) -> Changing {
    let Evidence {
        first,
        retests,
        watched,
        cfg,
        hosts,
    } = evidence;
    let cells: Vec<&Measurement> = at_matrix_size(first, cfg).collect();
    let Some(slots) = Slots::of(&cells, cfg, hosts, bars) else {
        return Changing::default();
    };
    // Each cell with whether it was slow apart, decided once: the parts below count them.
    let mut flagged: Vec<(&Measurement, bool)> = cells.iter().map(|&m| (m, slots.slow_apart(m))).collect();
    let apart: Vec<&Measurement> = flagged.iter().filter(|x| x.1).map(|x| x.0).collect();
    let fine_alone: Vec<Pair> = cleared
        .iter()
        .copied()
        .filter(|&p| clearly_fine_alone(retests, judged, rule(cfg), hosts, p))
        .collect();
    // A pair slow alone may be a changing part's, caught in a slow moment; but one that a steady
    // part of several pairs explains (a slow host link, node or NIC: every pair slow alone) is
    // that part's, and its slow moments are not a changing part's to take.
    let tested_pairs = distinct_pairs(cells.iter().copied());
    let steady: Vec<Part> = blame(hosts, &tested_pairs, confirmed, topology)
        .into_iter()
        .filter(|p| match p {
            Part::Uplink { counts, .. }
            | Part::Node { counts, .. }
            | Part::HostLink { counts, .. }
            | Part::Nic { counts, .. }
            | Part::RailNic { counts, .. } => counts.slow_pairs >= 2,
            Part::RankPair { .. } => false,
        })
        .collect();
    let held_steady = |c: &&SlowPair| steady.iter().any(|p| holds(p, hosts, c));
    let slow_alone = confirmed.iter().filter(|c| !held_steady(c)).map(|c| (c.a, c.b));
    let suspects = fine_alone.iter().copied().chain(slow_alone);
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
        return Changing::default();
    }
    // The watch's passes are moments too: a direction below its bar alone while most of the
    // pass's other directions were not.
    let first_slow: BTreeSet<Pair> = apart.iter().map(|m| m.pair()).collect();
    let watch_cells = watch_moments(watched, &first_slow, judged, rule(cfg), hosts);
    let passes = slots_in(watched);
    flagged.extend(watch_cells.iter().copied());
    let (host_idx, names) = host_indices(hosts);
    let suspect_pairs: BTreeSet<Pair> = candidates.iter().map(|c| (c.a, c.b)).collect();
    let moments: Vec<usize> = (0..flagged.len())
        .filter(|&i| flagged[i].1 && suspect_pairs.contains(&flagged[i].0.pair()))
        .collect();
    let evidence = Moments {
        cells: &flagged,
        suspects: &moments,
        fine_alone: &fine_alone,
    };
    let taken = cover(&host_idx, &evidence, (CHANCE, Need::ToName));
    let tested = distinct_pairs(cells.iter().copied());
    // Parts short of being named but more than a clean run shows: their pairs fine alone are
    // watched, once a run, with what tells them from their neighbours.
    let watch = if watched.is_empty() {
        let screened = cover(&host_idx, &evidence, (SCREEN, Need::ToWatch));
        let fresh = screened
            .iter()
            .map(|(p, _)| *p)
            .filter(|p| !taken.iter().any(|(q, _)| q == p));
        let slow_pairs: Vec<Pair> = moments.iter().map(|&i| flagged[i].0.pair()).collect();
        let fresh: Vec<Piece> = fresh.collect();
        let mut watch: Vec<Pair> = Vec::new();
        for &piece in &fresh {
            for p in to_watch(piece, &host_idx, &slow_pairs, &fine_alone, &tested) {
                if !watch.contains(&p) {
                    watch.push(p);
                }
            }
        }
        watch.truncate(MAX_WATCHED);
        if !watch.is_empty() {
            let refs = watch_references(&fresh, &host_idx, &flagged, &tested);
            watch.extend(refs);
        }
        watch.sort_unstable();
        watch
    } else {
        Vec::new()
    };
    let unstable = taken
        .into_iter()
        .map(|(piece, apart_in)| {
            let part = as_part(piece, &apart_in, (&host_idx, &names), &tested, &candidates, topology);
            describe(part, &apart_in, (&slots, passes), &candidates, hosts)
        })
        .collect();
    Changing { unstable, watch }
}

/// The pairs that watch `piece`: up to [`WATCHED_A_PART`] of its slow pairs fine alone; where
/// that is one pair (a host link of one rank pair), a tested pair from each of its hosts to a
/// third as well, fine in the first pass where there is one, so the watch tells a link that
/// changes from either end's node or NIC.
fn to_watch(piece: Piece, host_idx: &[usize], slow: &[Pair], fine_alone: &[Pair], tested: &[Pair]) -> Vec<Pair> {
    let crosses = |(a, b): Pair| piece.crosses(host_idx, &Measurement::bandwidth(a, b, 0, 0, 0.0, false));
    let mut mine: Vec<Pair> = slow
        .iter()
        .copied()
        .filter(|&p| fine_alone.contains(&p) && crosses(p))
        .collect();
    mine.sort_unstable();
    mine.dedup();
    mine.truncate(WATCHED_A_PART);
    if let [(a, b)] = mine[..] {
        let (ha, hb) = (host_idx[a], host_idx[b]);
        for (end, other) in [(ha, hb), (hb, ha)] {
            let from_end = |&&(x, y): &&Pair| {
                let (hx, hy) = (host_idx[x], host_idx[y]);
                (hx == end && hy != other && hy != end) || (hy == end && hx != other && hx != end)
            };
            let neighbour = tested
                .iter()
                .filter(from_end)
                .find(|p| !slow.contains(p))
                .or_else(|| tested.iter().find(from_end));
            mine.extend(neighbour.copied());
        }
    }
    mine
}

/// The watch's references: up to [`WATCH_REFERENCES`] tested pairs between hosts that share no
/// host with the watched parts nor with each other and had no direction slow apart in the first
/// pass. Each pass sets what a slow moment is against them (a watched direction slow while they
/// ran at speed), and the more of the watch's cells lie outside the watched part, the less its
/// slow moments there can be chance.
fn watch_references(
    parts: &[Piece],
    host_idx: &[usize],
    flagged: &[(&Measurement, bool)],
    tested: &[Pair],
) -> Vec<Pair> {
    let mut busy: BTreeSet<usize> = BTreeSet::new();
    for p in parts {
        match *p {
            Piece::Node(h) => {
                busy.insert(h);
            }
            Piece::Link(a, b) => busy.extend([a, b]),
            Piece::Nic(r) => {
                busy.insert(host_idx[r]);
            }
        }
    }
    let slow: BTreeSet<Pair> = flagged.iter().filter(|x| x.1).map(|x| x.0.pair()).collect();
    let mut refs = Vec::new();
    for &(a, b) in tested {
        if refs.len() == WATCH_REFERENCES {
            break;
        }
        let (ha, hb) = (host_idx[a], host_idx[b]);
        if ha != hb && !busy.contains(&ha) && !busy.contains(&hb) && !slow.contains(&(a, b)) {
            busy.extend([ha, hb]);
            refs.push((a, b));
        }
    }
    refs
}

/// What the parts that changed showed: those named unstable, and the pairs to watch (retest
/// spaced over time) before the verdict is final.
#[derive(Default)]
pub(super) struct Changing {
    pub unstable: Vec<Unstable>,
    pub watch: Vec<Pair>,
}

/// The watch's retests as cells of the cover, each with whether it was slow apart: below its
/// population's bar alone while most of the references of its pass (its slot: the watched
/// pairs with no direction slow apart in the first pass, `first_slow`) were not.
fn watch_moments<'a>(
    watched: &'a [Measurement],
    first_slow: &BTreeSet<Pair>,
    judged: &[Judged],
    rule: Rule,
    hosts: &[String],
) -> Vec<(&'a Measurement, bool)> {
    let slow = |m: &Measurement| judged_for(judged, rule, hosts, m.pair()).is_some_and(|j| m.score() < j.bar_alone);
    watched
        .iter()
        .map(|m| {
            let beside: Vec<&Measurement> = watched
                .iter()
                .filter(|o| o.slot == m.slot && o.pair() != m.pair() && !first_slow.contains(&o.pair()))
                .collect();
            let fine = beside.iter().filter(|o| !slow(o)).count();
            (m, slow(m) && !beside.is_empty() && fine * 2 > beside.len())
        })
        .collect()
}

/// A piece the cover took as the part a report names, with its counts: of a node, its host
/// links with a direction slow apart out of those tested; of a host link or a NIC, its rank
/// pairs so.
fn as_part(
    piece: Piece,
    apart_in: &[&Measurement],
    (host_idx, names): (&[usize], &[&str]),
    tested: &[Pair],
    candidates: &[SlowPair],
    topology: Option<&Topology>,
) -> Part {
    let mine = |p: Pair| piece.crosses(host_idx, &Measurement::bandwidth(p.0, p.1, 0, 0, 0.0, false));
    let slow: BTreeSet<Pair> = apart_in.iter().map(|m| m.pair()).collect();
    let pairs = candidates.iter().filter(|c| slow.contains(&(c.a, c.b)));
    let link = |(a, b): Pair| (host_idx[a].min(host_idx[b]), host_idx[a].max(host_idx[b]));
    let between = |p: &&Pair| host_idx[p.0] != host_idx[p.1];
    match piece {
        Piece::Node(h) => {
            let links: BTreeSet<(usize, usize)> = tested
                .iter()
                .filter(between)
                .filter(|p| mine(**p))
                .map(|&p| link(p))
                .collect();
            let slow_links: BTreeSet<(usize, usize)> = slow.iter().filter(between).map(|&p| link(p)).collect();
            Part::Node {
                host: names[h].to_string(),
                counts: slow_counts(slow_links.len(), links.len(), pairs),
            }
        }
        Piece::Link(a, b) => Part::HostLink {
            host_a: names[a].to_string(),
            host_b: names[b].to_string(),
            counts: slow_counts(slow.len(), tested.iter().filter(|p| mine(**p)).count(), pairs),
            port_a: SwitchEnd::of(topology, names[a]),
            port_b: SwitchEnd::of(topology, names[b]),
        },
        Piece::Nic(r) => {
            let host = names[host_idx[r]];
            Part::Nic {
                rank: r,
                host: host.to_string(),
                counts: slow_counts(
                    slow.len(),
                    tested.iter().filter(between).filter(|p| mine(**p)).count(),
                    pairs,
                ),
                port: SwitchEnd::of(topology, host),
            }
        }
    }
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
    (slots, watch_passes): (&Slots<'_>, usize),
    candidates: &[SlowPair],
    hosts: &[String],
) -> Unstable {
    let (watch_in, first_in): (Vec<&Measurement>, Vec<&Measurement>) = apart_in.iter().copied().partition(|m| m.retest);
    let slots_of = |ms: &[&Measurement]| {
        let mut v: Vec<u32> = ms.iter().filter_map(|m| m.slot).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let (slow_in, watch_slow_in) = (slots_of(&first_in), slots_of(&watch_in));
    let worst = first_in
        .iter()
        .chain(&watch_in)
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
        watch_slow_in,
        watch_passes: watch_passes as u32,
        slots: slots.of.keys().next_back().map_or(0, |k| k + 1),
        worst: worst.score(),
        beside: if beside.is_empty() { 0.0 } else { median(&mut beside) },
        alone_min: alone.iter().copied().fold(f64::INFINITY, f64::min),
        alone_max: alone.iter().copied().fold(0.0, f64::max),
        part,
    }
}
