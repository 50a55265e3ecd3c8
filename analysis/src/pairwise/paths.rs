//! Several queue pairs per test (`-q`): is one of a pair's paths slow while its others are not?
//!
//! On a RoCE v2 fabric with ECMP, each queue pair of a test takes the path its UDP source port
//! hashes onto, and meshrun gives queue pair k of every test the flow label k + 1, from which
//! the NIC derives that port; so a test's queue pairs take several paths, and a retest of the
//! pair takes the same ones. A bad spine link then shows as one queue pair of a pair slower than
//! its others, while the pair as a whole may still be within the bar.
//!
//! Each queue pair's rate is judged against the median of the others of its own test (they ran
//! at the same time, under the same load), as a ratio; the ratios of every direction of the
//! first pass at the matrix size are one population, whose healthy bulk and bar come from its
//! own distribution ([`Bulk`], the rule pairs are judged by; under `--threshold F`, F). A queue
//! pair below the bar is a
//! suspect; its pair is retested alone with the others, and it is confirmed when its ratio is
//! still below the bar at its best retest (without retests, `--no-retest`, from the first pass).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::bulk::Bulk;
use super::{Measurement, PairwiseConfig};
use crate::schedule::Pair;
use crate::stats::median;

/// The median rate of the queue pairs of `paths` other than `k`.
fn others_median(paths: &[f64], k: usize) -> f64 {
    let mut others: Vec<f64> = paths
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != k)
        .map(|(_, &x)| x)
        .collect();
    median(&mut others)
}

/// One queue pair's rate against the median of its test's others (None with fewer than two).
fn ratios(m: &Measurement) -> Vec<f64> {
    let p = &m.paths;
    if p.len() < 2 {
        return Vec::new();
    }
    (0..p.len())
        .map(|k| {
            let m = others_median(p, k);
            if m > 0.0 {
                p[k] / m
            } else {
                1.0
            }
        })
        .collect()
}

/// The directions of the first pass at the matrix size that measured several queue pairs.
fn with_paths<'a>(ms: &'a [Measurement], cfg: &'a PairwiseConfig) -> impl Iterator<Item = &'a Measurement> {
    let size = cfg.matrix_size() as u64;
    ms.iter()
        .filter(move |m| m.bytes == size && m.paths.len() >= 2 && !m.retest)
}

/// The bar for a queue pair's ratio to its others, from the first pass (None without several
/// queue pairs per test). Under `--threshold F` the bar is F itself: a queue pair is slow below F
/// times its test's others, as a pair is below F times the median.
pub fn ratio_bulk(first: &[Measurement], cfg: &PairwiseConfig) -> Option<Bulk> {
    let all: Vec<f64> = with_paths(first, cfg).flat_map(ratios).collect();
    let b = Bulk::of(&all)?;
    Some(match cfg.threshold {
        Some(f) => Bulk {
            bar: f,
            healthy: all.iter().filter(|&&r| r >= f).count(),
            ..b
        },
        None => b,
    })
}

/// What a run could name: the least drop below its test's others (`1 - F` under `--threshold`).
fn path_sensitivity(b: &Bulk, cfg: &PairwiseConfig) -> f64 {
    match cfg.threshold {
        Some(f) => 1.0 - f,
        None => b.drop_fraction(),
    }
}

/// The pairs to retest alone for a suspect path (as the pass measured them: unordered).
pub fn pairs_with_suspect_paths(first: &[Measurement], cfg: &PairwiseConfig) -> Vec<Pair> {
    let Some(b) = ratio_bulk(first, cfg) else {
        return Vec::new();
    };
    let set: BTreeSet<Pair> = with_paths(first, cfg)
        .filter(|m| ratios(m).iter().any(|&r| r < b.bar))
        .map(Measurement::pair)
        .collect();
    set.into_iter().collect()
}

/// A confirmed slow path: queue pair `qp` (from 0) of `qps` in the direction `src` -> `dst`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowPath {
    pub src: usize,
    pub dst: usize,
    pub qp: usize,
    pub qps: usize,
    /// Its flow label (k + 1 for queue pair k).
    pub flow_label: u32,
    /// Its Gb/s and the median of its test's others, in the first pass.
    pub gbps: f64,
    pub others_gbps: f64,
    /// Its ratio to the others: in the first pass, and at its best retest (None: not retested).
    pub ratio: f64,
    pub ratio_alone: Option<f64>,
}

impl SlowPath {
    /// The RoCE v2 UDP source port a NIC derives from the flow label (rdma-core and the kernel's
    /// `rdma_flow_label_to_udp_sport`): the low 14 bits folded with the high 6, in 0xC000-0xFFFF.
    pub fn udp_source_port(&self) -> u16 {
        udp_source_port(self.flow_label)
    }
}

/// The RoCE v2 UDP source port for a nonzero flow label.
pub fn udp_source_port(label: u32) -> u16 {
    let low = label & 0x3fff;
    let high = (label & 0xf_c000) >> 14;
    (0xc000 | (low ^ high)) as u16
}

/// What the queue pairs of each test showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathVerdict {
    /// Queue pairs per test.
    pub qps: usize,
    /// The bulk of the ratios and its bar.
    pub bulk: Bulk,
    /// The least drop of a queue pair below its others that is named (`1 - bar / median`).
    pub sensitivity: f64,
    /// Suspects of the first pass that were fine at their best retest: (src, dst, queue pair).
    pub cleared: Vec<(usize, usize, usize)>,
    pub confirmed: Vec<SlowPath>,
}

impl PathVerdict {
    pub fn pass(&self) -> bool {
        self.confirmed.is_empty()
    }
}

/// The paths verdict of a run with several queue pairs per test (None otherwise).
pub fn judge_paths(first: &[Measurement], retests: &[Measurement], cfg: &PairwiseConfig) -> Option<PathVerdict> {
    let b = ratio_bulk(first, cfg)?;
    let qps = with_paths(first, cfg).map(|m| m.paths.len()).max().unwrap_or(0);
    let mut cleared = Vec::new();
    let mut confirmed = Vec::new();
    for m in with_paths(first, cfg) {
        let r = ratios(m);
        for (k, &ratio) in r.iter().enumerate() {
            if ratio >= b.bar {
                continue;
            }
            // Its best ratio when the pair was retested alone, this direction and queue pair.
            let alone = retests
                .iter()
                .filter(|x| x.src == m.src && x.dst == m.dst && x.paths.len() == m.paths.len())
                .filter_map(|x| ratios(x).get(k).copied())
                .fold(None, |best: Option<f64>, x| Some(best.map_or(x, |b| b.max(x))));
            let slow = match alone {
                Some(a) => a < b.bar,
                None => !cfg.retest,
            };
            if !slow {
                cleared.push((m.src, m.dst, k));
                continue;
            }
            confirmed.push(SlowPath {
                src: m.src,
                dst: m.dst,
                qp: k,
                qps: m.paths.len(),
                flow_label: k as u32 + 1,
                gbps: m.paths[k],
                others_gbps: others_median(&m.paths, k),
                ratio,
                ratio_alone: alone,
            });
        }
    }
    Some(PathVerdict {
        qps,
        sensitivity: path_sensitivity(&b, cfg),
        bulk: b,
        cleared,
        confirmed,
    })
}

#[cfg(test)]
mod tests;
