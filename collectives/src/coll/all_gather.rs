//! all_gather: ring, each rank's block forwarded n-1 times. Sizes are the gathered total
//! (count x n); busbw factor (n-1)/n.

use ranks::Transport;

use super::device::{self, DevBufs, DeviceRun};
use super::{data, ring, Bufs, BusFactor, CollError, Collective, Ctx, Description, Layout};
use crate::gpu::At;
use crate::reduce::{self, LayoutError};

pub struct AllGather;

const DESCRIPTION: Description = Description {
    name: "all_gather",
    about: "All-gather, as all_gather_perf",
    layout: Layout::Gather,
    bus: BusFactor::PerPeer,
    reduces: false,
    rooted: false,
    mpi: super::mpi_baseline::all_gather,
};

impl Collective for AllGather {
    fn description(&self) -> &'static Description {
        &DESCRIPTION
    }
    fn expected(&self, ctx: &Ctx, expected: &mut [u8]) -> Result<bool, LayoutError> {
        let per = ctx.counts.param;
        reduce::fill(ctx.dtype, expected, |i| {
            data::plain_value(i / per.max(1), i % per.max(1))
        })
        .map(|_| true)
    }
    fn run(&self, t: &mut dyn Transport, ctx: &Ctx, bufs: Bufs<'_>) -> Result<(), CollError> {
        let block = ctx.counts.param * ctx.elt();
        let buf = match bufs {
            Bufs::OutOfPlace { send, recv } => {
                recv[ctx.rank * block..(ctx.rank + 1) * block].copy_from_slice(send);
                recv
            }
            Bufs::InPlace { buf } => buf,
        };
        ring::all_gather(t, ctx, buf, &|c| c * block..(c + 1) * block)
    }
    /// On device memory: this rank's block copied into place, then the device ring all-gather.
    fn run_gpu(&self, t: &mut dyn Transport, ctx: &Ctx, dr: &mut DeviceRun, bufs: DevBufs) -> Result<(), CollError> {
        let block = ctx.counts.param * ctx.elt();
        let buf = match bufs {
            DevBufs::OutOfPlace { send, recv } => {
                dr.copy(At::new(recv, ctx.rank * block), At::new(send, 0), block)?;
                recv
            }
            DevBufs::InPlace { buf } => buf,
        };
        device::ring_all_gather(t, ctx, dr, buf, &|c| c * block..(c + 1) * block)
    }
}
