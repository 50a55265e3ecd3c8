//! Rounds of disjoint pairs by the circle method: every pair of `n` ranks meets exactly once in
//! `n - 1` rounds (`n` rounds when `n` is odd, one rank idle in each), and no rank is in two pairs
//! of one round, so all pairs of a round can run at the same time.

use serde::{Deserialize, Serialize};

/// One pair, lower rank first.
pub type Pair = (usize, usize);

/// Which pairs a pairwise run measures (`--pairs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Every pair (circle method): N-1 rounds.
    All,
    /// Each rank with its neighbours i+1 and i-1: 2 or 3 rounds.
    Ring,
    /// Each rank with i+s and i-s for s = 1..=K, as mpiGraph's shifts: at most 4K-1 rounds.
    Shift(usize),
    /// K random matchings (the same on every rank: a fixed seed): K rounds.
    Random(usize),
}

impl Pattern {
    /// `all`, `ring`, `shift:K` or `random:K`.
    pub fn parse(s: &str) -> Result<Pattern, String> {
        let k = |v: &str| -> Result<usize, String> {
            v.parse::<usize>()
                .ok()
                .filter(|&k| k >= 1)
                .ok_or_else(|| format!("--pairs {s}: `{v}` is not a count of 1 or more"))
        };
        match s.split_once(':') {
            None if s == "all" => Ok(Pattern::All),
            None if s == "ring" => Ok(Pattern::Ring),
            Some(("shift", v)) => Ok(Pattern::Shift(k(v)?)),
            Some(("random", v)) => Ok(Pattern::Random(k(v)?)),
            _ => Err(format!("--pairs {s}: expected all, ring, shift:K or random:K")),
        }
    }

    /// The rounds of disjoint pairs for `n` ranks.
    pub fn rounds(self, n: usize) -> Vec<Vec<Pair>> {
        if n < 2 {
            return Vec::new();
        }
        match self {
            Pattern::All => circle_rounds(n),
            Pattern::Ring => matchings(&shift_pairs(n, 1)),
            Pattern::Shift(k) => matchings(&shift_pairs(n, k)),
            Pattern::Random(k) => random_rounds(n, k),
        }
    }
}

/// Pairs {i, i+s mod n} for s = 1..=k (each pair once).
fn shift_pairs(n: usize, k: usize) -> Vec<Pair> {
    let mut v: Vec<Pair> = (1..=k.min(n / 2))
        .flat_map(|s| (0..n).map(move |i| (i.min((i + s) % n), i.max((i + s) % n))))
        .collect();
    let mut seen = std::collections::HashSet::new();
    v.retain(|p| seen.insert(*p));
    v
}

/// Greedy rounds of disjoint pairs: each pair goes into the first round where neither rank is
/// busy (at most 2d-1 rounds for ranks in d pairs each).
fn matchings(pairs: &[Pair]) -> Vec<Vec<Pair>> {
    let mut rounds: Vec<Vec<Pair>> = Vec::new();
    let mut busy: Vec<std::collections::HashSet<usize>> = Vec::new();
    for &(a, b) in pairs {
        match busy.iter().position(|r| !r.contains(&a) && !r.contains(&b)) {
            Some(i) => {
                rounds[i].push((a, b));
                busy[i].extend([a, b]);
            }
            None => {
                rounds.push(vec![(a, b)]);
                busy.push([a, b].into_iter().collect());
            }
        }
    }
    for r in &mut rounds {
        r.sort_unstable();
    }
    rounds
}

/// `k` random perfect matchings from a fixed seed (so every rank computes the same), pairs
/// already measured in an earlier round dropped.
fn random_rounds(n: usize, k: usize) -> Vec<Vec<Pair>> {
    let mut x: u64 = 0x6d65_7368_7275_6e21; // "meshrun!"
    let mut next = move || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) as usize
    };
    let mut seen = std::collections::HashSet::new();
    let mut rounds = Vec::new();
    for _ in 0..k {
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, next() % (i + 1));
        }
        let mut round: Vec<Pair> = order
            .chunks_exact(2)
            .map(|c| (c[0].min(c[1]), c[0].max(c[1])))
            .filter(|p| seen.insert(*p))
            .collect();
        round.sort_unstable();
        if !round.is_empty() {
            rounds.push(round);
        }
    }
    rounds
}

/// All rounds for `n` ranks.
pub fn circle_rounds(n: usize) -> Vec<Vec<Pair>> {
    if n < 2 {
        return Vec::new();
    }
    let m = n + n % 2; // with a phantom rank when n is odd
    let ring = m - 1;
    (0..ring)
        .map(|r| {
            let mut round = Vec::with_capacity(m / 2);
            let mut push = |a: usize, b: usize| {
                if a < n && b < n {
                    round.push((a.min(b), a.max(b)));
                }
            };
            push(r, m - 1);
            for k in 1..m / 2 {
                push((r + k) % ring, (r + ring - k) % ring);
            }
            round.sort_unstable();
            round
        })
        .collect()
}

/// Each rank's index among the ranks of its node, in rank order (its rail).
pub fn local_ranks(node_of: &[usize]) -> Vec<usize> {
    let mut seen = std::collections::HashMap::new();
    node_of
        .iter()
        .map(|&n| {
            let k = seen.entry(n).or_insert(0usize);
            *k += 1;
            *k - 1
        })
        .collect()
}

/// The ranks of each rail (local rank i on every node that has one), rail by rail.
pub fn rail_members(node_of: &[usize]) -> Vec<Vec<usize>> {
    let mut rails: Vec<Vec<usize>> = Vec::new();
    for (r, l) in local_ranks(node_of).into_iter().enumerate() {
        if rails.len() <= l {
            rails.resize(l + 1, Vec::new());
        }
        rails[l].push(r);
    }
    rails
}

/// Rounds for `--rails`: the pattern's pairs among the ranks of each rail (same local rank on
/// different nodes), the rails side by side in each round (they share no rank); with `intra`,
/// then every pair within each node, the nodes side by side.
pub fn rail_rounds(node_of: &[usize], pattern: Pattern, intra: bool) -> Vec<Vec<Pair>> {
    let mut rounds: Vec<Vec<Pair>> = Vec::new();
    rounds_side_by_side(&mut rounds, rail_members(node_of), pattern);
    if intra {
        let nodes = node_of.iter().copied().max().map_or(0, |m| m + 1);
        let mut on_node: Vec<Vec<usize>> = vec![Vec::new(); nodes];
        for (r, &n) in node_of.iter().enumerate() {
            on_node[n].push(r);
        }
        rounds_side_by_side(&mut rounds, on_node, Pattern::All);
    }
    for r in &mut rounds {
        r.sort_unstable();
    }
    rounds.retain(|r| !r.is_empty());
    rounds
}

/// Append the pattern's rounds of each group of ranks, round k of every group in one round.
fn rounds_side_by_side(rounds: &mut Vec<Vec<Pair>>, groups: Vec<Vec<usize>>, pattern: Pattern) {
    let from = rounds.len();
    for members in groups {
        for (k, round) in pattern.rounds(members.len()).into_iter().enumerate() {
            if rounds.len() <= from + k {
                rounds.resize(from + k + 1, Vec::new());
            }
            rounds[from + k].extend(round.into_iter().map(|(a, b)| (members[a], members[b])));
        }
    }
}

/// Which pairs of the circle method a schedule keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    All,
    /// Pairs on different nodes (`node_of[rank]`).
    Between(Vec<usize>),
    /// Pairs on one node.
    Within(Vec<usize>),
    /// One pair, lower rank first.
    Only(Pair),
}

impl Keep {
    fn keeps(&self, (a, b): Pair) -> bool {
        match self {
            Keep::All => true,
            Keep::Between(node_of) => node_of[a] != node_of[b],
            Keep::Within(node_of) => node_of[a] == node_of[b],
            Keep::Only(p) => (a.min(b), a.max(b)) == *p,
        }
    }
}

/// The peer of rank `x` in circle round `r` of `n` ranks (see [`circle_rounds`]), computed
/// rather than listed; None when `x` is idle (its partner is the phantom of an odd `n`).
pub fn circle_peer(n: usize, r: usize, x: usize) -> Option<usize> {
    let m = n + n % 2;
    let ring = m - 1;
    let p = if x == m - 1 {
        r
    } else if x == r {
        m - 1
    } else {
        (2 * r + 2 * ring - x) % ring
    };
    (p < n && x < n).then_some(p)
}

/// Rounds of disjoint pairs. An all-pairs sweep is the circle method computed on demand, so a
/// rank holds O(N) (the rounds' sizes), never the N^2/2 pairs; other patterns (a few partners
/// per rank) and follow-ups are listed.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    circle: Option<Circle>,
    listed: Vec<Vec<Pair>>,
}

#[derive(Debug, Clone)]
struct Circle {
    n: usize,
    keep: Keep,
    /// The circle rounds that keep a pair: (circle round, pairs kept).
    rounds: Vec<(u32, u32)>,
}

impl Schedule {
    /// Every pair of `n` ranks that `keep` accepts, by the circle method.
    pub fn circle(n: usize, keep: Keep) -> Schedule {
        let m = n + n % 2;
        let ring = if n < 2 { 0 } else { m - 1 };
        let rounds = (0..ring)
            .map(|r| {
                let kept = match keep {
                    Keep::All => n / 2,
                    _ => (0..n)
                        .filter(|&x| circle_peer(n, r, x).is_some_and(|p| x < p && keep.keeps((x, p))))
                        .count(),
                };
                (r as u32, kept as u32)
            })
            .filter(|&(_, k)| k > 0)
            .collect();
        Schedule {
            circle: Some(Circle { n, keep, rounds }),
            listed: Vec::new(),
        }
    }

    /// Rounds given as lists (empty rounds dropped).
    pub fn listed(rounds: Vec<Vec<Pair>>) -> Schedule {
        Schedule {
            circle: None,
            listed: rounds.into_iter().filter(|r| !r.is_empty()).collect(),
        }
    }

    /// More rounds after these.
    pub fn extend(&mut self, more: Vec<Vec<Pair>>) {
        self.listed.extend(more.into_iter().filter(|r| !r.is_empty()));
    }

    fn circle_len(&self) -> usize {
        self.circle.as_ref().map_or(0, |c| c.rounds.len())
    }

    pub fn len(&self) -> usize {
        self.circle_len() + self.listed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `rank`'s peer in round `k`; None when it is idle.
    pub fn peer(&self, k: usize, rank: usize) -> Option<usize> {
        match &self.circle {
            Some(c) if k < c.rounds.len() => {
                let p = circle_peer(c.n, c.rounds[k].0 as usize, rank)?;
                c.keep.keeps((rank, p)).then_some(p)
            }
            _ => peer_in(self.listed.get(k - self.circle_len())?, rank),
        }
    }

    /// Pairs in round `k`.
    pub fn pairs_in(&self, k: usize) -> usize {
        match &self.circle {
            Some(c) if k < c.rounds.len() => c.rounds[k].1 as usize,
            _ => self.listed.get(k - self.circle_len()).map_or(0, Vec::len),
        }
    }

    /// Every pair, round by round (computed for the circle: O(N^2) time, no storage).
    pub fn pairs(&self) -> impl Iterator<Item = Pair> + '_ {
        let circle = self.circle.iter().flat_map(|c| {
            c.rounds.iter().flat_map(move |&(r, _)| {
                (0..c.n).filter_map(move |x| {
                    circle_peer(c.n, r as usize, x)
                        .filter(|&p| x < p && c.keep.keeps((x, p)))
                        .map(|p| (x, p))
                })
            })
        });
        circle.chain(self.listed.iter().flatten().copied())
    }
}

/// Keep only the pairs `keep` accepts, dropping rounds that become empty.
pub fn filter_rounds(rounds: Vec<Vec<Pair>>, keep: impl Fn(Pair) -> bool) -> Vec<Vec<Pair>> {
    rounds
        .into_iter()
        .map(|r| r.into_iter().filter(|&p| keep(p)).collect::<Vec<_>>())
        .filter(|r| !r.is_empty())
        .collect()
}

/// This rank's peer in a round, if it is not idle.
pub fn peer_in(round: &[Pair], rank: usize) -> Option<usize> {
    round.iter().find_map(|&(a, b)| {
        if a == rank {
            Some(b)
        } else if b == rank {
            Some(a)
        } else {
            None
        }
    })
}

/// Directed shift rounds over `n` ranks, as mpiGraph's: in shift k every rank i sends to
/// i + k while it receives from i - k (mod n), so each rank carries one outgoing and one incoming
/// stream and every direction of every pair is measured once in n - 1 shifts. For even n the
/// shift h = n/2 would pair each rank with one partner both ways, and over TCP a direction's
/// acknowledgements travel back on the reverse link, which must then be idle, not queued behind
/// the reverse direction's data; so no slot ever carries both directions of a pair.
///
/// Odd n: the n - 1 shifts. Even n not a power of two: n - 1 slots as well, the shifts but for
/// k, -k and h, whose directions go into three mixed slots instead (`Mix`, below). Powers of two (and
/// n = 4, where no n - 1 such slots exist): shift h runs as two halves (the lower half sending,
/// then the upper), n slots.
#[derive(Debug, Clone, Copy)]
pub struct Shifts {
    n: usize,
    mix: Option<Mix>,
}

/// Three slots that carry the directions of shifts k, -k and h = n/2 with no pair both ways,
/// for even n with an odd factor. Let d be the largest power of two dividing n (d < n, and d
/// does not divide h), k = h + d, and X the ranks i with i mod d < d/2, Y the others. Both +k
/// and +h move a rank by d/2 modulo d (as h + k = 2h + d is a multiple of d), so each takes X
/// onto Y and Y onto X. Slot A: every rank sends to i + k (a shift, 2k not a multiple of n).
/// Slot B: X sends to i - k (into Y), Y to i + h (into X). Slot C: X to i + h (into Y), Y to
/// i - k (into X). In B and C every rank sends once and receives once, and a direction's
/// reverse would need h = k: none both ways. Every direction of shifts k, -k and h appears in
/// exactly one of the three (k: A; -k and h: X's in B and C, Y's in C and B).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mix {
    k: usize,
    d: usize,
}

/// What a slot runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Every rank sends to i + k.
    Shift(usize),
    /// Shift n/2, half 0 (ranks below n/2 send) or 1 (the others).
    Half(usize),
    /// Slot B (false) or C (true) of [`Mix`].
    Mixed(bool),
}

impl Shifts {
    pub fn new(n: usize) -> Shifts {
        let mix = if n.is_multiple_of(2) && n > 4 && !n.is_power_of_two() {
            // The largest power of two dividing n.
            let d = 1usize << n.trailing_zeros();
            Some(Mix { k: n / 2 + d, d })
        } else {
            None
        };
        Shifts { n, mix }
    }

    /// Slot `s`: shifts 1, 2, ... in order; where the mixed slots replace shifts k, -k and h,
    /// they run at k, -k and h's places (A, B, C); halves run at h's place.
    fn slot(&self, s: usize) -> Slot {
        let (n, h) = (self.n, self.n / 2);
        if n % 2 == 1 {
            return Slot::Shift(s + 1);
        }
        match self.mix {
            Some(Mix { k, .. }) => {
                // n - 1 slots, slot s at shift s + 1's place.
                let c = s + 1;
                if c == n - k {
                    Slot::Mixed(false)
                } else if c == h {
                    Slot::Mixed(true)
                } else {
                    Slot::Shift(c)
                }
            }
            None => {
                if s + 1 < h {
                    return Slot::Shift(s + 1);
                }
                match s + 1 - h {
                    0 => Slot::Half(0),
                    1 => Slot::Half(1),
                    e => Slot::Shift(h + e - 1),
                }
            }
        }
    }

    /// Slots (rounds) in all.
    pub fn len(&self) -> usize {
        match self.n {
            0 | 1 => 0,
            n if n % 2 == 0 && self.mix.is_none() => n,
            n => n - 1,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `rank` is in X of [`Mix`].
    fn in_x(&self, rank: usize) -> bool {
        self.mix.is_some_and(|m| rank % m.d < m.d / 2)
    }

    /// Whom `rank` sends to in slot `s`, if anyone.
    pub fn to(&self, s: usize, rank: usize) -> Option<usize> {
        let (n, h) = (self.n, self.n / 2);
        if rank >= n {
            return None;
        }
        let k = self.mix.map_or(0, |m| m.k);
        let step = match self.slot(s) {
            Slot::Shift(c) => c,
            Slot::Half(half) => {
                if (rank >= h) != (half == 1) {
                    return None;
                }
                h
            }
            // B: X to i - k, Y to i + h; C: X to i + h, Y to i - k.
            Slot::Mixed(c) => {
                if self.in_x(rank) != c {
                    n - k
                } else {
                    h
                }
            }
        };
        Some((rank + step) % n)
    }

    /// Whom `rank` receives from in slot `s`, if anyone.
    pub fn from(&self, s: usize, rank: usize) -> Option<usize> {
        let (n, h) = (self.n, self.n / 2);
        if rank >= n {
            return None;
        }
        let k = self.mix.map_or(0, |m| m.k);
        let src = match self.slot(s) {
            Slot::Shift(c) => (rank + n - c % n) % n,
            Slot::Half(half) => {
                let src = (rank + h) % n;
                if (src >= h) != (half == 1) {
                    return None;
                }
                src
            }
            // A sender in X lands in Y and one in Y lands in X: in B, a rank in Y heard from
            // X's i - k (so from i + k), a rank in X from Y's i + h; in C the other way round.
            Slot::Mixed(c) => {
                if self.in_x(rank) == c {
                    (rank + k) % n
                } else {
                    (rank + h) % n
                }
            }
        };
        Some(src)
    }

    /// Directions measured in slot `s`.
    pub fn directions_in(&self, s: usize) -> usize {
        match self.slot(s) {
            Slot::Half(_) => self.n / 2,
            _ => self.n,
        }
    }
}

/// `pairs` in groups that share no host (`node_of[rank]` is a rank's host), each pair in the
/// first group it fits, groups in the order of their first pair: the pairs of one group can be
/// measured at once without sharing a NIC, a host link or a CPU. The order of the pairs within a
/// group, and of each pair's groups, follows `pairs`.
pub fn host_disjoint_groups(pairs: &[Pair], node_of: &[usize]) -> Vec<Vec<Pair>> {
    let host = |r: usize| node_of.get(r).copied().unwrap_or(usize::MAX - r);
    let mut groups: Vec<(Vec<Pair>, Vec<usize>)> = Vec::new();
    for &(a, b) in pairs {
        let (ha, hb) = (host(a), host(b));
        match groups
            .iter_mut()
            .find(|(_, used)| !used.contains(&ha) && !used.contains(&hb))
        {
            Some((g, used)) => {
                g.push((a, b));
                used.extend([ha, hb]);
            }
            None => groups.push((vec![(a, b)], vec![ha, hb])),
        }
    }
    groups.into_iter().map(|(g, _)| g).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifts_measure_every_direction_once_and_never_both_of_a_pair_at_once() {
        for n in 2usize..=130 {
            let sh = Shifts::new(n);
            // n - 1 slots but for powers of two (and 2 and 4, no n - 1 such slots for 4): n.
            let want = if n % 2 == 0 && n.is_power_of_two() { n } else { n - 1 };
            assert_eq!(sh.len(), want, "n = {n}");
            let mut seen = std::collections::HashSet::new();
            for s in 0..sh.len() {
                let mut dirs = Vec::new();
                let mut receivers = std::collections::HashSet::new();
                for r in 0..n {
                    if let Some(to) = sh.to(s, r) {
                        assert_ne!(to, r);
                        assert_eq!(sh.from(s, to), Some(r), "n {n} slot {s}: {r} -> {to}");
                        assert!(receivers.insert(to), "n {n} slot {s}: {to} receives twice");
                        dirs.push((r, to));
                    }
                    if let Some(from) = sh.from(s, r) {
                        assert_eq!(sh.to(s, from), Some(r));
                    }
                }
                assert_eq!(dirs.len(), sh.directions_in(s));
                for &(a, b) in &dirs {
                    assert!(!dirs.contains(&(b, a)), "n {n} slot {s}: {a} <-> {b} both ways");
                    assert!(seen.insert((a, b)), "n {n}: {a} -> {b} twice");
                }
            }
            assert_eq!(seen.len(), n * (n - 1), "n = {n}");
            assert_eq!(sh.to(0, n), None);
            assert_eq!(sh.from(0, n), None);
        }
        // Six ranks: d = 2, k = 5, X the even ranks. Slot 1 (B, at shift 5's opposite, 1): evens
        // to i - 5 = i + 1, odds to i + 3; shifts 2 and 4; slot 3 (C, at 3's place): evens to
        // i + 3, odds to i - 5; shift 5 (A).
        let six = Shifts::new(6);
        assert_eq!(
            (0..5).map(|s| six.to(s, 0)).collect::<Vec<_>>(),
            [Some(1), Some(2), Some(3), Some(4), Some(5)]
        );
        assert_eq!(
            (0..5).map(|s| six.to(s, 1)).collect::<Vec<_>>(),
            [Some(4), Some(3), Some(2), Some(5), Some(0)]
        );
        // Eight: a power of two keeps the halves: shifts 1, 2, 3, the halves of 4, then 5, 6, 7.
        let eight = Shifts::new(8);
        assert_eq!(
            (0..8).map(|s| eight.to(s, 0)).collect::<Vec<_>>(),
            [Some(1), Some(2), Some(3), Some(4), None, Some(5), Some(6), Some(7)]
        );
        assert_eq!(eight.to(3, 5), None);
        assert_eq!(eight.to(4, 5), Some(1));
        assert_eq!(eight.to(5, 5), Some(2));
        assert!(Shifts::new(1).is_empty());
    }

    #[test]
    fn host_disjoint_groups_never_share_a_host() {
        // Six hosts of one rank: the suspect and two references that share no host run at once.
        let one = [0, 1, 2, 3, 4, 5];
        assert_eq!(
            host_disjoint_groups(&[(1, 4), (0, 2), (3, 5)], &one),
            vec![vec![(1, 4), (0, 2), (3, 5)]]
        );
        // A reference sharing host 1 with the suspect waits for the next group.
        assert_eq!(
            host_disjoint_groups(&[(1, 4), (1, 2), (0, 3), (2, 5)], &one),
            vec![vec![(1, 4), (0, 3), (2, 5)], vec![(1, 2)]]
        );
        // Two ranks per host: ranks 0,1 on host 0, 2,3 on host 1, 4,5 on host 2. Pairs (0,2) and
        // (1,3) are rank-disjoint but share both hosts, so they never run together; (4,5), within
        // host 2, runs beside the first.
        let two = [0, 0, 1, 1, 2, 2];
        assert_eq!(
            host_disjoint_groups(&[(0, 2), (1, 3), (4, 5)], &two),
            vec![vec![(0, 2), (4, 5)], vec![(1, 3)]]
        );
        assert!(host_disjoint_groups(&[], &one).is_empty());
    }

    fn check_disjoint(rounds: &[Vec<Pair>]) {
        for r in rounds {
            let mut ranks: Vec<usize> = r.iter().flat_map(|&(a, b)| [a, b]).collect();
            let len = ranks.len();
            ranks.sort_unstable();
            ranks.dedup();
            assert_eq!(ranks.len(), len, "a rank twice in one round: {r:?}");
        }
    }

    #[test]
    fn quick_patterns_give_each_rank_its_partners_in_few_rounds() {
        for n in [2, 3, 4, 7, 8, 64, 1000] {
            let ring = Pattern::Ring.rounds(n);
            check_disjoint(&ring);
            assert!(ring.len() <= 3, "{n}: {}", ring.len());
            let pairs: usize = ring.iter().map(Vec::len).sum();
            assert_eq!(pairs, if n == 2 { 1 } else { n }, "ring of {n}");
            let shift = Pattern::Shift(3).rounds(n);
            check_disjoint(&shift);
            assert!(shift.len() <= 11, "{n}: {}", shift.len());
            let random = Pattern::Random(4).rounds(n);
            check_disjoint(&random);
            assert!(random.len() <= 4);
            assert_eq!(random, Pattern::Random(4).rounds(n), "the same on every rank");
            for r in &random {
                assert!(r.len() <= n / 2);
            }
        }
        // Shift 1 is the ring; shift 2 adds i+2.
        let s2: usize = Pattern::Shift(2).rounds(10).iter().map(Vec::len).sum();
        assert_eq!(s2, 20);
        assert_eq!(Pattern::All.rounds(5), circle_rounds(5));
    }

    #[test]
    fn patterns_parse() {
        assert_eq!(Pattern::parse("ring"), Ok(Pattern::Ring));
        assert_eq!(Pattern::parse("shift:4"), Ok(Pattern::Shift(4)));
        assert_eq!(Pattern::parse("random:16"), Ok(Pattern::Random(16)));
        assert_eq!(Pattern::parse("all"), Ok(Pattern::All));
        for bad in ["shift", "shift:0", "random:x", "star"] {
            assert!(Pattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_pair_once_and_no_rank_twice_per_round() {
        for n in 2..=257usize {
            let rounds = circle_rounds(n);
            assert_eq!(rounds.len(), if n % 2 == 0 { n - 1 } else { n }, "n={n}");
            let mut seen = vec![false; n * n];
            for round in &rounds {
                assert_eq!(round.len(), n / 2, "n={n}");
                let mut busy = vec![false; n];
                for &(a, b) in round {
                    assert!(a < b && b < n);
                    assert!(!busy[a] && !busy[b], "n={n}: rank in two pairs of a round");
                    busy[a] = true;
                    busy[b] = true;
                    assert!(!seen[a * n + b], "n={n}: pair ({a},{b}) twice");
                    seen[a * n + b] = true;
                }
            }
            let count = seen.iter().filter(|&&s| s).count();
            assert_eq!(count, n * (n - 1) / 2, "n={n}");
        }
    }

    #[test]
    fn rails_pair_the_same_local_rank_across_nodes() {
        // 3 nodes x 2 ranks, rank order node by node; a fourth node with one rank.
        let node_of = [0, 0, 1, 1, 2, 2, 3];
        assert_eq!(local_ranks(&node_of), vec![0, 1, 0, 1, 0, 1, 0]);
        assert_eq!(rail_members(&node_of), vec![vec![0, 2, 4, 6], vec![1, 3, 5]]);
        let rounds = rail_rounds(&node_of, Pattern::All, false);
        check_disjoint(&rounds);
        let mut pairs: Vec<Pair> = rounds.concat();
        pairs.sort_unstable();
        assert_eq!(
            pairs,
            vec![(0, 2), (0, 4), (0, 6), (1, 3), (1, 5), (2, 4), (2, 6), (3, 5), (4, 6)]
        );
        // Rails run side by side: as many rounds as the largest rail needs.
        assert_eq!(rounds.len(), 3);
        let with_intra = rail_rounds(&node_of, Pattern::All, true);
        check_disjoint(&with_intra);
        assert_eq!(with_intra.len(), 4);
        assert_eq!(with_intra[3], vec![(0, 1), (2, 3), (4, 5)]);
        // Ranks placed round-robin (node of rank = rank mod 2).
        let rr = [0, 1, 0, 1];
        assert_eq!(rail_rounds(&rr, Pattern::All, false).concat(), vec![(0, 1), (2, 3)]);
        // A quick pattern applies within each rail.
        let big: Vec<usize> = (0..64).map(|r| r / 8).collect();
        let ring = rail_rounds(&big, Pattern::Ring, false);
        check_disjoint(&ring);
        assert_eq!(ring.concat().len(), 8 * 8);
        assert!(ring.len() <= 3);
    }

    #[test]
    fn the_computed_circle_is_the_listed_one() {
        for n in 1..=65usize {
            let listed = circle_rounds(n);
            let s = Schedule::circle(n, Keep::All);
            assert_eq!(s.len(), listed.len(), "n={n}");
            for (k, round) in listed.iter().enumerate() {
                assert_eq!(s.pairs_in(k), round.len());
                for x in 0..n {
                    assert_eq!(s.peer(k, x), peer_in(round, x), "n={n} round {k} rank {x}");
                }
            }
            let mut a: Vec<Pair> = s.pairs().collect();
            let mut b: Vec<Pair> = listed.concat();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b);
        }
        // Filters drop pairs, and rounds left empty.
        let node_of: Vec<usize> = (0..8).map(|r| r / 4).collect();
        let within = Schedule::circle(8, Keep::Within(node_of.clone()));
        let want = filter_rounds(circle_rounds(8), |(a, b)| node_of[a] == node_of[b]);
        assert_eq!(within.len(), want.len());
        assert_eq!(within.pairs().count(), 12);
        let only = Schedule::circle(8, Keep::Only((2, 5)));
        assert_eq!((only.len(), only.pairs_in(0)), (1, 1));
        assert_eq!((only.peer(0, 5), only.peer(0, 1)), (Some(2), None));
        // Listed rounds follow the circle's.
        let mut s = Schedule::circle(4, Keep::All);
        s.extend(vec![vec![(0, 1)], vec![]]);
        assert_eq!(s.len(), 4);
        assert_eq!(s.peer(3, 1), Some(0));
        assert!(Schedule::circle(1, Keep::All).is_empty());
    }

    #[test]
    fn tiny_and_filtered() {
        assert!(circle_rounds(1).is_empty());
        assert_eq!(circle_rounds(2), vec![vec![(0, 1)]]);
        let only = filter_rounds(circle_rounds(4), |p| p == (1, 3));
        assert_eq!(only, vec![vec![(1, 3)]]);
        assert_eq!(peer_in(&[(0, 3), (1, 2)], 2), Some(1));
        assert_eq!(peer_in(&[(0, 3)], 2), None);
    }
}
