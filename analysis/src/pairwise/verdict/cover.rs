//! Which changing parts explain the first pass's slow moments: the fewest parts, each holding
//! more of them than chance gives.
//!
//! The model: a direction between hosts crosses its two nodes, their host link and its two
//! ranks' NICs. A part whose speed changes slows every direction crossing it while it is low
//! and none of the others; chance (a stalled process, contention its slot did not show) makes
//! slow moments anywhere, at the rate the rest of the run shows. The cover is greedy, as a
//! weighted set cover is: of the parts crossed by slow moments of two rank pairs or more, the
//! one whose count of slow moments is least likely by chance (the hypergeometric tail: how
//! likely that many of the run's slow moments land on its cells, given how many there were; the
//! first pass and the watch each by their own, as their moments come at their own rates, and
//! the two tails joined by Fisher's method) is taken when that tail is below [`CHANCE`] over the
//! parts in the running; its moments are then explained, and
//! the next is sought among the moments left. So a node is named over its host links when its
//! moments are spread over several of them (one part, not several), a host link over its
//! nodes when the moments all lie on it, a NIC over its node when the node's other ranks ran at
//! speed: the part with the fewest directions for the same moments is the likelier one. No
//! share of a part's members needs to be slow: a node low for a third of the run is slow in
//! about a third of its slots, and that is named where the rest of the run was clean enough
//! for it not to be chance.

use std::collections::{BTreeMap, BTreeSet};

use crate::pairwise::Measurement;
use crate::schedule::Pair;

/// The most a part's count of slow moments may be explained by chance, for the rate of such
/// moments outside it, over the parts in the running, for the part to be named.
pub(super) const CHANCE: f64 = 1e-3;

/// The same, for a part to be watched: its pairs retested spaced over time before the verdict
/// is final ([`WATCH_PASSES`](crate::pairwise::defaults::WATCH_PASSES)). A clean quiet run
/// seldom has two slow moments on one part; a noisy one has them everywhere, and the rate
/// outside then keeps its parts out of the watch as out of the verdict.
pub(super) const SCREEN: f64 = 0.25;

/// A part of the fabric as the cover sees it: a host (by index), the link between two hosts
/// (lower index first) or one rank's NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Piece {
    Node(usize),
    Link(usize, usize),
    Nic(usize),
}

impl Piece {
    /// Whether direction `m` crosses it; `host_idx` is every rank's host index.
    pub(super) fn crosses(self, host_idx: &[usize], m: &Measurement) -> bool {
        let (hs, hd) = (host_idx[m.src], host_idx[m.dst]);
        match self {
            Piece::Node(h) => hs == h || hd == h,
            Piece::Link(a, b) => (hs.min(hd), hs.max(hd)) == (a, b) && hs != hd,
            Piece::Nic(r) => m.src == r || m.dst == r,
        }
    }

    /// The pieces direction `m` crosses.
    fn of(host_idx: &[usize], m: &Measurement) -> Vec<Piece> {
        let (hs, hd) = (host_idx[m.src], host_idx[m.dst]);
        let mut v = vec![Piece::Node(hs), Piece::Nic(m.src), Piece::Nic(m.dst)];
        if hs != hd {
            v.extend([Piece::Node(hd), Piece::Link(hs.min(hd), hs.max(hd))]);
        }
        v
    }
}

/// What the cover is drawn from: every cell of the first pass (and of the watch) with whether
/// it was slow apart (slow while the directions beside it were not), the cells (by index) that
/// are slow moments of suspects a changing part may explain, and the pairs among them that ran
/// fine alone.
pub(super) struct Moments<'a> {
    pub cells: &'a [(&'a Measurement, bool)],
    pub suspects: &'a [usize],
    pub fine_alone: &'a [Pair],
}

/// Where a piece can be told from the pieces around it: a node with host links to two hosts or
/// more, any host link tested, a NIC of a host with several ranks and pairs to two ranks
/// elsewhere or more. A node of two hosts is its one link; a NIC alone on its host is its node.
struct Shape {
    links_of_host: BTreeMap<usize, BTreeSet<usize>>,
    pairs_of_link: BTreeMap<(usize, usize), BTreeSet<Pair>>,
    peers_of_rank: BTreeMap<usize, BTreeSet<usize>>,
    ranks_of_host: BTreeMap<usize, BTreeSet<usize>>,
}

impl Shape {
    fn of(host_idx: &[usize], cells: &[(&Measurement, bool)]) -> Shape {
        let mut s = Shape {
            links_of_host: BTreeMap::new(),
            pairs_of_link: BTreeMap::new(),
            peers_of_rank: BTreeMap::new(),
            ranks_of_host: BTreeMap::new(),
        };
        for (m, _) in cells {
            let (hs, hd) = (host_idx[m.src], host_idx[m.dst]);
            s.ranks_of_host.entry(hs).or_default().insert(m.src);
            s.ranks_of_host.entry(hd).or_default().insert(m.dst);
            if hs == hd {
                continue;
            }
            s.links_of_host.entry(hs).or_default().insert(hd);
            s.links_of_host.entry(hd).or_default().insert(hs);
            s.pairs_of_link
                .entry((hs.min(hd), hs.max(hd)))
                .or_default()
                .insert(m.pair());
            s.peers_of_rank.entry(m.src).or_default().insert(m.dst);
            s.peers_of_rank.entry(m.dst).or_default().insert(m.src);
        }
        s
    }

    fn told_apart(&self, host_idx: &[usize], p: Piece) -> bool {
        let count = |n: Option<usize>| n.unwrap_or(0) >= 2;
        match p {
            Piece::Node(h) => count(self.links_of_host.get(&h).map(BTreeSet::len)),
            Piece::Link(a, b) => self.pairs_of_link.contains_key(&(a, b)),
            Piece::Nic(r) => {
                count(self.ranks_of_host.get(&host_idx[r]).map(BTreeSet::len))
                    && count(self.peers_of_rank.get(&r).map(BTreeSet::len))
            }
        }
    }
}

/// How many slow moments a piece needs to be in the running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    /// To be named: moments of two rank pairs or more, or of one rank pair at two moments or
    /// more (the first pass and a watch pass, or two watch passes). One slow moment of one
    /// stream is too little to call a part that changes.
    ToName,
    /// To be watched: two slow directions (a pair's two in one slot will do).
    ToWatch,
}

/// What a piece's unexplained moments span.
#[derive(Default)]
struct Seen {
    pairs: BTreeSet<Pair>,
    /// The first pass (None) and the watch's passes (Some): a pair's two directions may run in
    /// two slots of the first pass, but that is one moment of the pair.
    times: BTreeSet<Option<u32>>,
    directions: usize,
}

impl Seen {
    fn add(&mut self, m: &Measurement) {
        self.pairs.insert(m.pair());
        self.times.insert(if m.retest { m.slot } else { None });
        self.directions += 1;
    }

    fn enough(&self, need: Need) -> bool {
        match need {
            Need::ToName => self.pairs.len() >= 2 || self.times.len() >= 2,
            Need::ToWatch => self.directions >= 2,
        }
    }
}

/// The changing pieces that explain the moments, each by a tail below `chance` over the pieces
/// in the running (those with what `need` asks), in the order taken, each with its cells slow
/// apart.
pub(super) fn cover<'a>(
    host_idx: &[usize],
    moments: &Moments<'a>,
    (chance, need): (f64, Need),
) -> Vec<(Piece, Vec<&'a Measurement>)> {
    let shape = Shape::of(host_idx, moments.cells);
    // Cells crossing each piece over the whole run, and its cells slow apart (by index).
    // Per stratum (the first pass, the watch: slow moments come at their own rates in each),
    // the cells crossing each piece over the whole run, and its cells slow apart (by index).
    let stratum = |i: usize| usize::from(moments.cells[i].0.retest);
    let mut cells_of: BTreeMap<Piece, [usize; 2]> = BTreeMap::new();
    let mut apart_of: BTreeMap<Piece, Vec<usize>> = BTreeMap::new();
    let mut all = [0usize; 2];
    for (i, &(m, apart)) in moments.cells.iter().enumerate() {
        all[stratum(i)] += 1;
        for p in Piece::of(host_idx, m) {
            cells_of.entry(p).or_default()[stratum(i)] += 1;
            if apart {
                apart_of.entry(p).or_default().push(i);
            }
        }
    }
    let mut explained = vec![false; moments.cells.len()];
    let mut taken = Vec::new();
    loop {
        let mut unexplained = [0usize; 2];
        for i in (0..moments.cells.len()).filter(|&i| moments.cells[i].1 && !explained[i]) {
            unexplained[stratum(i)] += 1;
        }
        // The pieces whose unexplained moments are enough to tell.
        let mut seen: BTreeMap<Piece, Seen> = BTreeMap::new();
        for &i in moments.suspects.iter().filter(|&&i| !explained[i]) {
            let m = moments.cells[i].0;
            for p in Piece::of(host_idx, m) {
                seen.entry(p).or_default().add(m);
            }
        }
        let running: Vec<(Piece, &BTreeSet<Pair>)> = seen
            .iter()
            .filter(|(p, s)| s.enough(need) && shape.told_apart(host_idx, **p))
            .map(|(p, s)| (*p, &s.pairs))
            .collect();
        let bar = chance / running.len().max(1) as f64;
        let best = running
            .iter()
            .filter(|(_, pairs)| pairs.iter().any(|x| moments.fine_alone.contains(x)))
            .filter_map(|&(p, _)| {
                let ins = cells_of.get(&p).copied().unwrap_or_default();
                let mine = apart_of.get(&p).map_or(&[][..], Vec::as_slice);
                let mut left = [0usize; 2];
                for &i in mine.iter().filter(|&&i| !explained[i]) {
                    left[stratum(i)] += 1;
                }
                let tails = [0, 1].map(|s| hypergeometric_tail(all[s], unexplained[s], ins[s], left[s]));
                let tail = if all[1] == 0 {
                    tails[0]
                } else {
                    fisher(tails[0], tails[1])
                };
                (tail < bar).then_some((tail, std::cmp::Reverse(left), p))
            })
            .min_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
        let Some((_, _, p)) = best else { break };
        let mine = apart_of.get(&p).map_or(&[][..], Vec::as_slice);
        for &i in mine {
            explained[i] = true;
        }
        taken.push((p, mine.iter().map(|&i| moments.cells[i].0).collect()));
    }
    taken
}

/// Two independent tails as one (Fisher's method): -2 ln(p1 p2) is chi-squared on four degrees
/// of freedom under chance, whose tail at x is e^(-x/2) (1 + x/2), so t (1 - ln t) for t = p1 p2.
pub(super) fn fisher(p1: f64, p2: f64) -> f64 {
    let t = (p1 * p2).max(f64::MIN_POSITIVE);
    (t * (1.0 - t.ln())).min(1.0)
}

/// P(X >= k) for X ~ Hypergeometric(N = `all` cells, K = `moments` of them slow, n = `ins`
/// crossing the piece): how likely `k` or more of the run's slow moments land on the piece by
/// chance, given how many there were.
pub(super) fn hypergeometric_tail(all: usize, moments: usize, ins: usize, k: usize) -> f64 {
    if k == 0 {
        return 1.0;
    }
    let ln_choose = |n: usize, r: usize| -> f64 {
        if r > n {
            return f64::NEG_INFINITY;
        }
        (1..=r).map(|j| ((n - r + j) as f64 / j as f64).ln()).sum()
    };
    let total = ln_choose(all, ins);
    (k..=moments.min(ins))
        .map(|i| (ln_choose(moments, i) + ln_choose(all - moments, ins - i) - total).exp())
        .sum::<f64>()
        .min(1.0)
}

#[cfg(test)]
mod tests {
    use super::{fisher, hypergeometric_tail};

    #[test]
    fn fishers_method_against_values_worked_by_hand() {
        // t = 0.01: 0.01 (1 + ln 100) = 0.0560517.
        assert!((fisher(0.1, 0.1) - 0.056_051_70).abs() < 1e-8);
        // A tail of 1 (nothing seen) weakens the other: p (1 - ln p).
        assert!((fisher(2.45e-4, 1.0) - 2.45e-4 * (1.0 - 2.45e-4f64.ln())).abs() < 1e-12);
        assert_eq!(fisher(1.0, 1.0), 1.0);
    }

    #[test]
    fn the_hypergeometric_tail_against_values_worked_by_hand() {
        // 4 slow of 56 cells, all 4 on a node's 14: C(14,4) / C(56,4) = 1001 / 367290.
        assert!((hypergeometric_tail(56, 4, 14, 4) - 1001.0 / 367_290.0).abs() < 1e-12);
        // 6 slow of 12 cells, all on a node's 6: 1 / C(12,6) = 1/924.
        assert!((hypergeometric_tail(12, 6, 6, 6) - 1.0 / 924.0).abs() < 1e-12);
        // 2 slow of 10, at least 1 on 3 cells: 1 - C(7,2)/C(10,2) = 1 - 21/45.
        assert!((hypergeometric_tail(10, 2, 3, 1) - 24.0 / 45.0).abs() < 1e-12);
        assert_eq!(hypergeometric_tail(10, 2, 3, 0), 1.0);
        // More on the piece than it has cells, or than there were: impossible.
        assert_eq!(hypergeometric_tail(10, 2, 3, 3), 0.0);
    }
}
