//! reduce: a pipelined chain towards the root: the rank farthest from the root sends its data,
//! each rank on the way receives slice k, reduces its own into it and passes it on. busbw factor 1.
//! Only the root's result is defined. On GPU buffers the chain reduces on the device.

use std::time::Instant;

use ranks::{Op, Transport};

use super::device::{DevBufs, DeviceRun, Xfer};
use super::{data, ring, Bufs, BusFactor, CollError, Collective, Ctx, Description, Layout};
use crate::gpu::At;
use crate::reduce::{self as kernels, LayoutError};

pub struct Reduce;

const DESCRIPTION: Description = Description {
    name: "reduce",
    about: "Reduce to the root, as reduce_perf",
    layout: Layout::Whole,
    bus: BusFactor::One,
    reduces: true,
    rooted: true,
    mpi: super::mpi_baseline::reduce,
};

impl Collective for Reduce {
    fn description(&self) -> &'static Description {
        &DESCRIPTION
    }
    fn expected(&self, ctx: &Ctx, expected: &mut [u8]) -> Result<bool, LayoutError> {
        if ctx.rank != ctx.root {
            return Ok(false);
        }
        data::reduced(ctx.dtype, ctx.op, ctx.nranks, 0, expected).map(|_| true)
    }
    fn run(&self, t: &mut dyn Transport, ctx: &Ctx, bufs: Bufs<'_>) -> Result<(), CollError> {
        let buf = match bufs {
            Bufs::OutOfPlace { send, recv } => {
                recv.copy_from_slice(send);
                recv
            }
            Bufs::InPlace { buf } => buf,
        };
        let n = ctx.nranks;
        let pos = (ctx.rank + n - ctx.root) % n;
        let (toward, from) = ((ctx.rank + n - 1) % n, (ctx.rank + 1) % n);
        let sl = ring::slices(0..buf.len(), ctx.elt(), ring::SLICE);
        if n >= 2 && pos == n - 1 {
            let mut ops: Vec<Op<'_>> = sl.iter().map(|r| Op::send(toward, &buf[r.clone()])).collect();
            t.exchange(&mut ops, Instant::now() + ctx.step_timeout)?;
            return Ok(());
        }
        if n >= 2 {
            let mut scratch = ring::take_scratch(sl.first().map_or(0, |r| r.len()));
            for k in 0..=sl.len() {
                let deadline = Instant::now() + ctx.step_timeout;
                let send = k.checked_sub(1).and_then(|j| sl.get(j)).filter(|_| pos > 0).cloned();
                let recv = sl.get(k).cloned();
                let tmp_len = recv.as_ref().map_or(0, |r| r.len());
                {
                    let mut ops = Vec::with_capacity(2);
                    if let Some(sr) = &send {
                        ops.push(Op::send(toward, &buf[sr.clone()]));
                    }
                    if recv.is_some() {
                        ops.push(Op::recv(from, &mut scratch[..tmp_len]));
                    }
                    t.exchange(&mut ops, deadline)?;
                }
                if let Some(rr) = recv {
                    kernels::reduce_into(ctx.dtype, ctx.op, &mut buf[rr], &scratch[..tmp_len])?;
                }
            }
            ring::put_scratch(scratch);
        }
        if pos == 0 {
            kernels::finalize(ctx.dtype, ctx.op, buf, n)?;
        }
        Ok(())
    }
    /// The same chain on device memory: each received slice lands in device scratch and is
    /// reduced on the GPU; out of place, this rank's data is read from `send` without a copy.
    fn run_gpu(&self, t: &mut dyn Transport, ctx: &Ctx, dr: &mut DeviceRun, bufs: DevBufs) -> Result<(), CollError> {
        let (src, buf) = match bufs {
            DevBufs::OutOfPlace { send, recv } => (send, recv),
            DevBufs::InPlace { buf } => (buf, buf),
        };
        let n = ctx.nranks;
        let len = ctx.counts.recv * ctx.elt();
        let pos = (ctx.rank + n - ctx.root) % n;
        let (toward, from) = ((ctx.rank + n - 1) % n, (ctx.rank + 1) % n);
        let sl = ring::slices(0..len, ctx.elt(), ring::SLICE);
        if n == 1 {
            if src != buf {
                dr.copy(At::new(buf, 0), At::new(src, 0), len)?;
            }
        } else if pos == n - 1 {
            // The far end of the chain sends its own data.
            for r in &sl {
                let x = Xfer::Send {
                    peer: toward,
                    from: At::new(src, r.start),
                    len: r.len(),
                };
                dr.transfer(t, &[x], Instant::now() + ctx.step_timeout)?;
            }
            return Ok(());
        } else {
            for k in 0..=sl.len() {
                // Pass on the slice reduced in the last step (the root keeps it).
                let send = k.checked_sub(1).and_then(|j| sl.get(j)).filter(|_| pos > 0).cloned();
                let recv = sl.get(k).cloned();
                let xs = Xfer::step(
                    send.map(|sr| (toward, At::new(buf, sr.start), sr.len())),
                    recv.as_ref().map(|rr| (from, At::new(dr.dev_scratch, 0), rr.len())),
                );
                dr.transfer(t, &xs, Instant::now() + ctx.step_timeout)?;
                if let Some(rr) = recv {
                    let (mine, scratch) = (At::new(src, rr.start), At::new(dr.dev_scratch, 0));
                    dr.gpu
                        .reduce(ctx.dtype, ctx.op, At::new(buf, rr.start), mine, scratch, rr.len())?;
                }
            }
        }
        if pos == 0 {
            dr.gpu.finalize(ctx.dtype, ctx.op, buf, 0..len, n)?;
        }
        Ok(())
    }
}
