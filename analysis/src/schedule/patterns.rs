//! Which pairs a run measures (`--pairs`): every pair, or a quick pattern of a few partners per
//! rank (ring, shifts, random matchings) in greedy rounds of disjoint pairs.

use serde::{Deserialize, Serialize};

use super::{circle_rounds, Pair};

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
