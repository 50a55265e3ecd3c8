//! Collectives over GPU buffers with `--gpu-staging`: every transfer goes device -> pinned host
//! buffer -> network -> pinned host buffer -> device, and every reduction runs on the GPU between
//! device buffers. The ring algorithms ([`ring_reduce_scatter`], [`ring_all_gather`]) and the
//! reduce chain stage one slice at a time; collectives that only move data stage whole buffers
//! ([`whole`]).

use std::ops::Range;
use std::time::Instant;

use ranks::{Op, Transport};

use super::ring::{neighbours, pieces, Phase};
use super::{Bufs, CollError, Collective, Ctx};
use crate::gpu::{At, BufId, Gpu, GpuError, Staging};

/// Device buffers of one run (see [`Bufs`]).
#[derive(Debug, Clone, Copy)]
pub enum DevBufs {
    OutOfPlace { send: BufId, recv: BufId },
    InPlace { buf: BufId },
}

/// A GPU and the staging memory of one placement: two pinned host buffers (send and receive
/// side) and device scratch, allocated once and reused by every run.
pub struct Staged<'g> {
    pub gpu: &'g mut dyn Gpu,
    pub host_send: Box<dyn Staging>,
    pub host_recv: Box<dyn Staging>,
    /// Device scratch: a received slice is uploaded here before it is reduced.
    pub dev_scratch: BufId,
    /// Device work buffer for algorithms that need a whole-size temporary (allocated on first use).
    work: Option<(BufId, usize)>,
}

impl<'g> Staged<'g> {
    /// Staging for runs whose buffers are at most `bytes` long.
    pub fn new(gpu: &'g mut dyn Gpu, bytes: usize) -> Result<Staged<'g>, GpuError> {
        let host_send = gpu.host_staging(bytes)?;
        let host_recv = gpu.host_staging(bytes)?;
        let dev_scratch = gpu.alloc(bytes.min(super::ring::SLICE))?;
        Ok(Staged {
            gpu,
            host_send,
            host_recv,
            dev_scratch,
            work: None,
        })
    }

    /// A device buffer of at least `len` bytes (contents unspecified).
    pub fn work(&mut self, len: usize) -> Result<BufId, GpuError> {
        match self.work {
            Some((id, l)) if l >= len => Ok(id),
            old => {
                if let Some((id, _)) = old {
                    self.gpu.free(id);
                }
                let id = self.gpu.alloc(len)?;
                self.work = Some((id, len));
                Ok(id)
            }
        }
    }

    /// Free the device memory (host staging frees itself).
    pub fn release(self) {
        self.gpu.free(self.dev_scratch);
        if let Some((id, _)) = self.work {
            self.gpu.free(id);
        }
    }
}

/// Whole-buffer staging for any collective: download the send data, run the host algorithm on
/// the pinned buffers, upload the result. Used by the collectives that only move data.
pub fn whole(
    coll: &dyn Collective,
    t: &mut dyn Transport,
    ctx: &Ctx,
    st: &mut Staged,
    bufs: DevBufs,
) -> Result<(), CollError> {
    let (c, elt) = (ctx.counts, ctx.elt());
    match bufs {
        DevBufs::OutOfPlace { send, recv } => {
            let (sl, rl) = (c.send * elt, c.recv * elt);
            st.gpu.download(At::new(send, 0), &mut st.host_send.bytes_mut()[..sl])?;
            coll.run(
                t,
                ctx,
                Bufs::OutOfPlace {
                    send: &st.host_send.bytes()[..sl],
                    recv: &mut st.host_recv.bytes_mut()[..rl],
                },
            )?;
            st.gpu.upload(At::new(recv, 0), &st.host_recv.bytes()[..rl])?;
        }
        DevBufs::InPlace { buf } => {
            let len = c.send.max(c.recv) * elt;
            st.gpu.download(At::new(buf, 0), &mut st.host_recv.bytes_mut()[..len])?;
            coll.run(
                t,
                ctx,
                Bufs::InPlace {
                    buf: &mut st.host_recv.bytes_mut()[..len],
                },
            )?;
            st.gpu.upload(At::new(buf, 0), &st.host_recv.bytes()[..len])?;
        }
    }
    Ok(())
}

/// Ring reduce-scatter over device memory, as [`super::ring::reduce_scatter`]: step s sends chunk
/// r-s-1 right and receives chunk r-s-2 from the left, slice by slice; each received slice is
/// uploaded to device scratch and reduced on the GPU. With `src` (out of place), this rank's data
/// is read from `src` and results are written to `buf`.
pub fn ring_reduce_scatter(
    t: &mut dyn Transport,
    ctx: &Ctx,
    st: &mut Staged,
    src: Option<BufId>,
    buf: BufId,
    bounds: &dyn Fn(usize) -> Range<usize>,
) -> Result<(), CollError> {
    let (right, left) = neighbours(ctx);
    for p in pieces(ctx, Phase::ReduceScatter, bounds) {
        let deadline = Instant::now() + ctx.step_timeout;
        if let Some(sr) = &p.send {
            let from = match src {
                Some(src) if p.step == 0 => src,
                _ => buf,
            };
            st.gpu
                .download(At::new(from, sr.start), &mut st.host_send.bytes_mut()[..sr.len()])?;
        }
        let lens = (p.send.as_ref().map(|x| x.len()), p.recv.as_ref().map(|x| x.len()));
        exchange_staged(t, st, right, lens.0, left, lens.1, deadline)?;
        if let Some(rr) = p.recv {
            st.gpu
                .upload(At::new(st.dev_scratch, 0), &st.host_recv.bytes()[..rr.len()])?;
            let own = At::new(src.unwrap_or(buf), rr.start);
            st.gpu.reduce(
                ctx.dtype,
                ctx.op,
                At::new(buf, rr.start),
                own,
                At::new(st.dev_scratch, 0),
                rr.len(),
            )?;
        }
    }
    Ok(())
}

/// Ring all-gather in place over device memory, as [`super::ring::all_gather`].
pub fn ring_all_gather(
    t: &mut dyn Transport,
    ctx: &Ctx,
    st: &mut Staged,
    buf: BufId,
    bounds: &dyn Fn(usize) -> Range<usize>,
) -> Result<(), CollError> {
    let (right, left) = neighbours(ctx);
    for p in pieces(ctx, Phase::AllGather, bounds) {
        let deadline = Instant::now() + ctx.step_timeout;
        if let Some(sr) = &p.send {
            st.gpu
                .download(At::new(buf, sr.start), &mut st.host_send.bytes_mut()[..sr.len()])?;
        }
        let lens = (p.send.as_ref().map(|x| x.len()), p.recv.as_ref().map(|x| x.len()));
        exchange_staged(t, st, right, lens.0, left, lens.1, deadline)?;
        if let Some(rr) = p.recv {
            st.gpu
                .upload(At::new(buf, rr.start), &st.host_recv.bytes()[..rr.len()])?;
        }
    }
    Ok(())
}

/// Send the first `send` bytes of the send staging buffer to `right` while receiving `recv` bytes
/// from `left` into the receive staging buffer.
fn exchange_staged(
    t: &mut dyn Transport,
    st: &mut Staged,
    right: usize,
    send: Option<usize>,
    left: usize,
    recv: Option<usize>,
    deadline: Instant,
) -> Result<(), CollError> {
    let mut ops = Vec::with_capacity(2);
    if let Some(len) = send {
        ops.push(Op::send(right, &st.host_send.bytes()[..len]));
    }
    if let Some(len) = recv {
        ops.push(Op::recv(left, &mut st.host_recv.bytes_mut()[..len]));
    }
    t.exchange(&mut ops, deadline)?;
    Ok(())
}

/// Copy `len` bytes between device buffers through the host (used where a collective needs a
/// device-to-device copy of a result; small next to the transfers).
pub fn copy_via_host(st: &mut Staged, dst: At, src: At, len: usize) -> Result<(), CollError> {
    st.gpu.download(src, &mut st.host_send.bytes_mut()[..len])?;
    st.gpu.upload(dst, &st.host_send.bytes()[..len])?;
    Ok(())
}
