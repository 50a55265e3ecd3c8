//! The rank side: join the job, build the mesh, run one test, and leave with the right status.

use std::time::Duration;

use ranks::mesh::{self, MeshError, TcpOptions};
use ranks::{Timeouts, Transport, TransportError, World};

use crate::cli::RankArgs;

/// Exit status for bad input or setup.
pub const EXIT_USAGE: i32 = 2;
/// Exit status when a peer died or a deadline expired.
pub const EXIT_PEER: i32 = ranks::watchdog::EXIT_TIMEOUT;

/// Why a rank stops early.
#[derive(Debug, thiserror::Error)]
pub enum RankFailure {
    /// Bad input discovered on the ranks (same on every rank).
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// Join the job, connect the mesh, run `body`; returns the process exit status.
/// On a transport failure the process leaves at once (without MPI_Finalize, which could block on
/// the dead peer): the MPI launcher then ends the other ranks.
pub fn run_rank(args: &RankArgs, body: impl FnOnce(&World, &mut dyn Transport) -> Result<i32, RankFailure>) -> i32 {
    let timeout = Duration::from_secs_f64(args.timeout);
    let timeouts = Timeouts::uniform(timeout);
    let world = match World::init(timeouts.mpi) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("meshrun: {e}");
            return EXIT_USAGE;
        }
    };
    let mut mesh = match mesh::connect_tcp(
        &world,
        &TcpOptions {
            tcp_if: args.tcp_if.clone(),
        },
        timeouts,
    ) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("meshrun: {e}");
            let code = match e {
                MeshError::Address { .. } | MeshError::LoopbackAcrossHosts { .. } | MeshError::PeersFailed { .. } => {
                    EXIT_USAGE
                }
                _ => EXIT_PEER,
            };
            leave_now(code);
        }
    };
    match body(&world, &mut mesh) {
        Ok(code) => code,
        Err(RankFailure::Usage(m)) => {
            if world.rank() == 0 {
                eprintln!("meshrun: {m}");
            }
            EXIT_USAGE
        }
        Err(RankFailure::Transport(e)) => {
            eprintln!("meshrun: {e}");
            leave_now(EXIT_PEER);
        }
    }
}

/// Leave without finalising MPI.
pub fn leave_now(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    ranks::exit_now(code)
}
