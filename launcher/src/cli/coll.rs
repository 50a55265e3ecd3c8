//! The collectives' subcommands (`meshrun all_reduce ...`), made from their registry, and
//! nccl-tests' flags they take.

use std::path::PathBuf;

use analysis::units;
use clap::{Args, Subcommand};

use super::RankArgs;

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
    /// With -g: how device data moves between ranks of one node: ipc (CUDA IPC, the sender
    /// copies into the receiver's GPU buffer, as NCCL's P2P transport) or net (the network path,
    /// as NCCL_P2P_DISABLE=1, read when this flag is not given). Default: ipc where every rank
    /// can open its node's other ranks' buffers, else net, the reason in the header
    #[arg(long = "p2p", value_enum, value_name = "PATH")]
    pub p2p: Option<P2pArg>,
    /// Queue pairs per peer over RDMA, 1-16 (NCCL_IB_QPS_PER_CONNECTION when not given): every
    /// message is striped over them fragment by fragment, so on RoCE v2 each takes its own ECMP
    /// path as NCCL's do; capped where the job's size leaves too little staging (2 at 4,096 ranks)
    #[arg(short = 'q', long = "qp", value_name = "QPS")]
    pub qps: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BaselineArg {
    Mpi,
}

/// `--p2p`: the path between ranks of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum P2pArg {
    Ipc,
    Net,
}
