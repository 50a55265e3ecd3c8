//! sendrecv: every rank sends to its right and receives from its left at the same time.
//! busbw factor 1.

use std::time::Instant;

use ranks::{Op, Transport};

use super::device::{DevBufs, DeviceRun, Xfer};
use super::{data, Bufs, BusFactor, CollError, Collective, Ctx, Description, Layout};
use crate::gpu::At;
use crate::reduce::{self, LayoutError};

pub struct SendRecv;

const DESCRIPTION: Description = Description {
    name: "sendrecv",
    about: "Send right, receive from the left, as sendrecv_perf",
    layout: Layout::Whole,
    bus: BusFactor::One,
    reduces: false,
    rooted: false,
    mpi: super::mpi_baseline::sendrecv,
};

impl Collective for SendRecv {
    fn description(&self) -> &'static Description {
        &DESCRIPTION
    }
    fn expected(&self, ctx: &Ctx, expected: &mut [u8]) -> Result<bool, LayoutError> {
        let left = (ctx.rank + ctx.nranks - 1) % ctx.nranks;
        reduce::fill(ctx.dtype, expected, |i| data::plain_value(left, i)).map(|_| true)
    }
    fn run(&self, t: &mut dyn Transport, ctx: &Ctx, bufs: Bufs<'_>) -> Result<(), CollError> {
        let n = ctx.nranks;
        let (right, left) = ((ctx.rank + 1) % n, (ctx.rank + n - 1) % n);
        let deadline = Instant::now() + ctx.step_timeout;
        match bufs {
            Bufs::OutOfPlace { send, recv } if n == 1 => recv.copy_from_slice(send),
            Bufs::InPlace { .. } if n == 1 => {}
            Bufs::OutOfPlace { send, recv } => {
                t.exchange(&mut [Op::send(right, send), Op::recv(left, recv)], deadline)?
            }
            Bufs::InPlace { buf } => {
                let out = buf.to_vec();
                t.exchange(&mut [Op::send(right, &out), Op::recv(left, buf)], deadline)?
            }
        }
        Ok(())
    }
    /// On device memory: send to the right, receive from the left; in place, the send data is
    /// first copied to a work buffer.
    fn run_gpu(&self, t: &mut dyn Transport, ctx: &Ctx, dr: &mut DeviceRun, bufs: DevBufs) -> Result<(), CollError> {
        let n = ctx.nranks;
        let len = ctx.counts.recv * ctx.elt();
        let (right, left) = ((ctx.rank + 1) % n, (ctx.rank + n - 1) % n);
        let (send, recv) = match bufs {
            DevBufs::OutOfPlace { send, recv } if n == 1 => return dr.copy(At::new(recv, 0), At::new(send, 0), len),
            DevBufs::InPlace { .. } if n == 1 => return Ok(()),
            DevBufs::OutOfPlace { send, recv } => (send, recv),
            DevBufs::InPlace { buf } => {
                let work = dr.work(t, len)?;
                dr.copy(At::new(work, 0), At::new(buf, 0), len)?;
                (work, buf)
            }
        };
        let xs = [
            Xfer::Send {
                peer: right,
                from: At::new(send, 0),
                len,
            },
            Xfer::Recv {
                peer: left,
                into: At::new(recv, 0),
                len,
            },
        ];
        dr.transfer(t, &xs, Instant::now() + ctx.step_timeout)
    }
}
