//! How long the runs of several test files may take before they are killed and their test fails.
//! A file whose runs need a limit of their own keeps it beside them (`launch_input.rs`,
//! `faults/common.rs`, `mpijob/`).

use std::time::Duration;

/// One `meshrun` process that reads files and starts no MPI job (`devices`, `preflight --local`).
pub const ONE_PROCESS: Duration = Duration::from_secs(30);

/// A small job on this machine: a few ranks, a few iterations, one or two sizes (mesh checks,
/// the NIC-choice runs, the soak's jobs).
pub const SMALL_JOB: Duration = Duration::from_secs(120);

/// A pairwise run of a few ranks on this machine, with its files, and the verdict read back.
pub const PAIRWISE_JOB: Duration = Duration::from_secs(180);

/// A long job: a sweep of every type and op, a GPU stand-in sweep, a Slurm batch job, pairwise
/// across namespace hosts.
pub const LONG_JOB: Duration = Duration::from_secs(300);
