//! What preflight reads beyond sysfs and /proc: a port's active MTU from the device
//! (`ibv_query_port`) and an interface's flow control from the kernel's netlink
//! ([`crate::flow_control`]). [`Live`] asks this machine; [`TreeOnly`] stands for a sysfs tree
//! that is not this machine's (a fixture, a copy), where asking this machine would be wrong;
//! tests answer with their own.

use std::path::Path;

use crate::flow_control::{self, Pause};
use crate::netlink::NetlinkError;

/// The questions beyond sysfs. `None`: not asked (the tree is not this machine's); `Some(Err)`:
/// asked and the kernel would not say (preflight prints `unknown`).
pub trait Probe {
    /// A port's active MTU in bytes, as the device reports it.
    fn active_mtu(&self, device: &str, port: u8) -> Option<u32>;
    /// An interface's global pause.
    fn pause(&self, netdev: &str) -> Option<Result<Pause, NetlinkError>>;
    /// An interface's PFC-enabled priorities (`pfc_en`, bit N for priority N).
    fn pfc(&self, netdev: &str) -> Option<Result<u8, NetlinkError>>;
}

/// This machine, in this rank's network namespace.
pub struct Live;

impl Probe for Live {
    fn active_mtu(&self, device: &str, port: u8) -> Option<u32> {
        let ctx = crate::verbs::Context::open(Some(device)).ok()?;
        ctx.query_port(port).ok().map(|p| p.active_mtu)
    }

    fn pause(&self, netdev: &str) -> Option<Result<Pause, NetlinkError>> {
        Some(flow_control::read_pause(netdev))
    }

    fn pfc(&self, netdev: &str) -> Option<Result<u8, NetlinkError>> {
        Some(flow_control::read_pfc(netdev))
    }
}

/// A sysfs tree that is not this machine's: nothing beyond it is asked.
pub struct TreeOnly;

impl Probe for TreeOnly {
    fn active_mtu(&self, _: &str, _: u8) -> Option<u32> {
        None
    }

    fn pause(&self, _: &str) -> Option<Result<Pause, NetlinkError>> {
        None
    }

    fn pfc(&self, _: &str) -> Option<Result<u8, NetlinkError>> {
        None
    }
}

/// [`Live`] where `sysfs_root` is this machine's `/sys`, else [`TreeOnly`].
pub fn for_root(sysfs_root: &Path) -> &'static dyn Probe {
    if sysfs_root == Path::new("/sys") {
        &Live
    } else {
        &TreeOnly
    }
}
