//! The synthetic fabric of `verdict_accuracy`: its shape (hosts, ranks per host, rails, two
//! leaves) and the fault a trial places in it.

use analysis::pairwise::blame::Part;
use analysis::pairwise::topology::Topology;

use super::noise::Rng;

/// What a trial's slowdown slows: one host link, one rank's NIC, one node, or the uplink between
/// the two leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SlowdownKind {
    Link,
    Nic,
    Node,
    Uplink,
}

/// A fabric: which host each rank is on, which leaf each host is under, and whether its ranks
/// are on rails (`--rails`: local rank i of every host on rail i).
pub struct Shape {
    pub hosts: usize,
    pub ppn: usize,
    pub rails: bool,
}

impl Shape {
    pub fn rank_count(&self) -> usize {
        self.hosts * self.ppn
    }
    pub fn host(&self, r: usize) -> usize {
        r / self.ppn
    }
    /// Whether the all-pairs pass measures `src -> dst` (on rails: ranks of one local index).
    pub fn measured(&self, src: usize, dst: usize) -> bool {
        src != dst && (!self.rails || src % self.ppn == dst % self.ppn)
    }
    /// The faults a trial places here: on rails a host link or an uplink is one slow pair or
    /// several per rail (each rail its own switches), not one part, so only NICs and nodes.
    pub fn has(&self, kind: SlowdownKind) -> bool {
        match kind {
            SlowdownKind::Nic => self.ppn > 1,
            SlowdownKind::Link | SlowdownKind::Uplink => !self.rails,
            SlowdownKind::Node => true,
        }
    }
    pub fn leaf(&self, h: usize) -> usize {
        usize::from(h >= self.hosts / 2)
    }
    pub fn names(&self) -> Vec<String> {
        (0..self.rank_count())
            .map(|r| format!("n{:04}", self.host(r)))
            .collect()
    }
    pub fn topology(&self) -> Topology {
        let half = self.hosts / 2;
        let text = format!(
            "leaf0: n[0000-{:04}]\nleaf1: n[{half:04}-{:04}]\n",
            half - 1,
            self.hosts - 1
        );
        Topology::parse(&text, "synthetic").expect("a synthetic topology parses")
    }
}

/// The fault placed in a trial: which cells it slows.
#[derive(Clone, Copy)]
pub struct Slowdown {
    pub kind: SlowdownKind,
    pub a: usize,
    pub b: usize,
    pub keep: f64,
    /// The share of moments it is slow (1 steady; below 1 intermittent, as a flapping link: each
    /// first-pass slot and each retest pass slow or not by chance, drawn from `phase`).
    pub duty: f64,
    pub phase: u64,
}

impl Slowdown {
    pub fn hits(&self, s: &Shape, src: usize, dst: usize) -> bool {
        let (hs, hd) = (s.host(src), s.host(dst));
        if hs == hd {
            return false;
        }
        match self.kind {
            SlowdownKind::Link => (hs.min(hd), hs.max(hd)) == (self.a, self.b),
            SlowdownKind::Nic => src == self.a || dst == self.a,
            SlowdownKind::Node => hs == self.a || hd == self.a,
            SlowdownKind::Uplink => s.leaf(hs) != s.leaf(hd),
        }
    }

    /// Whether it is slow at moment `t` (a first-pass slot, or a retest pass from [`RETEST_AT`]).
    pub fn slow_at(&self, t: u64) -> bool {
        let mut h = Rng(self.phase ^ t.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        self.duty >= 1.0 || h.unit() < self.duty
    }

    pub fn place(kind: SlowdownKind, s: &Shape, drop: f64, duty: f64, rng: &mut Rng) -> Slowdown {
        let keep = 1.0 - drop;
        let phase = if duty < 1.0 { rng.next() } else { 0 };
        match kind {
            SlowdownKind::Link => {
                let a = rng.below(s.hosts);
                let mut b = rng.below(s.hosts - 1);
                if b >= a {
                    b += 1;
                }
                Slowdown {
                    kind,
                    a: a.min(b),
                    b: a.max(b),
                    keep,
                    duty,
                    phase,
                }
            }
            SlowdownKind::Nic => Slowdown {
                kind,
                a: rng.below(s.rank_count()),
                b: 0,
                keep,
                duty,
                phase,
            },
            SlowdownKind::Node => Slowdown {
                kind,
                a: rng.below(s.hosts),
                b: 0,
                keep,
                duty,
                phase,
            },
            SlowdownKind::Uplink => Slowdown {
                kind,
                a: 0,
                b: 1,
                keep,
                duty,
                phase,
            },
        }
    }

    /// Whether `part` is this fault, named at its level.
    pub fn is(&self, s: &Shape, part: &Part) -> bool {
        let name = |h: usize| format!("n{h:04}");
        match (self.kind, part) {
            (SlowdownKind::Link, Part::HostLink { host_a, host_b, .. }) => {
                (host_a, host_b) == (&name(self.a), &name(self.b)) || (host_b, host_a) == (&name(self.a), &name(self.b))
            }
            (SlowdownKind::Nic, Part::Nic { rank, .. }) => *rank == self.a,
            (SlowdownKind::Nic, Part::RailNic { rank, .. }) => *rank == self.a,
            (SlowdownKind::Node, Part::Node { host, .. }) => *host == name(self.a),
            (SlowdownKind::Uplink, Part::Uplink { .. }) => true,
            // One rank per host: a NIC is its node, a link between two hosts its one rank pair.
            (SlowdownKind::Nic, Part::Node { host, .. }) => s.ppn == 1 && *host == name(s.host(self.a)),
            _ => false,
        }
    }
}
