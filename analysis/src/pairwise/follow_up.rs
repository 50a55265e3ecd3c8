//! After a quick pass (`--pairs ring|shift:K|random:K`): the ranks of the confirmed slow pairs,
//! with a few healthy reference ranks, are tested all-pairs, so the verdict can tell a slow node
//! or NIC from one slow link. A ring gives each rank two partners, too few to say which end of a
//! slow pair is at fault; against four healthy references it is plain.

use std::collections::{BTreeSet, HashSet};

use super::defaults::{FOLLOW_UP_REFERENCE_RANKS, MAX_FOLLOW_UP_SUSPECTS};
use super::verdict::{RetestPlan, Verdict};
use super::Selection;
use crate::schedule::{circle_rounds, local_rank_of, Pair};

/// The ranks to test all-pairs: those of the confirmed pairs (at most [`MAX_FOLLOW_UP_SUSPECTS`]) and, for
/// each rail they are on (one rail without `--rails`), up to [`FOLLOW_UP_REFERENCE_RANKS`] others of that
/// rail: the ranks of the plan's reference pairs first, then ranks on hosts with no suspect.
pub fn ranks(v: &Verdict, plan: &RetestPlan, selection: Selection, node_of: &[usize]) -> Vec<usize> {
    let mut suspects: BTreeSet<usize> = BTreeSet::new();
    for p in &v.confirmed {
        for r in [p.a, p.b] {
            if suspects.len() < MAX_FOLLOW_UP_SUSPECTS {
                suspects.insert(r);
            }
        }
    }
    if suspects.is_empty() {
        return Vec::new();
    }
    let rails = matches!(selection, Selection::Rails { .. });
    let local = local_rank_of(node_of);
    let group = |r: usize| if rails { local[r] } else { 0 };
    let suspect_nodes: HashSet<usize> = suspects.iter().map(|&r| node_of[r]).collect();
    let from_plan = plan.references.iter().flat_map(|&(a, b)| [a, b]);
    let elsewhere = (0..node_of.len()).filter(|r| !suspect_nodes.contains(&node_of[*r]));
    let everyone = 0..node_of.len();
    let mut set = suspects.clone();
    let groups: BTreeSet<usize> = suspects.iter().map(|&r| group(r)).collect();
    for g in groups {
        let mut added = 0;
        for r in from_plan.clone().chain(elsewhere.clone()).chain(everyone.clone()) {
            if added == FOLLOW_UP_REFERENCE_RANKS {
                break;
            }
            if group(r) == g && !suspects.contains(&r) && set.insert(r) {
                added += 1;
            }
        }
    }
    set.into_iter().collect()
}

/// Rounds of every pair among `set` that the selection allows and the quick pass did not measure.
pub fn rounds(set: &[usize], selection: Selection, node_of: &[usize], measured: &HashSet<Pair>) -> Vec<Vec<Pair>> {
    let local = local_rank_of(node_of);
    circle_rounds(set.len())
        .into_iter()
        .map(|round| {
            let mut r: Vec<Pair> = round
                .into_iter()
                .map(|(i, j)| (set[i].min(set[j]), set[i].max(set[j])))
                .filter(|&p| selection.allows(p, node_of, &local) && !measured.contains(&p))
                .collect();
            r.sort_unstable();
            r
        })
        .filter(|r| !r.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pairwise::blame::SlowPair;
    use crate::pairwise::verdict::Rule;

    fn verdict(pairs: &[Pair]) -> Verdict {
        Verdict {
            rule: Rule::Robust,
            judged: Vec::new(),
            cleared: Vec::new(),
            unstable: Vec::new(),
            confirmed: pairs
                .iter()
                .map(|&(a, b)| SlowPair {
                    a,
                    b,
                    host_a: String::new(),
                    host_b: String::new(),
                    first: 1.0,
                    retest: None,
                    directions: vec![(a, b)],
                })
                .collect(),
            blamed: Vec::new(),
            pass: false,
            fabric: Vec::new(),
            unrouted: Vec::new(),
            links: Vec::new(),
            uplink_paths: Vec::new(),
        }
    }

    #[test]
    fn suspects_and_references_from_the_plan_then_from_clean_hosts() {
        let node_of: Vec<usize> = (0..16).collect();
        let plan = RetestPlan {
            suspects: vec![(4, 5), (5, 6)],
            references: vec![(10, 11)],
            ..RetestPlan::default()
        };
        let set = ranks(&verdict(&[(4, 5), (5, 6)]), &plan, Selection::All, &node_of);
        assert_eq!(set, vec![0, 1, 4, 5, 6, 10, 11]);
        assert!(ranks(&verdict(&[]), &plan, Selection::All, &node_of).is_empty());
        // Already measured pairs are not measured again; every other pair of the set once.
        let measured: HashSet<Pair> = [(4, 5), (5, 6)].into_iter().collect();
        let r = rounds(&set, Selection::All, &node_of, &measured);
        let pairs: usize = r.iter().map(Vec::len).sum();
        assert_eq!(pairs, 7 * 6 / 2 - 2);
        for round in &r {
            let mut seen: Vec<usize> = round.iter().flat_map(|&(a, b)| [a, b]).collect();
            let n = seen.len();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), n);
        }
    }

    #[test]
    fn rails_take_references_of_the_suspects_rail_and_only_rail_pairs() {
        // 6 hosts x 2 ranks; rank 5 (host 2, rail 1) slow to its ring partners on rail 1.
        let node_of: Vec<usize> = (0..12).map(|r| r / 2).collect();
        let sel = Selection::Rails { intra: false };
        let set = ranks(&verdict(&[(3, 5), (5, 7)]), &RetestPlan::default(), sel, &node_of);
        assert_eq!(set, vec![1, 3, 5, 7, 9, 11]);
        let r = rounds(&set, sel, &node_of, &HashSet::new());
        assert!(r.concat().iter().all(|&(a, b)| a % 2 == 1 && b % 2 == 1));
        assert_eq!(r.concat().len(), 15);
    }
}
