//! `lldpctl -f json` read as a topology, on published outputs (analysis/tests/data/lldp/README.md
//! names each source): puppet-lldpd's spec (a list of interfaces with a named chassis; one
//! interface with an unnamed chassis and a local port ID; no neighbour at all) and lldpd's own
//! integration test (the same neighbour in `json` and in `json0`), and edits of them for the
//! refusals.

use std::path::Path;

use super::*;
use crate::pairwise::topology::{HostLink, Topology};

const GPU01: &str = include_str!("../../../../tests/data/lldp/hosts/gpu01.json");
const GPU02: &str = include_str!("../../../../tests/data/lldp/hosts/gpu02.json");
const EMPTY: &str = include_str!("../../../../tests/data/lldp/refused/empty.json");
const NS1: &str = include_str!("../../../../tests/data/lldp/refused/ns-1.json");
const NS1_JSON0: &str = include_str!("../../../../tests/data/lldp/refused/ns-1-json0.json");

fn data(dir: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/lldp").join(dir)
}

fn nb(interface: &str, chassis: &str, port: &str, switch: bool) -> Neighbour {
    Neighbour {
        interface: interface.into(),
        chassis: chassis.into(),
        port: port.into(),
        switch,
    }
}

#[test]
fn each_published_output_gives_exactly_its_neighbours() {
    for (name, text, want) in [
        ("gpu01", GPU01, vec![nb("eno1", "router", "ge-1/0/1", true)]),
        ("gpu02", GPU02, vec![nb("enp3s0", "44:94:fc:9d:55:0a", "g17", true)]),
        ("empty", EMPTY, vec![]),
        // The port ID is a MAC address: its description names it.
        ("ns-1", NS1, vec![nb("eth0", "ns-2.example.com", "eth1", false)]),
        (
            "ns-1 json0",
            NS1_JSON0,
            vec![nb("eth0", "ns-2.example.com", "eth1", false)],
        ),
    ] {
        assert!(looks_like(text), "{name}");
        assert_eq!(neighbours(text).unwrap(), want, "{name}");
    }
}

#[test]
fn a_host_file_places_its_host_under_the_switch_with_the_port() {
    assert_eq!(
        placement(GPU01, "gpu01").unwrap(),
        ("router".into(), "eno1".into(), "ge-1/0/1".into())
    );
    // Through the topology reader: the host is named by the file.
    let t = Topology::parse(GPU02, "lldp/gpu02.json").unwrap();
    assert_eq!(t.switch_of("gpu02"), Some("44:94:fc:9d:55:0a"));
    assert_eq!(
        t.link_of("gpu02"),
        Some(&HostLink {
            host_end: "enp3s0".into(),
            switch_port: "g17".into()
        })
    );
    assert_eq!(t.leaves().len(), 1);
}

#[test]
fn a_directory_of_host_files_is_one_topology() {
    let t = Topology::read(&data("hosts")).unwrap();
    let leaves = t.leaves();
    assert_eq!(leaves.len(), 2);
    assert_eq!(leaves["router"], ["gpu01"]);
    assert_eq!(leaves["44:94:fc:9d:55:0a"], ["gpu02"]);
    assert_eq!(t.link_of("gpu01").map(|l| l.switch_port.as_str()), Some("ge-1/0/1"));
}

#[test]
fn refusals_are_one_line_naming_the_file_and_the_fix() {
    let e = Topology::parse(EMPTY, "lldp/gpu03.json").unwrap_err();
    assert_eq!((e.file.as_str(), e.line), ("lldp/gpu03.json", 0));
    assert!(
        e.why.starts_with("names no LLDP neighbour: lldpd on gpu03 saw none"),
        "{e}"
    );
    for text in [NS1, NS1_JSON0] {
        let e = Topology::parse(text, "ns-1.json").unwrap_err();
        assert_eq!(
            e.to_string(),
            "ns-1.json:0: no neighbour is a switch: ns-2.example.com on eth0 announces neither \
             Bridge nor Router; expected the switch ns-1's interface is cabled to"
        );
    }
    // A directory stops at its first refused file, named.
    let e = Topology::read(&data("refused")).unwrap_err();
    assert!(e.file.ends_with("refused/empty.json"), "{e}");
    for e in [
        Topology::parse("{\"lldp\": ", "h.json").unwrap_err(),
        Topology::parse("{\"interfaces\": {}}", "h.json").unwrap_err(),
        Topology::parse(&format!("{GPU01}{GPU02}"), "all.json").unwrap_err(),
    ] {
        assert_eq!(e.to_string().lines().count(), 1, "{e}");
    }
    let e = Topology::parse("{\"interfaces\": {}}", "h.json").unwrap_err();
    assert!(
        e.why
            .starts_with("JSON that is not lldpctl's: expected `{\"lldp\": ...}`"),
        "{e}"
    );
    let e = Topology::parse(&format!("{GPU01}{GPU02}"), "all.json").unwrap_err();
    assert!(e.why.contains("one lldpctl output per file"), "{e}");
    assert_eq!(e.line, 79, "{e}"); // where the second output starts
}

/// gpu01's output with a second neighbour: `chassis` and port renamed, on interface `iface`,
/// a bridge or not.
fn with_second(chassis: &str, iface: &str, port: &str, bridge: bool) -> String {
    let mut v: serde_json::Value = serde_json::from_str(GPU01).unwrap();
    let list = v["lldp"]["interface"].as_array_mut().unwrap();
    let mut second = list[0].clone();
    let mut body = second["eno1"].take();
    let mut c = body["chassis"]["router"].take();
    c["capability"] = serde_json::json!([{"type": "Bridge", "enabled": bridge}]);
    body["chassis"] = serde_json::json!({ chassis: c });
    body["port"]["id"]["value"] = port.into();
    second = serde_json::json!({ iface: body });
    list.push(second);
    v.to_string()
}

#[test]
fn two_switches_are_refused_and_a_bond_to_one_is_joined() {
    let e = placement(&with_second("leaf02", "eno2", "swp3", true), "gpu01").unwrap_err();
    assert_eq!(
        e.1,
        "gpu01 sees two switches, router (on eno1) and leaf02 (on eno2); --topology places a host \
         under one: gather `lldpctl -f json IFACE` naming the interface meshrun tests over"
    );
    assert_eq!(
        placement(&with_second("router", "eno2", "ge-1/0/2", true), "gpu01").unwrap(),
        ("router".into(), "eno1,eno2".into(), "ge-1/0/1,ge-1/0/2".into())
    );
    // The same interface twice (two neighbours on one port), one of them not a bridge: the
    // switch alone places the host.
    let text = with_second("ns-2", "eno1", "eth1", false);
    assert_eq!(neighbours(&text).unwrap().len(), 2);
    assert_eq!(
        placement(&text, "gpu01").unwrap(),
        ("router".into(), "eno1".into(), "ge-1/0/1".into())
    );
}

#[test]
fn only_json_is_read_as_lldp() {
    assert!(!looks_like("leaf1: node[01-16]\n"));
    assert!(!looks_like("# Topology file\nSwitch 36 \"S-0008f10500200b50\"\n"));
    assert!(looks_like("\n  {\"lldp\": {}}"));
}
