//! Real GPU memory through `cudarc` (CUDA driver API, loaded at run time). Every CUDA failure
//! becomes a [`GpuError::Call`] naming the GPU, the driver call and, where one is known, the fix.
//!
//! Memory is allocated as GPUDirect RDMA needs it (see `DevMem` and `Pinned` below), and this is
//! the only file with `unsafe` for CUDA: each call has its `// SAFETY:` line.

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

/// Advice for driver errors a user can act on.
pub fn hint(e: &DriverError) -> &'static str {
    match e.0 {
        CUresult::CUDA_ERROR_NO_DEVICE => "; the driver sees no GPU: check nvidia-smi and CUDA_VISIBLE_DEVICES",
        CUresult::CUDA_ERROR_INVALID_DEVICE => "; no such GPU: check --gpu-ids against nvidia-smi -L",
        CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => {
            "; the driver cannot JIT PTX ISA 8.0 (CUDA 12.0): update the NVIDIA driver to 525 or newer"
        }
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => "; GPU memory is full: use a smaller -e, or fewer ranks per GPU",
        CUresult::CUDA_ERROR_NOT_INITIALIZED | CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => {
            "; the kernel module and libcuda differ in version: reload the nvidia module or reboot"
        }
        CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE => {
            "; the GPU is in exclusive-process mode and taken: nvidia-smi -c DEFAULT, or one rank per GPU"
        }
        _ => "",
    }
}

/// A failed driver call on the GPU `info` describes.
fn call_error(info: &GpuInfo, call: &'static str, e: DriverError) -> GpuError {
    GpuError::Call {
        ordinal: info.ordinal,
        name: info.name.clone(),
        call,
        error: e.to_string(),
        hint: hint(&e).to_string(),
    }
}

/// Whether the loaded libcuda exports `name`: cudarc panics on a call to a missing symbol, and
/// older drivers lack the newer GPUDirect calls. Only after [`driver_present`] said yes.
fn has_symbol(name: &str) -> bool {
    // SAFETY: looks the symbol up in the already loaded libcuda without calling it; the function
    // type named is never used.
    unsafe { sys::culib().get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_ok()
}

/// The page-aligned start of a `len`-byte window inside an `alloc`-byte allocation at `raw`, where
/// the window (rounded up to whole pages) fits.
fn page_window(raw: u64, alloc: usize, len: usize, page: usize) -> Option<u64> {
    let base = (raw as usize).checked_next_multiple_of(page)? as u64;
    let end = base.checked_add(round_up(len.max(1), page) as u64)?;
    (end <= raw + alloc as u64).then_some(base)
}

/// Device memory from plain `cuMemAlloc`, freed on drop. Not the stream-ordered pool
/// (`cuMemAllocAsync`, what cudarc's `alloc_zeros` takes where the device has pools, as an H100
/// or H200 has): pool memory supports neither GPUDirect RDMA nor dma-buf export.
///
/// `cuMemAlloc` returns addresses aligned to at least 256 bytes: enough for every element type
/// the kernels touch, not the host page that a dma-buf range must start and end on
/// (`cuMemGetHandleForAddressRange`). So the buffer is the window `base..base + size`: `size` is
/// the length rounded up to whole host pages and `base` the first page boundary in the
/// allocation, which is one page larger when the driver's address is not page-aligned.
struct DevMem {
    ctx: Arc<CudaContext>,
    /// What cuMemAlloc returned (what cuMemFree takes).
    raw: sys::CUdeviceptr,
    base: u64,
    size: usize,
}

impl DevMem {
    /// At least `len` bytes, uninitialised, on page boundaries of `page` bytes.
    fn new(ctx: &Arc<CudaContext>, len: usize, page: usize) -> Result<DevMem, DriverError> {
        ctx.bind_to_thread()?;
        let size = round_up(len.max(1), page);
        for alloc in [size, size + page] {
            // SAFETY: cuMemAlloc in the context bound above; the memory is uninitialised device
            // memory, handled only as bytes, and owned (freed once) by the DevMem made of it.
            let raw = unsafe { result::malloc_sync(alloc) }?;
            let base = page_window(raw, alloc, len, page);
            let mem = DevMem {
                ctx: ctx.clone(),
                raw,
                base: base.unwrap_or(raw),
                size,
            };
            if base.is_some() {
                return Ok(mem);
            }
            // Not page-aligned: dropping `mem` frees it, and the next round asks for a page more.
        }
        unreachable!("a window of whole pages always fits an allocation one page larger")
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        // Nothing can report an error from a drop; a failed free leaks the memory until the
        // context goes, which is all a caller could do about it either.
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `raw` came from cuMemAlloc in this context and is freed once, here. Every device
        // operation on it completed before its call returned, and a NIC registration holds an
        // `Arc` of this allocation, so none outlives it.
        let _ = unsafe { result::free_sync(self.raw) };
    }
}

/// A device buffer: shared, so a registration with the NIC keeps it alive after `free`.
struct DevAlloc {
    mem: Arc<DevMem>,
    /// Bytes asked for (the allocation is `mem.size`, whole host pages).
    len: usize,
}

pub struct CudaGpu {
    info: GpuInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
    funcs: HashMap<String, CudaFunction>,
    /// Live buffers.
    bufs: Vec<Option<DevAlloc>>,
    /// Recorded after each call's work; the host polls it (a bounded wait, not cuStreamSynchronize).
    done: CudaEvent,
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

/// Whether the NVIDIA driver library (libcuda) can be loaded here.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda by its usual names; no CUDA call is made.
    unsafe { sys::is_culib_present() }
}

/// cuInit and the number of GPUs, after checking libcuda loads (cudarc panics on the first call
/// when it does not).
fn init(host: &str) -> Result<usize, GpuError> {
    if !driver_present() {
        return Err(GpuError::NoDriver { host: host.to_string() });
    }
    let early = |call: &'static str, e: DriverError| GpuError::Call {
        ordinal: 0,
        name: format!("(any GPU on {host})"),
        call,
        error: e.to_string(),
        hint: hint(&e).to_string(),
    };
    result::init().map_err(|e| early("cuInit", e))?;
    let count = CudaContext::device_count().map_err(|e| early("cuDeviceGetCount", e))?;
    Ok(count.max(0) as usize)
}

/// The primary context of GPU `ordinal` and what it is (name, PCI address).
fn open_context(ordinal: usize) -> Result<(Arc<CudaContext>, GpuInfo), GpuError> {
    let mut info = GpuInfo {
        ordinal,
        name: "?".into(),
        pci_bus_id: String::new(),
        stand_in: false,
    };
    let ctx = CudaContext::new(ordinal).map_err(|e| call_error(&info, "cuDevicePrimaryCtxRetain", e))?;
    info.name = ctx.name().map_err(|e| call_error(&info, "cuDeviceGetName", e))?;
    let attr = |a| ctx.attribute(a);
    let (dom, bus, dev) = (
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    );
    let (dom, bus, dev) = match (dom, bus, dev) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            return Err(call_error(&info, "cuDeviceGetAttribute(PCI)", e))
        }
    };
    info.pci_bus_id = format!("{dom:04x}:{bus:02x}:{dev:02x}.0");
    Ok((ctx, info))
}

/// The two attributes that say whether RDMA writes need a flush, and the rule they make (a host
/// flush only where the driver has the call).
fn flush_rule(ctx: &CudaContext) -> (Result<i32, String>, Result<i32, String>, RdmaFlush) {
    let opts = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS)
        .map_err(|e| e.to_string());
    let order = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING)
        .map_err(|e| e.to_string());
    let mut rule = RdmaFlush::from_attributes(*opts.as_ref().unwrap_or(&0), *order.as_ref().unwrap_or(&0));
    if rule == RdmaFlush::Flush && !has_symbol("cuFlushGPUDirectRDMAWrites") {
        rule = RdmaFlush::Unavailable;
    }
    (opts, order, rule)
}

/// Whether the driver calls the memory at `ptr` usable for GPUDirect RDMA
/// (`CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE`).
fn gpudirect_capable(ctx: &CudaContext, ptr: sys::CUdeviceptr) -> Result<bool, String> {
    ctx.bind_to_thread().map_err(|e| e.to_string())?;
    // Eight zeroed bytes: the driver writes a boolean (an int in cuda.h's words) at the start.
    let mut v: u64 = 0;
    // SAFETY: `v` is a valid, writable 8-byte place, larger than the int the call writes; `ptr`
    // is a live allocation of the current context.
    let r = unsafe {
        sys::cuPointerGetAttribute(
            (&mut v as *mut u64).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE,
            ptr,
        )
    };
    r.result()
        .map(|()| v != 0)
        .map_err(|e| format!("cuPointerGetAttribute(IS_GPU_DIRECT_RDMA_CAPABLE): {e}"))
}

/// A dma-buf of `size` bytes at `addr` (both multiples of the host page size) in `ctx`.
fn export_dmabuf(ctx: &CudaContext, addr: u64, size: usize) -> Result<std::os::fd::OwnedFd, String> {
    if !has_symbol("cuMemGetHandleForAddressRange") {
        return Err("the driver has no cuMemGetHandleForAddressRange (dma-buf export needs R515 or newer)".into());
    }
    ctx.bind_to_thread().map_err(|e| format!("cuCtxSetCurrent: {e}"))?;
    let mut fd: i32 = -1;
    // SAFETY: `fd` is a valid place for the int the call writes; addr..addr+size lies in one live
    // cuMemAlloc allocation of the current context, and both are multiples of the host page size
    // (DevMem places every buffer so), as the call requires; the symbol exists (checked above).
    let r = unsafe {
        sys::cuMemGetHandleForAddressRange(
            (&mut fd as *mut i32).cast(),
            addr,
            size,
            sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0,
        )
    };
    if r != CUresult::CUDA_SUCCESS || fd < 0 {
        return Err(format!("cuMemGetHandleForAddressRange(DMA_BUF_FD) failed: {r:?}"));
    }
    // SAFETY: the driver just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Whether a buffer from the device's stream-ordered pool (`cuMemAllocAsync`) is GPUDirect-capable.
fn pool_buffer_capable(ctx: &Arc<CudaContext>) -> Result<bool, String> {
    let stream = ctx.new_stream().map_err(|e| format!("cuStreamCreate: {e}"))?;
    // SAFETY: a stream of this context (bound by new_stream); the memory is never read or written.
    let p = unsafe { result::malloc_async(stream.cu_stream(), PROBE_BYTES) }
        .map_err(|e| format!("cuMemAllocAsync: {e}"))?;
    // The allocation is stream-ordered: ask about it once the stream has made it.
    let capable = match stream.synchronize() {
        Ok(()) => gpudirect_capable(ctx, p),
        Err(e) => Err(format!("cuStreamSynchronize: {e}")),
    };
    // SAFETY: `p` was allocated on this stream just above and is freed once, here.
    let freed = unsafe { result::free_async(p, stream.cu_stream()) };
    freed
        .and_then(|()| stream.synchronize())
        .map_err(|e| format!("cuMemFreeAsync: {e}"))?;
    capable
}

/// Probe every visible GPU for GPUDirect RDMA, with no NIC: device attributes, a real
/// `cuMemAlloc` buffer's pointer attribute and dma-buf export (page-aligned), a pool buffer's.
pub fn probe_all(host: &str) -> Result<Vec<GpuDirectProbe>, GpuError> {
    let count = init(host)?;
    if count == 0 {
        return Err(GpuError::Selection {
            host: host.to_string(),
            local_rank: 0,
            why: "the driver sees no GPU; check nvidia-smi and CUDA_VISIBLE_DEVICES".into(),
        });
    }
    (0..count).map(probe).collect()
}

/// [`probe_all`] of one GPU. Fails only where nothing can be probed (no context, no memory).
pub fn probe(ordinal: usize) -> Result<GpuDirectProbe, GpuError> {
    let (ctx, info) = open_context(ordinal)?;
    let attr = |a| ctx.attribute(a).map_err(|e| e.to_string());
    let rdma_supported = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED).map(|v| v == 1);
    let dmabuf_supported = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).map(|v| v == 1);
    let pools = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) == Ok(1);
    let (flush_options, writes_ordering, flush) = flush_rule(&ctx);
    let page = host_page_size();
    let mem = DevMem::new(&ctx, PROBE_BYTES, page).map_err(|e| call_error(&info, "cuMemAlloc", e))?;
    let buffer_capable = gpudirect_capable(&ctx, mem.base);
    let dmabuf_export = export_dmabuf(&ctx, mem.base, mem.size).map(|fd| {
        drop(fd);
        mem.size
    });
    drop(mem);
    let pool_buffer_capable = pools.then(|| pool_buffer_capable(&ctx));
    Ok(GpuDirectProbe {
        gpu: info,
        rdma_supported,
        dmabuf_supported,
        flush_options,
        writes_ordering,
        buffer_capable,
        pool_buffer_capable,
        dmabuf_export,
        page_size: page,
        flush,
    })
}

impl CudaGpu {
    /// Load the driver, pick and open this rank's GPU, load the reduction kernels.
    pub fn open(ids: Option<&[usize]>, local_rank: usize, host: &str) -> Result<CudaGpu, GpuError> {
        let count = init(host)?;
        let ordinal = pick_ordinal(ids, local_rank, count, host)?;
        let (ctx, info) = open_context(ordinal)?;
        let fail = call_error;
        let stream = ctx.new_stream().map_err(|e| fail(&info, "cuStreamCreate", e))?;
        let module = ctx
            .load_module(Ptx::from_src(kernels::PTX))
            .map_err(|e| fail(&info, "cuModuleLoadData (reduction kernels)", e))?;
        let done = ctx.new_event(None).map_err(|e| fail(&info, "cuEventCreate", e))?;
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
            module,
            funcs: HashMap::new(),
            bufs: Vec::new(),
            done,
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
        let query = || {
            // SAFETY: a live event of this GPU's context, recorded just above.
            match unsafe { cudarc::driver::result::event::query(self.done.cu_event()) } {
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
            .ok_or(GpuError::OutOfBounds {
                buf,
                what: "registering a freed buffer",
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
        let n = (bytes / dt.size()) as u64;
        if n == 0 {
            return Ok(());
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
        let mut l = self.stream.launch_builder(&f);
        l.arg(&d).arg(&x).arg(&y).arg(&n);
        // SAFETY: the kernel `meshrun_<op>_<type>(T *dst, const T *a, const T *b, u64 n)` reads n
        // elements at a and b and writes n at dst (dst may equal a: each element is read before it is
        // written by the same thread); all three ranges were checked above against live allocations,
        // and the four arguments match its signature (three device pointers, one u64).
        unsafe { l.launch(cfg) }.map_err(|e| self.fail("cuLaunchKernel (reduce)", e))?;
        self.sync("reduction kernel")
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
}

/// What registering GPU memory with a NIC needs: the context (to export dma-bufs) and whether
/// the driver can.
#[derive(Clone)]
struct Registrar {
    ctx: Arc<CudaContext>,
    info: GpuInfo,
    dmabuf: Result<(), String>,
}

impl Registrar {
    /// A dma-buf file descriptor for `size` bytes at `addr` (a [`DevMem`] window).
    fn export(&self, addr: u64, size: usize) -> Result<std::os::fd::OwnedFd, String> {
        export_dmabuf(&self.ctx, addr, size).map_err(|e| format!("GPU {}: {e}", self.info.ordinal))
    }

    /// Register `len` bytes at `addr`, the start of a `size`-byte buffer, with `pd`: by dma-buf
    /// where the driver exports one, else by plain `ibv_reg_mr` (nvidia-peermem).
    ///
    /// # Safety
    /// `addr..addr + size` must be the page-aligned window of one [`DevMem`] of this context that
    /// stays allocated for the life of the returned region.
    unsafe fn register(
        &self,
        pd: &ranks::verbs::ProtectionDomain,
        addr: u64,
        size: usize,
        len: usize,
        access: ranks::verbs::Access,
    ) -> Result<ranks::verbs::ForeignRegion, ranks::verbs::VerbsError> {
        use std::os::fd::AsRawFd;
        let mut why = Vec::new();
        match &self.dmabuf {
            Ok(()) => match self.export(addr, size) {
                // SAFETY: `fd` is a dma-buf of `size` >= len bytes whose memory the caller keeps.
                Ok(fd) => match unsafe { pd.register_dmabuf(fd.as_raw_fd(), 0, len, addr, access) } {
                    Ok(r) => return Ok(r),
                    Err(e) => why.push(e.to_string()),
                },
                Err(e) => why.push(e),
            },
            Err(e) => why.push(e.clone()),
        }
        // SAFETY: addr..addr+len lies in the allocation the caller keeps.
        match unsafe { pd.register_device_memory(addr, len, access) } {
            Ok(r) => Ok(r),
            Err(e) => {
                why.push(e.to_string());
                Err(ranks::verbs::VerbsError::Window(format!(
                    "GPU {} ({}) memory cannot be registered for GPUDirect RDMA: {}",
                    self.info.ordinal,
                    self.info.name,
                    why.join("; then ")
                )))
            }
        }
    }
}

/// A device buffer handed to a transport for registration; it keeps the allocation alive.
struct GpuNicMemory {
    mem: Arc<DevMem>,
    len: usize,
    reg: Registrar,
}

impl ranks::NicMemory for GpuNicMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn register(
        &self,
        pd: &ranks::verbs::ProtectionDomain,
        access: ranks::verbs::Access,
    ) -> Result<ranks::verbs::ForeignRegion, ranks::verbs::VerbsError> {
        // SAFETY: base..base+size is the window of the allocation `mem` holds, which lives as long
        // as this object, and the transport keeps this object for the life of the region.
        unsafe {
            self.reg
                .register(pd, self.mem.base, self.mem.size, self.len.max(1), access)
        }
    }
}

/// GPU memory for one-sided RDMA windows (`pairwise --use-cuda`): registered with the NIC by
/// dma-buf when the driver exports one, else by plain `ibv_reg_mr` (nvidia-peermem).
pub struct GpuWindow {
    gpu: CudaGpu,
    /// Every buffer ever allocated, kept until the window is dropped: a region registered on an
    /// older, smaller buffer must never see it freed.
    bufs: Vec<BufId>,
}

// SAFETY: the window is used by one thread at a time (it moves into the transport); CUDA contexts
// and streams may be used from any thread once bound, which every call here does first.
unsafe impl Send for GpuWindow {}

impl GpuWindow {
    pub fn open(ids: Option<&[usize]>, local_rank: usize, host: &str) -> Result<GpuWindow, GpuError> {
        Ok(GpuWindow {
            gpu: CudaGpu::open(ids, local_rank, host)?,
            bufs: Vec::new(),
        })
    }

    pub fn info(&self) -> &GpuInfo {
        &self.gpu.info
    }

    /// How long one device call may wait (`--timeout`).
    pub fn set_call_limit(&mut self, limit: std::time::Duration) {
        self.gpu.limit = limit;
    }

    /// The newest buffer, grown to hold `len` bytes: its address and allocated size.
    fn buffer(&mut self, len: usize) -> Result<(u64, usize), GpuError> {
        if let Some(a) = self.bufs.last().and_then(|&b| self.gpu.bufs.get(b)?.as_ref()) {
            if a.mem.size >= len {
                return Ok((a.mem.base, a.mem.size));
            }
        }
        let id = self.gpu.alloc(len)?;
        self.bufs.push(id);
        let a = self.gpu.bufs[id].as_ref().expect("just allocated");
        Ok((a.mem.base, a.mem.size))
    }
}

impl ranks::WindowMemory for GpuWindow {
    fn register(
        &mut self,
        pd: &ranks::verbs::ProtectionDomain,
        len: usize,
        access: ranks::verbs::Access,
    ) -> Result<ranks::verbs::ForeignRegion, ranks::verbs::VerbsError> {
        let (addr, size) = self
            .buffer(len)
            .map_err(|e| ranks::verbs::VerbsError::Window(e.to_string()))?;
        let reg = Registrar {
            ctx: self.gpu.ctx.clone(),
            info: self.gpu.info.clone(),
            dmabuf: self.gpu.dmabuf.clone(),
        };
        // SAFETY: addr..addr+size is one of `self.bufs`, never freed before this window (which
        // outlives the transport's regions) is dropped.
        unsafe { reg.register(pd, addr, size, len.max(1), access) }
    }
}

/// These run only where a GPU is: `scripts/gpu-check.sh` runs them with `--ignored`.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::reduce;

    /// GPU 0, or a panic saying plainly why there is none.
    fn gpu_for_test() -> CudaGpu {
        match CudaGpu::open(None, 0, "this machine") {
            Ok(g) => g,
            Err(GpuError::NoDriver { .. }) => panic!(
                "no GPU to test on: libcuda.so (the NVIDIA driver) cannot be loaded on this machine; \
                 these tests run on a GPU machine (scripts/gpu-check.sh, the GPU bundle's check)"
            ),
            Err(e) => panic!("no GPU to test on: {e}"),
        }
    }

    /// Operands that exercise wrapping (integers) and rounding (16-bit floats), without NaN.
    fn operands(dt: DataType, n: usize, seed: u64) -> Vec<u8> {
        let mut v = vec![0u8; n * dt.size()];
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        match dt {
            DataType::Half | DataType::Float | DataType::Double | DataType::Bfloat16 => {
                // Values in [-40, 40) with 1/1024 steps: sums and products round in half and bfloat16.
                reduce::fill(dt, &mut v, |_| 0).unwrap();
                crate::with_type!(dt, T => {
                    let s: &mut [T] = bytemuck::cast_slice_mut(&mut v);
                    for e in s.iter_mut() {
                        let f = ((next() % 81920) as f64 - 40960.0) / 1024.0;
                        *e = <T as FromF64>::from_f64(f);
                    }
                });
            }
            _ => v.iter_mut().for_each(|b| *b = next() as u8),
        }
        v
    }

    trait FromF64 {
        fn from_f64(f: f64) -> Self;
    }
    macro_rules! from_f64 {
        ($($t:ty => $e:expr),*) => { $(impl FromF64 for $t { fn from_f64(f: f64) -> Self { ($e)(f) } })* };
    }
    from_f64!(
        i8 => |f: f64| f as i8, u8 => |f: f64| f as u8, i32 => |f: f64| f as i32, u32 => |f: f64| f as u32,
        i64 => |f: f64| f as i64, u64 => |f: f64| f as u64, f32 => |f: f64| f as f32, f64 => |f: f64| f,
        half::f16 => half::f16::from_f64, half::bf16 => half::bf16::from_f64
    );

    /// Where a buffer starts inside what cuMemAlloc returned: the first page boundary, when the
    /// whole-page window fits (else the allocation is made one page larger).
    #[test]
    fn buffers_sit_on_page_boundaries() {
        let page = 4096;
        // Page-aligned (what large allocations usually get): the window is the allocation.
        assert_eq!(page_window(0x7f00_0020_0000, 8192, 5000, page), Some(0x7f00_0020_0000));
        // Only 256-byte aligned (all cuMemAlloc promises): no room without a page more...
        assert_eq!(page_window(0x7f00_0020_0100, 8192, 5000, page), None);
        // ...and with it, the next boundary.
        assert_eq!(
            page_window(0x7f00_0020_0100, 8192 + page, 5000, page),
            Some(0x7f00_0020_1000)
        );
        assert_eq!(
            page_window(0x1000, 4096, 0, page),
            Some(0x1000),
            "an empty buffer still gets a page"
        );
        for raw in (0..page as u64 * 2).step_by(256) {
            let base = page_window(raw, 3 * page + page, 3 * page, page).expect("a page more always fits");
            assert_eq!(base % page as u64, 0);
            assert!(base >= raw && base + 3 * page as u64 <= raw + 4 * page as u64);
        }
    }

    /// Elements per case: more than two full grids (4,096 blocks of 512 threads, the launch's cap),
    /// so every thread takes at least two grid strides and the tail is not a whole block.
    const KERNEL_TEST_N: usize = 2 * kernels::MAX_BLOCKS as usize * kernels::BLOCK as usize + 12_345;

    #[test]
    fn the_kernel_test_strides_the_grid() {
        let n = KERNEL_TEST_N;
        assert_eq!(kernels::blocks(n), kernels::MAX_BLOCKS, "the grid is capped");
        let grid = kernels::MAX_BLOCKS as usize * kernels::BLOCK as usize;
        assert!(n > 2 * grid, "each thread strides at least twice");
        assert_ne!(n % kernels::BLOCK as usize, 0, "a partial last block");
    }

    /// Element `i` of `bytes` as a value of `dt`, for reports.
    fn element(dt: DataType, bytes: &[u8], i: usize) -> String {
        let e = &bytes[i * dt.size()..(i + 1) * dt.size()];
        crate::with_type!(dt, T => {
            let v: T = bytemuck::pod_read_unaligned(e);
            format!("{v:?}")
        })
    }

    /// How one (type, op) case came out on the device.
    enum Outcome {
        Equal,
        Wrong {
            count: u64,
            first: usize,
            got: String,
            want: String,
        },
        Failed(String),
    }

    /// Run `dst = a op b` (in place, as the ring does) and the avg divide on the device, and
    /// compare with the CPU.
    fn run_case(g: &mut dyn Gpu, dt: DataType, op: RedOp, a: &[u8], b: &[u8]) -> Outcome {
        let mut want = vec![0u8; a.len()];
        if let Err(e) =
            reduce::reduce_from(dt, op, &mut want, a, b).and_then(|()| reduce::finalize(dt, op, &mut want, 3))
        {
            return Outcome::Failed(format!("CPU reference: {e}"));
        }
        let mut got = vec![0u8; a.len()];
        let device = (|| -> Result<(), GpuError> {
            let (da, db) = (g.alloc(a.len())?, g.alloc(b.len())?);
            let r = (|| {
                g.upload(At::new(da, 0), a)?;
                g.upload(At::new(db, 0), b)?;
                g.reduce(dt, op, At::new(da, 0), At::new(da, 0), At::new(db, 0), a.len())?;
                g.finalize(dt, op, da, 0..a.len(), 3)?;
                g.download(At::new(da, 0), &mut got)
            })();
            g.free(da);
            g.free(db);
            r
        })();
        if let Err(e) = device {
            return Outcome::Failed(e.to_string());
        }
        let count = reduce::count_wrong(dt, &got, &want);
        if count == 0 {
            return Outcome::Equal;
        }
        let first = got
            .chunks(dt.size())
            .zip(want.chunks(dt.size()))
            .position(|(x, y)| x != y)
            .unwrap_or(0);
        Outcome::Wrong {
            count,
            first,
            got: element(dt, &got, first),
            want: element(dt, &want, first),
        }
    }

    /// A line of the report, written to stderr at once and not through the test harness's capture
    /// (`std::io::stderr()` is not captured; `eprintln!` is), so each case shows as it finishes,
    /// even if a later one hangs until a timeout kills the test.
    fn say(line: &str) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }

    /// Every case's line, the cases that went wrong, and the summary line.
    struct Report {
        table: Vec<String>,
        failed: Vec<String>,
        summary: String,
    }

    /// Run every (type, op) on `g` over `n` elements, each reported through `say` as it finishes.
    fn kernel_report(g: &mut dyn Gpu, n: usize, say: &mut dyn FnMut(&str)) -> Report {
        let (mut table, mut failed, mut equal) = (Vec::new(), Vec::new(), 0);
        for dt in DataType::ALL {
            let (a, b) = (operands(dt, n, 1), operands(dt, n, 2));
            for op in RedOp::ALL {
                let case = format!("{:>8} {:>4}", dt.name(), op.name());
                let line = match run_case(g, dt, op, &a, &b) {
                    Outcome::Equal => {
                        equal += 1;
                        format!("{case}: ok, {n} of {n} equal")
                    }
                    Outcome::Wrong {
                        count,
                        first,
                        got,
                        want,
                    } => format!("{case}: WRONG {count} of {n}, first at {first}: got {got}, want {want}"),
                    Outcome::Failed(e) => format!("{case}: FAILED: {e}"),
                };
                if !line.contains(": ok,") {
                    failed.push(format!("{} {}", dt.name(), op.name()));
                }
                say(&line);
                table.push(line);
            }
        }
        let summary = format!(
            "reduction kernels: {equal} of {} (type, op) cases equal the CPU bit for bit over {n} elements{}",
            table.len(),
            if failed.is_empty() {
                String::new()
            } else {
                format!("; wrong or failed: {}", failed.join(", "))
            }
        );
        say(&summary);
        Report { table, failed, summary }
    }

    /// Every (type, op) on the device against the CPU, bit for bit, over enough elements that the
    /// grid strides. Every case runs and is reported (mismatches, the first wrong index, the value
    /// there and the one wanted) before the test fails, and the failure message holds the table.
    #[test]
    #[ignore = "needs an NVIDIA GPU and driver; scripts/gpu-check.sh runs it on a GPU machine"]
    fn device_kernels_equal_the_cpu_for_every_type_and_op() {
        let n = KERNEL_TEST_N;
        let mut g = gpu_for_test();
        say(&format!(
            "reduction kernels on GPU {} {} [{}]: {n} elements per case, grid {} blocks x {} threads (strides {}x)",
            g.info.ordinal,
            g.info.name,
            g.info.pci_bus_id,
            kernels::blocks(n),
            kernels::BLOCK,
            n.div_ceil(kernels::MAX_BLOCKS as usize * kernels::BLOCK as usize)
        ));
        let r = kernel_report(&mut g, n, &mut |l| say(l));
        assert_eq!(r.table.len(), 50);
        assert!(r.failed.is_empty(), "{}\n{}", r.summary, r.table.join("\n"));
    }

    /// A GPU that gets case 7's result wrong (one element) and fails case 12's kernel: every
    /// other case still runs, and both are reported as they are.
    struct Faulty {
        inner: super::super::standin::HostStandIn,
        downloads: usize,
        reduces: usize,
    }

    impl Gpu for Faulty {
        fn info(&self) -> &GpuInfo {
            self.inner.info()
        }
        fn alloc(&mut self, len: usize) -> Result<BufId, GpuError> {
            self.inner.alloc(len)
        }
        fn free(&mut self, buf: BufId) {
            self.inner.free(buf)
        }
        fn host_staging(&mut self, len: usize) -> Result<Box<dyn Staging>, GpuError> {
            self.inner.host_staging(len)
        }
        fn upload(&mut self, dst: At, src: &[u8]) -> Result<(), GpuError> {
            self.inner.upload(dst, src)
        }
        fn download(&mut self, src: At, dst: &mut [u8]) -> Result<(), GpuError> {
            self.inner.download(src, dst)?;
            self.downloads += 1;
            if self.downloads == 8 {
                dst[5] ^= 0x40;
            }
            Ok(())
        }
        fn copy(&mut self, dst: At, src: At, len: usize) -> Result<(), GpuError> {
            self.inner.copy(dst, src, len)
        }
        fn nic_memory(&self, buf: BufId) -> Result<Box<dyn ranks::NicMemory>, GpuError> {
            self.inner.nic_memory(buf)
        }
        fn reduce(&mut self, dt: DataType, op: RedOp, dst: At, a: At, b: At, bytes: usize) -> Result<(), GpuError> {
            self.reduces += 1;
            if self.reduces == 13 {
                // (Built by hand: a DriverError asks libcuda for its words.)
                return Err(GpuError::Call {
                    ordinal: 0,
                    name: self.inner.info().name.clone(),
                    call: "cuLaunchKernel (reduce)",
                    error: "CUDA_ERROR_LAUNCH_FAILED".into(),
                    hint: String::new(),
                });
            }
            self.inner.reduce(dt, op, dst, a, b, bytes)
        }
        fn finalize(&mut self, dt: DataType, op: RedOp, buf: BufId, r: Range<usize>, n: usize) -> Result<(), GpuError> {
            self.inner.finalize(dt, op, buf, r, n)
        }
        fn rdma_writes_landed(&mut self) {
            self.inner.rdma_writes_landed()
        }
    }

    /// The report itself, on the host stand-in (no GPU needed): all 50 cases equal; then a GPU
    /// with one wrong element and one failed launch has both reported, and the other 48 still run.
    #[test]
    fn the_kernel_report_runs_and_tells_every_case() {
        let n = 3 * kernels::BLOCK as usize + 7;
        let mut g = super::super::standin::HostStandIn::new(0);
        let mut said = Vec::new();
        let r = kernel_report(&mut g, n, &mut |l| said.push(l.to_string()));
        assert_eq!((r.table.len(), r.failed.len()), (50, 0), "{}", r.summary);
        assert_eq!(said.len(), 51);
        assert!(r
            .summary
            .starts_with("reduction kernels: 50 of 50 (type, op) cases equal"));
        let mut g = Faulty {
            inner: super::super::standin::HostStandIn::new(0),
            downloads: 0,
            reduces: 0,
        };
        let r = kernel_report(&mut g, n, &mut |_| {});
        assert_eq!(r.table.len(), 50);
        assert_eq!(r.failed, ["uint8 min", "int32 min"], "{}", r.table.join("\n"));
        // Case 7 (uint8 min): element 5 flipped by 0x40.
        let wrong = &r.table[7];
        assert!(
            wrong.contains("   uint8  min: WRONG 1 of 1543, first at 5: got "),
            "{wrong}"
        );
        assert!(
            r.table[12].contains("int32  min: FAILED: GPU 0 (host stand-in"),
            "{}",
            r.table[12]
        );
        assert!(
            r.table[12].contains("cuLaunchKernel (reduce) failed"),
            "{}",
            r.table[12]
        );
        assert!(r.summary.contains("48 of 50") && r.summary.ends_with("wrong or failed: uint8 min, int32 min"));
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU and driver; scripts/gpu-check.sh runs it on a GPU machine"]
    fn device_errors_name_the_gpu_and_the_bounds() {
        let mut g = gpu_for_test();
        let b = g.alloc(64).unwrap();
        let e = g.upload(At::new(b, 60), &[0u8; 8]).unwrap_err().to_string();
        assert!(e.contains("upload past the end") && e.contains("60..68"), "{e}");
        let e = CudaGpu::open(Some(&[999]), 0, "gpu-check").err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains("GPU 999 does not exist")),
            "{e:?}"
        );
        // Pinned staging round trip.
        let mut s = g.host_staging(1 << 20).unwrap();
        s.bytes_mut().iter_mut().enumerate().for_each(|(i, x)| *x = i as u8);
        let d = g.alloc(1 << 20).unwrap();
        g.upload(At::new(d, 0), s.bytes()).unwrap();
        let mut back = vec![0u8; 1 << 20];
        g.download(At::new(d, 0), &mut back).unwrap();
        assert_eq!(back, s.bytes());
    }
}
