//! `meshrun pairwise` on each rank.

use std::path::PathBuf;
use std::time::Duration;

use analysis::export::Exporter;
use analysis::pairwise::baseline;
use analysis::pairwise::defaults::{default_bw_warmup, sweep_sizes};
use analysis::pairwise::over_time::plan::Repeats;
use analysis::pairwise::rails::{self, Fabric};
use analysis::pairwise::report::{
    csv::Csv, heatmap::Heatmap, html::Html, json::PairwiseJson, metrics::PairwiseMetrics, text,
};
use analysis::pairwise::topology::Topology;
use analysis::pairwise::{rounds_for, Amount, OpName, PairwiseConfig, PairwiseOutcome, Selection, TestKind};
use collectives::output;
use collectives::progress::Progress;

use ranks::TransportKind;

use crate::cli::{OnUnstable, OpArg, PairwiseArgs, TestArg};
use crate::driver::RankCommand;
use crate::exit::{RankFailure, Status};
use crate::rank::Mesh;
use crate::settings::{self, Rank};

#[cfg(test)]
mod tests;

/// Pairwise's configuration over a mesh of `transport`, or what is wrong with the flags (the
/// first problem, in the order below).
pub fn config(s: &settings::PairwiseSettings, transport: TransportKind) -> Result<PairwiseConfig, String> {
    let a = &s.args;
    let test = match a.test {
        TestArg::Bw => TestKind::Bw,
        TestArg::Lat => TestKind::Lat,
    };
    refused(s, test, transport)?;
    let op = operation(s, test, transport)?;
    // -q (or MESHRUN_QP), else NCCL_IB_QPS_PER_CONNECTION where the mesh has RDMA.
    let mut nic_choice = s.rank.nic_choice.clone();
    let qps = queue_pairs(s, test, transport, &mut nic_choice)?;
    let sizes: Vec<usize> = if a.all_sizes {
        sweep_sizes()
    } else {
        vec![a.size.unwrap_or(if test == TestKind::Lat { 2 } else { 65536 }) as usize]
    };
    let amount = match (a.iters, a.duration) {
        (_, Some(d)) => Amount::Duration(d),
        (Some(n), None) => Amount::Iterations(n),
        (None, None) => Amount::Iterations(if test == TestKind::Lat { 1000 } else { 5000 }),
    };
    let selection = match (a.pair, a.inter_node, a.intra_node) {
        _ if a.rails_on() => Selection::Rails { intra: a.intra_node },
        (Some((x, y)), _, _) => Selection::Pair(x, y),
        (_, true, _) => Selection::InterNode,
        (_, _, true) => Selection::IntraNode,
        _ => Selection::All,
    };
    let warmup = a.warmup.unwrap_or(match test {
        TestKind::Lat => 10,
        TestKind::Bw => default_bw_warmup(sizes.iter().copied().max().unwrap_or(0), a.tx_depth),
    });
    Ok(PairwiseConfig {
        test,
        op,
        sizes,
        amount,
        window: a.tx_depth as usize,
        warmup,
        bidirectional: a.bidirectional,
        selection,
        pattern: a.pairs,
        threshold: a.threshold,
        expect_gbps: a.expect_gbps,
        retest: !a.no_retest,
        op_timeout: Duration::from_secs_f64(s.rank.timeout),
        nic_choice,
        qps: qps as usize,
        unstable_warns: a.on_unstable == OnUnstable::Warn,
        no_trace: a.no_trace,
        p2p: None,
    })
}

/// The operation `--op` asks for, or the default (perftest's ib_write_bw where one-sided writes
/// exist), checked against the transport, `-D` and `--use-cuda`.
fn operation(s: &settings::PairwiseSettings, test: TestKind, transport: TransportKind) -> Result<OpName, String> {
    let a = &s.args;
    // One-sided write and read need the transport's RDMA extension.
    let (can_write, can_read) = (transport.has_rdma(), transport.has_rdma());
    let op = match a.op {
        Some(OpArg::Write) if !can_write => {
            return Err(format!(
                "the {transport} transport cannot do RDMA write (one-sided); use --op send"
            ))
        }
        Some(OpArg::Read) if !can_read => {
            return Err(format!(
                "the {transport} transport cannot do RDMA read (one-sided); use --op send"
            ))
        }
        Some(OpArg::Write) => OpName::Write,
        Some(OpArg::Read) => OpName::Read,
        Some(OpArg::Send) => OpName::Send,
        // perftest's ib_write_bw (with -b and -D too) where one-sided writes exist; otherwise
        // (latency, TCP) send unless --op says write or read.
        None if can_write && test == TestKind::Bw => OpName::Write,
        None => OpName::Send,
    };
    if a.bidirectional && a.duration.is_some() && !transport.has_rdma() {
        return Err(format!(
            "-b with -D: over {transport} both directions run a count of messages; use -n ITERS (over RDMA, \
             -b -D runs for the duration as perftest's)"
        ));
    }
    crate::pairwise_gpu::check(s, test)?;
    if s.use_cuda.is_some() && test == TestKind::Lat && op == OpName::Write {
        return Err(
            "--use-cuda --op write --test lat: the write ping-pong polls its window with the CPU, which cannot \
             read GPU memory; use --op send or --op read (both wait on completions)"
                .into(),
        );
    }
    Ok(op)
}

/// Queue pairs per test ([`settings::Qps::per_test`]), with where they came from appended to
/// `nic_choice`; checked against their range, the transport, the test and `-D`.
fn queue_pairs(
    s: &settings::PairwiseSettings,
    test: TestKind,
    transport: TransportKind,
    nic_choice: &mut Option<String>,
) -> Result<u32, String> {
    let qps = s.qps.per_test(transport.has_rdma(), nic_choice)?;
    let max = settings::qps::MAX_QPS;
    if !(1..=max).contains(&qps) {
        return Err(format!(
            "-q {qps}: expected 1 to {max} queue pairs per test (NCCL's own limit per connection)"
        ));
    }
    if qps > 1 {
        // Over TCP, -q N opens N connections per test, each from its own source port
        // (collectives::pairwise::streams), one direction at a time.
        if !transport.has_rdma() && s.args.bidirectional {
            return Err(format!(
                "-q {qps} over {transport}: a test's connections carry one direction at a time; drop -b, or drop -q"
            ));
        }
        if test == TestKind::Lat {
            return Err(format!(
                "-q {qps}: several queue pairs are for bandwidth tests, as in perftest; drop -q for --test lat"
            ));
        }
    }
    Ok(qps)
}

/// Flags refused with what to do instead: perftest's that meshrun does not run as perftest does
/// ([`crate::cli::perftest::REFUSED`]), `-R` or `-m` without RDMA, perftest's `-p` and
/// `--use_cuda_bus_id`, `-D` or `-b` with `--test lat`.
fn refused(s: &settings::PairwiseSettings, test: TestKind, transport: TransportKind) -> Result<(), String> {
    let a = &s.args;
    if let Some(r) = &a.refused.refusal {
        return Err(r.to_string());
    }
    // The flag only: NCCL_IB_TC is NCCL's, which ignores it where it falls back to sockets.
    if let (Some(tc), false) = (a.rank.tclass, transport.has_rdma()) {
        return Err(format!(
            "-T/--tclass {tc} sets the RDMA queue pairs' traffic class, and this job's mesh is {transport}; \
             drop it (or run where `meshrun devices` lists a device)"
        ));
    }
    if let (Some(m), false) = (a.mtu, transport.has_rdma()) {
        return Err(format!(
            "-m {m} sets an RDMA queue pair's path MTU, and this job's mesh is {transport}: TCP's packets \
             follow the interface's MTU (ip link set dev IF mtu N); drop -m"
        ));
    }
    if s.rank.rdma_cm && !transport.has_rdma() {
        return Err(format!(
            "-R/--rdma-cm connects RDMA queue pairs, and this job's mesh is {transport} (no usable RDMA device, \
             or --transport tcp); drop -R, or run where `meshrun devices` lists a device"
        ));
    }
    if let Some(p) = a.perftest_port {
        return Err(format!(
            "-p {p} (perftest's TCP port for exchanging endpoints): meshrun exchanges them over MPI; drop -p"
        ));
    }
    if let Some(bus) = &a.use_cuda_bus_id {
        return Err(format!(
            "--use_cuda_bus_id {bus}: choose the GPU by its CUDA ordinal instead, --use-cuda N \
             (meshrun devices --gpu lists each GPU's ordinal and bus id)"
        ));
    }
    if test == TestKind::Lat && (a.duration.is_some() || a.bidirectional) {
        return Err("--test lat takes -n iterations, not -D or -b".into());
    }
    Ok(())
}

/// An output file and the exporter of its format.
type OutputFile = (PathBuf, Box<dyn Exporter<PairwiseOutcome>>);

/// The output files asked for, each with the exporter of its format (JSON first: only it may be
/// `-`, stdout).
fn outputs(a: &PairwiseArgs) -> Result<Vec<OutputFile>, String> {
    let mut v: Vec<OutputFile> = Vec::new();
    if let Some(p) = &a.json {
        v.push((p.clone(), Box::new(PairwiseJson)));
    }
    let files = [
        ("--csv", &a.csv),
        ("--heatmap", &a.heatmap),
        ("--html", &a.html),
        ("--metrics", &a.metrics),
    ];
    for (flag, p) in files {
        if p.as_deref().is_some_and(output::is_stdout) {
            return Err(format!(
                "{flag} -: only --json writes to stdout (`--json -`); give {flag} a file name"
            ));
        }
    }
    if let Some(p) = &a.csv {
        v.push((p.clone(), Box::new(Csv)));
    }
    if let Some(p) = &a.heatmap {
        v.push((p.clone(), Box::new(Heatmap::for_path(p)?)));
    }
    if let Some(p) = &a.html {
        v.push((p.clone(), Box::new(Html)));
    }
    if let Some(p) = &a.metrics {
        let now = output::unix_seconds();
        v.push((p.clone(), Box::new(PairwiseMetrics { now })));
    }
    Ok(v)
}

/// `--topology FILE`, read on rank 0; a warning names the job's hosts it does not place (their
/// links are judged without a switch).
fn read_topology(path: &std::path::Path, hosts: &[String]) -> Result<Topology, String> {
    let t = Topology::read(path).map_err(|e| format!("--topology {e}"))?;
    let mut missing: Vec<&str> = hosts
        .iter()
        .filter(|h| t.switch_of(h).is_none())
        .map(String::as_str)
        .collect();
    missing.dedup();
    if !missing.is_empty() {
        ranks::eline!(
            "meshrun: warning: --topology {} places no switch above {}",
            path.display(),
            missing.join(", ")
        );
    }
    Ok(t)
}

/// Whether the baseline `then` ran on this job's hosts, with its test and message size.
fn same_job(
    path: &std::path::Path,
    then: &PairwiseOutcome,
    hosts: &[String],
    cfg: &PairwiseConfig,
) -> Result<(), String> {
    let now = PairwiseOutcome {
        config: cfg.clone(),
        hosts: hosts.to_vec(),
        ..then.clone()
    };
    baseline::comparable(&now, then).map_err(|e| format!("--baseline {}: {e}", path.display()))
}

/// Problems only rank 0 can see: output files.
fn check_outputs(a: &PairwiseArgs) -> Result<(), String> {
    let files = outputs(a)?;
    crate::report_files::check_all_writable(files.iter().map(|(p, _)| p.as_path()), a.force)
}

/// `meshrun pairwise`: the flags, and what the checks before the run found (the configuration,
/// and on rank 0 the topology and baseline files read).
pub struct Pairwise {
    s: settings::PairwiseSettings,
    cfg: Option<PairwiseConfig>,
    topology: Option<Topology>,
    then: Option<PairwiseOutcome>,
}

impl Pairwise {
    pub fn new(s: settings::PairwiseSettings) -> Pairwise {
        Pairwise {
            s,
            cfg: None,
            topology: None,
            then: None,
        }
    }
}

impl Pairwise {
    /// On a routed fabric, [`crate::routed::ROUTED_QPS`] connections per test unless `-q` was
    /// given: every rank asks the kernel how it reaches its peers, and one rank behind a router
    /// is enough (every rank takes part, so all agree).
    fn spread_if_routed(&mut self, world: &ranks::World, t: &mut Mesh) {
        let given = self.s.qps.given.is_some();
        let Some(cfg) = self.cfg.as_mut() else { return };
        if !crate::routed::applies(cfg, given, t.kind() == TransportKind::Tcp) {
            return;
        }
        let found = t.streams().and_then(|s| {
            let peers: Vec<_> = (0..world.size())
                .filter(|&p| p != world.rank())
                .filter_map(|p| s.peer_address(p).map(|a| (p, a)))
                .collect();
            crate::routed::first_routed(&peers)
        });
        let all = world.all_gather_bytes(&crate::routed::record(found), "asking whether the fabric is routed");
        if let Some(f) = crate::routed::first_found(&all) {
            cfg.qps = crate::routed::ROUTED_QPS;
            let note = crate::routed::note(world.hosts(), f);
            cfg.nic_choice = Some(match cfg.nic_choice.take() {
                Some(before) => format!("{before}; {note}"),
                None => note,
            });
        }
    }
}

impl RankCommand for Pairwise {
    type Outcome = PairwiseOutcome;

    fn rank_args(&self) -> &Rank {
        &self.s.rank
    }

    fn json_out(&self) -> Option<(&std::path::Path, bool)> {
        self.s.args.json.as_deref().map(|p| (p, self.s.args.force))
    }

    fn check(&mut self, world: &ranks::World, t: &dyn ranks::Transport) -> Result<(), String> {
        let mut cfg = config(&self.s, t.kind())?;
        if let Some(found) = crate::rails_auto::nic_choice() {
            cfg.nic_choice = Some(match cfg.nic_choice.take() {
                Some(before) => format!("{before}; {found}"),
                None => found.to_string(),
            });
        }
        if let Some((x, y)) = self.s.args.pair {
            if x.max(y) >= world.size() {
                return Err(format!("--pair {x},{y}: this job has ranks 0 to {}", world.size() - 1));
            }
        }
        if rounds_for(world.size(), cfg.selection, cfg.pattern, world.node_of()).is_empty() {
            return Err(format!(
                "no pairs to test: {} rank(s) on {} host(s) with this selection",
                world.size(),
                world.node_count()
            ));
        }
        self.cfg = Some(cfg);
        Ok(())
    }

    fn check_root(&mut self, world: &ranks::World) -> Result<(), String> {
        check_outputs(&self.s.args)?;
        if let Some(p) = &self.s.args.topology {
            self.topology = Some(read_topology(p, world.hosts())?);
        }
        // The baseline is read now, so a wrong file costs no traffic; whether it ran on the
        // same hosts, test and size is checked against this job's before anything is measured.
        if let (Some(p), Some(c)) = (&self.s.args.baseline, &self.cfg) {
            let b = crate::verdict_cmd::read_baseline(p, None)?;
            same_job(p, &b, world.hosts(), c)?;
            self.then = Some(b);
        }
        Ok(())
    }

    fn run(&mut self, world: &ranks::World, t: &mut Mesh) -> Result<Option<PairwiseOutcome>, RankFailure> {
        self.spread_if_routed(world, t);
        let a = &self.s.args;
        let cfg = self
            .cfg
            .as_ref()
            .ok_or_else(|| RankFailure::Usage("the flags were not checked".into()))?;
        // `--op send` measures the SEND opcode (ib_send_bw), not the default RDMA write.
        if let Some(r) = t.rdma() {
            r.use_send_opcode(cfg.op == OpName::Send);
            r.set_test_qps(cfg.qps);
        }
        ranks::verbs::require_dmabuf(a.use_cuda_dmabuf);
        let mut gpus = None;
        if let Some(sel) = &self.s.use_cuda {
            let (pairs, p2p) = crate::pairwise_gpu::setup(world, t, &self.s, cfg, sel)?;
            gpus = Some(pairs);
            let mut c = cfg.clone();
            c.p2p = Some(p2p);
            self.cfg = Some(c);
        }
        let (cfg, a) = match &self.cfg {
            Some(c) => (c, &self.s.args),
            None => return Err(RankFailure::Usage("the flags were not checked".into())),
        };
        let gathered = crate::rank::config_findings(world, t, &self.s.rank)?;
        if matches!(cfg.selection, Selection::Rails { .. }) {
            for w in rails::shared_nics(world.hosts(), &gathered.nics) {
                crate::rank::say(&format!("warning: {w}"));
            }
        }
        let mut progress = Progress::new(world.rank() == 0);
        let fabric = Fabric {
            topology: self.topology.as_ref(),
            nics: &gathered.nics,
        };
        let setup = crate::passes::PassSetup {
            cfg,
            fabric,
            sysfs_root: &self.s.rank.sysfs_root,
        };
        let repeats = repeats(a);
        let mut outcome = if repeats.repeated() {
            crate::passes::repeated(world, t, &setup, repeats, &mut progress, gpus.as_mut())?
        } else {
            crate::passes::one(world, t, &setup, &mut progress, gpus.as_mut())?
        };
        // For bench/verbs-vs-perftest: this rank's verbs calls, to set its work per message
        // beside perftest's.
        if std::env::var_os("MESHRUN_VERBS_CALLS").is_some() {
            crate::rank::say(&format!(
                "rank {} ({}) verbs calls: {}",
                world.rank(),
                world.host(),
                ranks::verbs::calls::calls()
            ));
        }
        let rss = peak_memory(world);
        if let Some(o) = outcome.as_mut() {
            if !a.no_resolve {
                name_routers(o);
            }
            o.config_findings = gathered.findings;
            if let Some(tm) = o.timings.as_mut() {
                tm.setup_s = crate::rank::setup_seconds();
                tm.peak_rss = rss.first().copied().unwrap_or(0.0) as u64;
                tm.registered_peak = rss.get(1).copied().unwrap_or(0.0) as u64;
                tm.qps = rss.get(2).copied().unwrap_or(0.0) as u64;
            }
        }
        Ok(outcome)
    }

    fn render(&self, o: PairwiseOutcome) -> Status {
        let a = &self.s.args;
        print!("{}", text::render(&o));
        let mut slower = false;
        if let (Some(then), Some(p)) = (&self.then, &a.baseline) {
            let c = baseline::comparison(&o, then, self.topology.as_ref());
            print!(
                "{}",
                analysis::pairwise::report::baseline::render(&c, &p.display().to_string())
            );
            slower = !c.pass();
        }
        let mut files_ok = true;
        for (p, exporter) in outputs(a).unwrap_or_default() {
            // Only --json may be `-` (outputs() refused the others): write_json puts it on stdout.
            files_ok &= crate::report_files::write(&p, exporter.as_ref(), &o, a.force);
        }
        if let Some(action) = a.on_fail {
            // Only what the verdict blamed; a failed command is said on its line.
            crate::actions::run(&acted_on(&o), action, a.apply);
        }
        if !files_ok {
            Status::Usage
        } else if !o.pass() || slower {
            Status::FoundProblem
        } else {
            Status::Ok
        }
    }
}

/// On rank 0, after the gather: the traced routers' names from the system resolver, all within
/// [`ranks::names::WITHIN`] (nothing asked where nothing was traced); one line on stderr where
/// some had no answer in time.
fn name_routers(o: &mut PairwiseOutcome) {
    let addrs: Vec<_> = analysis::pairwise::connections::traced_hops(o).into_iter().collect();
    if addrs.is_empty() {
        return;
    }
    let named = ranks::names::resolve(&addrs, ranks::names::WITHIN);
    if named.late > 0 {
        crate::rank::say(&format!(
            "{} of {} traced router address(es) not named: the resolver did not answer within {} s (--no-resolve \
             skips the lookups)",
            named.late,
            addrs.len(),
            ranks::names::WITHIN.as_secs()
        ));
    }
    o.router_names = named.names;
}

/// Every rank's peak memory, the largest kept (an MPI max: O(1) per rank): resident set,
/// registered memory and queue pairs held.
fn peak_memory(world: &ranks::World) -> Vec<f64> {
    let held = ranks::verbs::usage::usage();
    world.max_f64(
        &[
            crate::rank::peak_rss().unwrap_or(0) as f64,
            held.peak_bytes as f64,
            held.qps as f64,
        ],
        "gathering peak memory",
    )
}

/// `--repeat N`/`--repeat-for`: how many passes (one, as without them, by default).
fn repeats(a: &PairwiseArgs) -> Repeats {
    match (a.repeat, a.repeat_for) {
        (None, None) => Repeats::ONCE,
        (count, within_s) => Repeats {
            count: count.map(|n| n as usize),
            within_s,
        },
    }
}

/// What `--on-fail` acts on: the verdict's blamed parts, or with repeats the parts slow in every
/// pass (a part slow at times is reported, not drained).
fn acted_on(o: &PairwiseOutcome) -> std::borrow::Cow<'_, PairwiseOutcome> {
    let Some(t) = &o.over_time else {
        return std::borrow::Cow::Borrowed(o);
    };
    let mut v = o.verdict.clone();
    v.blamed = t.slow.iter().map(|x| x.part.clone()).collect();
    std::borrow::Cow::Owned(PairwiseOutcome {
        verdict: v,
        rails: Vec::new(),
        repeats: Vec::new(),
        ..o.clone()
    })
}
