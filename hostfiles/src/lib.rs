//! Host files and host lists, as cluster launchers write them.
//!
//! Accepted on each line of a file (blank lines and `#` comments are skipped):
//! - Open MPI: `host slots=N max_slots=M` (`max-slots` too), and Kubeflow MPIJob's
//!   `job-worker-0.job.default.svc slots=8`;
//! - MPICH / Intel MPI: `host:N`;
//! - one host per line;
//! - Slurm hostlist expressions such as `node[01-04,07]` or `gpu-[1-3]-ib`, alone or with `slots=N`,
//!   which then applies to every host the expression names.
//!
//! A host named on several lines is one host whose slots add up (a line without a count is one
//! slot), in the order hosts first appear. Nothing here touches the network or MPI.

#![forbid(unsafe_code)]

mod compress;
mod error;
mod hostlist;
mod parse;
mod placement;

pub use compress::compress_hostlist;
pub use error::{HostfileError, HostlistError};
pub use hostlist::{expand_hostlist, MAX_EXPANDED_HOSTS};
pub use parse::{parse_hostfile, parse_hostfile_str, valid_hostname, HostSlots};
pub use placement::placement;

/// Total slots over all hosts.
pub fn total_slots(hosts: &[HostSlots]) -> u64 {
    hosts.iter().map(|h| u64::from(h.slots)).sum()
}
