//! All-pairs bandwidth and latency: circle-method rounds of disjoint pairs run at once (or a quick
//! pattern of partners), results gathered at rank 0, suspects and reference pairs retested
//! alone, then blamed on an uplink, a node, a host link, a NIC or a rank pair. What a run is and
//! how its results are judged and reported is `analysis::pairwise`; this module measures.

mod ipc;
pub mod measure;
mod roce_paths;
pub mod streams;
mod timed;

use ranks::wire::WireError;
use ranks::{Transport, TransportError, World};
use serde::Serialize;

use crate::progress::Progress;
use analysis::pairwise::formulas::{BwResult, LatencyStats};
use analysis::pairwise::rails::{self, Fabric};
use analysis::pairwise::{
    defaults, follow_up, paths, rounds_for, verdict, Amount, HopPath, Measurement, OpName, PairwiseConfig,
    PairwiseOutcome, Pattern, Selection, TestKind, Timings,
};
use analysis::schedule::{host_disjoint_groups, Pair, Schedule, Shifts};
pub use ipc::{GpuPairs, IpcPairError};
use measure::MeasureSpec;

/// Measure one pair at one size; returns the measurements this rank made. In a GPU run
/// (`gpus`), a pair of one node over IPC copies GPU to GPU ([`GpuPairs::measure`]) and every
/// measurement says its path.
fn measure_pair(
    t: &mut dyn Transport,
    peer: usize,
    cfg: &PairwiseConfig,
    (bytes, retest): (usize, bool),
    gpus: Option<&mut GpuPairs>,
) -> Result<Vec<Measurement>, PairwiseError> {
    let Some(g) = gpus else {
        return Ok(measure_net(t, peer, cfg, bytes, retest)?);
    };
    let path = g.path(peer);
    if path == HopPath::Net {
        let ms = measure_net(t, peer, cfg, bytes, retest)?;
        return Ok(ms.into_iter().map(|m| Measurement { path: Some(path), ..m }).collect());
    }
    let spec = MeasureSpec::of(cfg, bytes);
    let ms = g.measure(t, peer, &spec, cfg.bidirectional)?;
    let rec = |(src, dst, r): (usize, usize, BwResult)| Measurement {
        bw: Some(r),
        path: Some(path),
        ..Measurement::bandwidth(src, dst, bytes as u64, r.iterations, r.avg_gbps, retest)
    };
    Ok(ms.into_iter().map(rec).collect())
}

/// [`measure_pair`] over the network.
fn measure_net(
    t: &mut dyn Transport,
    peer: usize,
    cfg: &PairwiseConfig,
    bytes: usize,
    retest: bool,
) -> Result<Vec<Measurement>, TransportError> {
    let me = t.rank();
    let spec = MeasureSpec::of(cfg, bytes);
    let (lo, hi) = (me.min(peer), me.max(peer));
    let mut out = Vec::new();
    let rec = |src, dst, bw: Option<BwResult>, lat: Option<LatencyStats>, iterations, paths| Measurement {
        src,
        dst,
        bytes: bytes as u64,
        bw,
        lat,
        iterations,
        retest,
        paths,
        connections: Vec::new(),
        slot: None,
        path: None,
    };
    // SEND is measured like the one-sided operations where the transport can (verbs: zero-copy
    // on a queue pair of its own, as ib_send_bw, -D runs too); elsewhere (TCP) through two-sided
    // messages.
    let one_sided = match cfg.op {
        OpName::Write => Some(ranks::OneSidedOp::Write),
        OpName::Read => Some(ranks::OneSidedOp::Read),
        OpName::Send if t.kind().has_rdma() => Some(ranks::OneSidedOp::Send),
        OpName::Send => None,
    };
    match cfg.test {
        TestKind::Lat => {
            let l = match one_sided {
                Some(op) => measure::latency_one_sided(t, peer, &spec, op)?,
                None => measure::latency(t, peer, &spec)?,
            };
            if let Some((iters, l)) = l {
                out.push(rec(lo, hi, None, Some(l), iters, Vec::new()));
            }
        }
        TestKind::Bw if cfg.bidirectional && one_sided.is_some() => {
            if let Some(op) = one_sided {
                if let Some((r, paths)) = measure::bw_one_sided_bidir(t, peer, &spec, op)? {
                    out.push(rec(lo, hi, Some(r), None, r.iterations, paths));
                }
            }
        }
        TestKind::Bw if cfg.bidirectional => {
            let r = measure::bw_bidir(t, peer, &spec)?;
            if me == lo {
                out.push(rec(lo, hi, Some(r), None, r.iterations, Vec::new()));
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
                let other = if me_initiates { target } else { initiator };
                if let Some((r, paths)) = measure::bw_one_sided(t, other, &spec, op, me_initiates)? {
                    let (src, dst) = if cfg.op == OpName::Read {
                        (target, initiator)
                    } else {
                        (initiator, target)
                    };
                    // RoCE v2 queue pairs as connections, traced by the sender of a write or
                    // send in the first pass at the matrix size (not a read's: its data comes
                    // back on the responder's packets).
                    let traced = !cfg.no_trace && !retest && bytes == cfg.matrix_size() && cfg.op != OpName::Read;
                    let flows = t
                        .rdma()
                        .and_then(|x| x.roce_v2_flows(other))
                        .filter(|_| cfg.op != OpName::Read);
                    let mut m = rec(src, dst, Some(r), None, r.iterations, paths);
                    if let Some(f) = flows.filter(|f| f.sports.len() == m.paths.len()) {
                        m.connections = roce_paths::connections(&f, bytes as u64 * r.iterations, &m.paths, traced);
                    }
                    out.push(m);
                }
            }
        }
        TestKind::Bw if spec.qps > 1 && t.kind() == ranks::TransportKind::Tcp => {
            // `-q` over TCP: each direction on connections of its own, the sender's traced in
            // the first pass at the matrix size.
            let traced = !cfg.no_trace && !retest && bytes == cfg.matrix_size();
            for (src, dst) in [(lo, hi), (hi, lo)] {
                if me == src {
                    let (r, conns) = streams::bw_send(t, dst, &spec, traced)?;
                    let mut m = rec(src, dst, Some(r), None, r.iterations, Vec::new());
                    m.connections = conns;
                    out.push(m);
                } else {
                    streams::bw_recv(t, src, &spec, traced)?;
                }
            }
        }
        TestKind::Bw => {
            // Lower to higher, then back.
            for (src, dst) in [(lo, hi), (hi, lo)] {
                if me == src {
                    let r = measure::bw_send(t, dst, &spec)?;
                    out.push(rec(src, dst, Some(r), None, r.iterations, Vec::new()));
                } else {
                    measure::bw_recv(t, src, &spec)?;
                }
            }
        }
    }
    Ok(out)
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
    /// A pair over IPC: its GPU failed, or its two ranks disagreed.
    #[error(transparent)]
    Ipc(IpcPairError),
}

impl From<IpcPairError> for PairwiseError {
    fn from(e: IpcPairError) -> Self {
        match e {
            IpcPairError::Transport(t) => PairwiseError::Transport(t),
            other => PairwiseError::Ipc(other),
        }
    }
}

/// The rounds' harness: `len` rounds, a barrier before the first and after each; `round(t, k,
/// mine)` measures this rank's part of round k into `mine` and says whether it took part (its
/// measuring time then counts as the round's wire time). `pairs_in(k)` is round k's pairs, for
/// the progress line. Rank 0 gets every rank's measurements.
fn time_rounds(
    world: &World,
    t: &mut dyn Transport,
    len: usize,
    pairs_in: impl Fn(usize) -> usize,
    progress: &mut Progress,
    mut round: impl FnMut(&mut dyn Transport, usize, &mut Vec<Measurement>) -> Result<bool, PairwiseError>,
) -> Result<(Option<Vec<Measurement>>, Clock), PairwiseError> {
    progress.start(len, (0..len).map(&pairs_in).sum());
    let mut mine = Vec::new();
    // Seconds this rank spent measuring in each round.
    let mut busy = vec![0.0f64; len];
    // This rank's wall time of each round (barrier to barrier).
    let mut walls = vec![0.0f64; len];
    // Everyone starts the clock together, so no rank's late start counts as wire time.
    world.barrier("start of the pairwise rounds");
    let start = std::time::Instant::now();
    let mut round_start = start;
    for (k, spent) in busy.iter_mut().enumerate() {
        ranks::postmortem::enter(&format!("pairwise round {}", k + 1));
        let t0 = std::time::Instant::now();
        let before = mine.len();
        if round(&mut *t, k, &mut mine)? {
            *spent = t0.elapsed().as_secs_f64();
        }
        // What ran at the same time: the verdict tells a slow part from a slow moment by it.
        for m in &mut mine[before..] {
            m.slot = Some(k as u32);
        }
        world.barrier("end of a pairwise round");
        walls[k] = round_start.elapsed().as_secs_f64();
        round_start = std::time::Instant::now();
        progress.round_done(k + 1, pairs_in(k));
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

/// Measure `rounds` (every size) as pairs, each measuring its directions one after the other.
fn measure_rounds(
    world: &World,
    t: &mut dyn Transport,
    cfg: &PairwiseConfig,
    rounds: &Schedule,
    progress: &mut Progress,
    gpus: &mut Option<&mut GpuPairs>,
) -> Result<(Option<Vec<Measurement>>, Clock), PairwiseError> {
    let me = t.rank();
    time_rounds(
        world,
        t,
        rounds.len(),
        |k| rounds.pairs_in(k),
        progress,
        |t, k, mine| {
            let Some(peer) = rounds.peer(k, me) else {
                return Ok(false);
            };
            for &bytes in &cfg.sizes {
                mine.extend(measure_pair(t, peer, cfg, (bytes, false), gpus.as_deref_mut())?);
            }
            Ok(true)
        },
    )
}

/// Hosts a run needs for the shift rounds. Over TCP a host whose way in is slow also slows its
/// way out while both stream at once (the acknowledgements of its outgoing stream queue behind
/// the incoming data), so all 2(H-1) of its H(H-1) directions between hosts can read slow in the
/// first pass, where the circle rounds show only its H-1 incoming ones. The healthy bulk stays a
/// clear majority (2/H below a half) from 5 hosts on; the retests, one direction at a time, then
/// clear the outgoing directions and the node is named. Fewer hosts keep the circle rounds.
pub const MIN_SHIFT_HOSTS: usize = 5;

/// Whether the all-pairs rounds run as directed shifts ([`Shifts`], [`measure_shifts`]): every
/// pair of every rank on at least [`MIN_SHIFT_HOSTS`] hosts, bandwidth one direction per stream
/// (not `-b`), a count of messages (not `-D`), over two-sided messages (TCP) on the mesh's own
/// connections (not `-q`, whose tests open connections of their own). Elsewhere, and on
/// RDMA, the circle rounds measure each pair's directions one after the other.
fn in_shifts(world: &World, t: &dyn Transport, cfg: &PairwiseConfig) -> bool {
    world.node_count() >= MIN_SHIFT_HOSTS
        && cfg.test == TestKind::Bw
        && !cfg.bidirectional
        && matches!(cfg.amount, Amount::Iterations(_))
        && cfg.op == OpName::Send
        && !t.kind().has_rdma()
        && cfg.pattern == Pattern::All
        && matches!(cfg.selection, Selection::All)
        && cfg.qps <= 1
}

/// The rounds as directed shifts: in each slot every rank streams to one peer while it receives
/// from another ([`measure::bw_stream`]); each direction is recorded by its receiver. A slot's
/// directions over two count as its pairs, as the circle rounds count.
fn measure_shifts(
    world: &World,
    t: &mut dyn Transport,
    cfg: &PairwiseConfig,
    shifts: Shifts,
    progress: &mut Progress,
) -> Result<(Option<Vec<Measurement>>, Clock), PairwiseError> {
    let me = t.rank();
    let pairs_in = |k| shifts.directions_in(k) / 2;
    time_rounds(world, t, shifts.len(), pairs_in, progress, |t, k, mine| {
        let (to, from) = (shifts.to(k, me), shifts.from(k, me));
        for &bytes in &cfg.sizes {
            let spec = MeasureSpec::of(cfg, bytes);
            if let (Some(r), Some(src)) = (measure::bw_stream(t, to, from, &spec)?, from) {
                mine.push(Measurement {
                    src,
                    dst: me,
                    bytes: bytes as u64,
                    bw: Some(r),
                    lat: None,
                    iterations: r.iterations,
                    retest: false,
                    paths: Vec::new(),
                    connections: Vec::new(),
                    slot: None,
                    path: None,
                });
            }
        }
        Ok(to.is_some() || from.is_some())
    })
}

/// Rank 0's `value` on every rank (JSON over MPI).
fn share<T: Serialize + serde::de::DeserializeOwned>(world: &World, value: &T, what: &str) -> Result<T, WireError> {
    let bytes = world.broadcast_vec(&serde_json::to_vec(value).unwrap_or_default(), what);
    serde_json::from_slice(&bytes).map_err(|_| WireError {
        rank: 0,
        what: what.into(),
    })
}

/// Retest `pairs` at the matrix size, `passes` times over (the whole list, then again), so each
/// pair's passes are apart in time; rank 0 gets the results. One pair at a time, or with
/// `at_once` the pairs that share no host together ([`host_disjoint_groups`]): a group's pairs
/// start after one barrier and the next group after the next. The ranks that sit a group out
/// wait in a barrier that sleeps ([`World::barrier_idle`]), so they leave the cores to those
/// measuring.
fn retest(
    world: &World,
    t: &mut dyn Transport,
    cfg: &PairwiseConfig,
    pairs: &[Pair],
    (passes, at_once): (usize, bool),
    gpus: &mut Option<&mut GpuPairs>,
) -> Result<Option<Vec<Measurement>>, PairwiseError> {
    let me = t.rank();
    let groups = if at_once {
        host_disjoint_groups(pairs, world.node_of())
    } else {
        pairs.iter().map(|&p| vec![p]).collect()
    };
    let mut mine = Vec::new();
    for _ in 0..passes {
        for group in &groups {
            let names: Vec<String> = group.iter().map(|(a, b)| format!("{a}-{b}")).collect();
            ranks::postmortem::enter(&format!("retest {}", names.join(" ")));
            if let Some(peer) = analysis::schedule::peer_in(group, me) {
                mine.extend(measure_pair(
                    t,
                    peer,
                    cfg,
                    (cfg.matrix_size(), true),
                    gpus.as_deref_mut(),
                )?);
            }
            world.barrier_idle("end of a retest");
        }
    }
    Ok(gather_measurements(world, &mine, "gathering retest results")?)
}

/// The retests alone so far, in the order they ran (rank 0 holds them), and what they cost.
#[derive(Default)]
struct Retests {
    measured: Option<Vec<Measurement>>,
    /// Pair retests run, each pass of each pair counted once.
    count: usize,
    seconds: f64,
    /// The largest pass-to-pass spread of retests at once that ran again alone
    /// ([`verdict::unsteady_at_once`]).
    at_once_noise: Option<f64>,
}

impl Retests {
    /// Retest `pairs` in `passes` passes on every rank (alone, or host-disjoint pairs at once)
    /// and keep what rank 0 gathers, after what was retested before. Retests at once that
    /// varied more from pass to pass than a quiet fabric does ([`verdict::unsteady_at_once`],
    /// decided by rank 0) are dropped and run again one pair at a time. Whether the kept ones
    /// ran at once.
    fn run(
        &mut self,
        world: &World,
        t: &mut dyn Transport,
        cfg: &PairwiseConfig,
        pairs: &[Pair],
        (passes, at_once): (usize, bool),
        gpus: &mut Option<&mut GpuPairs>,
    ) -> Result<bool, PairwiseError> {
        let started = std::time::Instant::now();
        let mut more = retest(world, t, cfg, pairs, (passes, at_once), gpus)?;
        self.count += pairs.len() * passes;
        let mut held = at_once;
        if at_once {
            let noise = more
                .as_deref()
                .and_then(|ms| verdict::unsteady_at_once(ms, world.hosts()));
            if let Some(sd) = share(world, &noise, "sharing whether the retests at once were steady")? {
                self.at_once_noise = Some(self.at_once_noise.map_or(sd, |n| n.max(sd)));
                more = retest(world, t, cfg, pairs, (passes, false), gpus)?;
                self.count += pairs.len() * passes;
                held = false;
            }
        }
        self.seconds += started.elapsed().as_secs_f64();
        match (self.measured.as_mut(), more) {
            (Some(all), Some(more)) => all.extend(more),
            (None, more) => self.measured = more,
            (Some(_), None) => {}
        }
        Ok(held)
    }
}

/// Run the pairwise test on every rank. Rank 0 gets the outcome.
///
/// The pass measures the rounds; rank 0 picks suspects and reference pairs, which every rank
/// learns and retests one pair at a time. After a quick pattern (`--pairs`), the ranks of the
/// confirmed pairs and a few healthy references are then tested all-pairs ([`follow_up`]) and
/// the new suspects retested, so the verdict is decided on enough pairs to place the fault.
/// A GPU run (`gpus`) measures its pairs over IPC GPU to GPU, and always in circle rounds.
pub fn run(
    world: &World,
    t: &mut dyn Transport,
    cfg: &PairwiseConfig,
    (fabric, progress): (Fabric, &mut Progress),
    gpus: Option<&mut GpuPairs>,
) -> Result<Option<PairwiseOutcome>, PairwiseError> {
    let mut gpus = gpus;
    let hosts = world.hosts();
    let mut rounds = rounds_for(t.size(), cfg.selection, cfg.pattern, world.node_of());
    let shifts = (gpus.is_none() && in_shifts(world, t, cfg)).then(|| Shifts::new(t.size()));
    let (mut measurements, mut clock) = match shifts {
        Some(sh) => measure_shifts(world, t, cfg, sh, progress)?,
        None => measure_rounds(world, t, cfg, &rounds, progress, &mut gpus)?,
    };
    let rounds_run = shifts.map(|sh| sh.len());
    let plan_of = |ms: &Option<Vec<Measurement>>| match ms {
        Some(all) if cfg.retest => verdict::RetestPlan {
            paths: paths::pairs_with_suspect_paths(all, cfg),
            amount: verdict::retest_amount(all, cfg, hosts),
            ..rails::plan_rail_retests(all, cfg, hosts, fabric.topology)
        },
        _ => verdict::RetestPlan::default(),
    };
    let mut plan = share(world, &plan_of(&measurements), "sharing suspect pairs")?;
    // What the retests send: the first pass's count, or fewer where that takes long (decided
    // once, from the first pass, for every retest of the run).
    let recfg = plan.amount.map_or_else(|| cfg.clone(), |a| a.applied(cfg));
    let mut retests = Retests::default();
    let passes = (defaults::RETEST_PASSES, plan.at_once);
    plan.at_once = retests.run(world, t, &recfg, &plan.pairs(), passes, &mut gpus)?;

    // The follow-up of a quick pass: rank 0 decides which ranks, every rank learns them.
    let mut follow = Vec::new();
    if cfg.pattern != Pattern::All && cfg.retest {
        if let (Some(ms), Some(re)) = (&measurements, &retests.measured) {
            let (v, _) = rails::judge_rails(ms, re, cfg, hosts, &plan, fabric);
            follow = follow_up::ranks(&v, &plan, cfg.selection, world.node_of());
        }
        follow = share(world, &follow, "sharing the follow-up ranks")?;
    }
    if !follow.is_empty() {
        // Only after a quick pattern: its few pairs per rank, listed.
        let measured: std::collections::HashSet<Pair> = rounds.pairs().collect();
        let more = follow_up::rounds(&follow, cfg.selection, world.node_of(), &measured);
        let listed = Schedule::listed(more.clone());
        let (second, more_clock) = measure_rounds(world, t, cfg, &listed, progress, &mut gpus)?;
        clock.wall += more_clock.wall;
        clock.wire += more_clock.wire;
        // The follow-up's rounds come after the first pass's: their slots too.
        let offset = rounds.len() as u32;
        rounds.extend(more);
        if let (Some(ms), Some(extra)) = (measurements.as_mut(), second) {
            ms.extend(extra.into_iter().map(|m| Measurement {
                slot: m.slot.map(|k| k + offset),
                ..m
            }));
            ms.sort_by_key(|m| (m.bytes, m.src, m.dst));
        }
        // Retest what the whole picture makes suspect and was not retested yet.
        let whole = share(world, &plan_of(&measurements), "sharing suspect pairs")?;
        let done: std::collections::HashSet<Pair> = plan.pairs().into_iter().collect();
        let new: Vec<Pair> = whole.pairs().into_iter().filter(|p| !done.contains(p)).collect();
        let passes = (defaults::RETEST_PASSES, whole.at_once);
        let held = retests.run(world, t, &recfg, &new, passes, &mut gpus)?;
        plan = verdict::RetestPlan {
            at_once: plan.at_once && held,
            amount: plan.amount,
            ..whole
        };
    }
    // The pairs still slow alone, once more: rank 0 decides which, every rank learns them.
    if cfg.retest {
        let still = match (&measurements, &retests.measured) {
            (Some(ms), Some(re)) => {
                let still = verdict::to_confirm(&rails::judge_rails(ms, re, cfg, hosts, &plan, fabric).0);
                // What the passes so far showed (the confirmation passes may add to it below).
                plan.at_once_noise = retests.at_once_noise;
                plan.settled = verdict::settled_in_two(&plan, re, &still);
                if plan.settled {
                    Vec::new()
                } else {
                    still
                }
            }
            _ => Vec::new(),
        };
        let still = share(world, &still, "sharing the pairs to confirm")?;
        if !still.is_empty() {
            let passes = (defaults::CONFIRM_PASSES, plan.at_once);
            retests.run(world, t, &recfg, &still, passes, &mut gpus)?;
        }
    }
    let Retests {
        measured,
        count: retest_count,
        seconds: retest_s,
        at_once_noise,
    } = retests;
    plan.at_once_noise = at_once_noise;
    Ok(measurements.zip(measured).map(|(measurements, retests)| {
        let (v, rails) = rails::judge_rails(&measurements, &retests, cfg, hosts, &plan, fabric);
        let paths = paths::judge_paths(&measurements, &retests, cfg);
        let cables = v.links.clone();
        PairwiseOutcome {
            config: cfg.clone(),
            transport: t.kind().as_str().to_string(),
            transport_details: t.details(),
            hosts: hosts.to_vec(),
            rounds: rounds_run.unwrap_or(rounds.len()),
            measurements,
            retests,
            verdict: v,
            config_findings: Vec::new(),
            rails,
            follow_up: follow,
            counters: Vec::new(),
            timings: Some(Timings {
                rounds: rounds_run.unwrap_or(rounds.len()),
                sweep_s: clock.wall,
                wire_s: clock.wire,
                retests: retest_count,
                retest_s,
                ..Timings::default()
            }),
            paths,
            cables,
            // Named on rank 0 after the run (launcher's pairwise command, unless --no-resolve).
            router_names: Default::default(),
            repeats: Vec::new(),
            over_time: None,
        }
    }))
}
