//! What `meshrun preflight` reads on a node and in a rank, before any traffic: RDMA devices and
//! ports, GIDs, firmware, drivers, network interfaces, GPUs and their PCIe links and paths to the
//! NICs, IOMMU, limits, versions and the NCCL/MESHRUN variables. sysfs under the same root as
//! [`crate::devices`] (fixture trees in tests), /proc under `proc_root`. A file that cannot be
//! read leaves its fact out (the majority then names it `unknown` on that node), never an error.
//! `analysis::preflight` judges what is read here.

use std::path::Path;

use analysis::preflight::{Fact, Finding, Severity};

use crate::devices::{self, LinkLayer, RdmaDevice};
use crate::pci;

mod iwarp;
mod ports;
pub mod probe;

pub use ports::roce_mtu;
pub use probe::Probe;

/// What the caller knows of the run to come, for the limits it needs.
#[derive(Debug, Clone)]
pub struct Needs {
    /// Ranks in the job.
    pub ranks: usize,
    /// Bytes a verbs run registers per rank (staging and test buffers): the memlock need.
    pub memlock: u64,
    /// The RDMA device the run is told to use (`--ib-dev`), if any.
    pub device: Option<String>,
}

pub(crate) fn read(p: &Path) -> Option<String> {
    crate::devices::read_attr(p).filter(|s| !s.is_empty())
}

/// `link_layer` as sysfs writes it.
pub(crate) fn link_layer(l: LinkLayer) -> &'static str {
    match l {
        LinkLayer::InfiniBand => "InfiniBand",
        LinkLayer::Ethernet => "Ethernet",
        LinkLayer::Other => "other",
    }
}

/// The kernel module behind a device directory (`.../device/driver/module`), and its version
/// where the module says one.
pub(crate) fn driver(sysfs_root: &Path, dev_dir: &Path) -> Option<(String, Option<String>)> {
    let module = std::fs::read_link(dev_dir.join("device/driver/module"))
        .or_else(|_| std::fs::read_link(dev_dir.join("device/driver")))
        .ok()?;
    let name = module.file_name()?.to_string_lossy().into_owned();
    let version = read(&sysfs_root.join("module").join(&name).join("version"));
    Some((name, version))
}

pub(crate) fn finding(severity: Severity, subject: &str, about: &str, text: String) -> Finding {
    Finding {
        severity,
        subjects: vec![subject.to_string()],
        text,
        about: about.to_string(),
    }
}

/// ACS controls that send peer-to-peer traffic up to the root complex: P2P Request Redirect
/// (bit 2) and P2P Completion Redirect (bit 3) of the ACS Control register (PCIe base spec,
/// ACS Extended Capability, ID 0x000D; `lspci -vvv` prints them as ReqRedir+ CmpltRedir+).
fn acs_redirects(config: &[u8]) -> bool {
    let word = |at: usize| -> Option<u32> {
        config
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let mut at = 0x100;
    for _ in 0..64 {
        let Some(h) = word(at) else { return false };
        if h == 0 || h == u32::MAX {
            return false;
        }
        if h & 0xffff == 0x000d {
            let ctrl = config
                .get(at + 6..at + 8)
                .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
            return ctrl & 0b1100 != 0;
        }
        let next = ((h >> 20) & 0xffc) as usize;
        if next < 0x100 {
            return false;
        }
        at = next;
    }
    false
}

/// The bridges on the PCI paths of a GPU and of its closest NIC (root complex and the two
/// devices left out) whose ACS redirects peer-to-peer traffic.
fn acs_on_path(root: &Path, gpu: &pci::PciDevice, nic: &pci::PciDevice) -> Vec<String> {
    // Each bridge's directory under `devices/` (bridges need no `bus/pci/devices` link).
    let mut bridges: Vec<(String, std::path::PathBuf)> = Vec::new();
    for d in [gpu, nic] {
        for i in 1..d.path.len().saturating_sub(1) {
            if !bridges.iter().any(|(a, _)| *a == d.path[i]) {
                let dir = d.path[..=i].iter().fold(root.join("devices"), |p, c| p.join(c));
                bridges.push((d.path[i].clone(), dir));
            }
        }
    }
    bridges
        .into_iter()
        .filter(|(_, dir)| std::fs::read(dir.join("config")).is_ok_and(|c| acs_redirects(&c)))
        .map(|(a, _)| a)
        .collect()
}

/// GPUs, their links, their closest NIC and what GPUDirect RDMA needs.
/// The NVIDIA driver's version and kind from `/proc/driver/nvidia/version` (`NVRM version: NVIDIA
/// UNIX Open Kernel Module for x86_64  535.104.05  Release Build ...`, or `... x86_64 Kernel
/// Module  535.104.05  ...` for the proprietary one): (`535.104.05`, open).
pub fn nvidia_driver(text: &str) -> Option<(String, bool)> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let open = line.contains("Open Kernel Module");
    let version = line.split_whitespace().find(|w| {
        w.split('.').count() >= 2
            && w.split('.')
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
    })?;
    Some((version.to_string(), open))
}

/// (major, minor) of a kernel release (`6.1.0-18-amd64`).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// GPUs, their links, their closest NIC and what GPUDirect RDMA needs: nvidia_peermem, or
/// dma-buf (kernel 5.12 or later with NVIDIA's open kernel modules).
fn gpus(root: &Path, proc_root: &Path, nics: &[RdmaDevice], out: &mut Vec<Fact>, local: &mut Vec<Finding>, host: &str) {
    let warn = Severity::Warning;
    let found = pci::gpus(root);
    out.push(Fact::new("node", "gpus", found.len().to_string(), warn));
    if found.is_empty() {
        return;
    }
    let driver = read(&proc_root.join("driver/nvidia/version")).and_then(|t| nvidia_driver(&t));
    if let Some((version, open)) = &driver {
        out.push(Fact::new("node", "nvidia_driver", version.clone(), warn));
        out.push(Fact::new(
            "node",
            "nvidia_modules",
            if *open { "open" } else { "proprietary" },
            warn,
        ));
    }
    let peermem = root.join("module/nvidia_peermem").is_dir();
    out.push(Fact::new(
        "node",
        "nvidia_peermem",
        if peermem { "loaded" } else { "not loaded" },
        warn,
    ));
    let kernel = read(&proc_root.join("sys/kernel/osrelease")).and_then(|k| kernel_version(&k));
    let dma_buf = driver.as_ref().is_some_and(|(_, open)| *open) && kernel.is_some_and(|k| k >= (5, 12));
    out.push(Fact::new(
        "node",
        "dma_buf",
        if dma_buf { "possible" } else { "no" },
        warn,
    ));
    if !peermem && !dma_buf {
        let why = match (&driver, kernel) {
            (None, _) => "the NVIDIA driver is not loaded (no /proc/driver/nvidia/version)".to_string(),
            (Some((_, false)), _) => {
                "the NVIDIA driver is the proprietary one (dma-buf needs the open kernel modules)".to_string()
            }
            (Some(_), Some(k)) => format!("kernel {}.{} is older than 5.12 (dma-buf)", k.0, k.1),
            (Some(_), None) => "the kernel release is unknown".to_string(),
        };
        local.push(finding(
            warn,
            host,
            "peermem",
            format!(
                "GPUDirect RDMA: nvidia_peermem is not loaded (modprobe nvidia_peermem) and {why}: GPU buffers need \
                 --gpu-staging"
            ),
        ));
    }
    let nic_devs: Vec<(String, pci::PciDevice)> = nics
        .iter()
        .filter_map(|n| Some((n.name.clone(), pci::device(root, n.pci.as_deref()?)?)))
        .collect();
    // Bridges whose ACS redirects peer-to-peer traffic, with the GPU-to-NIC paths through them.
    let mut acs: Vec<(String, Vec<String>)> = Vec::new();
    // Every GPU's closest NICs, read from the PCI tree once for all GPUs.
    let affinity = pci::gpu_nic_affinity(root, nics);
    for g in &found {
        let scope = format!("gpu {}", g.addr);
        if let Some(l) = pci::link(root, &g.addr) {
            out.push(Fact::new(&scope, "pcie", l.describe(), warn));
            if l.degraded() {
                local.push(finding(
                    warn,
                    host,
                    "gpu_pcie",
                    format!("{scope}: PCIe link trained at {}", l.describe()),
                ));
            }
        }
        let closest = nic_devs.iter().min_by_key(|(_, n)| pci::affinity(g, n));
        if let Some((name, n)) = closest {
            out.push(Fact::new(
                &scope,
                "closest_nic",
                format!("{name} {}", pci::affinity(g, n).as_str()),
                warn,
            ));
            for bridge in acs_on_path(root, g, n) {
                let path = format!("GPU {} to {name}", g.addr);
                match acs.iter_mut().find(|(b, _)| *b == bridge) {
                    Some((_, paths)) => paths.push(path),
                    None => acs.push((bridge, vec![path])),
                }
            }
        }
        if let Some(w) = affinity
            .iter()
            .find(|x| x.gpu.addr == g.addr)
            .and_then(pci::GpuNics::warning)
        {
            local.push(finding(warn, host, "gpu_affinity", format!("{scope}: {w}")));
        }
    }
    if !acs.is_empty() {
        let at: Vec<String> = acs
            .iter()
            .map(|(b, paths)| format!("{b} ({})", paths.join(", ")))
            .collect();
        local.push(finding(
            warn,
            host,
            "acs",
            format!(
                "PCIe ACS redirects peer-to-peer traffic at {}: GPUDirect RDMA goes through the root complex (disable \
                 ACS there: setpci -s BRIDGE ECAP_ACS+0x6.w=0000, or in the BIOS)",
                at.join("; ")
            ),
        ));
    }
}

/// The node's facts and its own problems (read once per host); what sysfs does not hold is asked
/// of `probe` ([`probe::for_root`] gives the one for a root).
pub fn node(root: &Path, proc_root: &Path, probe: &dyn Probe, host: &str, needs: &Needs) -> (Vec<Fact>, Vec<Finding>) {
    let warn = Severity::Warning;
    let mut out = Vec::new();
    let mut local = Vec::new();
    if let Some(k) = read(&proc_root.join("sys/kernel/osrelease")) {
        out.push(Fact::new("node", "kernel", k, warn));
    }
    if let Some(v) = rdma_core_version(proc_root) {
        out.push(Fact::new("node", "rdma_core", v, warn));
    }
    let nics = devices::discover(root).unwrap_or_default();
    out.push(Fact::new(
        "node",
        "rdma_devices",
        nics.len().to_string(),
        Severity::Error,
    ));
    for d in &nics {
        ports::rdma_device(root, probe, d, &mut out, &mut local, host);
    }
    if !nics.is_empty() {
        let wanted: Vec<&RdmaDevice> = match &needs.device {
            Some(name) => nics.iter().filter(|d| &d.name == name).collect(),
            None => nics.iter().collect(),
        };
        if wanted.is_empty() {
            local.push(finding(
                Severity::Error,
                host,
                "device",
                format!(
                    "RDMA device {} not found (this node has {})",
                    needs.device.as_deref().unwrap_or("?"),
                    nics.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        } else if !wanted.iter().any(|d| d.ports.iter().any(|p| p.is_active())) {
            let which = wanted.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ");
            local.push(finding(
                Severity::Error,
                host,
                "port",
                format!(
                    "no active RDMA port on {which} (ibstat / rdma link show; check the cable and the subnet manager)"
                ),
            ));
        }
    }
    iwarp::port_mapper(proc_root, &nics, &mut out, &mut local, host);
    let iommu = iommu_mode(root, &nics);
    out.push(Fact::new("node", "iommu", iommu, warn));
    interfaces(root, &mut out);
    gpus(root, proc_root, &nics, &mut out, &mut local, host);
    (out, local)
}

/// `off`, or the translation mode of the first NIC's IOMMU group (`identity`: pass-through;
/// `DMA`/`DMA-FQ`: translated), or `on` where the group does not say.
fn iommu_mode(root: &Path, nics: &[RdmaDevice]) -> String {
    let any = std::fs::read_dir(root.join("class/iommu")).is_ok_and(|mut d| d.next().is_some());
    if !any {
        return "off".into();
    }
    nics.iter()
        .filter_map(|n| n.pci.as_deref())
        .find_map(|a| read(&root.join("bus/pci/devices").join(a).join("iommu_group/type")))
        .unwrap_or_else(|| "on".into())
}

/// The network interfaces that carry traffic (not loopback): state, MTU and speed.
fn interfaces(root: &Path, out: &mut Vec<Fact>) {
    let Ok(rd) = std::fs::read_dir(root.join("class/net")) else {
        return;
    };
    let mut names: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for n in names.iter().filter(|n| *n != "lo") {
        let dir = root.join("class/net").join(n);
        let scope = format!("net {n}");
        if let Some(s) = read(&dir.join("operstate")) {
            out.push(Fact::new(&scope, "operstate", s, Severity::Error));
        }
        if let Some(m) = read(&dir.join("mtu")) {
            out.push(Fact::new(&scope, "mtu", m, Severity::Error));
        }
        if let Some(s) = read(&dir.join("speed")).filter(|s| !s.starts_with('-')) {
            out.push(Fact::new(&scope, "speed_mbps", s, Severity::Warning));
        }
    }
}

/// rdma-core's version from the libibverbs this process mapped
/// (`libibverbs.so.1.14.44.0` is rdma-core 44).
fn rdma_core_version(proc_root: &Path) -> Option<String> {
    let maps = std::fs::read_to_string(proc_root.join("self/maps")).ok()?;
    let path = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("libibverbs.so."))?;
    let file = Path::new(path).file_name()?.to_string_lossy().into_owned();
    let parts: Vec<&str> = file.split('.').collect();
    // libibverbs . so . 1 . ABI . RDMA-CORE . 0
    let v = parts.get(4).filter(|v| v.chars().all(|c| c.is_ascii_digit()))?;
    Some(format!("{v} ({file})"))
}

/// `unlimited` or the number of KiB.
fn limit_kib(v: u64) -> String {
    if v == nix::sys::resource::RLIM_INFINITY {
        "unlimited".into()
    } else {
        (v / 1024).to_string()
    }
}

/// This process's facts (limits as mpirun gave them, version, variables) and its problems.
pub fn process(
    label: &str,
    version: &str,
    needs: &Needs,
    rdma: bool,
    vars: &[(String, String)],
) -> (Vec<Fact>, Vec<Finding>) {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let mut out = Vec::new();
    let mut local = Vec::new();
    out.push(Fact::new("process", "meshrun", version, Severity::Warning));
    if let Ok((soft, _)) = getrlimit(Resource::RLIMIT_MEMLOCK) {
        out.push(Fact::new("process", "memlock_kib", limit_kib(soft), Severity::Warning));
        if rdma && soft != RLIM_INFINITY && soft < needs.memlock {
            local.push(finding(
                Severity::Error,
                label,
                "memlock",
                format!(
                    "process: memlock_kib {}, below the {} KiB a verbs run of {} ranks registers per rank (ulimit -l unlimited; \
                     LimitMEMLOCK=infinity for slurmd or sshd; memlock in /etc/security/limits.conf)",
                    soft / 1024,
                    needs.memlock.div_ceil(1024),
                    needs.ranks
                ),
            ));
        }
    }
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        out.push(Fact::new(
            "process",
            "nofile",
            format!("{soft}/{hard}"),
            Severity::Warning,
        ));
        let need = crate::limits::rank_needs(needs.ranks);
        if hard != RLIM_INFINITY && hard < need {
            local.push(finding(
                Severity::Error,
                label,
                "nofile",
                format!(
                    "process: nofile hard limit {hard}, below the {need} descriptors a TCP run of {} ranks needs per rank (ulimit -Hn; LimitNOFILE=)",
                    needs.ranks
                ),
            ));
        }
    }
    for (k, v) in vars {
        out.push(Fact::new("env", k, v.clone(), Severity::Warning));
    }
    (out, local)
}

/// The NCCL_* and MESHRUN_* variables of this process, sorted; the test-only ones that differ
/// by design between ranks of one job are left out.
pub fn job_variables(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    const PER_RANK: &[&str] = &["MESHRUN_FAULT", "MESHRUN_SELF_REPORT"];
    let mut v: Vec<(String, String)> = vars
        .filter(|(k, _)| (k.starts_with("NCCL_") || k.starts_with("MESHRUN_")) && !PER_RANK.contains(&k.as_str()))
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod roce_tests;
