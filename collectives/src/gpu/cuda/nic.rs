//! Registering GPU memory with an RDMA NIC: by dma-buf where the driver exports one, else by
//! plain `ibv_reg_mr` (nvidia-peermem); the one-sided window of `pairwise --use-cuda`.

use super::probe::export_dmabuf;
use super::*;

/// What registering GPU memory with a NIC needs: the context (to export dma-bufs) and whether
/// the driver can.
#[derive(Clone)]
pub(super) struct Registrar {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) info: GpuInfo,
    pub(super) dmabuf: Result<(), String>,
}

impl Registrar {
    /// A dma-buf file descriptor for `size` bytes at `addr` (a [`DevMem`] window).
    fn export(&self, addr: u64, size: usize) -> Result<std::os::fd::OwnedFd, String> {
        export_dmabuf(&self.ctx, addr, size).map_err(|e| format!("GPU {}: {e}", self.info.ordinal))
    }

    /// `len` bytes at `addr`, the start of a `size`-byte buffer of this context, as a NIC
    /// registers it: with a dma-buf of the buffer where the driver exports one (or why not).
    fn describe(&self, addr: u64, size: usize, len: usize) -> ranks::Memory {
        ranks::Memory::Device {
            addr,
            len,
            dmabuf: self
                .dmabuf
                .clone()
                .and_then(|()| self.export(addr, size).map(|fd| ranks::DmaBuf { fd, offset: 0 })),
            owner: format!("GPU {} ({})", self.info.ordinal, self.info.name),
        }
    }
}

/// A device buffer handed to a transport for registration; it keeps the allocation alive.
pub(super) struct GpuNicMemory {
    pub(super) mem: Arc<DevMem>,
    pub(super) len: usize,
    pub(super) reg: Registrar,
}

// SAFETY: base..base+size is the window of the allocation `mem` holds, which lives as long as
// this object.
unsafe impl ranks::NicMemory for GpuNicMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn memory(&self) -> ranks::Memory {
        self.reg.describe(self.mem.base, self.mem.size, self.len.max(1))
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

// SAFETY: every range described is one of `self.bufs`, never freed before this window is dropped.
unsafe impl ranks::WindowMemory for GpuWindow {
    fn memory(&mut self, len: usize) -> Result<ranks::Memory, String> {
        let (addr, size) = self.buffer(len).map_err(|e| e.to_string())?;
        let reg = Registrar {
            ctx: self.gpu.ctx.clone(),
            info: self.gpu.info.clone(),
            dmabuf: self.gpu.dmabuf.clone(),
        };
        Ok(reg.describe(addr, size, len.max(1)))
    }
}
