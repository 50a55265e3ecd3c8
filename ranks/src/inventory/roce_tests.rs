//! Flow control, the active MTU and iWARP's port mapper, on fixture trees judged as preflight
//! judges a job: four hosts, one of them planted.

use std::path::{Path, PathBuf};

use analysis::preflight::{expect::Expectations, judge, Inventory};

use super::probe::{Probe, TreeOnly};
use super::tests::{copy, fixture, needs, tempdir, value};
use super::*;
use crate::flow_control::{self, Pause};
use crate::netlink::NetlinkError;

/// A machine that answers as told: the pause and `pfc_en` of every interface, or a recorded
/// datagram to parse (a driver that refuses).
#[derive(Clone)]
struct Answers {
    pause: Result<Pause, NetlinkError>,
    pfc: Result<u8, NetlinkError>,
}

impl Probe for Answers {
    fn active_mtu(&self, _: &str, _: u8) -> Option<u32> {
        None
    }
    fn pause(&self, _: &str) -> Option<Result<Pause, NetlinkError>> {
        Some(self.pause.clone())
    }
    fn pfc(&self, _: &str) -> Option<Result<u8, NetlinkError>> {
        Some(self.pfc.clone())
    }
}

/// A lossless RoCE host: pause off, PFC on priority 3.
fn lossless() -> Answers {
    let off = Pause {
        autoneg: false,
        rx: false,
        tx: false,
    };
    Answers {
        pause: Ok(off),
        pfc: Ok(1 << 3),
    }
}

/// The answer of a driver without pause or DCB, parsed from the datagrams recorded from virtio-net.
fn refusing() -> Answers {
    let hex = |name: &str| {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/netlink")
            .join(name);
        let t = std::fs::read_to_string(p).unwrap();
        let t = t.trim().to_string();
        (0..t.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&t[i..i + 2], 16).unwrap())
            .collect::<Vec<u8>>()
    };
    Answers {
        pause: flow_control::parse_pause(&hex("pause-virtio-eopnotsupp-seq1.hex"), 1),
        pfc: flow_control::parse_pfc(&hex("dcb-virtio-eopnotsupp-seq1.hex"), 1),
    }
}

/// Every host's node read from its tree, proc and probe, judged together (and against `expect`).
fn judged(hosts: &[(PathBuf, PathBuf, &dyn Probe)], expect: Option<&Expectations>) -> Vec<String> {
    let all: Vec<Inventory> = hosts
        .iter()
        .enumerate()
        .map(|(i, (root, proc_root, probe))| {
            let host = format!("h{i}");
            let (node, local) = node(root, proc_root, *probe, &host, &needs());
            Inventory {
                rank: i,
                host,
                node,
                local,
                process: vec![Fact::new("process", "meshrun", "v", Severity::Warning)],
            }
        })
        .collect();
    judge(&all, expect)
        .iter()
        .map(|f| format!("{} {}: {}", f.severity.as_str(), f.subjects.join(", "), f.text))
        .collect()
}

fn four<'a>(root: &Path, proc_root: &Path, probes: [&'a dyn Probe; 4]) -> Vec<(PathBuf, PathBuf, &'a dyn Probe)> {
    probes
        .into_iter()
        .map(|p| (root.to_path_buf(), proc_root.to_path_buf(), p))
        .collect()
}

#[test]
fn the_roce_mtu_is_the_kernel_s() {
    assert_eq!(roce_mtu(9000), Some(4096));
    assert_eq!(roce_mtu(4200), Some(4096));
    assert_eq!(
        roce_mtu(4096),
        Some(2048),
        "an interface at 4096 leaves no room for 4096 and the headers"
    );
    assert_eq!(roce_mtu(1500), Some(1024));
    assert_eq!(roce_mtu(300), None);
}

#[test]
fn a_node_with_other_flow_control_is_named_and_agreeing_nodes_are_not() {
    let roce = fixture("mlx5-roce");
    let none = PathBuf::from("/nonexistent");
    let good = lossless();
    let (facts, _) = node(&roce, &none, &good, "h0", &needs());
    assert_eq!(value(&facts, "mlx5_0 port 1", "pause"), Some("off"));
    assert_eq!(value(&facts, "mlx5_0 port 1", "pfc"), Some("3"));
    assert_eq!(
        value(&facts, "mlx5_0 port 1", "active_mtu"),
        Some("4096"),
        "eth2 at 9000"
    );
    assert!(judged(&four(&roce, &none, [&good, &good, &good, &good]), None).is_empty());

    let pfc_off = Answers {
        pfc: Ok(0),
        ..lossless()
    };
    let paused = Answers {
        pause: Ok(Pause {
            autoneg: true,
            rx: true,
            tx: true,
        }),
        ..lossless()
    };
    assert_eq!(
        judged(&four(&roce, &none, [&good, &pfc_off, &good, &paused]), None),
        vec![
            "warning h3: mlx5_0 port 1: pause rx tx, 3 others off",
            "warning h1: mlx5_0 port 1: pfc off, 3 others 3",
        ]
    );
    // A driver that will not say: `unknown`, a warning, never an error.
    let refusing = refusing();
    let (facts, _) = node(&roce, &none, &refusing, "h0", &needs());
    assert_eq!(value(&facts, "mlx5_0 port 1", "pfc"), Some("unknown"));
    let found = judged(&four(&roce, &none, [&good, &good, &refusing, &good]), None);
    assert_eq!(
        found,
        vec![
            "warning h2: mlx5_0 port 1: pause unknown, 3 others off",
            "warning h2: mlx5_0 port 1: pfc unknown, 3 others 3",
        ]
    );
    // A tree that is not this machine's: nothing asked, nothing said.
    let (facts, _) = node(&roce, &none, &TreeOnly, "h0", &needs());
    assert_eq!(value(&facts, "mlx5_0 port 1", "pfc"), None);
}

#[test]
fn a_low_mtu_is_named_against_the_expectation() {
    let tmp = tempdir();
    let low = copy("mlx5-roce", &tmp);
    std::fs::write(low.join("class/net/eth2/mtu"), "1500\n").unwrap();
    let good = fixture("mlx5-roce");
    let none = PathBuf::from("/nonexistent");
    let e = Expectations::parse(
        "[[part]]\nscope = \"mlx5_0 port 1\"\nactive_mtu = \">= 4096\"\npfc = \"3\"\npause = \"off\"\n",
        "roce.toml",
    )
    .unwrap();
    let p = lossless();
    let hosts = vec![
        (good.clone(), none.clone(), &p as &dyn Probe),
        (good.clone(), none.clone(), &p),
        (low, none.clone(), &p),
        (good, none, &p),
    ];
    // Against the others the interface's MTU is named (the port's follows from it); against the
    // expectation, the port's.
    assert_eq!(
        judged(&hosts, Some(&e)),
        vec![
            "error h2: mlx5_0 port 1: netdev_mtu 1500, 3 others 9000",
            "error h2: net eth2: mtu 1500, 3 others 9000",
            "error h2: mlx5_0 port 1: active_mtu 1024, expected >= 4096 (a RoCE port gets 4096 from an interface MTU \
             of 4200 or more)",
        ]
    );
    // The same trees, all right: nothing.
    let right: Vec<_> = hosts
        .iter()
        .map(|(_, p, x)| (fixture("mlx5-roce"), p.clone(), *x))
        .collect();
    assert!(judged(&right, Some(&e)).is_empty());
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn hardware_iwarp_without_iwpmd_is_named() {
    let tmp = tempdir();
    // The siw fixture's device as a hardware iWARP NIC would be named.
    let root = copy("siw", &tmp);
    std::fs::rename(
        root.join("class/infiniband/siw0"),
        root.join("class/infiniband/cxgb4_0"),
    )
    .unwrap();
    let with = tmp.join("proc-with");
    let without = tmp.join("proc-without");
    for (dir, daemon) in [(&with, "iwpmd"), (&without, "sshd")] {
        for (pid, comm) in [("1", "systemd"), ("812", daemon)] {
            std::fs::create_dir_all(dir.join(pid)).unwrap();
            std::fs::write(dir.join(pid).join("comm"), format!("{comm}\n")).unwrap();
        }
    }
    let t: &dyn Probe = &TreeOnly;
    let hosts = |p: [&PathBuf; 4]| p.map(|p| (root.clone(), p.clone(), t)).to_vec();
    assert!(judged(&hosts([&with, &with, &with, &with]), None).is_empty());
    assert_eq!(
        judged(&hosts([&with, &without, &with, &with]), None),
        vec![
            "warning h1: node: iwpmd not running, with iWARP device cxgb4_0: its connections' TCP ports are not \
             reserved in the host's TCP stack and can collide with a host socket's (systemctl enable --now iwpmd; \
             rdma-core's iwpmd package; Soft-iWARP siw needs none)",
        ]
    );
    // Soft-iWARP connects through host sockets: no port mapper, no fact, no finding.
    let (facts, local) = node(&fixture("siw"), &without, &TreeOnly, "h0", &needs());
    assert_eq!(value(&facts, "node", "iwpmd"), None);
    assert!(local.is_empty(), "{local:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}
