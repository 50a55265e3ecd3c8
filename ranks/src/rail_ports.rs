//! `pairwise --rails auto`: the ports a host offers as rails, found without a list, and the
//! job's plan from every host's ports (the same count on every host, one rank per port).
//!
//! RDMA: every ACTIVE port of every device under `class/infiniband`. TCP: every interface that
//! is up, not loopback, has an IPv4 address, and is not a bridge or a container's or libvirt's
//! (`docker*`, `virbr*`: NCCL's socket default leaves `docker` and `lo` out too). Both are put
//! in natural order (`mlx5_2` before `mlx5_10`, `eth2` before `eth10`), so rail i is the same
//! port on every host built alike.

use std::cmp::Ordering;
use std::path::Path;

use crate::devices;

/// One port a rank can take as its rail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailPort {
    /// The RDMA device or the interface.
    pub device: String,
    /// The RDMA port number (None for an interface).
    pub port: Option<u8>,
    /// The PCI address behind it, where sysfs shows one (none for veth, Soft-RoCE).
    pub pci: Option<String>,
}

impl RailPort {
    /// `mlx5_0:1` for an RDMA port, `eth0` for an interface.
    pub fn name(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.device),
            None => self.device.clone(),
        }
    }
}

/// `a` before `b` as people count: runs of digits compared as numbers.
pub fn natural(a: &str, b: &str) -> Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut v = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                v.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        v
    }
    let (x, y) = (chunks(a), chunks(b));
    for ((dx, cx), (dy, cy)) in x.iter().zip(&y) {
        let o = if *dx && *dy {
            let (tx, ty) = (cx.trim_start_matches('0'), cy.trim_start_matches('0'));
            tx.len().cmp(&ty.len()).then_with(|| tx.cmp(ty))
        } else {
            cx.cmp(cy)
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    x.len().cmp(&y.len()).then_with(|| a.cmp(b))
}

/// Whether `name` is in `only` (every name where `only` is empty: a `--devices`/`--tcp-if`
/// list, or NCCL's variables, narrows what auto finds).
fn allowed(only: &[String], name: &str) -> bool {
    only.is_empty() || only.iter().any(|o| o == name)
}

/// Every ACTIVE port of the RDMA devices under `root` (of `only`'s devices, where it names some),
/// in natural order of device, then port; none where there is no RDMA.
pub fn verbs_ports(root: &Path, only: &[String]) -> Vec<RailPort> {
    let Ok(devs) = devices::discover(root) else {
        return Vec::new();
    };
    let mut v: Vec<RailPort> = devs
        .iter()
        .filter(|d| allowed(only, &d.name))
        .flat_map(|d| {
            d.ports.iter().filter(|p| p.is_active()).map(|p| RailPort {
                device: d.name.clone(),
                port: Some(p.num),
                pci: d.pci.clone(),
            })
        })
        .collect();
    v.sort_by(|a, b| natural(&a.device, &b.device).then(a.port.cmp(&b.port)));
    v
}

/// An interface as [`tcp_ports`] judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub name: String,
    pub up: bool,
    pub loopback: bool,
    pub ipv4: bool,
}

/// The interfaces of `cands` that can be rails (of `only`, where it names some): up, not
/// loopback, with an IPv4 address, not a bridge (`is_bridge`), not `docker*` or `virbr*`; once
/// each, in natural order.
pub fn rail_interfaces(cands: &[Candidate], only: &[String], is_bridge: impl Fn(&str) -> bool) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for c in cands {
        let virtual_ = c.name.starts_with("docker") || c.name.starts_with("virbr");
        if !c.up || c.loopback || !c.ipv4 || virtual_ || !allowed(only, &c.name) || v.contains(&c.name) {
            continue;
        }
        if !is_bridge(&c.name) {
            v.push(c.name.clone());
        }
    }
    v.sort_by(|a, b| natural(a, b));
    v
}

/// This host's interfaces that can be rails (see [`rail_interfaces`]), each with its PCI
/// address from sysfs under `root`.
pub fn tcp_ports(root: &Path, only: &[String]) -> Result<Vec<RailPort>, nix::Error> {
    use nix::net::if_::InterfaceFlags as F;
    let cands: Vec<Candidate> = nix::ifaddrs::getifaddrs()?
        .map(|i| Candidate {
            up: i.flags.contains(F::IFF_UP),
            loopback: i.flags.contains(F::IFF_LOOPBACK),
            ipv4: i.address.as_ref().and_then(|a| a.as_sockaddr_in()).is_some(),
            name: i.interface_name,
        })
        .collect();
    let net = root.join("class/net");
    let names = rail_interfaces(&cands, only, |n| net.join(n).join("bridge").is_dir());
    Ok(names
        .into_iter()
        .map(|name| {
            let pci = std::fs::read_link(net.join(&name).join("device"))
                .ok()
                .and_then(|t| t.file_name().map(|f| f.to_string_lossy().into_owned()))
                .filter(|f| f.contains(':'));
            RailPort {
                device: name,
                port: None,
                pci,
            }
        })
        .collect())
}

/// Why a job's ports do not make rails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("--rails auto: {host} has no active {what}; bring one up, or run without --rails auto")]
    NoPorts { host: String, what: &'static str },
    #[error(
        "--rails auto: hosts differ in their active {what}: {first} has {} ({}), {host} has {} ({}); every host \
         needs the same rails (bring the missing port up, or name the rails with --devices or --tcp-if)",
        first_ports.len(), first_ports.join(", "), ports.len(), ports.join(", ")
    )]
    Uneven {
        what: &'static str,
        first: String,
        first_ports: Vec<String>,
        host: String,
        ports: Vec<String>,
    },
    #[error(
        "--rails auto: every host has {ports} active {what} ({names}), so the job needs {ports} rank(s) per host, \
         one per port; {host} has {ranks}: start {ports} per host (meshrun launch --ppn {ports}, or mpirun -np {total} \
         --map-by ppr:{ports}:node)"
    )]
    RanksPerHost {
        what: &'static str,
        ports: usize,
        names: String,
        host: String,
        ranks: usize,
        total: usize,
    },
}

/// The rails of a job: each host's ports (by node index, as `node_of` numbers them), `lists`
/// holding what each rank found on its host (its node's first rank's list is the node's), one
/// rank per port on every host. `what` names the ports (`RDMA ports`, `interfaces`).
pub fn plan(
    hosts: &[String],
    node_of: &[usize],
    lists: &[Vec<RailPort>],
    what: &'static str,
) -> Result<Vec<Vec<RailPort>>, PlanError> {
    let nodes = node_of.iter().copied().max().map_or(0, |m| m + 1);
    let mut first_rank: Vec<Option<usize>> = vec![None; nodes];
    let mut ranks = vec![0usize; nodes];
    for (r, &n) in node_of.iter().enumerate() {
        first_rank[n].get_or_insert(r);
        ranks[n] += 1;
    }
    let firsts: Vec<usize> = first_rank.into_iter().flatten().collect();
    let host = |r: usize| hosts.get(r).cloned().unwrap_or_default();
    let names = |r: usize| {
        lists
            .get(r)
            .map_or_else(Vec::new, |l| l.iter().map(RailPort::name).collect())
    };
    let mut out = Vec::with_capacity(firsts.len());
    for &r in &firsts {
        let list = lists.get(r).cloned().unwrap_or_default();
        if list.is_empty() {
            return Err(PlanError::NoPorts { host: host(r), what });
        }
        if let Some(&f) = firsts.first().filter(|&&f| names(f).len() != list.len()) {
            return Err(PlanError::Uneven {
                what,
                first: host(f),
                first_ports: names(f),
                host: host(r),
                ports: names(r),
            });
        }
        out.push(list);
    }
    let ports = out.first().map_or(0, Vec::len);
    let counted = firsts.iter().zip(ranks.iter().filter(|&&k| k > 0));
    if let Some((&r, &have)) = counted.clone().find(|(_, &k)| k != ports) {
        return Err(PlanError::RanksPerHost {
            what,
            ports,
            names: firsts.first().map(|&f| names(f).join(", ")).unwrap_or_default(),
            host: host(r),
            ranks: have,
            total: ports * firsts.len(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
