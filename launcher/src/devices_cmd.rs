//! `meshrun devices`: this host's RDMA devices, ports and GIDs (as show_gids), its GPUs and how
//! close each is to each NIC, what CUDA says of GPUDirect RDMA, and the choice meshrun would
//! make; as lines or, `--json`, one document.

use ranks::devices::RdmaDevice;

use crate::cli::DevicesArgs;
use crate::exit::Status;

/// The version of `meshrun devices --json`'s layout: raised when a key changes meaning or goes.
const DEVICES_JSON_SCHEMA: u32 = 1;

/// `meshrun devices --json`: what the lines say, as one JSON document on stdout; the status as
/// without --json (2 when there is no RDMA device or the choice fails).
fn devices_json(a: &DevicesArgs) -> i32 {
    use ranks::devices;
    use serde_json::json;
    let root = &a.dev.sysfs_root;
    let (devs, error) = match devices::discover(root) {
        Ok(d) => (d, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let devices = devices_doc(&a.dev.sysfs_root, &devs);
    let gpus = gpus_doc(root, &devs);
    let choice = devices::choose_device(&devs, a.dev.device.as_deref(), a.dev.port, a.dev.gid_index);
    let (probe, _) = gpu_probe(true);
    let probe: serde_json::Value = probe
        .first()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| json!(probe.first()));
    let doc = json!({
        "tool": "meshrun",
        "test": "devices",
        "schema_version": DEVICES_JSON_SCHEMA,
        "version": env!("CARGO_PKG_VERSION"),
        "error": error,
        "devices": devices,
        "gpus": gpus,
        "gpudirect": probe,
        "selected": choice.as_ref().ok().map(|c| c.describe()),
        "selection_error": choice.as_ref().err().map(|e| e.to_string()),
    });
    println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    if error.is_some() || choice.is_err() {
        Status::Usage.code()
    } else {
        0
    }
}

/// The GPUDirect probe of every GPU here (no NIC needed), as lines (or JSON), and its status:
/// 0 every GPU can do GPUDirect RDMA, 1 one cannot, 2 no driver or no GPU, 4 a probe call failed.
fn gpu_probe(json: bool) -> (Vec<String>, i32) {
    use collectives::gpu::{self, GpuError};
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "this host".into());
    match gpu::probe_all(&host) {
        Ok(probes) => {
            let code = if probes.iter().all(|p| p.usable()) {
                Status::Ok
            } else {
                Status::FoundProblem
            };
            let lines = if json {
                vec![serde_json::to_string_pretty(&probes).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))]
            } else {
                probes.iter().map(|p| p.line()).collect()
            };
            (lines, code.code())
        }
        Err(GpuError::NoDriver { .. }) => (
            vec!["# CUDA: libcuda.so not found here: no GPU to probe for GPUDirect RDMA (GPU buffers, -g and --use-cuda, need the NVIDIA driver)".into()],
            Status::Usage.code(),
        ),
        Err(e @ GpuError::Selection { .. }) => (vec![format!("# CUDA: {e}")], Status::Usage.code()),
        Err(e) => (vec![format!("# CUDA: {e}")], Status::LocalFault.code()),
    }
}

/// `meshrun devices`; the process exit status.
pub fn run(a: DevicesArgs) -> i32 {
    use ranks::devices;
    if a.gpu {
        let (lines, code) = gpu_probe(a.json);
        for l in lines {
            println!("{l}");
        }
        return code;
    }
    if a.json {
        return devices_json(&a);
    }
    let devs = match devices::discover(&a.dev.sysfs_root) {
        Ok(d) => d,
        Err(e) => {
            // The GPUs' side needs no NIC: say what it is even so.
            for l in gpu_probe(false).0 {
                println!("{l}");
            }
            ranks::eline!("meshrun devices: {e}");
            return Status::Usage.code();
        }
    };
    print!("{}", devices::show_gids(&devs));
    print_ports(&a.dev.sysfs_root, &devs);
    print_gpus(&a.dev.sysfs_root, &devs);
    // What CUDA says of GPUDirect RDMA on each GPU (or that there is no driver).
    for l in gpu_probe(false).0 {
        println!("{l}");
    }
    match devices::choose_device(&devs, a.dev.device.as_deref(), a.dev.port, a.dev.gid_index) {
        Ok(c) => {
            println!("# selected: {}", c.describe());
            0
        }
        Err(e) => {
            ranks::eline!("meshrun devices: {e}");
            Status::Usage.code()
        }
    }
}

/// A port's MTUs: the active and largest ones the device reports (ibv_query_port; only where
/// the sysfs tree is this machine's and the device opens), and on RoCE its interface's.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct PortMtu {
    active: Option<u32>,
    max: Option<u32>,
    interface: Option<u32>,
}

impl PortMtu {
    fn of(root: &std::path::Path, d: &RdmaDevice, p: &ranks::devices::Port) -> PortMtu {
        let verbs = (root == std::path::Path::new("/sys"))
            .then(|| ranks::verbs::Context::open(Some(&d.name)).ok()?.query_port(p.num).ok())
            .flatten();
        let interface = p
            .best_gid()
            .and_then(|g| g.netdev.as_deref())
            .and_then(|n| std::fs::read_to_string(root.join("class/net").join(n).join("mtu")).ok())
            .and_then(|s| s.trim().parse().ok());
        PortMtu {
            active: verbs.map(|v| v.active_mtu),
            max: verbs.map(|v| v.max_mtu),
            interface,
        }
    }

    /// `, MTU 4096 (max 4096, interface 9000)`, what is known of it.
    fn text(&self) -> String {
        let mut within = Vec::new();
        if let Some(m) = self.max {
            within.push(format!("max {m}"));
        }
        if let Some(i) = self.interface {
            within.push(format!("interface {i}"));
        }
        let within = if within.is_empty() {
            String::new()
        } else {
            format!(" ({})", within.join(", "))
        };
        match (self.active, self.interface) {
            (Some(a), _) => format!(", MTU {a}{within}"),
            (None, Some(i)) => format!(", interface MTU {i}"),
            (None, None) => String::new(),
        }
    }
}

/// One line per port of every device: state, link layer, rate, MTU, LID, PCI address.
fn print_ports(root: &std::path::Path, devs: &[RdmaDevice]) {
    use ranks::devices;
    for d in devs {
        for p in &d.ports {
            println!(
                "# {} port {}: {} ({}), {:?}{}, {}{}, LID 0x{:x}{}",
                d.name,
                p.num,
                p.state.1,
                p.phys_state,
                p.link_layer,
                if d.node_type == devices::NodeType::Rnic {
                    " (iWARP: connects through rdma_cm, -R)"
                } else {
                    ""
                },
                p.rate,
                PortMtu::of(root, d, p).text(),
                p.lid,
                d.pci.as_deref().map(|x| format!(", PCI {x}")).unwrap_or_default()
            );
        }
    }
}

/// One line per GPU (from the PCI tree under `root`): how close it is to each RDMA NIC, as
/// nvidia-smi topo -m says it, and a warning where the closest is far.
fn print_gpus(root: &std::path::Path, devs: &[RdmaDevice]) {
    // GPUs (from the PCI tree) and how close each is to each RDMA NIC, as nvidia-smi topo -m says it.
    for g in ranks::pci::gpu_nic_affinity(root, devs) {
        let nics: Vec<String> = g.nics.iter().map(|(n, aff)| format!("{n} {}", aff.as_str())).collect();
        let numa = g.gpu.numa.map_or("?".to_string(), |n| n.to_string());
        println!(
            "# GPU {} (NUMA {numa}): {}",
            g.gpu.addr,
            if nics.is_empty() {
                "no RDMA NIC with a PCI address".into()
            } else {
                nics.join(", ")
            }
        );
        if let Some(w) = g.warning() {
            println!("# warning: {w}");
        }
    }
}

/// `devices --json`'s `devices`: every device, its ports and their GIDs.
fn devices_doc(root: &std::path::Path, devs: &[RdmaDevice]) -> Vec<serde_json::Value> {
    use ranks::devices::{self, GidKind};
    use serde_json::json;
    let gid = |g: &devices::Gid| {
        json!({
            "index": g.index,
            "gid": g.to_sysfs(),
            "type": match g.kind {
                Some(GidKind::RoceV2) => "RoCE v2",
                Some(GidKind::IbRoceV1) => "IB/RoCE v1",
                None => "unknown",
            },
            "ipv4": g.ipv4().map(|ip| ip.to_string()),
            "netdev": g.netdev,
        })
    };
    devs.iter()
        .map(|d| {
            json!({
                "name": d.name,
                "pci": d.pci,
                "ports": d.ports.iter().map(|p| {
                    let mtu = PortMtu::of(root, d, p);
                    json!({
                        "port": p.num,
                        "state": p.state.1,
                        "phys_state": p.phys_state,
                        "link_layer": format!("{:?}", p.link_layer),
                        "rate": p.rate,
                        "active_mtu": mtu.active,
                        "max_mtu": mtu.max,
                        "interface_mtu": mtu.interface,
                        "lid": p.lid,
                        "gids": p.gids.iter().map(gid).collect::<Vec<_>>(),
                    })
                }).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// `devices --json`'s `gpus`: every GPU and how close it is to each NIC.
fn gpus_doc(root: &std::path::Path, devs: &[RdmaDevice]) -> Vec<serde_json::Value> {
    use serde_json::json;
    ranks::pci::gpu_nic_affinity(root, devs)
        .iter()
        .map(|g| {
            json!({
                "pci": g.gpu.addr,
                "numa": g.gpu.numa,
                "nics": g.nics.iter().map(|(n, aff)| json!({"nic": n, "affinity": aff.as_str()})).collect::<Vec<_>>(),
                "warning": g.warning(),
            })
        })
        .collect()
}
