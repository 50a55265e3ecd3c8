//! All-pairs bandwidth and latency: circle-method rounds of disjoint pairs run at once (or a quick
//! pattern of partners), results gathered at rank 0, suspects and reference pairs retested
//! alone, then blamed on an uplink, a node, a host link, a NIC or a rank pair.

pub mod blame;
pub mod bulk;
pub mod follow_up;
pub mod formulas;
pub mod measure;
pub mod rails;
pub mod report;
pub mod topology;
pub mod verdict;

use std::time::Duration;

use ranks::wire::WireError;
use ranks::{Transport, TransportError, World};
use serde::{Deserialize, Serialize};

use crate::progress::Progress;
pub use crate::schedule::Pattern;
use crate::schedule::{filter_rounds, Keep, Pair, Schedule};
use formulas::LatencyStats;
use measure::{Amount, BwResult, MeasureSpec};
use rails::Fabric;

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
    /// The message size the matrix and the verdicts use: the largest tested.
    pub fn matrix_size(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    fn spec(&self, bytes: usize) -> MeasureSpec {
        MeasureSpec {
            bytes,
            amount: self.amount,
            window: self.window,
            warmup: self.warmup,
            op_timeout: self.op_timeout,
        }
    }
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
}

impl Measurement {
    /// Higher is better: Gb/s, or 1/latency.
    pub fn score(&self) -> f64 {
        match (&self.bw, &self.lat) {
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
        return Schedule::listed(crate::schedule::rail_rounds(
            &node_of[..n.min(node_of.len())],
            pattern,
            intra,
        ));
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

/// Measure one pair at one size; returns the measurements this rank made.
fn measure_pair(
    t: &mut dyn Transport,
    peer: usize,
    cfg: &PairwiseConfig,
    bytes: usize,
    retest: bool,
) -> Result<Vec<Measurement>, TransportError> {
    let me = t.rank();
    let spec = cfg.spec(bytes);
    let (lo, hi) = (me.min(peer), me.max(peer));
    let mut out = Vec::new();
    let rec = |src, dst, bw: Option<BwResult>, lat: Option<LatencyStats>, iterations| Measurement {
        src,
        dst,
        bytes: bytes as u64,
        bw,
        lat,
        iterations,
        retest,
    };
    // SEND is measured like the one-sided operations where the transport can (verbs: zero-copy
    // on a queue pair of its own, as ib_send_bw); elsewhere (TCP), and for -D runs, through
    // two-sided messages.
    let one_sided = match cfg.op {
        OpName::Write => Some(ranks::OneSidedOp::Write),
        OpName::Read => Some(ranks::OneSidedOp::Read),
        OpName::Send if t.kind().has_rdma() && matches!(spec.amount, Amount::Iterations(_)) => {
            Some(ranks::OneSidedOp::Send)
        }
        OpName::Send => None,
    };
    match cfg.test {
        TestKind::Lat => {
            let l = match one_sided {
                Some(op) => measure::latency_one_sided(t, peer, &spec, op)?,
                None => measure::latency(t, peer, &spec)?,
            };
            if let Some((iters, l)) = l {
                out.push(rec(lo, hi, None, Some(l), iters));
            }
        }
        TestKind::Bw if cfg.bidirectional && one_sided.is_some() => {
            if let Some(op) = one_sided {
                if let Some(r) = measure::bw_one_sided_bidir(t, peer, &spec, op)? {
                    out.push(rec(lo, hi, Some(r), None, r.iterations));
                }
            }
        }
        TestKind::Bw if cfg.bidirectional => {
            let r = measure::bw_bidir(t, peer, &spec)?;
            if me == lo {
                out.push(rec(lo, hi, Some(r), None, r.iterations));
            }
        }
        TestKind::Bw if one_sided.is_some() => {
            // One-sided: each rank of the pair initiates once. A write or send moves data from
            // the initiator to the target, a read from the target to the initiator; the result is
            // recorded in the direction the data moves.
            let Some(op) = one_sided else {
                unreachable!("guarded above")
            };
            for initiator in [lo, hi] {
                let target = if initiator == lo { hi } else { lo };
                let me_initiates = me == initiator;
                if let Some(r) = measure::bw_one_sided(
                    t,
                    if me_initiates { target } else { initiator },
                    &spec,
                    op,
                    me_initiates,
                )? {
                    let (src, dst) = if cfg.op == OpName::Read {
                        (target, initiator)
                    } else {
                        (initiator, target)
                    };
                    out.push(rec(src, dst, Some(r), None, r.iterations));
                }
            }
        }
        TestKind::Bw => {
            // Lower to higher, then back.
            for (src, dst) in [(lo, hi), (hi, lo)] {
                if me == src {
                    let r = measure::bw_send(t, dst, &spec)?;
                    out.push(rec(src, dst, Some(r), None, r.iterations));
                } else {
                    measure::bw_recv(t, src, &spec)?;
                }
            }
        }
    }
    Ok(out)
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
    /// What the run cost: setup, rounds against wire time, retests, memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
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

/// What [`measure_rounds`] measured besides the pairs: wall and wire seconds.
#[derive(Debug, Clone, Copy, Default)]
struct Clock {
    wall: f64,
    wire: f64,
}

fn gather_measurements(world: &World, mine: &[Measurement], step: &str) -> Result<Option<Vec<Measurement>>, WireError> {
    let Some(all) = crate::gather_json(world, mine, step)? else {
        return Ok(None);
    };
    let mut out: Vec<Measurement> = all.into_iter().flatten().collect();
    out.sort_by_key(|m| (m.bytes, m.src, m.dst));
    Ok(Some(out))
}

/// Why a pairwise run stopped.
#[derive(Debug, thiserror::Error)]
pub enum PairwiseError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Gathered(#[from] WireError),
}

/// Measure `rounds` (every size), a barrier after each; rank 0 gets every rank's measurements.
fn measure_rounds(
    world: &World,
    t: &mut dyn Transport,
    cfg: &PairwiseConfig,
    rounds: &Schedule,
    progress: &mut Progress,
) -> Result<(Option<Vec<Measurement>>, Clock), PairwiseError> {
    let me = t.rank();
    let total_pairs: usize = (0..rounds.len()).map(|k| rounds.pairs_in(k)).sum();
    progress.start(rounds.len(), total_pairs);
    let mut mine = Vec::new();
    // Seconds this rank spent measuring in each round.
    let mut busy = vec![0.0f64; rounds.len()];
    // This rank's wall time of each round (barrier to barrier).
    let mut walls = vec![0.0f64; rounds.len()];
    // Everyone starts the clock together, so no rank's late start counts as wire time.
    world.barrier("start of the pairwise rounds");
    let start = std::time::Instant::now();
    let mut round_start = start;
    for (k, spent) in busy.iter_mut().enumerate() {
        ranks::postmortem::enter(&format!("pairwise round {}", k + 1));
        if let Some(peer) = rounds.peer(k, me) {
            let t0 = std::time::Instant::now();
            for &bytes in &cfg.sizes {
                mine.extend(measure_pair(t, peer, cfg, bytes, false)?);
            }
            *spent = t0.elapsed().as_secs_f64();
        }
        world.barrier("end of a pairwise round");
        walls[k] = round_start.elapsed().as_secs_f64();
        round_start = std::time::Instant::now();
        progress.round_done(k + 1, rounds.pairs_in(k));
    }
    let wall = start.elapsed().as_secs_f64();
    progress.finish();
    // Rounds' wire time: the longest pair of each round (O(rounds) per rank, reduced by MPI), at
    // most the round's own wall time here: ranks leave a barrier a little apart, so a pair can
    // start before this rank's round does.
    let longest = world.max_f64(&busy, "timing the rounds");
    let wire = longest.iter().zip(&walls).map(|(b, w)| b.min(*w)).sum();
    let ms = gather_measurements(world, &mine, "gathering pairwise results")?;
    Ok((ms, Clock { wall, wire }))
}

/// Rank 0's `value` on every rank (JSON over MPI).
fn share<T: Serialize + serde::de::DeserializeOwned>(world: &World, value: &T, what: &str) -> Result<T, WireError> {
    let bytes = world.broadcast_vec(&serde_json::to_vec(value).unwrap_or_default(), what);
    serde_json::from_slice(&bytes).map_err(|_| WireError {
        rank: 0,
        what: what.into(),
    })
}

/// Retest `pairs` alone, one at a time, at the matrix size, [`verdict::RETEST_PASSES`] times
/// over (the whole list, then again), so each pair's passes are apart in time; rank 0 gets the
/// results.
fn retest(
    world: &World,
    t: &mut dyn Transport,
    cfg: &PairwiseConfig,
    pairs: &[Pair],
) -> Result<Option<Vec<Measurement>>, PairwiseError> {
    let me = t.rank();
    let mut mine = Vec::new();
    for _ in 0..verdict::RETEST_PASSES {
        for &(a, b) in pairs {
            ranks::postmortem::enter(&format!("retest {a}-{b}"));
            if me == a || me == b {
                let peer = if me == a { b } else { a };
                mine.extend(measure_pair(t, peer, cfg, cfg.matrix_size(), true)?);
            }
            world.barrier("end of a retest");
        }
    }
    Ok(gather_measurements(world, &mine, "gathering retest results")?)
}

/// Run the pairwise test on every rank. Rank 0 gets the outcome.
///
/// The pass measures the rounds; rank 0 picks suspects and reference pairs, which every rank
/// learns and retests one pair at a time. After a quick pattern (`--pairs`), the ranks of the
/// confirmed pairs and a few healthy references are then tested all-pairs ([`follow_up`]) and
/// the new suspects retested, so the verdict is decided on enough pairs to place the fault.
pub fn run(
    world: &World,
    t: &mut dyn Transport,
    cfg: &PairwiseConfig,
    fabric: Fabric,
    progress: &mut Progress,
) -> Result<Option<PairwiseOutcome>, PairwiseError> {
    let hosts = world.hosts();
    let mut rounds = rounds_for(t.size(), cfg.selection, cfg.pattern, world.node_of());
    let (mut measurements, mut clock) = measure_rounds(world, t, cfg, &rounds, progress)?;
    let plan_of = |ms: &Option<Vec<Measurement>>| match ms {
        Some(all) if cfg.retest => rails::retest_plan(all, cfg, hosts),
        _ => verdict::RetestPlan::default(),
    };
    let mut plan = share(world, &plan_of(&measurements), "sharing suspect pairs")?;
    let retest_start = std::time::Instant::now();
    let mut retest_count = plan.pairs().len() * verdict::RETEST_PASSES;
    let mut retests = retest(world, t, cfg, &plan.pairs())?;
    let mut retest_s = retest_start.elapsed().as_secs_f64();

    // The follow-up of a quick pass: rank 0 decides which ranks, every rank learns them.
    let mut follow = Vec::new();
    if cfg.pattern != Pattern::All && cfg.retest {
        if let (Some(ms), Some(re)) = (&measurements, &retests) {
            let (v, _) = rails::decide(ms, re, cfg, hosts, &plan, fabric);
            follow = follow_up::ranks(&v, &plan, cfg.selection, world.node_of());
        }
        follow = share(world, &follow, "sharing the follow-up ranks")?;
    }
    if !follow.is_empty() {
        // Only after a quick pattern: its few pairs per rank, listed.
        let measured: std::collections::HashSet<Pair> = rounds.pairs().collect();
        let more = follow_up::rounds(&follow, cfg.selection, world.node_of(), &measured);
        let (second, more_clock) = measure_rounds(world, t, cfg, &Schedule::listed(more.clone()), progress)?;
        clock.wall += more_clock.wall;
        clock.wire += more_clock.wire;
        rounds.extend(more);
        if let (Some(ms), Some(extra)) = (measurements.as_mut(), second) {
            ms.extend(extra);
            ms.sort_by_key(|m| (m.bytes, m.src, m.dst));
        }
        // Retest what the whole picture makes suspect and was not retested yet.
        let whole = share(world, &plan_of(&measurements), "sharing suspect pairs")?;
        let done: std::collections::HashSet<Pair> = plan.pairs().into_iter().collect();
        let new: Vec<Pair> = whole.pairs().into_iter().filter(|p| !done.contains(p)).collect();
        let again = std::time::Instant::now();
        let more_retests = retest(world, t, cfg, &new)?;
        retest_s += again.elapsed().as_secs_f64();
        retest_count += new.len() * verdict::RETEST_PASSES;
        if let (Some(re), Some(extra)) = (retests.as_mut(), more_retests) {
            re.extend(extra);
        }
        plan = whole;
    }
    Ok(measurements.zip(retests).map(|(measurements, retests)| {
        let (v, rails) = rails::decide(&measurements, &retests, cfg, hosts, &plan, fabric);
        PairwiseOutcome {
            config: cfg.clone(),
            transport: t.kind().as_str().to_string(),
            transport_details: t.details(),
            hosts: hosts.to_vec(),
            rounds: rounds.len(),
            measurements,
            retests,
            verdict: v,
            config_findings: Vec::new(),
            rails,
            follow_up: follow,
            timings: Some(Timings {
                rounds: rounds.len(),
                sweep_s: clock.wall,
                wire_s: clock.wire,
                retests: retest_count,
                retest_s,
                ..Timings::default()
            }),
        }
    }))
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
