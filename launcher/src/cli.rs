//! Command-line interface.

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
    /// Transport for the mesh: tcp (auto picks tcp until RDMA verbs are available)
    #[arg(long, value_enum, default_value = "auto")]
    pub transport: TransportChoice,
    /// Interface name or CIDR for the TCP mesh (default: the address the host name resolves to)
    #[arg(long)]
    pub tcp_if: Option<String>,
    /// Deadline in seconds for any one wait (connect, receive, MPI step)
    #[arg(long, default_value_t = 60.0, value_parser = parse_timeout)]
    pub timeout: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TransportChoice {
    Auto,
    Tcp,
}

#[derive(Args, Debug)]
pub struct MeshCheckArgs {
    #[command(flatten)]
    pub rank: RankArgs,
    /// Payload bytes swapped each way per pair (K, M, G suffixes are binary)
    #[arg(long, default_value = "4096", value_parser = crate::units::parse_size)]
    pub bytes: u64,
    /// Round trips timed per pair
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub iters: u64,
}

pub fn parse_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(v > 0.0 && v <= 86_400.0) {
        return Err(format!("{v} is out of range; expected seconds in (0, 86400]"));
    }
    Ok(v)
}
