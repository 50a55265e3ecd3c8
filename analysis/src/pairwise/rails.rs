//! `--rails`: GPU clusters wire NIC i of every node to rail i, and traffic of local rank i stays
//! on rail i. Each rail is its own population with its own bar, retests and verdict (rails can
//! differ in speed, and a slow rail-1 NIC must not be judged against rail 0); pairs within a node
//! (`--rails --intra-node`) are judged apart as always.
//!
//! Within one rail every node has one rank, so the blame levels read differently: a "node" of a
//! rail (most of its links on the rail slow) is that node's NIC on the rail ([`Part::RailNic`]),
//! and a "host link" of a rail is one rank pair. A node whose NICs are slow on every rail it has
//! (two or more) is the node itself: its PCIe, memory or CPU, not one NIC.
//!
//! The same split serves a GPU run's pairs over IPC (`pairwise --use-cuda`, GPU to GPU within a
//! node): each node's pairs over IPC are a population of their own (NVLink or PCIe figures, not
//! comparable with the network's nor, where nodes differ, with another node's), judged like any
//! population, so one slow GPU link is named; the network's pairs keep theirs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::blame::{slow_counts, Part, SlowPair};
use super::topology::Topology;
use super::verdict::{self, RetestPlan, Verdict};
use super::{HopPath, Measurement, PairwiseConfig, Selection};
use crate::schedule::Pair;
use unstable::unstable_nodes;

mod unstable;

/// One rail's ranks, NICs and verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RailOutcome {
    pub rail: usize,
    /// Its ranks, one per node, in rank order.
    pub ranks: Vec<usize>,
    /// The device or interface each of those ranks used (as the configuration facts read it).
    pub nics: Vec<Option<String>>,
    pub verdict: Verdict,
}

/// What rank 0 knows of the fabric besides the host names: the `--topology` file and the NIC
/// each rank used (None where it could not be read).
#[derive(Debug, Clone, Copy, Default)]
pub struct Fabric<'a> {
    pub topology: Option<&'a Topology>,
    pub nics: &'a [Option<String>],
}

/// Which population of a `--rails` run, or of a run with pairs over IPC, a pair belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Group {
    Rail(usize),
    /// Pairs between hosts, where they are not split by rail.
    Between,
    WithinHost,
    /// The pairs over IPC within one node (its index among the hosts).
    Node(usize),
}

struct Groups {
    local: Vec<usize>,
    hosts: Vec<String>,
    rails: bool,
    /// Pairs within a host went over IPC: each node's are a population of its own.
    per_node: bool,
}

impl Groups {
    fn new(hosts: &[String], cfg: &PairwiseConfig, first: &[Measurement]) -> Groups {
        Groups {
            // The local ranks as the World numbers them.
            local: hostfiles::placement(hosts).2,
            hosts: hosts.to_vec(),
            rails: is_rails(cfg),
            per_node: over_ipc(first),
        }
    }

    /// Whether the run is judged by groups at all (else as one, by [`verdict::judge_pairs`]).
    fn split(&self) -> bool {
        self.rails || self.per_node
    }

    /// None: a pair of two rails (not scheduled by `--rails`).
    fn of(&self, (a, b): Pair) -> Option<Group> {
        if self.hosts[a] == self.hosts[b] && self.per_node {
            Some(Group::Node(self.host_index(a)))
        } else if self.hosts[a] == self.hosts[b] {
            Some(Group::WithinHost)
        } else if !self.rails {
            Some(Group::Between)
        } else if self.local[a] == self.local[b] {
            Some(Group::Rail(self.local[a]))
        } else {
            None
        }
    }

    fn host_index(&self, r: usize) -> usize {
        self.hosts.iter().position(|h| *h == self.hosts[r]).unwrap_or(r)
    }

    fn by_group(&self, ms: &[Measurement]) -> BTreeMap<Group, Vec<Measurement>> {
        let mut out: BTreeMap<Group, Vec<Measurement>> = BTreeMap::new();
        for m in ms {
            if let Some(g) = self.of((m.src, m.dst)) {
                out.entry(g).or_default().push(m.clone());
            }
        }
        out
    }
}

fn is_rails(cfg: &PairwiseConfig) -> bool {
    matches!(cfg.selection, Selection::Rails { .. })
}

/// Whether any pair of `ms` went GPU to GPU over IPC.
fn over_ipc(ms: &[Measurement]) -> bool {
    ms.iter().any(|m| m.path == Some(HopPath::Ipc))
}

/// What to retest alone: per rail (and within hosts) under `--rails`, per node for pairs over
/// IPC, else over the whole run.
pub fn plan_rail_retests(
    first: &[Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    topology: Option<&Topology>,
) -> RetestPlan {
    let groups = Groups::new(hosts, cfg, first);
    if !groups.split() {
        return verdict::plan_retests_in(first, cfg, hosts, topology);
    }
    let mut plan = RetestPlan {
        at_once: true,
        ..RetestPlan::default()
    };
    for ms in groups.by_group(first).values() {
        // Rails are planned without the topology, as they are judged.
        let p = verdict::plan_retests_in(ms, cfg, hosts, topology.filter(|_| !groups.rails));
        plan.suspects.extend(p.suspects);
        plan.references.extend(p.references);
        plan.at_once &= p.at_once;
    }
    plan
}

/// The verdict of the run, and under `--rails` one per rail (the run's verdict then carries
/// every confirmed pair and blamed part, and the bars of the other populations: pairs between
/// hosts where not by rail, within hosts, each node's over IPC).
pub fn judge_rails(
    first: &[Measurement],
    retests: &[Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    plan: &RetestPlan,
    fabric: Fabric,
) -> (Verdict, Vec<RailOutcome>) {
    let groups = Groups::new(hosts, cfg, first);
    if !groups.split() {
        return (
            verdict::judge_pairs(first, retests, cfg, hosts, plan, fabric.topology),
            Vec::new(),
        );
    }
    let retests_of = groups.by_group(retests);
    let nic_of = |r: usize| fabric.nics.get(r).cloned().flatten();
    let mut rails: Vec<RailOutcome> = Vec::new();
    let mut others: Vec<Verdict> = Vec::new();
    for (g, ms) in groups.by_group(first) {
        let in_group = |p: &Pair| groups.of(*p) == Some(g);
        let sub_plan = RetestPlan {
            suspects: plan.suspects.iter().copied().filter(in_group).collect(),
            references: plan.references.iter().copied().filter(in_group).collect(),
            paths: Vec::new(),
            at_once: plan.at_once,
            at_once_noise: plan.at_once_noise,
            amount: plan.amount,
            settled: plan.settled,
        };
        let re = retests_of.get(&g).map_or(&[][..], Vec::as_slice);
        let mut v = verdict::judge_pairs(&ms, re, cfg, hosts, &sub_plan, fabric.topology);
        match g {
            Group::Between | Group::WithinHost => others.push(v),
            Group::Node(h) => {
                for j in &mut v.judged {
                    j.host = Some(hosts[h].clone());
                }
                others.push(v);
            }
            Group::Rail(rail) => {
                let ranks: Vec<usize> = (0..hosts.len()).filter(|&r| groups.local[r] == rail).collect();
                let verdict = on_rail(v, rail, &ranks, hosts, &nic_of);
                rails.push(RailOutcome {
                    rail,
                    nics: ranks.iter().map(|&r| nic_of(r)).collect(),
                    ranks,
                    verdict,
                });
            }
        }
    }
    (overall(cfg, &rails, others, hosts), rails)
}

/// Warnings for ranks of one host that use the same NIC under `--rails` (its rails would share a
/// NIC, and a slow NIC would look like a slow node); `nics` by rank, None where unknown.
pub fn shared_nics(hosts: &[String], nics: &[Option<String>]) -> Vec<String> {
    let mut by_host_nic: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for (r, nic) in nics.iter().enumerate() {
        if let (Some(h), Some(n)) = (hosts.get(r), nic) {
            by_host_nic.entry((h, n)).or_default().push(r);
        }
    }
    by_host_nic
        .into_iter()
        .filter(|(_, ranks)| ranks.len() > 1)
        .map(|((h, n), ranks)| {
            let ranks: Vec<String> = ranks.iter().map(usize::to_string).collect();
            format!(
                "--rails: ranks {} on {h} all use {n}; give each local rank its own NIC with --devices or a --tcp-if list",
                ranks.join(", ")
            )
        })
        .collect()
}

/// Read one rail's verdict as a rail: its "nodes" are NICs on the rail, its "host links" rank
/// pairs.
fn on_rail(
    mut v: Verdict,
    rail: usize,
    ranks: &[usize],
    hosts: &[String],
    nic_of: &dyn Fn(usize) -> Option<String>,
) -> Verdict {
    let confirmed = v.confirmed.clone();
    // A node of one rail is its NIC on that rail, unstable as well as slow.
    for u in &mut v.unstable {
        if let Part::Node { host, counts } = &u.part {
            let rank = ranks.iter().copied().find(|&r| hosts[r] == *host).unwrap_or(0);
            u.part = Part::RailNic {
                rail,
                rank,
                nic: nic_of(rank),
                host: host.clone(),
                counts: counts.clone(),
            };
        }
    }
    v.blamed = v
        .blamed
        .into_iter()
        .flat_map(|part| match part {
            Part::Node { host, counts } => {
                let rank = ranks.iter().copied().find(|&r| hosts[r] == host).unwrap_or(0);
                vec![Part::RailNic {
                    rail,
                    rank,
                    nic: nic_of(rank),
                    host,
                    counts,
                }]
            }
            Part::HostLink { host_a, host_b, .. } => confirmed
                .iter()
                .filter(|p| (p.host_a == host_a && p.host_b == host_b) || (p.host_a == host_b && p.host_b == host_a))
                .map(|p| Part::RankPair { pair: p.clone() })
                .collect(),
            other => vec![other],
        })
        .collect();
    v
}

/// How many of `rails` host `h` has a rank on.
fn rails_of(rails: &[RailOutcome], hosts: &[String], h: &str) -> usize {
    rails.iter().filter(|r| r.ranks.iter().any(|&x| hosts[x] == h)).count()
}

/// The run's verdict over all rails: a node whose NICs are slow on all its rails (two or more)
/// is blamed as the node, the rest of every rail's parts as they are, then the other
/// populations' (pairs between hosts not by rail, within hosts, each node's over IPC).
fn overall(cfg: &PairwiseConfig, rails: &[RailOutcome], others: Vec<Verdict>, hosts: &[String]) -> Verdict {
    let rails_of = |h: &str| rails_of(rails, hosts, h);
    let mut slow_rails: BTreeMap<&str, Vec<&SlowPair>> = BTreeMap::new();
    let mut slow_count: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rails {
        for p in &r.verdict.blamed {
            if let Part::RailNic { host, rank, .. } = p {
                *slow_count.entry(host).or_default() += 1;
                slow_rails
                    .entry(host)
                    .or_default()
                    .extend(r.verdict.confirmed.iter().filter(|s| s.a == *rank || s.b == *rank));
            }
        }
    }
    let nodes: Vec<&str> = slow_count
        .iter()
        .filter(|(h, &k)| k >= 2 && k == rails_of(h))
        .map(|(h, _)| *h)
        .collect();
    let mut blamed: Vec<Part> = nodes
        .iter()
        .map(|&h| Part::Node {
            host: h.to_string(),
            counts: slow_counts(slow_count[h], rails_of(h), slow_rails[h].iter().copied()),
        })
        .collect();
    let shaky = unstable_nodes(rails, hosts, &slow_count, &nodes);
    let rolled_up = |h: &str| {
        nodes.contains(&h)
            || shaky
                .iter()
                .any(|u| matches!(&u.part, Part::Node { host, .. } if host == h))
    };
    let mut confirmed = Vec::new();
    let mut cleared = Vec::new();
    let mut unstable = shaky.clone();
    let mut fabric = Vec::new();
    let mut links = Vec::new();
    let mut uplink_paths = Vec::new();
    let mut unrouted = Vec::new();
    for r in rails {
        fabric.extend(r.verdict.fabric.iter().cloned());
        links.extend(r.verdict.links.iter().cloned());
        unrouted.extend(r.verdict.unrouted.iter().copied());
        uplink_paths.extend(r.verdict.uplink_paths.iter().cloned());
        blamed.extend(
            r.verdict
                .blamed
                .iter()
                .filter(|p| !matches!(p, Part::RailNic { host, .. } if rolled_up(host)))
                .cloned(),
        );
        confirmed.extend(r.verdict.confirmed.iter().cloned());
        cleared.extend(r.verdict.cleared.iter().copied());
        unstable.extend(
            r.verdict
                .unstable
                .iter()
                .filter(|u| !matches!(&u.part, Part::RailNic { host, .. } if rolled_up(host)))
                .cloned(),
        );
    }
    let mut judged = Vec::new();
    for w in others {
        blamed.extend(w.blamed);
        confirmed.extend(w.confirmed);
        cleared.extend(w.cleared);
        unstable.extend(w.unstable);
        fabric.extend(w.fabric);
        links.extend(w.links);
        uplink_paths.extend(w.uplink_paths);
        unrouted.extend(w.unrouted);
        judged.extend(w.judged);
    }
    unrouted.sort_unstable();
    unrouted.dedup();
    Verdict {
        rule: verdict::rule(cfg),
        judged,
        cleared,
        pass: Verdict::passes(&confirmed, &unstable, cfg),
        unstable,
        confirmed,
        blamed,
        fabric,
        links,
        uplink_paths,
        unrouted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pairwise::formulas::BwResult;
    use crate::pairwise::OpName;

    fn cfg() -> PairwiseConfig {
        PairwiseConfig {
            window: 4,
            selection: Selection::Rails { intra: false },
            ..PairwiseConfig::synthetic(OpName::Write, 1 << 20, 10)
        }
    }

    fn m(src: usize, dst: usize, gbps: f64) -> Measurement {
        Measurement {
            src,
            dst,
            bytes: 1 << 20,
            bw: Some(BwResult {
                bytes: 1 << 20,
                iterations: 10,
                peak_gbps: gbps,
                avg_gbps: gbps,
                msg_rate_mpps: 0.0,
                low_gbps: None,
            }),
            lat: None,
            iterations: 10,
            retest: false,
            paths: Vec::new(),
            connections: Vec::new(),
            slot: None,
            path: None,
        }
    }

    /// `h` hosts x `rails` ranks (rank = host * rails + rail); every rail pair measured both
    /// ways at a noisy healthy speed (rail 1 twice as fast as rail 0: rails differ), except the
    /// directions `slow(src, dst)` names (at that speed, with the same noise).
    fn rail_run(h: usize, rails: usize, slow: impl Fn(usize, usize) -> Option<f64>) -> (Vec<String>, Vec<Measurement>) {
        let hosts: Vec<String> = (0..h * rails).map(|r| format!("n{}", r / rails)).collect();
        let mut ms = Vec::new();
        for a in 0..h * rails {
            for b in 0..h * rails {
                if a != b && a % rails == b % rails && a / rails != b / rails {
                    let base = 10.0 * (1 + a % rails) as f64;
                    // +-20% of deterministic noise.
                    let noise = 1.0 + 0.2 * (((a * 7 + b * 13) % 11) as f64 / 5.0 - 1.0);
                    // A slow part's cells are as noisy as the rest: a noise-free slow part
                    // would read as a quiet fabric to the pairs' directions (verdict/small.rs).
                    ms.push(m(a, b, slow(a, b).map_or(base * noise, |g| g * noise)));
                }
            }
        }
        (hosts, ms)
    }

    /// Retest alone what the plan says, at the same figures as the first pass.
    fn judge(hosts: &[String], first: &[Measurement], nics: &[Option<String>]) -> (Verdict, Vec<RailOutcome>) {
        judge_with(&cfg(), hosts, first, nics)
    }

    fn judge_with(
        c: &PairwiseConfig,
        hosts: &[String],
        first: &[Measurement],
        nics: &[Option<String>],
    ) -> (Verdict, Vec<RailOutcome>) {
        let plan = plan_rail_retests(first, c, hosts, None);
        let retests: Vec<Measurement> = first
            .iter()
            .filter(|x| plan.pairs().contains(&x.pair()))
            .cloned()
            .collect();
        judge_rails(first, &retests, c, hosts, &plan, Fabric { topology: None, nics })
    }

    fn labels(parts: &[Part]) -> Vec<String> {
        parts.iter().map(Part::label).collect()
    }

    #[test]
    fn ranks_of_one_host_on_one_nic_are_named() {
        let hosts: Vec<String> = ["a", "a", "b", "b"].iter().map(|s| s.to_string()).collect();
        let nic = |s: &str| Some(s.to_string());
        assert!(shared_nics(&hosts, &[nic("eth0"), nic("eth1"), nic("eth0"), nic("eth1")]).is_empty());
        assert_eq!(
            shared_nics(&hosts, &[nic("eth0"), nic("eth0"), nic("eth0"), None]),
            vec![
                "--rails: ranks 0, 1 on a all use eth0; give each local rank its own NIC with --devices or a --tcp-if list"
            ]
        );
    }

    #[test]
    fn healthy_rails_of_different_speeds_pass() {
        for (h, rails) in [(2, 2), (3, 2), (4, 8), (16, 4), (5, 3)] {
            let (hosts, first) = rail_run(h, rails, |_, _| None);
            let (v, per_rail) = judge(&hosts, &first, &[]);
            assert!(v.pass, "{h}x{rails}: {:?}", labels(&v.blamed));
            assert_eq!(per_rail.len(), rails);
            assert!(per_rail.iter().all(|r| r.verdict.pass && r.ranks.len() == h));
        }
    }

    #[test]
    fn one_slow_nic_on_one_rail_is_named_with_its_rail_and_interface() {
        // Host n2's rail-1 NIC (rank 2*2+1 = 5) at a tenth, both ways.
        let (hosts, first) = rail_run(4, 2, |a, b| (a == 5 || b == 5).then_some(2.0));
        let nics: Vec<Option<String>> = (0..8).map(|r| Some(format!("eth{}", r % 2))).collect();
        let (v, per_rail) = judge(&hosts, &first, &nics);
        assert!(!v.pass);
        assert_eq!(labels(&v.blamed), vec!["rail 1 nic n2"]);
        let Part::RailNic { rank, nic, counts, .. } = &v.blamed[0] else {
            unreachable!()
        };
        assert_eq!((*rank, nic.as_deref()), (5, Some("eth1")));
        assert_eq!((counts.slow, counts.of, counts.slow_pairs), (3, 3, 3));
        assert!(per_rail[0].verdict.pass);
        assert_eq!(labels(&per_rail[1].verdict.blamed), vec!["rail 1 nic n2"]);
        assert_eq!(per_rail[1].nics, vec![Some("eth1".to_string()); 4]);
    }

    #[test]
    fn a_node_slow_on_every_rail_is_the_node() {
        let (hosts, first) = rail_run(5, 2, |a, b| (a / 2 == 3 || b / 2 == 3).then_some(1.0));
        let (v, per_rail) = judge(&hosts, &first, &[]);
        assert_eq!(labels(&v.blamed), vec!["node n3"]);
        let Part::Node { counts, .. } = &v.blamed[0] else {
            unreachable!()
        };
        assert_eq!((counts.slow, counts.of, counts.slow_pairs), (2, 2, 8));
        assert_eq!(labels(&per_rail[0].verdict.blamed), vec!["rail 0 nic n3"]);
        assert_eq!(labels(&per_rail[1].verdict.blamed), vec!["rail 1 nic n3"]);
    }

    #[test]
    fn one_slow_pair_on_a_rail_is_that_pair() {
        // One direction of one rail pair: neither NIC is slow to its other peers.
        let (hosts, first) = rail_run(4, 2, |a, b| ((a, b) == (1, 7)).then_some(1.0));
        let (v, _) = judge(&hosts, &first, &[]);
        assert_eq!(labels(&v.blamed), vec!["pair 1-7"]);
        // Two hosts: each rail is one pair, with nothing of its own to be judged against (a
        // rail is never judged against another: rails may differ). The floor still applies,
        // and a slow rail link is then a rank pair, not a "host link".
        let (hosts, first) = rail_run(2, 2, |a, b| ((a, b) == (0, 2) || (a, b) == (2, 0)).then_some(0.5));
        assert!(judge(&hosts, &first, &[]).0.pass);
        let mut c = cfg();
        c.expect_gbps = Some(5.0);
        let (v, per_rail) = judge_with(&c, &hosts, &first, &[]);
        assert_eq!(labels(&v.blamed), vec!["pair 0-2"]);
        assert!(per_rail[1].verdict.pass);
    }

    #[test]
    fn pairs_within_hosts_are_judged_apart_from_the_rails() {
        let mut c = cfg();
        c.selection = Selection::Rails { intra: true };
        let (hosts, mut first) = rail_run(3, 2, |_, _| None);
        // Within a host: much faster (shared memory), one of them slow.
        for hh in 0..3 {
            let (a, b) = (hh * 2, hh * 2 + 1);
            let g = if hh == 1 { 5.0 } else { 200.0 };
            first.push(m(a, b, g));
            first.push(m(b, a, 200.0));
        }
        let (v, per_rail) = judge_with(&c, &hosts, &first, &[]);
        assert!(per_rail.iter().all(|r| r.verdict.pass));
        assert_eq!(labels(&v.blamed), vec!["pair 2-3"]);
        assert_eq!(v.judged.len(), 1);
    }

    #[test]
    fn pairs_over_ipc_are_judged_per_node_and_a_slow_gpu_link_is_named() {
        // 2 hosts of 4 ranks: the network's pairs near 10 Gb/s, each node's GPU pairs near
        // 2,000 (n1's GPUs slower: nodes differ), one link of n0 (ranks 1-2) at a fifth.
        let hosts: Vec<String> = (0..8).map(|r| format!("n{}", r / 4)).collect();
        let mut first = Vec::new();
        for a in 0..8 {
            for b in (0..8).filter(|&b| b != a) {
                let noise = 1.0 + 0.1 * (((a * 7 + b * 13) % 11) as f64 / 5.0 - 1.0);
                let mut x = if a / 4 != b / 4 {
                    m(a, b, 10.0 * noise)
                } else {
                    let base = if a < 4 { 2000.0 } else { 1500.0 };
                    let slow = (a.min(b), a.max(b)) == (1, 2);
                    m(a, b, base * noise / if slow { 5.0 } else { 1.0 })
                };
                x.path = Some(if a / 4 == b / 4 { HopPath::Ipc } else { HopPath::Net });
                first.push(x);
            }
        }
        let c = PairwiseConfig::synthetic(OpName::Write, 1 << 20, 10);
        let (v, per_rail) = judge_with(&c, &hosts, &first, &[]);
        assert!(per_rail.is_empty());
        assert_eq!(labels(&v.blamed), vec!["pair 1-2"]);
        let pops: Vec<Option<&str>> = v.judged.iter().map(|j| j.host.as_deref()).collect();
        assert_eq!(pops, vec![None, Some("n0"), Some("n1")]);
        // Each node's bar from its own GPUs: n1's healthy 1,500 is not slow beside n0's 2,000.
        assert!(v.judged[2].bulk.median < v.judged[1].bulk.median);
        assert!(v.judged[0].bulk.median < 20.0, "the network's bar is its own");
    }
}
