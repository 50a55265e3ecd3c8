//! GPU buffers for the collectives: which GPU a rank uses, the device-memory interface the staged
//! algorithms run on, and its two implementations:
//! - [`cuda::CudaGpu`]: real device memory through `cudarc` (driver API, loaded at run time, so the
//!   binary starts on nodes without CUDA), with the reduction kernels of `reduce.cu` loaded as PTX;
//! - [`standin::HostStandIn`]: the same interface over host memory and the CPU kernels, chosen only
//!   by the test-only `MESHRUN_GPU_STANDIN=host`, so the staging data flow (separate device buffers,
//!   uploads, downloads, reductions between device buffers) is tested on machines without a GPU.
//!   It names itself in every report line, so it can never pass for a GPU. It models each call
//!   the CUDA path makes (device allocations, pinned staging, the GPUDirect probe, the flush of
//!   RDMA writes) in a journal, so tests here check the order and count of those calls.
//!
//! Memory, as GPUDirect RDMA needs it: device buffers come from plain `cuMemAlloc` (not the
//! stream-ordered pool, whose memory GPUDirect RDMA and dma-buf export do not support), placed on
//! host-page boundaries (what `cuMemGetHandleForAddressRange` asks of a dma-buf range); host
//! staging is pinned without write-combining (the CPU reads it: TCP `writev`, the copy into the
//! verbs send region) and allocated once per run at the largest size; RDMA writes into device
//! memory are flushed before the device reads them where it says that is needed ([`RdmaFlush`]).

pub mod cuda;
pub mod kernels;
pub mod peer;
pub mod standin;

use std::ops::Range;

use crate::dtype::{DataType, RedOp};

/// A device buffer, as the [`Gpu`] that allocated it knows it.
pub type BufId = usize;

/// A place in a device buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    pub buf: BufId,
    pub off: usize,
}

impl At {
    pub fn new(buf: BufId, off: usize) -> At {
        At { buf, off }
    }
}

/// What a GPU is, for the `# Using devices` lines and JSON.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuInfo {
    /// CUDA ordinal (among the GPUs that `CUDA_VISIBLE_DEVICES` leaves visible).
    pub ordinal: usize,
    /// `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// `0000:1b:00.0`.
    pub pci_bus_id: String,
    /// True for the host stand-in used by tests.
    pub stand_in: bool,
}

impl GpuInfo {
    /// The bus id as nccl-tests prints it in `# Using devices`: `0000:1b:00`.
    pub fn short_bus_id(&self) -> &str {
        self.pci_bus_id.rsplit_once('.').map_or(&self.pci_bus_id, |(a, _)| a)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "a GPU buffer (-g/--gpu, --use-cuda) needs the NVIDIA driver, but libcuda.so could not be \
         loaded on {host}: install the NVIDIA driver (check with nvidia-smi), or run without -g or \
         --use-cuda to test with host buffers"
    )]
    NoDriver { host: String },
    #[error("GPU selection on {host}, local rank {local_rank}: {why}")]
    Selection {
        host: String,
        local_rank: usize,
        why: String,
    },
    #[error("GPU {ordinal} ({name}): {call} failed: {error}{hint}")]
    Call {
        ordinal: usize,
        name: String,
        call: &'static str,
        error: String,
        /// Advice that starts with "; " (or is empty).
        hint: String,
    },
    #[error(
        "GPU {ordinal} ({name}): {call} did not finish within {waited:.1?}: the GPU may be hung or a \
         kernel faulting; check nvidia-smi and the kernel log (Xid errors), or raise --timeout"
    )]
    Stalled {
        ordinal: usize,
        name: String,
        call: &'static str,
        waited: std::time::Duration,
    },
    #[error("GPU buffer {buf}: {what} (bytes {range:?} of a {len}-byte buffer)")]
    OutOfBounds {
        buf: BufId,
        what: &'static str,
        range: Range<usize>,
        len: usize,
    },
}

/// `CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST`: bit of `..._GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS`
/// saying `cuFlushGPUDirectRDMAWrites` works on the device.
pub const FLUSH_OPTION_HOST: i32 = 1;
/// `CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_MEMOPS`: the stream memory-op form of the flush.
pub const FLUSH_OPTION_MEMOPS: i32 = 2;
/// `CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER`: the device itself consumes RDMA writes consistently.
pub const ORDERING_OWNER: i32 = 100;
/// `CU_GPU_DIRECT_RDMA_WRITES_ORDERING_ALL_DEVICES`: every device in the system does.
pub const ORDERING_ALL_DEVICES: i32 = 200;

/// What a device needs before its kernels read memory that an RDMA write (from a NIC) placed
/// there, from `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING` and `..._FLUSH_WRITES_OPTIONS`.
/// The CUDA docs: `cuFlushGPUDirectRDMAWrites(target, scope)` blocks until RDMA writes to the
/// target context are visible to `scope`; where the scope equals or lies within the ordering the
/// device reports (smaller values, smaller scopes), it is a no-op and may be left out. meshrun's
/// kernels run in the context that owns the memory, so the scope is `TO_OWNER` (100): a flush is
/// needed when the ordering is below `OWNER`, and possible when the options have the `HOST` bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RdmaFlush {
    /// Ordering `OWNER` or `ALL_DEVICES`: the device's kernels see completed RDMA writes.
    NotNeeded,
    /// Ordering below `OWNER`, host flush supported: `cuFlushGPUDirectRDMAWrites` before reading.
    Flush,
    /// Ordering below `OWNER` and no host flush: a kernel may read stale data after an RDMA write.
    Unavailable,
}

impl RdmaFlush {
    /// The rule for the two attributes (an attribute the driver could not report counts as 0).
    pub fn from_attributes(flush_options: i32, writes_ordering: i32) -> RdmaFlush {
        if writes_ordering >= ORDERING_OWNER {
            RdmaFlush::NotNeeded
        } else if flush_options & FLUSH_OPTION_HOST != 0 {
            RdmaFlush::Flush
        } else {
            RdmaFlush::Unavailable
        }
    }
}

/// The host page size: dma-buf ranges (`cuMemGetHandleForAddressRange`) must start and end on it.
pub fn host_page_size() -> usize {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE) {
        Ok(Some(p)) if p > 0 => p as usize,
        _ => crate::buffers::PAGE,
    }
}

/// `x` rounded up to a multiple of `to` (a power of two or any non-zero value).
pub fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// Bytes of every probe buffer: one 2 MiB GPU page, a whole number of host pages everywhere.
pub const PROBE_BYTES: usize = 2 << 20;

/// What one GPU says about GPUDirect RDMA, found without a NIC: its device attributes, and what
/// the driver says of a real buffer (whether it is GPUDirect-capable, whether it exports as a
/// dma-buf). `meshrun devices` prints one [`GpuDirectProbe::line`] per GPU.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GpuDirectProbe {
    pub gpu: GpuInfo,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED` (the nv-p2p path nvidia-peermem uses).
    pub rdma_supported: Result<bool, String>,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
    pub dmabuf_supported: Result<bool, String>,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS` (bits [`FLUSH_OPTION_HOST`], ...).
    pub flush_options: Result<i32, String>,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING` (0, [`ORDERING_OWNER`], ...).
    pub writes_ordering: Result<i32, String>,
    /// `CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE` of a buffer allocated as meshrun
    /// allocates them (`cuMemAlloc`).
    pub buffer_capable: Result<bool, String>,
    /// The same of a buffer from the stream-ordered pool (`cuMemAllocAsync`), where the device has
    /// pools: what cudarc's `alloc_zeros` would have used.
    pub pool_buffer_capable: Option<Result<bool, String>>,
    /// A dma-buf export (`cuMemGetHandleForAddressRange`, `DMA_BUF_FD`) of [`PROBE_BYTES`] of a
    /// real buffer at a host-page-aligned address: the bytes exported.
    pub dmabuf_export: Result<usize, String>,
    /// The host page size the export was aligned to.
    pub page_size: usize,
    /// What reading RDMA-written memory needs, from the two attributes.
    pub flush: RdmaFlush,
}

impl GpuDirectProbe {
    /// Why a NIC cannot use this GPU's buffers for GPUDirect RDMA, if it cannot: the buffer is
    /// not GPUDirect-capable, neither dma-buf export nor the nv-p2p path (nvidia-peermem) is
    /// there, or the device's kernels may not see what RDMA writes placed and it cannot flush.
    pub fn unusable(&self) -> Option<&'static str> {
        if self.buffer_capable != Ok(true) {
            Some("a cuMemAlloc buffer is not GPUDirect-capable")
        } else if self.dmabuf_export.is_err() && self.rdma_supported != Ok(true) {
            Some("no dma-buf export and no GPUDirect RDMA (nv-p2p) support")
        } else if self.flush == RdmaFlush::Unavailable {
            Some("RDMA writes are not ordered for this GPU's kernels and it cannot flush them")
        } else {
            None
        }
    }

    pub fn usable(&self) -> bool {
        self.unusable().is_none()
    }

    /// One line, the verdict first, then `key=value` facts:
    /// `# CUDA GPU 0 NVIDIA H200 [0000:1b:00.0]: GPUDirect RDMA usable; rdma_supported=yes ...`.
    pub fn line(&self) -> String {
        fn yes(r: &Result<bool, String>) -> String {
            match r {
                Ok(true) => "yes".into(),
                Ok(false) => "no".into(),
                Err(e) => format!("unknown({e})"),
            }
        }
        let pool = match &self.pool_buffer_capable {
            Some(r) => format!(" pool_buffer_capable={}", yes(r)),
            None => String::new(),
        };
        let export = match &self.dmabuf_export {
            Ok(n) => format!("ok({n} B at {}-B alignment)", self.page_size),
            Err(e) => format!("failed({e})"),
        };
        let opts = match &self.flush_options {
            Ok(o) => {
                let mut v = Vec::new();
                if o & FLUSH_OPTION_HOST != 0 {
                    v.push("host");
                }
                if o & FLUSH_OPTION_MEMOPS != 0 {
                    v.push("memops");
                }
                if v.is_empty() {
                    "none".to_string()
                } else {
                    v.join("+")
                }
            }
            Err(e) => format!("unknown({e})"),
        };
        let order = match &self.writes_ordering {
            Ok(o) if *o >= ORDERING_ALL_DEVICES => format!("all-devices({o})"),
            Ok(o) if *o >= ORDERING_OWNER => format!("owner({o})"),
            Ok(o) => format!("none({o})"),
            Err(e) => format!("unknown({e})"),
        };
        let verdict = match self.unusable() {
            None => "GPUDirect RDMA usable".to_string(),
            Some(why) => format!("GPUDirect RDMA NOT usable: {why}"),
        };
        let flush = match self.flush {
            RdmaFlush::NotNeeded => "not-needed",
            RdmaFlush::Flush => "before-reads",
            RdmaFlush::Unavailable => "unavailable",
        };
        format!(
            "# CUDA GPU {} {} [{}]: {verdict}; rdma_supported={} buffer_capable={}{pool} dmabuf_supported={} \
             dmabuf_export={export} flush_options={opts} writes_ordering={order} flush={flush}",
            self.gpu.ordinal,
            self.gpu.name,
            self.gpu.pci_bus_id,
            yes(&self.rdma_supported),
            yes(&self.buffer_capable),
            yes(&self.dmabuf_supported),
        )
    }
}

/// Probe every visible GPU for GPUDirect RDMA (no NIC needed): the host stand-in's modelled GPUs
/// under `MESHRUN_GPU_STANDIN=host` (tests), else the real ones through CUDA.
pub fn probe_all(host: &str) -> Result<Vec<GpuDirectProbe>, GpuError> {
    match std::env::var("MESHRUN_GPU_STANDIN").as_deref() {
        Ok("host") => Ok((0..standin::VISIBLE)
            .map(|o| standin::HostStandIn::from_env(o).probe())
            .collect()),
        Ok(other) => Err(GpuError::Selection {
            host: host.to_string(),
            local_rank: 0,
            why: format!("MESHRUN_GPU_STANDIN={other:?} is not known; the only stand-in is \"host\" (tests only)"),
        }),
        Err(_) => cuda::probe_all(host),
    }
}

/// Device memory and the operations the staged collectives need. Every call but
/// [`Gpu::reduce_start`] completes before it returns (copies are synchronous with respect to the
/// host), so host staging buffers can be reused at once.
pub trait Gpu {
    fn info(&self) -> &GpuInfo;
    /// A zeroed device buffer of `len` bytes.
    fn alloc(&mut self, len: usize) -> Result<BufId, GpuError>;
    fn free(&mut self, buf: BufId);
    /// A host buffer for staging: pinned (page-locked) memory where the device has it, not
    /// write-combined (the CPU reads it). Runs allocate theirs once, at the largest size.
    fn host_staging(&mut self, len: usize) -> Result<Box<dyn Staging>, GpuError>;
    /// Copy `src` into the device at `dst`.
    fn upload(&mut self, dst: At, src: &[u8]) -> Result<(), GpuError>;
    /// Copy `dst.len()` bytes from the device at `src` into `dst`.
    fn download(&mut self, src: At, dst: &mut [u8]) -> Result<(), GpuError>;
    /// Copy `len` bytes from `src` to `dst` on the device (the ranges may overlap only if equal).
    fn copy(&mut self, dst: At, src: At, len: usize) -> Result<(), GpuError>;
    /// A buffer as memory a transport can register in place (GPUDirect RDMA); it keeps the buffer
    /// allocated while the transport holds it.
    fn nic_memory(&self, buf: BufId) -> Result<Box<dyn ranks::NicMemory>, GpuError>;
    /// `dst[i] = a[i] op b[i]` over `bytes` bytes of `dt` elements, on the device. `dst` may be `a`.
    fn reduce(&mut self, dt: DataType, op: RedOp, dst: At, a: At, b: At, bytes: usize) -> Result<(), GpuError>;
    /// [`Gpu::reduce`], started and not waited for: the one exception to "every call completes
    /// before it returns", so a ring moves its next slice while this one is reduced. The kernel
    /// runs on a stream of its own, beside the stream of the copies (uploads, downloads), and
    /// reads what earlier calls wrote (they completed). One at a time: a second start waits for
    /// the first. Until [`Gpu::reduce_wait`] returns, the caller reads and writes none of `dst`,
    /// `a` and `b` with other calls, nor lets RDMA writes land there. The default runs it at once.
    fn reduce_start(&mut self, dt: DataType, op: RedOp, dst: At, a: At, b: At, bytes: usize) -> Result<(), GpuError> {
        self.reduce(dt, op, dst, a, b, bytes)
    }
    /// Wait, at most the call limit, for the reduction [`Gpu::reduce_start`] started (nothing when
    /// none is running); its failure, if it failed, is reported here.
    fn reduce_wait(&mut self) -> Result<(), GpuError> {
        Ok(())
    }
    /// The last step of `avg`: divide `range` of `buf` by `nranks` (other ops: nothing).
    fn finalize(
        &mut self,
        dt: DataType,
        op: RedOp,
        buf: BufId,
        range: Range<usize>,
        nranks: usize,
    ) -> Result<(), GpuError>;
    /// RDMA writes into this GPU's memory have completed (the transport has seen their
    /// completions). Before the next operation that reads device memory (a kernel, a copy, a
    /// download) they are made visible to it, by `cuFlushGPUDirectRDMAWrites` where the device
    /// needs that ([`RdmaFlush::Flush`]); elsewhere this costs nothing.
    fn rdma_writes_landed(&mut self);
    /// Export `buf` for the ranks on this node ([`peer`]: CUDA IPC's `cuIpcGetMemHandle`). The
    /// buffer must stay allocated while a peer may copy into it.
    fn export_peer(&mut self, buf: BufId) -> Result<peer::PeerHandle, GpuError> {
        let _ = buf;
        Err(no_peer_access(self.info(), "cuIpcGetMemHandle"))
    }
    /// Open a buffer another rank on this node exported, as a buffer of this GPU that
    /// [`Gpu::copy`] writes into (`cuIpcOpenMemHandle`); [`Gpu::free`] closes it
    /// (`cuIpcCloseMemHandle`). A handle whose buffer its rank freed is an error, not memory.
    fn open_peer(&mut self, handle: &peer::PeerHandle) -> Result<BufId, GpuError> {
        let _ = handle;
        Err(no_peer_access(self.info(), "cuIpcOpenMemHandle"))
    }
    /// How long one call may wait for the device before it is an error (default: a minute).
    fn set_call_limit(&mut self, limit: std::time::Duration) {
        let _ = limit;
    }
}

/// A device without peer-to-peer memory sharing, as its IPC calls say.
fn no_peer_access(info: &GpuInfo, call: &'static str) -> GpuError {
    GpuError::Call {
        ordinal: info.ordinal,
        name: info.name.clone(),
        call,
        error: "this device shares no memory with other processes".into(),
        hint: "; use --p2p net".into(),
    }
}

/// Poll `ready` until it says done, fails, or `limit` passes: spinning at first, then sleeping
/// 20 us between polls. `Ok(false)` from `ready` means not yet. Returns how long it waited on
/// expiry, so the caller can name the call that stalled.
pub fn wait_ready<E>(
    limit: std::time::Duration,
    mut ready: impl FnMut() -> Result<bool, E>,
) -> Result<Result<(), E>, std::time::Duration> {
    let t0 = std::time::Instant::now();
    let mut polls = 0u32;
    loop {
        match ready() {
            Ok(true) => return Ok(Ok(())),
            Ok(false) => {}
            Err(e) => return Ok(Err(e)),
        }
        let waited = t0.elapsed();
        if waited >= limit {
            return Err(waited);
        }
        polls = polls.saturating_add(1);
        if polls > 2_000 {
            std::thread::sleep(std::time::Duration::from_micros(20));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// A host staging buffer.
pub trait Staging {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl Staging for crate::buffers::HostBuffer {
    fn bytes(&self) -> &[u8] {
        self.as_slice()
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

/// How device buffers reach the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPath {
    /// `--gpu-staging`: copied through pinned host buffers around every transfer.
    Staged,
    /// GPUDirect RDMA: the NIC reads and writes the device buffers, registered as this says.
    Direct(ranks::ForeignPath),
}

impl DataPath {
    pub fn describe(self) -> &'static str {
        match self {
            DataPath::Staged => "staged through pinned host memory (--gpu-staging)",
            DataPath::Direct(p) => p.describe(),
        }
    }
}

/// Which GPU each local rank uses: `--gpu-ids` (one per local rank, or one for all), else local
/// rank modulo the number of visible GPUs (ranks share GPUs round-robin when there are more ranks
/// than GPUs, as in a test of two ranks on one GPU).
pub fn pick_ordinal(ids: Option<&[usize]>, local_rank: usize, visible: usize, host: &str) -> Result<usize, GpuError> {
    let err = |why: String| GpuError::Selection {
        host: host.to_string(),
        local_rank,
        why,
    };
    let visible_note = match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => format!(" (CUDA_VISIBLE_DEVICES={v:?})"),
        Err(_) => String::new(),
    };
    if visible == 0 {
        return Err(err(format!(
            "the driver sees no GPU{visible_note}; check nvidia-smi, or run without -g"
        )));
    }
    let ordinal = match ids {
        None | Some([]) => local_rank % visible,
        Some([one]) => *one,
        Some(list) => *list.get(local_rank).ok_or_else(|| {
            err(format!(
                "--gpu-ids lists {} GPUs but this node runs at least {} ranks; give one id per local rank, or one id for all",
                list.len(),
                local_rank + 1
            ))
        })?,
    };
    if ordinal >= visible {
        return Err(err(format!(
            "GPU {ordinal} does not exist: {visible} GPU(s) visible{visible_note}, ids 0 to {}",
            visible - 1
        )));
    }
    Ok(ordinal)
}

/// Parse `--gpu-ids 0,1,2,3`.
pub fn parse_ids(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| format!("--gpu-ids {s:?}: {x:?} is not a GPU ordinal; expected a list like 0,1,2,3"))
        })
        .collect()
}

/// Open this rank's GPU: the host stand-in under `MESHRUN_GPU_STANDIN=host` (tests), else CUDA.
pub fn open(ids: Option<&[usize]>, local_rank: usize, host: &str) -> Result<Box<dyn Gpu>, GpuError> {
    match std::env::var("MESHRUN_GPU_STANDIN").as_deref() {
        Ok("host") => {
            let ordinal = pick_ordinal(ids, local_rank, standin::VISIBLE, host)?;
            Ok(Box::new(standin::HostStandIn::from_env(ordinal)))
        }
        Ok(other) => Err(GpuError::Selection {
            host: host.to_string(),
            local_rank,
            why: format!("MESHRUN_GPU_STANDIN={other:?} is not known; the only stand-in is \"host\" (tests only)"),
        }),
        Err(_) => {
            let g = cuda::CudaGpu::open(ids, local_rank, host)?;
            Ok(Box::new(g))
        }
    }
}

#[cfg(test)]
mod tests;
