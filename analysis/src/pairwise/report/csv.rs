//! `--csv FILE`: the matrix, one row per source rank.

use super::matrix;
use crate::export::{ExportError, Exporter};
use crate::pairwise::PairwiseOutcome;

pub fn render(o: &PairwiseOutcome) -> String {
    let mx = matrix(o);
    let n = o.hosts.len();
    let mut s = String::from("rank,host");
    for j in 0..n {
        s.push_str(&format!(",{j}"));
    }
    s.push('\n');
    for (i, row) in mx.iter().enumerate() {
        s.push_str(&format!("{i},{}", o.hosts[i]));
        for v in row {
            s.push(',');
            if let Some(v) = v {
                s.push_str(&format!("{v:.4}"));
            }
        }
        s.push('\n');
    }
    s
}

/// `--csv FILE`.
pub struct Csv;

impl Exporter<PairwiseOutcome> for Csv {
    fn render(&self, o: &PairwiseOutcome) -> Result<Vec<u8>, ExportError> {
        Ok(render(o).into_bytes())
    }
}
