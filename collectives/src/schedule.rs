//! Rounds of disjoint pairs by the circle method: every pair of `n` ranks meets exactly once in
//! `n - 1` rounds (`n` rounds when `n` is odd, one rank idle in each), and no rank is in two pairs
//! of one round, so all pairs of a round can run at the same time.

/// One pair, lower rank first.
pub type Pair = (usize, usize);

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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn tiny_and_filtered() {
        assert!(circle_rounds(1).is_empty());
        assert_eq!(circle_rounds(2), vec![vec![(0, 1)]]);
        let only = filter_rounds(circle_rounds(4), |p| p == (1, 3));
        assert_eq!(only, vec![vec![(1, 3)]]);
        assert_eq!(peer_in(&[(0, 3), (1, 2)], 2), Some(1));
        assert_eq!(peer_in(&[(0, 3)], 2), None);
    }
}
