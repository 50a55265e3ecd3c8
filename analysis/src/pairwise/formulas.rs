//! The numbers pairwise tests print, defined as perftest defines them.
//!
//! - Bandwidth in Gb/s is bits per second / 1e9 (perftest `--report_gbits`); bidirectional tests count
//!   both directions (perftest's `duplex` doubles the transferred size).
//! - MsgRate in Mpps is messages per second / 1e6.
//! - Latency (perftest `print_report_lat`): the samples are sorted and the two largest dropped
//!   (`LAT_MEASURE_TAIL`); with `m` the remaining count, `t_min = d[0]`, `t_max = d[m]`, t_typical is the
//!   median of the first m, t_avg and t_stdev (population) are over the first m, and the 99% and
//!   99.9% percentiles are `d[ceil(m * 0.99)]` and `d[ceil(m * 0.999)]`. Samples are half round trips
//!   (send and write ping-pong) or whole RDMA read round trips (read, as ib_read_lat reports).

use serde::{Deserialize, Serialize};

/// A bandwidth result, as perftest prints it, with the slowest slice of the run beside the peak.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BwResult {
    pub bytes: u64,
    pub iterations: u64,
    pub peak_gbps: f64,
    pub avg_gbps: f64,
    pub msg_rate_mpps: f64,
    /// The slowest of the slices [`slice_rates`] cut the run into (a twentieth of it each), where
    /// the receiver timed its messages: a part whose speed changed within the test shows here as
    /// a low slice under a high peak, where the average alone hides it. None where no slice
    /// qualified or nothing was timed per message (duplex, a queue pair count's totals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_gbps: Option<f64>,
}

/// Average bandwidth in Gb/s for `bytes` moved in `seconds`.
pub fn gbps(bytes: f64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    bytes * 8.0 / seconds / 1e9
}

/// Message rate in millions of messages per second.
pub fn mpps(messages: f64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    messages / seconds / 1e6
}

/// Several queue pairs in one test (perftest's `-q`), each moving `bytes` x `iterations`, the
/// last of queue pair k completing `last[k]` seconds after the first post: the test's average is
/// all their bytes over the time until the last one is done (as perftest reports it), and each
/// queue pair's own rate is its bytes over its own time. So the average is the queue pair count
/// times the slowest one's rate, and at most the sum of their rates.
pub fn per_qp_gbps(bytes: u64, iterations: u64, last: &[f64]) -> (f64, Vec<f64>) {
    let each = bytes as f64 * iterations as f64;
    let end = last.iter().copied().fold(0.0, f64::max);
    let avg = gbps(each * last.len() as f64, end);
    (avg, last.iter().map(|&t| gbps(each, t)).collect())
}

/// The rates of consecutive slices of a run, from receive completion times (seconds since the
/// first completion): each slice at least `min_msgs` messages and `min_span` seconds long, a
/// rest too short to be one left out. Over TCP one read can complete many small messages at the
/// same instant, so a slice must cover real time (the callers pass a twentieth of the run).
pub fn slice_rates(completions: &[f64], bytes_per_msg: f64, min_msgs: usize, min_span: f64) -> Vec<f64> {
    let mut rates = Vec::new();
    let Some(&first) = completions.first() else {
        return rates;
    };
    let (mut start, mut count) = (first, 0usize);
    for &t in &completions[1..] {
        count += 1;
        let span = t - start;
        if count >= min_msgs.max(1) && span >= min_span && span > 0.0 {
            rates.push(gbps(count as f64 * bytes_per_msg, span));
            start = t;
            count = 0;
        }
    }
    rates
}

/// Peak bandwidth: the best of [`slice_rates`]. None when no slice qualifies.
pub fn peak_gbps(completions: &[f64], bytes_per_msg: f64, min_msgs: usize, min_span: f64) -> Option<f64> {
    slice_rates(completions, bytes_per_msg, min_msgs, min_span)
        .into_iter()
        .reduce(f64::max)
}

/// The slowest slice: the lowest of [`slice_rates`]. None when no slice qualifies.
pub fn low_gbps(completions: &[f64], bytes_per_msg: f64, min_msgs: usize, min_span: f64) -> Option<f64> {
    slice_rates(completions, bytes_per_msg, min_msgs, min_span)
        .into_iter()
        .reduce(f64::min)
}

/// A measurement's peak and slowest slice from its completion times, each None where no slice
/// qualifies. Every slice covers a twentieth of `span` (default: from the first completion to
/// the last); the peak's hold at least `window` messages as well (as perftest's peak is over its
/// batches), the slowest slice's a twentieth of the messages, at most `window`: a run of 20
/// messages of 1 MiB is 20 slices of one, where the window's 128 would leave none.
pub fn peak_and_low(completions: &[f64], bytes: usize, window: usize, span: Option<f64>) -> (Option<f64>, Option<f64>) {
    let span = span
        .unwrap_or_else(|| completions.last().copied().unwrap_or(0.0) - completions.first().copied().unwrap_or(0.0));
    let msgs = (completions.len() / 20).clamp(1, window.max(1));
    (
        peak_gbps(completions, bytes as f64, window, span / 20.0),
        low_gbps(completions, bytes as f64, msgs, span / 20.0),
    )
}

/// Latency statistics in microseconds, perftest's way.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    pub t_min: f64,
    pub t_max: f64,
    pub t_typical: f64,
    pub t_avg: f64,
    pub t_stdev: f64,
    pub p99: f64,
    pub p99_9: f64,
}

/// Samples dropped from the top before the statistics (perftest's `LAT_MEASURE_TAIL`).
pub const LAT_MEASURE_TAIL: usize = 2;

impl LatencyStats {
    /// From samples in microseconds. None when there are no samples.
    pub fn from_samples(samples: &[f64]) -> Option<LatencyStats> {
        if samples.is_empty() {
            return None;
        }
        let mut d = samples.to_vec();
        d.sort_by(f64::total_cmp);
        let n = d.len();
        // With too few samples to drop a tail, keep them all.
        let m = if n > LAT_MEASURE_TAIL + 1 {
            n - LAT_MEASURE_TAIL
        } else {
            n
        };
        let at = |i: usize| d[i.min(n - 1)];
        let t_typical = if (m - 1) % 2 == 1 {
            (d[m / 2] + d[m / 2 - 1]) / 2.0
        } else {
            d[m / 2]
        };
        let t_avg = d[..m].iter().sum::<f64>() / m as f64;
        let var = d[..m].iter().map(|x| (t_avg - x).powi(2)).sum::<f64>() / m as f64;
        Some(LatencyStats {
            t_min: d[0],
            t_max: at(m),
            t_typical,
            t_avg,
            t_stdev: var.sqrt(),
            p99: at((m as f64 * 0.99).ceil() as usize),
            p99_9: at((m as f64 * 0.999).ceil() as usize),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_queue_pairs_by_hand() {
        // 4 queue pairs of 1000 x 64 KiB each (524,288,000 bits), done 0.5, 0.5, 0.5 and 1.0 s
        // after the first post: each moved 0.524288 Gb in its own time, 1.048576 Gb/s for the
        // first three and 0.524288 for the last; the test moved 2.097152 Gb in 1.0 s, which is 4
        // times the slowest queue pair's rate and less than the 3.670016 Gb/s of their sum.
        let (avg, each) = per_qp_gbps(65536, 1000, &[0.5, 0.5, 0.5, 1.0]);
        assert!((avg - 2.097152).abs() < 1e-12, "{avg}");
        assert_eq!(each.len(), 4);
        for (a, b) in each.iter().zip([1.048576, 1.048576, 1.048576, 0.524288]) {
            assert!((a - b).abs() < 1e-12, "{each:?}");
        }
        let sum: f64 = each.iter().sum();
        assert!((sum - 3.670016).abs() < 1e-12 && avg <= sum);
        // One queue pair: the plain formula.
        let (one, each) = per_qp_gbps(65536, 1000, &[0.5]);
        assert_eq!(
            (one, each),
            (gbps(65536.0 * 1000.0, 0.5), vec![gbps(65536.0 * 1000.0, 0.5)])
        );
        // Nothing completed: no rate rather than infinity.
        assert_eq!(per_qp_gbps(65536, 1000, &[0.0, 0.0]).0, 0.0);
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn bandwidth_and_message_rate() {
        // 5000 messages of 65536 bytes in 0.1 s: 327.68 MB -> 26.2144 Gb/s, 0.05 Mpps.
        assert!(close(gbps(5000.0 * 65536.0, 0.1), 26.2144));
        assert!(close(mpps(5000.0, 0.1), 0.05));
        // perftest's reference row: 2-byte messages at 0.058591 Gb/s are 3.661938 Mpps.
        let rate = mpps(0.058591e9 / 8.0 / 2.0, 1.0);
        assert!((rate - 3.661928).abs() < 1e-5, "{rate}");
        assert_eq!(gbps(1.0, 0.0), 0.0);
    }

    #[test]
    fn latency_stats_by_hand() {
        // 1..=10 shuffled; drop 9 and 10 -> m = 8.
        let s = [7.0, 2.0, 10.0, 1.0, 5.0, 3.0, 9.0, 4.0, 8.0, 6.0];
        let l = LatencyStats::from_samples(&s).unwrap();
        assert_eq!(l.t_min, 1.0);
        assert_eq!(l.t_max, 9.0); // d[m]
        assert_eq!(l.t_typical, 4.5); // (d[4] + d[3]) / 2
        assert_eq!(l.t_avg, 4.5); // mean of 1..=8
        assert!(close(l.t_stdev, 5.25f64.sqrt()));
        assert_eq!(l.p99, 9.0); // d[ceil(7.92)] = d[8]
        assert_eq!(l.p99_9, 9.0);
    }

    #[test]
    fn latency_odd_count_and_percentile_positions() {
        // 1000 samples 1..=1000: m = 998, d[m] = 999; p99 index ceil(988.02) = 989 -> 990;
        // p99.9 index ceil(997.002) = 998 -> 999, equal to t_max as in perftest's output.
        let s: Vec<f64> = (1..=1000).map(f64::from).collect();
        let l = LatencyStats::from_samples(&s).unwrap();
        assert_eq!(l.t_max, 999.0);
        assert_eq!(l.p99, 990.0);
        assert_eq!(l.p99_9, 999.0);
        assert_eq!(l.t_typical, 499.5); // m even: (d[499] + d[498]) / 2 = (500 + 499) / 2
                                        // m odd: 9 samples -> m = 7, median d[3].
        let l = LatencyStats::from_samples(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]).unwrap();
        assert_eq!(l.t_typical, 4.0);
        assert_eq!(l.t_max, 8.0);
        assert!(LatencyStats::from_samples(&[]).is_none());
        assert_eq!(LatencyStats::from_samples(&[3.0]).unwrap().t_typical, 3.0);
    }

    #[test]
    fn peak_uses_slices_that_cover_real_time() {
        // 1000-byte messages every 1 us for 100 messages, then every 0.5 us: second half is 16 Gb/s.
        let mut t = Vec::new();
        let mut now = 0.0;
        for i in 0..200 {
            now += if i < 100 { 1e-6 } else { 0.5e-6 };
            t.push(now);
        }
        let p = peak_gbps(&t, 1000.0, 10, 5e-6).unwrap();
        assert!((p - 16.0).abs() < 1e-6, "{p}");
        // Many completions at one instant never make a slice on their own.
        let burst = vec![1.0; 500];
        assert!(peak_gbps(&burst, 1000.0, 10, 1e-3).is_none());
        assert!(low_gbps(&burst, 1000.0, 10, 1e-3).is_none());
    }

    /// A link at full speed, then slowed to a quarter for a while, then back (as a flapping port
    /// does within one test): 1000-byte messages every 1 us (8 Gb/s), every 4 us (2 Gb/s) for 50
    /// messages, then every 1 us again. Slices of 10 messages and 5 us: the peak is 8 Gb/s, the
    /// slowest slice 2 Gb/s, while the average (199 messages after the first in 349 us) reads
    /// 4.56 Gb/s.
    #[test]
    fn the_slowest_slice_shows_a_dip_the_average_hides() {
        let mut t = vec![0.0];
        for i in 1..200 {
            let gap = if (75..125).contains(&i) { 4e-6 } else { 1e-6 };
            t.push(t[i - 1] + gap);
        }
        let r = slice_rates(&t, 1000.0, 10, 5e-6);
        assert_eq!(r.len(), 19, "{r:?}");
        assert!((peak_gbps(&t, 1000.0, 10, 5e-6).unwrap() - 8.0).abs() < 1e-6);
        assert!((low_gbps(&t, 1000.0, 10, 5e-6).unwrap() - 2.0).abs() < 1e-6);
        assert!((gbps(199.0 * 1000.0, t[199]) - 4.5616).abs() < 1e-4);
        // With the measurement's own rule and a window of 500 messages: no peak slice holds
        // 500 of 200, while the slowest slice's hold 10 (a twentieth), as above.
        let (peak, low) = peak_and_low(&t, 1000, 500, None);
        assert_eq!(peak, None);
        assert!((low.unwrap() - 2.0).abs() < 1e-6, "{low:?}");
    }
}
