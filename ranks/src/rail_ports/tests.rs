use super::*;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

fn iface(name: &str) -> RailPort {
    RailPort {
        device: name.into(),
        port: None,
        pci: None,
    }
}

fn hosts(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn natural_order_counts_numbers_as_numbers() {
    let mut v = vec!["mlx5_10", "mlx5_2", "mlx5_1", "eth10", "eth2", "ib0", "mlx5_02"];
    v.sort_by(|a, b| natural(a, b));
    assert_eq!(v, ["eth2", "eth10", "ib0", "mlx5_1", "mlx5_02", "mlx5_2", "mlx5_10"]);
}

/// Only ACTIVE ports: mlx5-roce's second port is DOWN; `only` narrows to the devices it names.
#[test]
fn verbs_ports_are_the_active_ones_in_order() {
    let names = |v: Vec<RailPort>| v.iter().map(RailPort::name).collect::<Vec<_>>();
    assert_eq!(names(verbs_ports(&fixture("mlx5-roce"), &[])), ["mlx5_0:1"]);
    let two = verbs_ports(&fixture("gpu-2socket"), &[]);
    assert_eq!(names(two.clone()), ["mlx5_0:1", "mlx5_1:1"]);
    assert_eq!(two[1].pci.as_deref(), Some("0000:98:00.0"));
    assert_eq!(
        names(verbs_ports(&fixture("gpu-2socket"), &["mlx5_1".into()])),
        ["mlx5_1:1"]
    );
    assert!(verbs_ports(&fixture("no-rdma"), &[]).is_empty());
}

#[test]
fn rail_interfaces_leave_out_loopback_down_bridges_and_containers() {
    let c = |name: &str, up: bool, ipv4: bool| Candidate {
        name: name.into(),
        up,
        loopback: name == "lo",
        ipv4,
    };
    let cands = [
        c("lo", true, true),
        c("eth1", true, true),
        c("eth1", true, false), // its IPv6 address: listed once
        c("eth0", true, true),
        c("eth2", false, true),
        c("eth3", true, false),
        c("docker0", true, true),
        c("virbr0", true, true),
        c("br0", true, true),
        c("eth10", true, true),
    ];
    assert_eq!(rail_interfaces(&cands, &[], |n| n == "br0"), ["eth0", "eth1", "eth10"]);
    assert_eq!(rail_interfaces(&cands, &["eth10".into()], |_| false), ["eth10"]);
}

#[test]
fn this_machine_lists_no_loopback_rail() {
    let v = tcp_ports(Path::new("/sys"), &[]).unwrap();
    assert!(v.iter().all(|p| p.device != "lo" && p.port.is_none()), "{v:?}");
}

#[test]
fn a_plan_gives_each_host_its_ports() {
    let h = hosts(&["a", "a", "b", "b"]);
    let lists = vec![vec![iface("eth0"), iface("eth1")]; 4];
    let p = plan(&h, &[0, 0, 1, 1], &lists, "interfaces").unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(p[1][1].name(), "eth1");
}

#[test]
fn uneven_hosts_are_one_line_naming_both() {
    let h = hosts(&["a", "b"]);
    let lists = vec![vec![iface("eth0"), iface("eth1")], vec![iface("eth0")]];
    let e = plan(&h, &[0, 1], &lists, "interfaces").unwrap_err().to_string();
    assert_eq!(
        e,
        "--rails auto: hosts differ in their active interfaces: a has 2 (eth0, eth1), b has 1 (eth0); every host \
         needs the same rails (bring the missing port up, or name the rails with --devices or --tcp-if)"
    );
    let none = vec![vec![iface("eth0")], vec![]];
    let e = plan(&h, &[0, 1], &none, "RDMA ports").unwrap_err().to_string();
    assert!(e.starts_with("--rails auto: b has no active RDMA ports;"), "{e}");
}

/// One rank per host where each has two ports: the count to start, and launch's flag for it.
#[test]
fn ranks_per_host_must_match_the_ports() {
    let h = hosts(&["a", "b", "c", "d"]);
    let lists = vec![vec![iface("eth0"), iface("eth1")]; 4];
    let e = plan(&h, &[0, 1, 2, 3], &lists, "interfaces").unwrap_err().to_string();
    assert_eq!(
        e,
        "--rails auto: every host has 2 active interfaces (eth0, eth1), so the job needs 2 rank(s) per host, one \
         per port; a has 1: start 2 per host (meshrun launch --ppn 2, or mpirun -np 8 --map-by ppr:2:node)"
    );
}
