//! `meshrun topology PATH...` end to end: the binary reads a real fabric's ibnetdiscover output
//! (analysis/tests/data/ibnetdiscover/, its source named there), a leaf-line file, and published
//! `lldpctl -f json` outputs as one directory of HOST.json files or as several files
//! (analysis/tests/data/lldp/) and an ibtracert route (analysis/tests/data/ibtracert/), and prints
//! each leaf with its hosts, their switch ports and the routes, or refuses them in one line.

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

#[test]
fn lldpctl_files_place_each_host_under_its_switch_port_or_are_refused_in_one_line() {
    let lldp = root().join("analysis/tests/data/lldp");
    let hosts = lldp.join("hosts");
    let hosts = hosts.to_str().expect("utf-8");
    let want = "2 host(s) under 2 leaf switch(es)\n\
                44:94:fc:9d:55:0a: gpu02  # 1 host(s)\n\
                #   gpu02: enp3s0 -> port g17\n\
                router: gpu01  # 1 host(s)\n\
                #   gpu01: eno1 -> port ge-1/0/1\n";
    // The directory, as `--topology DIR` takes it.
    let r = meshrun(&["topology", hosts], limits::ONE_PROCESS);
    r.expect_code(0);
    assert_eq!(r.stdout, format!("# meshrun topology: {hosts}: {want}"));
    // The same two files named one by one.
    let (a, b) = (format!("{hosts}/gpu01.json"), format!("{hosts}/gpu02.json"));
    let r = meshrun(&["topology", &a, &b], limits::ONE_PROCESS);
    r.expect_code(0);
    assert!(r.stdout.ends_with(want), "{}", r.stdout);

    // A host whose lldpd saw no neighbour: the file, what is wrong, what would be right.
    let empty = lldp.join("refused/empty.json");
    let empty = empty.to_str().expect("utf-8");
    let r = meshrun(&["topology", &a, empty], limits::ONE_PROCESS);
    r.expect_code(2);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.starts_with(&format!(
            "meshrun topology: {empty}:0: names no LLDP neighbour: lldpd on empty saw none"
        )),
        "{}",
        r.stderr
    );
    // JSON that is not lldpctl's.
    let d = fresh_dir("topology-lldp");
    let other = d.join("gpu09.json");
    std::fs::write(&other, "{\"interfaces\": []}\n").expect("write");
    let r = meshrun(&["topology", other.to_str().expect("utf-8")], limits::ONE_PROCESS);
    r.expect_code(2);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains(":0: JSON that is not lldpctl's"), "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn ibtracert_routes_are_printed_switch_by_switch() {
    // An ibtracert route on an ibsim fabric (analysis/tests/data/ibtracert/, source named there).
    let f = root().join("analysis/tests/data/ibtracert/hxa-ibsim.txt");
    let r = meshrun(&["topology", f.to_str().expect("utf-8")], limits::ONE_PROCESS);
    r.expect_code(0);
    assert!(
        r.stdout.contains(": 2 host(s) under 2 leaf switch(es)\n"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("\n#   hxa-gpu01: mlx5_0 port 1 -> port 1\n"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.ends_with(
            "\n# 1 route(s), each switch [in>out port]:\n#   hxa-gpu01 -> hxa-gpu03: \
             hxa-su1-leaf-r1 (S-0000000000200002) [1>33] > hxa-spine01 (S-0000000000200000) \
             [1>3] > hxa-su2-leaf-r1 (S-0000000000200004) [33>1]\n"
        ),
        "{}",
        r.stdout
    );
}
