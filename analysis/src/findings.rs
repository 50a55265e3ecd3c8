//! Configuration findings, before any traffic: every rank says which NIC it uses and how that
//! NIC is set up (port rate and width, MTU, PCIe link), and rank 0 names the outliers operators
//! otherwise find by hand: a port below its peers' rate, a PCIe link trained below its maximum,
//! a GPU whose closest NIC is across a NUMA node, MTUs that differ between ranks (a pair runs at
//! the smaller end's MTU).

use serde::{Deserialize, Serialize};

/// A PCIe link as trained and at most (GT/s per lane, lanes).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pcie {
    pub speed: f64,
    pub width: u32,
    pub max_speed: f64,
    pub max_width: u32,
}

/// What one rank reports about its own setup.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RankFacts {
    pub rank: usize,
    pub host: String,
    /// The RDMA device and port, or the network interface, its traffic uses.
    pub nic: Option<String>,
    /// The port's rate as sysfs gives it (`100 Gb/sec (4X EDR)`) and in Gb/s.
    pub rate: Option<String>,
    pub rate_gbps: Option<f64>,
    /// Active MTU in bytes.
    pub mtu: Option<u32>,
    /// The NIC's PCI address and link.
    pub pci: Option<String>,
    pub pcie: Option<Pcie>,
    /// GPUs of this host whose closest RDMA NIC is across a NUMA node or root complex (reported
    /// by the host's first rank only).
    #[serde(default)]
    pub gpu_warnings: Vec<String>,
}

/// Gb/s from a sysfs rate (`100 Gb/sec (4X EDR)`, `2.5 Gb/sec (1X SDR)`).
pub fn rate_gbps(rate: &str) -> Option<f64> {
    rate.split_whitespace().next()?.parse().ok()
}

/// `mr-h1 eth0 (ranks 2, 3)`: where a finding applies.
fn place(group: &[&RankFacts]) -> String {
    let ranks: Vec<String> = group.iter().map(|f| f.rank.to_string()).collect();
    let nic = group[0].nic.as_deref().unwrap_or("?");
    let which = if ranks.len() == 1 { "rank" } else { "ranks" };
    format!("{nic} on {} ({which} {})", group[0].host, ranks.join(", "))
}

/// Group ranks by (host, NIC), in rank order of first appearance.
fn by_nic<'a>(facts: impl Iterator<Item = &'a RankFacts>) -> Vec<Vec<&'a RankFacts>> {
    let mut groups: Vec<Vec<&RankFacts>> = Vec::new();
    for f in facts {
        match groups.iter_mut().find(|g| g[0].host == f.host && g[0].nic == f.nic) {
            Some(g) => g.push(f),
            None => groups.push(vec![f]),
        }
    }
    groups
}

/// One line per finding, without the `# Config: ` prefix; empty when nothing stands out.
pub fn findings(facts: &[RankFacts]) -> Vec<String> {
    let mut out = Vec::new();
    // Ports below the fastest port in the job.
    let top = facts.iter().filter_map(|f| f.rate_gbps).fold(0.0, f64::max);
    let fastest = facts
        .iter()
        .find(|f| f.rate_gbps == Some(top))
        .and_then(|f| f.rate.clone());
    for g in by_nic(facts.iter().filter(|f| f.rate_gbps.is_some_and(|r| r < top))) {
        out.push(format!(
            "port below its peers: {} runs at {} where others run at {}",
            place(&g),
            g[0].rate.as_deref().unwrap_or("?"),
            fastest.as_deref().unwrap_or("?")
        ));
    }
    // PCIe links trained below their maximum.
    for g in by_nic(
        facts
            .iter()
            .filter(|f| f.pcie.is_some_and(|p| p.speed < p.max_speed || p.width < p.max_width)),
    ) {
        if let Some(p) = g[0].pcie {
            out.push(format!(
                "PCIe link below its maximum: {} at {} trained at {:.1} GT/s x{} of {:.1} GT/s x{}",
                place(&g),
                g[0].pci.as_deref().unwrap_or("?"),
                p.speed,
                p.width,
                p.max_speed,
                p.max_width
            ));
        }
    }
    // GPUs far from every RDMA NIC of their host.
    for f in facts {
        for w in &f.gpu_warnings {
            out.push(format!("GPU far from its NICs on {}: {w}", f.host));
        }
    }
    // MTUs that differ: the most common one is taken as intended, the others named.
    let mut mtus: Vec<(u32, usize)> = Vec::new();
    for m in facts.iter().filter_map(|f| f.mtu) {
        match mtus.iter_mut().find(|x| x.0 == m) {
            Some(x) => x.1 += 1,
            None => mtus.push((m, 1)),
        }
    }
    if mtus.len() > 1 {
        let common = mtus.iter().max_by_key(|x| (x.1, x.0)).map_or(0, |x| x.0);
        for g in by_nic(facts.iter().filter(|f| f.mtu.is_some_and(|m| m != common))) {
            out.push(format!(
                "MTU differs: {} has {} B where the other ranks have {common} B; its pairs run at the smaller end's MTU",
                place(&g),
                g[0].mtu.unwrap_or(0)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(rank: usize, host: &str, nic: &str) -> RankFacts {
        RankFacts {
            rank,
            host: host.into(),
            nic: Some(nic.into()),
            rate: Some("200 Gb/sec (4X HDR)".into()),
            rate_gbps: Some(200.0),
            mtu: Some(4096),
            pci: Some("0000:18:00.0".into()),
            pcie: Some(Pcie {
                speed: 16.0,
                width: 16,
                max_speed: 16.0,
                max_width: 16,
            }),
            gpu_warnings: Vec::new(),
        }
    }

    fn cluster() -> Vec<RankFacts> {
        (0..8)
            .map(|r| rank(r, &format!("node{}", r / 2), &format!("mlx5_{} port 1", r % 2)))
            .collect()
    }

    #[test]
    fn a_uniform_cluster_has_no_findings() {
        assert!(findings(&cluster()).is_empty());
        assert!(findings(&[]).is_empty());
    }

    #[test]
    fn each_outlier_is_named_once_per_nic() {
        let mut c = cluster();
        c[5].rate = Some("100 Gb/sec (4X EDR)".into());
        c[5].rate_gbps = rate_gbps("100 Gb/sec (4X EDR)");
        for r in [2, 3] {
            c[r].mtu = Some(1024);
            c[r].nic = Some("mlx5_0 port 1".into());
        }
        c[6].pcie = Some(Pcie {
            speed: 8.0,
            width: 8,
            max_speed: 16.0,
            max_width: 16,
        });
        c[6].pci = Some("0000:98:00.0".into());
        c[4].gpu_warnings = vec!["GPU 0000:9a:00.0 has no RDMA NIC on its own NUMA node".into()];
        assert_eq!(
            findings(&c),
            vec![
                "port below its peers: mlx5_1 port 1 on node2 (rank 5) runs at 100 Gb/sec (4X EDR) where others run at \
                 200 Gb/sec (4X HDR)",
                "PCIe link below its maximum: mlx5_0 port 1 on node3 (rank 6) at 0000:98:00.0 trained at 8.0 GT/s x8 of \
                 16.0 GT/s x16",
                "GPU far from its NICs on node2: GPU 0000:9a:00.0 has no RDMA NIC on its own NUMA node",
                "MTU differs: mlx5_0 port 1 on node1 (ranks 2, 3) has 1024 B where the other ranks have 4096 B; its pairs \
                 run at the smaller end's MTU",
            ]
        );
    }

    #[test]
    fn rates_parse() {
        assert_eq!(rate_gbps("2.5 Gb/sec (1X SDR)"), Some(2.5));
        assert_eq!(rate_gbps("400 Gb/sec (4X NDR)"), Some(400.0));
        assert_eq!(rate_gbps(""), None);
    }
}
