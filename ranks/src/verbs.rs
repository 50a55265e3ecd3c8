//! Safe wrappers over `rdma-sys`: every resource frees itself, queue pairs move through their states
//! as types (created -> INIT -> RTR -> RTS) so a transition out of order does not compile, memory
//! regions own their buffer and get only the access asked for, and every failure names the device,
//! the verb and what to do. All `unsafe` of meshrun's RDMA support is in this module.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::*;

/// What went wrong, with the fix where there is one.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error("this kernel has no RDMA support (ibv_get_device_list: ENOSYS): load a driver (modprobe mlx5_ib; modprobe rdma_rxe for Soft-RoCE) or use --transport tcp")]
    NoKernelRdma,
    #[error("RDMA is loaded but there is no RDMA device: configure one (for Soft-RoCE: rdma link add rxe0 type rxe netdev IFACE) or use --transport tcp")]
    NoDevice,
    #[error("-d {0}: no such RDMA device; devices here: {1}")]
    UnknownDevice(String, String),
    #[error("{verb} failed on {device}: {source}{hint}")]
    Verb {
        verb: &'static str,
        device: String,
        #[source]
        source: std::io::Error,
        hint: &'static str,
    },
    #[error("{device}: work request {wr_id} completed with {status}{hint}")]
    Completion {
        device: String,
        wr_id: u64,
        status: String,
        hint: &'static str,
    },
    #[error("{device}: timed out after {waited:.1?} waiting for {what}")]
    Timeout {
        device: String,
        waited: Duration,
        what: String,
    },
    /// Memory from outside this layer (GPU memory) could not be registered; says why and what to do.
    #[error("{0}")]
    Window(String),
}

/// `IBV_LINK_LAYER_ETHERNET` (a #define in verbs.h, so not in the bindings).
const LINK_LAYER_ETHERNET: u8 = 2;

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

struct Ctx {
    raw: NonNull<ibv_context>,
    name: String,
}

// SAFETY: an ibv_context may be used from any thread (libibverbs is thread-safe); we never hand out
// the raw pointer.
unsafe impl Send for Ctx {}
unsafe impl Sync for Ctx {}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: `raw` came from ibv_open_device and every child resource holds an Arc to us, so
        // nothing uses the context after this.
        unsafe { ibv_close_device(self.raw.as_ptr()) };
    }
}

/// Port attributes meshrun needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortInfo {
    pub active: bool,
    /// Active MTU in bytes (256 .. 4096).
    pub active_mtu: u32,
    pub mtu_enum: u32,
    pub lid: u16,
    pub ethernet: bool,
    pub gid_tbl_len: i32,
}

/// An open RDMA device.
#[derive(Clone)]
pub struct Context(Arc<Ctx>);

impl Context {
    /// Open `name`, or the first device.
    pub fn open(name: Option<&str>) -> Result<Context, VerbsError> {
        let mut n = 0i32;
        // SAFETY: ibv_get_device_list writes the count to `n` and returns a NULL-terminated array (or
        // NULL with errno set), which is freed below once.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            let e = errno();
            return Err(if e.raw_os_error() == Some(libc::ENOSYS) {
                VerbsError::NoKernelRdma
            } else {
                VerbsError::Verb {
                    verb: "ibv_get_device_list",
                    device: "-".into(),
                    source: e,
                    hint: "",
                }
            });
        }
        let mut found = None;
        let mut names = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: i < n: a valid device pointer whose name is owned by the list.
            let dev = unsafe { *list.add(i) };
            // SAFETY: see above.
            let dname = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
                .to_string_lossy()
                .into_owned();
            if found.is_none() && name.is_none_or(|want| want == dname) {
                found = Some((dev, dname.clone()));
            }
            names.push(dname);
        }
        let result = match found {
            None if names.is_empty() => Err(VerbsError::NoDevice),
            None => Err(VerbsError::UnknownDevice(name.unwrap_or("").into(), names.join(", "))),
            Some((dev, dname)) => {
                // SAFETY: `dev` is a valid device of the list, which is still alive here.
                let raw = unsafe { ibv_open_device(dev) };
                match NonNull::new(raw) {
                    Some(raw) => Ok(Context(Arc::new(Ctx { raw, name: dname }))),
                    None => Err(VerbsError::Verb {
                        verb: "ibv_open_device",
                        device: dname,
                        source: errno(),
                        hint: " (is /dev/infiniband/uverbs* accessible to this user?)",
                    }),
                }
            }
        };
        // SAFETY: freed once; opened contexts stay valid after the list is freed.
        unsafe { ibv_free_device_list(list) };
        result
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }

    fn err(&self, verb: &'static str, hint: &'static str) -> VerbsError {
        VerbsError::Verb {
            verb,
            device: self.0.name.clone(),
            source: errno(),
            hint,
        }
    }

    pub fn query_port(&self, port: u8) -> Result<PortInfo, VerbsError> {
        // SAFETY: ibv_port_attr is plain data; zeroed is a valid initial value.
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and a pointer to a local, full-size attr struct (the inline
        // ___ibv_query_port passes its size to the provider).
        let rc = unsafe { ___ibv_query_port(self.0.raw.as_ptr(), port, &mut attr) };
        if rc != 0 {
            return Err(VerbsError::Verb {
                verb: "ibv_query_port",
                device: self.0.name.clone(),
                source: std::io::Error::from_raw_os_error(rc.abs()),
                hint: " (does the device have that port? see meshrun devices)",
            });
        }
        let mtu_enum = attr.active_mtu;
        Ok(PortInfo {
            active: attr.state == ibv_port_state::IBV_PORT_ACTIVE,
            active_mtu: 128u32 << mtu_enum,
            mtu_enum,
            lid: attr.lid,
            ethernet: attr.link_layer == LINK_LAYER_ETHERNET,
            gid_tbl_len: attr.gid_tbl_len,
        })
    }

    pub fn query_gid(&self, port: u8, index: i32) -> Result<[u8; 16], VerbsError> {
        // SAFETY: ibv_gid is plain data.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and a pointer to a local gid.
        if unsafe { ibv_query_gid(self.0.raw.as_ptr(), port, index, &mut gid) } != 0 {
            return Err(self.err(
                "ibv_query_gid",
                " (GID index out of range? see meshrun devices, choose -x N)",
            ));
        }
        // SAFETY: every bit pattern of the union is a valid byte array.
        Ok(unsafe { gid.raw })
    }

    pub fn alloc_pd(&self) -> Result<ProtectionDomain, VerbsError> {
        // SAFETY: valid context.
        let raw = unsafe { ibv_alloc_pd(self.0.raw.as_ptr()) };
        let raw = NonNull::new(raw).ok_or_else(|| self.err("ibv_alloc_pd", ""))?;
        Ok(ProtectionDomain(Arc::new(Pd {
            raw,
            ctx: self.0.clone(),
        })))
    }

    pub fn create_cq(&self, entries: i32) -> Result<CompletionQueue, VerbsError> {
        // SAFETY: valid context; no completion channel, comp vector 0.
        let raw = unsafe {
            ibv_create_cq(
                self.0.raw.as_ptr(),
                entries,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        let raw = NonNull::new(raw).ok_or_else(|| self.err("ibv_create_cq", ""))?;
        Ok(CompletionQueue {
            raw,
            ctx: self.0.clone(),
        })
    }
}

struct Pd {
    raw: NonNull<ibv_pd>,
    ctx: Arc<Ctx>,
}

// SAFETY: protection domains are thread-safe objects of libibverbs; the pointer is never exposed.
unsafe impl Send for Pd {}
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: every MR and QP of this PD holds an Arc to it, so none is alive here.
        unsafe { ibv_dealloc_pd(self.raw.as_ptr()) };
    }
}

/// A protection domain.
#[derive(Clone)]
pub struct ProtectionDomain(Arc<Pd>);

/// The access a memory region grants beyond local reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Access {
    pub local_write: bool,
    pub remote_write: bool,
    pub remote_read: bool,
}

impl Access {
    fn flags(self) -> i32 {
        let mut f = 0u32;
        if self.local_write || self.remote_write {
            // Remote write requires local write.
            f |= ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        }
        if self.remote_write {
            f |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        }
        if self.remote_read {
            f |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        }
        f as i32
    }
}

impl ProtectionDomain {
    fn device(&self) -> String {
        self.0.ctx.name.clone()
    }

    /// Register a new zeroed, page-aligned buffer of `len` bytes with `access`.
    pub fn register(&self, len: usize, access: Access) -> Result<MemoryRegion, VerbsError> {
        let mut buf = AlignedBuf::new(len.max(1));
        // SAFETY: the buffer is owned by the returned region and outlives the registration
        // (deregistered in Drop before the buffer is freed).
        let raw = unsafe { ibv_reg_mr(self.0.raw.as_ptr(), buf.as_mut_ptr().cast(), len.max(1), access.flags()) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            let e = errno();
            let hint = if e.raw_os_error() == Some(libc::ENOMEM) || e.raw_os_error() == Some(libc::EPERM) {
                " (the locked-memory limit is probably too low: raise it with `ulimit -l unlimited`, or LimitMEMLOCK=infinity for services)"
            } else {
                ""
            };
            VerbsError::Verb { verb: "ibv_reg_mr", device: self.device(), source: e, hint }
        })?;
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
    pub unsafe fn register_dmabuf(
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
                Some(libc::ENOMEM) | Some(libc::EPERM) => {
                    " (locked-memory limit too low? raise it with `ulimit -l unlimited`)"
                }
                _ => "",
            };
            VerbsError::Verb {
                verb: "ibv_reg_dmabuf_mr",
                device: self.device(),
                source: e,
                hint,
            }
        })?;
        Ok(ForeignRegion {
            raw,
            addr: iova,
            len,
            path: ForeignPath::DmaBuf,
            _pd: self.0.clone(),
        })
    }

    /// Register `len` bytes of GPU memory at device address `addr` with plain `ibv_reg_mr`, which
    /// works only where the nvidia-peermem module lets the RDMA core pin GPU pages.
    ///
    /// # Safety
    /// `addr..addr + len` must be device memory that stays allocated for the life of the region.
    pub unsafe fn register_device_memory(
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
                Some(libc::ENOMEM) | Some(libc::EPERM) => {
                    " (locked-memory limit too low? raise it with `ulimit -l unlimited`)"
                }
                _ => "",
            };
            VerbsError::Verb {
                verb: "ibv_reg_mr (GPU memory)",
                device: self.device(),
                source: e,
                hint,
            }
        })?;
        Ok(ForeignRegion {
            raw,
            addr,
            len,
            path: ForeignPath::PeerMem,
            _pd: self.0.clone(),
        })
    }

    /// Register `len` bytes of host memory at `addr` that another owner allocated (the GPU
    /// stand-in's buffers), as a [`ForeignRegion`] of path [`ForeignPath::HostStandIn`].
    ///
    /// # Safety
    /// `addr..addr + len` must be host memory that stays allocated for the life of the region.
    pub unsafe fn register_host_memory(
        &self,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<ForeignRegion, VerbsError> {
        // SAFETY: valid PD; the caller guarantees the range (see above).
        let raw = unsafe {
            ibv_reg_mr(
                self.0.raw.as_ptr(),
                addr as *mut std::ffi::c_void,
                len.max(1),
                access.flags(),
            )
        };
        let raw = NonNull::new(raw).ok_or_else(|| VerbsError::Verb {
            verb: "ibv_reg_mr",
            device: self.device(),
            source: errno(),
            hint: " (locked-memory limit too low? raise it with `ulimit -l unlimited`)",
        })?;
        Ok(ForeignRegion {
            raw,
            addr,
            len,
            path: ForeignPath::HostStandIn,
            _pd: self.0.clone(),
        })
    }

    /// A reliable-connected queue pair, in the RESET state, with room for `max_inline` bytes of
    /// inline data per work request (perftest's latency tests use 220); a device that cannot give
    /// that much gets a queue pair without inline data.
    pub fn create_rc_qp(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        depth: u32,
        max_inline: u32,
    ) -> Result<QueuePair<Reset>, VerbsError> {
        self.create_rc_qp_signalling(send_cq, recv_cq, depth, max_inline, true)
    }

    /// As [`Self::create_rc_qp`], but only work requests posted with `signaled` (see
    /// [`QueuePair::post_flagged`]) produce a completion when `signal_all` is false: CQ moderation,
    /// as perftest's bandwidth tests signal one request in 100.
    pub fn create_rc_qp_signalling(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        depth: u32,
        max_inline: u32,
        signal_all: bool,
    ) -> Result<QueuePair<Reset>, VerbsError> {
        match self.create_rc_qp_with(send_cq, recv_cq, depth, max_inline, signal_all) {
            Err(_) if max_inline > 0 => self.create_rc_qp_with(send_cq, recv_cq, depth, 0, signal_all),
            r => r,
        }
    }

    fn create_rc_qp_with(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        depth: u32,
        max_inline: u32,
        signal_all: bool,
    ) -> Result<QueuePair<Reset>, VerbsError> {
        // SAFETY: plain data.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = send_cq.raw.as_ptr();
        init.recv_cq = recv_cq.raw.as_ptr();
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        init.cap.max_send_wr = depth;
        init.cap.max_recv_wr = depth;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.cap.max_inline_data = max_inline;
        init.sq_sig_all = i32::from(signal_all);
        // SAFETY: valid PD and CQs (borrowed for the call; the QP keeps Arcs to them below).
        let raw = unsafe { ibv_create_qp(self.0.raw.as_ptr(), &mut init) };
        let raw = NonNull::new(raw).ok_or_else(|| VerbsError::Verb {
            verb: "ibv_create_qp",
            device: self.device(),
            source: errno(),
            hint: "",
        })?;
        Ok(QueuePair {
            raw,
            pd: self.0.clone(),
            // The device may grant more than asked (written back into `init.cap`).
            max_inline: init.cap.max_inline_data,
            _state: PhantomData,
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

/// Memory outside this layer (GPU memory) that one-sided windows use instead of host buffers.
pub trait WindowMemory: Send {
    /// Register at least `len` bytes of this memory with `pd`, trying the best path first.
    fn register(&mut self, pd: &ProtectionDomain, len: usize, access: Access) -> Result<ForeignRegion, VerbsError>;
}

/// Memory allocated outside this layer (a GPU buffer) that a transport registers in place for
/// zero-copy transfers. The object keeps the memory allocated for as long as it lives, and the
/// transport keeps it for as long as the registration lives.
pub trait NicMemory: Send {
    /// Bytes to register.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Register all of this memory with `pd`, trying the best path first.
    fn register(&self, pd: &ProtectionDomain, access: Access) -> Result<ForeignRegion, VerbsError>;
}

/// How memory outside this layer was registered with the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForeignPath {
    /// `ibv_reg_dmabuf_mr` on a dma-buf file descriptor exported by the GPU driver.
    DmaBuf,
    /// `ibv_reg_mr` on the device address, resolved by the nvidia-peermem kernel module.
    PeerMem,
    /// `ibv_reg_mr` on host memory standing in for GPU memory (tests only).
    HostStandIn,
}

impl ForeignPath {
    pub fn describe(self) -> &'static str {
        match self {
            ForeignPath::DmaBuf => "GPUDirect RDMA via dma-buf (ibv_reg_dmabuf_mr)",
            ForeignPath::PeerMem => "GPUDirect RDMA via nvidia-peermem (ibv_reg_mr on device memory)",
            ForeignPath::HostStandIn => "direct RDMA on host memory standing in for a GPU (tests only)",
        }
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
        // SAFETY: registered by us and deregistered once; the owner frees the memory only after.
        unsafe { ibv_dereg_mr(self.raw.as_ptr()) };
    }
}

/// A completion queue, polled (no interrupts).
pub struct CompletionQueue {
    raw: NonNull<ibv_cq>,
    ctx: Arc<Ctx>,
}

// SAFETY: CQ polling is thread-safe in libibverbs; the pointer is never exposed.
unsafe impl Send for CompletionQueue {}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: QPs using this CQ are destroyed first (they are declared and dropped before it by
        // the owners in this crate), and it is destroyed once.
        unsafe { ibv_destroy_cq(self.raw.as_ptr()) };
    }
}

/// A successful completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub byte_len: u32,
    pub imm: Option<u32>,
}

fn status_hint(status: ibv_wc_status::Type) -> &'static str {
    match status {
        ibv_wc_status::IBV_WC_RETRY_EXC_ERR => " (the peer never answered: is it alive, and are both sides' GIDs of the same RoCE version? see meshrun devices, -x N)",
        ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR => " (the peer posted no receive in time)",
        ibv_wc_status::IBV_WC_REM_ACCESS_ERR => " (the peer's memory region does not grant this access)",
        _ => "",
    }
}

impl CompletionQueue {
    /// Poll once, without waiting: up to `max` completions, stopping at the first error completion
    /// (returned as Err with its work request id).
    pub fn poll(&self, max: usize, out: &mut Vec<Completion>) -> Result<(), VerbsError> {
        const N: usize = 16;
        let mut wcs: [std::mem::MaybeUninit<ibv_wc>; N] = [const { std::mem::MaybeUninit::uninit() }; N];
        let want = max.clamp(1, N) as i32;
        // SAFETY: valid CQ and room for `want` entries; ibv_poll_cq initialises the first `got`.
        // (No zero-filling: this runs in a busy loop.)
        let got = unsafe { ibv_poll_cq(self.raw.as_ptr(), want, wcs.as_mut_ptr().cast()) };
        if got < 0 {
            return Err(VerbsError::Verb {
                verb: "ibv_poll_cq",
                device: self.ctx.name.clone(),
                source: errno(),
                hint: "",
            });
        }
        // SAFETY: the first `got` entries were written by ibv_poll_cq.
        let wcs: &[ibv_wc] = unsafe { std::slice::from_raw_parts(wcs.as_ptr().cast(), got as usize) };
        for wc in wcs {
            if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                // SAFETY: ibv_wc_status_str returns a static string for any status.
                let s = unsafe { CStr::from_ptr(ibv_wc_status_str(wc.status)) }
                    .to_string_lossy()
                    .into_owned();
                return Err(VerbsError::Completion {
                    device: self.ctx.name.clone(),
                    wr_id: wc.wr_id,
                    status: s,
                    hint: status_hint(wc.status),
                });
            }
            let has_imm = wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
            // SAFETY: the immediate is valid when IBV_WC_WITH_IMM is set.
            let imm = has_imm.then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data }));
            out.push(Completion {
                wr_id: wc.wr_id,
                byte_len: wc.byte_len,
                imm,
            });
        }
        Ok(())
    }

    /// Wait for `n` completions, failing on the first error completion or at `deadline`.
    pub fn wait(&self, n: usize, deadline: Instant, what: &str) -> Result<Vec<Completion>, VerbsError> {
        let start = Instant::now();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let before = out.len();
            self.poll(n - out.len(), &mut out)?;
            if out.len() == before {
                if Instant::now() >= deadline {
                    return Err(VerbsError::Timeout {
                        device: self.ctx.name.clone(),
                        waited: start.elapsed(),
                        what: format!("{what} ({} of {n} completions)", out.len()),
                    });
                }
                std::hint::spin_loop();
            }
        }
        Ok(out)
    }
}

/// Queue pair states, as types.
pub struct Reset;
pub struct Init;
pub struct Rtr;
pub struct Rts;

/// States in which receives may be posted (INIT and later).
pub trait CanRecv {}
impl CanRecv for Init {}
impl CanRecv for Rtr {}
impl CanRecv for Rts {}

/// What the other side of a connection sends us to connect to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    /// Active MTU enum (IBV_MTU_*).
    pub mtu: u32,
    pub addr: u64,
    pub rkey: u32,
}

/// Size of an encoded endpoint.
pub const ENDPOINT_BYTES: usize = 48;

impl Endpoint {
    pub fn to_bytes(&self) -> [u8; ENDPOINT_BYTES] {
        let mut b = [0u8; ENDPOINT_BYTES];
        b[0..4].copy_from_slice(&self.qpn.to_le_bytes());
        b[4..8].copy_from_slice(&self.psn.to_le_bytes());
        b[8..10].copy_from_slice(&self.lid.to_le_bytes());
        b[10..26].copy_from_slice(&self.gid);
        b[26..30].copy_from_slice(&self.mtu.to_le_bytes());
        b[30..38].copy_from_slice(&self.addr.to_le_bytes());
        b[38..42].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }
    pub fn from_bytes(b: &[u8]) -> Option<Endpoint> {
        if b.len() < ENDPOINT_BYTES {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[10..26]);
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[30..38]);
        Some(Endpoint {
            qpn: u32_at(0),
            psn: u32_at(4),
            lid: u16::from_le_bytes([b[8], b[9]]),
            gid,
            mtu: u32_at(26),
            addr: u64::from_le_bytes(addr),
            rkey: u32_at(38),
        })
    }
}

/// A reliable-connected queue pair in state `S`.
pub struct QueuePair<S> {
    raw: NonNull<ibv_qp>,
    pd: Arc<Pd>,
    /// Sends and writes up to this many bytes are posted inline (copied into the work request).
    max_inline: u32,
    _state: PhantomData<S>,
}

// SAFETY: posting to a QP is thread-safe in libibverbs; the pointer is never exposed.
unsafe impl<S> Send for QueuePair<S> {}

impl<S> Drop for QueuePair<S> {
    fn drop(&mut self) {
        // SAFETY: created by us and destroyed once (a state change moves ownership without dropping).
        unsafe { ibv_destroy_qp(self.raw.as_ptr()) };
    }
}

impl<S> QueuePair<S> {
    pub fn qpn(&self) -> u32 {
        // SAFETY: valid QP for its life.
        unsafe { self.raw.as_ref().qp_num }
    }

    /// Bytes a send or write may carry inline.
    pub fn max_inline(&self) -> u32 {
        self.max_inline
    }

    fn device(&self) -> String {
        self.pd.ctx.name.clone()
    }

    fn modify<T>(
        self,
        attr: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
        verb: &'static str,
        hint: &'static str,
    ) -> Result<QueuePair<T>, VerbsError> {
        // SAFETY: valid QP and attribute struct; the mask names only fields we set.
        let rc = unsafe { ibv_modify_qp(self.raw.as_ptr(), attr, mask.0 as i32) };
        if rc != 0 {
            return Err(VerbsError::Verb {
                verb,
                device: self.device(),
                source: std::io::Error::from_raw_os_error(rc.abs()),
                hint,
            });
        }
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is not dropped; its fields move into the new state's value exactly once.
        let pd = unsafe { std::ptr::read(&me.pd) };
        Ok(QueuePair {
            raw: me.raw,
            pd,
            max_inline: me.max_inline,
            _state: PhantomData,
        })
    }

    /// Post a receive of `len` bytes at `offset` of `mr`.
    pub fn post_recv(&self, mr: &dyn Registered, offset: usize, len: usize, wr_id: u64) -> Result<(), VerbsError>
    where
        S: CanRecv,
    {
        assert!(offset + len <= mr.region_len(), "receive outside the memory region");
        let mut sge = ibv_sge {
            addr: mr.addr() + offset as u64,
            length: len as u32,
            lkey: mr.lkey(),
        };
        // SAFETY: plain data.
        let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        let mut bad = std::ptr::null_mut();
        // SAFETY: valid QP; the SGE points into a registered region that the caller keeps alive
        // until the completion is polled (regions are owned by the transport alongside the QP).
        let rc = unsafe { ibv_post_recv(self.raw.as_ptr(), &mut wr, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::Verb {
                verb: "ibv_post_recv",
                device: self.device(),
                source: std::io::Error::from_raw_os_error(rc.abs()),
                hint: " (receive queue full?)",
            });
        }
        Ok(())
    }
}

impl QueuePair<Reset> {
    /// RESET -> INIT, granting remote peers `access` to this QP's memory.
    pub fn into_init(self, port: u8, access: Access) -> Result<QueuePair<Init>, VerbsError> {
        // SAFETY: plain data.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = port;
        a.qp_access_flags = access.flags() as u32;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
            | ibv_qp_attr_mask::IBV_QP_PORT
            | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
        self.modify(
            &mut a,
            mask,
            "ibv_modify_qp(INIT)",
            " (does the port exist? see meshrun devices)",
        )
    }
}

impl QueuePair<Init> {
    /// INIT -> RTR: connect to `remote`. `gid_index` Some for RoCE (a GRH is needed), None for IB.
    pub fn into_rtr(
        self,
        remote: &Endpoint,
        port: u8,
        path_mtu: u32,
        gid_index: Option<u8>,
    ) -> Result<QueuePair<Rtr>, VerbsError> {
        // SAFETY: plain data.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = path_mtu;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.sl = 0;
        a.ah_attr.port_num = port;
        if let Some(gi) = gid_index {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = remote.gid;
            a.ah_attr.grh.sgid_index = gi;
            a.ah_attr.grh.hop_limit = 64;
        }
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_AV
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU
            | ibv_qp_attr_mask::IBV_QP_DEST_QPN
            | ibv_qp_attr_mask::IBV_QP_RQ_PSN
            | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut a, mask, "ibv_modify_qp(RTR)", " (is the remote GID reachable from this GID index? for RoCE pass -x N with a routable GID; see meshrun devices)")
    }
}

impl QueuePair<Rtr> {
    /// RTR -> RTS. A dead peer surfaces as a retry-exceeded completion after about
    /// 7 x 4.096 us x 2^14 = 0.5 s, never as a hang. (A retry count of 7 means "forever" to some
    /// providers, rxe among them, so it is 6; the RNR retry count stays 7, as a live peer that is
    /// late to post a receive is not an error.)
    pub fn into_rts(self, psn: u32) -> Result<QueuePair<Rts>, VerbsError> {
        // SAFETY: plain data.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 6;
        a.rnr_retry = 7;
        a.sq_psn = psn;
        a.max_rd_atomic = 16;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | ibv_qp_attr_mask::IBV_QP_SQ_PSN
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut a, mask, "ibv_modify_qp(RTS)", "")
    }
}

/// What a send-side work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    Send,
    SendImm(u32),
    Write { remote_addr: u64, rkey: u32 },
    WriteImm { remote_addr: u64, rkey: u32, imm: u32 },
    Read { remote_addr: u64, rkey: u32 },
}

impl QueuePair<Rts> {
    /// Post one work request on `len` bytes at `offset` of `mr`, signalled.
    pub fn post(
        &self,
        op: SendOp,
        mr: &dyn Registered,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<(), VerbsError> {
        self.post_flagged(op, mr, offset, len, wr_id, true)
    }

    /// Post one work request; on a queue pair created without `signal_all`, only a `signaled` one
    /// produces a completion, and that completion also retires the unsignalled ones before it.
    pub fn post_flagged(
        &self,
        op: SendOp,
        mr: &dyn Registered,
        offset: usize,
        len: usize,
        wr_id: u64,
        signaled: bool,
    ) -> Result<(), VerbsError> {
        assert!(
            offset + len <= mr.region_len(),
            "work request outside the memory region"
        );
        let mut sge = ibv_sge {
            addr: mr.addr() + offset as u64,
            length: len as u32,
            lkey: mr.lkey(),
        };
        // SAFETY: plain data.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        // A zero-byte request has no scatter/gather entry: some NICs read an entry of length 0
        // as 2 GiB.
        if len > 0 {
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
        }
        wr.send_flags = if signaled {
            ibv_send_flags::IBV_SEND_SIGNALED.0
        } else {
            0
        };
        // Small sends and writes go inline: the NIC takes the bytes from the work request and
        // skips a DMA read of the buffer (reads cannot be inline).
        // GPU memory is never inline: the CPU cannot read it.
        if len > 0
            && len as u64 <= u64::from(self.max_inline)
            && mr.host_visible()
            && !matches!(op, SendOp::Read { .. })
        {
            wr.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        let (opcode, rdma, imm) = match op {
            SendOp::Send => (ibv_wr_opcode::IBV_WR_SEND, None, None),
            SendOp::SendImm(i) => (ibv_wr_opcode::IBV_WR_SEND_WITH_IMM, None, Some(i)),
            SendOp::Write { remote_addr, rkey } => (ibv_wr_opcode::IBV_WR_RDMA_WRITE, Some((remote_addr, rkey)), None),
            SendOp::WriteImm { remote_addr, rkey, imm } => (
                ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
                Some((remote_addr, rkey)),
                Some(imm),
            ),
            SendOp::Read { remote_addr, rkey } => (ibv_wr_opcode::IBV_WR_RDMA_READ, Some((remote_addr, rkey)), None),
        };
        wr.opcode = opcode;
        if let Some(i) = imm {
            wr.imm_data_invalidated_rkey_union.imm_data = i.to_be();
        }
        if let Some((remote_addr, rkey)) = rdma {
            wr.wr.rdma.remote_addr = remote_addr;
            wr.wr.rdma.rkey = rkey;
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: valid QP in RTS; the SGE points into a registered region kept alive by the
        // caller until the completion is polled.
        let rc = unsafe { ibv_post_send(self.raw.as_ptr(), &mut wr, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::Verb {
                verb: "ibv_post_send",
                device: self.device(),
                source: std::io::Error::from_raw_os_error(rc.abs()),
                hint: " (send queue full?)",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_round_trip() {
        let e = Endpoint {
            qpn: 0x11,
            psn: 0xabcdef,
            lid: 0x12,
            gid: [7; 16],
            mtu: 5,
            addr: 0xdead_beef_0000,
            rkey: 0x42,
        };
        assert_eq!(Endpoint::from_bytes(&e.to_bytes()), Some(e));
        assert_eq!(Endpoint::from_bytes(&[0; 3]), None);
    }

    #[test]
    fn access_flags_are_least_needed() {
        assert_eq!(Access::default().flags(), 0);
        let w = Access {
            remote_write: true,
            ..Access::default()
        }
        .flags() as u32;
        assert_eq!(
            w,
            ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
        );
        let r = Access {
            remote_read: true,
            ..Access::default()
        }
        .flags() as u32;
        assert_eq!(r, ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);
    }

    /// Where the kernel has no RDMA (this project's machines and CI), opening a device is a clear
    /// error, not a panic; where it has RDMA (the Soft-RoCE VM), it opens.
    #[test]
    fn open_says_what_is_missing() {
        let kernel_has_rdma = std::path::Path::new("/sys/class/infiniband_verbs").exists();
        match Context::open(None) {
            Err(VerbsError::NoKernelRdma) => assert!(!kernel_has_rdma),
            Err(VerbsError::NoDevice) => assert!(kernel_has_rdma),
            Ok(c) => {
                assert!(kernel_has_rdma);
                assert!(!c.name().is_empty());
            }
            Err(e) => panic!("unexpected: {e}"),
        }
        if !kernel_has_rdma {
            let e = Context::open(Some("mlx5_0"))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("ENOSYS") && e.contains("--transport tcp"), "{e}");
        }
    }
}
