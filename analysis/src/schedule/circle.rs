//! The circle method: every pair of `n` ranks once in `n - 1` rounds of disjoint pairs (`n`
//! rounds for odd `n`), listed or computed for one rank and round.

use super::Pair;

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
