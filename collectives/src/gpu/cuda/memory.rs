//! Device memory placed as GPUDirect RDMA needs it: plain `cuMemAlloc` on host-page windows.

use super::*;

/// The page-aligned start of a `len`-byte window inside an `alloc`-byte allocation at `raw`, where
/// the window (rounded up to whole pages) fits.
pub(super) fn page_window(raw: u64, alloc: usize, len: usize, page: usize) -> Option<u64> {
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
pub(super) struct DevMem {
    pub(super) ctx: Arc<CudaContext>,
    /// What cuMemAlloc returned (what cuMemFree takes).
    pub(super) raw: sys::CUdeviceptr,
    pub(super) base: u64,
    pub(super) size: usize,
    /// A peer's buffer opened by CUDA IPC (`cuIpcOpenMemHandle`): closed, not freed.
    pub(super) opened: bool,
}

impl DevMem {
    /// At least `len` bytes, uninitialised, on page boundaries of `page` bytes.
    pub(super) fn new(ctx: &Arc<CudaContext>, len: usize, page: usize) -> Result<DevMem, DriverError> {
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
                opened: false,
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
        if self.opened {
            // SAFETY: `raw` came from cuIpcOpenMemHandle in this context and is closed once, here;
            // every copy into it completed before its call returned.
            let _ = unsafe { sys::cuIpcCloseMemHandle(self.raw) };
            return;
        }
        // SAFETY: `raw` came from cuMemAlloc in this context and is freed once, here. Every device
        // operation on it completed before its call returned, and a NIC registration holds an
        // `Arc` of this allocation, so none outlives it.
        let _ = unsafe { result::free_sync(self.raw) };
    }
}

/// A device buffer: shared, so a registration with the NIC keeps it alive after `free`.
pub(super) struct DevAlloc {
    pub(super) mem: Arc<DevMem>,
    /// Bytes asked for (the allocation is `mem.size`, whole host pages).
    pub(super) len: usize,
}
