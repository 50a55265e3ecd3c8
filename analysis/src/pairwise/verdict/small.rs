//! Small populations between hosts: a rail, or all pairs of a few hosts (12 to 28 cells, where
//! the fastest quarter the healthy bulk is seeded from holds fewer than
//! [`MIN_CELLS`](crate::pairwise::defaults::MIN_CELLS) cells). There the bulk cannot measure its
//! own spread until it has grown, and the spread it assumed instead (+-42%) took a slow part in:
//! 4 hosts with one node (or one rail's NIC) at 85% make 6 slow cells of 12, the assumed spread
//! let all 12 into the bulk, and the run passed with the node's cells counted as noise.
//!
//! What a fault looks like says where to measure the noise instead: a slow link, NIC, node or
//! uplink slows both directions of each of its pairs alike, so the difference of a pair's two
//! directions is noise alone (as the retests' pass-to-pass differences are), however many of the
//! cells the fault slows: half of them for a node of 4 hosts, two thirds for an uplink between
//! two leaves of two. Their median (a difference being two draws) is the noise. The bulk is then
//! grown from the fastest quarter as always, with this noise as its spread while it has too few
//! cells to measure its own, and as the least spread after; suspects are retested alone against
//! references alone, as everywhere.
//!
//! Pairs certainly slow are left out: both directions below where the assumed spread alone
//! would put the bar ([`certainly_slow`]). A NIC down to a floor (a dead link, a shaper at a
//! fiftieth) measures the same both ways and every pass while the healthy cells of a busy
//! machine vary by tens of percent; its three pairs of six gave differences of nought, the
//! median read +-1%, and rail 1's bar sat 7% under a clump of three cells, so a healthy noisy
//! pair was named beside the NIC (a clean-clone CI run of the namespace cluster's two-rails
//! test). Such cells are named under any bar the run could draw; their steadiness is the
//! fault's, not the fabric's. Where fewer than [`FEWEST`] pairs are left, the prior applies.
//!
//! What it does not see: a part slow one way only (a node's way in) makes its pairs' directions
//! differ, which widens this noise and the bar with it, as the assumed spread did. Measuring the
//! noise on the cells apart from the likeliest slow part instead (or the smaller of the two) was
//! tried: on the synthetic campaign's noisy models it read low by chance often enough to name
//! healthy parts (clean 4-host fabrics with a finding: 6.5-17% against 1-3.5%;
//! `docs/evidence/small-populations-2026-12-06/`).

use std::collections::HashMap;

use crate::pairwise::bulk::seed_size;
use crate::pairwise::defaults::{DEVIATIONS, MIN_CELLS, PRIOR_SPREAD};
use crate::pairwise::Measurement;
use crate::stats::{median, MAD_TO_SD};

/// The fewest cells whose noise is measured from their pairs' directions: 4 hosts of one rank
/// each, 12 directions (or one rail of 4 hosts). Fewer (3 hosts: 3 pairs) keep the assumed
/// spread.
pub(super) const SMALL_CELLS: usize = 12;

/// The noise (log units) of a small population between hosts (`cells`, at the matrix size),
/// from its pairs' two directions; None where the population is not small (the bulk measures
/// its own spread) or too small ([`SMALL_CELLS`]).
pub(super) fn noise_apart(cells: &[&Measurement]) -> Option<f64> {
    let n = cells.len();
    if n < SMALL_CELLS || seed_size(n) >= MIN_CELLS {
        return None;
    }
    let logs: Vec<f64> = cells.iter().map(|m| m.score().max(f64::MIN_POSITIVE).ln()).collect();
    let mut fastest = logs.clone();
    fastest.sort_by(|a, b| b.total_cmp(a));
    fastest.truncate(seed_size(n));
    directions(cells, &logs, median(&mut fastest))
}

/// Whether a log score is below where the assumed spread alone would put the bar under `centre`
/// (log units): [`DEVIATIONS`] times [`PRIOR_SPREAD`], a factor of about 4. Such a cell is named
/// whatever noise the run measures, so its steadiness says nothing about that noise.
pub(super) fn certainly_slow(log: f64, centre: f64) -> bool {
    log < centre - DEVIATIONS * PRIOR_SPREAD
}

/// The fewest pairs measured both ways: fewer cannot show a spread.
const FEWEST: usize = 4;

/// The noise from the differences of each pair's two directions (log units): the robust standard
/// deviation of one cell, a difference being two draws. Pairs whose two directions are both
/// [`certainly_slow`] under `centre` (the fastest quarter's median) are left out. None for fewer
/// than [`FEWEST`] pairs.
fn directions(cells: &[&Measurement], logs: &[f64], centre: f64) -> Option<f64> {
    let at: HashMap<(usize, usize), f64> = cells.iter().zip(logs).map(|(m, &l)| ((m.src, m.dst), l)).collect();
    let mut diffs: Vec<f64> = at
        .iter()
        .filter(|((s, d), _)| s < d)
        .filter_map(|((s, d), &l)| at.get(&(*d, *s)).map(|&r| (l, r)))
        .filter(|&(l, r)| !(certainly_slow(l, centre) && certainly_slow(r, centre)))
        .map(|(l, r)| (l - r).abs())
        .collect();
    (diffs.len() >= FEWEST).then(|| MAD_TO_SD * median(&mut diffs) / std::f64::consts::SQRT_2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(src: usize, dst: usize, gbps: f64) -> Measurement {
        Measurement::bandwidth(src, dst, 1 << 20, 20, gbps, false)
    }

    /// All directions of `h` hosts of one rank, at `rate(src, dst)`.
    fn fabric(h: usize, rate: impl Fn(usize, usize) -> f64) -> (Vec<String>, Vec<Measurement>) {
        let hosts = (0..h).map(|i| format!("h{i}")).collect();
        let mut v = Vec::new();
        for a in 0..h {
            for b in 0..h {
                if a != b {
                    v.push(cell(a, b, rate(a, b)));
                }
            }
        }
        (hosts, v)
    }

    fn noise(_hosts: &[String], ms: &[Measurement]) -> Option<f64> {
        let refs: Vec<&Measurement> = ms.iter().collect();
        noise_apart(&refs)
    }

    /// +-0.5% of deterministic jitter.
    fn jitter(a: usize, b: usize) -> f64 {
        1.0 + 0.005 * (((a * 7 + b * 13) % 11) as f64 / 5.0 - 1.0)
    }

    #[test]
    fn a_node_at_85_percent_does_not_widen_the_noise() {
        let (hosts, ms) = fabric(4, |a, b| if a == 3 || b == 3 { 0.32 } else { 0.38 } * jitter(a, b));
        let sd = noise(&hosts, &ms).expect("12 cells are small");
        assert!(sd < 0.01, "{sd}");
    }

    #[test]
    fn an_uplink_across_two_thirds_of_the_cells_does_not_widen_it() {
        let (hosts, ms) = fabric(4, |a, b| if (a < 2) != (b < 2) { 70.0 } else { 100.0 } * jitter(a, b));
        let sd = noise(&hosts, &ms).expect("small");
        assert!(sd < 0.01, "{sd}");
    }

    #[test]
    fn noise_reads_as_noise() {
        // +-10% of jitter, no fault.
        let (hosts, ms) = fabric(4, |a, b| {
            100.0 * (1.0 + 0.1 * (((a * 5 + b * 3) % 7) as f64 / 3.0 - 1.0))
        });
        let sd = noise(&hosts, &ms).expect("small");
        assert!(sd > 0.03, "{sd}");
    }

    #[test]
    fn only_small_populations_of_three_hosts_or_more_are_split() {
        let (hosts, ms) = fabric(3, |_, _| 1.0);
        assert_eq!(noise(&hosts, &ms), None, "6 cells");
        let (hosts, ms) = fabric(6, |_, _| 1.0);
        assert_eq!(noise(&hosts, &ms), None, "30 cells seed 8: the bulk measures its own");
        let (hosts, ms) = fabric(5, |_, _| 1.0);
        assert!(noise(&hosts, &ms).is_some(), "20 cells");
        // Two hosts of 4 ranks: 32 cells, not small; two hosts of 2: 8, too few.
        let hosts: Vec<String> = (0..4).map(|r| format!("h{}", r / 2)).collect();
        let ms: Vec<Measurement> = (0..4)
            .flat_map(|a| (0..4).map(move |b| (a, b)))
            .filter(|&(a, b)| a / 2 != b / 2)
            .map(|(a, b)| cell(a, b, 1.0))
            .collect();
        assert_eq!(noise(&hosts, &ms), None);
    }
}
