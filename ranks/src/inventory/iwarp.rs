//! iWARP's port mapper: hardware iWARP (cxgb4, irdma, qedr) runs its own TCP stack beside the
//! host's, and the kernel's iWARP connection manager asks the user-space port mapper `iwpmd`
//! (rdma-core) to reserve each connection's TCP port in the host stack. Without `iwpmd` the
//! kernel connects with unmapped ports (`iw_cm_map` in drivers/infiniband/core/iwcm.c goes on
//! when no mapper is registered), so a connection's port can collide with a host socket's.
//! Soft-iWARP (`siw`) needs none: its connections are host TCP sockets and the driver sets
//! `IW_F_NO_PORT_MAP` ("Disable TCP port mapping", drivers/infiniband/sw/siw/siw_main.c).

use std::path::Path;

use analysis::preflight::{Fact, Finding, Severity};

use crate::devices::{NodeType, RdmaDevice};

/// Is a process named `comm` running (`/proc/PID/comm` under `proc_root`)?
pub fn running(proc_root: &Path, comm: &str) -> bool {
    let Ok(rd) = std::fs::read_dir(proc_root) else {
        return false;
    };
    rd.flatten()
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .any(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == comm))
}

/// Soft-iWARP, by the name `rdma link add NAME type siw` is conventionally given (its sysfs
/// `device` link is the NIC under it, whose driver is the NIC's).
fn soft(d: &RdmaDevice) -> bool {
    d.name.starts_with("siw")
}

/// `iwpmd` (`running` or `not running`) where the node has a hardware iWARP device, and a
/// warning where it is not running (worded as the majority's line begins, so a node that also
/// differs from the others is named once).
pub fn port_mapper(proc_root: &Path, nics: &[RdmaDevice], out: &mut Vec<Fact>, local: &mut Vec<Finding>, host: &str) {
    let iwarp: Vec<&str> = nics
        .iter()
        .filter(|d| d.node_type == NodeType::Rnic && !soft(d))
        .map(|d| d.name.as_str())
        .collect();
    if iwarp.is_empty() {
        return;
    }
    let up = running(proc_root, "iwpmd");
    let warn = Severity::Warning;
    out.push(Fact::new(
        "node",
        "iwpmd",
        if up { "running" } else { "not running" },
        warn,
    ));
    if !up {
        local.push(super::finding(
            warn,
            host,
            "iwpmd",
            format!(
                "node: iwpmd not running, with iWARP device {}: its connections' TCP ports are not reserved in the \
                 host's TCP stack and can collide with a host socket's (systemctl enable --now iwpmd; rdma-core's \
                 iwpmd package; Soft-iWARP siw needs none)",
                iwarp.join(", ")
            ),
        ));
    }
}
