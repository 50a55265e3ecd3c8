//! Collectives over GPU buffers. Every reduction runs on the GPU between device buffers; how the
//! data crosses the network is the run's path:
//! - staged (`--gpu-staging`): device -> pinned host buffer -> network -> pinned host buffer ->
//!   device, on any transport;
//! - direct (GPUDirect RDMA): the device buffers are registered with the NIC and the transport's
//!   zero-copy operations move data from one rank's device memory into the next one's, with no
//!   copy on either host.
//!
//! The algorithms ([`ring_reduce_scatter`], [`ring_all_gather`], and each collective's
//! `run_gpu`) are written once on [`DeviceRun::transfer`], so both paths run the same schedule.
//! Rings and chains move one slice ([`super::ring::SLICE`]) per step.

use std::ops::Range;
use std::time::Instant;

use ranks::{DirectOp, Op, RegionId, Span, Transport};

use super::ring::{neighbours, pieces, Phase};
use super::{CollError, Ctx};
use crate::gpu::{At, BufId, DataPath, Gpu, GpuError, Staging};

/// Device buffers of one run: separate (out of place) or one (in place).
#[derive(Debug, Clone, Copy)]
pub enum DevBufs {
    OutOfPlace { send: BufId, recv: BufId },
    InPlace { buf: BufId },
}

impl DevBufs {
    fn all(self) -> Vec<BufId> {
        match self {
            DevBufs::OutOfPlace { send, recv } => vec![send, recv],
            DevBufs::InPlace { buf } => vec![buf],
        }
    }
}

/// One side of a transfer: `len` bytes of device memory at `at`, to or from `peer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Xfer {
    Send { peer: usize, from: At, len: usize },
    Recv { peer: usize, into: At, len: usize },
}

impl Xfer {
    /// One step of a ring or chain: an optional send (peer, source, bytes) and an optional
    /// receive (peer, destination, bytes).
    pub fn step(send: Option<(usize, At, usize)>, recv: Option<(usize, At, usize)>) -> Vec<Xfer> {
        let send = send.map(|(peer, from, len)| Xfer::Send { peer, from, len });
        let recv = recv.map(|(peer, into, len)| Xfer::Recv { peer, into, len });
        send.into_iter().chain(recv).collect()
    }
}

/// How device data crosses the network in one run.
enum Path {
    Staged {
        host_send: Box<dyn Staging>,
        host_recv: Box<dyn Staging>,
    },
    /// Each device buffer's region, registered with the transport.
    Direct { regions: Vec<(BufId, RegionId)> },
}

/// A GPU and the transfer memory of one placement, allocated once and reused by every run.
pub struct DeviceRun<'g> {
    pub gpu: &'g mut dyn Gpu,
    path: Path,
    /// Device scratch: a received slice lands here before it is reduced.
    pub dev_scratch: BufId,
    /// Device work buffer for algorithms that need a whole-size temporary (allocated on first use).
    work: Option<(BufId, usize)>,
}

impl<'g> DeviceRun<'g> {
    /// Transfer memory for runs on `bufs`, whose buffers are at most `bytes` long: pinned host
    /// buffers (staged), or registrations of `bufs` and the scratch (direct).
    pub fn new(
        gpu: &'g mut dyn Gpu,
        t: &mut dyn Transport,
        path: DataPath,
        bytes: usize,
        bufs: DevBufs,
    ) -> Result<DeviceRun<'g>, CollError> {
        let dev_scratch = gpu.alloc(bytes.min(super::ring::SLICE))?;
        let path = match path {
            DataPath::Staged => Path::Staged {
                host_send: gpu.host_staging(bytes)?,
                host_recv: gpu.host_staging(bytes)?,
            },
            DataPath::Direct(_) => Path::Direct { regions: Vec::new() },
        };
        let mut run = DeviceRun {
            gpu,
            path,
            dev_scratch,
            work: None,
        };
        for b in bufs.all().into_iter().chain([dev_scratch]) {
            if let Err(e) = run.register(t, b) {
                run.release(t);
                return Err(e);
            }
        }
        Ok(run)
    }

    /// Register `buf` with the transport (direct path only).
    fn register(&mut self, t: &mut dyn Transport, buf: BufId) -> Result<(), CollError> {
        if let Path::Direct { regions } = &mut self.path {
            if !regions.iter().any(|(b, _)| *b == buf) {
                let (id, _) = t
                    .require_rdma(
                        "cannot move GPU memory without a copy: GPUDirect RDMA needs --transport verbs; or add --gpu-staging",
                    )?
                    .register_region(self.gpu.nic_memory(buf)?)?;
                regions.push((buf, id));
            }
        }
        Ok(())
    }

    /// A device buffer of at least `len` bytes (contents unspecified), registered like the rest.
    pub fn work(&mut self, t: &mut dyn Transport, len: usize) -> Result<BufId, CollError> {
        match self.work {
            Some((id, l)) if l >= len => Ok(id),
            old => {
                if let Some((id, _)) = old {
                    self.forget(t, id);
                    self.gpu.free(id);
                }
                let id = self.gpu.alloc(len)?;
                self.work = Some((id, len));
                self.register(t, id)?;
                Ok(id)
            }
        }
    }

    fn forget(&mut self, t: &mut dyn Transport, buf: BufId) {
        if let Path::Direct { regions } = &mut self.path {
            regions.retain(|&(b, id)| {
                if b == buf {
                    if let Some(r) = t.rdma() {
                        r.release_region(id);
                    }
                }
                b != buf
            });
        }
    }

    /// Deregister everything and free the device memory this run allocated (host staging frees
    /// itself; the caller frees its own buffers).
    pub fn release(mut self, t: &mut dyn Transport) {
        if let Path::Direct { regions } = &mut self.path {
            for (_, id) in regions.drain(..) {
                if let Some(r) = t.rdma() {
                    r.release_region(id);
                }
            }
        }
        self.gpu.free(self.dev_scratch);
        if let Some((id, _)) = self.work {
            self.gpu.free(id);
        }
    }

    /// Copy `len` bytes between device buffers.
    pub fn copy(&mut self, dst: At, src: At, len: usize) -> Result<(), CollError> {
        Ok(self.gpu.copy(dst, src, len)?)
    }

    /// Move device data: every send and receive of `xs` progresses concurrently and all complete
    /// before this returns (matched with the peers' transfers as [`Transport::exchange`] matches).
    pub fn transfer(&mut self, t: &mut dyn Transport, xs: &[Xfer], deadline: Instant) -> Result<(), CollError> {
        match &mut self.path {
            Path::Staged { host_send, host_recv } => {
                // Sends packed one after another in the send staging buffer, receives likewise.
                let mut off = 0;
                for x in xs {
                    if let Xfer::Send { from, len, .. } = *x {
                        self.gpu.download(from, &mut host_send.bytes_mut()[off..off + len])?;
                        off += len;
                    }
                }
                {
                    let mut out = host_send.bytes();
                    let mut inn = host_recv.bytes_mut();
                    let mut ops = Vec::with_capacity(xs.len());
                    for x in xs {
                        match *x {
                            Xfer::Send { peer, len, .. } => {
                                let (a, rest) = out.split_at(len);
                                ops.push(Op::send(peer, a));
                                out = rest;
                            }
                            Xfer::Recv { peer, len, .. } => {
                                let (a, rest) = std::mem::take(&mut inn).split_at_mut(len);
                                ops.push(Op::recv(peer, a));
                                inn = rest;
                            }
                        }
                    }
                    t.exchange(&mut ops, deadline)?;
                }
                let mut off = 0;
                for x in xs {
                    if let Xfer::Recv { into, len, .. } = *x {
                        self.gpu.upload(into, &host_recv.bytes()[off..off + len])?;
                        off += len;
                    }
                }
                Ok(())
            }
            Path::Direct { regions } => {
                let span = |at: At, len: usize| -> Result<Span, CollError> {
                    let region = regions.iter().find(|(b, _)| *b == at.buf).map(|(_, id)| *id);
                    let region = region.ok_or(GpuError::OutOfBounds {
                        buf: at.buf,
                        what: "a transfer from or into an unregistered buffer",
                        range: at.off..at.off + len,
                        len: 0,
                    })?;
                    Ok(Span::new(region, at.off, len))
                };
                let mut ops = Vec::with_capacity(xs.len());
                for x in xs {
                    ops.push(match *x {
                        Xfer::Send { peer, from, len } => DirectOp::send(peer, span(from, len)?),
                        Xfer::Recv { peer, into, len } => DirectOp::recv(peer, span(into, len)?),
                    });
                }
                t.require_rdma("has no zero-copy operations between registered regions")?
                    .exchange_direct(&mut ops, deadline)?;
                Ok(())
            }
        }
    }
}

/// Ring reduce-scatter over device memory, as [`super::ring::reduce_scatter`]: step s sends chunk
/// r-s-1 right and receives chunk r-s-2 from the left, slice by slice; each received slice lands
/// in device scratch and is reduced on the GPU. With `src` (out of place), this rank's data is
/// read from `src` and results are written to `buf`.
pub fn ring_reduce_scatter(
    t: &mut dyn Transport,
    ctx: &Ctx,
    dr: &mut DeviceRun,
    src: Option<BufId>,
    buf: BufId,
    bounds: &dyn Fn(usize) -> Range<usize>,
) -> Result<(), CollError> {
    let (right, left) = neighbours(ctx);
    for p in pieces(ctx, Phase::ReduceScatter, bounds, super::ring::SLICE) {
        let from = match src {
            Some(src) if p.step == 0 => src,
            _ => buf,
        };
        let xs = Xfer::step(
            p.send.as_ref().map(|sr| (right, At::new(from, sr.start), sr.len())),
            p.recv.as_ref().map(|rr| (left, At::new(dr.dev_scratch, 0), rr.len())),
        );
        dr.transfer(t, &xs, Instant::now() + ctx.step_timeout)?;
        if let Some(rr) = p.recv {
            let own = At::new(src.unwrap_or(buf), rr.start);
            let scratch = At::new(dr.dev_scratch, 0);
            dr.gpu
                .reduce(ctx.dtype, ctx.op, At::new(buf, rr.start), own, scratch, rr.len())?;
        }
    }
    Ok(())
}

/// Ring all-gather in place over device memory, as [`super::ring::all_gather`]: received slices
/// land straight in their place in `buf`.
pub fn ring_all_gather(
    t: &mut dyn Transport,
    ctx: &Ctx,
    dr: &mut DeviceRun,
    buf: BufId,
    bounds: &dyn Fn(usize) -> Range<usize>,
) -> Result<(), CollError> {
    let (right, left) = neighbours(ctx);
    for p in pieces(ctx, Phase::AllGather, bounds, super::ring::SLICE) {
        let xs = Xfer::step(
            p.send.as_ref().map(|sr| (right, At::new(buf, sr.start), sr.len())),
            p.recv.as_ref().map(|rr| (left, At::new(buf, rr.start), rr.len())),
        );
        dr.transfer(t, &xs, Instant::now() + ctx.step_timeout)?;
    }
    Ok(())
}
