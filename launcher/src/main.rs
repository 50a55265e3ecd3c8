//! `meshrun`: prove a GPU/RDMA fabric works before a training job trusts it.

#![forbid(unsafe_code)]

mod actions;
mod bounded;
mod cli;
mod coll_cmd;
mod compare_cmd;
mod driver;
mod exit;
mod launch;
mod mesh_check_cmd;
mod nic_env;
mod pairwise_cmd;
mod precheck;
mod preflight_cmd;
mod rank;
mod stall_json;
mod verdict_cmd;
mod workers;

use std::net::ToSocketAddrs;
use std::process::ExitCode;
use std::time::Duration;

use cli::{Cli, Command, LaunchArgs};
use exit::Status;
use launch::{LaunchError, LaunchPlan};

fn main() -> ExitCode {
    let (mut cli, matches) = parse_cli();
    if let Err(e) = resolve(&mut cli.command, &matches) {
        ranks::eline!("meshrun: {e}");
        return ExitCode::from(Status::Usage.code().clamp(0, 255) as u8);
    }
    let code = match cli.command {
        Command::Launch(a) => match launch_cmd(a) {
            Ok(code) => code,
            Err(e) => {
                ranks::eline!("meshrun launch: {e}");
                Status::Usage.code()
            }
        },
        Command::MeshCheck(a) => driver::drive(mesh_check_cmd::MeshCheck::new(a)),
        Command::Devices(a) => devices_cmd(a),
        Command::Compare(a) => compare_cmd::run(&a),
        Command::Verdict(a) => verdict_cmd::run(&a),
        Command::Pairwise(a) => driver::drive(pairwise_cmd::Pairwise::new(a)),
        Command::Preflight(a) => preflight_cmd::run(&a),
        Command::Coll(c) => coll_cmd::run(c.name, c.args),
        Command::Completions(a) => {
            use clap::CommandFactory;
            clap_complete::generate(a.shell, &mut Cli::command(), "meshrun", &mut std::io::stdout());
            0
        }
        Command::Manpage => manpage(),
    };
    self_report(code);
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// With `MESHRUN_SELF_REPORT=1` (the soak test), one stderr line at exit: this process's open
/// files, threads and memory from /proc/self, so growth across many jobs shows.
fn self_report(code: i32) {
    if std::env::var("MESHRUN_SELF_REPORT").as_deref() != Ok("1") {
        return;
    }
    let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let rank = std::env::var("OMPI_COMM_WORLD_RANK")
        .or_else(|_| std::env::var("PMI_RANK"))
        .unwrap_or_else(|_| "-".into());
    rank::say(&format!(
        "self-report: pid {} rank {rank} status {code} fds {fds} threads {} rss_kib {} hwm_kib {}",
        std::process::id(),
        field("Threads:"),
        field("VmRSS:"),
        field("VmHWM:")
    ));
}

/// The command line, with `--version` saying what this binary is and what it can use here, and
/// every flag also read from `MESHRUN_<FLAG>` (the flag wins).
fn parse_cli() -> (Cli, clap::ArgMatches) {
    use clap::{CommandFactory, FromArgMatches};
    // Built once per process; clap keeps a `&'static str`.
    let long: &'static str = Box::leak(long_version().into_boxed_str());
    let matches = match nic_env::with_env(Cli::command().long_version(long)).try_get_matches() {
        Ok(m) => m,
        Err(e) => bad_command_line(e),
    };
    match Cli::from_arg_matches(&matches) {
        Ok(c) => (c, matches),
        Err(e) => bad_command_line(e),
    }
}

/// A command line clap refused: help and version as clap prints them; an error as one line,
/// said by rank 0 alone when mpirun started the ranks directly (every rank has the same
/// arguments, so the others leave quietly with the same status).
fn bad_command_line(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit()
    }
    if ranks::world::rank_from_env().is_none_or(|r| r == 0) {
        let sub = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
        let help = sub.map_or("meshrun --help".to_string(), |s| format!("meshrun {s} --help"));
        ranks::eline!("meshrun: {}; see `{help}`", precheck::clap_line(&e));
    }
    std::process::exit(Status::Usage.code())
}

/// `meshrun manpage`: meshrun(1) in roff, with every subcommand and its flags (and the
/// `MESHRUN_<FLAG>` variable of each) on the one page.
fn manpage() -> i32 {
    use clap::CommandFactory;
    let cmd = nic_env::with_env(Cli::command());
    let mut out = Vec::new();
    let page = clap_mangen::Man::new(cmd.clone());
    let mut ok = page.render(&mut out).is_ok();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        // Each subcommand as its own section: name, about, options.
        let name = format!("meshrun-{}", sub.get_name());
        let sub = sub.clone().bin_name(format!("meshrun {}", sub.get_name()));
        let man = clap_mangen::Man::new(sub);
        out.extend_from_slice(format!(".SH \"{}\"\n", name.to_uppercase().replace('-', "\\-")).as_bytes());
        ok &= man.render_description_section(&mut out).is_ok() && man.render_options_section(&mut out).is_ok();
    }
    out.extend_from_slice(
        concat!(
            ".SH ENVIRONMENT\n",
            ".TP\n\\fBMESHRUN_\\fR\\fIFLAG\\fR\n",
            "Every flag: --tcp-if as MESHRUN_TCP_IF, -n (--iters) as MESHRUN_ITERS; a flag on the command ",
            "line wins; on/off flags take true or false. meshrun launch passes them to the ranks.\n",
            ".TP\n\\fBNCCL_SOCKET_IFNAME\\fR, \\fBNCCL_IB_HCA\\fR, \\fBNCCL_IB_GID_INDEX\\fR\n",
            "Where neither a flag nor MESHRUN_ sets them: --tcp-if, --devices (and --ib-port), --gid-index, ",
            "in NCCL's syntax (prefix names, = exact, ^ exclude; mlx5_0:1 names a port), so a check uses the ",
            "NICs and GID the training job will. The run header's NIC choice line says where each came from.\n",
        )
        .as_bytes(),
    );
    use std::io::Write;
    if !ok || std::io::stdout().write_all(&out).is_err() {
        ranks::eline!("meshrun manpage: could not write the page");
        return Status::Usage.code();
    }
    0
}

/// Everything a flag's value depends on besides the command line, resolved once, before any
/// command runs: the NIC choices from NCCL's variables, perftest's `-d/-i/-x` spellings, a
/// collective's bus bandwidth bar. Commands read their arguments as they are after this.
fn resolve(cmd: &mut Command, m: &clap::ArgMatches) -> Result<(), String> {
    nic_choices(cmd, m)?;
    busbw_bar(cmd, m)?;
    perftest_spellings(cmd);
    Ok(())
}

/// perftest's -d/-i/-x are the same as --ib-dev/--ib-port/--gid-index (and win, as those flags
/// do, over a choice made from NCCL's variables).
fn perftest_spellings(cmd: &mut Command) {
    if let Command::Pairwise(a) = cmd {
        // --use_cuda_dmabuf implies --use_cuda (perftest's own rule).
        if a.use_cuda_dmabuf && a.use_cuda.is_none() {
            a.use_cuda = Some("auto".into());
        }
        if a.d.is_some() {
            a.rank.ib_dev = a.d.clone();
        }
        if a.i.is_some() {
            a.rank.ib_port = a.i;
        }
        if a.x.is_some() {
            a.rank.gid_index = a.x;
        }
        if a.perftest_rdma_cm {
            a.rank.rdma_cm = true;
        }
    }
}

/// The NIC choices of a rank subcommand that neither a flag nor `MESHRUN_<FLAG>` made, from
/// NCCL's variables (nic_env.rs), with where each came from for the run header.
fn nic_choices(cmd: &mut Command, m: &clap::ArgMatches) -> Result<(), String> {
    let Some((_, sub)) = m.subcommand() else {
        return Ok(());
    };
    let rank = match &mut *cmd {
        Command::MeshCheck(a) => &mut a.rank,
        Command::Pairwise(a) => &mut a.rank,
        Command::Preflight(a) => &mut a.rank,
        other => match other.coll_args() {
            Some(a) => &mut a.rank,
            None => return Ok(()),
        },
    };
    let env = |k: &str| std::env::var(k).ok();
    nic_env::apply(rank, sub, &env, &nic_env::Here::this_host())?;
    // -q's source and NCCL's variable, for pairwise's queue pairs per test (resolved with the
    // transport, in pairwise_cmd::config) and the collectives' per peer (before the mesh
    // connects, in coll_cmd).
    let qps = |given: Option<u32>| {
        let source = nic_env::clap_source(sub, "qps", "qp", || given.map(|n| n.to_string()).unwrap_or_default());
        (source.map(Box::new), env("NCCL_IB_QPS_PER_CONNECTION"))
    };
    if let Command::Pairwise(a) = cmd {
        (a.qps_source, a.qps_env) = qps(a.qps);
    } else if let Some(a) = cmd.coll_args() {
        (a.qps_source, a.qps_env) = qps(a.qps);
    }
    Ok(())
}

/// A collective's average bus bandwidth bar: `--expect-busbw`, `MESHRUN_EXPECT_BUSBW`, or
/// nccl-tests' `NCCL_TESTS_MIN_BW`, with where it came from.
fn busbw_bar(cmd: &mut Command, m: &clap::ArgMatches) -> Result<(), String> {
    let Some(a) = cmd.coll_args() else {
        return Ok(());
    };
    let from_env = m
        .subcommand()
        .and_then(|(_, sub)| sub.value_source("expect_busbw"))
        .is_some_and(|s| s == clap::parser::ValueSource::EnvVariable);
    let env = |k: &str| std::env::var(k).ok();
    a.busbw_bar = coll_cmd::busbw_bar(a.expect_busbw, from_env, &env)?;
    Ok(())
}

/// `meshrun --version`: the version and git revision, the MPI library it was built against, and
/// whether libcuda and RDMA devices are there on this machine.
fn long_version() -> String {
    let mpi = mpi::environment::library_version().unwrap_or_else(|_| "unknown".into());
    let mpi = mpi.lines().next().unwrap_or_default().trim().to_string();
    let cuda = if collectives::gpu::cuda::driver_present() {
        "libcuda loads here"
    } else {
        "libcuda not found here (GPU buffers, -g and --use-cuda, need the NVIDIA driver)"
    };
    let rdma = match ranks::devices::discover(std::path::Path::new("/sys")) {
        Ok(d) if !d.is_empty() => format!("libibverbs linked; {} RDMA device(s) here", d.len()),
        Ok(_) => "libibverbs linked; no RDMA device here (--transport tcp)".into(),
        Err(e) => format!("libibverbs linked; no RDMA devices here ({e})"),
    };
    format!(
        "{}\ngit revision: {}\nMPI library: {mpi}\nCUDA: {cuda}\nRDMA: {rdma}",
        env!("CARGO_PKG_VERSION"),
        env!("MESHRUN_GIT_REV")
    )
}

fn launch_cmd(a: LaunchArgs) -> Result<i32, LaunchError> {
    if a.command.is_empty() {
        return Err(LaunchError::NoCommand);
    }
    if a.np == Some(0) {
        return Err(LaunchError::NoRanks);
    }
    let env = |k: &str| std::env::var(k).ok();
    let src = launch::host_source(a.hostfile.as_deref(), a.hosts.as_deref(), &env)?;
    let placement = match &src {
        Some(s) => launch::place(s, a.np, a.ppn, a.oversubscribe)?,
        None => {
            let np = a.np.or(a.ppn.map(u64::from)).ok_or(LaunchError::NothingToRun)?;
            vec![("localhost".to_string(), np)]
        }
    };
    // The rank command is checked here, dry runs included, before any host is waited for or
    // any rank started.
    precheck::rank_command(&a.command, &precheck::Job { placement: &placement }).map_err(LaunchError::RankCommand)?;
    let flavour = match a.mpi {
        Some(f) => f,
        None => launch::detect_flavour(&a.mpirun)?,
    };
    // --ssh-port: ssh's -p after what OMPI_MCA_plm_rsh_args holds (an MPIJob's operator sets it).
    let rsh_args = match (a.ssh_port, flavour) {
        (None, _) => None,
        (Some(port), launch::MpiFlavour::Openmpi) => {
            let given = env("OMPI_MCA_plm_rsh_args").unwrap_or_default();
            Some(format!("{given} -p {port}").trim_start().to_string())
        }
        (Some(port), f) => {
            return Err(LaunchError::SshPortUnsupported {
                flavour: if f == launch::MpiFlavour::Mpich {
                    "MPICH"
                } else {
                    "Intel MPI"
                },
                port,
            })
        }
    };
    if let (Some(s), false) = (&src, a.no_resolve_check) {
        let mpijob = workers::is_mpijob(&s.from, &env);
        let limit = a
            .wait_hosts
            .unwrap_or(if mpijob { workers::MPIJOB_WAIT_S } else { 0.0 });
        if a.dry_run || limit == 0.0 {
            for (host, _) in &placement {
                if let Err(e) = (host.as_str(), 0u16).to_socket_addrs() {
                    let e = LaunchError::Unresolvable {
                        host: host.clone(),
                        from: s.from.clone(),
                        why: e.to_string(),
                    };
                    // A dry run may be made on a machine outside the cluster: say it, print the command.
                    if !a.dry_run {
                        return Err(e);
                    }
                    ranks::eline!(
                        "meshrun launch: warning (--dry-run): {e}; the command may still work on the cluster"
                    );
                }
            }
        } else {
            let rsh_args = rsh_args.clone().or_else(|| env("OMPI_MCA_plm_rsh_args"));
            let ssh_port = |h: &str| workers::ssh_port_for(h, rsh_args.as_deref());
            let wait = workers::Wait {
                hosts: placement.iter().map(|(h, _)| h.as_str()).collect(),
                from: &s.from,
                // In an MPIJob mpirun reaches the workers over ssh: their sshd must accept too.
                port: mpijob.then_some(&ssh_port as &dyn Fn(&str) -> u16),
                limit: Duration::from_secs_f64(limit),
            };
            workers::wait(&wait, &mut |l| ranks::eline!("meshrun launch: {l}")).map_err(LaunchError::HostsNotReady)?;
        }
    }
    let mut env_pass = vec![(
        ranks::world::EXPECT_NODES_ENV.to_string(),
        Some(placement.len().to_string()),
    )];
    for spec in &a.env {
        env_pass.push(launch::parse_env(spec)?);
    }
    // MESHRUN_<FLAG> and NCCL's NIC variables set here reach the ranks on every host.
    for k in nic_env::forwarded(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok())) {
        if k != ranks::world::EXPECT_NODES_ENV && !env_pass.iter().any(|(n, _)| *n == k) {
            env_pass.push((k, None));
        }
    }
    let program = match &a.meshrun {
        Some(p) => p.display().to_string(),
        None => std::env::current_exe()
            .map_err(LaunchError::SelfPath)?
            .display()
            .to_string(),
    };
    let plan = LaunchPlan {
        mpirun: a.mpirun.clone(),
        flavour,
        placement,
        as_root: nix::unistd::geteuid().is_root(),
        oversubscribe: a.oversubscribe || src.is_none(),
        rsh_agent: a.rsh_agent.clone(),
        rsh_args,
        env: env_pass,
        extra_mpi_args: a.mpi_args.clone(),
        program,
        program_args: a.command.clone(),
    };
    let argv = launch::build_argv(&plan);
    if !a.dry_run {
        let np: u64 = plan.placement.iter().map(|(_, n)| n).sum();
        let me = nix::unistd::gethostname().map_or(String::new(), |h| h.to_string_lossy().into_owned());
        launch::check_open_files(np, launch::local_ranks(&plan.placement, &me))?;
    }
    if a.dry_run {
        println!(
            "{}",
            argv.iter()
                .map(|s| launch::shell_quote(s))
                .collect::<Vec<_>>()
                .join(" ")
        );
        return Ok(0);
    }
    let status = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .status()
        .map_err(|source| LaunchError::Spawn {
            mpirun: argv[0].clone(),
            source,
        })?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// The version of `meshrun devices --json`'s layout: raised when a key changes meaning or goes.
const DEVICES_JSON_SCHEMA: u32 = 1;

/// `meshrun devices --json`: what the lines say, as one JSON document on stdout; the status as
/// without --json (2 when there is no RDMA device or the choice fails).
fn devices_json(a: &cli::DevicesArgs) -> i32 {
    use ranks::devices::{self, GidKind};
    use serde_json::json;
    let root = &a.dev.sysfs_root;
    let (devs, error) = match devices::discover(root) {
        Ok(d) => (d, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let gid = |g: &devices::Gid| {
        json!({
            "index": g.index,
            "gid": g.to_sysfs(),
            "type": match g.kind {
                Some(GidKind::RoceV2) => "RoCE v2",
                Some(GidKind::IbRoceV1) => "IB/RoCE v1",
                None => "unknown",
            },
            "ipv4": g.ipv4().map(|ip| ip.to_string()),
            "netdev": g.netdev,
        })
    };
    let devices: Vec<serde_json::Value> = devs
        .iter()
        .map(|d| {
            json!({
                "name": d.name,
                "pci": d.pci,
                "ports": d.ports.iter().map(|p| json!({
                    "port": p.num,
                    "state": p.state.1,
                    "phys_state": p.phys_state,
                    "link_layer": format!("{:?}", p.link_layer),
                    "rate": p.rate,
                    "lid": p.lid,
                    "gids": p.gids.iter().map(gid).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let gpus: Vec<serde_json::Value> = ranks::pci::gpu_nic_affinity(root, &devs)
        .iter()
        .map(|g| {
            json!({
                "pci": g.gpu.addr,
                "numa": g.gpu.numa,
                "nics": g.nics.iter().map(|(n, aff)| json!({"nic": n, "affinity": aff.as_str()})).collect::<Vec<_>>(),
                "warning": g.warning(),
            })
        })
        .collect();
    let choice = devices::choose_device(&devs, a.dev.device.as_deref(), a.dev.port, a.dev.gid_index);
    let (probe, _) = gpu_probe(true);
    let probe: serde_json::Value = probe
        .first()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| json!(probe.first()));
    let doc = json!({
        "tool": "meshrun",
        "test": "devices",
        "schema_version": DEVICES_JSON_SCHEMA,
        "version": env!("CARGO_PKG_VERSION"),
        "error": error,
        "devices": devices,
        "gpus": gpus,
        "gpudirect": probe,
        "selected": choice.as_ref().ok().map(|c| c.describe()),
        "selection_error": choice.as_ref().err().map(|e| e.to_string()),
    });
    println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    if error.is_some() || choice.is_err() {
        Status::Usage.code()
    } else {
        0
    }
}

/// The GPUDirect probe of every GPU here (no NIC needed), as lines (or JSON), and its status:
/// 0 every GPU can do GPUDirect RDMA, 1 one cannot, 2 no driver or no GPU, 4 a probe call failed.
fn gpu_probe(json: bool) -> (Vec<String>, i32) {
    use collectives::gpu::{self, GpuError};
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "this host".into());
    match gpu::probe_all(&host) {
        Ok(probes) => {
            let code = if probes.iter().all(|p| p.usable()) {
                Status::Ok
            } else {
                Status::FoundProblem
            };
            let lines = if json {
                vec![serde_json::to_string_pretty(&probes).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))]
            } else {
                probes.iter().map(|p| p.line()).collect()
            };
            (lines, code.code())
        }
        Err(GpuError::NoDriver { .. }) => (
            vec!["# CUDA: libcuda.so not found here: no GPU to probe for GPUDirect RDMA (GPU buffers, -g and --use-cuda, need the NVIDIA driver)".into()],
            Status::Usage.code(),
        ),
        Err(e @ GpuError::Selection { .. }) => (vec![format!("# CUDA: {e}")], Status::Usage.code()),
        Err(e) => (vec![format!("# CUDA: {e}")], Status::LocalFault.code()),
    }
}

fn devices_cmd(a: cli::DevicesArgs) -> i32 {
    use ranks::devices;
    if a.gpu {
        let (lines, code) = gpu_probe(a.json);
        for l in lines {
            println!("{l}");
        }
        return code;
    }
    if a.json {
        return devices_json(&a);
    }
    let devs = match devices::discover(&a.dev.sysfs_root) {
        Ok(d) => d,
        Err(e) => {
            // The GPUs' side needs no NIC: say what it is even so.
            for l in gpu_probe(false).0 {
                println!("{l}");
            }
            ranks::eline!("meshrun devices: {e}");
            return Status::Usage.code();
        }
    };
    print!("{}", devices::show_gids(&devs));
    for d in &devs {
        for p in &d.ports {
            println!(
                "# {} port {}: {} ({}), {:?}{}, {}, LID 0x{:x}{}",
                d.name,
                p.num,
                p.state.1,
                p.phys_state,
                p.link_layer,
                if d.node_type == devices::NodeType::Rnic {
                    " (iWARP: connects through rdma_cm, -R)"
                } else {
                    ""
                },
                p.rate,
                p.lid,
                d.pci.as_deref().map(|x| format!(", PCI {x}")).unwrap_or_default()
            );
        }
    }
    // GPUs (from the PCI tree) and how close each is to each RDMA NIC, as nvidia-smi topo -m says it.
    for g in ranks::pci::gpu_nic_affinity(&a.dev.sysfs_root, &devs) {
        let nics: Vec<String> = g.nics.iter().map(|(n, aff)| format!("{n} {}", aff.as_str())).collect();
        let numa = g.gpu.numa.map_or("?".to_string(), |n| n.to_string());
        println!(
            "# GPU {} (NUMA {numa}): {}",
            g.gpu.addr,
            if nics.is_empty() {
                "no RDMA NIC with a PCI address".into()
            } else {
                nics.join(", ")
            }
        );
        if let Some(w) = g.warning() {
            println!("# warning: {w}");
        }
    }
    // What CUDA says of GPUDirect RDMA on each GPU (or that there is no driver).
    for l in gpu_probe(false).0 {
        println!("{l}");
    }
    match devices::choose_device(&devs, a.dev.device.as_deref(), a.dev.port, a.dev.gid_index) {
        Ok(c) => {
            println!("# selected: {}", c.describe());
            0
        }
        Err(e) => {
            ranks::eline!("meshrun devices: {e}");
            Status::Usage.code()
        }
    }
}
