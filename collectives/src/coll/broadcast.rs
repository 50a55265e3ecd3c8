//! broadcast: a pipelined chain from the root around the ring: each rank receives slice k from
//! its left while forwarding slice k-1 to its right. busbw factor 1.

use std::time::Instant;

use ranks::{Op, Transport};

use super::device::{DevBufs, DeviceRun, Xfer};
use super::{data, ring, Bufs, BusFactor, CollError, Collective, Ctx, Description, Layout};
use crate::gpu::At;
use crate::reduce::{self, LayoutError};

pub struct Broadcast;

const DESCRIPTION: Description = Description {
    name: "broadcast",
    about: "Broadcast from the root, as broadcast_perf",
    layout: Layout::Whole,
    bus: BusFactor::One,
    reduces: false,
    rooted: true,
    mpi: super::mpi_baseline::broadcast,
};

impl Collective for Broadcast {
    fn description(&self) -> &'static Description {
        &DESCRIPTION
    }
    fn expected(&self, ctx: &Ctx, expected: &mut [u8]) -> Result<bool, LayoutError> {
        reduce::fill(ctx.dtype, expected, |i| data::plain_value(ctx.root, i)).map(|_| true)
    }
    fn run(&self, t: &mut dyn Transport, ctx: &Ctx, bufs: Bufs<'_>) -> Result<(), CollError> {
        let buf = match bufs {
            Bufs::OutOfPlace { send, recv } => {
                if ctx.rank == ctx.root {
                    recv.copy_from_slice(send);
                }
                recv
            }
            Bufs::InPlace { buf } => buf,
        };
        let n = ctx.nranks;
        if n < 2 {
            return Ok(());
        }
        let pos = (ctx.rank + n - ctx.root) % n;
        let (prev, next) = ((ctx.rank + n - 1) % n, (ctx.rank + 1) % n);
        let sl = ring::slices(0..buf.len(), ctx.elt(), ring::SLICE);
        if pos == 0 {
            let mut ops: Vec<Op<'_>> = sl.iter().map(|r| Op::send(next, &buf[r.clone()])).collect();
            t.exchange(&mut ops, Instant::now() + ctx.step_timeout)?;
            return Ok(());
        }
        let forwards = pos < n - 1;
        for k in 0..=sl.len() {
            let deadline = Instant::now() + ctx.step_timeout;
            match (sl.get(k), k.checked_sub(1).and_then(|j| sl.get(j)).filter(|_| forwards)) {
                (Some(rr), Some(sr)) => {
                    let (out, inn) = ring::split(buf, sr.clone(), rr.clone());
                    t.exchange(&mut [Op::recv(prev, inn), Op::send(next, out)], deadline)?;
                }
                (Some(rr), None) => t.exchange(&mut [Op::recv(prev, &mut buf[rr.clone()])], deadline)?,
                (None, Some(sr)) => t.exchange(&mut [Op::send(next, &buf[sr.clone()])], deadline)?,
                (None, None) => {}
            }
        }
        Ok(())
    }
    /// The same chain on device memory, slices moving from device buffer to device buffer.
    fn run_gpu(&self, t: &mut dyn Transport, ctx: &Ctx, dr: &mut DeviceRun, bufs: DevBufs) -> Result<(), CollError> {
        let len = ctx.counts.recv * ctx.elt();
        let buf = match bufs {
            DevBufs::OutOfPlace { send, recv } => {
                if ctx.rank == ctx.root {
                    dr.copy(At::new(recv, 0), At::new(send, 0), len)?;
                }
                recv
            }
            DevBufs::InPlace { buf } => buf,
        };
        let n = ctx.nranks;
        if n < 2 {
            return Ok(());
        }
        let pos = (ctx.rank + n - ctx.root) % n;
        let (prev, next) = ((ctx.rank + n - 1) % n, (ctx.rank + 1) % n);
        let sl = ring::slices(0..len, ctx.elt(), ring::SLICE);
        let send = |r: &std::ops::Range<usize>| (next, At::new(buf, r.start), r.len());
        if pos == 0 {
            let xs: Vec<Xfer> = sl.iter().flat_map(|r| Xfer::step(Some(send(r)), None)).collect();
            return dr.transfer(t, &xs, Instant::now() + ctx.step_timeout);
        }
        let forwards = pos < n - 1;
        for k in 0..=sl.len() {
            let xs = Xfer::step(
                k.checked_sub(1).and_then(|j| sl.get(j)).filter(|_| forwards).map(send),
                sl.get(k).map(|rr| (prev, At::new(buf, rr.start), rr.len())),
            );
            if !xs.is_empty() {
                dr.transfer(t, &xs, Instant::now() + ctx.step_timeout)?;
            }
        }
        Ok(())
    }
}
