//! The host stand-in for a GPU (tests only, `MESHRUN_GPU_STANDIN=host`): device buffers are
//! separate host buffers reached only through upload/download, and reductions run the CPU
//! kernels between them, so the staged algorithms' data flow is exercised for real without a GPU.
//!
//! It also models the calls the CUDA path makes for GPUDirect RDMA, in a [`Journal`]: device
//! allocations (`cuMemAlloc`), pinned staging (`cuMemHostAlloc`), the probe (a buffer's pointer
//! attribute, a dma-buf export that, like the driver, refuses a range off the host page size), and
//! the flush of RDMA writes (`cuFlushGPUDirectRDMAWrites`), which it does where its modelled device
//! attributes say a device would need it: by default ordering none (0) and the host flush
//! supported, so every test that lands RDMA writes also goes through the flush;
//! `MESHRUN_GPU_STANDIN_RDMA_ORDERING` and `MESHRUN_GPU_STANDIN_FLUSH_OPTIONS` set the two
//! attributes; `MESHRUN_GPU_STANDIN_IPC=0` makes it refuse to share memory with other
//! processes; `MESHRUN_GPU_STANDIN_SLOW_COPY=A-B:F` slows the copies between two ranks
//! (`slow.rs`). [`check_journal`] says whether a journal keeps the rules. Stand-ins made by
//! `meshrun` keep a journal only with `MESHRUN_GPU_STANDIN_LOG` set, and then write a summary of it
//! when dropped, for the end-to-end tests: `1` prints it on stderr, an absolute directory gets
//! one file per process.
//!
//! Its device buffers live in shared memory (`shm.rs`), so ranks on this machine share them as
//! CUDA IPC shares device memory between processes ([`Gpu::export_peer`], [`Gpu::open_peer`]).

use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use super::peer::PeerHandle;
use super::{At, BufId, Gpu, GpuDirectProbe, GpuError, GpuInfo, RdmaFlush, Staging};
use crate::buffers::HostBuffer;
use crate::dtype::{DataType, RedOp};
use crate::reduce;

/// How many "GPUs" the stand-in pretends a node has.
pub const VISIBLE: usize = 8;

mod shm;
mod slow;
use shm::ShmBuf;

/// A stand-in buffer: shared, so a registration with the NIC keeps it alive after `free`.
type Shared = Arc<Mutex<ShmBuf>>;

fn lock(b: &Shared) -> MutexGuard<'_, ShmBuf> {
    b.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One modelled device call, in the order the stand-in saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `cuMemAlloc` + zeroing, bytes asked for.
    Alloc(usize),
    /// `cuMemFree`.
    Free,
    /// `cuMemHostAlloc` of pinned staging, bytes.
    HostStaging(usize),
    /// Bytes copied into the device at a place.
    Upload(At, usize),
    /// Bytes copied out of the device from a place.
    Download(At, usize),
    Copy(usize),
    /// A reduction kernel `dst = a op b` over this many bytes, waited for.
    Reduce {
        dst: At,
        a: At,
        b: At,
        bytes: usize,
    },
    /// A reduction started and not waited for (`reduce_start`): `dst = a op b`, bytes. The
    /// stand-in computes it only when it is waited for, the latest a GPU could run it, so a call
    /// in between that overwrote an operand or read `dst` gives a wrong result.
    ReduceStart {
        dst: At,
        a: At,
        b: At,
        bytes: usize,
    },
    /// The started reduction waited for (and computed), bytes.
    ReduceDone(usize),
    /// The divide kernel of avg.
    Finalize(usize),
    /// The transport said RDMA writes into device memory completed.
    RdmaLanded,
    /// `cuFlushGPUDirectRDMAWrites`.
    Flush,
    /// `cuDeviceGetAttribute` of the four GPUDirect attributes.
    DeviceAttributes,
    /// `cuPointerGetAttribute(IS_GPU_DIRECT_RDMA_CAPABLE)`.
    PointerAttribute,
    /// `cuMemGetHandleForAddressRange(DMA_BUF_FD)` of this many bytes.
    DmaBufExport(usize),
    /// `cuIpcGetMemHandle`: a buffer exported to ranks on this node.
    IpcExport,
    /// `cuIpcOpenMemHandle`: a peer's buffer opened.
    IpcOpen,
    /// `cuIpcCloseMemHandle`.
    IpcClose,
    /// A copy of this many bytes into a peer's opened buffer.
    PeerCopy(usize),
    /// Something outside the GPU (a test's transport) noted in order.
    Note(&'static str),
}

impl Call {
    /// Whether the call reads device memory (and so must see RDMA writes that landed before it).
    pub fn reads_device(&self) -> bool {
        matches!(
            self,
            Call::Download(..)
                | Call::Copy(_)
                | Call::PeerCopy(_)
                | Call::Reduce { .. }
                | Call::ReduceStart { .. }
                | Call::Finalize(_)
        )
    }
}

/// The calls a stand-in made, shared so a test can read them while the stand-in is in use.
pub type Journal = Arc<Mutex<Vec<Call>>>;

/// Whether `calls` keep the rules the CUDA path must keep: staging is allocated at most once per
/// run, before the first upload (`runs` runs), and, where the device needs flushing, a flush
/// comes between RDMA writes landing and the next read of device memory (and none where it does
/// not). An error says which rule and at which call.
pub fn check_journal(calls: &[Call], flush: RdmaFlush, runs: usize) -> Result<(), String> {
    let staging: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c, Call::HostStaging(_)))
        .map(|(i, _)| i)
        .collect();
    if staging.len() > 2 * runs {
        return Err(format!(
            "{} staging allocations for {runs} run(s): staging is allocated once per run (send and receive)",
            staging.len()
        ));
    }
    if let (Some(&last), Some(first_upload)) =
        (staging.last(), calls.iter().position(|c| matches!(c, Call::Upload(..))))
    {
        if runs == 1 && last > first_upload {
            return Err(format!(
                "staging allocated at call {last}, after the first upload (call {first_upload})"
            ));
        }
    }
    let mut pending: Option<usize> = None;
    for (i, c) in calls.iter().enumerate() {
        match c {
            Call::RdmaLanded => pending = pending.or(Some(i)),
            Call::Flush => {
                if flush != RdmaFlush::Flush {
                    return Err(format!("call {i}: a flush on a device that does not need one"));
                }
                if pending.take().is_none() {
                    return Err(format!("call {i}: a flush with no RDMA writes to flush"));
                }
            }
            c if c.reads_device() => {
                if let (Some(at), RdmaFlush::Flush) = (pending, flush) {
                    return Err(format!(
                        "call {i} ({c:?}) reads device memory that RDMA writes landed in at call {at} without a flush"
                    ));
                }
                pending = None;
            }
            _ => {}
        }
    }
    Ok(())
}

/// A short summary of a journal, for `MESHRUN_GPU_STANDIN_LOG=1`.
pub fn summary(calls: &[Call], flush: RdmaFlush) -> String {
    let count = |f: &dyn Fn(&Call) -> bool| calls.iter().filter(|c| f(c)).count();
    let staging: Vec<String> = calls
        .iter()
        .filter_map(|c| match c {
            Call::HostStaging(n) => Some(n.to_string()),
            _ => None,
        })
        .collect();
    format!(
        "host_staging={} staging_bytes={} alloc={} free={} upload={} download={} copy={} reduce={} finalize={} \
         ipc_export={} ipc_open={} peer_copy={} rdma_landed={} flush={} probe_exports={} rules={}",
        staging.len(),
        if staging.is_empty() {
            "-".into()
        } else {
            staging.join(",")
        },
        count(&|c| matches!(c, Call::Alloc(_))),
        count(&|c| matches!(c, Call::Free)),
        count(&|c| matches!(c, Call::Upload(..))),
        count(&|c| matches!(c, Call::Download(..))),
        count(&|c| matches!(c, Call::Copy(_))),
        count(&|c| matches!(c, Call::Reduce { .. } | Call::ReduceStart { .. })),
        count(&|c| matches!(c, Call::Finalize(_))),
        count(&|c| matches!(c, Call::IpcExport)),
        count(&|c| matches!(c, Call::IpcOpen)),
        count(&|c| matches!(c, Call::PeerCopy(_))),
        count(&|c| matches!(c, Call::RdmaLanded)),
        count(&|c| matches!(c, Call::Flush)),
        count(&|c| matches!(c, Call::DmaBufExport(_))),
        match check_journal(calls, flush, 1) {
            Ok(()) => "kept".to_string(),
            Err(e) => format!("BROKEN: {e}"),
        }
    )
}

pub struct HostStandIn {
    info: GpuInfo,
    bufs: Vec<Option<Shared>>,
    /// The buffers that are peers' memory, opened ([`Gpu::open_peer`]).
    opened: Vec<BufId>,
    journal: Journal,
    /// Modelled `..._GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS` and `..._WRITES_ORDERING`.
    flush_options: i32,
    writes_ordering: i32,
    /// RDMA writes landed and not yet flushed.
    landed: bool,
    /// Where to write the journal's summary when dropped (and keep the journal at all: without
    /// it, a long run's journal would only grow).
    log: Option<JournalSink>,
    record: bool,
    /// Whether it shares memory with other processes (`MESHRUN_GPU_STANDIN_IPC=0`: not).
    ipc: bool,
    /// The reduction started and not yet waited for.
    started: Option<Started>,
}

/// A started reduction, computed when waited for: its operands and result as the buffers they
/// are in (shared, so a `free` meanwhile does not lose them).
struct Started {
    dt: DataType,
    op: RedOp,
    dst: (Shared, Range<usize>),
    a: (Shared, Range<usize>),
    b: (Shared, Range<usize>),
}

/// Where a stand-in's journal summary goes (`MESHRUN_GPU_STANDIN_LOG`): `1` for stderr, in one
/// write so that ranks sharing mpirun's stderr do not split each other's lines; an absolute
/// directory for a file of its own per process (`standin-PID.log`, written whole and renamed into
/// place), which a test reads without depending on how mpirun forwards several ranks' output.
#[derive(Debug, Clone)]
enum JournalSink {
    Stderr,
    Dir(std::path::PathBuf),
}

impl JournalSink {
    fn from_env(v: std::ffi::OsString) -> Option<JournalSink> {
        let p = std::path::PathBuf::from(&v);
        if v == "1" {
            Some(JournalSink::Stderr)
        } else if p.is_absolute() {
            Some(JournalSink::Dir(p))
        } else {
            None
        }
    }

    fn write(&self, line: &str) {
        use std::io::Write;
        match self {
            JournalSink::Stderr => {
                let _ = std::io::stderr().lock().write_all(line.as_bytes());
            }
            JournalSink::Dir(d) => {
                let pid = std::process::id();
                let (tmp, done) = (
                    d.join(format!(".standin-{pid}.tmp")),
                    d.join(format!("standin-{pid}.log")),
                );
                if let Err(e) = std::fs::write(&tmp, line).and_then(|()| std::fs::rename(&tmp, &done)) {
                    let _ = std::io::stderr().lock().write_all(
                        format!(
                            "meshrun stand-in: cannot write its journal to {}: {e}\n{line}",
                            done.display()
                        )
                        .as_bytes(),
                    );
                }
            }
        }
    }
}

impl HostStandIn {
    /// A stand-in GPU whose modelled device needs RDMA writes flushed (ordering none, host flush
    /// supported).
    pub fn new(ordinal: usize) -> HostStandIn {
        HostStandIn::with_attributes(ordinal, super::FLUSH_OPTION_HOST, 0)
    }

    /// A stand-in whose modelled device reports these two GPUDirect attributes.
    pub fn with_attributes(ordinal: usize, flush_options: i32, writes_ordering: i32) -> HostStandIn {
        HostStandIn {
            info: GpuInfo {
                ordinal,
                name: "host stand-in for a GPU (MESHRUN_GPU_STANDIN, tests only)".into(),
                pci_bus_id: "host".into(),
                stand_in: true,
            },
            bufs: Vec::new(),
            opened: Vec::new(),
            journal: Journal::default(),
            flush_options,
            writes_ordering,
            landed: false,
            log: None,
            record: true,
            ipc: true,
            started: None,
        }
    }

    /// As [`HostStandIn::new`], with `MESHRUN_GPU_STANDIN_FLUSH_OPTIONS`,
    /// `MESHRUN_GPU_STANDIN_RDMA_ORDERING` and `MESHRUN_GPU_STANDIN_LOG` from the environment.
    pub fn from_env(ordinal: usize) -> HostStandIn {
        let num = |k: &str, default: i32| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
        let mut g = HostStandIn::with_attributes(
            ordinal,
            num("MESHRUN_GPU_STANDIN_FLUSH_OPTIONS", super::FLUSH_OPTION_HOST),
            num("MESHRUN_GPU_STANDIN_RDMA_ORDERING", 0),
        );
        g.log = std::env::var_os("MESHRUN_GPU_STANDIN_LOG").and_then(JournalSink::from_env);
        g.record = g.log.is_some();
        g.ipc = std::env::var("MESHRUN_GPU_STANDIN_IPC").map_or(true, |v| v != "0");
        g
    }

    /// The calls made so far (shared: it keeps filling while the stand-in is used).
    pub fn journal(&self) -> Journal {
        self.journal.clone()
    }

    /// What reading RDMA-written memory needs on the modelled device.
    pub fn flush_rule(&self) -> RdmaFlush {
        RdmaFlush::from_attributes(self.flush_options, self.writes_ordering)
    }

    fn note(&self, c: Call) {
        if self.record {
            self.journal.lock().unwrap_or_else(|p| p.into_inner()).push(c);
        }
    }

    /// Before a call that reads device memory: flush landed RDMA writes where the device needs it.
    fn settle(&mut self) {
        if std::mem::take(&mut self.landed) && self.flush_rule() == RdmaFlush::Flush {
            self.note(Call::Flush);
        }
    }

    /// The GPUDirect probe, modelled: the device attributes, then a probe buffer (allocated as
    /// the CUDA path allocates it), its pointer attribute and a dma-buf export of it, then free.
    pub fn probe(&mut self) -> GpuDirectProbe {
        let page = super::host_page_size();
        self.note(Call::DeviceAttributes);
        let export = match self.alloc(super::PROBE_BYTES) {
            Ok(b) => {
                self.note(Call::PointerAttribute);
                let r = self.export(b, super::PROBE_BYTES, page);
                self.free(b);
                r
            }
            Err(e) => Err(e.to_string()),
        };
        GpuDirectProbe {
            gpu: self.info.clone(),
            rdma_supported: Ok(true),
            dmabuf_supported: Ok(true),
            flush_options: Ok(self.flush_options),
            writes_ordering: Ok(self.writes_ordering),
            buffer_capable: Ok(true),
            pool_buffer_capable: None,
            dmabuf_export: export,
            page_size: page,
            flush: self.flush_rule(),
        }
    }

    /// A modelled dma-buf export of `size` bytes of `buf`: refused, as the driver refuses it, when
    /// the start or the size is off the host page size.
    fn export(&mut self, buf: BufId, size: usize, page: usize) -> Result<usize, String> {
        self.note(Call::DmaBufExport(size));
        let (b, _) = self
            .range(At::new(buf, 0), size, "dma-buf export past the end")
            .map_err(|e| e.to_string())?;
        let addr = lock(&b).as_slice().as_ptr() as usize;
        if !addr.is_multiple_of(page) || !size.is_multiple_of(page) {
            return Err(format!(
                "CUDA_ERROR_INVALID_VALUE (stand-in: address {addr:#x} or size {size} not a multiple of the {page}-byte host page)"
            ));
        }
        Ok(size)
    }

    /// The buffer of `at` and the byte range `len` bytes from it, checked.
    fn range(&self, at: At, len: usize, what: &'static str) -> Result<(Shared, Range<usize>), GpuError> {
        let b = self.bufs.get(at.buf).and_then(|b| b.as_ref());
        let r = at.off..at.off.saturating_add(len);
        let blen = b.map_or(0, |b| lock(b).len());
        match b {
            Some(b) if r.end <= blen => Ok((b.clone(), r)),
            _ => Err(GpuError::OutOfBounds {
                buf: at.buf,
                what,
                range: r,
                len: blen,
            }),
        }
    }

    fn failed(&self, call: &'static str, e: impl ToString) -> GpuError {
        GpuError::Call {
            ordinal: self.info.ordinal,
            name: self.info.name.clone(),
            call,
            error: e.to_string(),
            hint: String::new(),
        }
    }
}

/// A stand-in buffer handed to a transport for registration (host memory registered in place).
struct StandInNicMemory(Shared);

// SAFETY: the range described is the buffer `self.0` owns, whose heap memory never moves and
// lives as long as this object.
unsafe impl ranks::NicMemory for StandInNicMemory {
    fn len(&self) -> usize {
        lock(&self.0).len()
    }
    fn memory(&self) -> ranks::Memory {
        let mut b = lock(&self.0);
        ranks::Memory::Host {
            addr: b.as_mut_slice().as_mut_ptr() as u64,
            len: b.len(),
        }
    }
}

impl Gpu for HostStandIn {
    fn info(&self) -> &GpuInfo {
        &self.info
    }
    fn alloc(&mut self, len: usize) -> Result<BufId, GpuError> {
        self.note(Call::Alloc(len));
        // Page-aligned shared memory, as device buffers are placed on host-page boundaries and
        // can be shared with ranks on this node.
        let b = ShmBuf::new(len).map_err(|e| self.failed("cuMemAlloc", e))?;
        self.bufs.push(Some(Arc::new(Mutex::new(b))));
        Ok(self.bufs.len() - 1)
    }
    fn free(&mut self, buf: BufId) {
        // As the CUDA path: a started reduction is waited for before memory goes.
        let _ = self.reduce_wait();
        if let Some(b) = self.bufs.get_mut(buf) {
            if b.take().is_some() {
                let peer = self.opened.contains(&buf);
                self.note(if peer { Call::IpcClose } else { Call::Free });
            }
        }
    }
    fn host_staging(&mut self, len: usize) -> Result<Box<dyn Staging>, GpuError> {
        self.note(Call::HostStaging(len));
        Ok(Box::new(HostBuffer::new(len)))
    }
    fn upload(&mut self, dst: At, src: &[u8]) -> Result<(), GpuError> {
        let (b, r) = self.range(dst, src.len(), "upload past the end")?;
        self.note(Call::Upload(dst, src.len()));
        lock(&b).as_mut_slice()[r].copy_from_slice(src);
        Ok(())
    }
    fn download(&mut self, src: At, dst: &mut [u8]) -> Result<(), GpuError> {
        self.settle();
        let (b, r) = self.range(src, dst.len(), "download past the end")?;
        self.note(Call::Download(src, dst.len()));
        dst.copy_from_slice(&lock(&b).as_slice()[r]);
        Ok(())
    }
    fn copy(&mut self, dst: At, src: At, len: usize) -> Result<(), GpuError> {
        self.settle();
        self.note(match self.opened.contains(&dst.buf) {
            true => Call::PeerCopy(len),
            false => Call::Copy(len),
        });
        let (d, dr) = self.range(dst, len, "copy destination past the end")?;
        let (s, sr) = self.range(src, len, "copy source past the end")?;
        shm::copy(&d, dr, &s, sr);
        Ok(())
    }
    fn reduce(&mut self, dt: DataType, op: RedOp, dst: At, a: At, b: At, bytes: usize) -> Result<(), GpuError> {
        self.reduce_wait()?;
        self.settle();
        self.note(Call::Reduce { dst, a, b, bytes });
        // Operands are copied out first, so any aliasing between dst, a and b is fine.
        let (ab, ar) = self.range(a, bytes, "reduce operand past the end")?;
        let av = lock(&ab).as_slice()[ar].to_vec();
        let (bb, br) = self.range(b, bytes, "reduce operand past the end")?;
        let bv = lock(&bb).as_slice()[br].to_vec();
        let (d, dr) = self.range(dst, bytes, "reduce result past the end")?;
        let r = reduce::reduce_from(dt, op, &mut lock(&d).as_mut_slice()[dr], &av, &bv);
        r.map_err(|e| self.failed("reduce", e))
    }
    fn reduce_start(&mut self, dt: DataType, op: RedOp, dst: At, a: At, b: At, bytes: usize) -> Result<(), GpuError> {
        self.reduce_wait()?;
        self.settle();
        self.note(Call::ReduceStart { dst, a, b, bytes });
        self.started = Some(Started {
            dt,
            op,
            a: self.range(a, bytes, "reduce operand past the end")?,
            b: self.range(b, bytes, "reduce operand past the end")?,
            dst: self.range(dst, bytes, "reduce result past the end")?,
        });
        Ok(())
    }
    fn reduce_wait(&mut self) -> Result<(), GpuError> {
        let Some(Started { dt, op, dst, a, b }) = self.started.take() else {
            return Ok(());
        };
        self.note(Call::ReduceDone(dst.1.len()));
        let av = lock(&a.0).as_slice()[a.1].to_vec();
        let bv = lock(&b.0).as_slice()[b.1].to_vec();
        let r = reduce::reduce_from(dt, op, &mut lock(&dst.0).as_mut_slice()[dst.1], &av, &bv);
        r.map_err(|e| self.failed("reduce", e))
    }
    fn finalize(
        &mut self,
        dt: DataType,
        op: RedOp,
        buf: BufId,
        range: Range<usize>,
        nranks: usize,
    ) -> Result<(), GpuError> {
        // As on a GPU: only avg launches a kernel, and only over a non-empty range.
        if op != RedOp::Avg || range.is_empty() {
            return Ok(());
        }
        self.settle();
        self.note(Call::Finalize(range.len()));
        let (d, r) = self.range(At::new(buf, range.start), range.len(), "finalize past the end")?;
        let r = reduce::finalize(dt, op, &mut lock(&d).as_mut_slice()[r], nranks);
        r.map_err(|e| self.failed("finalize", e))
    }
    fn nic_memory(&self, buf: BufId) -> Result<Box<dyn ranks::NicMemory>, GpuError> {
        let (b, _) = self.range(At::new(buf, 0), 0, "registering a freed buffer")?;
        Ok(Box::new(StandInNicMemory(b)))
    }
    fn rdma_writes_landed(&mut self) {
        self.note(Call::RdmaLanded);
        self.landed = true;
    }
    fn export_peer(&mut self, buf: BufId) -> Result<PeerHandle, GpuError> {
        let (b, _) = self.range(At::new(buf, 0), 0, "exporting a freed buffer")?;
        self.note(Call::IpcExport);
        if !self.ipc {
            return Err(self.failed(
                "cuIpcGetMemHandle",
                "CUDA_ERROR_NOT_SUPPORTED (MESHRUN_GPU_STANDIN_IPC=0)",
            ));
        }
        let b = lock(&b);
        let handle = b.handle().map_err(|e| self.failed("cuIpcGetMemHandle", e))?;
        let len = b.len() as u64;
        Ok(PeerHandle { handle, offset: 0, len })
    }
    fn open_peer(&mut self, h: &PeerHandle) -> Result<BufId, GpuError> {
        self.note(Call::IpcOpen);
        let b = ShmBuf::open(&h.handle, h.len as usize).map_err(|e| self.failed("cuIpcOpenMemHandle", e))?;
        self.bufs.push(Some(Arc::new(Mutex::new(b))));
        self.opened.push(self.bufs.len() - 1);
        Ok(self.bufs.len() - 1)
    }
}

impl Drop for HostStandIn {
    fn drop(&mut self) {
        if let Some(sink) = &self.log {
            let calls = self.journal.lock().unwrap_or_else(|p| p.into_inner());
            let line = format!(
                "meshrun stand-in GPU {}: {}\n",
                self.info.ordinal,
                summary(&calls, self.flush_rule())
            );
            sink.write(&line);
        }
    }
}

#[cfg(test)]
mod tests;
