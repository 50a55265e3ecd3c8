//! The N x N matrix at the matrix size (the run's, or one rail's), the per-host summaries under
//! it, and the `# Time:` line of where the run's time and memory went.

use std::fmt::Write as _;

use super::{host_width, nodes};
use crate::pairwise::defaults::RETEST_SECONDS;
use crate::pairwise::report::unit;
use crate::pairwise::{Amount, OpName, PairwiseOutcome, TestKind, Timings};
use crate::stats::median;

/// What the matrix holds: `Average bandwidth [Gb/sec], row = source, ..., at 65536 bytes`.
pub(super) fn caption(o: &PairwiseOutcome) -> String {
    let c = &o.config;
    let what = match c.test {
        TestKind::Bw if c.bidirectional => "Bidirectional bandwidth [Gb/sec] (both directions summed)",
        TestKind::Bw => "Average bandwidth [Gb/sec], row = source, column = destination",
        TestKind::Lat if c.op == OpName::Read => "Typical latency [usec] (one RDMA read's round trip)",
        TestKind::Lat => "Typical latency [usec] (half round trip)",
    };
    format!("{what}, at {} bytes", c.matrix_size())
}

/// The matrix at the matrix size, over `ranks` (every rank, or one rail's).
pub(super) fn matrix_table(s: &mut String, o: &PairwiseOutcome, mx: &[Vec<Option<f64>>], ranks: &[usize]) {
    let _ = writeln!(s, "# {}", caption(o));
    let hw = host_width(o);
    let _ = write!(s, "{:>6}  {:<hw$}", "rank", "host");
    for j in ranks {
        let _ = write!(s, " {j:>8}");
    }
    s.push('\n');
    for &i in ranks {
        let _ = write!(s, "{i:>6}  {:<hw$}", o.hosts[i]);
        for &j in ranks {
            let cell = if i == j {
                "-".into()
            } else {
                mx[i][j].map_or(".".to_string(), |v| format!("{v:.2}"))
            };
            let _ = write!(s, " {cell:>8}");
        }
        s.push('\n');
    }
}

/// Per-host min / median / max, from and to each host, and over all cells.
pub(super) fn summaries(s: &mut String, o: &PairwiseOutcome, mx: &[Vec<Option<f64>>]) {
    let hw = host_width(o);
    let stats = |v: &mut Vec<f64>| -> String {
        if v.is_empty() {
            return "-".into();
        }
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("min {min:.2} / median {:.2} / max {max:.2}", median(v))
    };
    let u = unit(o.config.test);
    let _ = writeln!(s, "# Per host [{u}]");
    for h in &nodes(o) {
        let mut out: Vec<f64> = Vec::new();
        let mut inn: Vec<f64> = Vec::new();
        for (i, row) in mx.iter().enumerate() {
            for (j, v) in row.iter().enumerate() {
                if let Some(v) = *v {
                    if &o.hosts[i] == *h {
                        out.push(v);
                    }
                    if &o.hosts[j] == *h {
                        inn.push(v);
                    }
                }
            }
        }
        let _ = writeln!(s, "#   {h:<hw$}  from: {}   to: {}", stats(&mut out), stats(&mut inn));
    }
    let mut all: Vec<f64> = mx.iter().flatten().flatten().copied().collect();
    let count = all.len();
    let _ = writeln!(s, "# All {count} measured cells: {}", stats(&mut all));
    if let Some(t) = &o.timings {
        timings(s, t, &retest_count(o));
    }
}

/// `, N messages each (...)` where the retests sent fewer bandwidth messages than the first
/// pass's count ([`crate::pairwise::verdict::retest_amount`]), else nothing.
fn retest_count(o: &PairwiseOutcome) -> String {
    let Amount::Iterations(first) = o.config.amount else {
        return String::new();
    };
    match o.retests.iter().filter(|m| m.bw.is_some()).map(|m| m.iterations).min() {
        Some(n) if n < first => format!(
            " of {n} messages each (the first pass's {first} cut to about {} s a direction)",
            RETEST_SECONDS
        ),
        _ => String::new(),
    }
}

/// `# Time: ...`: setup, the rounds against their wire time, retests, peak memory.
fn timings(s: &mut String, t: &Timings, retest_count: &str) {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let mut rss = if t.peak_rss > 0 {
        format!("; peak RSS of a rank {:.1} MiB", mib(t.peak_rss))
    } else {
        String::new()
    };
    if t.registered_peak > 0 {
        rss.push_str(&format!(
            ", registered {:.1} MiB at most, {} queue pairs",
            mib(t.registered_peak),
            t.qps
        ));
    }
    let _ = writeln!(
        s,
        "# Time: mesh setup {:.2} s; {} rounds in {:.2} s, wire {:.2} s, overhead {:.2} ms per round; {} retests{retest_count} in {:.2} s{rss}",
        t.setup_s,
        t.rounds,
        t.sweep_s,
        t.wire_s,
        t.overhead_per_round() * 1e3,
        t.retests,
        t.retest_s
    );
}
