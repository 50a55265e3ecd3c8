//! `pairwise --rails auto --use-cuda`: which GPU each rail's rank takes, the nearest to its NIC
//! in the PCI tree ([`crate::pci::affinity`]), each GPU used once where there are enough.
//!
//! Closest pairs are taken first across the whole host (every PIX pair, then PXB, PHB, NODE,
//! SYS), NICs in rail order and GPUs in address order within a class, so the outcome is the
//! same on every host built alike. A NIC left without a GPU of its own (more NICs than GPUs)
//! shares its nearest one.

use std::path::Path;

use crate::pci::{self, Affinity, PciDevice};

/// The GPU one rail's rank uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairing {
    /// The rail's port, as [`crate::rail_ports::RailPort::name`] writes it.
    pub nic: String,
    /// The GPU's PCI address (`0000:18:00.0`) and how far it is from the NIC; None where sysfs
    /// shows no GPU, or no PCI address for the NIC (veth, Soft-RoCE).
    pub gpu: Option<(String, Affinity)>,
    /// Where the pairing is NODE or SYS: a closer GPU (address, affinity) and the NIC that
    /// took it, if there is one.
    pub closer: Option<(String, Affinity, String)>,
}

impl Pairing {
    /// A warning where the NIC and its GPU are on different root complexes or NUMA nodes.
    pub fn warning(&self) -> Option<String> {
        let (gpu, aff) = self.gpu.as_ref()?;
        if *aff < Affinity::Node {
            return None;
        }
        let better = match &self.closer {
            Some((g, a, nic)) => format!("; GPU {g} is closer ({}), taken by {nic}", a.as_str()),
            None => "; no GPU is closer to it".into(),
        };
        Some(format!(
            "NIC {} and GPU {gpu} are {} apart: GPUDirect traffic crosses {}{better}",
            self.nic,
            aff.as_str(),
            if *aff == Affinity::Sys {
                "the socket interconnect"
            } else {
                "host bridges"
            }
        ))
    }
}

/// Each of `nics` (name and PCI address, in rail order) with its GPU from sysfs under `root`.
pub fn pair(root: &Path, nics: &[(String, Option<String>)]) -> Vec<Pairing> {
    let gpus = pci::gpus(root);
    let devs: Vec<Option<PciDevice>> = nics
        .iter()
        .map(|(_, a)| a.as_deref().and_then(|a| pci::device(root, a)))
        .collect();
    // aff[n][g]: how far NIC n is from GPU g (None: the NIC has no place in the tree).
    let aff: Vec<Vec<Option<Affinity>>> = devs
        .iter()
        .map(|d| gpus.iter().map(|g| d.as_ref().map(|d| pci::affinity(d, g))).collect())
        .collect();
    let mut taken: Vec<Option<usize>> = vec![None; nics.len()];
    let mut used = vec![false; gpus.len()];
    for class in [
        Affinity::Pix,
        Affinity::Pxb,
        Affinity::Phb,
        Affinity::Node,
        Affinity::Sys,
    ] {
        for n in 0..nics.len() {
            if taken[n].is_some() {
                continue;
            }
            if let Some(g) = (0..gpus.len()).find(|&g| !used[g] && aff[n][g] == Some(class)) {
                used[g] = true;
                taken[n] = Some(g);
            }
        }
    }
    // More NICs than GPUs: share the nearest.
    for n in 0..nics.len() {
        if taken[n].is_none() {
            taken[n] = (0..gpus.len())
                .filter_map(|g| aff[n][g].map(|a| (a, g)))
                .min()
                .map(|(_, g)| g);
        }
    }
    (0..nics.len())
        .map(|n| {
            let gpu = taken[n].and_then(|g| Some((g, aff[n][g]?)));
            let closer = gpu.filter(|(_, a)| *a >= Affinity::Node).and_then(|(_, a)| {
                (0..gpus.len())
                    .filter_map(|g| aff[n][g].filter(|&x| x < a).map(|x| (x, g)))
                    .min()
                    .map(|(x, g)| {
                        let by = (0..nics.len())
                            .find(|&m| taken[m] == Some(g))
                            .map_or_else(|| "no rank".to_string(), |m| nics[m].0.clone());
                        (gpus[g].addr.clone(), x, by)
                    })
            });
            Pairing {
                nic: nics[n].0.clone(),
                gpu: gpu.map(|(g, a)| (gpus[g].addr.clone(), a)),
                closer,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
