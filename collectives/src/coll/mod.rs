//! Collectives over the mesh, built as nccl-tests is: one harness ([`harness`]) owns sizes, warm-up,
//! timing, verification, placements and printing; each collective's file holds its byte counts,
//! its bus-bandwidth factor, its data and its algorithm, written on the two-sided operations of
//! [`Transport`] so it runs on every transport.

pub mod all_gather;
pub mod all_reduce;
pub mod alltoall;
pub mod broadcast;
pub mod data;
pub mod device;
pub mod harness;
pub mod mpi_baseline;
pub mod reduce;
pub mod reduce_scatter;
pub mod report;
pub mod ring;
pub mod sendrecv;

use std::time::Duration;

use ranks::{Transport, TransportError};

use crate::dtype::{DataType, RedOp};
use crate::reduce::LayoutError;

/// Element counts of one test size, as nccl-tests' `getCollByteCount` defines them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Elements in the send buffer.
    pub send: usize,
    /// Elements in the receive buffer.
    pub recv: usize,
    /// The count printed in the `count` column (per-rank count for gathers and scatters).
    pub param: usize,
    /// In place: where in the one buffer the send data starts, and where the result lands (elements).
    pub send_inplace_offset: usize,
    pub recv_inplace_offset: usize,
}

/// Everything an algorithm needs to know about one run.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    pub dtype: DataType,
    pub op: RedOp,
    pub root: usize,
    pub rank: usize,
    pub nranks: usize,
    pub counts: Counts,
    /// Deadline of each communication step.
    pub step_timeout: Duration,
}

impl Ctx {
    pub fn elt(&self) -> usize {
        self.dtype.size()
    }
}

/// The buffers of one run: separate (out of place) or one (in place, send data at
/// `send_inplace_offset`, result at `recv_inplace_offset`).
pub enum Bufs<'a> {
    OutOfPlace { send: &'a [u8], recv: &'a mut [u8] },
    InPlace { buf: &'a mut [u8] },
}

#[derive(Debug, thiserror::Error)]
pub enum CollError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
}

/// What each collective's file provides.
pub trait Collective: Sync {
    /// The name in messages and JSON: `all_reduce`.
    fn name(&self) -> &'static str;
    fn counts(&self, count: usize, nranks: usize, rank: usize) -> Counts;
    /// busbw = algbw x this.
    fn bus_factor(&self, nranks: usize) -> f64;
    /// Whether the `redop` column shows the operation (else `none`).
    fn reduces(&self) -> bool;
    /// Whether the `root` column shows the root (else -1).
    fn rooted(&self) -> bool;
    /// Fill this rank's send data (`counts.send` elements).
    fn init_send(&self, ctx: &Ctx, send: &mut [u8]) -> Result<(), LayoutError>;
    /// Fill what this rank's receive buffer must hold afterwards (`counts.recv` elements); false
    /// when this rank's result is not defined (a non-root rank of `reduce`).
    fn expected(&self, ctx: &Ctx, expected: &mut [u8]) -> Result<bool, LayoutError>;
    /// Run the collective once.
    fn run(&self, t: &mut dyn Transport, ctx: &Ctx, bufs: Bufs<'_>) -> Result<(), CollError>;
    /// Run once on GPU buffers (staged or GPUDirect, as `dr` moves data), reducing on the GPU.
    fn run_gpu(
        &self,
        t: &mut dyn Transport,
        ctx: &Ctx,
        dr: &mut device::DeviceRun,
        bufs: device::DevBufs,
    ) -> Result<(), CollError>;
    /// Run the MPI library's own collective on the same buffers (out of place), for `--baseline mpi`.
    fn run_mpi(
        &self,
        comm: &mpi::topology::SimpleCommunicator,
        ctx: &Ctx,
        send: &[u8],
        recv: &mut [u8],
    ) -> Result<(), String>;
}

/// All collectives by name (also accepting nccl-tests' program names, `all_reduce_perf`).
pub fn by_name(name: &str) -> Option<&'static dyn Collective> {
    let n = name.strip_suffix("_perf").unwrap_or(name);
    Some(match n {
        "all_reduce" => &all_reduce::AllReduce,
        "all_gather" => &all_gather::AllGather,
        "reduce_scatter" => &reduce_scatter::ReduceScatter,
        "broadcast" => &broadcast::Broadcast,
        "reduce" => &reduce::Reduce,
        "alltoall" => &alltoall::AllToAll,
        "sendrecv" => &sendrecv::SendRecv,
        _ => return None,
    })
}

/// Every collective, for tests.
pub const ALL: [&str; 7] = [
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "alltoall",
    "sendrecv",
];
