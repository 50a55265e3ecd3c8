//! Command-line interface.

use analysis::units;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::launch::MpiFlavour;

#[derive(Parser, Debug)]
#[command(
    name = "meshrun",
    version,
    about = "Prove a GPU/RDMA fabric works: all-pairs bandwidth and latency, and collectives, over an all-to-all mesh of MPI ranks",
    after_help = "Exit status: 0 all good; 1 the test found a problem (wrong data, slow or failed link); \
                  2 bad input or setup; 3 a peer died or a deadline expired."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build and run the right mpirun command for a host list
    Launch(LaunchArgs),
    /// (rank) Check every rank reaches every other: verified payload both ways and round-trip times
    #[command(name = "mesh-check")]
    MeshCheck(MeshCheckArgs),
    /// RDMA devices, ports and GIDs of this host (like show_gids), what each GPU says of GPUDirect
    /// RDMA (--gpu: only that), and the choice meshrun would make
    Devices(DevicesArgs),
    /// (rank) Every node's setup against its peers and an expectation file, before any traffic:
    /// RDMA ports, GIDs, firmware, drivers, GPUs, PCIe, limits, variables; --local: this node
    /// alone, without MPI (a health check)
    Preflight(PreflightArgs),
    /// (rank) Bandwidth or latency between every pair of ranks, an N x N matrix, slow links and nodes named
    Pairwise(PairwiseArgs),
    // (rank) The collectives, all_reduce .. sendrecv: one subcommand each, from the registry.
    #[command(flatten)]
    Coll(CollCommand),
    /// Judge a saved `pairwise --json` run again offline: under another rule, or against an
    /// earlier good run of the same hosts (--baseline)
    Verdict(VerdictArgs),
    /// Set outputs side by side: nccl-tests and meshrun tables or -J files, perftest or meshrun
    /// pairwise reports; ratios to the first file, a summary, and a pass/fail bar
    Compare(CompareArgs),
    /// Shell completions on stdout: `meshrun completions bash > /etc/bash_completion.d/meshrun`
    Completions(CompletionsArgs),
    /// The man page (roff) on stdout: `meshrun manpage > /usr/local/share/man/man1/meshrun.1`
    Manpage,
}

impl Command {
    /// The collective subcommands' arguments (all_reduce .. sendrecv); None for the others.
    pub fn coll_args(&mut self) -> Option<&mut CollArgs> {
        match self {
            Command::Coll(c) => Some(&mut c.args),
            _ => None,
        }
    }
}

/// One collective's subcommand: which one (its name in `collectives::coll::REGISTRY`) and the
/// flags it was given. The subcommands are made from the registry, so a new collective needs no
/// line here.
#[derive(Debug)]
pub struct CollCommand {
    pub name: &'static str,
    pub args: CollArgs,
}

impl CollCommand {
    /// Every collective as a subcommand, as `#[derive(Subcommand)]` writes one: its flags, its
    /// about line, and nccl-tests' program name (`all_reduce_perf`) as an alias.
    fn augment(cmd: clap::Command, args: fn(clap::Command) -> clap::Command) -> clap::Command {
        collectives::coll::REGISTRY.iter().fold(cmd, |cmd, &(name, c)| {
            // Once per process, like the long version: clap keeps a `&'static str`.
            let alias: &'static str = Box::leak(format!("{name}_perf").into_boxed_str());
            cmd.subcommand(
                args(clap::Command::new(name))
                    .about(format!("(rank) {}", c.description().about))
                    .long_about(None)
                    .alias(alias),
            )
        })
    }
}

impl clap::FromArgMatches for CollCommand {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut matches.clone())
    }
    fn from_arg_matches_mut(matches: &mut clap::ArgMatches) -> Result<Self, clap::Error> {
        use clap::error::ErrorKind;
        let Some((name, mut sub)) = matches.remove_subcommand() else {
            return Err(clap::Error::new(ErrorKind::MissingSubcommand));
        };
        let Some(&(name, _)) = collectives::coll::REGISTRY.iter().find(|(n, _)| *n == name) else {
            return Err(clap::Error::new(ErrorKind::InvalidSubcommand));
        };
        let args = CollArgs::from_arg_matches_mut(&mut sub)?;
        Ok(CollCommand { name, args })
    }
    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.update_from_arg_matches_mut(&mut matches.clone())
    }
    fn update_from_arg_matches_mut(&mut self, matches: &mut clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches_mut(matches)?;
        Ok(())
    }
}

impl Subcommand for CollCommand {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        Self::augment(cmd, CollArgs::augment_args)
    }
    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment(cmd, CollArgs::augment_args_for_update)
    }
    fn has_subcommand(name: &str) -> bool {
        collectives::coll::REGISTRY.iter().any(|(n, _)| *n == name)
    }
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Two or more files (job logs as jobs leave them, or `mpirun --output-filename`
    /// directories); the first is the reference the others are compared with
    #[arg(required = true, num_args = 2..)]
    pub files: Vec<PathBuf>,
    /// Summarise (geometric-mean ratio) over sizes of at least this many bytes
    #[arg(long, default_value = "0", value_parser = units::parse_size)]
    pub from: u64,
    /// Exit 1, naming them, when any size's ratio to the first file is below this (e.g. 0.9)
    #[arg(long = "min-ratio", value_parser = units::parse_positive)]
    pub min_ratio: Option<f64>,
    /// Write the comparison as JSON (`-`: on stdout after the table, between marker lines)
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Overwrite an existing --json file
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct VerdictArgs {
    /// A `meshrun pairwise --json` file
    pub run: PathBuf,
    /// A pair is suspect below this fraction of the median (default: the run's own rule)
    #[arg(long, value_parser = units::parse_fraction)]
    pub threshold: Option<f64>,
    /// Absolute floor in Gb/s (default: the run's own)
    #[arg(long, value_parser = units::parse_positive)]
    pub expect_gbps: Option<f64>,
    /// Which hosts hang off which leaf switch, as pairwise --topology
    #[arg(long)]
    pub topology: Option<PathBuf>,
    /// An earlier `pairwise --json` run of the same hosts: name what is slower than it was
    #[arg(long, value_name = "GOOD.json")]
    pub baseline: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// nccl-tests' flags, with their defaults.
#[derive(Args, Debug)]
pub struct CollArgs {
    #[command(flatten)]
    pub rank: RankArgs,
    /// Smallest size in bytes (K, M, G suffixes)
    #[arg(short = 'b', long = "minbytes", default_value = "32M", value_parser = units::parse_size)]
    pub min_bytes: u64,
    /// Largest size in bytes
    #[arg(short = 'e', long = "maxbytes", default_value = "32M", value_parser = units::parse_size)]
    pub max_bytes: u64,
    /// Size increment in bytes (when no -f)
    #[arg(short = 'i', long = "stepbytes", default_value = "1M", value_parser = units::parse_size)]
    pub step_bytes: u64,
    /// Size multiplication factor
    #[arg(short = 'f', long = "stepfactor")]
    pub step_factor: Option<u64>,
    /// Timed iterations per size
    #[arg(short = 'n', long = "iters", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub iters: u64,
    /// Warm-up iterations per size
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 1)]
    pub warmup: u64,
    /// Operations aggregated into one timed iteration
    #[arg(short = 'm', long = "agg_iters", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub agg: u64,
    /// Check results (0 or 1)
    #[arg(short = 'c', long = "check", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,
    /// Reduction: sum, prod, min, max, avg, or all
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: String,
    /// Data type: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16, or all
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub dtype: String,
    /// Root rank of broadcast and reduce
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// How times combine across ranks: 0 rank 0, 1 mean, 2 min, 3 max
    #[arg(short = 'a', long = "average", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub average: u8,
    /// Write results as JSON, in nccl-tests' -J shape (`-`: on stdout after the table, between
    /// marker lines, so a launcher's log carries it)
    #[arg(short = 'J', long = "output_file")]
    pub json: Option<PathBuf>,
    /// Write the sweep as Prometheus text for node exporter's textfile collector (bus and
    /// algorithm bandwidth and time per size, the bar's verdict, the run's time)
    #[arg(long, value_name = "FILE")]
    pub metrics: Option<PathBuf>,
    /// Also run the MPI library's own collective on the same sizes, in the same harness
    #[arg(long, value_enum)]
    pub baseline: Option<BaselineArg>,
    /// Overwrite an existing JSON file
    #[arg(long)]
    pub force: bool,
    /// Per-iteration timing (0 or 1): every iteration's time, with min, max, p99 and CV columns
    /// and the times in the -J file, as nccl-tests' -I
    #[arg(short = 'I', long = "per_iter_timing", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub per_iter_timing: u8,
    /// Leading iterations left out of the per-iteration statistics (with -I), as nccl-tests' -K
    #[arg(short = 'K', long = "per_iter_skip", default_value_t = 0)]
    pub per_iter_skip: usize,
    /// Expected average bus bandwidth in GB/s: the run fails (exit 1) when the average is below
    /// 90% of it, as nccl-tests' NCCL_TESTS_MIN_BW (read when this flag is not given)
    #[arg(long = "expect-busbw", value_name = "GB/s", value_parser = units::parse_bar)]
    pub expect_busbw: Option<f64>,
    /// The bar and where it came from, settled after parsing (main.rs: flag, MESHRUN_, NCCL_)
    #[arg(skip)]
    pub busbw_bar: Option<analysis::coll::BusbwBar>,
    /// Run on GPU buffers. As nccl-tests' -g it takes the GPUs per rank, and meshrun drives one
    /// (`-g` alone means `-g 1`); start one rank per GPU instead of -g 8. Over verbs the NIC
    /// reads and writes the GPU buffers directly (GPUDirect RDMA) unless --gpu-staging.
    #[arg(short = 'g', long = "gpu", value_name = "N", num_args = 0..=1, default_missing_value = "1")]
    pub gpu: Option<u32>,
    /// GPU of each local rank (comma-separated CUDA ordinals; one id for all), default: local rank
    /// modulo the GPUs visible (CUDA_VISIBLE_DEVICES applies)
    #[arg(long = "gpu-ids", value_name = "LIST")]
    pub gpu_ids: Option<String>,
    /// With -g: copy GPU data through pinned host buffers around every transfer (needed on TCP
    /// and on nodes without GPUDirect RDMA); reductions still run on the GPU
    #[arg(long = "gpu-staging")]
    pub gpu_staging: bool,
    /// Queue pairs per peer over RDMA, 1-16 (NCCL_IB_QPS_PER_CONNECTION when not given): every
    /// message is striped over them fragment by fragment, so on RoCE v2 each takes its own ECMP
    /// path as NCCL's do; capped where the job's size leaves too little staging (2 at 4,096 ranks)
    #[arg(short = 'q', long = "qp", value_name = "QPS")]
    pub qps: Option<u32>,
    /// Where -q came from when not the command line (`MESHRUN_QP`), for the header.
    #[arg(skip)]
    pub qps_source: Option<Box<crate::nic_env::Source>>,
    /// NCCL_IB_QPS_PER_CONNECTION as this rank's environment has it (used over RDMA only).
    #[arg(skip)]
    pub qps_env: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BaselineArg {
    Mpi,
}

#[derive(Args, Debug)]
pub struct LaunchArgs {
    /// Host file: Open MPI (`host slots=N`), MPICH (`host:N`), one host per line, or hostlist lines
    #[arg(long, conflicts_with = "hosts")]
    pub hostfile: Option<PathBuf>,
    /// Hosts as a Slurm hostlist expression, e.g. 'node[01-04]' (one slot each)
    #[arg(long)]
    pub hosts: Option<String>,
    /// Number of ranks (default: all slots, or --ppn x hosts)
    #[arg(long, short = 'n')]
    pub np: Option<u64>,
    /// Ranks per host, overriding the slots of the host list
    #[arg(long)]
    pub ppn: Option<u32>,
    /// MPI flavour (default: detected from `mpirun --version`)
    #[arg(long, value_enum)]
    pub mpi: Option<MpiFlavour>,
    /// The MPI launcher to run
    #[arg(long, default_value = "mpirun")]
    pub mpirun: String,
    /// Remote shell agent the MPI launcher uses to reach hosts (as a Kubeflow MPIJob does)
    #[arg(long)]
    pub rsh_agent: Option<String>,
    /// Port of the hosts' sshd where it is not 22 (a hostNetwork pod's sshd beside the node's
    /// own): ssh gets `-p PORT` through Open MPI's plm_rsh_args, after the arguments
    /// OMPI_MCA_plm_rsh_args already holds (an MPIJob's `-o ConnectionAttempts=10`)
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub ssh_port: Option<u16>,
    /// Pass an environment variable to the ranks: VAR or VAR=VALUE (repeatable)
    #[arg(short = 'x', long = "env", value_name = "VAR[=VALUE]")]
    pub env: Vec<String>,
    /// Extra argument for mpirun, placed before the program (repeatable)
    #[arg(long = "mpi-arg", allow_hyphen_values = true)]
    pub mpi_args: Vec<String>,
    /// Allow more ranks than slots
    #[arg(long)]
    pub oversubscribe: bool,
    /// Do not check that host names resolve
    #[arg(long)]
    pub no_resolve_check: bool,
    /// Wait up to SECONDS for every host to resolve (and, in an MPIJob, for its sshd to accept)
    /// before starting mpirun, saying which are missing (default: 300 in an MPIJob, whose
    /// workers may start after the launcher; elsewhere none: a name that does not resolve is
    /// an error at once)
    #[arg(long, value_name = "SECONDS", value_parser = units::parse_wait)]
    pub wait_hosts: Option<f64>,
    /// Path of the meshrun binary on the hosts (default: this binary's path)
    #[arg(long)]
    pub meshrun: Option<PathBuf>,
    /// Print the exact command, shell-quoted, instead of running it
    #[arg(long)]
    pub dry_run: bool,
    /// The meshrun subcommand and its arguments for the ranks, after `--`
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Options every rank subcommand takes.
#[derive(Args, Debug, Clone)]
pub struct RankArgs {
    /// Transport for the mesh: verbs (RDMA RC queue pairs), tcp, or auto (verbs when every rank
    /// has a usable RDMA device, else tcp)
    #[arg(long, value_enum, default_value = "auto")]
    pub transport: TransportChoice,
    /// RDMA device for the verbs transport (default: the first with an active port)
    #[arg(long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,
    /// One RDMA device per local rank, comma-separated (local rank i uses entry i mod count)
    #[arg(long = "devices", value_delimiter = ',', value_name = "DEV,DEV")]
    pub devices: Vec<String>,
    /// Port of the RDMA device
    #[arg(long = "ib-port", value_name = "PORT")]
    pub ib_port: Option<u8>,
    /// GID index (default: IPv4-mapped over IPv6, global over link-local, RoCE v2 over v1)
    #[arg(long = "gid-index", value_name = "N")]
    pub gid_index: Option<u32>,
    /// Service level of every queue pair (InfiniBand: the virtual lane; perftest's --sl/-S; else
    /// NCCL_IB_SL; default 0)
    #[arg(short = 'S', long, value_name = "SL", value_parser = clap::value_parser!(u8).range(0..=15))]
    pub sl: Option<u8>,
    /// Traffic class of every queue pair (RoCE v2: the IP DSCP/ECN byte, DSCP 26 = 104; the
    /// class a switch's PFC/ECN settings apply to; perftest's --tclass; else NCCL_IB_TC; default 0)
    #[arg(long, value_name = "TC")]
    pub tclass: Option<u8>,
    /// Connect the verbs mesh through the RDMA connection manager (rdma_cm; perftest's -R):
    /// each rank listens on its GID's IPv4 address and the manager resolves routes and moves the
    /// queue pairs to RTS, instead of GIDs and queue pair numbers exchanged over MPI (with
    /// --transport auto, RDMA is then required: no fall-back to TCP)
    #[arg(long = "rdma-cm")]
    pub rdma_cm: bool,
    /// Root of the sysfs tree RDMA devices are read from
    #[arg(long = "sysfs-root", default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Interface name or CIDR for the TCP mesh (default: the address the host name resolves to);
    /// a comma-separated list gives one per local rank (local rank i uses entry i mod count), one
    /// interface per rail
    #[arg(long = "tcp-if", value_delimiter = ',', value_name = "NAME|CIDR,...")]
    pub tcp_if: Vec<String>,
    /// Deadline in seconds for any one wait (connect, receive, MPI step)
    #[arg(short = 'T', long, default_value_t = 60.0, value_parser = units::parse_timeout)]
    pub timeout: f64,
    /// When a deadline expires, also print every rank's own wait and, from the rank that names
    /// the root cause, every rank's state (default: the one root-cause line)
    #[arg(long)]
    pub verbose: bool,
    /// Where the NIC choices came from (set after parsing, see nic_env.rs), for the run header.
    #[arg(skip)]
    pub nic_choice: Option<String>,
    /// Queue pairs per peer of the verbs mesh (the collectives' -q; 0 or 1: one).
    #[arg(skip)]
    pub lanes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TransportChoice {
    Auto,
    Tcp,
    Verbs,
}

#[derive(Args, Debug)]
pub struct MeshCheckArgs {
    #[command(flatten)]
    pub rank: RankArgs,
    /// Payload bytes swapped each way per pair (K, M, G suffixes are binary)
    #[arg(long, default_value = "4096", value_parser = units::parse_size)]
    pub bytes: u64,
    /// Round trips timed per pair
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub iters: u64,
    /// Write every pair's result as JSON (`-`: on stdout after the table, between marker lines)
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Overwrite an existing --json file
    #[arg(long)]
    pub force: bool,
}

fn parse_pattern(s: &str) -> Result<analysis::schedule::Pattern, String> {
    analysis::schedule::Pattern::parse(s)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TestArg {
    /// Bandwidth (like ib_write_bw)
    Bw,
    /// Ping-pong latency (like ib_write_lat)
    Lat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OpArg {
    Write,
    Read,
    Send,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("selection").args(["pair", "inter_node", "intra_node"])))]
pub struct PairwiseArgs {
    #[command(flatten)]
    pub rank: RankArgs,
    /// Bandwidth or latency
    #[arg(long, value_enum, default_value = "bw")]
    pub test: TestArg,
    /// Operation (perftest's names); default: write where the transport can, else send
    #[arg(long, value_enum)]
    pub op: Option<OpArg>,
    /// Message size (K, M, G suffixes are binary)
    #[arg(short = 's', long, value_parser = units::parse_nonzero_size, conflicts_with = "all_sizes")]
    pub size: Option<u64>,
    /// Sweep message sizes 2 B .. 8 MiB by powers of two, like perftest -a
    #[arg(short = 'a', long = "all")]
    pub all_sizes: bool,
    /// Iterations per measurement (default 5000 for bw, 1000 for lat)
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(1..=100_000_000), conflicts_with = "duration")]
    pub iters: Option<u64>,
    /// Seconds per measurement instead of an iteration count (bandwidth, unidirectional)
    #[arg(short = 'D', long, value_parser = units::parse_duration, conflicts_with_all = ["bidirectional"])]
    pub duration: Option<f64>,
    /// Outstanding messages per batch (perftest's TX depth)
    #[arg(short = 't', long = "tx-depth", default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=16384))]
    pub tx_depth: u64,
    /// Both directions at once (bandwidth)
    #[arg(short = 'b', long)]
    pub bidirectional: bool,
    /// Warm-up messages (default for bw: enough for 2 MiB, at least 2 and at most the TX depth,
    /// so 32 at 64 KiB and 2 at 1 MiB; 10 for lat)
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Test only this pair of ranks: A,B
    #[arg(long, value_parser = units::parse_pair)]
    pub pair: Option<(usize, usize)>,
    /// Only pairs on different hosts
    #[arg(long)]
    pub inter_node: bool,
    /// Only pairs on the same host (with --rails: as well as the rail pairs)
    #[arg(long)]
    pub intra_node: bool,
    /// Multi-rail nodes (NIC i of every node on rail i): test pairs of the same local rank on
    /// different hosts, all rails at once, with one matrix and one verdict per rail; give each
    /// local rank its NIC with --devices or a --tcp-if list
    #[arg(long, conflicts_with_all = ["pair", "inter_node"])]
    pub rails: bool,
    /// A pair is suspect below this fraction of the median of all pairs (default: decided from
    /// the distribution, see README "How meshrun decides")
    #[arg(long, value_parser = units::parse_fraction)]
    pub threshold: Option<f64>,
    /// Which partners each rank measures: all, ring, shift:K (i+-1..K, as mpiGraph) or random:K
    /// (K random partners); the quick patterns screen a big fabric in a few rounds
    #[arg(long = "pairs", value_name = "PATTERN", default_value = "all", value_parser = parse_pattern)]
    pub pairs: analysis::schedule::Pattern,
    /// Which hosts hang off which leaf switch (`leaf1: node[01-16]` lines, or Slurm's
    /// topology.conf), to blame a switch uplink when the slow host links all cross it
    #[arg(long)]
    pub topology: Option<PathBuf>,
    /// Absolute floor in Gb/s: pairs below it are suspect (like perftest -w)
    #[arg(long, value_parser = units::parse_positive)]
    pub expect_gbps: Option<f64>,
    /// An earlier `pairwise --json` run of the same hosts: also name the links, NICs and nodes
    /// that are slower than they were (read before any traffic)
    #[arg(long, value_name = "GOOD.json")]
    pub baseline: Option<PathBuf>,
    /// Do not retest suspect pairs alone
    #[arg(long)]
    pub no_retest: bool,
    /// Write every raw figure as JSON (`-`: on stdout after the report, between marker lines, so
    /// a launcher's log carries it; `meshrun verdict LOG` reads it back)
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the matrix as CSV
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write the matrix as a heatmap picture (.png or .svg)
    #[arg(long)]
    pub heatmap: Option<PathBuf>,
    /// What to do to the nodes the verdict blames: drain (Slurm's scontrol), label or taint
    /// (kubectl). Printed as commands unless --apply
    #[arg(long, value_enum, value_name = "ACTION")]
    pub on_fail: Option<crate::actions::OnFail>,
    /// Run the --on-fail commands instead of printing them
    #[arg(long, requires = "on_fail")]
    pub apply: bool,
    /// Write the run as Prometheus text for node exporter's textfile collector (every
    /// direction's figure, the verdict and its parts, the sensitivity, counter deltas, durations)
    #[arg(long, value_name = "FILE")]
    pub metrics: Option<PathBuf>,
    /// Overwrite existing output files
    #[arg(long)]
    pub force: bool,
    /// RDMA device, as perftest's -d (same as --ib-dev)
    #[arg(short = 'd', value_name = "DEV")]
    pub d: Option<String>,
    /// RDMA port, as perftest's -i (same as --ib-port)
    #[arg(short = 'i', value_name = "PORT")]
    pub i: Option<u8>,
    /// GID index, as perftest's -x (same as --gid-index)
    #[arg(short = 'x', value_name = "N")]
    pub x: Option<u32>,
    /// Put the RDMA windows in GPU memory (GPUDirect RDMA), as perftest's --use_cuda: the GPU's
    /// CUDA ordinal, or none for local rank modulo the GPUs visible. For --op write and read.
    #[arg(long = "use-cuda", alias = "use_cuda", value_name = "GPU", num_args = 0..=1, default_missing_value = "auto")]
    pub use_cuda: Option<String>,
    /// As perftest's --use_cuda_dmabuf: GPU windows (--use-cuda, implied) registered by dma-buf
    /// only, never by nvidia-peermem; a GPU or kernel without dma-buf is then an error
    #[arg(long = "use-cuda-dmabuf", alias = "use_cuda_dmabuf")]
    pub use_cuda_dmabuf: bool,
    /// perftest's --use_cuda_bus_id: refused with what to use instead (--use-cuda ORDINAL)
    #[arg(long = "use-cuda-bus-id", alias = "use_cuda_bus_id", value_name = "BUS", hide = true)]
    pub use_cuda_bus_id: Option<String>,
    /// perftest's -F (do not fail on CPU frequency warnings): accepted, no effect (meshrun does
    /// not read the CPU frequency)
    #[arg(short = 'F')]
    pub perftest_f: bool,
    /// perftest's --report_gbits: accepted, no effect (meshrun reports Gb/s)
    #[arg(long = "report-gbits", alias = "report_gbits")]
    pub report_gbits: bool,
    /// Queue pairs per bandwidth test, 1-128 (perftest's -q/--qp; else NCCL_IB_QPS_PER_CONNECTION):
    /// each posts -n operations and carries its own flow label, so on RoCE v2 each takes its own
    /// ECMP path; the report gives each one's Gb/s [default: 1]
    #[arg(short = 'q', long = "qp", value_name = "QPS")]
    pub qps: Option<u32>,
    /// Where -q came from when not the command line (`MESHRUN_QP`), for the header.
    #[arg(skip)]
    pub qps_source: Option<Box<crate::nic_env::Source>>,
    /// NCCL_IB_QPS_PER_CONNECTION as this rank's environment has it (used over RDMA only).
    #[arg(skip)]
    pub qps_env: Option<String>,
    /// perftest's -R: the same as --rdma-cm
    #[arg(short = 'R', id = "perftest_rdma_cm", hide = true)]
    pub perftest_rdma_cm: bool,
    /// perftest's -p (the TCP port of its endpoint exchange): refused with the reason
    #[arg(short = 'p', value_name = "PORT", hide = true)]
    pub perftest_port: Option<u16>,
}

/// Device selection, shared by `devices` and the RDMA transport.
#[derive(Args, Debug, Clone)]
pub struct DeviceArgs {
    /// RDMA device (default: the first with an active port)
    #[arg(short = 'd', long = "device")]
    pub device: Option<String>,
    /// Port of the device (default: its first active port)
    #[arg(short = 'i', long = "ib-port")]
    pub port: Option<u8>,
    /// GID index (default: IPv4-mapped over IPv6, global over link-local, RoCE v2 over v1)
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u32>,
    /// Root of the sysfs tree to read devices from
    #[arg(long, default_value = "/sys")]
    pub sysfs_root: PathBuf,
}

#[derive(Args, Debug)]
pub struct PreflightArgs {
    #[command(flatten)]
    pub rank: RankArgs,
    /// What a node of this type must have (TOML: `[[part]]` tables of scope patterns and fact
    /// values, in the words preflight prints; examples in deploy/expect/)
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,
    /// Check this node alone, without MPI, against --expect (a Slurm HealthCheckProgram or a
    /// Kubernetes CronJob): exit 0 healthy, 1 a finding that breaks a run, 2 bad input
    #[arg(long)]
    pub local: bool,
    /// Also print every fact of this node (--local) or of rank 0's node, one per line, in the
    /// words an --expect file uses
    #[arg(long)]
    pub show: bool,
    /// The largest message the run to come registers (K, M, G binary): with the staging
    /// buffers, the locked memory (memlock) a verbs rank needs
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = units::parse_size)]
    pub max_bytes: u64,
    /// Write every fact of every node and rank and the findings as JSON (`-`: on stdout after
    /// the report, between marker lines)
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Overwrite an existing --json file
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct DevicesArgs {
    #[command(flatten)]
    pub dev: DeviceArgs,
    /// Only the GPUs: probe each for GPUDirect RDMA without a NIC (device attributes, a real
    /// buffer's GPUDirect capability and dma-buf export, whether RDMA writes need a flush), one
    /// line per GPU. Exit 0: every GPU can do GPUDirect RDMA; 1: one cannot (its line says why);
    /// 2: no NVIDIA driver or no GPU; 4: a probe call failed
    #[arg(long)]
    pub gpu: bool,
    /// JSON on stdout instead of lines: the devices, ports, GIDs, GPUs and the choice (with
    /// --gpu: the probe results)
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// clap's own consistency checks (ids, groups, conflicts) over every subcommand; they
    /// otherwise fire only when a debug binary parses its arguments.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn pairs_patterns_and_the_default_rule() {
        let cli = Cli::try_parse_from(["meshrun", "pairwise", "--pairs", "shift:3"]).unwrap();
        let Command::Pairwise(a) = cli.command else {
            panic!("pairwise")
        };
        assert_eq!(a.pairs, analysis::schedule::Pattern::Shift(3));
        assert_eq!(a.threshold, None, "no --threshold: the robust rule");
        assert!(Cli::try_parse_from(["meshrun", "pairwise", "--pairs", "star"]).is_err());
    }
}
