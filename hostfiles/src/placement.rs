//! Where ranks land: nodes and local ranks from the host name of every rank.

/// Nodes and local ranks from the host name of every rank: nodes numbered in order of first
/// appearance; a rank's local rank is its position among the ranks of its node.
pub fn placement(hosts: &[String]) -> (Vec<usize>, usize, Vec<usize>, Vec<usize>) {
    let mut names: Vec<&str> = Vec::new();
    let mut node_of = Vec::with_capacity(hosts.len());
    let mut per_node: Vec<usize> = Vec::new();
    let mut local_rank = Vec::with_capacity(hosts.len());
    for h in hosts {
        let n = match names.iter().position(|x| x == h) {
            Some(n) => n,
            None => {
                names.push(h);
                per_node.push(0);
                names.len() - 1
            }
        };
        node_of.push(n);
        local_rank.push(per_node[n]);
        per_node[n] += 1;
    }
    let local_size = node_of.iter().map(|&n| per_node[n]).collect();
    (node_of, names.len(), local_rank, local_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_numbers_nodes_and_local_ranks() {
        let hosts: Vec<String> = ["a", "b", "a", "c", "b", "a"].iter().map(|s| s.to_string()).collect();
        let (node_of, n, local_rank, local_size) = placement(&hosts);
        assert_eq!(node_of, vec![0, 1, 0, 2, 1, 0]);
        assert_eq!(n, 3);
        assert_eq!(local_rank, vec![0, 0, 1, 0, 1, 2]);
        assert_eq!(local_size, vec![3, 2, 3, 1, 2, 3]);
    }
}
