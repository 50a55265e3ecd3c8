//! The rank side: join the job, build the mesh, run one test, and leave with the right status.

use std::time::Duration;

use ranks::mesh::{self, MeshError, TcpOptions};
use ranks::verbs_mesh::{self, VerbsMeshError, VerbsOptions};
use ranks::{Timeouts, Transport, World};

use analysis::findings::{findings, Pcie, RankFacts};

use crate::cli::TransportChoice;
use crate::exit::{RankFailure, Status};
use crate::settings::Rank;

/// The mesh every test runs over, held for the whole job (the driver's default stage).
pub type Mesh = dyn Transport;

/// Join the job, connect the mesh, run `body`; returns the process exit status.
/// Usage problems are the same on every rank: rank 0 says them and all leave with status 2. Any
/// other failure leaves at once (without MPI_Finalize, which could block on a dead peer) with the
/// status [`RankFailure::status`] gives; the MPI launcher then ends the other ranks.
pub fn run_rank(args: &Rank, body: impl FnOnce(&World, &mut Mesh) -> Result<i32, RankFailure>) -> i32 {
    let timeout = Duration::from_secs_f64(args.timeout);
    let timeouts = Timeouts::uniform(timeout);
    // Before MPI opens its own descriptors: a socket per peer does not fit the common default
    // soft limit of 1024 at a thousand ranks.
    let files = ranks::limits::raise_open_files();
    // Test-only faults (MESHRUN_FAULT) register as hooks before the first phase; a malformed
    // value is a usage error.
    if let Err(e) = collectives::fault::install_from_env() {
        ranks::eline!("meshrun: {e}");
        return Status::Usage.code();
    }
    ranks::postmortem::enter("bootstrap");
    let world = match World::init(timeouts.mpi) {
        Ok(w) => w,
        Err(e) => {
            ranks::eline!("meshrun: {e}");
            return Status::Usage.code();
        }
    };
    if let Err(code) = check_open_files(&world, args, files) {
        return code;
    }
    // Host reductions take this rank's share of the machine's cores, not all of them.
    collectives::threads::share_machine(world.machine_size());
    if world.rank() == 0 {
        for names in world.one_machine() {
            ranks::eline!(
                "meshrun: warning: hosts {} are one machine (one kernel boot id): traffic between them never leaves it, \
                 so their pairs measure that machine, not the fabric; place one rank group per node (Kubernetes: \
                 podAntiAffinity or topologySpreadConstraints; Slurm: check the allocation)",
                names.join(", ")
            );
        }
    }
    // `pairwise --rails auto`: this rank's NIC, found on its host, before anything uses one.
    let found;
    let args = if args.rails_auto {
        match crate::rails_auto::resolve(&world, args) {
            Ok(r) => {
                found = r;
                &found
            }
            Err(why) => {
                if world.rank() == 0 {
                    say(&why);
                }
                return Status::Usage.code();
            }
        }
    } else {
        args
    };
    let started = std::time::Instant::now();
    // The address the TCP mesh uses, chosen once: the post-mortem's control port listens there too.
    let ip = mesh::choose_ip(&world, &tcp_options(args, world.local_rank()));
    ranks::postmortem::start(&world, ip.as_ref().ok().copied(), args.verbose);
    ranks::postmortem::enter("endpoints");
    let connected = connect(&world, args, timeouts, ip);
    let _ = SETUP_SECONDS.set(started.elapsed().as_secs_f64());
    let mut mesh: Box<dyn Transport> = match connected {
        Ok(m) => m,
        Err(Failed::Transport(e, status)) => fail(&RankFailure::Transport(e), status),
        Err(Failed::Other(msg, status)) => {
            ranks::eline!("meshrun: {msg}");
            leave_now(status.code());
        }
    };
    finish(&world, body(&world, mesh.as_mut()))
}

/// Join the job with MPI alone (no mesh, no fault hooks, no post-mortem), run `body`; returns
/// the process exit status as [`run_rank`] does.
pub fn run_world(args: &Rank, body: impl FnOnce(&World) -> Result<i32, RankFailure>) -> i32 {
    let world = match World::init(Duration::from_secs_f64(args.timeout)) {
        Ok(w) => w,
        Err(e) => {
            ranks::eline!("meshrun: {e}");
            return Status::Usage.code();
        }
    };
    finish(&world, body(&world))
}

/// The exit status of a rank command's `result`: usage problems said by rank 0, any other
/// failure said here and this rank ended at once.
fn finish(world: &World, result: Result<i32, RankFailure>) -> i32 {
    match result {
        Ok(code) => code,
        // Every rank agreed to stop, and the reason has been said.
        Err(RankFailure::Stopped(status)) => status.code(),
        Err(RankFailure::Usage(m)) => {
            if world.rank() == 0 {
                ranks::eline!("meshrun: {m}");
            }
            Status::Usage.code()
        }
        Err(e) => fail(&e, e.status()),
    }
}

/// Leave after a failure: a wait that expired or a peer that went away starts the post-mortem
/// (one line naming the root cause, status 3); anything else is said here and ends this rank.
fn fail(e: &RankFailure, status: Status) -> ! {
    use ranks::postmortem;
    use ranks::wire::WaitState;
    match e {
        RankFailure::Transport(t @ ranks::TransportError::Timeout { peer, waited, .. }) => {
            postmortem::fail(WaitState::WaitingOnPeer, Some(*peer), *waited, &t.to_string(), false)
        }
        RankFailure::Transport(
            t @ (ranks::TransportError::PeerClosed { peer, .. } | ranks::TransportError::Io { peer, .. }),
        ) => {
            // Said at once (a dead peer ends the job within a second under mpirun), unless a
            // post-mortem already runs here: then the close is the job ending, not news.
            if !postmortem::in_progress() {
                say(&t.to_string());
            }
            postmortem::fail(WaitState::PeerClosed, Some(*peer), Duration::ZERO, &t.to_string(), true)
        }
        other => {
            ranks::eline!("meshrun: {other}");
            leave_now(status.code());
        }
    }
}

/// Why the mesh could not be built: a transport failure (a peer's wait or connection), or
/// anything else with its message and status.
enum Failed {
    Transport(ranks::TransportError, Status),
    Other(String, Status),
}

/// Every rank checks that a socket per peer fits its open-file limit (the TCP mesh, or auto,
/// which may fall back to it), before any connect; a rank over the limit says so, once per host.
fn check_open_files(world: &World, args: &Rank, files: ranks::limits::OpenFiles) -> Result<(), i32> {
    let problem = if args.transport == TransportChoice::Verbs {
        None
    } else {
        let n = world.size();
        ranks::limits::check(
            files,
            ranks::limits::rank_needs(n),
            format!("rank {} ({})", world.rank(), world.host()),
            format!(
                "a TCP socket to each of {} peers, {} for MPI and the process",
                n.saturating_sub(1),
                ranks::limits::RANK_RESERVE
            ),
        )
        .err()
    };
    if let (Some(p), 0) = (&problem, world.local_rank()) {
        say(&p.to_string());
    }
    if world.all_ok(problem.is_none(), "checking open-file limits") {
        Ok(())
    } else {
        Err(Status::Usage.code())
    }
}

/// How long this rank took to build its mesh (endpoint exchange, connects, votes).
static SETUP_SECONDS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

/// Seconds this rank spent building the mesh (0 before it did).
pub fn setup_seconds() -> f64 {
    SETUP_SECONDS.get().copied().unwrap_or(0.0)
}

/// This process's peak resident set size (VmHWM), bytes; None where /proc does not say.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Print `meshrun: MSG` on stderr in one write, so lines of ranks sharing a terminal do not interleave.
pub fn say(msg: &str) {
    ranks::stderr_line(&format!("meshrun: {msg}"));
}

/// A warning when this rank's GPU (`bus_id` as CUDA reports it) and its RDMA NIC sit on different
/// NUMA nodes or PCIe root complexes (from sysfs under --sysfs-root); None over TCP.
pub fn affinity_warning(args: &Rank, t: &dyn Transport, bus_id: &str) -> Option<String> {
    if t.kind() != ranks::TransportKind::Verbs {
        return None;
    }
    let details = t.details();
    let nic = details.iter().find(|(k, _)| k == "Device").map(|(_, v)| v.clone())?;
    let nics = ranks::devices::discover(&args.sysfs_root).ok()?;
    ranks::pci::rank_warning(&args.sysfs_root, bus_id, &nic, &nics)
}

/// Leave without finalising MPI.
pub fn leave_now(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    ranks::exit_now(code)
}

fn verbs_options(args: &Rank) -> VerbsOptions {
    VerbsOptions {
        device: args.ib_dev.clone(),
        devices: args.devices.clone(),
        port: args.ib_port,
        gid_index: args.gid_index,
        sysfs_root: args.sysfs_root.clone(),
        qos: ranks::verbs::Qos {
            sl: args.sl.unwrap_or(0),
            traffic_class: args.tclass.unwrap_or(0),
            flow_label: 0,
        },
        rdma_cm: args.rdma_cm,
        lanes: args.lanes.max(1),
        mtu: args.mtu,
    }
}

/// The `--tcp-if` entry of this local rank (entry `local_rank` mod count), like `--devices`.
pub fn tcp_options(args: &Rank, local_rank: usize) -> TcpOptions {
    TcpOptions {
        tcp_if: (!args.tcp_if.is_empty()).then(|| args.tcp_if[local_rank % args.tcp_if.len()].clone()),
    }
}

/// Build the mesh the user asked for. `auto` uses verbs only when every rank could set it up
/// (the outcome is agreed over MPI, so all ranks pick the same transport).
fn connect(
    world: &World,
    args: &Rank,
    timeouts: Timeouts,
    ip: Result<std::net::IpAddr, MeshError>,
) -> Result<Box<dyn Transport>, Failed> {
    let tcp = || -> Result<Box<dyn Transport>, Failed> {
        match mesh::connect_tcp_on(world, ip, timeouts) {
            Ok(m) => Ok(Box::new(m)),
            Err(MeshError::Connect(t)) => {
                let status = crate::exit::of_transport(&t);
                Err(Failed::Transport(t, status))
            }
            Err(e) => {
                let code = match e {
                    MeshError::Address { .. }
                    | MeshError::LoopbackAcrossHosts { .. }
                    | MeshError::PeersFailed { .. } => Status::Usage,
                    _ => Status::PeerOrDeadline,
                };
                Err(Failed::Other(e.to_string(), code))
            }
        }
    };
    match args.transport {
        TransportChoice::Tcp => tcp(),
        // --rdma-cm asks for RDMA connections: with auto, a failure to make them is the error it
        // is, not a quiet fall-back to TCP.
        TransportChoice::Verbs | TransportChoice::Auto if args.rdma_cm => {
            verbs_mesh::connect(world, &verbs_options(args))
                .map(|m| Box::new(m) as Box<dyn Transport>)
                .map_err(|e| Failed::Other(e.to_string(), Status::Usage))
        }
        TransportChoice::Verbs => verbs_mesh::connect(world, &verbs_options(args))
            .map(|m| Box::new(m) as Box<dyn Transport>)
            .map_err(|e| Failed::Other(e.to_string(), Status::Usage)),
        TransportChoice::Auto => match verbs_mesh::connect(world, &verbs_options(args)) {
            Ok(m) => Ok(Box::new(m)),
            Err(e) => {
                if world.rank() == 0 {
                    let why = match &e {
                        VerbsMeshError::Setup { msg, .. } => msg.clone(),
                        other => other.to_string(),
                    };
                    ranks::eline!("meshrun: RDMA verbs not used ({why}); using TCP");
                }
                tcp()
            }
        },
    }
}

/// What this rank's NIC is and how it is set up, for the configuration findings (read before
/// any traffic: sysfs under --sysfs-root, and the mesh's own endpoint: device, port, MTU, address).
pub fn local_facts(world: &World, t: &dyn Transport, args: &Rank) -> RankFacts {
    let mut f = RankFacts {
        rank: world.rank(),
        host: world.host().to_string(),
        ..RankFacts::default()
    };
    let root = &args.sysfs_root;
    if world.local_rank() == 0 {
        // Once per host: GPUs whose closest RDMA NIC is across a NUMA node or root complex.
        if let Ok(devs) = ranks::devices::discover(root) {
            f.gpu_warnings = ranks::pci::gpu_nic_affinity(root, &devs)
                .iter()
                .filter_map(ranks::pci::GpuNics::warning)
                .collect();
        }
    }
    let pcie = |addr: &str| {
        ranks::pci::link(root, addr).map(|l| Pcie {
            speed: l.speed,
            width: l.width,
            max_speed: l.max_speed,
            max_width: l.max_width,
        })
    };
    let end = t.endpoint();
    match t.kind() {
        ranks::TransportKind::Verbs => {
            let (Some(device), Some(port)) = (end.device, end.port) else {
                return f;
            };
            f.nic = Some(format!("{device} port {port}"));
            // The active MTU is not in sysfs: the mesh asked the device for it.
            f.mtu = end.mtu;
            let Ok(devs) = ranks::devices::discover(root) else {
                return f;
            };
            if let Some(d) = devs.iter().find(|d| d.name == device) {
                f.rate = d.ports.iter().find(|p| p.num == port).map(|p| p.rate.clone());
                f.rate_gbps = f.rate.as_deref().and_then(analysis::findings::rate_gbps);
                f.pci = d.pci.clone();
                f.pcie = d.pci.as_deref().and_then(pcie);
            }
        }
        ranks::TransportKind::Tcp => {
            let Some(i) = end.address.and_then(|ip| ranks::netif::interface_for(root, ip)) else {
                return f;
            };
            f.nic = Some(i.name);
            f.mtu = i.mtu;
            f.pcie = i.pci.as_deref().and_then(pcie);
            f.pci = i.pci;
        }
    }
    f
}

/// What rank 0 learnt from every rank's facts (empty on the other ranks).
#[derive(Debug, Default)]
pub struct Gathered {
    /// The `# Config:` lines.
    pub findings: Vec<String>,
    /// The device or interface each rank uses, by rank (None where it could not be read).
    pub nics: Vec<Option<String>>,
}

/// Gather every rank's facts and preflight inventory; rank 0 prints the findings (`# Config:
/// ...`): the NIC the run uses, then what `meshrun preflight` would name that those lines do not
/// already say (`severity subjects: text`); and gets them back with every rank's NIC.
pub fn config_findings(world: &World, t: &dyn Transport, args: &Rank) -> Result<Gathered, RankFailure> {
    let needs = ranks::inventory::Needs {
        ranks: world.size(),
        // The mesh has registered its memory already (or failed, saying why): no memlock bar here.
        memlock: 0,
        device: args.ib_dev.clone(),
    };
    let inventory = crate::inventory::read(args, world.rank(), world.host(), &needs, world.local_rank() == 0, false);
    let mine = (local_facts(world, t, args), inventory);
    let all = collectives::gather_json(world, &[mine], "gathering configuration facts")?;
    let (facts, inventories): (Vec<RankFacts>, Vec<analysis::preflight::Inventory>) = all
        .map_or_else(Vec::new, |v| v.into_iter().flatten().collect())
        .into_iter()
        .unzip();
    let mut found = findings(&facts);
    let preflight = analysis::preflight::beside_config(analysis::preflight::judge(&inventories, None));
    found.extend(preflight.iter().map(analysis::preflight::config_line));
    let mut nics = vec![None; if facts.is_empty() { 0 } else { world.size() }];
    for f in &facts {
        if let Some(slot) = nics.get_mut(f.rank) {
            *slot = f.nic.clone();
        }
    }
    if !found.is_empty() {
        use std::io::Write;
        let text: String = found.iter().map(|l| format!("# Config: {l}\n")).collect();
        let mut out = std::io::stdout();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
    Ok(Gathered { findings: found, nics })
}
