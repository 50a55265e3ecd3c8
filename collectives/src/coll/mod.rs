//! Collectives over the mesh, built as nccl-tests is: one harness ([`harness`]) owns sizes, warm-up,
//! timing, verification and placements (the rows and reports are `analysis::coll`); each collective's file holds its byte counts,
//! its bus-bandwidth factor, its data and its algorithm, written on the two-sided operations of
//! [`Transport`] so it runs on every transport.

pub mod all_gather;
pub mod all_reduce;
pub mod alltoall;
pub mod broadcast;
pub mod data;
pub mod device;
pub mod doubling;
pub mod halving;
pub mod harness;
pub mod mpi_baseline;
pub mod reduce;
pub mod reduce_scatter;
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

    /// A float-sum context for unit tests of the algorithms: root 0, no counts.
    #[cfg(test)]
    pub(crate) fn for_test(rank: usize, nranks: usize, step_timeout: Duration) -> Ctx {
        Ctx {
            dtype: DataType::Float,
            op: RedOp::Sum,
            root: 0,
            rank,
            nranks,
            counts: Counts {
                send: 0,
                recv: 0,
                param: 0,
                send_inplace_offset: 0,
                recv_inplace_offset: 0,
            },
            step_timeout,
        }
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

/// How a collective's buffers follow from the element count of a test size, as nccl-tests'
/// `getCollByteCount` defines them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Send and receive `count` elements (all_reduce, broadcast, reduce, sendrecv).
    Whole,
    /// Each rank sends `count / n`, everyone receives all `n` blocks; in place, a rank's data sits
    /// at its own block (all_gather).
    Gather,
    /// Each rank sends `n` blocks of `count / n` and receives one; in place, the result lands at
    /// its own block (reduce_scatter).
    Scatter,
    /// `n` blocks of `count / n` each way (alltoall).
    AllToAll,
}

impl Layout {
    pub fn counts(self, count: usize, n: usize, rank: usize) -> Counts {
        let per = count / n.max(1);
        let (send, recv, param, send_inplace_offset, recv_inplace_offset) = match self {
            Layout::Whole => (count, count, count, 0, 0),
            Layout::Gather => (per, per * n, per, rank * per, 0),
            Layout::Scatter => (per * n, per, per, 0, rank * per),
            Layout::AllToAll => (per * n, per * n, per, 0, 0),
        };
        Counts {
            send,
            recv,
            param,
            send_inplace_offset,
            recv_inplace_offset,
        }
    }
}

/// busbw = algbw x this factor, nccl-tests' definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusFactor {
    /// 2(n-1)/n: all_reduce.
    AllReduce,
    /// (n-1)/n: all_gather, reduce_scatter, alltoall.
    PerPeer,
    /// 1: broadcast, reduce, sendrecv.
    One,
}

impl BusFactor {
    pub fn of(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            BusFactor::AllReduce => 2.0 * (n - 1.0) / n,
            BusFactor::PerPeer => (n - 1.0) / n,
            BusFactor::One => 1.0,
        }
    }
}

/// The MPI library's own collective on the same buffers (out of place), for `--baseline mpi`.
pub type MpiCollective = fn(&mpi::topology::SimpleCommunicator, &Ctx, &[u8], &mut [u8]) -> Result<(), String>;

/// What a collective is, as data: everything the harness and the reports need besides its
/// algorithm and data.
#[derive(Debug, Clone, Copy)]
pub struct Description {
    /// The name in messages and JSON: `all_reduce`.
    pub name: &'static str,
    /// What `meshrun --help` says of its subcommand, after `(rank) `.
    pub about: &'static str,
    pub layout: Layout,
    pub bus: BusFactor,
    /// Whether the `redop` column shows the operation (else `none`).
    pub reduces: bool,
    /// Whether the `root` column shows the root (else -1).
    pub rooted: bool,
    pub mpi: MpiCollective,
}

/// What each collective's file provides: its description, its data, and its algorithm.
pub trait Collective: Sync {
    fn description(&self) -> &'static Description;
    /// Fill this rank's send data (`counts.send` elements): by default, values crafted so any
    /// reduction order gives the same bits for reducing collectives, and the rank's plain
    /// pattern for the others.
    fn init_send(&self, ctx: &Ctx, send: &mut [u8]) -> Result<(), LayoutError> {
        if self.description().reduces {
            crate::reduce::fill(ctx.dtype, send, |i| {
                data::reduction_value(ctx.dtype, ctx.op, ctx.rank, i)
            })
        } else {
            crate::reduce::fill(ctx.dtype, send, |i| data::plain_value(ctx.rank, i))
        }
    }
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
}

impl dyn Collective + '_ {
    pub fn name(&self) -> &'static str {
        self.description().name
    }
    pub fn counts(&self, count: usize, nranks: usize, rank: usize) -> Counts {
        self.description().layout.counts(count, nranks, rank)
    }
    pub fn bus_factor(&self, nranks: usize) -> f64 {
        self.description().bus.of(nranks)
    }
    pub fn reduces(&self) -> bool {
        self.description().reduces
    }
    pub fn rooted(&self) -> bool {
        self.description().rooted
    }
    pub fn run_mpi(
        &self,
        comm: &mpi::topology::SimpleCommunicator,
        ctx: &Ctx,
        send: &[u8],
        recv: &mut [u8],
    ) -> Result<(), String> {
        (self.description().mpi)(comm, ctx, send, recv)
    }
}

/// Every collective, by the name it has in messages, JSON and on the command line, in the order
/// `meshrun --help` lists them: a new collective is its file and one entry here.
pub const REGISTRY: [(&str, &dyn Collective); 7] = [
    ("all_reduce", &all_reduce::AllReduce),
    ("all_gather", &all_gather::AllGather),
    ("reduce_scatter", &reduce_scatter::ReduceScatter),
    ("broadcast", &broadcast::Broadcast),
    ("reduce", &reduce::Reduce),
    ("alltoall", &alltoall::AllToAll),
    ("sendrecv", &sendrecv::SendRecv),
];

/// All collectives by name (also accepting nccl-tests' program names, `all_reduce_perf`).
pub fn by_name(name: &str) -> Option<&'static dyn Collective> {
    let n = name.strip_suffix("_perf").unwrap_or(name);
    REGISTRY.iter().find(|(k, _)| *k == n).map(|&(_, c)| c)
}

/// Every collective's name, from [`REGISTRY`].
pub const ALL: [&str; REGISTRY.len()] = {
    let mut names = [""; REGISTRY.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = REGISTRY[i].0;
        i += 1;
    }
    names
};
