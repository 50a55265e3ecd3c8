//! `-q`: the queue pairs of each test against each other: the bar, what the run could have named,
//! the paths cleared when retested and each slow path with its flow label and UDP source port.

use std::fmt::Write as _;

use crate::pairwise::defaults::MIN_CELLS;
use crate::pairwise::PairwiseOutcome;

/// `-q`: the queue pairs of each test against each other: the bar, what the run could have
/// named, and each slow path with its flow label and the UDP source port RoCE v2 gives it.
pub(super) fn paths(s: &mut String, o: &PairwiseOutcome) {
    let Some(p) = &o.paths else {
        return;
    };
    let b = &p.bulk;
    let assumed = if b.healthy < MIN_CELLS { " assumed" } else { "" };
    let _ = writeln!(
        s,
        "# Paths: {} queue pairs per test (flow labels 1-{}), each against its test's others: slow below {:.2} of them \
         (bulk median {:.2}, spread +-{:.0}%{assumed}, {} of {} queue pairs)",
        p.qps,
        p.qps,
        b.bar,
        b.median,
        (b.spread.exp() - 1.0) * 100.0,
        b.healthy,
        b.cells
    );
    let _ = writeln!(
        s,
        "# Sensitivity (paths): a queue pair {:.0}% or more below the others of its test would have been named",
        p.sensitivity.clamp(0.0, 1.0) * 100.0
    );
    for (src, dst, k) in &p.cleared {
        let _ = writeln!(
            s,
            "# cleared: queue pair {} of rank {src} ({}) -> rank {dst} ({}) was slow in the pass; fine when retested",
            k + 1,
            o.hosts[*src],
            o.hosts[*dst]
        );
    }
    for x in &p.confirmed {
        let alone = x.ratio_alone.map_or(", not retested".to_string(), |r| {
            format!(", {r:.2} of them when retested")
        });
        let _ = writeln!(
            s,
            "# Slow path: one of the {} paths from {} (rank {}) to {} (rank {}) is slow: queue pair {} (flow label {}, \
             RoCE v2 UDP source port {} = {:#06x}) {} Gb/s against {} for the others ({:.2} of them{alone})",
            x.qps,
            o.hosts[x.src],
            x.src,
            o.hosts[x.dst],
            x.dst,
            x.qp + 1,
            x.flow_label,
            x.udp_source_port(),
            x.udp_source_port(),
            three_figures(x.gbps),
            three_figures(x.others_gbps),
            x.ratio
        );
    }
}

/// A rate with at least two decimals and three significant figures (a path at 0.00114 Gb/s is
/// not "0.00").
fn three_figures(x: f64) -> String {
    let decimals = if x > 0.0 && x.is_finite() {
        (2 - x.log10().floor() as i32).clamp(2, 8) as usize
    } else {
        2
    };
    format!("{x:.decimals$}")
}
