//! The command line read: clap's matches with every flag also read from `MESHRUN_<FLAG>`,
//! `--version`'s long text (this binary, its MPI, CUDA and RDMA here), and a refused command line
//! said once.

use crate::cli::Cli;
use crate::exit::Status;

/// The command line, with `--version` saying what this binary is and what it can use here, and
/// every flag also read from `MESHRUN_<FLAG>` (the flag wins).
pub fn parse() -> (Cli, clap::ArgMatches) {
    use clap::{CommandFactory, FromArgMatches};
    // Built once per process; clap keeps a `&'static str`.
    let long: &'static str = Box::leak(long_version().into_boxed_str());
    let matches = match crate::settings::source::with_env(Cli::command().long_version(long)).try_get_matches() {
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
///
/// Under an MPI launcher every rank then joins the job and meets the others (bounded by the
/// default `--timeout`) before leaving: a rank that left at once could be seen by
/// mpirun before rank 0 had said why, and mpirun then ends rank 0 with the line unsaid (seen
/// under load, where rank 0 starts last).
fn bad_command_line(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit()
    }
    let sub = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    let help = sub.map_or("meshrun --help".to_string(), |s| format!("meshrun {s} --help"));
    std::process::exit(refused(&format!("{}; see `{help}`", crate::precheck::clap_line(&e))))
}

/// A command line refused before MPI starts (the same on every rank): `meshrun: LINE` said by
/// rank 0 alone, every rank leaving together (see [`bad_command_line`]); the exit status.
fn refused(line: &str) -> i32 {
    let rank = ranks::world::rank_from_env();
    if rank.is_none_or(|r| r == 0) {
        ranks::eline!("meshrun: {line}");
    }
    // Only where an MPI launcher started this process (a Slurm batch script has SLURM_PROCID
    // but no job of ranks to meet).
    if ranks::world::MPI_RANK_VARS
        .iter()
        .any(|v| std::env::var_os(v).is_some())
    {
        leave_together();
    }
    Status::Usage.code()
}

/// Meet every rank of the job once: MPI's start, whose exchange of host names needs every rank
/// (bounded by the default deadline), so what rank 0 said is out before any rank leaves. No
/// MPI_Finalize after it: a rank that alone refused its command line (an environment variable
/// only it has) would wait there on ranks that went on to their next step.
fn leave_together() {
    let deadline = std::time::Duration::from_secs_f64(crate::cli::DEFAULT_TIMEOUT_S);
    if let Ok(world) = ranks::World::init(deadline) {
        std::mem::forget(world);
    }
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
