//! What a GPU offers GPUDirect RDMA, asked of the driver with no NIC: pointer attributes,
//! dma-buf export, pool buffers.

use super::context::has_symbol;
use super::*;

/// Whether the driver calls the memory at `ptr` usable for GPUDirect RDMA
/// (`CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE`).
pub(super) fn gpudirect_capable(ctx: &CudaContext, ptr: sys::CUdeviceptr) -> Result<bool, String> {
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
pub(super) fn export_dmabuf(ctx: &CudaContext, addr: u64, size: usize) -> Result<std::os::fd::OwnedFd, String> {
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
pub(super) fn pool_buffer_capable(ctx: &Arc<CudaContext>) -> Result<bool, String> {
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
