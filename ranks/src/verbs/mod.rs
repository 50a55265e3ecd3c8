//! Safe wrappers over `rdma-sys`: every resource frees itself, queue pairs move through their states
//! as types (created -> INIT -> RTR -> RTS) so a transition out of order does not compile, memory
//! regions own their buffer and get only the access asked for, and every failure names the device,
//! the verb and what to do. All `unsafe` of meshrun's RDMA support is in this module.

pub mod calls;
mod cm;
mod context;
mod cq;
mod mr;
mod pd;
mod qp;
pub mod usage;

pub use cm::{CmEvent, CmEventKind, CmId, ConnParams, EventChannel};
use context::OpenDevice;
pub use context::{Context, PortInfo};
pub use cq::{Completion, CompletionQueue};
pub use mr::{require_dmabuf, ForeignRegion, MemoryRegion, Registered, SharedWindow};
use pd::Pd;
pub use pd::{Access, ProtectionDomain};

pub use qp::{CanRecv, Init, Qos, QpEndpoint, QueuePair, Reset, Rtr, Rts, SendOp};

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

/// What a registration that failed for lack of locked memory says (ENOMEM or EPERM from the
/// kernel when `ulimit -l` is too low to pin the pages).
const MEMLOCK_HINT: &str = " (locked-memory limit too low? raise it with `ulimit -l unlimited`)";

/// Whether a failed registration's errno is what a too-low locked-memory limit returns.
fn memlock(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOMEM) | Some(libc::EPERM))
}

impl VerbsError {
    /// `verb` failed on `device` with `source` (errno, or the code the call returned), and `hint`
    /// (empty, or what to do, from a leading space) says what to do about it.
    fn verb(verb: &'static str, device: impl Into<String>, source: std::io::Error, hint: &'static str) -> VerbsError {
        VerbsError::Verb {
            verb,
            device: device.into(),
            source,
            hint,
        }
    }

    /// A memory registration (`verb`) that failed with `source`: `hint` where the errno has a cause
    /// of its own, else the locked-memory hint where the errno is what a low `ulimit -l` returns.
    fn registration(verb: &'static str, device: String, source: std::io::Error, hint: &'static str) -> VerbsError {
        let hint = match hint {
            "" if memlock(&source) => MEMLOCK_HINT,
            h => h,
        };
        VerbsError::verb(verb, device, source, hint)
    }
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

    /// A failed verb reads as it always has; a registration adds the locked-memory hint for ENOMEM
    /// and EPERM only, and never over a hint of its own.
    #[test]
    fn verb_errors_and_the_memlock_hint() {
        let io = std::io::Error::from_raw_os_error;
        let e = VerbsError::verb("ibv_poll_cq", "rxe0", io(libc::EIO), " (why?)");
        assert_eq!(
            e.to_string(),
            format!("ibv_poll_cq failed on rxe0: {} (why?)", io(libc::EIO))
        );
        for errno in [libc::ENOMEM, libc::EPERM] {
            let e = VerbsError::registration("ibv_reg_dmabuf_mr", "mlx5_0".into(), io(errno), "");
            assert_eq!(
                e.to_string(),
                format!(
                    "ibv_reg_dmabuf_mr failed on mlx5_0: {} (locked-memory limit too low? raise it with `ulimit -l unlimited`)",
                    io(errno)
                )
            );
        }
        let e = VerbsError::registration("ibv_reg_mr (GPU memory)", "mlx5_0".into(), io(libc::EINVAL), "");
        assert_eq!(
            e.to_string(),
            format!("ibv_reg_mr (GPU memory) failed on mlx5_0: {}", io(libc::EINVAL))
        );
        let e = VerbsError::registration("ibv_reg_mr (GPU memory)", "mlx5_0".into(), io(libc::EFAULT), " (own)");
        assert!(e.to_string().ends_with(" (own)"), "{e}");
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
