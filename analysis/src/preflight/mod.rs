//! `meshrun preflight`: what each rank read about its node and itself before any traffic, and
//! what is made of it: the odd nodes and ranks named against the job's majority
//! ([`majority`]), each node against an expectation file ([`expect`]), and the problems a node
//! has on its own (a port down, memlock below what the run registers). Nothing here reads the
//! machine: `ranks::inventory` does, and a fixture or a saved `--json` is judged the same way.

pub mod expect;
pub mod majority;
pub mod report;

use serde::{Deserialize, Serialize};

/// How a difference between nodes, or from an expectation, counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth a look; the run can go ahead (another firmware, a kernel release).
    Warning,
    /// The run would fail or mislead (a port down, memlock below need, a GID type or MTU that
    /// differs between the ends of a pair): exit status 1.
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One fact: what it is about (`mlx5_0 port 1`, `gpu 0000:18:00.0`, `node`, `env`), its name
/// (`rate`, `fw_ver`, `NCCL_IB_HCA`) and its value as read (`unset` for a variable not set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fact {
    pub scope: String,
    pub name: String,
    pub value: String,
    /// How a difference in this fact between nodes counts.
    pub severity: Severity,
}

impl Fact {
    pub fn new(scope: &str, name: &str, value: impl Into<String>, severity: Severity) -> Fact {
        Fact {
            scope: scope.to_string(),
            name: name.to_string(),
            value: value.into(),
            severity,
        }
    }
}

/// A problem with one node or rank, found on its own or against the others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub severity: Severity,
    /// The hosts (or `host rank N`) it applies to.
    pub subjects: Vec<String>,
    /// One line, without the severity.
    pub text: String,
    /// What it is about: the fact's name (`rate`, `fw_ver`), or the kind of check (`acs`,
    /// `memlock`, `nic_pcie`, `gpu_affinity`, ...), so a report that judges some of these itself
    /// can leave them out ([`beside_config`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub about: String,
}

/// What pairwise and the collectives already judge in their `# Config:` lines, from the NIC the
/// run uses: its port rate, MTUs, its PCIe link, GPUs far from every NIC.
const IN_CONFIG: &[&str] = &["rate", "mtu", "netdev_mtu", "active_mtu", "nic_pcie", "gpu_affinity"];

/// The findings a run's `# Config:` lines do not already give: port rates, MTUs, the NIC's PCIe
/// link, GPUs far from every NIC.
pub fn beside_config(found: Vec<Finding>) -> Vec<Finding> {
    found
        .into_iter()
        .filter(|f| !IN_CONFIG.contains(&f.about.as_str()))
        .collect()
}

/// `error mr-h1: mlx5_0: ...`: a finding as one `# Config:` line gives it.
pub fn config_line(f: &Finding) -> String {
    format!("{} {}: {}", f.severity.as_str(), f.subjects.join(", "), f.text)
}

/// What one rank reports.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Inventory {
    pub rank: usize,
    pub host: String,
    /// The node's facts (the host's first rank reads them; empty on its other ranks).
    pub node: Vec<Fact>,
    /// This process's own facts (limits, environment, version), as mpirun started it.
    pub process: Vec<Fact>,
    /// Problems this rank found on its own (a port down, a limit below need, an error counter
    /// already counting, ACS on a GPU-to-NIC path).
    pub local: Vec<Finding>,
}

impl Inventory {
    /// `host rank N`: the subject of a process fact.
    pub fn rank_label(&self) -> String {
        format!("{} rank {}", self.host, self.rank)
    }
}

/// A RoCE port's active MTU that differs where its interface's MTU differs too, on the same nodes:
/// the kernel derives the one from the other, so the interface's line says it.
fn follows_interface(f: &Finding, all: &[Finding]) -> bool {
    let Some(scope) = f.text.split(": active_mtu ").next().filter(|_| f.about == "active_mtu") else {
        return false;
    };
    all.iter().any(|o| {
        o.about == "netdev_mtu" && o.subjects == f.subjects && o.text.starts_with(&format!("{scope}: netdev_mtu "))
    })
}

/// Everything rank 0 found: the node's own problems, then the odd ones against the majority,
/// then the differences from an expectation file; errors first within each part.
pub fn judge(all: &[Inventory], expected: Option<&expect::Expectations>) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for inv in all {
        for f in &inv.local {
            // Every rank of a host may find the same thing (a limit): say it once per text.
            match out.iter_mut().find(|o| o.text == f.text && o.severity == f.severity) {
                Some(o) => {
                    for s in &f.subjects {
                        if !o.subjects.contains(s) {
                            o.subjects.push(s.clone());
                        }
                    }
                }
                None => out.push(f.clone()),
            }
        }
    }
    let own = out.len();
    let nodes: Vec<(String, &[Fact])> = all
        .iter()
        .filter(|i| !i.node.is_empty())
        .map(|i| (i.host.clone(), i.node.as_slice()))
        .collect();
    out.extend(majority::odd_ones(&nodes));
    let procs: Vec<(String, &[Fact])> = all.iter().map(|i| (i.rank_label(), i.process.as_slice())).collect();
    out.extend(majority::odd_ones(&procs));
    // A difference the node's own check already named (a memlock below need, which also
    // differs from the others') is said once, by the own check.
    let head = |t: &str| t.split(',').next().unwrap_or(t).to_string();
    let (local, compared) = out.split_at(own);
    let compared: Vec<Finding> = compared
        .iter()
        .filter(|c| {
            !local
                .iter()
                .any(|l| head(&l.text) == head(&c.text) && c.subjects.iter().all(|s| l.subjects.contains(s)))
                && !follows_interface(c, compared)
        })
        .cloned()
        .collect();
    out = [local.to_vec(), compared].concat();
    if let Some(e) = expected {
        for (host, facts) in &nodes {
            out.extend(e.check(host, facts));
        }
        for inv in all {
            out.extend(e.check(&inv.rank_label(), &inv.process));
        }
    }
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(rank: usize, host: &str, fw: &str, memlock: &str, low: bool) -> Inventory {
        let local = if low {
            vec![Finding {
                severity: Severity::Error,
                subjects: vec![format!("{host} rank {rank}")],
                text: format!("process: memlock_kib {memlock}, below the 3056 KiB a verbs run needs"),
                about: "memlock".into(),
            }]
        } else {
            Vec::new()
        };
        Inventory {
            rank,
            host: host.into(),
            // The host's first rank reads the node.
            node: if rank.is_multiple_of(2) {
                vec![Fact::new("mlx5_0", "fw_ver", fw, Severity::Warning)]
            } else {
                Vec::new()
            },
            process: vec![Fact::new("process", "memlock_kib", memlock, Severity::Warning)],
            local,
        }
    }

    #[test]
    fn a_port_mtu_that_follows_its_interface_s_is_named_once() {
        let port = |host: &str, netdev: &str, active: &str, pfc: &str| Inventory {
            host: host.to_string(),
            node: vec![
                Fact::new("mlx5_0 port 1", "netdev_mtu", netdev, Severity::Error),
                Fact::new("mlx5_0 port 1", "active_mtu", active, Severity::Error),
                Fact::new("mlx5_0 port 1", "pfc", pfc, Severity::Warning),
            ],
            ..Inventory::default()
        };
        let all = vec![
            port("h0", "9000", "4096", "3"),
            port("h1", "9000", "4096", "3"),
            port("h2", "1500", "1024", "3"),
            port("h3", "9000", "4096", "off"),
        ];
        let texts: Vec<String> = judge(&all, None).into_iter().map(|f| f.text).collect();
        assert!(
            texts.contains(&"mlx5_0 port 1: netdev_mtu 1500, 3 others 9000".to_string()),
            "{texts:?}"
        );
        assert!(!texts.iter().any(|t| t.contains("active_mtu")), "{texts:?}");
        assert!(
            texts.contains(&"mlx5_0 port 1: pfc off, 3 others 3".to_string()),
            "{texts:?}"
        );
        // An active MTU that differs on its own (a device capped lower) is named.
        let all = vec![
            port("h0", "9000", "4096", "3"),
            port("h1", "9000", "4096", "3"),
            port("h2", "9000", "2048", "3"),
        ];
        let texts: Vec<String> = judge(&all, None).into_iter().map(|f| f.text).collect();
        assert_eq!(texts, vec!["mlx5_0 port 1: active_mtu 2048, 2 others 4096"]);
    }

    #[test]
    fn a_rank_problem_is_said_once_per_host_and_not_again_by_the_majority() {
        let all = vec![
            inv(0, "h0", "1", "unlimited", false),
            inv(1, "h0", "1", "unlimited", false),
            inv(2, "h1", "1", "unlimited", false),
            inv(3, "h1", "1", "unlimited", false),
            inv(4, "h2", "2", "2048", true),
            inv(5, "h2", "2", "2048", true),
        ];
        let found = judge(&all, None);
        let lines: Vec<String> = found
            .iter()
            .map(|f| format!("{} {}: {}", f.severity.as_str(), f.subjects.join(", "), f.text))
            .collect();
        assert_eq!(
            lines,
            vec![
                "error h2 rank 4, h2 rank 5: process: memlock_kib 2048, below the 3056 KiB a verbs run needs",
                "warning h2: mlx5_0: fw_ver 2, 2 others 1",
            ]
        );
    }
}
