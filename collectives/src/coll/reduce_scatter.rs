//! reduce_scatter: ring reduce-scatter; rank r keeps block r. Sizes are the scattered total
//! (count x n); busbw factor (n-1)/n.

use ranks::Transport;

use super::device::{self, DevBufs, DeviceRun};
use super::{data, ring, Bufs, CollError, Collective, Counts, Ctx};
use crate::gpu::At;
use crate::reduce::{self, LayoutError};

pub struct ReduceScatter;

impl Collective for ReduceScatter {
    fn name(&self) -> &'static str {
        "reduce_scatter"
    }
    fn counts(&self, count: usize, n: usize, rank: usize) -> Counts {
        let per = count / n;
        Counts {
            send: per * n,
            recv: per,
            param: per,
            send_inplace_offset: 0,
            recv_inplace_offset: rank * per,
        }
    }
    fn bus_factor(&self, n: usize) -> f64 {
        (n as f64 - 1.0) / n as f64
    }
    fn reduces(&self) -> bool {
        true
    }
    fn rooted(&self) -> bool {
        false
    }
    fn init_send(&self, ctx: &Ctx, send: &mut [u8]) -> Result<(), LayoutError> {
        reduce::fill(ctx.dtype, send, |i| {
            data::reduction_value(ctx.dtype, ctx.op, ctx.rank, i)
        })
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
    fn run_mpi(
        &self,
        comm: &mpi::topology::SimpleCommunicator,
        ctx: &Ctx,
        send: &[u8],
        recv: &mut [u8],
    ) -> Result<(), String> {
        super::mpi_baseline::reduce_scatter(comm, ctx, send, recv)
    }
}
