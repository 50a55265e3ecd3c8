//! A run's rounds: the circle computed on demand (so a rank never holds the N^2/2 pairs) with
//! the pairs a selection keeps, and listed rounds for quick patterns and follow-ups.

use super::{circle_peer, Pair};

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
