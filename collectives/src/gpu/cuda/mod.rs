//! Real GPU memory through `cudarc` (CUDA driver API, loaded at run time). Every CUDA failure
//! becomes a [`GpuError::Call`] naming the GPU, the driver call and, where one is known, the fix.
//!
//! Memory is allocated as GPUDirect RDMA needs it (see `memory::DevMem` and `Pinned` below), and
//! this module is the only place with `unsafe` for CUDA: each call has its `// SAFETY:` line.
//! `context.rs` opens the driver and a GPU, `memory.rs` places device memory, `probe.rs` asks what
//! GPUDirect RDMA a GPU offers, `nic.rs` registers GPU memory with a NIC, `ipc.rs` shares device
//! buffers with the ranks of this node (CUDA IPC).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::result;
use cudarc::driver::sys::{self, CUdevice_attribute, CUresult};
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream, DriverError, LaunchConfig};
use cudarc::driver::{PinnedHostSlice, PushKernelArg};
use cudarc::nvrtc::Ptx;

use super::kernels;
use super::{
    host_page_size, pick_ordinal, round_up, At, BufId, Gpu, GpuDirectProbe, GpuError, GpuInfo, RdmaFlush, Staging,
    PROBE_BYTES,
};
use crate::dtype::{DataType, RedOp};
use ranks::NicMemory;

mod context;
mod ipc;
mod memory;
mod nic;
mod probe;

use context::{call_error, flush_rule, init, open_context};
pub use context::{driver_present, hint, ordinal_of};
use memory::{DevAlloc, DevMem};
pub use nic::GpuWindow;
use nic::{GpuNicMemory, Registrar};
pub use probe::{probe, probe_all};

pub struct CudaGpu {
    info: GpuInfo,
    ctx: Arc<CudaContext>,
    /// The copies (uploads, downloads, device copies, zeroing) and the reductions waited for.
    stream: Arc<CudaStream>,
    /// The reductions started and not waited for (`reduce_start`): a stream of their own, so a
    /// kernel runs while the copy stream moves the next slice.
    reduce_stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
    funcs: HashMap<String, CudaFunction>,
    /// Live buffers.
    bufs: Vec<Option<DevAlloc>>,
    /// Recorded after each call's work; the host polls it (a bounded wait, not cuStreamSynchronize).
    done: CudaEvent,
    /// Recorded on `reduce_stream` after a started reduction; `reducing` while it may still run.
    reduce_done: CudaEvent,
    reducing: bool,
    limit: std::time::Duration,
    /// Whether the driver exports device memory as dma-bufs, or why not.
    dmabuf: Result<(), String>,
    /// The host page size: buffers are placed on it.
    page: usize,
    /// What the device needs before it reads memory RDMA writes placed.
    flush: RdmaFlush,
    /// RDMA writes have landed since the last read of device memory.
    landed: bool,
}

impl CudaGpu {
    /// Load the driver, pick and open this rank's GPU, load the reduction kernels.
    pub fn open(ids: Option<&[usize]>, local_rank: usize, host: &str) -> Result<CudaGpu, GpuError> {
        let count = init(host)?;
        let ordinal = pick_ordinal(ids, local_rank, count, host)?;
        let (ctx, info) = open_context(ordinal)?;
        let fail = call_error;
        let stream = ctx.new_stream().map_err(|e| fail(&info, "cuStreamCreate", e))?;
        let reduce_stream = ctx.new_stream().map_err(|e| fail(&info, "cuStreamCreate", e))?;
        let module = ctx
            .load_module(Ptx::from_src(kernels::PTX))
            .map_err(|e| fail(&info, "cuModuleLoadData (reduction kernels)", e))?;
        let done = ctx.new_event(None).map_err(|e| fail(&info, "cuEventCreate", e))?;
        let reduce_done = ctx.new_event(None).map_err(|e| fail(&info, "cuEventCreate", e))?;
        let dmabuf = if ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED) == Ok(1) {
            Ok(())
        } else {
            Err(format!(
                "GPU {} ({}) cannot export dma-bufs (driver older than R515, or the proprietary kernel module \
                 without dma-buf support)",
                info.ordinal, info.name
            ))
        };
        let (_, _, flush) = flush_rule(&ctx);
        Ok(CudaGpu {
            info,
            ctx,
            stream,
            reduce_stream,
            module,
            funcs: HashMap::new(),
            bufs: Vec::new(),
            done,
            reduce_done,
            reducing: false,
            limit: std::time::Duration::from_secs(60),
            dmabuf,
            page: host_page_size(),
            flush,
            landed: false,
        })
    }

    /// Before a call that reads device memory: make RDMA writes that landed visible to this GPU,
    /// where it needs that (`cuFlushGPUDirectRDMAWrites`, blocking, to the owning context).
    fn settle(&mut self) -> Result<(), GpuError> {
        if !std::mem::take(&mut self.landed) || self.flush != RdmaFlush::Flush {
            return Ok(());
        }
        self.bind("cuCtxSetCurrent")?;
        // SAFETY: takes no pointers; the context is current (bound above) and the symbol exists
        // (`flush_rule` says Flush only then).
        let r = unsafe {
            sys::cuFlushGPUDirectRDMAWrites(
                sys::CUflushGPUDirectRDMAWritesTarget::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                sys::CUflushGPUDirectRDMAWritesScope::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER,
            )
        };
        r.result().map_err(|e| self.fail("cuFlushGPUDirectRDMAWrites", e))
    }

    fn fail(&self, call: &'static str, e: DriverError) -> GpuError {
        call_error(&self.info, call, e)
    }

    /// The device address of `at`, after checking that `len` bytes from it are inside the buffer.
    fn addr(&self, at: At, len: usize, what: &'static str) -> Result<u64, GpuError> {
        let b = self.bufs.get(at.buf).and_then(|b| b.as_ref());
        let r = at.off..at.off.saturating_add(len);
        match b {
            Some(a) if r.end <= a.len => Ok(a.mem.base + at.off as u64),
            _ => Err(GpuError::OutOfBounds {
                buf: at.buf,
                what,
                range: r,
                len: b.map_or(0, |a| a.len),
            }),
        }
    }

    fn func(&mut self, name: &str) -> Result<CudaFunction, GpuError> {
        if let Some(f) = self.funcs.get(name) {
            return Ok(f.clone());
        }
        let f = self
            .module
            .load_function(name)
            .map_err(|e| self.fail("cuModuleGetFunction", e))?;
        self.funcs.insert(name.to_string(), f.clone());
        Ok(f)
    }

    /// Wait for the stream's work, at most the call limit: a hung GPU is an error naming the
    /// call, not a rank blocked forever in cuStreamSynchronize.
    fn sync(&self, after: &'static str) -> Result<(), GpuError> {
        self.done
            .record(&self.stream)
            .map_err(|e| self.fail("cuEventRecord", e))?;
        self.wait_event(&self.done, after)
    }

    /// Wait for `event`, recorded on one of this GPU's streams, at most the call limit.
    fn wait_event(&self, event: &CudaEvent, after: &'static str) -> Result<(), GpuError> {
        let query = || {
            // SAFETY: a live event of this GPU's context, recorded by the caller.
            match unsafe { cudarc::driver::result::event::query(event.cu_event()) } {
                Ok(()) => Ok(true),
                Err(DriverError(CUresult::CUDA_ERROR_NOT_READY)) => Ok(false),
                Err(e) => Err(e),
            }
        };
        match crate::gpu::wait_ready(self.limit, query) {
            Ok(r) => r.map_err(|e| self.fail(after, e)),
            Err(waited) => Err(GpuError::Stalled {
                ordinal: self.info.ordinal,
                name: self.info.name.clone(),
                call: after,
                waited,
            }),
        }
    }

    /// Queue the reduction kernel `dst = a op b` on `stream` (after the flush RDMA writes need);
    /// false where there is nothing to reduce.
    #[allow(clippy::too_many_arguments)]
    fn launch_reduce(
        &mut self,
        stream: &Arc<CudaStream>,
        dt: DataType,
        op: RedOp,
        dst: At,
        a: At,
        b: At,
        bytes: usize,
    ) -> Result<bool, GpuError> {
        let n = (bytes / dt.size()) as u64;
        if n == 0 {
            return Ok(false);
        }
        let (d, x, y) = (
            self.addr(dst, bytes, "reduce result past the end")?,
            self.addr(a, bytes, "reduce operand past the end")?,
            self.addr(b, bytes, "reduce operand past the end")?,
        );
        let f = self.func(&kernels::reduce_name(dt, op))?;
        self.settle()?;
        let cfg = LaunchConfig {
            grid_dim: (kernels::blocks(n as usize), 1, 1),
            block_dim: (kernels::BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = stream.launch_builder(&f);
        l.arg(&d).arg(&x).arg(&y).arg(&n);
        // SAFETY: the kernel `meshrun_<op>_<type>(T *dst, const T *a, const T *b, u64 n)` reads n
        // elements at a and b and writes n at dst (dst may equal a: each element is read before it is
        // written by the same thread); all three ranges were checked above against live allocations,
        // which outlive the kernel (a started one is waited for by `free` and by drop before any
        // buffer goes), and the four arguments match its signature (three device pointers, one u64).
        unsafe { l.launch(cfg) }.map_err(|e| self.fail("cuLaunchKernel (reduce)", e))?;
        Ok(true)
    }

    /// The device address and length of a buffer, for registering it with an RDMA NIC.
    pub fn device_range(&self, buf: BufId) -> Option<(u64, usize)> {
        self.bufs.get(buf)?.as_ref().map(|a| (a.mem.base, a.len))
    }

    /// Make this GPU's context current on the calling thread (raw driver calls need it).
    fn bind(&self, call: &'static str) -> Result<(), GpuError> {
        self.ctx.bind_to_thread().map_err(|e| self.fail(call, e))
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
}

/// Pinned host memory from `cuMemHostAlloc` with `CU_MEMHOSTALLOC_PORTABLE` only: not
/// write-combined (cudarc's `alloc_pinned` asks for `WRITECOMBINED`), because the CPU reads staging
/// memory (TCP `writev`, the copy into the verbs send region), and CPU reads of write-combined
/// memory are uncached and very slow.
struct Pinned {
    mem: PinnedHostSlice<u8>,
    ptr: *mut u8,
    len: usize,
}

impl Staging for Pinned {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is the start of the `len`-byte pinned allocation owned by `self.mem`, which
        // lives as long as `self`; every copy into or out of it is synchronised before returning.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        let _ = &self.mem;
        // SAFETY: as in `bytes`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Gpu for CudaGpu {
    fn info(&self) -> &GpuInfo {
        &self.info
    }

    fn alloc(&mut self, len: usize) -> Result<BufId, GpuError> {
        let mem = DevMem::new(&self.ctx, len, self.page).map_err(|e| self.fail("cuMemAlloc", e))?;
        self.bind("cuCtxSetCurrent")?;
        // SAFETY: base..base+size lies in the allocation just made in this context (DevMem's
        // window), and the stream is this context's.
        unsafe { result::memset_d8_async(mem.base, 0, mem.size, self.stream.cu_stream()) }
            .map_err(|e| self.fail("cuMemsetD8Async", e))?;
        self.sync("cuMemsetD8Async")?;
        self.bufs.push(Some(DevAlloc {
            mem: Arc::new(mem),
            len,
        }));
        Ok(self.bufs.len() - 1)
    }

    fn free(&mut self, buf: BufId) {
        // A started reduction may still read or write it (an error already ended the run).
        let _ = self.reduce_wait();
        if let Some(b) = self.bufs.get_mut(buf) {
            *b = None;
        }
    }

    fn host_staging(&mut self, len: usize) -> Result<Box<dyn Staging>, GpuError> {
        // SAFETY: the pinned allocation is uninitialised bytes, which u8 permits; it is zeroed below
        // before any read.
        let mem = unsafe {
            self.ctx
                .alloc_pinned_with_flags::<u8>(len.max(1), sys::CU_MEMHOSTALLOC_PORTABLE)
        };
        let mut mem = mem.map_err(|e| self.fail("cuMemHostAlloc", e))?;
        let ptr = mem.as_mut_ptr().map_err(|e| self.fail("cuMemHostAlloc", e))?;
        let mut p = Pinned { mem, ptr, len };
        p.bytes_mut().fill(0);
        Ok(Box::new(p))
    }

    fn upload(&mut self, dst: At, src: &[u8]) -> Result<(), GpuError> {
        let d = self.addr(dst, src.len(), "upload past the end")?;
        self.bind("cuCtxSetCurrent")?;
        // SAFETY: d..d+len lies in a live allocation of this context (checked above); `src` stays
        // borrowed until `sync` below has seen the copy finish.
        unsafe { cudarc::driver::result::memcpy_htod_async(d, src, self.stream.cu_stream()) }
            .map_err(|e| self.fail("cuMemcpyHtoDAsync", e))?;
        self.sync("cuMemcpyHtoDAsync")
    }

    fn download(&mut self, src: At, dst: &mut [u8]) -> Result<(), GpuError> {
        let s = self.addr(src, dst.len(), "download past the end")?;
        self.settle()?;
        self.bind("cuCtxSetCurrent")?;
        // SAFETY: s..s+len lies in a live allocation (checked above); `dst` stays borrowed until
        // `sync` below has seen the copy finish.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, s, self.stream.cu_stream()) }
            .map_err(|e| self.fail("cuMemcpyDtoHAsync", e))?;
        self.sync("cuMemcpyDtoHAsync")
    }

    fn copy(&mut self, dst: At, src: At, len: usize) -> Result<(), GpuError> {
        if len == 0 {
            return Ok(());
        }
        let d = self.addr(dst, len, "copy destination past the end")?;
        let s = self.addr(src, len, "copy source past the end")?;
        self.settle()?;
        self.bind("cuCtxSetCurrent")?;
        // SAFETY: both ranges lie in live allocations of this context (checked above).
        unsafe { cudarc::driver::result::memcpy_dtod_async(d, s, len, self.stream.cu_stream()) }
            .map_err(|e| self.fail("cuMemcpyDtoDAsync", e))?;
        self.sync("cuMemcpyDtoDAsync")
    }

    fn nic_memory(&self, buf: BufId) -> Result<Box<dyn NicMemory>, GpuError> {
        let a = self
            .bufs
            .get(buf)
            .and_then(|b| b.as_ref())
            .filter(|a| !a.mem.opened)
            .ok_or(GpuError::OutOfBounds {
                buf,
                what: "registering a freed buffer, or a peer's",
                range: 0..0,
                len: 0,
            })?;
        Ok(Box::new(GpuNicMemory {
            mem: a.mem.clone(),
            len: a.len,
            reg: Registrar {
                ctx: self.ctx.clone(),
                info: self.info.clone(),
                dmabuf: self.dmabuf.clone(),
            },
        }))
    }

    fn reduce(&mut self, dt: DataType, op: RedOp, dst: At, a: At, b: At, bytes: usize) -> Result<(), GpuError> {
        self.reduce_wait()?;
        let stream = self.stream.clone();
        if self.launch_reduce(&stream, dt, op, dst, a, b, bytes)? {
            self.sync("reduction kernel")?;
        }
        Ok(())
    }

    fn reduce_start(&mut self, dt: DataType, op: RedOp, dst: At, a: At, b: At, bytes: usize) -> Result<(), GpuError> {
        self.reduce_wait()?;
        let stream = self.reduce_stream.clone();
        if self.launch_reduce(&stream, dt, op, dst, a, b, bytes)? {
            self.reduce_done
                .record(&stream)
                .map_err(|e| self.fail("cuEventRecord", e))?;
            self.reducing = true;
        }
        Ok(())
    }

    fn reduce_wait(&mut self) -> Result<(), GpuError> {
        if !std::mem::take(&mut self.reducing) {
            return Ok(());
        }
        self.wait_event(&self.reduce_done, "reduction kernel (started, overlapped)")
    }

    fn finalize(
        &mut self,
        dt: DataType,
        op: RedOp,
        buf: BufId,
        range: Range<usize>,
        nranks: usize,
    ) -> Result<(), GpuError> {
        let n = (range.len() / dt.size()) as u64;
        if op != RedOp::Avg || n == 0 {
            return Ok(());
        }
        let p = self.addr(At::new(buf, range.start), range.len(), "finalize past the end")?;
        let f = self.func(&kernels::div_name(dt))?;
        self.settle()?;
        let cfg = LaunchConfig {
            grid_dim: (kernels::blocks(n as usize), 1, 1),
            block_dim: (kernels::BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let nr = nranks as u64;
        let mut l = self.stream.launch_builder(&f);
        l.arg(&p).arg(&n).arg(&nr);
        // SAFETY: `meshrun_div_<type>(T *buf, u64 n, u64 nranks)` rewrites n elements at buf, a range
        // checked above against a live allocation; the arguments match its signature.
        unsafe { l.launch(cfg) }.map_err(|e| self.fail("cuLaunchKernel (avg divide)", e))?;
        self.sync("avg divide kernel")
    }

    fn rdma_writes_landed(&mut self) {
        self.landed = true;
    }

    fn set_call_limit(&mut self, limit: std::time::Duration) {
        self.limit = limit;
    }

    fn export_peer(&mut self, buf: BufId) -> Result<crate::gpu::peer::PeerHandle, GpuError> {
        self.export_ipc(buf)
    }

    fn open_peer(&mut self, handle: &crate::gpu::peer::PeerHandle) -> Result<BufId, GpuError> {
        self.open_ipc(handle)
    }
}

impl Drop for CudaGpu {
    fn drop(&mut self) {
        // The buffers go with `self`: a started reduction must not outlive them.
        let _ = self.reduce_wait();
    }
}

/// These run only where a GPU is: `scripts/gpu-check.sh` runs them with `--ignored`.
#[cfg(test)]
mod tests;
