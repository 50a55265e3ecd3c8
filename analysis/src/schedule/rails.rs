//! `--rails`: each rank's local index (its rail), the ranks of each rail, and rounds that run
//! the rails (and, with `--intra-node`, the nodes) side by side.

use super::{Pair, Pattern};

/// Each rank's index among the ranks of its node, in rank order (its rail).
pub fn local_rank_of(node_of: &[usize]) -> Vec<usize> {
    let mut seen = std::collections::HashMap::new();
    node_of
        .iter()
        .map(|&n| {
            let k = seen.entry(n).or_insert(0usize);
            *k += 1;
            *k - 1
        })
        .collect()
}

/// The ranks of each rail (local rank i on every node that has one), rail by rail.
pub fn rail_members(node_of: &[usize]) -> Vec<Vec<usize>> {
    let mut rails: Vec<Vec<usize>> = Vec::new();
    for (r, l) in local_rank_of(node_of).into_iter().enumerate() {
        if rails.len() <= l {
            rails.resize(l + 1, Vec::new());
        }
        rails[l].push(r);
    }
    rails
}

/// Rounds for `--rails`: the pattern's pairs among the ranks of each rail (same local rank on
/// different nodes), the rails side by side in each round (they share no rank); with `intra`,
/// then every pair within each node, the nodes side by side.
pub fn rail_rounds(node_of: &[usize], pattern: Pattern, intra: bool) -> Vec<Vec<Pair>> {
    let mut rounds: Vec<Vec<Pair>> = Vec::new();
    rounds_side_by_side(&mut rounds, rail_members(node_of), pattern);
    if intra {
        let nodes = node_of.iter().copied().max().map_or(0, |m| m + 1);
        let mut on_node: Vec<Vec<usize>> = vec![Vec::new(); nodes];
        for (r, &n) in node_of.iter().enumerate() {
            on_node[n].push(r);
        }
        rounds_side_by_side(&mut rounds, on_node, Pattern::All);
    }
    for r in &mut rounds {
        r.sort_unstable();
    }
    rounds.retain(|r| !r.is_empty());
    rounds
}

/// Append the pattern's rounds of each group of ranks, round k of every group in one round.
fn rounds_side_by_side(rounds: &mut Vec<Vec<Pair>>, groups: Vec<Vec<usize>>, pattern: Pattern) {
    let from = rounds.len();
    for members in groups {
        for (k, round) in pattern.rounds(members.len()).into_iter().enumerate() {
            if rounds.len() <= from + k {
                rounds.resize(from + k + 1, Vec::new());
            }
            rounds[from + k].extend(round.into_iter().map(|(a, b)| (members[a], members[b])));
        }
    }
}
