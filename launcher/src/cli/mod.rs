//! The command line as clap parses it, and nothing else: every subcommand's flags as given
//! (values a user typed or `MESHRUN_<FLAG>` set, and clap's defaults). What the commands use,
//! NCCL's variables and perftest's spellings folded in, is resolved from these in
//! [`crate::settings`].

mod coll;
mod pairwise;
pub mod perftest;

use analysis::units;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use coll::{BaselineArg, CollArgs, CollCommand, P2pArg};
pub use pairwise::{OnFail, OnUnstable, OpArg, PairwiseArgs, TestArg};

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
// One per process, read once: pairwise's many flags make its variant the largest, and
// boxing it would save nothing worth the indirection.
#[allow(clippy::large_enum_variant)]
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
    /// What meshrun reads in a --topology file or directory (leaf lines, Slurm's topology.conf,
    /// ibnetdiscover or ibtracert output, lldpctl -f json per host): each leaf switch and the
    /// hosts under it, their cables and routes where the source names them
    Topology(TopologyArgs),
    /// Set outputs side by side: nccl-tests and meshrun tables or -J files, perftest or meshrun
    /// pairwise reports; ratios to the first file, a summary, and a pass/fail bar
    Compare(CompareArgs),
    /// Shell completions on stdout: `meshrun completions bash > /etc/bash_completion.d/meshrun`
    Completions(CompletionsArgs),
    /// The man page (roff) on stdout: `meshrun manpage > /usr/local/share/man/man1/meshrun.1`
    Manpage,
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
pub struct TopologyArgs {
    /// The file or directory, as pairwise --topology takes it; several are read as one
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Which MPI's launcher we drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MpiFlavour {
    /// Open MPI (mpirun/prterun).
    Openmpi,
    /// MPICH's Hydra (mpiexec.hydra).
    Mpich,
    /// Intel MPI (Hydra-based).
    Intel,
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
    /// Seconds mpirun may take to exit after it has said how the job ended (its notice of a
    /// rank's non-zero status or signal) or after a SIGTERM/SIGHUP passed on to it; then it is
    /// ended and the launch exits with the status it reported (Open MPI 4.1's mpirun can hang
    /// in its own teardown)
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = units::parse_wait)]
    pub teardown_grace: f64,
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
    /// class a switch's PFC/ECN settings apply to; perftest's --tclass, and on pairwise its
    /// -T/--tos; else NCCL_IB_TC; default 0)
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
    /// Deadline in seconds for any one wait (connect, receive, MPI step); -T everywhere but on
    /// pairwise, where -T is perftest's type of service (--tclass)
    #[arg(short = 'T', long, default_value_t = DEFAULT_TIMEOUT_S, value_parser = units::parse_timeout)]
    pub timeout: f64,
    /// When a deadline expires, also print every rank's own wait and, from the rank that names
    /// the root cause, every rank's state (default: the one root-cause line)
    #[arg(long)]
    pub verbose: bool,
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

/// The default deadline in seconds for any one wait (`-T/--timeout`).
pub const DEFAULT_TIMEOUT_S: f64 = 60.0;

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

    /// `--rails` alone is the listed form (a flag may follow it), `--rails auto` finds the
    /// ports, and `MESHRUN_RAILS=true`/`false` still read as the on/off flag it was.
    #[test]
    fn rails_listed_auto_and_from_the_environment() {
        let rails = |args: &[&str]| {
            let cli = Cli::try_parse_from(["meshrun", "pairwise"].iter().chain(args)).unwrap();
            let Command::Pairwise(a) = cli.command else {
                panic!("pairwise")
            };
            (a.rails_on(), a.rails_auto(), a.rank.tcp_if)
        };
        assert_eq!(
            rails(&["--rails", "--tcp-if", "eth0,eth1"]),
            (true, false, vec!["eth0".into(), "eth1".into()])
        );
        assert_eq!(rails(&["--rails", "auto"]), (true, true, vec![]));
        assert_eq!(rails(&["--rails=true"]), (true, false, vec![]));
        assert_eq!(rails(&["--rails=false"]), (false, false, vec![]));
        assert_eq!(rails(&[]), (false, false, vec![]));
        assert!(Cli::try_parse_from(["meshrun", "pairwise", "--rails", "all"]).is_err());
    }
}
