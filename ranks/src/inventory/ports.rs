//! One RDMA device's facts and its ports': what sysfs says, the active MTU (the device's, or on
//! RoCE the one the kernel derives from the interface's MTU), and on RoCE the interface's flow
//! control (global pause and PFC), through a [`Probe`].

use std::path::Path;

use analysis::preflight::{Fact, Finding, Severity};

use super::probe::Probe;
use super::{driver, finding, link_layer, read};
use crate::devices::{GidKind, LinkLayer, NodeType, RdmaDevice};
use crate::{flow_control, pci};

/// The active MTU the kernel gives a RoCE port whose interface has MTU `netdev_mtu`: the largest
/// IB MTU that fits it less the RoCE headers (GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28, ICRC
/// 4: 96 bytes), as `iboe_get_mtu` in the kernel's `include/rdma/ib_addr.h` computes it. An
/// interface at 4096 gives 2048; 4200 or more gives 4096.
pub fn roce_mtu(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(96)?;
    [4096, 2048, 1024, 512, 256].into_iter().find(|m| *m <= room)
}

/// A RoCE port's interface: `pause` (global, `off`, `rx`, `tx` or `rx tx`) and `pfc` (the
/// priorities with PFC, `3`, `3,4` or `off`), `unknown` where the kernel would not say (a driver
/// without them, veth, virtio) and left out where the tree is not this machine's.
fn flow_control(probe: &dyn Probe, ndev: &str, scope: &str, out: &mut Vec<Fact>) {
    let warn = Severity::Warning;
    if let Some(r) = probe.pause(ndev) {
        let v = r.map_or_else(|_| "unknown".to_string(), |p| p.describe());
        out.push(Fact::new(scope, "pause", v, warn));
    }
    if let Some(r) = probe.pfc(ndev) {
        let v = r.map_or_else(|_| "unknown".to_string(), flow_control::describe_pfc);
        out.push(Fact::new(scope, "pfc", v, warn));
    }
}

/// The facts of one RDMA device and its ports, and the problems it has on its own.
pub(super) fn rdma_device(
    root: &Path,
    probe: &dyn Probe,
    d: &RdmaDevice,
    out: &mut Vec<Fact>,
    local: &mut Vec<Finding>,
    host: &str,
) {
    let dir = root.join("class/infiniband").join(&d.name);
    let warn = Severity::Warning;
    let err = Severity::Error;
    let scope = d.name.as_str();
    for (name, file) in [("fw_ver", "fw_ver"), ("board_id", "board_id"), ("hca_type", "hca_type")] {
        if let Some(v) = read(&dir.join(file)) {
            out.push(Fact::new(scope, name, v, warn));
        }
    }
    if let Some((name, version)) = driver(root, &dir) {
        out.push(Fact::new(scope, "driver", name, warn));
        if let Some(v) = version {
            out.push(Fact::new(scope, "driver_version", v, warn));
        }
    }
    if let Some(p) = d.pci.as_deref().and_then(|a| pci::link(root, a)) {
        out.push(Fact::new(scope, "pcie", p.describe(), warn));
        if p.degraded() {
            local.push(finding(
                warn,
                host,
                "nic_pcie",
                format!(
                    "{scope}: PCIe link trained at {} (reseat or move the card; check BIOS slot settings)",
                    p.describe()
                ),
            ));
        }
    }
    for p in &d.ports {
        let scope = format!("{} port {}", d.name, p.num);
        let scope = scope.as_str();
        out.push(Fact::new(scope, "state", format!("{}: {}", p.state.0, p.state.1), err));
        out.push(Fact::new(scope, "phys_state", p.phys_state.clone(), err));
        out.push(Fact::new(scope, "link_layer", link_layer(p.link_layer), err));
        out.push(Fact::new(scope, "rate", p.rate.clone(), warn));
        if let Some(g) = p.best_gid() {
            let kind = match (p.link_layer, g.kind) {
                (LinkLayer::InfiniBand, _) => "IB",
                (_, Some(GidKind::RoceV2)) => "RoCE v2",
                (_, Some(GidKind::IbRoceV1)) => "RoCE v1",
                (_, None) => "none",
            };
            let family = if g.ipv4().is_some() {
                "IPv4"
            } else if g.is_link_local() {
                "IPv6 link-local"
            } else {
                "IPv6"
            };
            // The GID a run would choose: its type and family must match at both ends of a pair
            // (NCCL's "error 12"); its index may differ, which roce_v2_ipv4_index says.
            out.push(Fact::new(scope, "gid", format!("{kind} {family}"), err));
        }
        if p.link_layer == LinkLayer::Ethernet {
            let v2_ipv4 = p
                .gids
                .iter()
                .find(|g| g.kind == Some(GidKind::RoceV2) && g.ipv4().is_some())
                .map_or_else(|| "none".to_string(), |g| g.index.to_string());
            out.push(Fact::new(scope, "roce_v2_ipv4_index", v2_ipv4, warn));
        }
        let ndev = p.gids.iter().find_map(|g| g.netdev.clone());
        let ndev_mtu = ndev
            .as_ref()
            .and_then(|n| read(&root.join("class/net").join(n).join("mtu")));
        if let Some(mtu) = ndev_mtu.as_ref().filter(|_| p.link_layer == LinkLayer::Ethernet) {
            out.push(Fact::new(scope, "netdev_mtu", mtu.clone(), err));
        }
        let roce = p.link_layer == LinkLayer::Ethernet && d.node_type != NodeType::Rnic;
        let derived = || {
            ndev_mtu
                .as_ref()
                .and_then(|m| m.parse().ok())
                .filter(|_| roce)
                .and_then(roce_mtu)
        };
        if let Some(mtu) = probe.active_mtu(&d.name, p.num).or_else(derived) {
            out.push(Fact::new(scope, "active_mtu", mtu.to_string(), err));
        }
        if let Some(ndev) = ndev.as_deref().filter(|_| roce) {
            flow_control(probe, ndev, scope, out);
        }
        // Error counters already counting before any traffic of ours.
        let counted: Vec<String> = crate::counters::port_counters(root, &d.name, p.num)
            .into_iter()
            .filter(|(k, v)| *v > 0 && analysis::counters::meaning(scope, k) == analysis::counters::Meaning::Error)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        if !counted.is_empty() {
            local.push(finding(
                warn,
                host,
                "counters",
                format!(
                    "{scope}: error counters already non-zero: {} (since the last reset; clear them and rerun to see if they grow)",
                    counted.join(", ")
                ),
            ));
        }
    }
}
