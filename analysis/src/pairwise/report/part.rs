//! How a blamed part is named in a report: its level in capitals, which part it is, and how many
//! of its members are slow. The verdict's `# SLOW ...` lines and the baseline comparison's
//! `# SLOWER THAN BASELINE: ...` lines both phrase a part from here, each followed by its own
//! figures.

use crate::pairwise::blame::{Part, SlowCounts, SlowPair};

/// Which report names the part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Voice {
    /// The run's verdict: `NODE: h1: 3 of its 5 host links are slow (4 rank pairs)`. `rails`: a
    /// `--rails` run, whose nodes are counted in rails.
    Verdict { rails: bool },
    /// The comparison with a baseline: `NODE h1: 3 of its 5 host links`.
    Baseline,
    /// An unstable part: `NODE: h1: 3 of its 5 host links slow`, the figures after it saying
    /// when. `rails`: a `--rails` run, whose nodes are counted in rails.
    Unstable { rails: bool },
}

/// What a blamed part is made of, whose figures a report quotes after its name.
pub enum Members<'a> {
    /// A part of several rank pairs: how many of its members are slow, the worst scores.
    Counts(&'a SlowCounts),
    /// One rank pair.
    Pair(&'a SlowPair),
}

impl Part {
    /// The part as `voice` names it, up to its figures: the level in capitals (`HOST LINK`),
    /// which part (`h0 <-> h1`), and for a part of several rank pairs how many of them are slow.
    pub fn phrase(&self, voice: Voice) -> String {
        let (verdict, rails) = match voice {
            Voice::Verdict { rails } => (true, rails),
            Voice::Baseline => (false, false),
            Voice::Unstable { rails } => (true, rails),
        };
        let level = self.level().to_uppercase();
        let head = if verdict {
            format!("{level}: ")
        } else {
            format!("{level} ")
        };
        // The verdict says what is slow and how many rank pairs are behind a node or an uplink.
        let are_slow = match voice {
            Voice::Verdict { .. } => " are slow",
            Voice::Unstable { .. } => " slow",
            Voice::Baseline => "",
        };
        let behind = |k: &SlowCounts| {
            if matches!(voice, Voice::Verdict { .. }) {
                format!(" ({} rank pairs)", k.slow_pairs)
            } else {
                String::new()
            }
        };
        let (who, tally) = match self {
            Part::Uplink { counts: k, .. } => {
                let the = if verdict { "the " } else { "" };
                let tally = format!(
                    "{} of {the}{} host links across it{are_slow}{}",
                    k.slow,
                    k.of,
                    behind(k)
                );
                (self.name(), Some(tally))
            }
            Part::Node { counts: k, .. } if rails => (
                self.name(),
                Some(format!(
                    "its NICs on {} of its {} rails{are_slow}{}",
                    k.slow,
                    k.of,
                    behind(k)
                )),
            ),
            Part::Node { counts: k, .. } => (
                self.name(),
                Some(format!("{} of its {} host links{are_slow}{}", k.slow, k.of, behind(k))),
            ),
            Part::HostLink {
                host_a,
                host_b,
                counts: k,
                port_a,
                port_b,
            } => {
                // Each host with the switch end of its cable, where the topology names it.
                let end = |h: &str, p: &Option<_>| match p {
                    Some(p) => format!("{h} ({p})"),
                    None => h.to_string(),
                };
                (
                    format!("{} <-> {}", end(host_a, port_a), end(host_b, port_b)),
                    Some(format!("{} of its {} rank pairs{are_slow}", k.slow, k.of)),
                )
            }
            Part::Nic {
                rank,
                host,
                counts: k,
                port,
            } => {
                let fine = if verdict {
                    format!(", the other ranks of {host} are fine")
                } else {
                    String::new()
                };
                let tally = format!("{} of its {} pairs to other hosts{are_slow}{fine}", k.slow, k.of);
                let who = match port {
                    Some(p) => format!("rank {rank} ({host}, {p})"),
                    None => self.name(),
                };
                (who, Some(tally))
            }
            Part::RailNic {
                rail,
                rank,
                host,
                nic,
                counts: k,
            } => {
                let (device, on_rail) = match nic {
                    Some(n) if verdict => (format!(", {n}"), " on the rail"),
                    _ if verdict => (String::new(), " on the rail"),
                    _ => (String::new(), ""),
                };
                let who = format!("{host} on rail {rail} (rank {rank}{device})");
                (
                    who,
                    Some(format!("{} of its {} pairs{on_rail}{are_slow}", k.slow, k.of)),
                )
            }
            Part::RankPair { .. } => (self.name(), None),
        };
        match tally {
            Some(t) => format!("{head}{who}: {t}"),
            None => format!("{head}{who}"),
        }
    }

    /// Whose figures follow the part's [`phrase`](Part::phrase): its counts, or its one rank pair.
    pub fn members(&self) -> Members<'_> {
        match self {
            Part::Uplink { counts, .. }
            | Part::Node { counts, .. }
            | Part::HostLink { counts, .. }
            | Part::Nic { counts, .. }
            | Part::RailNic { counts, .. } => Members::Counts(counts),
            Part::RankPair { pair } => Members::Pair(pair),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k() -> SlowCounts {
        SlowCounts {
            slow: 3,
            of: 5,
            slow_pairs: 4,
            worst: 10.0,
            worst_retest: None,
        }
    }

    #[test]
    fn each_level_reads_as_each_report_words_it() {
        let parts = [
            Part::Uplink {
                switch_a: "s1".into(),
                switch_b: "s2".into(),
                counts: k(),
            },
            Part::Node {
                host: "h1".into(),
                counts: k(),
            },
            Part::HostLink {
                host_a: "h0".into(),
                host_b: "h1".into(),
                counts: k(),
                port_a: None,
                port_b: None,
            },
            Part::Nic {
                rank: 3,
                host: "h1".into(),
                counts: k(),
                port: None,
            },
            Part::RailNic {
                rail: 2,
                rank: 5,
                host: "h1".into(),
                nic: Some("mlx5_2".into()),
                counts: k(),
            },
            Part::RankPair {
                pair: SlowPair {
                    a: 0,
                    b: 5,
                    host_a: "h0".into(),
                    host_b: "h2".into(),
                    first: 1.0,
                    retest: None,
                    directions: vec![(0, 5)],
                },
            },
        ];
        let verdict: Vec<String> = parts
            .iter()
            .map(|p| p.phrase(Voice::Verdict { rails: false }))
            .collect();
        assert_eq!(
            verdict,
            [
                "UPLINK: s1 <-> s2: 3 of the 5 host links across it are slow (4 rank pairs)",
                "NODE: h1: 3 of its 5 host links are slow (4 rank pairs)",
                "HOST LINK: h0 <-> h1: 3 of its 5 rank pairs are slow",
                "NIC: rank 3 (h1): 3 of its 5 pairs to other hosts are slow, the other ranks of h1 are fine",
                "NIC: h1 on rail 2 (rank 5, mlx5_2): 3 of its 5 pairs on the rail are slow",
                "RANK PAIR: rank 0 (h0) <-> rank 5 (h2)",
            ]
        );
        assert_eq!(
            parts[1].phrase(Voice::Verdict { rails: true }),
            "NODE: h1: its NICs on 3 of its 5 rails are slow (4 rank pairs)"
        );
        let baseline: Vec<String> = parts.iter().map(|p| p.phrase(Voice::Baseline)).collect();
        assert_eq!(
            baseline,
            [
                "UPLINK s1 <-> s2: 3 of 5 host links across it",
                "NODE h1: 3 of its 5 host links",
                "HOST LINK h0 <-> h1: 3 of its 5 rank pairs",
                "NIC rank 3 (h1): 3 of its 5 pairs to other hosts",
                "NIC h1 on rail 2 (rank 5): 3 of its 5 pairs",
                "RANK PAIR rank 0 (h0) <-> rank 5 (h2)",
            ]
        );
    }

    #[test]
    fn a_host_link_and_a_nic_name_the_switch_end_of_the_cable_where_known() {
        let end = |switch: &str, port: &str| {
            Some(crate::pairwise::blame::SwitchEnd {
                switch: switch.into(),
                port: port.into(),
            })
        };
        let link = Part::HostLink {
            host_a: "h0".into(),
            host_b: "h1".into(),
            counts: k(),
            port_a: end("leaf0", "Ethernet12"),
            port_b: None,
        };
        assert_eq!(
            link.phrase(Voice::Verdict { rails: false }),
            "HOST LINK: h0 (switch leaf0 port Ethernet12) <-> h1: 3 of its 5 rank pairs are slow"
        );
        assert_eq!(
            link.phrase(Voice::Baseline),
            "HOST LINK h0 (switch leaf0 port Ethernet12) <-> h1: 3 of its 5 rank pairs"
        );
        let nic = Part::Nic {
            rank: 3,
            host: "h1".into(),
            counts: k(),
            port: end("ib-leaf-3", "17"),
        };
        assert_eq!(
            nic.phrase(Voice::Verdict { rails: false }),
            "NIC: rank 3 (h1, switch ib-leaf-3 port 17): 3 of its 5 pairs to other hosts are slow, the other \
             ranks of h1 are fine"
        );
    }
}
