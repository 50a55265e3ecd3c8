//! Everything one meshrun rank needs to join a job: MPI bootstrap ([`World`]), bounded waits
//! ([`watchdog`]), and an all-to-all mesh of connections ([`mesh`]) behind the [`Transport`] trait.

pub mod counters;
pub mod devices;
pub mod flow_control;
pub mod gpu_pairing;
pub mod inventory;
pub mod limits;
pub mod mesh;
pub mod names;
pub mod netif;
pub mod netlink;
pub mod pci;
pub mod postmortem;
pub mod rail_ports;
pub mod route;
mod sys;
pub mod tcp;
pub mod trace;
pub mod transport;
pub mod verbs;
pub mod verbs_mesh;
pub mod watchdog;
pub mod wire;
pub mod world;

pub use transport::{
    DirectKind, DirectOp, DmaBuf, Endpoint, ForeignPath, Memory, NicMemory, OneSidedOp, OneSidedResult, OneSidedRole,
    Op, OpKind, Rdma, RegionId, Span, Transport, TransportError, TransportKind, WindowMemory,
};
pub use world::{World, WorldError};

use std::time::Duration;

/// Deadlines that bound every wait of a job.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Connecting the mesh (connect, accept and handshakes).
    pub connect: Duration,
    /// Any one communication step (a batch of sends and receives).
    pub op: Duration,
    /// Any one MPI step (init, allgather, gather, barrier).
    pub mpi: Duration,
}

impl Timeouts {
    /// All three from one user-facing `--timeout` value.
    pub fn uniform(t: Duration) -> Self {
        Timeouts {
            connect: t,
            op: t,
            mpi: t,
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts::uniform(Duration::from_secs(60))
    }
}

/// Write `line` and a newline on stderr in one `write(2)`, so the lines of ranks that share
/// mpirun's stderr (or a terminal) never split each other: `eprintln!` writes each formatted
/// piece on its own (stderr is unbuffered), and a line of one rank could then hold pieces of
/// another's.
pub fn stderr_line(line: &str) {
    use std::io::Write;
    let mut whole = String::with_capacity(line.len() + 1);
    whole.push_str(line);
    whole.push('\n');
    let _ = std::io::stderr().lock().write_all(whole.as_bytes());
}

/// `eprintln!` as one write: the formatted line goes out whole ([`stderr_line`]).
#[macro_export]
macro_rules! eline {
    ($($arg:tt)*) => {
        $crate::stderr_line(&format!($($arg)*))
    };
}

/// Leave the process at once, without MPI_Finalize or atexit handlers (after a peer failure).
pub fn exit_now(code: i32) -> ! {
    sys::exit_now(code)
}
