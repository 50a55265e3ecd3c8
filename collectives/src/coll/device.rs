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
//! Rings and chains move one slice ([`super::ring::SLICE`]) per step. The ring reduce-scatter
//! keeps two slices in flight: slice k's reduction kernel runs while slice k+1 moves
//! (`MESHRUN_GPU_RING_OVERLAP=0` turns that off, for comparisons).
//!
//! Hops between ranks of one node may go by CUDA IPC instead (`--p2p ipc`, [`DeviceRun::use_ipc`]):
//! the sender copies into the receiver's device buffer, ordered by two small messages over the
//! mesh (`device/ipc.rs`); the other hops of the same transfer take the run's path.

use std::ops::Range;
use std::time::Instant;

use ranks::{DirectOp, Op, RegionId, Span, Transport};

use super::ring::{neighbours, pieces, Phase};
use super::{CollError, Ctx};
use crate::gpu::{At, BufId, DataPath, Gpu, GpuError, Staging};

mod ipc;
pub use ipc::IpcPeers;

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

    /// The rank at the other end.
    pub fn peer(&self) -> usize {
        match *self {
            Xfer::Send { peer, .. } | Xfer::Recv { peer, .. } => peer,
        }
    }
}

/// How one sweep's device data moves: over the network as `net` says, and by CUDA IPC between
/// the ranks `ipc` names (the rest of this rank's node under `--p2p ipc`; none under `net`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePaths {
    pub net: DataPath,
    pub ipc: IpcPeers,
}

/// Pinned host buffers for the staged path, one to send from and one to receive into: allocated
/// once per run (a sweep of sizes, types and ops) at the largest size any case needs, not per
/// size: pinning is slow (the kernel locks every page) and a run would otherwise pin and unpin
/// its largest size twice per case.
pub struct HostStaging {
    send: Box<dyn Staging>,
    recv: Box<dyn Staging>,
}

impl HostStaging {
    /// Two staging buffers of `bytes` each.
    pub fn new(gpu: &mut dyn Gpu, bytes: usize) -> Result<HostStaging, GpuError> {
        Ok(HostStaging {
            send: gpu.host_staging(bytes)?,
            recv: gpu.host_staging(bytes)?,
        })
    }

    /// Bytes each buffer holds.
    pub fn len(&self) -> usize {
        self.send.bytes().len().min(self.recv.bytes().len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How device data crosses the network in one run.
enum Path<'g> {
    Staged(&'g mut HostStaging),
    /// Each device buffer's region, registered with the transport.
    Direct {
        regions: Vec<(BufId, RegionId)>,
    },
}

/// Whether the device ring overlaps transfer and reduction: yes, unless
/// `MESHRUN_GPU_RING_OVERLAP=0` (for comparing the two, as `scripts/gpu-bundle-check.sh` does).
pub fn overlap_from_env() -> bool {
    std::env::var("MESHRUN_GPU_RING_OVERLAP").map_or(true, |v| v.trim() != "0")
}

/// A GPU and the transfer memory of one placement, allocated once and reused by every run.
pub struct DeviceRun<'g> {
    pub gpu: &'g mut dyn Gpu,
    path: Path<'g>,
    /// Device scratch: a received slice lands here before it is reduced; two slices of
    /// `scratch_half` bytes, so the ring receives one while it reduces the other.
    pub dev_scratch: BufId,
    scratch_half: usize,
    /// The rings' slice: [`super::ring::SLICE`] (smaller in tests, so small cases have many).
    slice: usize,
    /// Whether the ring reduce-scatter overlaps slice k's reduction with slice k+1's transfer.
    pub overlap: bool,
    /// Device work buffer for algorithms that need a whole-size temporary (allocated on first use).
    work: Option<(BufId, usize)>,
    /// The hops that go by CUDA IPC, and what they exported and opened.
    ipc: ipc::IpcHops,
}

impl<'g> DeviceRun<'g> {
    /// Transfer memory for runs on `bufs`, whose buffers are at most `bytes` long: the run's
    /// pinned host buffers `staging` (staged: required, at least `bytes` long), or registrations
    /// of `bufs` and the scratch (direct).
    pub fn new(
        gpu: &'g mut dyn Gpu,
        t: &mut dyn Transport,
        path: DataPath,
        bytes: usize,
        bufs: DevBufs,
        staging: Option<&'g mut HostStaging>,
    ) -> Result<DeviceRun<'g>, CollError> {
        DeviceRun::with_slice(gpu, t, path, bytes, bufs, staging, super::ring::SLICE)
    }

    /// [`DeviceRun::new`] with rings of `slice`-byte slices.
    pub(crate) fn with_slice(
        gpu: &'g mut dyn Gpu,
        t: &mut dyn Transport,
        path: DataPath,
        bytes: usize,
        bufs: DevBufs,
        staging: Option<&'g mut HostStaging>,
        slice: usize,
    ) -> Result<DeviceRun<'g>, CollError> {
        let path = match (path, staging) {
            (DataPath::Staged, Some(s)) if s.len() >= bytes => Path::Staged(s),
            (DataPath::Staged, s) => {
                return Err(CollError::Gpu(GpuError::OutOfBounds {
                    buf: 0,
                    what: "the run's host staging is smaller than this case (allocate it at the largest size)",
                    range: 0..bytes,
                    len: s.map_or(0, |s| s.len()),
                }))
            }
            (DataPath::Direct(_), _) => Path::Direct { regions: Vec::new() },
        };
        let scratch_half = bytes.min(slice);
        let dev_scratch = gpu.alloc(2 * scratch_half)?;
        let mut run = DeviceRun {
            gpu,
            path,
            dev_scratch,
            scratch_half,
            slice,
            overlap: overlap_from_env(),
            work: None,
            ipc: ipc::IpcHops::default(),
        };
        for b in bufs.all().into_iter().chain([dev_scratch]) {
            if let Err(e) = run.register(t, b) {
                run.release(t);
                return Err(e);
            }
        }
        Ok(run)
    }

    /// Move the hops with `peers` by CUDA IPC (the other ranks of this node, under `--p2p ipc`).
    /// Every rank of the job sets the same rule, so both ends of a hop take the same path.
    pub fn use_ipc(&mut self, peers: IpcPeers) {
        self.ipc = ipc::IpcHops::new(peers);
    }

    /// Close the buffers of other ranks this run opened (also done by [`DeviceRun::release`]):
    /// before a barrier, so that no rank frees a buffer another still has open.
    pub fn close_peers(&mut self) {
        self.ipc.release(&mut *self.gpu);
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
                    self.ipc.forget(id);
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
        self.ipc.release(&mut *self.gpu);
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
    /// Hops with peers reached by IPC move after the others: the network's never wait on them,
    /// so no rank waits in a cycle.
    pub fn transfer(&mut self, t: &mut dyn Transport, xs: &[Xfer], deadline: Instant) -> Result<(), CollError> {
        if !self.ipc.peers.any() {
            return self.transfer_net(t, xs, deadline);
        }
        let (near, far): (Vec<Xfer>, Vec<Xfer>) = xs.iter().partition(|x| self.ipc.peers.reaches(x.peer()));
        if !far.is_empty() {
            self.transfer_net(t, &far, deadline)?;
        }
        if !near.is_empty() {
            self.ipc.transfer(&mut *self.gpu, t, &near, deadline)?;
        }
        Ok(())
    }

    /// [`DeviceRun::transfer`] over the network: staged or GPUDirect, as the run's path.
    fn transfer_net(&mut self, t: &mut dyn Transport, xs: &[Xfer], deadline: Instant) -> Result<(), CollError> {
        match &mut self.path {
            Path::Staged(staging) => {
                let HostStaging {
                    send: host_send,
                    recv: host_recv,
                } = &mut **staging;
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
                // The receives were RDMA writes into device memory: the GPU makes them visible
                // before it next reads (a flush, where the device needs one).
                if xs.iter().any(|x| matches!(x, Xfer::Recv { .. })) {
                    self.gpu.rdma_writes_landed();
                }
                Ok(())
            }
        }
    }
}

/// Ring reduce-scatter over device memory, as [`super::ring::reduce_scatter`]: step s sends chunk
/// r-s-1 right and receives chunk r-s-2 from the left, slice by slice; each received slice lands
/// in device scratch and is reduced on the GPU. With `src` (out of place), this rank's data is
/// read from `src` and results are written to `buf`.
///
/// Two slices in flight, as the host ring: slice k's reduction kernel is started
/// ([`Gpu::reduce_start`], a stream of its own) and slice k+1 moves meanwhile into the other half
/// of the scratch; the kernel is waited for once the transfer is done. Where the next send reads
/// what the pending reduction writes (a chunk of one slice), the reduction runs first. Each
/// element is reduced by the same operations in the same order either way, so the result is
/// the same bytes as without overlap ([`DeviceRun::overlap`] false: transfer, then reduce).
pub fn ring_reduce_scatter(
    t: &mut dyn Transport,
    ctx: &Ctx,
    dr: &mut DeviceRun,
    src: Option<BufId>,
    buf: BufId,
    bounds: &dyn Fn(usize) -> Range<usize>,
) -> Result<(), CollError> {
    let (right, left) = neighbours(ctx);
    let (scratch, half) = (dr.dev_scratch, dr.scratch_half);
    // Slice k lands in scratch half k mod 2.
    let landing = |k: usize| At::new(scratch, (k % 2) * half);
    // Reduce received slice `rr` (landed as slice k) into its place: started, or waited for.
    let reduce = |dr: &mut DeviceRun, rr: Range<usize>, k: usize, start: bool| {
        let (dst, own) = (At::new(buf, rr.start), At::new(src.unwrap_or(buf), rr.start));
        let (dt, op) = (ctx.dtype, ctx.op);
        match start {
            true => dr.gpu.reduce_start(dt, op, dst, own, landing(k), rr.len()),
            false => dr.gpu.reduce(dt, op, dst, own, landing(k), rr.len()),
        }
    };
    // The slice received and not yet reduced: its place in `buf`, and which slice it was.
    let mut pending: Option<(Range<usize>, usize)> = None;
    for (k, p) in pieces(ctx, Phase::ReduceScatter, bounds, dr.slice)
        .into_iter()
        .enumerate()
    {
        let from_src = src.filter(|_| p.step == 0);
        // This piece's send reads what the pending reduction writes: reduce first.
        if let (Some(sr), Some((rr, _)), None) = (&p.send, &pending, from_src) {
            if sr.start < rr.end && rr.start < sr.end {
                let (rr, j) = pending.take().expect("checked above");
                reduce(dr, rr, j, false)?;
            }
        }
        let started = match pending.take() {
            Some((rr, j)) => reduce(dr, rr, j, true).map(|()| true)?,
            None => false,
        };
        let xs = Xfer::step(
            p.send
                .as_ref()
                .map(|sr| (right, At::new(from_src.unwrap_or(buf), sr.start), sr.len())),
            p.recv.as_ref().map(|rr| (left, landing(k), rr.len())),
        );
        dr.transfer(t, &xs, Instant::now() + ctx.step_timeout)?;
        if started {
            dr.gpu.reduce_wait()?;
        }
        pending = p.recv.map(|rr| (rr, k));
        if !dr.overlap {
            if let Some((rr, j)) = pending.take() {
                reduce(dr, rr, j, false)?;
            }
        }
    }
    if let Some((rr, j)) = pending {
        reduce(dr, rr, j, false)?;
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
    for p in pieces(ctx, Phase::AllGather, bounds, dr.slice) {
        let xs = Xfer::step(
            p.send.as_ref().map(|sr| (right, At::new(buf, sr.start), sr.len())),
            p.recv.as_ref().map(|rr| (left, At::new(buf, rr.start), rr.len())),
        );
        dr.transfer(t, &xs, Instant::now() + ctx.step_timeout)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
