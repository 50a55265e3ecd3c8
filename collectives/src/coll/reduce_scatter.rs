//! reduce_scatter: ring reduce-scatter; rank r keeps block r. Sizes are the scattered total
//! (count x n); busbw factor (n-1)/n.

use ranks::Transport;

use super::device::{self, DevBufs, DeviceRun};
use super::{data, ring, Bufs, BusFactor, CollError, Collective, Ctx, Description, Layout};
use crate::gpu::At;
use crate::reduce::{self, LayoutError};

pub struct ReduceScatter;

const DESCRIPTION: Description = Description {
    name: "reduce_scatter",
    about: "Reduce-scatter, as reduce_scatter_perf",
    layout: Layout::Scatter,
    bus: BusFactor::PerPeer,
    reduces: true,
    rooted: false,
    mpi: super::mpi_baseline::reduce_scatter,
};

impl Collective for ReduceScatter {
    fn description(&self) -> &'static Description {
        &DESCRIPTION
    }
    fn expected(&self, ctx: &Ctx, expected: &mut [u8]) -> Result<bool, LayoutError> {
        data::reduced(ctx.dtype, ctx.op, ctx.nranks, ctx.rank * ctx.counts.param, expected).map(|_| true)
    }
    fn run(&self, t: &mut dyn Transport, ctx: &Ctx, bufs: Bufs<'_>) -> Result<(), CollError> {
        let block = ctx.counts.param * ctx.elt();
        let mine = ctx.rank * block..(ctx.rank + 1) * block;
        let bounds = |c: usize| c * block..(c + 1) * block;
        match bufs {
            Bufs::OutOfPlace { send, recv } => {
                let mut work = vec![0u8; send.len()];
                ring::reduce_scatter(t, ctx, Some(send), &mut work, &bounds)?;
                reduce::finalize(ctx.dtype, ctx.op, &mut work[mine.clone()], ctx.nranks)?;
                recv.copy_from_slice(&work[mine]);
            }
            Bufs::InPlace { buf } => {
                ring::reduce_scatter(t, ctx, None, buf, &bounds)?;
                reduce::finalize(ctx.dtype, ctx.op, &mut buf[mine], ctx.nranks)?;
            }
        }
        Ok(())
    }
    /// The ring on device memory: reductions on the GPU, transfers staged or GPUDirect.
    fn run_gpu(&self, t: &mut dyn Transport, ctx: &Ctx, dr: &mut DeviceRun, bufs: DevBufs) -> Result<(), CollError> {
        let block = ctx.counts.param * ctx.elt();
        let mine = ctx.rank * block..(ctx.rank + 1) * block;
        let bounds = |c: usize| c * block..(c + 1) * block;
        match bufs {
            DevBufs::OutOfPlace { send, recv } => {
                let work = dr.work(t, ctx.counts.send * ctx.elt())?;
                device::ring_reduce_scatter(t, ctx, dr, Some(send), work, &bounds)?;
                dr.gpu.finalize(ctx.dtype, ctx.op, work, mine.clone(), ctx.nranks)?;
                dr.copy(At::new(recv, 0), At::new(work, mine.start), block)?;
            }
            DevBufs::InPlace { buf } => {
                device::ring_reduce_scatter(t, ctx, dr, None, buf, &bounds)?;
                dr.gpu.finalize(ctx.dtype, ctx.op, buf, mine, ctx.nranks)?;
            }
        }
        Ok(())
    }
}
