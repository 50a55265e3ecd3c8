//! PCI topology from sysfs: where GPUs and RDMA NICs sit, and how close each GPU is to each NIC,
//! in the terms `nvidia-smi topo -m` uses. Read under the same configurable root as `devices`.
//!
//! - PIX: below one PCIe switch (they share a bridge under the root port)
//! - PXB: same root port, through several bridges
//! - PHB: same root complex (host bridge), different root ports
//! - NODE: different root complexes of one NUMA node
//! - SYS: different NUMA nodes (traffic crosses the socket interconnect)

use std::path::Path;

use crate::devices::{read_attr, RdmaDevice};

/// How far apart two PCI devices are, closest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Affinity {
    Pix,
    Pxb,
    Phb,
    Node,
    Sys,
}

impl Affinity {
    pub fn as_str(self) -> &'static str {
        match self {
            Affinity::Pix => "PIX",
            Affinity::Pxb => "PXB",
            Affinity::Phb => "PHB",
            Affinity::Node => "NODE",
            Affinity::Sys => "SYS",
        }
    }
}

/// A PCI device and its place in the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciDevice {
    pub addr: String,
    /// Path components below `devices/`, root complex first (`pci0000:16`, `0000:16:02.0`, ...).
    pub path: Vec<String>,
    pub numa: Option<i32>,
}

/// The device at `addr`, from `root/bus/pci/devices/ADDR`.
pub fn device(root: &Path, addr: &str) -> Option<PciDevice> {
    let link = root.join("bus/pci/devices").join(addr);
    let target = std::fs::read_link(&link).ok()?;
    let comps: Vec<String> = target
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let start = comps.iter().position(|c| c == "devices")? + 1;
    let path: Vec<String> = comps[start..].to_vec();
    let numa = read_attr(&link.join("numa_node"))
        .and_then(|s| s.parse::<i32>().ok())
        .filter(|&n| n >= 0);
    Some(PciDevice {
        addr: addr.to_string(),
        path,
        numa,
    })
}

/// A PCIe link as trained, beside what the device and slot allow.
#[derive(Debug, Clone, PartialEq)]
pub struct PcieLink {
    /// GT/s per lane (`16.0 GT/s PCIe` is 16.0).
    pub speed: f64,
    pub width: u32,
    pub max_speed: f64,
    pub max_width: u32,
}

impl PcieLink {
    /// Trained below its maximum speed or width.
    pub fn degraded(&self) -> bool {
        self.speed < self.max_speed || self.width < self.max_width
    }
    /// `8.0 GT/s x8 of 16.0 GT/s x16`.
    pub fn describe(&self) -> String {
        format!(
            "{:.1} GT/s x{} of {:.1} GT/s x{}",
            self.speed, self.width, self.max_speed, self.max_width
        )
    }
}

/// The PCIe link of the device at `addr` (`current_link_speed`, `current_link_width`,
/// `max_link_speed`, `max_link_width` under `root/bus/pci/devices/ADDR`); None where sysfs does
/// not have them (virtual devices).
pub fn link(root: &Path, addr: &str) -> Option<PcieLink> {
    let dir = root.join("bus/pci/devices").join(addr);
    let speed = |f: &str| -> Option<f64> { read_attr(&dir.join(f))?.split_whitespace().next()?.parse().ok() };
    let width = |f: &str| -> Option<u32> { read_attr(&dir.join(f))?.trim_start_matches('x').parse().ok() };
    Some(PcieLink {
        speed: speed("current_link_speed")?,
        width: width("current_link_width")?,
        max_speed: speed("max_link_speed")?,
        max_width: width("max_link_width")?,
    })
}

/// NVIDIA GPUs (vendor 0x10de, class 3D or VGA controller), sorted by address.
pub fn gpus(root: &Path) -> Vec<PciDevice> {
    let Ok(rd) = std::fs::read_dir(root.join("bus/pci/devices")) else {
        return Vec::new();
    };
    let mut v: Vec<PciDevice> = rd
        .flatten()
        .filter_map(|e| {
            let addr = e.file_name().to_string_lossy().into_owned();
            let vendor = read_attr(&e.path().join("vendor"))?;
            let class = read_attr(&e.path().join("class"))?;
            (vendor == "0x10de" && (class.starts_with("0x0302") || class.starts_with("0x0300"))).then_some(addr)
        })
        .filter_map(|addr| device(root, &addr))
        .collect();
    v.sort_by(|a, b| a.addr.cmp(&b.addr));
    v
}

/// How close `a` and `b` are.
pub fn affinity(a: &PciDevice, b: &PciDevice) -> Affinity {
    if a.path.first() != b.path.first() {
        return match (a.numa, b.numa) {
            (Some(x), Some(y)) if x == y => Affinity::Node,
            _ => Affinity::Sys,
        };
    }
    // Shared components: the root complex, then root port, then bridges below it.
    let common = a.path.iter().zip(&b.path).take_while(|(x, y)| x == y).count();
    match common {
        0 | 1 => Affinity::Phb,
        2 => Affinity::Pxb,
        _ => Affinity::Pix,
    }
}

/// One GPU's view of the NICs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuNics {
    pub gpu: PciDevice,
    /// (NIC name, affinity), closest first.
    pub nics: Vec<(String, Affinity)>,
}

impl GpuNics {
    /// A warning when the closest NIC is across NUMA nodes or root complexes.
    pub fn warning(&self) -> Option<String> {
        let (nic, aff) = self.nics.first()?;
        (*aff >= Affinity::Node).then(|| {
            format!(
                "GPU {} has no RDMA NIC on its own {} (closest: {nic}, {}); GPUDirect traffic will cross {}",
                self.gpu.addr,
                if *aff == Affinity::Sys {
                    "NUMA node"
                } else {
                    "PCIe root complex"
                },
                aff.as_str(),
                if *aff == Affinity::Sys {
                    "the socket interconnect"
                } else {
                    "host bridges"
                }
            )
        })
    }
}

/// Every GPU with the RDMA NICs ordered by closeness.
pub fn gpu_nic_affinity(root: &Path, nics: &[RdmaDevice]) -> Vec<GpuNics> {
    let nic_devs: Vec<(String, PciDevice)> = nics
        .iter()
        .filter_map(|n| {
            n.pci
                .as_deref()
                .and_then(|a| device(root, a))
                .map(|d| (n.name.clone(), d))
        })
        .collect();
    gpus(root)
        .into_iter()
        .map(|gpu| {
            let mut v: Vec<(String, Affinity)> = nic_devs
                .iter()
                .map(|(name, d)| (name.clone(), affinity(&gpu, d)))
                .collect();
            v.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
            GpuNics { gpu, nics: v }
        })
        .collect()
}

/// The warning for one rank that uses GPU `gpu_addr` (`0000:18:00.0`, as CUDA reports it) with
/// RDMA device `nic`: when they sit on different NUMA nodes or PCIe root complexes, naming the
/// closer NIC when there is one. None when close enough, or when sysfs does not show both.
pub fn rank_warning(root: &Path, gpu_addr: &str, nic: &str, nics: &[RdmaDevice]) -> Option<String> {
    let gpu = device(root, &gpu_addr.to_ascii_lowercase())?;
    let pci_of = |name: &str| {
        nics.iter()
            .find(|n| n.name == name)
            .and_then(|n| n.pci.as_deref())
            .and_then(|a| device(root, a))
    };
    let aff = affinity(&gpu, &pci_of(nic)?);
    if aff < Affinity::Node {
        return None;
    }
    let better = nics
        .iter()
        .filter(|n| n.name != nic)
        .filter_map(|n| pci_of(&n.name).map(|d| (n.name.clone(), affinity(&gpu, &d))))
        .filter(|(_, a)| *a < aff)
        .min_by(|x, y| x.1.cmp(&y.1).then_with(|| x.0.cmp(&y.0)));
    let advice = match better {
        Some((name, a)) => format!("; {name} is closer ({}): pick it with --devices or -d", a.as_str()),
        None => String::new(),
    };
    Some(format!(
        "GPU {} and RDMA device {nic} are on different {} ({}): GPUDirect traffic crosses {}{advice}",
        gpu.addr,
        if aff == Affinity::Sys {
            "NUMA nodes"
        } else {
            "PCIe root complexes"
        },
        aff.as_str(),
        if aff == Affinity::Sys {
            "the socket interconnect"
        } else {
            "host bridges"
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/gpu-2socket")
    }

    #[test]
    fn finds_nvidia_gpus_only() {
        let g = gpus(&root());
        assert_eq!(
            g.iter().map(|d| d.addr.as_str()).collect::<Vec<_>>(),
            vec!["0000:18:00.0", "0000:1c:00.0", "0000:9a:00.0"]
        );
        assert_eq!(g[2].numa, Some(1));
        assert_eq!(g[0].path[0], "pci0000:16");
    }

    #[test]
    fn affinity_classes_by_hand() {
        let r = root();
        let d = |a: &str| device(&r, a).unwrap();
        // GPU0 and mlx5_0 share the switch's upstream bridge 0000:17:00.0.
        assert_eq!(affinity(&d("0000:18:00.0"), &d("0000:19:00.0")), Affinity::Pix);
        // GPU1 is on another root port of the same root complex.
        assert_eq!(affinity(&d("0000:1c:00.0"), &d("0000:19:00.0")), Affinity::Phb);
        // Socket 0 GPU to socket 1 NIC.
        assert_eq!(affinity(&d("0000:18:00.0"), &d("0000:98:00.0")), Affinity::Sys);
        // Same root port, different branches.
        let a = PciDevice {
            addr: "a".into(),
            path: vec!["pci0000:00".into(), "0000:00:01.0".into(), "x".into()],
            numa: Some(0),
        };
        let b = PciDevice {
            addr: "b".into(),
            path: vec!["pci0000:00".into(), "0000:00:01.0".into(), "y".into()],
            numa: Some(0),
        };
        assert_eq!(affinity(&a, &b), Affinity::Pxb);
        // Different root complexes of one NUMA node.
        let c = PciDevice {
            addr: "c".into(),
            path: vec!["pci0000:40".into(), "z".into()],
            numa: Some(0),
        };
        assert_eq!(affinity(&a, &c), Affinity::Node);
    }

    #[test]
    fn each_gpu_gets_its_closest_nic_and_warnings() {
        let nics = crate::devices::discover(&root()).unwrap();
        let v = gpu_nic_affinity(&root(), &nics);
        assert_eq!(v.len(), 3);
        assert_eq!(
            v[0].nics,
            vec![
                ("mlx5_0".to_string(), Affinity::Pix),
                ("mlx5_1".to_string(), Affinity::Sys)
            ]
        );
        assert_eq!(v[1].nics[0], ("mlx5_0".to_string(), Affinity::Phb));
        assert_eq!(v[2].nics[0], ("mlx5_1".to_string(), Affinity::Phb));
        assert!(v.iter().all(|g| g.warning().is_none()));
        // Without the socket-1 NIC, GPU2's closest NIC is across the socket interconnect.
        let only0: Vec<_> = nics.into_iter().filter(|n| n.name == "mlx5_0").collect();
        let v = gpu_nic_affinity(&root(), &only0);
        let w = v[2].warning().unwrap();
        assert!(
            w.starts_with("GPU 0000:9a:00.0 has no RDMA NIC on its own NUMA node (closest: mlx5_0, SYS)"),
            "{w}"
        );
    }

    #[test]
    fn rank_warnings_name_the_gpu_the_nic_and_a_closer_nic() {
        let nics = crate::devices::discover(&root()).unwrap();
        // GPU0 with its own switch's NIC: nothing to say.
        assert_eq!(rank_warning(&root(), "0000:18:00.0", "mlx5_0", &nics), None);
        // Same root complex, other root port: close enough.
        assert_eq!(rank_warning(&root(), "0000:1C:00.0", "mlx5_0", &nics), None);
        let w = rank_warning(&root(), "0000:18:00.0", "mlx5_1", &nics).unwrap();
        assert_eq!(
            w,
            "GPU 0000:18:00.0 and RDMA device mlx5_1 are on different NUMA nodes (SYS): GPUDirect traffic \
             crosses the socket interconnect; mlx5_0 is closer (PIX): pick it with --devices or -d"
        );
        // Unknown GPU address or NIC: no claim.
        assert_eq!(rank_warning(&root(), "0000:77:00.0", "mlx5_0", &nics), None);
        assert_eq!(rank_warning(&root(), "0000:18:00.0", "rxe0", &nics), None);
    }

    #[test]
    fn machines_without_gpus_or_pci_links() {
        let r = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/mlx5-ib");
        assert!(gpus(&r).is_empty());
        assert!(device(&r, "0000:3b:00.0").is_none());
    }

    #[test]
    fn pcie_links_as_trained() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/gpu-2socket");
        // mlx5_0 trained at full speed; mlx5_1 at 8 GT/s x8 in a Gen4 x16 slot.
        let l0 = link(&root, "0000:19:00.0").unwrap();
        assert!(!l0.degraded(), "{l0:?}");
        let l1 = link(&root, "0000:98:00.0").unwrap();
        assert!(l1.degraded());
        assert_eq!(l1.describe(), "8.0 GT/s x8 of 16.0 GT/s x16");
        assert_eq!(link(&root, "0000:03:00.0"), None, "no link files");
    }
}
