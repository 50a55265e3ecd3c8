//! Registered memory: buffers this layer owns, and memory it does not (GPU memory).

use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::*;

use super::*;
use crate::transport::rdma::{ForeignPath, Memory, NicMemory, WindowMemory};

/// A window of memory outside this layer shared between the mesh and the regions registered on
/// it (each region keeps it alive until it is deregistered).
pub type SharedWindow = Arc<std::sync::Mutex<Box<dyn WindowMemory>>>;

impl ProtectionDomain {
    /// Register a new zeroed, page-aligned buffer of `len` bytes with `access`.
    pub fn register(&self, len: usize, access: Access) -> Result<MemoryRegion, VerbsError> {
        let mut buf = AlignedBuf::new(len.max(1));
        // SAFETY: the buffer is owned by the returned region and outlives the registration
        // (deregistered in Drop before the buffer is freed).
        let raw = unsafe { ibv_reg_mr(self.0.raw.as_ptr(), buf.as_mut_ptr().cast(), len.max(1), access.flags()) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            let e = errno();
            let hint = if memlock(&e) {
                " (the locked-memory limit is probably too low: raise it with `ulimit -l unlimited`, or LimitMEMLOCK=infinity for services)"
            } else {
                ""
            };
            VerbsError::verb("ibv_reg_mr", self.device(), e, hint)
        })?;
        super::usage::registered(len);
        Ok(MemoryRegion {
            raw,
            buf,
            len,
            _pd: self.0.clone(),
        })
    }

    /// Register `len` bytes of a dma-buf (from the GPU driver) at `offset`, seen by work
    /// requests at virtual address `iova`.
    ///
    /// # Safety
    /// `fd` must be a dma-buf of at least `offset + len` bytes whose memory stays allocated for
    /// the life of the returned region.
    unsafe fn register_dmabuf(
        &self,
        fd: i32,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<ForeignRegion, VerbsError> {
        // SAFETY: valid PD; the caller guarantees the dma-buf (see above). The kernel takes its own
        // reference on the dma-buf, so the fd may be closed after this call.
        let raw = unsafe { ibv_reg_dmabuf_mr(self.0.raw.as_ptr(), offset, len, iova, fd, access.flags()) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            let e = errno();
            let hint = match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EPROTONOSUPPORT) => {
                    " (this NIC driver or kernel cannot import dma-bufs: needs Linux 5.12+ and an RDMA driver with \
                     dma-buf support, such as mlx5; or load nvidia-peermem)"
                }
                _ => "",
            };
            VerbsError::registration("ibv_reg_dmabuf_mr", self.device(), e, hint)
        })?;
        super::usage::registered(len);
        Ok(ForeignRegion {
            raw,
            addr: iova,
            len,
            path: ForeignPath::DmaBuf,
            _pd: self.0.clone(),
            _keep: None,
        })
    }

    /// Register `len` bytes of GPU memory at device address `addr` with plain `ibv_reg_mr`, which
    /// works only where the nvidia-peermem module lets the RDMA core pin GPU pages.
    ///
    /// # Safety
    /// `addr..addr + len` must be device memory that stays allocated for the life of the region.
    unsafe fn register_device_memory(
        &self,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<ForeignRegion, VerbsError> {
        // SAFETY: valid PD; the caller guarantees the range (see above). The CPU never dereferences it.
        let raw = unsafe { ibv_reg_mr(self.0.raw.as_ptr(), addr as *mut std::ffi::c_void, len, access.flags()) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            let e = errno();
            let hint = match e.raw_os_error() {
                Some(libc::EFAULT) | Some(libc::EINVAL) => {
                    " (the RDMA core cannot pin GPU memory: load the nvidia-peermem module (modprobe nvidia-peermem), \
                     or use a GPU driver and kernel with dma-buf)"
                }
                _ => "",
            };
            VerbsError::registration("ibv_reg_mr (GPU memory)", self.device(), e, hint)
        })?;
        super::usage::registered(len);
        Ok(ForeignRegion {
            raw,
            addr,
            len,
            path: ForeignPath::PeerMem,
            _pd: self.0.clone(),
            _keep: None,
        })
    }

    /// Register all of `mem` in place (a GPU buffer) for zero-copy transfers; the region keeps
    /// `mem`, so the memory outlives the registration.
    pub fn register_nic_memory(&self, mem: Box<dyn NicMemory>, access: Access) -> Result<ForeignRegion, VerbsError> {
        // SAFETY: NicMemory's contract keeps the range allocated while `mem` lives, and the
        // region holds `mem` until after it is deregistered (fields drop after `Drop::drop`).
        let mut region = unsafe { self.register_memory(mem.memory(), access) }?;
        region._keep = Some(Box::new(mem));
        Ok(region)
    }

    /// Register at least `len` bytes of `window` (GPU memory for one-sided tests); the region
    /// keeps the window, so the memory outlives the registration.
    pub fn register_window(
        &self,
        window: &SharedWindow,
        len: usize,
        access: Access,
    ) -> Result<ForeignRegion, VerbsError> {
        let mem = window
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .memory(len)
            .map_err(VerbsError::Window)?;
        // SAFETY: WindowMemory's contract keeps every range it described allocated while the
        // window lives, and the region holds the window until after it is deregistered.
        let mut region = unsafe { self.register_memory(mem, access) }?;
        region._keep = Some(Box::new(window.clone()));
        Ok(region)
    }

    /// Register memory described by its owner ([`Memory`]): host memory in place; GPU memory by
    /// its dma-buf where there is one, else by its device address (nvidia-peermem), the reasons
    /// each path failed named in the error.
    ///
    /// # Safety
    /// The memory `mem` describes must stay allocated for the life of the returned region (the
    /// contract of [`crate::NicMemory`] and [`crate::WindowMemory`]).
    unsafe fn register_memory(&self, mem: Memory, access: Access) -> Result<ForeignRegion, VerbsError> {
        use std::os::fd::AsRawFd;
        match mem {
            // SAFETY: the caller keeps the range allocated (see above).
            Memory::Host { addr, len } => unsafe { self.register_host_memory(addr, len, access) },
            Memory::Device {
                addr,
                len,
                dmabuf,
                owner,
            } => {
                let len = len.max(1);
                let mut why = Vec::new();
                match dmabuf {
                    // SAFETY: `fd` is a dma-buf of the allocation holding addr..addr+len, which
                    // the caller keeps (see above).
                    Ok(d) => match unsafe { self.register_dmabuf(d.fd.as_raw_fd(), d.offset, len, addr, access) } {
                        Ok(r) => return Ok(r),
                        Err(e) => why.push(e.to_string()),
                    },
                    Err(e) => why.push(e),
                }
                if DMABUF_ONLY.load(std::sync::atomic::Ordering::Relaxed) {
                    return Err(VerbsError::Window(format!(
                        "{owner} memory cannot be registered by dma-buf, and --use_cuda_dmabuf rules out \
                         nvidia-peermem: {}",
                        why.join("; ")
                    )));
                }
                // SAFETY: addr..addr+len is device memory the caller keeps (see above).
                unsafe { self.register_device_memory(addr, len, access) }.map_err(|e| {
                    why.push(e.to_string());
                    VerbsError::Window(format!(
                        "{owner} memory cannot be registered for GPUDirect RDMA: {}",
                        why.join("; then ")
                    ))
                })
            }
        }
    }

    /// Register `len` bytes of host memory at `addr` that another owner allocated (the GPU
    /// stand-in's buffers), as a [`ForeignRegion`] of path [`ForeignPath::HostStandIn`].
    ///
    /// # Safety
    /// `addr..addr + len` must be host memory that stays allocated for the life of the region.
    unsafe fn register_host_memory(&self, addr: u64, len: usize, access: Access) -> Result<ForeignRegion, VerbsError> {
        // SAFETY: valid PD; the caller guarantees the range (see above).
        let raw = unsafe {
            ibv_reg_mr(
                self.0.raw.as_ptr(),
                addr as *mut std::ffi::c_void,
                len.max(1),
                access.flags(),
            )
        };
        // Whatever the errno, the hint (as it always was): host memory fails to register for lack
        // of locked memory far more often than for anything else.
        let raw =
            NonNull::new(raw).ok_or_else(|| VerbsError::verb("ibv_reg_mr", self.device(), errno(), MEMLOCK_HINT))?;
        super::usage::registered(len);
        Ok(ForeignRegion {
            raw,
            addr,
            len,
            path: ForeignPath::HostStandIn,
            _pd: self.0.clone(),
            _keep: None,
        })
    }
}

/// Page-aligned heap memory, without a custom allocator: over-allocate and start at a page boundary.
struct AlignedBuf {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let raw = vec![0u8; len + 4096];
        let off = (4096 - raw.as_ptr() as usize % 4096) % 4096;
        AlignedBuf { raw, off, len }
    }
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.raw[self.off..].as_mut_ptr()
    }
}

/// A registered buffer.
pub struct MemoryRegion {
    raw: NonNull<ibv_mr>,
    buf: AlignedBuf,
    len: usize,
    _pd: Arc<Pd>,
}

// SAFETY: the region is owned data plus an MR handle; verbs on it are thread-safe.
unsafe impl Send for MemoryRegion {}

impl MemoryRegion {
    pub fn lkey(&self) -> u32 {
        // SAFETY: valid MR for the region's life.
        unsafe { self.raw.as_ref().lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { self.raw.as_ref().rkey }
    }
    pub fn addr(&self) -> u64 {
        self.buf.raw[self.buf.off..].as_ptr() as u64
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.buf.raw[self.buf.off..self.buf.off + self.buf.len.min(self.len)]
    }

    /// Read a u64 the NIC may write at any time (a remote peer's RDMA write).
    pub fn read_u64_volatile(&self, offset: usize) -> u64 {
        assert!(
            offset.is_multiple_of(8) && offset + 8 <= self.len,
            "unaligned or out-of-range u64"
        );
        let p = self.buf.raw[self.buf.off + offset..].as_ptr() as *const u64;
        // SAFETY: in bounds and 8-byte aligned (the buffer is page-aligned, offset % 8 == 0); a
        // volatile read because the memory changes outside Rust's view (DMA by the NIC).
        unsafe { std::ptr::read_volatile(p) }
    }
    /// Read a byte the NIC may write at any time (the last byte of a ping-pong message).
    pub fn read_u8_volatile(&self, offset: usize) -> u8 {
        assert!(offset < self.len, "byte outside the region");
        let p = self.buf.raw[self.buf.off + offset..].as_ptr();
        // SAFETY: in bounds; volatile because the NIC writes this memory outside Rust's view.
        unsafe { std::ptr::read_volatile(p) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let (o, l) = (self.buf.off, self.buf.len.min(self.len));
        &mut self.buf.raw[o..o + l]
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        super::usage::deregistered(self.len);
        // SAFETY: registered by us, deregistered once, before `buf` is freed.
        unsafe { ibv_dereg_mr(self.raw.as_ptr()) };
    }
}

/// A registered range a work request can point into: host memory this layer owns
/// ([`MemoryRegion`]) or memory it does not ([`ForeignRegion`], e.g. GPU memory).
pub trait Registered {
    fn addr(&self) -> u64;
    /// Bytes registered.
    fn region_len(&self) -> usize;
    fn lkey(&self) -> u32;
    fn rkey(&self) -> u32;
    /// Whether the CPU may read this memory (only such memory can be posted inline).
    fn host_visible(&self) -> bool;
}

impl Registered for MemoryRegion {
    fn addr(&self) -> u64 {
        MemoryRegion::addr(self)
    }
    fn region_len(&self) -> usize {
        self.len
    }
    fn lkey(&self) -> u32 {
        MemoryRegion::lkey(self)
    }
    fn rkey(&self) -> u32 {
        MemoryRegion::rkey(self)
    }
    fn host_visible(&self) -> bool {
        true
    }
}

/// A memory region over memory this layer does not own (GPU memory). The owner keeps the memory
/// allocated for the region's life (see the safety contracts of the constructors).
pub struct ForeignRegion {
    raw: NonNull<ibv_mr>,
    addr: u64,
    len: usize,
    path: ForeignPath,
    _pd: Arc<Pd>,
    /// The owner of the memory (a [`NicMemory`] or a [`SharedWindow`]), kept until after the
    /// region is deregistered.
    _keep: Option<Box<dyn Send>>,
}

// SAFETY: an MR handle over memory owned elsewhere; verbs on it are thread-safe.
unsafe impl Send for ForeignRegion {}

impl ForeignRegion {
    pub fn path(&self) -> ForeignPath {
        self.path
    }
}

impl Registered for ForeignRegion {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn region_len(&self) -> usize {
        self.len
    }
    fn lkey(&self) -> u32 {
        // SAFETY: valid MR for the region's life.
        unsafe { self.raw.as_ref().lkey }
    }
    fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { self.raw.as_ref().rkey }
    }
    fn host_visible(&self) -> bool {
        false
    }
}

impl Drop for ForeignRegion {
    fn drop(&mut self) {
        super::usage::deregistered(self.len);
        // SAFETY: registered by us and deregistered once; the owner frees the memory only after.
        unsafe { ibv_dereg_mr(self.raw.as_ptr()) };
    }
}

/// `--use_cuda_dmabuf`: GPU memory is registered by dma-buf only, never by its device address
/// (nvidia-peermem), so a run proves the dma-buf path or fails saying why.
static DMABUF_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Register GPU memory by dma-buf only (`true`), or dma-buf first and nvidia-peermem after (the
/// default). Set once, before any registration.
pub fn require_dmabuf(only: bool) {
    DMABUF_ONLY.store(only, std::sync::atomic::Ordering::Relaxed);
}
