//! A node slow at times on every rail: each rail names its NIC there unstable (or slow), and the
//! run names the node, unstable, once, as it names a node slow on every rail.

use std::collections::BTreeMap;

use super::RailOutcome;
use crate::pairwise::blame::{Part, SlowCounts};
use crate::pairwise::verdict;

/// The nodes whose NICs were named on each of their rails (two or more), unstable on one at
/// least (slow on all is a slow node, `nodes`): each is one unstable node, as a slow node is
/// one node, with its NICs' slots together, their worst figure and the span of their pairs alone.
pub(super) fn unstable_nodes(
    rails: &[RailOutcome],
    hosts: &[String],
    slow: &BTreeMap<&str, usize>,
    nodes: &[&str],
) -> Vec<verdict::Unstable> {
    let rails_of = |h: &str| super::rails_of(rails, hosts, h);
    let mut shaky: BTreeMap<&str, Vec<&verdict::Unstable>> = BTreeMap::new();
    for r in rails {
        for u in &r.verdict.unstable {
            if let Part::RailNic { host, .. } = &u.part {
                shaky.entry(host).or_default().push(u);
            }
        }
    }
    shaky
        .into_iter()
        .filter(|(h, us)| {
            let named = us.len() + slow.get(h).copied().unwrap_or(0);
            !nodes.contains(h) && named >= 2 && named == rails_of(h)
        })
        .map(|(h, us)| {
            let counts = |u: &verdict::Unstable| match &u.part {
                Part::RailNic { counts, .. } => Some(counts.clone()),
                _ => None,
            };
            let mut slow_in: Vec<u32> = us.iter().flat_map(|u| u.slow_in.iter().copied()).collect();
            slow_in.sort_unstable();
            slow_in.dedup();
            let fold = |f: fn(&verdict::Unstable) -> f64, pick: fn(f64, f64) -> f64| {
                us.iter().map(|u| f(u)).reduce(pick).unwrap_or(f64::NAN)
            };
            let pairs: usize = us.iter().filter_map(|u| counts(u)).map(|k| k.slow_pairs).sum();
            let worst = fold(|u| u.worst, f64::min);
            verdict::Unstable {
                part: Part::Node {
                    host: h.to_string(),
                    counts: SlowCounts {
                        slow: rails_of(h),
                        of: rails_of(h),
                        slow_pairs: pairs,
                        worst,
                        worst_retest: None,
                    },
                },
                slow_in,
                slots: us.iter().map(|u| u.slots).max().unwrap_or(0),
                worst,
                beside: fold(|u| u.beside, f64::max),
                alone_min: fold(|u| u.alone_min, f64::min),
                alone_max: fold(|u| u.alone_max, f64::max),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pairwise::verdict::{Rule, Unstable, Verdict};

    fn nic(rail: usize, rank: usize, host: &str, slots: &[u32], worst: f64) -> Unstable {
        Unstable {
            part: Part::RailNic {
                rail,
                rank,
                host: host.into(),
                nic: None,
                counts: SlowCounts {
                    slow: 3,
                    of: 3,
                    slow_pairs: 3,
                    worst,
                    worst_retest: None,
                },
            },
            slow_in: slots.to_vec(),
            slots: 4,
            worst,
            beside: 10.0,
            alone_min: 9.0,
            alone_max: 10.0,
        }
    }

    fn rail(rail: usize, unstable: Vec<Unstable>) -> RailOutcome {
        RailOutcome {
            rail,
            ranks: vec![rail, 2 + rail, 4 + rail, 6 + rail],
            nics: vec![None; 4],
            verdict: Verdict {
                rule: Rule::Robust,
                judged: Vec::new(),
                cleared: Vec::new(),
                confirmed: Vec::new(),
                blamed: Vec::new(),
                unstable,
                pass: false,
                fabric: Vec::new(),
                links: Vec::new(),
                uplink_paths: Vec::new(),
                unrouted: Vec::new(),
            },
        }
    }

    /// 4 hosts on 2 rails (rank = host x 2 + rail); n1's NIC unstable on both rails (seed 21 of
    /// the campaign: its node flapped): one unstable node, its slots together, its worst figure
    /// and its pairs alone from both. n2's NIC unstable on one rail only is not its node.
    #[test]
    fn a_node_unstable_on_every_rail_is_one_unstable_node() {
        let hosts: Vec<String> = (0..8).map(|r| format!("n{}", r / 2)).collect();
        let rails = [
            rail(0, vec![nic(0, 2, "n1", &[0, 2], 3.0), nic(0, 4, "n2", &[1], 4.0)]),
            rail(1, vec![nic(1, 3, "n1", &[2, 3], 2.0)]),
        ];
        let got = unstable_nodes(&rails, &hosts, &BTreeMap::new(), &[]);
        assert_eq!(got.len(), 1, "{got:?}");
        let u = &got[0];
        let Part::Node { host, counts } = &u.part else {
            panic!("{u:?}")
        };
        assert_eq!(
            (host.as_str(), counts.slow, counts.of, counts.slow_pairs),
            ("n1", 2, 2, 6)
        );
        assert_eq!(u.slow_in, [0, 2, 3]);
        assert_eq!((u.worst, u.alone_min, u.alone_max), (2.0, 9.0, 10.0));
        // Slow on one rail and unstable on the other: still the node, unstable.
        let slow = BTreeMap::from([("n2", 1)]);
        let got = unstable_nodes(&rails, &hosts, &slow, &[]);
        assert_eq!(got.len(), 2, "{got:?}");
        // A node already named slow (on every rail) is not named again.
        assert_eq!(unstable_nodes(&rails, &hosts, &BTreeMap::new(), &["n1"]).len(), 0);
    }
}
