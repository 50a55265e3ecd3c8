//! How much one measurement moves and how long it may take: its settings ([`MeasureSpec`]),
//! and for a timed measurement (`-D SECONDS`, as perftest's) a probe of a few windows that learns
//! the rate, and the run that posts as many operations as fill the duration at it (each queue
//! pair as many); its deadline allows for a probe that ran fast.

use std::time::{Duration, Instant};

use analysis::pairwise::{Amount, PairwiseConfig};

/// Settings for one measurement.
#[derive(Debug, Clone, Copy)]
pub struct MeasureSpec {
    pub bytes: usize,
    pub amount: Amount,
    pub window: usize,
    pub warmup: u64,
    pub op_timeout: Duration,
    /// Queue pairs per one-sided bandwidth test (`-q`), each posting `amount`.
    pub qps: usize,
}

impl MeasureSpec {
    /// The settings of `cfg` for one message size.
    pub fn of(cfg: &PairwiseConfig, bytes: usize) -> MeasureSpec {
        MeasureSpec {
            bytes,
            amount: cfg.amount,
            window: cfg.window,
            warmup: cfg.warmup,
            op_timeout: cfg.op_timeout,
            qps: cfg.qps.max(1),
        }
    }
}

/// Operations a timed run (`-D`) posts first to learn its rate: four windows, at least 8 (each
/// queue pair posts this many).
pub(super) fn probe_len(spec: &MeasureSpec) -> u64 {
    (spec.window as u64 * 4).max(8)
}

/// Operations that fill `secs` at `per_op` seconds each (per queue pair), within one window and
/// perftest's largest count.
pub(super) fn count_for(secs: f64, per_op: f64, window: usize) -> u64 {
    ((secs / per_op.max(1e-9)) as u64).clamp(window as u64, 100_000_000)
}

/// The deadline of a measurement's main run: the per-wait timeout, and for a timed run twice its
/// duration on top (the count is sized from a probe, so the run may take a little longer).
pub(super) fn run_deadline(spec: &MeasureSpec) -> Instant {
    let extra = match spec.amount {
        Amount::Duration(secs) => Duration::from_secs_f64(2.0 * secs),
        Amount::Iterations(_) => Duration::ZERO,
    };
    Instant::now() + spec.op_timeout + extra
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_count_fills_the_duration_within_a_window_and_perftests_largest() {
        // 10 s at 2 us an operation: 5,000,000 operations.
        assert_eq!(count_for(10.0, 2e-6, 128), 5_000_000);
        // Never below one window, never above 100,000,000, and a probe of no time is no
        // division by zero.
        assert_eq!(count_for(1e-6, 1.0, 128), 128);
        assert_eq!(count_for(60.0, 1e-12, 128), 100_000_000);
        assert_eq!(count_for(60.0, 0.0, 128), 100_000_000);
    }
}
