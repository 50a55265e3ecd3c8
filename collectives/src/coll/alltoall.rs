//! alltoall: every rank sends block j to rank j, all at once in one batch the transport progresses
//! concurrently. Sizes are count x n; busbw factor (n-1)/n.

use std::time::Instant;

use ranks::{Op, Transport};

use super::device::{DevBufs, DeviceRun, Xfer};
use super::{data, Bufs, BusFactor, CollError, Collective, Ctx, Description, Layout};
use crate::gpu::At;
use crate::reduce::{self, LayoutError};

pub struct AllToAll;

fn exchange_blocks(t: &mut dyn Transport, ctx: &Ctx, send: &[u8], recv: &mut [u8]) -> Result<(), CollError> {
    let block = ctx.counts.param * ctx.elt();
    let r = ctx.rank;
    if block == 0 {
        return Ok(());
    }
    recv[r * block..(r + 1) * block].copy_from_slice(&send[r * block..(r + 1) * block]);
    let mut ops: Vec<Op<'_>> = Vec::with_capacity(2 * ctx.nranks);
    for (j, out) in send.chunks(block).enumerate().filter(|(j, _)| *j != r) {
        ops.push(Op::send(j, out));
    }
    for (j, inn) in recv.chunks_mut(block).enumerate().filter(|(j, _)| *j != r) {
        ops.push(Op::recv(j, inn));
    }
    t.exchange(&mut ops, Instant::now() + ctx.step_timeout)?;
    Ok(())
}

const DESCRIPTION: Description = Description {
    name: "alltoall",
    about: "All-to-all, as alltoall_perf",
    layout: Layout::AllToAll,
    bus: BusFactor::PerPeer,
    reduces: false,
    rooted: false,
    mpi: super::mpi_baseline::alltoall,
};

impl Collective for AllToAll {
    fn description(&self) -> &'static Description {
        &DESCRIPTION
    }
    fn init_send(&self, ctx: &Ctx, send: &mut [u8]) -> Result<(), LayoutError> {
        let per = ctx.counts.param.max(1);
        reduce::fill(ctx.dtype, send, |i| {
            data::plain_value(ctx.rank * ctx.nranks + i / per, i % per)
        })
    }
    fn expected(&self, ctx: &Ctx, expected: &mut [u8]) -> Result<bool, LayoutError> {
        let per = ctx.counts.param.max(1);
        reduce::fill(ctx.dtype, expected, |i| {
            data::plain_value((i / per) * ctx.nranks + ctx.rank, i % per)
        })
        .map(|_| true)
    }
    fn run(&self, t: &mut dyn Transport, ctx: &Ctx, bufs: Bufs<'_>) -> Result<(), CollError> {
        match bufs {
            Bufs::OutOfPlace { send, recv } => exchange_blocks(t, ctx, send, recv),
            Bufs::InPlace { buf } => {
                let send = buf.to_vec();
                exchange_blocks(t, ctx, &send, buf)
            }
        }
    }
    /// On device memory: the same one batch, block j of the send buffer to rank j; in place, the
    /// send data is first copied to a work buffer.
    fn run_gpu(&self, t: &mut dyn Transport, ctx: &Ctx, dr: &mut DeviceRun, bufs: DevBufs) -> Result<(), CollError> {
        let (block, r, n) = (ctx.counts.param * ctx.elt(), ctx.rank, ctx.nranks);
        if block == 0 {
            return Ok(());
        }
        let (send, recv) = match bufs {
            DevBufs::OutOfPlace { send, recv } => (send, recv),
            DevBufs::InPlace { buf } => {
                let work = dr.work(t, n * block)?;
                dr.copy(At::new(work, 0), At::new(buf, 0), n * block)?;
                (work, buf)
            }
        };
        dr.copy(At::new(recv, r * block), At::new(send, r * block), block)?;
        let others = (0..n).filter(|&j| j != r);
        let mut xs: Vec<Xfer> = others
            .clone()
            .map(|j| Xfer::Send {
                peer: j,
                from: At::new(send, j * block),
                len: block,
            })
            .collect();
        xs.extend(others.map(|j| Xfer::Recv {
            peer: j,
            into: At::new(recv, j * block),
            len: block,
        }));
        dr.transfer(t, &xs, Instant::now() + ctx.step_timeout)
    }
}
