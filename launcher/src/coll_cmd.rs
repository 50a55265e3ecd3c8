//! The collective subcommands (`meshrun all_reduce ...`) on each rank.

use std::time::Duration;

use analysis::coll::report::{self, BaselineRun, CollJson, CollRun, DeviceInfo};
use analysis::coll::{self as results, Baseline, CollConfig, Step, TimeAverage};
use analysis::dtype::{DataType, RedOp};
use analysis::export::Exporter;
use collectives::coll::device::DevicePaths;
use collectives::coll::{self, harness};
use collectives::gpu::{self, DataPath, Gpu, GpuInfo};
use collectives::output;
use ranks::wire::WireError;
use ranks::{Transport, TransportKind, World};

use crate::cli::{BaselineArg, CollArgs};
use crate::driver::RankCommand;
use crate::exit::{RankFailure, Status};
use crate::rank::Mesh;
use crate::settings::{self, Rank};

/// Build the configuration, or say what is wrong with the flags.
pub fn config(s: &settings::CollSettings) -> Result<CollConfig, String> {
    let a = &s.args;
    let dtypes = if a.dtype == "all" {
        DataType::ALL.to_vec()
    } else {
        vec![DataType::parse(&a.dtype).map_err(|e| format!("-d: {e}"))?]
    };
    let ops = if a.op == "all" {
        RedOp::ALL.to_vec()
    } else {
        vec![RedOp::parse(&a.op).map_err(|e| format!("-o: {e}"))?]
    };
    if a.min_bytes > a.max_bytes {
        return Err(format!(
            "-b {} is larger than -e {}; expected -b <= -e",
            a.min_bytes, a.max_bytes
        ));
    }
    let step = step(a)?;
    whole_elements(a, &dtypes, step)?;
    if a.per_iter_timing == 1 && a.per_iter_skip as u64 >= a.iters {
        return Err(format!(
            "-K {} skips every one of the -n {} iterations; expected -K below -n",
            a.per_iter_skip, a.iters
        ));
    }
    let average = match a.average {
        0 => TimeAverage::Rank0,
        2 => TimeAverage::Min,
        3 => TimeAverage::Max,
        _ => TimeAverage::Mean,
    };
    Ok(CollConfig {
        min_bytes: a.min_bytes,
        max_bytes: a.max_bytes,
        step,
        iters: a.iters,
        warmup: a.warmup,
        agg: a.agg,
        check: a.check == 1,
        ops,
        dtypes,
        root: a.root,
        average,
        step_timeout: Duration::from_secs_f64(s.rank.timeout),
        baseline: a.baseline.map(|BaselineArg::Mpi| Baseline::Mpi),
        nic_choice: s.rank.nic_choice.clone(),
        p2p: None,
        busbw_bar: s.busbw_bar.clone(),
        per_iter: a.per_iter_timing == 1,
        per_iter_skip: a.per_iter_skip,
    })
}

/// `-f` or `-i`, checked: a size that never grows is refused.
fn step(a: &CollArgs) -> Result<Step, String> {
    match a.step_factor {
        Some(f) if f < 2 => Err(format!(
            "-f {f} would never grow the size; expected a factor of 2 or more (or -i BYTES)"
        )),
        Some(f) => Ok(Step::Factor(f)),
        None if a.step_bytes == 0 => {
            Err("-i 0 would never grow the size; expected an increment of 1 element or more".into())
        }
        None => Ok(Step::Bytes(a.step_bytes)),
    }
}

/// `-b`, `-e` and `-i` hold whole elements of every data type of the run.
fn whole_elements(a: &CollArgs, dtypes: &[DataType], step: Step) -> Result<(), String> {
    for dt in dtypes {
        let sz = dt.size() as u64;
        for (flag, v) in [("-b", a.min_bytes), ("-e", a.max_bytes)] {
            if v == 0 || v % sz != 0 {
                return Err(format!(
                    "{flag} {v} is not a positive multiple of the {sz}-byte {} element",
                    dt.name()
                ));
            }
        }
        if let Step::Bytes(b) = step {
            if b % sz != 0 {
                return Err(format!(
                    "-i {b} is not a multiple of the {sz}-byte {} element",
                    dt.name()
                ));
            }
        }
    }
    Ok(())
}

/// What `-g`, `--gpu-ids` and `--gpu-staging` ask for, checked before any rank starts work.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRequest {
    pub ids: Option<Vec<usize>>,
    /// `--gpu-staging`: copy through pinned host memory (else GPUDirect RDMA).
    pub staging: bool,
}

/// Check the GPU flags; None without -g.
pub fn gpu_request(a: &CollArgs) -> Result<Option<GpuRequest>, String> {
    let Some(n) = a.gpu else {
        if a.gpu_ids.is_some() || a.gpu_staging {
            return Err("--gpu-ids and --gpu-staging apply to GPU buffers: add -g".into());
        }
        return Ok(None);
    };
    if n != 1 {
        return Err(format!(
            "-g {n}: meshrun drives one GPU per rank; start one rank per GPU (meshrun launch --ppn GPUS_PER_NODE) and pass -g 1"
        ));
    }
    if a.baseline.is_some() {
        return Err("--baseline mpi runs the MPI library on host buffers; drop -g or --baseline".into());
    }
    let ids = a.gpu_ids.as_deref().map(gpu::parse_ids).transpose()?;
    Ok(Some(GpuRequest {
        ids,
        staging: a.gpu_staging,
    }))
}

/// Open this rank's GPU for `req` over transport `t`, and find how its buffers reach the network:
/// staged with `--gpu-staging`, else GPUDirect RDMA, proven by registering a device buffer with
/// the NIC here (so a node without it fails now, saying why, not in the first transfer).
fn open_gpu(
    world: &World,
    t: &mut dyn Transport,
    rank: &Rank,
    req: &GpuRequest,
) -> Result<(Box<dyn Gpu>, DataPath), String> {
    if !req.staging && t.kind() == TransportKind::Tcp {
        return Err(
            "-g over the TCP transport needs --gpu-staging: sockets cannot read GPU memory, so data is \
                    copied through pinned host buffers (GPUDirect RDMA needs --transport verbs)"
                .to_string(),
        );
    }
    let mut g = gpu::open(req.ids.as_deref(), world.local_rank(), world.host()).map_err(|e| e.to_string())?;
    // A device call waits no longer than any other step of this rank.
    g.set_call_limit(Duration::from_secs_f64(rank.timeout));
    if req.staging {
        return Ok((g, DataPath::Staged));
    }
    let probe = g.alloc(gpu::PROBE_BYTES).map_err(|e| e.to_string())?;
    let registered = g.nic_memory(probe).map_err(|e| e.to_string()).and_then(|mem| {
        t.require_rdma(
            "cannot move GPU memory without a copy: GPUDirect RDMA needs --transport verbs; or add --gpu-staging",
        )
        .and_then(|r| r.register_region(mem))
        .map_err(|e| e.to_string())
    });
    g.free(probe);
    let (region, path) = registered?;
    if let Some(r) = t.rdma() {
        r.release_region(region);
    }
    Ok((g, DataPath::Direct(path)))
}

/// [`open_gpu`], saying on stderr why it failed, or warning when the GPU and the NIC are far apart.
fn open_gpu_reporting(
    world: &World,
    t: &mut dyn Transport,
    rank: &Rank,
    req: &GpuRequest,
) -> Option<(Box<dyn Gpu>, DataPath)> {
    match open_gpu(world, t, rank, req) {
        Ok((g, path)) => {
            if let Some(w) = crate::rank::affinity_warning(rank, t, &g.info().pci_bus_id) {
                crate::rank::say(&format!("warning: rank {} ({}): {w}", world.rank(), world.host()));
            }
            Some((g, path))
        }
        Err(e) => {
            crate::rank::say(&format!("rank {} ({}): {e}", world.rank(), world.host()));
            None
        }
    }
}

/// The header's word on the mesh's queue pairs per peer over verbs (None for one, from the flag or
/// by default): how many, where the number came from, and the cap a job of `n` ranks put on it
/// (the mesh connected with as many as [`ranks::verbs_mesh::max_lanes`] allows).
pub fn lanes_line(asked: usize, n: usize, note: Option<String>) -> Option<String> {
    let used = asked.min(ranks::verbs_mesh::max_lanes(n));
    if used <= 1 && asked <= 1 && note.is_none() {
        return None;
    }
    let mut line = if used == 1 {
        "1 queue pair per peer".to_string()
    } else {
        format!("{used} queue pairs per peer, every message striped over them")
    };
    if let Some(n) = note {
        line.push_str(&format!(" ({n})"));
    }
    if used < asked {
        line.push_str(&format!(
            "; {asked} asked, capped at {used}: at {n} ranks the staging budget leaves no more a slot of 8 KiB \
             each way per peer"
        ));
    }
    Some(line)
}

/// Every rank's `# Using devices` line: its GPU, and how that rank's GPU data reaches the network.
fn devices(world: &World, transport: &str, gpu: Option<(&dyn Gpu, DataPath)>) -> Result<Vec<DeviceInfo>, WireError> {
    let mine = match gpu {
        Some((g, path)) => serde_json::json!({
            "pid": std::process::id(), "host": world.host(), "gpu": g.info(), "path": path.describe()
        }),
        None => serde_json::json!({"pid": std::process::id(), "host": world.host()}),
    };
    let all = world
        .gather_bytes(mine.to_string().as_bytes(), "gathering device lines")
        .unwrap_or_default();
    all.iter()
        .enumerate()
        .map(|(rank, b)| {
            let v: serde_json::Value = serde_json::from_slice(b).map_err(|_| WireError {
                rank,
                what: "gathering device lines".into(),
            })?;
            let pid = v["pid"].as_u64().unwrap_or(0) as u32;
            let host = v["host"].as_str().unwrap_or("?").to_string();
            Ok(match serde_json::from_value::<GpuInfo>(v["gpu"].clone()) {
                Ok(g) => DeviceInfo {
                    rank,
                    pid,
                    host,
                    device: g.ordinal as i32,
                    bus_id: g.short_bus_id().to_string(),
                    name: match v["path"].as_str() {
                        Some(p) => format!("{} ({p} over {transport})", g.name),
                        None => g.name.clone(),
                    },
                },
                Err(_) => DeviceInfo {
                    rank,
                    pid,
                    host,
                    device: -1,
                    bus_id: "host".into(),
                    name: format!("host memory over {transport}"),
                },
            })
        })
        .collect()
}

/// A collective's subcommand on this rank; the process exit status.
pub fn run(mut s: settings::CollSettings) -> i32 {
    let name = s.name;
    let Some(coll) = coll::by_name(name) else {
        ranks::eline!("meshrun: unknown collective {name}");
        return Status::Usage.code();
    };
    let lanes_note = match s.qps.lanes(s.rank.transport) {
        Ok((n, note)) => {
            s.rank.lanes = n;
            note
        }
        Err(e) => {
            ranks::eline!("meshrun {name}: {e}");
            return Status::Usage.code();
        }
    };
    let cfg = match config(&s) {
        Ok(c) => c,
        Err(e) => {
            ranks::eline!("meshrun {name}: {e}");
            return Status::Usage.code();
        }
    };
    let gpu_req = match gpu_request(&s.args) {
        Ok(g) => g,
        Err(e) => {
            ranks::eline!("meshrun {name}: {e}");
            return Status::Usage.code();
        }
    };
    // The flag asks for something only GPU buffers have; the variables may be set for any run.
    if gpu_req.is_none() && s.p2p.source.as_deref().is_some_and(|w| w.starts_with("--p2p")) {
        ranks::eline!("meshrun {name}: --p2p chooses how GPU buffers move between ranks of a node: add -g");
        return Status::Usage.code();
    }
    crate::driver::drive(Coll {
        coll,
        s,
        cfg,
        gpu_req,
        argv: std::env::args().collect(),
        lanes_note,
    })
}

/// A collective sweep (`meshrun all_reduce ...`): the flags, checked before any rank starts.
struct Coll {
    coll: &'static dyn coll::Collective,
    s: settings::CollSettings,
    cfg: CollConfig,
    gpu_req: Option<GpuRequest>,
    /// The command line, for the JSON report.
    argv: Vec<String>,
    /// Where the queue pairs per peer came from when not -q (for the header).
    lanes_note: Option<String>,
}

/// What rank 0 renders after the sweep.
struct Swept {
    sweep: harness::Sweep,
    devices: Vec<DeviceInfo>,
    start: String,
}

impl RankCommand for Coll {
    type Outcome = Swept;

    fn rank_args(&self) -> &Rank {
        &self.s.rank
    }

    fn json_out(&self) -> Option<(&std::path::Path, bool)> {
        self.s.args.json.as_deref().map(|p| (p, self.s.args.force))
    }

    /// The root against the job's size; several queue pairs per peer against the transport.
    fn check(&mut self, world: &World, t: &dyn Transport) -> Result<(), String> {
        if self.cfg.root >= world.size() {
            return Err(format!(
                "-r {}: this job has ranks 0 to {}",
                self.cfg.root,
                world.size() - 1
            ));
        }
        let asked = self.s.rank.lanes.max(1);
        if t.kind() != TransportKind::Verbs {
            // NCCL's variable is an RDMA setting: a job on TCP runs as without it.
            if asked > 1 && self.s.args.qps.is_some() {
                return Err(format!(
                    "-q {asked}: several queue pairs per peer need RDMA verbs, and this job's mesh is {} \
                     (no usable RDMA device, or --transport tcp); drop -q, or run where `meshrun devices` lists a device",
                    t.kind().as_str()
                ));
            }
            return Ok(());
        }
        if let Some(line) = lanes_line(asked, world.size(), self.lanes_note.take()) {
            self.cfg.nic_choice = Some(match self.cfg.nic_choice.take() {
                Some(h) => format!("{h}; {line}"),
                None => line,
            });
        }
        Ok(())
    }

    /// The -J and --metrics files.
    fn check_root(&mut self, _world: &World) -> Result<(), String> {
        if self.s.args.metrics.as_deref().is_some_and(output::is_stdout) {
            return Err("--metrics -: only -J writes to stdout; give --metrics a file name".into());
        }
        let a = &self.s.args;
        crate::report_files::check_all_writable(
            [&a.json, &a.metrics].into_iter().flatten().map(|p| p.as_path()),
            a.force,
        )
    }

    fn run(&mut self, world: &World, t: &mut Mesh) -> Result<Option<Swept>, RankFailure> {
        let mut gpu: Option<(Box<dyn Gpu>, DataPath)> = None;
        if let Some(req) = &self.gpu_req {
            gpu = open_gpu_reporting(world, t, &self.s.rank, req);
            if !world.all_ok(gpu.is_some(), "opening GPUs") {
                return Err(RankFailure::Stopped(Status::Usage));
            }
        }
        let mut paths = None;
        if let Some((g, net)) = gpu.as_mut() {
            let (ipc, p2p) =
                crate::p2p::choose(world, &mut **g, &self.s.p2p).map_err(|()| RankFailure::Stopped(Status::Usage))?;
            self.cfg.p2p = Some(p2p);
            paths = Some(DevicePaths { net: *net, ipc });
        }
        let cfg = &self.cfg;
        let start = report::now_string();
        // The setup findings pairwise prints too (`# Config:`), at the head of the report.
        crate::rank::config_findings(world, t, &self.s.rank)?;
        let devices = devices(world, t.kind().as_str(), gpu.as_ref().map(|(g, p)| (&**g, *p)))?;
        let stream = report::Stream { on: world.rank() == 0 };
        stream.preamble(cfg, &devices);
        let sweep = harness::run(
            world,
            t,
            self.coll,
            cfg,
            gpu.as_mut()
                .zip(paths.as_ref())
                .map(|((g, _), p)| (&mut **g as &mut dyn Gpu, p)),
            |r: &results::Row| stream.row(r),
        )
        .map_err(|e| coll_failure(world, e))?;
        Ok((world.rank() == 0).then_some(Swept { sweep, devices, start }))
    }

    fn render(&self, s: Swept) -> Status {
        let (a, cfg) = (&self.s.args, &self.cfg);
        let stream = report::Stream { on: true };
        stream.footer(&s.sweep.rows, cfg);
        let library = s.sweep.baseline.as_ref().map(|_| mpi_library()).unwrap_or_default();
        let env = report::env_block(std::env::vars());
        let run = CollRun {
            cfg,
            name: self.coll.name(),
            args: &self.argv,
            env: &env,
            devices: &s.devices,
            rows: &s.sweep.rows,
            baseline: s.sweep.baseline.as_ref().map(|(rows, notes)| BaselineRun {
                implementation: "mpi",
                library: &library,
                rows,
                notes,
            }),
            start_time: &s.start,
        };
        if let Some(b) = &run.baseline {
            stream.baseline(run.name, b);
        }
        let below_bar = cfg
            .busbw_bar
            .as_ref()
            .is_some_and(|b| !b.passes(results::avg_busbw(run.rows)));
        let mut status = if results::total_wrong(run.rows) > 0 || below_bar {
            Status::FoundProblem
        } else {
            Status::Ok
        };
        let now = output::unix_seconds();
        let files: [(Option<&std::path::PathBuf>, &dyn Exporter<CollRun<'_>>); 2] = [
            (a.json.as_ref(), &CollJson),
            (a.metrics.as_ref(), &report::CollMetrics { now }),
        ];
        for (p, exporter) in files {
            if let Some(p) = p {
                if !crate::report_files::write(p, exporter, &run, a.force) {
                    status = Status::Usage;
                }
            }
        }
        status
    }
}

/// The MPI library's version line, for the baseline's title.
fn mpi_library() -> String {
    let lib = mpi::environment::library_version().unwrap_or_default();
    let lib = lib.replace('\0', "");
    lib.lines().next().unwrap_or("unknown MPI").trim().to_string()
}

/// Transport errors name their rank, host and peer already; a GPU error (a failed or stalled
/// device call) gets this rank and host in front.
fn coll_failure(world: &World, e: coll::CollError) -> RankFailure {
    match e {
        coll::CollError::Transport(t) => RankFailure::Transport(t),
        coll::CollError::Layout(l) => RankFailure::Usage(l.to_string()),
        coll::CollError::Gpu(g) => RankFailure::Gpu(format!("rank {} ({}): {g}", world.rank(), world.host())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_says_how_many_queue_pairs_and_the_cap_of_a_big_job() {
        assert_eq!(lanes_line(1, 8, None), None, "one, by default: nothing to say");
        assert_eq!(
            lanes_line(4, 8, None).as_deref(),
            Some("4 queue pairs per peer, every message striped over them")
        );
        assert_eq!(
            lanes_line(4, 8, Some("-q 4 from NCCL_IB_QPS_PER_CONNECTION=4".into())).as_deref(),
            Some("4 queue pairs per peer, every message striped over them (-q 4 from NCCL_IB_QPS_PER_CONNECTION=4)")
        );
        assert_eq!(
            lanes_line(1, 8, Some("-q 1 from NCCL_IB_QPS_PER_CONNECTION=1".into())).as_deref(),
            Some("1 queue pair per peer (-q 1 from NCCL_IB_QPS_PER_CONNECTION=1)")
        );
        // 4,096 ranks: two queue pairs per peer fit the 128 MiB staging budget, four do not.
        assert_eq!(
            lanes_line(4, 4096, None).as_deref(),
            Some(
                "2 queue pairs per peer, every message striped over them; 4 asked, capped at 2: at 4096 ranks \
                 the staging budget leaves no more a slot of 8 KiB each way per peer"
            )
        );
    }
}
