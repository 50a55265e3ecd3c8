//! Starting `meshrun`: under this machine's `mpirun` with the MPI environment every run gets, or
//! as a plain process.

use std::process::Command;
use std::time::Duration;

use crate::{meshrun_bin, run_bounded, Run};

/// Environment every MPI run gets here: Open MPI as root, and the TCP/shared-memory transports
/// (the UCX pml fails on machines without RDMA). Ranks outnumber this machine's cores in most
/// tests (4 ranks, or 6 namespace hosts, on 2 cores), so they yield when idle, as Open MPI's docs
/// say for that case; mpirun sets it on its own only where it counts the node oversubscribed,
/// which a hostfile of one slot per namespace host never is.
pub fn mpi_env(cmd: &mut Command) -> &mut Command {
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_MCA_mpi_yield_when_idle", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_pml", "ob1")
        .env("OMPI_MCA_btl", "self,vader,tcp")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
}

/// The command `mpirun --bind-to none -np N [-x NAME]... meshrun ARGS...` with the MPI
/// environment of [`mpi_env`] and each of `extra_env` set and passed to the ranks (`-x`), in
/// that order; the caller adds what else it needs and runs it.
pub fn mpirun_command(np: usize, args: &[&str], extra_env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new("mpirun");
    mpi_env(&mut cmd).args(["--bind-to", "none", "-np", &np.to_string()]);
    for (k, v) in extra_env {
        cmd.env(k, v);
        cmd.args(["-x", k]);
    }
    cmd.arg(meshrun_bin()).args(args);
    cmd
}

/// `mpirun -np N meshrun ARGS...` on this machine.
pub fn mpirun(np: usize, args: &[&str], extra_env: &[(&str, &str)], limit: Duration) -> Run {
    run_bounded(&mut mpirun_command(np, args, extra_env), limit)
}

/// The command `meshrun ARGS...` as a plain process, with the MPI environment of [`mpi_env`].
pub fn meshrun_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(meshrun_bin());
    mpi_env(&mut cmd).args(args);
    cmd
}

/// `meshrun ARGS...` as a plain process.
pub fn meshrun(args: &[&str], limit: Duration) -> Run {
    run_bounded(&mut meshrun_command(args), limit)
}

/// The command without the variables `meshrun launch` forwards to the ranks (every `MESHRUN_*`,
/// NCCL's three, `NCCL_TESTS_MIN_BW`) that the caller's environment happens to hold, so a test
/// of the exact mpirun command does not depend on who runs it.
pub fn without_forwarded_env(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if name.starts_with("MESHRUN_") || name.starts_with("NCCL_") {
            cmd.env_remove(&k);
        }
    }
    cmd
}
