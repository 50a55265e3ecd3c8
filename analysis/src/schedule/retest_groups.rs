//! Retest groups: pairs grouped so that the pairs of one group share no host and can be
//! retested at once.

use super::Pair;

/// `pairs` in groups that share no host (`node_of[rank]` is a rank's host), each pair in the
/// first group it fits, groups in the order of their first pair: the pairs of one group can be
/// measured at once without sharing a NIC, a host link or a CPU. The order of the pairs within a
/// group, and of each pair's groups, follows `pairs`.
pub fn host_disjoint_groups(pairs: &[Pair], node_of: &[usize]) -> Vec<Vec<Pair>> {
    let host = |r: usize| node_of.get(r).copied().unwrap_or(usize::MAX - r);
    let mut groups: Vec<(Vec<Pair>, Vec<usize>)> = Vec::new();
    for &(a, b) in pairs {
        let (ha, hb) = (host(a), host(b));
        match groups
            .iter_mut()
            .find(|(_, used)| !used.contains(&ha) && !used.contains(&hb))
        {
            Some((g, used)) => {
                g.push((a, b));
                used.extend([ha, hb]);
            }
            None => groups.push((vec![(a, b)], vec![ha, hb])),
        }
    }
    groups.into_iter().map(|(g, _)| g).collect()
}
