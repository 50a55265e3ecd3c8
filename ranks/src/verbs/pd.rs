//! Protection domains and the access a registration grants.

use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::*;

use super::*;

pub(super) struct Pd {
    pub(super) raw: NonNull<ibv_pd>,
    pub(super) ctx: Arc<OpenDevice>,
}

// SAFETY: protection domains are thread-safe objects of libibverbs; the pointer is never exposed.
unsafe impl Send for Pd {}
// SAFETY: as for Send: libibverbs serialises what needs it; shared use is sound.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: every MR and QP of this PD holds an Arc to it, so none is alive here.
        unsafe { ibv_dealloc_pd(self.raw.as_ptr()) };
    }
}

/// A protection domain.
#[derive(Clone)]
pub struct ProtectionDomain(pub(super) Arc<Pd>);

/// The access a memory region grants beyond local reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Access {
    pub local_write: bool,
    pub remote_write: bool,
    pub remote_read: bool,
}

impl Access {
    /// Local writes only (a source buffer the NIC reads, a completion it writes).
    pub const LOCAL_WRITE: Access = Access {
        local_write: true,
        remote_write: false,
        remote_read: false,
    };
    /// Peers write into it (remote write implies local write).
    pub const REMOTE_WRITE: Access = Access {
        local_write: true,
        remote_write: true,
        remote_read: false,
    };
    /// Peers write into it and read from it.
    pub const REMOTE_READ_WRITE: Access = Access {
        local_write: true,
        remote_write: true,
        remote_read: true,
    };

    pub(super) fn flags(self) -> i32 {
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
    pub(super) fn device(&self) -> String {
        self.0.ctx.name.clone()
    }
}
