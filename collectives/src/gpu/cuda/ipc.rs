//! CUDA IPC between the ranks of one node: a device buffer exported (`cuIpcGetMemHandle`) and a
//! peer's buffer opened here (`cuIpcOpenMemHandle`), which copies then write into like any
//! buffer of this GPU; it is closed (`cuIpcCloseMemHandle`) when freed.

use super::*;
use crate::gpu::peer::{PeerHandle, HANDLE_BYTES};

/// Advice when a peer's buffer cannot be opened.
const OPEN_HINT: &str = "; the ranks cannot share GPU memory (containers without a shared IPC namespace or \
    /dev/shm, GPUs without peer access, or a handle from another node): run with --p2p net";

impl CudaGpu {
    /// `buf`'s allocation handle, and where the buffer lies in that allocation.
    pub(super) fn export_ipc(&mut self, buf: BufId) -> Result<PeerHandle, GpuError> {
        let a = self.bufs.get(buf).and_then(|b| b.as_ref());
        let a = a.filter(|a| !a.mem.opened).ok_or(GpuError::OutOfBounds {
            buf,
            what: "exporting a freed buffer, or one that is a peer's",
            range: 0..0,
            len: 0,
        })?;
        let (raw, offset, len) = (a.mem.raw, a.mem.base - a.mem.raw, a.len as u64);
        self.bind("cuCtxSetCurrent")?;
        let mut h = sys::CUipcMemHandle {
            reserved: [0; HANDLE_BYTES],
        };
        // SAFETY: `h` is a valid place for the answer; `raw` is the base of a live cuMemAlloc
        // allocation of this context (the current one, bound above).
        let r = unsafe { sys::cuIpcGetMemHandle(&mut h, raw) };
        r.result().map_err(|e| self.fail("cuIpcGetMemHandle", e))?;
        let mut handle = [0u8; HANDLE_BYTES];
        for (d, s) in handle.iter_mut().zip(h.reserved) {
            *d = s as u8;
        }
        Ok(PeerHandle { handle, offset, len })
    }

    /// Open the buffer `p` describes, exported by another process, as a buffer of this GPU.
    pub(super) fn open_ipc(&mut self, p: &PeerHandle) -> Result<BufId, GpuError> {
        self.bind("cuCtxSetCurrent")?;
        let mut h = sys::CUipcMemHandle {
            reserved: [0; HANDLE_BYTES],
        };
        for (d, s) in h.reserved.iter_mut().zip(p.handle) {
            *d = s as std::ffi::c_char;
        }
        let mut ptr: sys::CUdeviceptr = 0;
        let lazy = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as std::ffi::c_uint;
        // SAFETY: `ptr` is a valid place for the answer, the handle is passed by value, and the
        // flag is the one the driver defines; the context is current (bound above).
        let r = unsafe { sys::cuIpcOpenMemHandle_v2(&mut ptr, h, lazy) };
        r.result().map_err(|e| {
            let mut err = self.fail("cuIpcOpenMemHandle", e);
            if let GpuError::Call { hint, .. } = &mut err {
                *hint = OPEN_HINT.to_string();
            }
            err
        })?;
        let mem = DevMem {
            ctx: self.ctx.clone(),
            raw: ptr,
            base: ptr + p.offset,
            size: p.len as usize,
            opened: true,
        };
        self.bufs.push(Some(DevAlloc {
            mem: Arc::new(mem),
            len: p.len as usize,
        }));
        Ok(self.bufs.len() - 1)
    }
}
