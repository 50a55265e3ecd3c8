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

/// A GPU and the transfer memory of one placement, allocated once and reused by every run.
pub struct DeviceRun<'g> {
    pub gpu: &'g mut dyn Gpu,
    path: Path<'g>,
    /// Device scratch: a received slice lands here before it is reduced.
    pub dev_scratch: BufId,
    /// Device work buffer for algorithms that need a whole-size temporary (allocated on first use).
    work: Option<(BufId, usize)>,
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
        let dev_scratch = gpu.alloc(bytes.min(super::ring::SLICE))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::standin::{check_journal, Call, HostStandIn, Journal};
    use crate::gpu::RdmaFlush;
    use ranks::{
        ForeignPath, NicMemory, OneSidedResult, OneSidedRole, Rdma, TransportError, TransportKind, WindowMemory,
    };

    /// Rank 0 of `n` with RDMA: zero-copy batches "complete" at once (the stand-in's memory is not
    /// written), each noted in the stand-in's journal, so the order of network and device calls
    /// shows; two-sided operations are an error (the direct path must not use them).
    struct FakeRdma {
        n: usize,
        journal: Journal,
        regions: usize,
    }

    impl Transport for FakeRdma {
        fn kind(&self) -> TransportKind {
            TransportKind::Verbs
        }
        fn rank(&self) -> usize {
            0
        }
        fn size(&self) -> usize {
            self.n
        }
        fn host_of(&self, _: usize) -> &str {
            "fake"
        }
        fn exchange_with(
            &mut self,
            _: &mut [Op<'_>],
            _: Instant,
            _: Option<&mut dyn FnMut()>,
        ) -> Result<(), TransportError> {
            Err(TransportError::Setup("a two-sided operation on the direct path".into()))
        }
        fn rdma(&mut self) -> Option<&mut dyn Rdma> {
            Some(self)
        }
    }

    impl Rdma for FakeRdma {
        fn one_sided(
            &mut self,
            _: usize,
            _: usize,
            _: OneSidedRole,
            _: Instant,
        ) -> Result<OneSidedResult, TransportError> {
            Err(TransportError::Setup("not in this test".into()))
        }
        fn use_window_memory(&mut self, _: Box<dyn WindowMemory>) -> Result<ForeignPath, TransportError> {
            Err(TransportError::Setup("not in this test".into()))
        }
        fn register_region(&mut self, _: Box<dyn NicMemory>) -> Result<(RegionId, ForeignPath), TransportError> {
            self.regions += 1;
            Ok((self.regions, ForeignPath::HostStandIn))
        }
        fn release_region(&mut self, _: RegionId) {}
        fn exchange_direct(&mut self, ops: &mut [DirectOp], _: Instant) -> Result<(), TransportError> {
            let recv = ops.iter().any(|o| matches!(o.kind, ranks::DirectKind::Recv(_)));
            self.journal.lock().unwrap().push(Call::Note(if recv {
                "exchange with receives"
            } else {
                "exchange, sends only"
            }));
            Ok(())
        }
        fn use_send_opcode(&mut self, _: bool) {}
        fn set_test_qps(&mut self, _: usize) {}
    }

    fn ctx(nranks: usize) -> Ctx {
        Ctx::for_test(0, nranks, std::time::Duration::from_secs(5))
    }

    /// A ring reduce-scatter over GPUDirect RDMA on a stand-in GPU whose device reports these
    /// attributes; the journal of its calls from the first transfer on.
    fn ring_over_rdma(flush_options: i32, ordering: i32) -> (Vec<Call>, RdmaFlush) {
        let mut g = HostStandIn::with_attributes(0, flush_options, ordering);
        let journal = g.journal();
        let mut t = FakeRdma {
            n: 3,
            journal: journal.clone(),
            regions: 0,
        };
        let buf = g.alloc(3000).unwrap();
        let rule = g.flush_rule();
        let mut dr = DeviceRun::new(
            &mut g,
            &mut t,
            DataPath::Direct(ForeignPath::HostStandIn),
            3000,
            DevBufs::InPlace { buf },
            None,
        )
        .unwrap();
        let start = journal.lock().unwrap().len();
        ring_reduce_scatter(&mut t, &ctx(3), &mut dr, None, buf, &|c| c * 1000..(c + 1) * 1000).unwrap();
        // The check's download of the result reads device memory too.
        let mut out = vec![0u8; 1000];
        dr.gpu.download(At::new(buf, 0), &mut out).unwrap();
        dr.release(&mut t);
        let calls = journal.lock().unwrap()[start..].to_vec();
        (calls, rule)
    }

    /// Where the device needs it, every slice an RDMA write placed is flushed before the reduce
    /// kernel reads it: exchange, landed, flush, reduce, for each of the ring's two steps.
    #[test]
    fn rdma_writes_are_flushed_before_the_kernel_reads_them() {
        let (calls, rule) = ring_over_rdma(crate::gpu::FLUSH_OPTION_HOST, 0);
        assert_eq!(rule, RdmaFlush::Flush);
        let step = [
            Call::Note("exchange with receives"),
            Call::RdmaLanded,
            Call::Flush,
            Call::Reduce(1000),
        ];
        let want: Vec<Call> = step
            .iter()
            .chain(&step)
            .cloned()
            .chain([Call::Download(1000)])
            .collect();
        assert_eq!(calls[..want.len()], want[..], "{calls:?}");
        check_journal(&calls, rule, 1).unwrap();
    }

    /// A device that orders RDMA writes for its own kernels (OWNER or ALL_DEVICES) is never flushed.
    #[test]
    fn no_flush_where_the_device_orders_rdma_writes() {
        for ordering in [crate::gpu::ORDERING_OWNER, crate::gpu::ORDERING_ALL_DEVICES] {
            let (calls, rule) = ring_over_rdma(crate::gpu::FLUSH_OPTION_HOST, ordering);
            assert_eq!(rule, RdmaFlush::NotNeeded);
            assert!(calls.contains(&Call::RdmaLanded), "{calls:?}");
            assert!(!calls.contains(&Call::Flush), "{calls:?}");
            assert_eq!(calls.iter().filter(|c| matches!(c, Call::Reduce(_))).count(), 2);
            check_journal(&calls, rule, 1).unwrap();
        }
    }

    /// The staged path takes the run's staging and allocates none of its own; staging smaller
    /// than the case is refused (the run must allocate it at its largest size).
    #[test]
    fn staged_runs_share_the_run_staging() {
        let mut g = HostStandIn::new(0);
        let journal = g.journal();
        let mut t = FakeRdma {
            n: 2,
            journal: journal.clone(),
            regions: 0,
        };
        let mut staging = HostStaging::new(&mut g, 4096).unwrap();
        for bytes in [64, 1024, 4096] {
            let buf = g.alloc(bytes).unwrap();
            let dr = DeviceRun::new(
                &mut g,
                &mut t,
                DataPath::Staged,
                bytes,
                DevBufs::InPlace { buf },
                Some(&mut staging),
            )
            .unwrap();
            dr.release(&mut t);
            g.free(buf);
        }
        let e = DeviceRun::new(
            &mut g,
            &mut t,
            DataPath::Staged,
            8192,
            DevBufs::InPlace { buf: 0 },
            Some(&mut staging),
        )
        .err()
        .expect("staging too small");
        assert!(e.to_string().contains("host staging is smaller than this case"), "{e}");
        assert!(DeviceRun::new(&mut g, &mut t, DataPath::Staged, 8, DevBufs::InPlace { buf: 0 }, None).is_err());
        let calls = journal.lock().unwrap().clone();
        let staging_calls: Vec<&Call> = calls.iter().filter(|c| matches!(c, Call::HostStaging(_))).collect();
        assert_eq!(staging_calls, [&Call::HostStaging(4096), &Call::HostStaging(4096)]);
        assert_eq!(t.regions, 0, "nothing registered on the staged path");
        check_journal(&calls, g.flush_rule(), 1).unwrap();
    }
}
