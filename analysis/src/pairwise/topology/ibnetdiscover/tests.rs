//! ibnetdiscover output read as a topology: a real fabric's output (the X5 cluster of PSMN, ENS
//! de Lyon, published in ltaulell/HPC_toolset with its GUID-to-host map and the Slurm
//! topology.conf its author's tool made from it; analysis/tests/data/ibnetdiscover/README.md),
//! and small texts worked by hand for the Linux NodeDescription form and the refusals.

use std::collections::BTreeMap;

use super::*;
use crate::pairwise::topology::Topology;

const X5: &str = include_str!("../../../../tests/data/ibnetdiscover/X5.topofile");
const X5_MAP: &str = include_str!("../../../../tests/data/ibnetdiscover/X5.map");
const X5_SLURM: &str = include_str!("../../../../tests/data/ibnetdiscover/X5.topology.conf");

/// X5.map's `H-<guid> <host>` lines.
fn x5_map() -> BTreeMap<String, String> {
    X5_MAP
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .map(|(g, h)| (g.trim().to_string(), h.trim().to_string()))
        .collect()
}

/// What `ibnetdiscover --node-name-map` prints: each mapped node's description replaced by its
/// name, in its own header and on the switch ports cabled to it.
fn with_names(text: &str, map: &BTreeMap<String, String>) -> String {
    text.lines()
        .map(|l| {
            let named = map.iter().find(|(g, _)| l.contains(&format!("\"{g}\"")));
            match (named, l.split_once("# \"")) {
                (Some((_, host)), Some((head, tail))) => {
                    let rest = tail.split_once('"').map_or("", |(_, r)| r);
                    format!("{head}# \"{host}\"{rest}")
                }
                _ => l.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn x5_as_printed_names_no_host_and_says_how_to() {
    assert!(looks_like(X5));
    let (line, why) = parse(X5).unwrap_err();
    assert_eq!(line, 0);
    assert!(why.contains("`MT25408 ConnectX Mellanox Technologies`"), "{why}");
    assert!(why.contains("--node-name-map"), "{why}");
    // Through the topology reader: one line, the file named.
    let e = Topology::parse(X5, "X5.topofile").unwrap_err();
    assert!(
        e.to_string().starts_with("X5.topofile:0: no HCA's NodeDescription"),
        "{e}"
    );
}

#[test]
fn x5_with_its_node_name_map_agrees_with_its_slurm_topology() {
    let ours = parse(&with_names(X5, &x5_map())).unwrap().switch_of;
    let slurm = Topology::parse(X5_SLURM, "X5.topology.conf").unwrap();
    // Every host the published topology.conf names (its unmapped HCAs go by GUID there, and
    // name nothing here) is under the same leaf switch, by GUID.
    let mut checked = 0;
    for host in x5_map().values() {
        let Some(want) = slurm.switch_of(host) else { continue };
        let got = ours.get(host).unwrap_or_else(|| panic!("{host} not placed"));
        assert!(
            got.ends_with(&format!("({want})")) || *got == want,
            "{host}: {got} against {want}"
        );
        checked += 1;
    }
    assert_eq!(checked, ours.len(), "no host placed that topology.conf does not place");
    let t = Topology::parse(&with_names(X5, &x5_map()), "X5.topofile").unwrap();
    let cabled = ours.keys().filter(|h| t.link_of(h).is_some()).count();
    assert_eq!(cabled, ours.len(), "every placed host with its switch port");
    assert!(checked >= 80, "{checked} hosts checked");
    // Six leaves, named by description where it is unique, else by GUID.
    let mut leaves: Vec<&String> = ours.values().collect();
    leaves.sort();
    leaves.dedup();
    assert_eq!(
        leaves,
        [
            "S-0002c90200417670",
            "S-0002c902004827b0",
            "S-0008f10500200b50",
            "Voltaire 4036 # 4036-369C (S-0008f1050020369c)",
            "Voltaire 4036 # 4036-8BBA (S-0008f10500108bba)",
            "Voltaire 4036 # hoibp0013 (S-0008f105002036b4)",
        ]
    );
    // And through the topology reader.
    let t = Topology::parse(&with_names(X5, &x5_map()), "X5.topofile").unwrap();
    assert_eq!(
        t.switch_of("r510gluster1"),
        Some("Voltaire 4036 # 4036-8BBA (S-0008f10500108bba)")
    );
}

/// Two leaves of a current fabric as ibnetdiscover prints them (worked by hand in its layout):
/// Linux NodeDescriptions `<host> <device>`, a spine between the leaves.
const LINUX: &str = "\
vendid=0x2c9
devid=0xd2f0
switchguid=0xb83fd20300aa0001(b83fd20300aa0001)
Switch\t64 \"S-b83fd20300aa0001\"\t\t# \"leaf01\" enhanced port 0 lid 3 lmc 0
[1]\t\"H-a088c20300bb0001\"[1](a088c20300bb0001) \t\t# \"gpu01 mlx5_0\" lid 10 4xNDR
[2]\t\"H-a088c20300bb0002\"[1](a088c20300bb0002) \t\t# \"gpu02 HCA-1\" lid 11 4xNDR
[33]\t\"S-b83fd20300cc0001\"[1]\t\t# \"spine01\" lid 2 4xNDR

switchguid=0xb83fd20300aa0002(b83fd20300aa0002)
Switch\t64 \"S-b83fd20300aa0002\"\t\t# \"leaf02\" enhanced port 0 lid 4 lmc 0
[1]\t\"H-a088c20300bb0003\"[1](a088c20300bb0003) \t\t# \"gpu03 mlx5_0\" lid 12 4xNDR
[33]\t\"S-b83fd20300cc0001\"[2]\t\t# \"spine01\" lid 2 4xNDR

switchguid=0xb83fd20300cc0001(b83fd20300cc0001)
Switch\t64 \"S-b83fd20300cc0001\"\t\t# \"spine01\" enhanced port 0 lid 2 lmc 0
[1]\t\"S-b83fd20300aa0001\"[33]\t\t# \"leaf01\" lid 3 4xNDR
[2]\t\"S-b83fd20300aa0002\"[33]\t\t# \"leaf02\" lid 4 4xNDR

caguid=0xa088c20300bb0004
Ca\t1 \"H-a088c20300bb0004\"\t\t# \"gpu04 mlx5_0\"
[1](a088c20300bb0004) \t\"S-b83fd20300aa0002\"[2]\t\t# lid 13 lmc 0 \"leaf02\" lid 4 4xNDR
";

#[test]
fn linux_node_descriptions_name_their_hosts() {
    let placed = parse(LINUX).unwrap();
    let t = &placed.switch_of;
    let want = [
        ("gpu01", "leaf01 (S-b83fd20300aa0001)"),
        ("gpu02", "leaf01 (S-b83fd20300aa0001)"),
        ("gpu03", "leaf02 (S-b83fd20300aa0002)"),
        ("gpu04", "leaf02 (S-b83fd20300aa0002)"),
    ];
    assert_eq!(t.len(), want.len(), "{t:?}");
    for (h, leaf) in want {
        assert_eq!(t.get(h).map(String::as_str), Some(leaf), "{h}");
    }
    // Each host's cable: its HCA's port and the switch's, from the switch's block or (gpu04,
    // seen from its own CA block only) from the HCA's.
    let links: Vec<(&str, &str, &str)> = placed
        .link_of
        .iter()
        .map(|(h, l)| (h.as_str(), l.host_end.as_str(), l.switch_port.as_str()))
        .collect();
    assert_eq!(
        links,
        [
            ("gpu01", "mlx5_0 port 1", "1"),
            ("gpu02", "HCA-1 port 1", "2"),
            ("gpu03", "mlx5_0 port 1", "1"),
            ("gpu04", "mlx5_0 port 1", "2"),
        ]
    );
}

#[test]
fn a_host_under_two_leaves_is_refused_with_its_line() {
    let text = LINUX.replace("\"gpu03 mlx5_0\"", "\"gpu01 mlx5_1\"");
    let (line, why) = parse(&text).unwrap_err();
    assert_eq!(line, 11, "{why}");
    assert!(why.contains("host gpu01 has HCA ports under two switches"), "{why}");
}

#[test]
fn descriptions_that_name_a_host_and_those_that_do_not() {
    for (d, h) in [
        ("gpu01 mlx5_0", Some("gpu01")),
        ("node018 HCA-1", Some("node018")),
        ("sl390lin1", Some("sl390lin1")),
        ("ip-211 mlx4_0", Some("ip-211")),
        ("MT25408 ConnectX Mellanox Technologies", None),
        ("MT23108 InfiniHost Mellanox Technologies", None),
        ("", None),
        ("gpu01 ConnectX", None),
    ] {
        assert_eq!(host_of(d), h, "{d:?}");
    }
    assert!(!looks_like("leaf1: node[01-16]\nSwitchName=s Nodes=n1\n"));
}
