//! What a pairwise run is and what it found: the configuration and its defaults ([`defaults`]),
//! the measurements, the verdict and blame ([`verdict`], [`blame`], [`rails`], [`paths`]), the
//! follow-up planning, and the reports. The measuring itself (over a transport) is
//! `collectives::pairwise`.

pub mod baseline;
pub mod blame;
pub mod bulk;
pub mod cables;
pub mod connections;
pub mod defaults;
pub mod follow_up;
pub mod formulas;
pub mod over_time;
pub mod path_share;
pub mod paths;
pub mod rails;
pub mod report;
pub mod router_names;
pub mod saved;
pub mod topology;
pub mod verdict;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::schedule::Pattern;
use crate::schedule::{filter_rounds, rail_rounds, Keep, Pair, Schedule};
use formulas::{BwResult, LatencyStats};

/// How long each measurement runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Amount {
    Iterations(u64),
    /// Seconds; the sender calibrates an iteration count first.
    Duration(f64),
}

/// Bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestKind {
    Bw,
    Lat,
}

/// The operation, named as perftest names its tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpName {
    Write,
    Read,
    Send,
}

impl OpName {
    pub fn as_str(self) -> &'static str {
        match self {
            OpName::Write => "write",
            OpName::Read => "read",
            OpName::Send => "send",
        }
    }
    /// perftest's title word: `RDMA_Write`, `RDMA_Read`, `Send`.
    pub fn title(self) -> &'static str {
        match self {
            OpName::Write => "RDMA_Write",
            OpName::Read => "RDMA_Read",
            OpName::Send => "Send",
        }
    }
}

/// Which pairs to test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    All,
    Pair(usize, usize),
    InterNode,
    IntraNode,
    /// `--rails`: pairs of the same local rank (rail) on different nodes, all rails at once;
    /// `intra` adds every pair within a node (`--rails --intra-node`).
    Rails {
        intra: bool,
    },
}

impl Selection {
    /// Whether the selection takes pair `(a, b)`, given each rank's node and local rank.
    pub fn allows(self, (a, b): Pair, node_of: &[usize], local: &[usize]) -> bool {
        match self {
            Selection::All => true,
            Selection::Pair(x, y) => (a.min(b), a.max(b)) == (x.min(y), x.max(y)),
            Selection::InterNode => node_of[a] != node_of[b],
            Selection::IntraNode => node_of[a] == node_of[b],
            Selection::Rails { intra } => {
                (node_of[a] != node_of[b] && local[a] == local[b]) || (intra && node_of[a] == node_of[b])
            }
        }
    }
}

/// Everything a pairwise run needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairwiseConfig {
    pub test: TestKind,
    pub op: OpName,
    pub sizes: Vec<usize>,
    pub amount: Amount,
    pub window: usize,
    pub warmup: u64,
    pub bidirectional: bool,
    pub selection: Selection,
    /// Which partners each rank has (`--pairs`).
    #[serde(default = "all_pairs")]
    pub pattern: Pattern,
    /// `--threshold F`: a pair is suspect below F times the median; None decides from the
    /// distribution (see [`verdict`]).
    pub threshold: Option<f64>,
    /// Absolute floor in Gb/s (bandwidth tests).
    pub expect_gbps: Option<f64>,
    pub retest: bool,
    #[serde(with = "secs")]
    pub op_timeout: Duration,
    /// Where the NIC choices came from, where any came from the environment (`MESHRUN_<FLAG>`,
    /// NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_IB_GID_INDEX): one line for the header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_choice: Option<String>,
    /// Queue pairs per bandwidth test (`-q`, NCCL_IB_QPS_PER_CONNECTION over RDMA), each
    /// posting the test's iterations; over TCP, connections per test, the test's messages dealt
    /// out over them ([`connections`]).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub qps: usize,
    /// `--on-unstable warn`: a part slow at times and fine at others is reported, and the run
    /// passes if nothing else is slow (by default such a part fails it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unstable_warns: bool,
    /// `--no-trace`: the paths of `-q` TCP connections are not traced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_trace: bool,
    /// A GPU run (`--use-cuda`): which path the pairs within nodes took and why, as the
    /// collectives say theirs (the header's `P2P` line); each measurement says its own
    /// ([`Measurement::path`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p2p: Option<crate::coll::p2p::P2p>,
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

fn all_pairs() -> Pattern {
    Pattern::All
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_secs_f64(f64::deserialize(d)?))
    }
}

impl PairwiseConfig {
    /// A bandwidth test of `iterations` messages of `size` bytes by `op`, every pair, one queue
    /// pair, the default rule (from the distribution, no floor) with retests: what synthetic runs
    /// (a baseline's ratios, the accuracy campaign, unit tests) start from, changing the fields
    /// they are about with `..`. Window, warm-up and timeout are nominal: nothing judged uses them.
    pub fn synthetic(op: OpName, size: usize, iterations: u64) -> PairwiseConfig {
        PairwiseConfig {
            test: TestKind::Bw,
            op,
            sizes: vec![size],
            amount: Amount::Iterations(iterations),
            window: 1,
            warmup: 0,
            bidirectional: false,
            selection: Selection::All,
            pattern: Pattern::All,
            threshold: None,
            expect_gbps: None,
            retest: true,
            op_timeout: Duration::from_secs(1),
            nic_choice: None,
            qps: 1,
            unstable_warns: false,
            no_trace: false,
            p2p: None,
        }
    }

    /// The message size the matrix and the verdicts use: the largest tested.
    pub fn matrix_size(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(0)
    }
}

/// How a pair of a GPU run (`--use-cuda`) moved its bytes: GPU to GPU, the sender copying into
/// the peer's mapped device buffer (CUDA IPC, within a node: `--p2p ipc`), or over the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HopPath {
    Ipc,
    Net,
}

/// One measured direction (or pair, for latency and bidirectional tests: then `src < dst`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub src: usize,
    pub dst: usize,
    pub bytes: u64,
    pub bw: Option<BwResult>,
    pub lat: Option<LatencyStats>,
    pub iterations: u64,
    /// Run alone, after the first pass found it suspect.
    pub retest: bool,
    /// With several queue pairs per test (`-q`): each queue pair's own Gb/s, its bytes over its
    /// own time (bidirectional: both directions of queue pair k together); empty with one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<f64>,
    /// With several TCP connections per test (`-q` over TCP): each one's ends, bytes, Gb/s and
    /// path ([`connections`]); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<connections::Connection>,
    /// The first pass's round or shift slot it ran in (0 first): what ran beside it, at the
    /// same time. None for retests, and in runs saved before slots were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// A GPU run's path for this pair (None without `--use-cuda`): pairs over IPC are judged
    /// per node, apart from the network's ([`rails`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HopPath>,
}

impl Measurement {
    /// A bandwidth measurement of `iterations` messages of `bytes` averaging (and peaking at)
    /// `gbps`: what the synthetic runs (the accuracy campaign, a baseline's ratios) are made of.
    pub fn bandwidth(src: usize, dst: usize, bytes: u64, iterations: u64, gbps: f64, retest: bool) -> Measurement {
        Measurement {
            src,
            dst,
            bytes,
            bw: Some(formulas::BwResult {
                bytes,
                iterations,
                peak_gbps: gbps,
                avg_gbps: gbps,
                msg_rate_mpps: 0.0,
                low_gbps: None,
            }),
            lat: None,
            iterations,
            retest,
            paths: Vec::new(),
            connections: Vec::new(),
            slot: None,
            path: None,
        }
    }

    /// The same measurement, as run in the first pass's `slot`.
    pub fn in_slot(self, slot: u32) -> Measurement {
        Measurement {
            slot: Some(slot),
            ..self
        }
    }

    /// Its pair, lower rank first (both directions of a pair have the same).
    pub fn pair(&self) -> Pair {
        (self.src.min(self.dst), self.src.max(self.dst))
    }

    /// Higher is better: Gb/s, or 1/latency. With several queue pairs per test, the queue pair
    /// count times the median one's rate: the average (the count times the slowest's) would make
    /// one slow path a slow pair, and so a slow NIC or node; [`paths`] names the path instead.
    pub fn score(&self) -> f64 {
        match (&self.bw, &self.lat) {
            (Some(_), _) if self.paths.len() > 1 => {
                let mut p = self.paths.clone();
                crate::stats::median(&mut p) * p.len() as f64
            }
            (Some(b), _) => b.avg_gbps,
            (None, Some(l)) if l.t_typical > 0.0 => 1.0 / l.t_typical,
            _ => 0.0,
        }
    }
}

/// The pairs to test, in rounds: all pairs by the circle method computed per rank (no rank
/// lists the N^2/2 pairs), the quick patterns and rails listed.
pub fn rounds_for(n: usize, selection: Selection, pattern: Pattern, node_of: &[usize]) -> Schedule {
    if let Selection::Rails { intra } = selection {
        return Schedule::listed(rail_rounds(&node_of[..n.min(node_of.len())], pattern, intra));
    }
    if pattern == Pattern::All {
        let keep = match selection {
            Selection::All | Selection::Rails { .. } => Keep::All,
            Selection::Pair(x, y) => Keep::Only((x.min(y), x.max(y))),
            Selection::InterNode => Keep::Between(node_of.to_vec()),
            Selection::IntraNode => Keep::Within(node_of.to_vec()),
        };
        return Schedule::circle(n, keep);
    }
    // (Rails were scheduled above: local ranks are not needed here.)
    Schedule::listed(filter_rounds(pattern.rounds(n), |p| selection.allows(p, node_of, &[])))
}

/// The whole run, as rank 0 sees it at the end.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairwiseOutcome {
    pub config: PairwiseConfig,
    pub transport: String,
    /// The transport's own facts (device, MTU, link type, ...), from rank 0.
    #[serde(default)]
    pub transport_details: Vec<(String, String)>,
    pub hosts: Vec<String>,
    pub rounds: usize,
    pub measurements: Vec<Measurement>,
    pub retests: Vec<Measurement>,
    pub verdict: verdict::Verdict,
    /// Configuration outliers found before any traffic (`# Config:` lines).
    #[serde(default)]
    pub config_findings: Vec<String>,
    /// `--rails`: each rail's ranks, NICs and verdict (`verdict` is then the run's as a whole).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rails: Vec<rails::RailOutcome>,
    /// After a quick pattern: the ranks tested all-pairs around the confirmed slow pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub follow_up: Vec<usize>,
    /// What each NIC's counters counted during the run (one entry per host and source).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counters: Vec<crate::counters::Moved>,
    /// What the run cost: setup, rounds against wire time, retests, memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
    /// With several queue pairs per test (`-q`): whether one of a pair's paths is slow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<paths::PathVerdict>,
    /// With several traced TCP connections per test (`-q` over TCP): the fabric links their
    /// slow connections share ([`cables`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cables: Vec<cables::SlowLink>,
    /// The names the system resolver gave the traced paths' router addresses (rank 0 asks after
    /// the run unless `--no-resolve`; [`router_names`]); an address without a name is absent.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub router_names: router_names::RouterNames,
    /// `--repeat`: every pass, this outcome's own figures being the last pass's (empty for a
    /// single run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<over_time::Pass>,
    /// `--repeat`: the judgement across the passes, which decides the run's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_time: Option<over_time::OverTime>,
}

impl PairwiseOutcome {
    /// A run of `hosts` over `transport` in `rounds` rounds: its first-pass `measurements`, their
    /// `retests` and the `verdict` judged from them, with nothing else found (no transport facts,
    /// configuration findings, rails, follow-up, counters, timings, paths, cables or repeats).
    /// What synthetic runs (unit and golden tests, the accuracy campaign) start from, setting the
    /// fields they are about with `..`, as with [`PairwiseConfig::synthetic`].
    pub fn synthetic(
        config: PairwiseConfig,
        transport: impl Into<String>,
        hosts: Vec<String>,
        rounds: usize,
        measurements: Vec<Measurement>,
        retests: Vec<Measurement>,
        verdict: verdict::Verdict,
    ) -> PairwiseOutcome {
        PairwiseOutcome {
            config,
            transport: transport.into(),
            transport_details: Vec::new(),
            hosts,
            rounds,
            measurements,
            retests,
            verdict,
            config_findings: Vec::new(),
            rails: Vec::new(),
            follow_up: Vec::new(),
            counters: Vec::new(),
            timings: None,
            paths: None,
            cables: Vec::new(),
            router_names: router_names::RouterNames::new(),
            repeats: Vec::new(),
            over_time: None,
        }
    }

    /// The run passed: no slow pair, and no slow path of a pair; with repeats, the judgement
    /// across the passes.
    pub fn pass(&self) -> bool {
        match &self.over_time {
            Some(t) => t.pass,
            None => {
                self.verdict.pass && self.paths.as_ref().is_none_or(paths::PathVerdict::pass) && self.cables.is_empty()
            }
        }
    }
}

/// What a run cost, measured: where the time went beyond moving bytes, and the memory it took.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Building the mesh at rank 0 (endpoint exchange, every connect, the votes), seconds.
    pub setup_s: f64,
    /// Rounds measured (the pass and any follow-up) and their wall time at rank 0.
    pub rounds: usize,
    pub sweep_s: f64,
    /// Per round, the longest any rank spent measuring its pair (at most the round's wall time
    /// at rank 0), summed over rounds: the wire time (with the per-pair handshakes); `sweep_s - wire_s` is the rounds' own overhead
    /// (barriers, waiting on the slowest pair's partner to arrive, bookkeeping).
    pub wire_s: f64,
    /// Pairs retested alone and the wall time of the retests.
    pub retests: usize,
    pub retest_s: f64,
    /// The largest peak resident set size (VmHWM) of any rank, bytes (0 where unknown).
    pub peak_rss: u64,
    /// Over RDMA verbs: the most memory any rank had registered at once, and the most queue
    /// pairs any rank held at the end (0 over TCP).
    #[serde(default)]
    pub registered_peak: u64,
    #[serde(default)]
    pub qps: u64,
}

impl Timings {
    /// The rounds' overhead beyond wire time, per round, seconds.
    pub fn overhead_per_round(&self) -> f64 {
        if self.rounds == 0 {
            0.0
        } else {
            (self.sweep_s - self.wire_s).max(0.0) / self.rounds as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_per_round_is_the_sweep_beyond_wire_time_over_the_rounds() {
        let t = Timings {
            rounds: 4,
            sweep_s: 1.0,
            wire_s: 0.6,
            ..Timings::default()
        };
        // (1.0 - 0.6) / 4 = 0.1 s per round.
        assert!((t.overhead_per_round() - 0.1).abs() < 1e-12);
        // Never negative, and nothing to divide when no round ran.
        let over = Timings {
            wire_s: 1.2,
            ..t.clone()
        };
        assert_eq!(over.overhead_per_round(), 0.0);
        assert_eq!(Timings::default().overhead_per_round(), 0.0);
    }
}
