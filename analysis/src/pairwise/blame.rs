//! Where the confirmed slow rank pairs point: a switch uplink, a node, a host-to-host link, one
//! rank's NIC, or (none of these) the rank pairs themselves.
//!
//! Rank pairs are first grouped into host links (every rank pair between two hosts). In order:
//! 1. with a topology, an uplink between two leaf switches is slow when more than half of the
//!    host links across it (at least two) are slow;
//! 2. a node is slow when more than half of its host links (at least two, so three hosts or
//!    more) are slow, not counting links an uplink explains: counted over hosts, so a node with
//!    eight ranks weighs as one node;
//! 3. a host link is slow when more than half of its rank pairs are slow;
//! 4. a rank (its NIC, or its GPU) is slow when more than half of its pairs to other hosts are
//!    slow while no other rank of its host is: the bad NIC of an eight-NIC node;
//! 5. what is left are single rank pairs.
//!
//! Each level only sees the slow pairs the levels before it did not explain. Where the topology
//! names a host's cable to its leaf (LLDP, ibnetdiscover, the ends of ibtracert routes), a host
//! link and a NIC carry the switch's end of it ([`SwitchEnd`]), for the operator to find.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::topology::Topology;
use crate::schedule::Pair;

/// A slow pair with its figures, as the verdict confirmed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowPair {
    pub a: usize,
    pub b: usize,
    pub host_a: String,
    pub host_b: String,
    /// Worst first-pass score of the pair (either direction).
    pub first: f64,
    /// Worst retest score, when retested.
    pub retest: Option<f64>,
    /// The slow directions (src, dst) of the first pass.
    pub directions: Vec<HostPair>,
}

/// Figures behind one blamed part: how many of its members are slow, and the worst scores.
/// For a node of a `--rails` run the members are its rails (a rail is slow when its NIC is).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowCounts {
    /// Slow members (host links for uplinks and nodes, rank pairs otherwise) of `of`.
    pub slow: usize,
    pub of: usize,
    /// Slow rank pairs behind it.
    pub slow_pairs: usize,
    /// Worst first-pass and retest scores of those rank pairs.
    pub worst: f64,
    pub worst_retest: Option<f64>,
}

/// Where a host's cable meets its leaf switch, as the topology names it: the switch and its port
/// (`Ethernet12`, `17`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchEnd {
    pub switch: String,
    pub port: String,
}

impl SwitchEnd {
    /// `host`'s, where `topology` names its leaf and one port on it (a host cabled to its leaf
    /// several times names none: which cable a rank used is not known here).
    pub fn of(topology: Option<&Topology>, host: &str) -> Option<SwitchEnd> {
        let t = topology?;
        let link = t.link_of(host).filter(|l| !l.switch_port.contains(','))?;
        Some(SwitchEnd {
            switch: t.switch_of(host)?.to_string(),
            port: link.switch_port.clone(),
        })
    }
}

impl fmt::Display for SwitchEnd {
    /// `switch leaf0 port Ethernet12`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "switch {} port {}", self.switch, self.port)
    }
}

/// A blamed part of the fabric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "level", rename_all = "snake_case")]
pub enum Part {
    Uplink {
        switch_a: String,
        switch_b: String,
        counts: SlowCounts,
    },
    Node {
        host: String,
        counts: SlowCounts,
    },
    HostLink {
        host_a: String,
        host_b: String,
        counts: SlowCounts,
        /// Where each host's cable meets its leaf, where the topology names it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port_a: Option<SwitchEnd>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port_b: Option<SwitchEnd>,
    },
    Nic {
        rank: usize,
        host: String,
        counts: SlowCounts,
        /// Where its host's cable meets its leaf, where the topology names one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port: Option<SwitchEnd>,
    },
    /// `--rails`: the NIC of `host` on one rail (its rank of that local index), slow to most of
    /// the rail's other hosts; `nic` is the device or interface that rank used.
    RailNic {
        rail: usize,
        rank: usize,
        host: String,
        nic: Option<String>,
        counts: SlowCounts,
    },
    RankPair {
        pair: SlowPair,
    },
}

impl Part {
    /// `node n1`, `link n0-n1`, `nic 3`, `uplink a-b`, `pair 0-2`: what tests compare.
    #[cfg(test)]
    pub(crate) fn label(&self) -> String {
        match self {
            Part::Uplink { switch_a, switch_b, .. } => format!("uplink {switch_a}-{switch_b}"),
            Part::Node { host, .. } => format!("node {host}"),
            Part::HostLink { host_a, host_b, .. } => format!("link {host_a}-{host_b}"),
            Part::Nic { rank, .. } => format!("nic {rank}"),
            Part::RailNic { rail, host, .. } => format!("rail {rail} nic {host}"),
            Part::RankPair { pair } => format!("pair {}-{}", pair.a, pair.b),
        }
    }

    /// Which part, in words: `a <-> b` (an uplink's switches, a host link's hosts), `h1` (a
    /// node), `rank 3 (h1)` (a NIC), `h1 rail 2` (a NIC on a rail), `rank 0 (h0) <-> rank 5 (h2)`.
    pub fn name(&self) -> String {
        match self {
            Part::Uplink { switch_a, switch_b, .. } => format!("{switch_a} <-> {switch_b}"),
            Part::Node { host, .. } => host.clone(),
            Part::HostLink { host_a, host_b, .. } => format!("{host_a} <-> {host_b}"),
            Part::Nic { rank, host, .. } => format!("rank {rank} ({host})"),
            Part::RailNic { rail, host, .. } => format!("{host} rail {rail}"),
            Part::RankPair { pair } => format!(
                "rank {} ({}) <-> rank {} ({})",
                pair.a, pair.host_a, pair.b, pair.host_b
            ),
        }
    }

    /// The level's name in reports: `uplink`, `node`, `host link`, `NIC`, `rank pair`.
    pub fn level(&self) -> &'static str {
        match self {
            Part::Uplink { .. } => "uplink",
            Part::Node { .. } => "node",
            Part::HostLink { .. } => "host link",
            Part::Nic { .. } | Part::RailNic { .. } => "NIC",
            Part::RankPair { .. } => "rank pair",
        }
    }
}

/// Two hosts, by index, lower first.
type HostPair = (usize, usize);

/// A host link's rank pairs: tested, and confirmed slow.
#[derive(Default)]
struct LinkPairs<'a> {
    tested: Vec<Pair>,
    slow: Vec<&'a SlowPair>,
}

impl LinkPairs<'_> {
    /// More than half of its rank pairs slow.
    fn is_slow(&self) -> bool {
        self.slow.len() * 2 > self.tested.len()
    }
}

/// The host link (by host index, lower first) of a rank pair; None within one host.
fn link_of(host_idx: &[usize], (a, b): Pair) -> Option<HostPair> {
    let (x, y) = (host_idx[a], host_idx[b]);
    (x != y).then_some((x.min(y), x.max(y)))
}

/// Every rank's host as an index, hosts numbered in rank order of first appearance, and the
/// hosts' names by index.
pub(crate) fn host_indices(hosts: &[String]) -> (Vec<usize>, Vec<&str>) {
    let mut names: Vec<&str> = Vec::new();
    let mut index_of: HashMap<&str, usize> = HashMap::new();
    let idx = hosts
        .iter()
        .map(|h| {
            *index_of.entry(h.as_str()).or_insert_with(|| {
                names.push(h);
                names.len() - 1
            })
        })
        .collect();
    (idx, names)
}

/// Blame the confirmed slow pairs of a run in which `tested` rank pairs were measured; `hosts`
/// is every rank's host. The levels run in order, each on what the ones before left unexplained.
pub fn blame(hosts: &[String], tested: &[Pair], confirmed: &[SlowPair], topology: Option<&Topology>) -> Vec<Part> {
    let (host_idx, names) = host_indices(hosts);
    let mut links = HostLinks::new(&host_idx, names, tested, confirmed);
    let mut parts = Vec::new();
    if let Some(t) = topology {
        parts.extend(links.uplinks(t));
    }
    parts.extend(links.nodes());
    parts.extend(links.host_links(topology));
    let unexplained: Vec<&SlowPair> = confirmed
        .iter()
        .filter(|s| link_of(&host_idx, (s.a, s.b)).is_none_or(|l| !links.explained.contains(&l)))
        .collect();
    let (nics, nic_ranks) = nics(hosts, &host_idx, tested, &unexplained, topology);
    parts.extend(nics);
    // Level 5: what is left.
    for s in unexplained {
        if !nic_ranks.contains(&s.a) && !nic_ranks.contains(&s.b) {
            parts.push(Part::RankPair { pair: s.clone() });
        }
    }
    parts
}

/// The host links of a run, with what the levels so far have explained.
struct HostLinks<'a> {
    /// The hosts' names by index.
    names: Vec<&'a str>,
    /// Rank pairs per host link: tested, and the slow ones.
    links: BTreeMap<HostPair, LinkPairs<'a>>,
    /// Each host's links.
    links_of: Vec<Vec<HostPair>>,
    /// The host links a blamed part explains.
    explained: HashSet<HostPair>,
}

impl<'a> HostLinks<'a> {
    fn new(host_idx: &[usize], names: Vec<&'a str>, tested: &[Pair], confirmed: &'a [SlowPair]) -> HostLinks<'a> {
        let mut links: BTreeMap<HostPair, LinkPairs> = BTreeMap::new();
        for &p in tested {
            if let Some(l) = link_of(host_idx, p) {
                links.entry(l).or_default().tested.push(p);
            }
        }
        for s in confirmed {
            if let Some(l) = link_of(host_idx, (s.a, s.b)) {
                links.entry(l).or_default().slow.push(s);
            }
        }
        let mut links_of: Vec<Vec<HostPair>> = vec![Vec::new(); names.len()];
        for &l in links.keys() {
            links_of[l.0].push(l);
            links_of[l.1].push(l);
        }
        HostLinks {
            names,
            links,
            links_of,
            explained: HashSet::new(),
        }
    }

    /// The slow rank pairs of host links `ls`.
    fn slow_pairs<'b>(&'b self, ls: &'b [HostPair]) -> impl Iterator<Item = &'a SlowPair> + 'b {
        ls.iter().flat_map(|l| self.links[l].slow.iter().copied())
    }

    /// Level 1, uplinks between leaf switches.
    fn uplinks(&mut self, t: &Topology) -> Vec<Part> {
        let switch = |h: usize| t.switch_of(self.names[h]);
        let mut across: BTreeMap<(&str, &str), Vec<HostPair>> = BTreeMap::new();
        for &l in self.links.keys() {
            if let (Some(x), Some(y)) = (switch(l.0), switch(l.1)) {
                if x != y {
                    across.entry((x.min(y), x.max(y))).or_default().push(l);
                }
            }
        }
        let mut parts = Vec::new();
        let mut explained = Vec::new();
        for ((x, y), ls) in across {
            let slow: Vec<HostPair> = ls.iter().copied().filter(|l| self.links[l].is_slow()).collect();
            if slow.len() >= 2 && slow.len() * 2 > ls.len() {
                parts.push(Part::Uplink {
                    switch_a: x.to_string(),
                    switch_b: y.to_string(),
                    counts: slow_counts(slow.len(), ls.len(), self.slow_pairs(&slow)),
                });
                explained.extend(slow);
            }
        }
        self.explained.extend(explained);
        parts
    }

    /// Level 2, nodes, over host links not explained above; the worst host first, so the one
    /// slow link a slow node gives each neighbour does not make that neighbour look bad too.
    fn nodes(&mut self) -> Vec<Part> {
        let mut parts = Vec::new();
        let mut node_hosts: Vec<usize> = Vec::new();
        loop {
            // (slow fraction, host, its slow links, its links)
            let mut best: Option<(f64, usize, Vec<HostPair>, usize)> = None;
            for h in (0..self.names.len()).filter(|h| !node_hosts.contains(h)) {
                let mine = &self.links_of[h];
                let slow: Vec<HostPair> = mine
                    .iter()
                    .copied()
                    .filter(|l| !self.explained.contains(l) && self.links[l].is_slow())
                    .collect();
                let fraction = slow.len() as f64 / mine.len().max(1) as f64;
                if mine.len() >= 2 && slow.len() * 2 > mine.len() && best.as_ref().is_none_or(|b| fraction > b.0) {
                    best = Some((fraction, h, slow, mine.len()));
                }
            }
            let Some((_, h, slow, of)) = best else { break };
            parts.push(Part::Node {
                host: self.names[h].to_string(),
                counts: slow_counts(slow.len(), of, self.slow_pairs(&slow)),
            });
            node_hosts.push(h);
            self.explained.extend(self.links_of[h].iter().copied());
        }
        parts
    }

    /// Level 3, host links.
    fn host_links(&mut self, topology: Option<&Topology>) -> Vec<Part> {
        let mut parts = Vec::new();
        for (l, v) in &self.links {
            if !self.explained.contains(l) && v.is_slow() {
                parts.push(Part::HostLink {
                    host_a: self.names[l.0].to_string(),
                    host_b: self.names[l.1].to_string(),
                    counts: slow_counts(v.slow.len(), v.tested.len(), v.slow.iter().copied()),
                    port_a: SwitchEnd::of(topology, self.names[l.0]),
                    port_b: SwitchEnd::of(topology, self.names[l.1]),
                });
                self.explained.insert(*l);
            }
        }
        parts
    }
}

/// Level 4, one rank's NIC: most of its pairs to other hosts slow, no other rank of its host so.
/// The parts, and the ranks they name.
fn nics(
    hosts: &[String],
    host_idx: &[usize],
    tested: &[Pair],
    unexplained: &[&SlowPair],
    topology: Option<&Topology>,
) -> (Vec<Part>, HashSet<usize>) {
    let n = hosts.len();
    let mut inter = vec![0usize; n];
    for &(a, b) in tested {
        if host_idx[a] != host_idx[b] {
            inter[a] += 1;
            inter[b] += 1;
        }
    }
    let mut slow_of: Vec<Vec<&SlowPair>> = vec![Vec::new(); n];
    for &s in unexplained {
        if host_idx[s.a] != host_idx[s.b] {
            slow_of[s.a].push(s);
            slow_of[s.b].push(s);
        }
    }
    let mostly_slow = |r: usize| inter[r] >= 2 && slow_of[r].len() * 2 > inter[r];
    let hosts_count = host_idx.iter().copied().max().map_or(0, |m| m + 1);
    let mut ranks_of: Vec<Vec<usize>> = vec![Vec::new(); hosts_count];
    for (r, &h) in host_idx.iter().enumerate() {
        ranks_of[h].push(r);
    }
    let mut parts = Vec::new();
    let mut nic_ranks: HashSet<usize> = HashSet::new();
    for r in 0..n {
        let on_host = &ranks_of[host_idx[r]];
        if on_host.len() > 1 && mostly_slow(r) && !on_host.iter().any(|&o| o != r && mostly_slow(o)) {
            parts.push(Part::Nic {
                rank: r,
                host: hosts[r].clone(),
                counts: slow_counts(slow_of[r].len(), inter[r], slow_of[r].iter().copied()),
                port: SwitchEnd::of(topology, &hosts[r]),
            });
            nic_ranks.insert(r);
        }
    }
    (parts, nic_ranks)
}

/// The figures of a blamed part: `slow` of its `of` members slow, and the slow rank pairs behind
/// them.
pub(crate) fn slow_counts<'a>(slow: usize, of: usize, pairs: impl Iterator<Item = &'a SlowPair>) -> SlowCounts {
    let pairs: Vec<&SlowPair> = pairs.collect();
    SlowCounts {
        slow,
        of,
        slow_pairs: pairs.len(),
        worst: pairs.iter().map(|p| p.first).fold(f64::INFINITY, f64::min),
        worst_retest: pairs.iter().filter_map(|p| p.retest).reduce(f64::min),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ppn` ranks on each of `h` hosts (`n0`, `n1`, ...), all pairs tested.
    fn cluster(h: usize, ppn: usize) -> (Vec<String>, Vec<Pair>) {
        let hosts: Vec<String> = (0..h * ppn).map(|r| format!("n{}", r / ppn)).collect();
        let n = hosts.len();
        let tested = (0..n).flat_map(|a| (a + 1..n).map(move |b| (a, b))).collect();
        (hosts, tested)
    }

    fn slow(hosts: &[String], pairs: &[Pair]) -> Vec<SlowPair> {
        pairs
            .iter()
            .map(|&(a, b)| SlowPair {
                a,
                b,
                host_a: hosts[a].clone(),
                host_b: hosts[b].clone(),
                first: 0.1,
                retest: Some(0.12),
                directions: vec![(a, b)],
            })
            .collect()
    }

    fn levels(parts: &[Part]) -> Vec<String> {
        parts.iter().map(Part::label).collect()
    }

    /// Every rank pair between hosts `x` and `y`.
    fn between(hosts: &[String], tested: &[Pair], x: &str, y: &str) -> Vec<Pair> {
        tested
            .iter()
            .copied()
            .filter(|&(a, b)| (hosts[a] == x && hosts[b] == y) || (hosts[a] == y && hosts[b] == x))
            .collect()
    }

    #[test]
    fn one_host_link_of_four_hosts_with_two_ranks_each() {
        let (hosts, tested) = cluster(4, 2);
        let s = slow(&hosts, &between(&hosts, &tested, "n0", "n1"));
        let parts = blame(&hosts, &tested, &s, None);
        assert_eq!(levels(&parts), vec!["link n0-n1"]);
        let Part::HostLink { counts, .. } = &parts[0] else {
            unreachable!()
        };
        assert_eq!(
            (counts.slow, counts.of, counts.worst, counts.worst_retest),
            (4, 4, 0.1, Some(0.12))
        );
    }

    #[test]
    fn a_slow_node_is_one_node_however_many_ranks() {
        for ppn in 1..=8 {
            let (hosts, tested) = cluster(4, ppn);
            let pairs: Vec<Pair> = ["n0", "n2", "n3"]
                .iter()
                .flat_map(|o| between(&hosts, &tested, "n1", o))
                .collect();
            let parts = blame(&hosts, &tested, &slow(&hosts, &pairs), None);
            assert_eq!(levels(&parts), vec!["node n1"], "ppn {ppn}");
            let Part::Node { counts, .. } = &parts[0] else {
                unreachable!()
            };
            assert_eq!((counts.slow, counts.of, counts.slow_pairs), (3, 3, 3 * ppn * ppn));
        }
    }

    #[test]
    fn one_bad_nic_of_an_eight_nic_node() {
        let (hosts, tested) = cluster(4, 8);
        // Rank 11 is on n1: every pair from it to another host is slow.
        let pairs: Vec<Pair> = tested
            .iter()
            .copied()
            .filter(|&(a, b)| (a == 11 || b == 11) && hosts[a] != hosts[b])
            .collect();
        let parts = blame(&hosts, &tested, &slow(&hosts, &pairs), None);
        assert_eq!(levels(&parts), vec!["nic 11"]);
        let Part::Nic { host, counts, .. } = &parts[0] else {
            unreachable!()
        };
        assert_eq!((host.as_str(), counts.slow, counts.of), ("n1", 24, 24));
    }

    #[test]
    fn an_uplink_between_two_leaves() {
        let (hosts, tested) = cluster(4, 2);
        let topo = Topology::parse("a: n[0-1]\nb: n[2-3]\n", "t").unwrap();
        let pairs: Vec<Pair> = [("n0", "n2"), ("n0", "n3"), ("n1", "n2"), ("n1", "n3")]
            .iter()
            .flat_map(|(x, y)| between(&hosts, &tested, x, y))
            .collect();
        let parts = blame(&hosts, &tested, &slow(&hosts, &pairs), Some(&topo));
        assert_eq!(levels(&parts), vec!["uplink a-b"]);
        // Without the topology the same pairs look like two slow nodes on one side (each host
        // has 2 of its 3 host links slow): the file is what tells an uplink from nodes.
        let parts = blame(&hosts, &tested, &slow(&hosts, &pairs), None);
        assert_eq!(levels(&parts), vec!["node n0", "node n1"]);
    }

    #[test]
    fn a_node_under_a_leaf_is_not_the_uplink() {
        let (hosts, tested) = cluster(4, 1);
        let topo = Topology::parse("a: n[0-1]\nb: n[2-3]\n", "t").unwrap();
        let pairs: Vec<Pair> = vec![(0, 1), (0, 2), (0, 3)];
        let parts = blame(&hosts, &tested, &slow(&hosts, &pairs), Some(&topo));
        assert_eq!(levels(&parts), vec!["node n0"]);
    }

    #[test]
    fn a_lone_slow_rank_pair_stays_a_rank_pair() {
        let (hosts, tested) = cluster(3, 2);
        let parts = blame(&hosts, &tested, &slow(&hosts, &[(0, 2)]), None);
        assert_eq!(levels(&parts), vec!["pair 0-2"]);
        // Within one host: no host link to blame.
        let parts = blame(&hosts, &tested, &slow(&hosts, &[(0, 1)]), None);
        assert_eq!(levels(&parts), vec!["pair 0-1"]);
    }

    #[test]
    fn two_hosts_cannot_tell_a_node_from_its_link() {
        let (hosts, tested) = cluster(2, 1);
        let parts = blame(&hosts, &tested, &slow(&hosts, &[(0, 1)]), None);
        assert_eq!(levels(&parts), vec!["link n0-n1"]);
    }
}
