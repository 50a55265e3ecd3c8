//! Safe wrappers over `rdma-sys`: every resource frees itself, queue pairs move through their states
//! as types (created -> INIT -> RTR -> RTS) so a transition out of order does not compile, memory
//! regions own their buffer and get only the access asked for, and every failure names the device,
//! the verb and what to do. All `unsafe` of meshrun's RDMA support is in this module.

pub mod calls;
mod context;
mod cq;
mod mr;
mod pd;
mod qp;
pub mod usage;

use context::Ctx;
pub use context::{Context, PortInfo};
pub use cq::{Completion, CompletionQueue};
pub use mr::{ForeignRegion, MemoryRegion, Registered};
use pd::Pd;
pub use pd::{Access, ProtectionDomain};

pub use qp::{CanRecv, Endpoint, Init, QueuePair, Reset, Rtr, Rts, SendOp};

use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_sys::ibv_access_flags;

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
