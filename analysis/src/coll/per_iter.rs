//! `-I`: the time of every timed iteration, as nccl-tests (2.19 and later) reports it with
//! `-I 1`: per iteration the slowest rank's time (nccl-tests takes the max over its process
//! rows), and over those the min, max, mean, p50, p95, p99, population standard deviation and
//! coefficient of variation, skipping the first `-K` iterations. Every rank times its own
//! iterations with the wall clock (nccl-tests uses CUDA events on GPUs).

use serde::Serialize;

/// One placement's per-iteration figures, in microseconds per operation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerIter {
    /// Leading iterations left out of the statistics (`-K`); they stay in `times_us`.
    pub skipped: usize,
    pub min_us: f64,
    pub max_us: f64,
    pub avg_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub stdev_us: f64,
    /// Standard deviation over mean, in percent.
    pub cv_pct: f64,
    /// Every timed iteration: the slowest rank's time.
    pub times_us: Vec<f64>,
    /// Every rank's own times, rank by rank.
    pub per_rank_us: Vec<Vec<f64>>,
}

/// nccl-tests' percentile index into `n` sorted values: the smallest index covering `p` percent.
pub fn percentile_index(n: usize, p: usize) -> usize {
    ((n * p).div_ceil(100)).saturating_sub(1).min(n.saturating_sub(1))
}

impl PerIter {
    /// From every rank's times (microseconds; all of the same length), skipping the first `skip`
    /// in the statistics. None when no iteration is left after the skip.
    pub fn from_ranks(per_rank_us: Vec<Vec<f64>>, skip: usize) -> Option<PerIter> {
        let n = per_rank_us.iter().map(Vec::len).min()?;
        let times_us: Vec<f64> = (0..n)
            .map(|i| per_rank_us.iter().map(|r| r[i]).fold(f64::NEG_INFINITY, f64::max))
            .collect();
        let mut sorted: Vec<f64> = times_us.get(skip..)?.to_vec();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let m = sorted.len();
        let avg = sorted.iter().sum::<f64>() / m as f64;
        let var = sorted.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / m as f64;
        let stdev = var.sqrt();
        Some(PerIter {
            skipped: skip,
            min_us: sorted[0],
            max_us: sorted[m - 1],
            avg_us: avg,
            p50_us: sorted[m / 2],
            p95_us: sorted[percentile_index(m, 95)],
            p99_us: sorted[percentile_index(m, 99)],
            stdev_us: stdev,
            cv_pct: if avg > 0.0 { stdev / avg * 100.0 } else { 0.0 },
            times_us,
            per_rank_us,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_by_hand() {
        // Two ranks, 6 iterations; the slowest per iteration: 10 1 2 3 4 5 (rank 1 slower at 2).
        let r0 = vec![10.0, 1.0, 1.5, 3.0, 4.0, 5.0];
        let r1 = vec![9.0, 0.5, 2.0, 2.5, 4.0, 4.5];
        let p = PerIter::from_ranks(vec![r0.clone(), r1.clone()], 1).unwrap();
        assert_eq!(p.times_us, vec![10.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(p.per_rank_us, vec![r0, r1]);
        // Statistics over 1 2 3 4 5: mean 3, population variance (4+1+0+1+4)/5 = 2.
        assert_eq!((p.min_us, p.max_us, p.avg_us, p.p50_us), (1.0, 5.0, 3.0, 3.0));
        assert!((p.stdev_us - 2f64.sqrt()).abs() < 1e-12);
        assert!((p.cv_pct - 2f64.sqrt() / 3.0 * 100.0).abs() < 1e-9);
        // p95 and p99 of 5 values: ceil(4.75) - 1 = 4, ceil(4.95) - 1 = 4: the largest.
        assert_eq!((p.p95_us, p.p99_us), (5.0, 5.0));
        assert_eq!(p.skipped, 1);
        assert!(PerIter::from_ranks(vec![vec![1.0]], 1).is_none());
        assert!(PerIter::from_ranks(vec![], 0).is_none());
    }

    #[test]
    fn percentile_indices_as_nccl_tests() {
        // (n * p + 99) / 100 - 1, capped at n - 1.
        assert_eq!(percentile_index(100, 95), 94);
        assert_eq!(percentile_index(100, 99), 98);
        assert_eq!(percentile_index(20, 95), 18);
        assert_eq!(percentile_index(20, 99), 19);
        assert_eq!(percentile_index(1, 99), 0);
        assert_eq!(percentile_index(1000, 99), 989);
    }
}
