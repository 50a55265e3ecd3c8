//! Several hosts on one machine: network namespaces on a bridge, each with its own host name,
//! reached by `meshrun launch --rsh-agent` the way a Kubeflow MPIJob reaches its workers.

use std::time::Duration;

use e2e::*;

#[test]
fn mesh_check_across_three_namespace_hosts() {
    let c = NetnsCluster::up(3);
    let r = c.launch(
        &[],
        &["mesh-check", "--iters", "10", "--timeout", "30"],
        Duration::from_secs(120),
    );
    r.expect_code(0);
    let rows = table_rows(&r.stdout);
    let hosts: Vec<&str> = rows.iter().map(|row| row[1].as_str()).collect();
    assert_eq!(hosts, vec!["mr-h0", "mr-h1", "mr-h2"], "{}", r.stdout);
    assert!(r.stdout.contains("3 ranks on 3 host(s)"), "{}", r.stdout);
}

/// Pairwise arguments for the namespace tests. Unshaped TCP over veths on a 2-core machine varies
/// by +-30% between runs, so the bar is half the median; a 100 Mbit link is 50x below it.
const PAIRWISE: &[&str] = &[
    "pairwise",
    "-s",
    "64K",
    "-n",
    "300",
    "--threshold",
    "0.5",
    "--timeout",
    "60",
];

#[test]
fn pairwise_names_exactly_the_one_slow_link() {
    let c = NetnsCluster::up(3);
    // Only traffic from mr-h0 into mr-h1 is limited.
    c.script(&["shape", "mr-h1", "100mbit", "mr-h0"]).expect_code(0);
    let r = c.launch(&[], PAIRWISE, Duration::from_secs(300));
    r.expect_code(1);
    assert!(
        r.stdout.contains("# SLOW LINK: rank 0 (mr-h0) <-> rank 1 (mr-h1)") && r.stdout.contains("direction 0->1"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("SLOW NODE"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("# FAIL: 1 slow pair(s): 0 slow node(s), 1 slow link(s)"),
        "{}",
        r.stdout
    );
}

#[test]
fn pairwise_blames_the_node_whose_links_are_all_slow() {
    let c = NetnsCluster::up(3);
    c.script(&["shape", "mr-h1", "100mbit"]).expect_code(0);
    let r = c.launch(&[], PAIRWISE, Duration::from_secs(300));
    r.expect_code(1);
    assert!(
        r.stdout.contains("# SLOW NODE: mr-h1: 2 of its 2 pairs are slow"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("# SLOW LINK"), "{}", r.stdout);
}

#[test]
fn pairwise_without_shaping_passes() {
    let c = NetnsCluster::up(3);
    let r = c.launch(&[], PAIRWISE, Duration::from_secs(300));
    r.expect_code(0);
    assert!(r.stdout.contains("# PASS: no slow pairs"), "{}", r.stdout);
    let matrix: Vec<&str> = r
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("# Average bandwidth"))
        .skip(2)
        .take_while(|l| !l.starts_with('#'))
        .collect();
    assert_eq!(matrix.len(), 3, "matrix rows:\n{}", r.stdout);
    assert!(matrix.iter().all(|l| l.contains("mr-h")), "{matrix:?}");
}
