//! Pairwise reports, one [`Exporter`](crate::export::Exporter) per format: perftest-style text
//! ([`text`]), JSON, CSV matrix, heatmap, Prometheus metrics, and the `--baseline` comparison's
//! text ([`baseline`]); [`part`] names a blamed part for the text and the baseline alike.

pub mod baseline;
pub mod csv;
pub mod heatmap;
pub mod html;
pub mod json;
pub mod metrics;
pub mod part;
pub mod text;

use super::{Measurement, PairwiseOutcome, TestKind};

/// The N x N matrix at the matrix size: Gb/s (bandwidth, row = source) or t_typical in usec
/// (latency, symmetric). None where a pair was not tested.
pub fn matrix(o: &PairwiseOutcome) -> Vec<Vec<Option<f64>>> {
    let n = o.hosts.len();
    let size = o.config.matrix_size() as u64;
    let mut mx = vec![vec![None; n]; n];
    for m in o.measurements.iter().filter(|m| m.bytes == size) {
        let v = value(o.config.test, m);
        mx[m.src][m.dst] = Some(v);
        if o.config.test == TestKind::Lat || o.config.bidirectional {
            mx[m.dst][m.src] = Some(v);
        }
    }
    mx
}

/// The number a cell shows.
pub fn value(test: TestKind, m: &Measurement) -> f64 {
    match test {
        TestKind::Bw => m.bw.map_or(0.0, |b| b.avg_gbps),
        TestKind::Lat => m.lat.map_or(0.0, |l| l.t_typical),
    }
}

/// Unit of the matrix values.
pub fn unit(test: TestKind) -> &'static str {
    match test {
        TestKind::Bw => "Gb/sec",
        TestKind::Lat => "usec",
    }
}

/// Convert a verdict score back to the unit shown.
pub fn score_to_value(test: TestKind, score: f64) -> f64 {
    match test {
        TestKind::Bw => score,
        TestKind::Lat if score > 0.0 => 1.0 / score,
        TestKind::Lat => f64::INFINITY,
    }
}
