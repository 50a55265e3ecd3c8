//! all_reduce: small buffers by recursive doubling (log2(n) exchanges of the whole buffer: see
//! doubling.rs; at two ranks that is one full exchange and reduce, up to 512 KiB); mid sizes at
//! 4, 8, .. ranks by halving-doubling (halving.rs, 2 log2(n) exchanges); above, ring
//! reduce-scatter, finalise the owned chunk, ring all-gather, in 128 KiB slices with the reduction
//! of each slice overlapping the transfer of the next (ring.rs).
//! busbw factor 2(n-1)/n: each rank sends and receives 2(n-1)/n of the data.

use ranks::Transport;

use super::device::{self, DevBufs, DeviceRun};
use super::{data, doubling, halving, ring, Bufs, BusFactor, CollError, Collective, Ctx, Description, Layout};
use crate::gpu::At;
use crate::reduce::{self, LayoutError};

pub struct AllReduce;

const DESCRIPTION: Description = Description {
    name: "all_reduce",
    about: "Ring all-reduce, printed as nccl-tests' all_reduce_perf prints it",
    layout: Layout::Whole,
    bus: BusFactor::AllReduce,
    reduces: true,
    rooted: false,
    mpi: super::mpi_baseline::all_reduce,
};

impl Collective for AllReduce {
    fn description(&self) -> &'static Description {
        &DESCRIPTION
    }
    fn expected(&self, ctx: &Ctx, expected: &mut [u8]) -> Result<bool, LayoutError> {
        data::reduced(ctx.dtype, ctx.op, ctx.nranks, 0, expected).map(|_| true)
    }
    fn run(&self, t: &mut dyn Transport, ctx: &Ctx, bufs: Bufs<'_>) -> Result<(), CollError> {
        let (count, n, elt) = (ctx.counts.recv, ctx.nranks, ctx.elt());
        let bounds = |c: usize| ring::chunk(count, n, c, elt);
        let buf = match bufs {
            Bufs::OutOfPlace { send, recv } if n == 1 => {
                recv.copy_from_slice(send);
                recv
            }
            // Small buffers: recursive doubling, log2(n) exchanges instead of 2(n-1) ring steps.
            Bufs::OutOfPlace { send, recv } if recv.len() <= doubling::max_bytes(n) => {
                doubling::all_reduce(t, ctx, Some(send), recv)?;
                reduce::finalize(ctx.dtype, ctx.op, recv, n)?;
                return Ok(());
            }
            Bufs::InPlace { buf } if buf.len() <= doubling::max_bytes(n) => {
                doubling::all_reduce(t, ctx, None, buf)?;
                reduce::finalize(ctx.dtype, ctx.op, buf, n)?;
                return Ok(());
            }
            // Mid sizes at 4, 8, .. ranks: halving-doubling, 2 log2(n) exchanges (halving.rs).
            Bufs::OutOfPlace { send, recv } if halving::used_for(n, recv.len()) => {
                return halving::all_reduce(t, ctx, Some(send), recv);
            }
            Bufs::InPlace { buf } if halving::used_for(n, buf.len()) => {
                return halving::all_reduce(t, ctx, None, buf);
            }
            // No copy of send into recv: the reduce-scatter reads send and writes recv.
            Bufs::OutOfPlace { send, recv } => {
                ring::reduce_scatter(t, ctx, Some(send), recv, &bounds)?;
                recv
            }
            Bufs::InPlace { buf } => {
                ring::reduce_scatter(t, ctx, None, buf, &bounds)?;
                buf
            }
        };
        reduce::finalize(ctx.dtype, ctx.op, &mut buf[bounds(ctx.rank)], n)?;
        ring::all_gather(t, ctx, buf, &bounds)
    }
    /// The ring on device memory: reductions on the GPU, transfers staged or GPUDirect.
    fn run_gpu(&self, t: &mut dyn Transport, ctx: &Ctx, dr: &mut DeviceRun, bufs: DevBufs) -> Result<(), CollError> {
        let (count, n, elt) = (ctx.counts.recv, ctx.nranks, ctx.elt());
        let bounds = |c: usize| ring::chunk(count, n, c, elt);
        let buf = match bufs {
            DevBufs::OutOfPlace { send, recv } if n == 1 => {
                dr.copy(At::new(recv, 0), At::new(send, 0), count * elt)?;
                recv
            }
            DevBufs::OutOfPlace { send, recv } => {
                device::ring_reduce_scatter(t, ctx, dr, Some(send), recv, &bounds)?;
                recv
            }
            DevBufs::InPlace { buf } => {
                device::ring_reduce_scatter(t, ctx, dr, None, buf, &bounds)?;
                buf
            }
        };
        dr.gpu.finalize(ctx.dtype, ctx.op, buf, bounds(ctx.rank), n)?;
        device::ring_all_gather(t, ctx, dr, buf, &bounds)
    }
}
