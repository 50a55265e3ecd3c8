//! What a collective run is and what it measured: the sweep's configuration, the rows nccl-tests
//! prints, the per-iteration figures ([`per_iter`]) and the reports ([`report`]). Running the
//! collectives is `collectives::coll`.

pub mod p2p;
pub mod per_iter;
pub mod report;

use std::time::Duration;

use serde::Serialize;

use crate::dtype::{DataType, RedOp};
use per_iter::PerIter;

/// How sizes grow from `-b` to `-e`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Step {
    /// `-f`: multiply.
    Factor(u64),
    /// `-i`: add.
    Bytes(u64),
}

/// `-a`: how the per-rank times become one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TimeAverage {
    Rank0,
    Mean,
    Min,
    Max,
}

/// `--baseline`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Baseline {
    Mpi,
}

/// A bar for the average bus bandwidth, as nccl-tests' `NCCL_TESTS_MIN_BW` sets one: the run
/// fails when the average of every row's busbw (both placements) is below 90% of it, the margin
/// nccl-tests allows (`bw < check_avg_bw * 0.9` in its footer).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BusbwBar {
    /// The expected average bus bandwidth, GB/s.
    pub gbps: f64,
    /// Where it came from: `--expect-busbw`, `MESHRUN_EXPECT_BUSBW` or `NCCL_TESTS_MIN_BW`.
    pub source: String,
}

impl BusbwBar {
    /// The share of the bar an average must reach (nccl-tests' margin).
    pub const MARGIN: f64 = 0.9;

    /// Below this average the run fails.
    pub fn floor(&self) -> f64 {
        self.gbps * Self::MARGIN
    }

    /// Whether `avg` GB/s passes (never for a NaN average).
    pub fn passes(&self, avg: f64) -> bool {
        avg >= self.floor()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CollConfig {
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step: Step,
    pub iters: u64,
    pub warmup: u64,
    pub agg: u64,
    pub check: bool,
    pub ops: Vec<RedOp>,
    pub dtypes: Vec<DataType>,
    pub root: usize,
    pub average: TimeAverage,
    #[serde(skip)]
    pub step_timeout: Duration,
    pub baseline: Option<Baseline>,
    /// Where the NIC choices came from, where any came from the environment: one header line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_choice: Option<String>,
    /// `-g`: which path each hop took, IPC within nodes or the network: one header line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p2p: Option<p2p::P2p>,
    /// `-I`: time every iteration (nccl-tests' per-iteration report).
    pub per_iter: bool,
    /// `-K`: leading iterations left out of the per-iteration statistics.
    pub per_iter_skip: usize,
    /// `--expect-busbw` / `NCCL_TESTS_MIN_BW`: the average bus bandwidth the run must reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busbw_bar: Option<BusbwBar>,
}

impl CollConfig {
    /// The sizes of the sweep, in bytes.
    pub fn sizes(&self) -> Vec<u64> {
        let mut v = Vec::new();
        let mut s = self.min_bytes;
        while s <= self.max_bytes {
            v.push(s);
            let next = match self.step {
                Step::Factor(f) => s.saturating_mul(f),
                Step::Bytes(b) => s.saturating_add(b),
            };
            if next <= s {
                break;
            }
            s = next;
        }
        v
    }
}

/// Bandwidth in GB/s (1e9 bytes per second), as nccl-tests computes algbw.
pub fn algbw(bytes: u64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    bytes as f64 / 1e9 / seconds
}

/// One placement's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    pub time_us: f64,
    pub algbw: f64,
    pub busbw: f64,
    /// Wrong elements over all ranks; None without validation.
    pub wrong: Option<u64>,
    /// `-I`: every iteration's time and their statistics.
    pub per_iter: Option<PerIter>,
}

/// One printed row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub size: u64,
    pub count: u64,
    pub dtype: DataType,
    /// `sum`, ... or `none`.
    pub redop: String,
    pub root: i64,
    pub out_of_place: Placement,
    /// None for baselines that have no in-place form.
    pub in_place: Option<Placement>,
}

/// Mean bus bandwidth over all rows, both placements (nccl-tests' "Avg bus bandwidth").
pub fn avg_busbw(rows: &[Row]) -> f64 {
    let v: Vec<f64> = rows
        .iter()
        .flat_map(|r| std::iter::once(r.out_of_place.busbw).chain(r.in_place.as_ref().map(|p| p.busbw)))
        .collect();
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Wrong elements over all rows.
pub fn total_wrong(rows: &[Row]) -> u64 {
    rows.iter()
        .flat_map(|r| std::iter::once(r.out_of_place.wrong).chain(r.in_place.as_ref().map(|p| p.wrong)))
        .flatten()
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(min: u64, max: u64, step: Step) -> CollConfig {
        CollConfig {
            min_bytes: min,
            max_bytes: max,
            step,
            iters: 1,
            warmup: 0,
            agg: 1,
            check: true,
            ops: vec![RedOp::Sum],
            dtypes: vec![DataType::Float],
            root: 0,
            average: TimeAverage::Mean,
            step_timeout: Duration::from_secs(1),
            baseline: None,
            nic_choice: None,
            p2p: None,
            busbw_bar: None,
            per_iter: false,
            per_iter_skip: 0,
        }
    }

    #[test]
    fn size_sweeps() {
        assert_eq!(cfg(8, 128, Step::Factor(2)).sizes(), vec![8, 16, 32, 64, 128]);
        assert_eq!(cfg(8, 100, Step::Factor(3)).sizes(), vec![8, 24, 72]);
        assert_eq!(
            cfg(1 << 20, 3 << 20, Step::Bytes(1 << 20)).sizes(),
            vec![1 << 20, 2 << 20, 3 << 20]
        );
        assert_eq!(cfg(64, 64, Step::Bytes(1)).sizes(), vec![64]);
    }
}
