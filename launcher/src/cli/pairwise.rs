//! `meshrun pairwise`'s flags: meshrun's own and perftest's spellings.

use std::path::PathBuf;

use analysis::units;
use clap::Args;

use super::perftest::PerftestRefused;
use super::{P2pArg, RankArgs};

/// perftest's `-m`: an InfiniBand MTU in bytes (256, 512, 1024, 2048 or 4096).
fn parse_mtu(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if ranks::verbs_mesh::mtu::enum_of(n).is_some() => Ok(n),
        _ => Err(format!(
            "`{s}` is not an InfiniBand MTU; expected 256, 512, 1024, 2048 or 4096 (bytes)"
        )),
    }
}

fn parse_pattern(s: &str) -> Result<analysis::schedule::Pattern, String> {
    analysis::schedule::Pattern::parse(s)
}

/// `--repeat N`: 1 (a single run) to 100000 passes.
fn parse_repeat(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n @ 1..=100_000) => Ok(n),
        _ => Err(format!(
            "`{s}` is not a count of passes; expected 1 (a single run, the default) to 100000"
        )),
    }
}

/// `--rails` (each local rank's NIC listed) or `--rails auto` (found on each host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RailsArg {
    /// Each local rank's NIC named with --devices or a --tcp-if list (`--rails` alone)
    #[value(alias = "true")]
    Listed,
    /// Every active port of every host, found: RDMA ports, else interfaces with an IPv4 address
    Auto,
    /// No rails (`MESHRUN_RAILS=false`)
    #[value(alias = "false", hide = true)]
    Off,
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

/// On `pairwise`, `-T` is perftest's `-T`/`--tos` (the traffic class, meshrun's `--tclass`), not
/// the shared timeout (`--timeout` only here; the other rank commands keep `-T` for it, as
/// nccl-tests' `-T`).
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("selection").args(["pair", "inter_node", "intra_node"])))]
#[command(mut_arg("timeout", |a| a.short(None)))]
#[command(mut_arg("tclass", |a| a.short('T').visible_alias("tos")))]
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
    /// Seconds per measurement instead of an iteration count, as perftest's -D (bandwidth; with
    /// -b over RDMA only)
    #[arg(short = 'D', long, value_parser = units::parse_duration)]
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
    /// local rank its NIC with --devices or a --tcp-if list, or `--rails auto`: every active port
    /// of every host found, local rank i on port i, one rank per port
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "listed", value_name = "auto",
          conflicts_with_all = ["pair", "inter_node"])]
    pub rails: Option<RailsArg>,
    /// A pair is suspect below this fraction of the median of all pairs (default: decided from
    /// the distribution, see README "How meshrun decides")
    #[arg(long, value_parser = units::parse_fraction)]
    pub threshold: Option<f64>,
    /// Which partners each rank measures: all, ring, shift:K (i+-1..K, as mpiGraph) or random:K
    /// (K random partners); the quick patterns screen a big fabric in a few rounds
    #[arg(long = "pairs", value_name = "PATTERN", default_value = "all", value_parser = parse_pattern)]
    pub pairs: analysis::schedule::Pattern,
    /// Which hosts hang off which leaf switch (`leaf1: node[01-16]` lines, Slurm's topology.conf,
    /// ibnetdiscover or ibtracert output, or a directory of `lldpctl -f json` files, HOST.json),
    /// to blame a switch uplink when the slow host links all cross it
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
    /// A part slow at times and fine at others (its pairs slow while the pairs beside them were
    /// not, then fine alone): fail the run, or only warn
    #[arg(long, value_enum, value_name = "ACTION", default_value = "fail")]
    pub on_unstable: OnUnstable,
    /// Run the whole test N times over (rounds, retests and a verdict each pass) and judge the
    /// passes over time: a part slow in some passes and fine in others is unstable; the report
    /// gives each pass and the spread over them [default: 1, a single run]
    #[arg(long, value_name = "N", value_parser = parse_repeat)]
    pub repeat: Option<u64>,
    /// Keep starting passes of the whole test while the next is expected to end within
    /// DURATION (90s, 10m, 1h30m; at least one pass); with --repeat N, whichever ends first
    #[arg(long, value_name = "DURATION", value_parser = units::parse_span)]
    pub repeat_for: Option<f64>,
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
    /// Write the whole report as one self-contained HTML page (no script, nothing fetched): the
    /// header, the verdict with its evidence and counters, the matrices and the heatmap
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// What to do to the nodes the verdict blames: drain (Slurm's scontrol), label or taint
    /// (kubectl). Printed as commands unless --apply
    #[arg(long, value_enum, value_name = "ACTION")]
    pub on_fail: Option<OnFail>,
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
    /// With --use-cuda: how the pairs of one node are measured: ipc (GPU to GPU, the sender
    /// copying into the peer's mapped buffer by CUDA IPC, as nvbandwidth; each node's pairs
    /// judged as a population of their own) or net (the network path, as NCCL_P2P_DISABLE=1,
    /// read when this flag is not given). Default: ipc for bandwidth tests where every rank can
    /// open its node's other ranks' buffers, else net, the reason in the header
    #[arg(long = "p2p", value_enum, value_name = "PATH")]
    pub p2p: Option<P2pArg>,
    /// perftest's --use_cuda_bus_id: refused with what to use instead (--use-cuda ORDINAL)
    #[arg(long = "use-cuda-bus-id", alias = "use_cuda_bus_id", value_name = "BUS", hide = true)]
    pub use_cuda_bus_id: Option<String>,
    /// perftest's -F (do not fail on CPU frequency warnings): accepted, no effect (meshrun does
    /// not read the CPU frequency)
    #[arg(short = 'F', long = "CPU-freq")]
    pub perftest_f: bool,
    /// perftest's --report_gbits: accepted, no effect (meshrun reports Gb/s)
    #[arg(long = "report-gbits", alias = "report_gbits")]
    pub report_gbits: bool,
    /// Queue pairs per bandwidth test, 1-128 (perftest's -q/--qp; else NCCL_IB_QPS_PER_CONNECTION):
    /// each posts -n operations and carries its own flow label, so on RoCE v2 each takes its own
    /// ECMP path; the report gives each one's Gb/s. Over TCP, N connections per test, each from its
    /// own source port, the -n messages dealt over them; the report gives each one's Gb/s and the
    /// path it took (traced, see --no-trace) [default: 1; over TCP where a peer is reached through a
    /// router (the kernel's route has a gateway), 4, so each test covers the fabric's equal-cost paths;
    /// not with -b, -D or --test lat]
    #[arg(short = 'q', long = "qp", value_name = "QPS")]
    pub qps: Option<u32>,
    /// With -q over TCP: do not trace each connection's path (by default traced where raw
    /// sockets may be opened, CAP_NET_RAW; else the report says why not, once)
    #[arg(long = "no-trace")]
    pub no_trace: bool,
    /// Do not ask the system resolver for the traced routers' names (traceroute's -n; by default
    /// rank 0 asks for each router address the traces crossed, 2 s in all, and the report writes
    /// `name (address)`)
    #[arg(long = "no-resolve")]
    pub no_resolve: bool,
    /// perftest's -R: the same as --rdma-cm
    #[arg(short = 'R', long = "rdma_cm", id = "perftest_rdma_cm", hide = true)]
    pub perftest_rdma_cm: bool,
    /// perftest's -p (the TCP port of its endpoint exchange): refused with the reason
    #[arg(short = 'p', long = "port", value_name = "PORT", hide = true)]
    pub perftest_port: Option<u16>,
    /// Path MTU of the RDMA queue pairs in bytes, as perftest's -m: 256, 512, 1024, 2048 or 4096,
    /// at most the port's active MTU [default: the port's active MTU]
    #[arg(short = 'm', long = "mtu", value_name = "BYTES", value_parser = parse_mtu)]
    pub mtu: Option<u32>,
    /// perftest's flags meshrun does not run as perftest does: each refused in one line
    #[command(flatten)]
    pub refused: PerftestRefused,
}

/// What to do to a blamed node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnFail {
    /// Slurm: `scontrol update NodeName=N State=DRAIN Reason="meshrun: ..."`
    Drain,
    /// Kubernetes: label the node `meshrun.io/fabric=slow`, the reason as an annotation
    Label,
    /// Kubernetes: taint the node `meshrun.io/fabric=slow:NoSchedule`, the reason as an annotation
    Taint,
}

/// What an unstable part does to the run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnUnstable {
    /// Exit 1, as a slow part does
    Fail,
    /// Report it; the status is the rest of the verdict's
    Warn,
}

impl PairwiseArgs {
    /// `--rails`, listed or auto.
    pub fn rails_on(&self) -> bool {
        self.rails.is_some_and(|r| r != RailsArg::Off)
    }

    /// `--rails auto`.
    pub fn rails_auto(&self) -> bool {
        self.rails == Some(RailsArg::Auto)
    }
}
