//! `meshrun topology FILE` end to end: the binary reads a real fabric's ibnetdiscover output
//! (analysis/tests/data/ibnetdiscover/, its source named there) and a leaf-line file, and prints
//! each leaf with its hosts, or refuses the file in one line.

use e2e::*;

#[test]
fn a_topology_file_is_printed_leaf_by_leaf_or_refused_in_one_line() {
    let d = fresh_dir("topology-printed");
    let conf = d.join("topo.conf");
    std::fs::write(&conf, "leaf1: node[01-03]\nSwitchName=leaf2 Nodes=node[04-05],gpu7\n").expect("write");
    let r = meshrun(&["topology", conf.to_str().expect("utf-8")], limits::ONE_PROCESS);
    r.expect_code(0);
    assert!(
        r.stdout.contains(": 6 host(s) under 2 leaf switch(es)\n"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("\nleaf1: node[01-03]  # 3 host(s)\n"), "{}", r.stdout);
    assert!(
        r.stdout.contains("\nleaf2: gpu7,node[04-05]  # 3 host(s)\n"),
        "{}",
        r.stdout
    );

    // PSMN's X5 fabric as ibnetdiscover printed it: its HCAs carry the firmware's description,
    // not their hosts' names, so the file is refused with the fix.
    let x5 = root().join("analysis/tests/data/ibnetdiscover/X5.topofile");
    let x5 = x5.to_str().expect("utf-8");
    let r = meshrun(&["topology", x5], limits::ONE_PROCESS);
    r.expect_code(2);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.starts_with(&format!(
            "meshrun topology: {x5}:0: no HCA's NodeDescription names its host"
        )),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("--node-name-map"), "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&d);
}
