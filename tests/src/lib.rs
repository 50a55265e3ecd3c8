//! Helpers for end-to-end tests that run the real `meshrun` binary under real `mpirun`.
//!
//! Every run is bounded: a command that outlives its limit is killed with its whole process group
//! and the test fails. Prerequisites that are missing (mpirun, root for namespaces) fail the test
//! with the reason; nothing is skipped silently.
//!
//! The modules, each re-exported here: [`paths`] (the workspace, the binary, scratch
//! directories), [`bounded`] (a command run within a limit), [`mpi`] (`meshrun` under `mpirun`
//! or alone), [`tables`] and [`verdict`] (reading what it printed), [`netns`], [`leafspine`] and
//! [`slurm`] (the clusters on this machine), [`tools`] (what this machine has, promtool, the podman image);
//! [`limits`] holds the time limits several test files share; [`campaign`] is the verdict judged on
//! fabrics drawn at random (not re-exported: its names are its own).

#![forbid(unsafe_code)]

pub mod bounded;
pub mod campaign;
pub mod leafspine;
pub mod limits;
pub mod mpi;
pub mod netns;
pub mod paths;
pub mod slurm;
pub mod tables;
pub mod tools;
pub mod verdict;

pub use bounded::*;
pub use leafspine::*;
pub use mpi::*;
pub use netns::*;
pub use paths::*;
pub use slurm::*;
pub use tables::*;
pub use tools::*;
pub use verdict::*;
