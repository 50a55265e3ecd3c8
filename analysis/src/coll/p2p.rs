//! How a GPU run's device data moved between ranks (`-g`, `--p2p`): by CUDA IPC between the
//! ranks of one node, or over the network; one header line and the JSON's `config.p2p` (the
//! collectives' and `pairwise --use-cuda`'s alike).

use serde::{Deserialize, Serialize};

/// The ranks of one node that reached each other by IPC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpcNode {
    pub host: String,
    pub ranks: Vec<usize>,
}

/// Which path each hop of a GPU run took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct P2p {
    /// `ipc` or `net`: the hops between ranks of one node.
    pub within_nodes: String,
    /// Always `net`: the hops between nodes.
    pub between_nodes: String,
    /// The nodes of more than one rank, whose ranks reached each other by IPC (none under `net`).
    pub ipc_nodes: Vec<IpcNode>,
    /// Nodes in the job.
    pub nodes: usize,
    /// Where the choice came from (`--p2p ipc`, `NCCL_P2P_DISABLE=1`), or why IPC was not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// `0-3`, `0,2,4-5`: ranks in order, runs folded.
pub fn rank_ranges(ranks: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(match j > i {
            true => format!("{}-{}", ranks[i], ranks[j]),
            false => ranks[i].to_string(),
        });
        i = j + 1;
    }
    out.join(",")
}

impl P2p {
    /// Every hop over the network, in a job of `nodes` nodes, `why` said in the line.
    pub fn net(nodes: usize, why: Option<String>) -> P2p {
        P2p {
            within_nodes: "net".into(),
            between_nodes: "net".into(),
            ipc_nodes: Vec::new(),
            nodes,
            why,
        }
    }

    /// `ipc within nodes (ranks 0-3 on a; ranks 4-7 on b), net between nodes`.
    pub fn line(&self) -> String {
        let within = if self.nodes > 1 {
            "within nodes"
        } else {
            "within the node"
        };
        let mut s = if self.within_nodes == "ipc" {
            let nodes: Vec<String> = self
                .ipc_nodes
                .iter()
                .map(|n| format!("ranks {} on {}", rank_ranges(&n.ranks), n.host))
                .collect();
            format!("ipc {within} ({})", nodes.join("; "))
        } else {
            format!("net {within}")
        };
        if self.nodes > 1 {
            s.push_str(", net between nodes");
        }
        if let Some(w) = &self.why {
            s.push_str(&format!(" ({w})"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_each_hops_path() {
        assert_eq!(rank_ranges(&[0, 1, 2, 3]), "0-3");
        assert_eq!(rank_ranges(&[0, 2, 4, 5]), "0,2,4-5");
        assert_eq!(rank_ranges(&[]), "");
        let node = |host: &str, ranks: Vec<usize>| IpcNode {
            host: host.into(),
            ranks,
        };
        let p = P2p {
            within_nodes: "ipc".into(),
            between_nodes: "net".into(),
            ipc_nodes: vec![node("a", vec![0, 1, 2, 3]), node("b", vec![4, 5, 6, 7])],
            nodes: 2,
            why: None,
        };
        assert_eq!(
            p.line(),
            "ipc within nodes (ranks 0-3 on a; ranks 4-7 on b), net between nodes"
        );
        let p = P2p {
            within_nodes: "net".into(),
            ipc_nodes: vec![],
            nodes: 1,
            why: Some("NCCL_P2P_DISABLE=1".into()),
            ..p
        };
        assert_eq!(p.line(), "net within the node (NCCL_P2P_DISABLE=1)");
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["within_nodes"], "net");
        assert_eq!(v["why"], "NCCL_P2P_DISABLE=1");
    }
}
