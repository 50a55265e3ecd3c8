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
