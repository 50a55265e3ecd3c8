//! Reading the counters of the NIC a rank's traffic uses, so a report can show what moved during
//! the run beside the part it blames (the meaning of each counter is `analysis::counters`'):
//! - an RDMA port: `class/infiniband/DEV/ports/PORT/counters/*` (InfiniBand port counters) and
//!   `.../ports/PORT/hw_counters/*` and `class/infiniband/DEV/hw_counters/*` (RoCE and Soft-RoCE),
//!   as `DEV port PORT`; on RoCE also the link downs of the port's network interface (the one
//!   its default GID, index 0, belongs to), as `IF`, since RoCE ports have no `link_downed`;
//! - a network interface: `class/net/IF/statistics/*` and its link downs
//!   (`class/net/IF/carrier_down_count`, else `carrier_changes`), as `IF`;
//! - the host's TCP: `Tcp:` of `/proc/net/snmp` and `TcpExt:` of `/proc/net/netstat`, as `tcp`.
//!
//! Every file is read once per snapshot; one that cannot be read (a counter the driver does not
//! expose, or one that needs privileges) is left out, never an error.

use std::collections::BTreeMap;
use std::path::Path;

use crate::transport::{Endpoint, TransportKind};

/// One source's counters: its name and each counter's value.
pub type Counters = (String, BTreeMap<String, u64>);

/// The TCP counters kept from /proc/net/snmp (`Tcp:`) and /proc/net/netstat (`TcpExt:`).
const TCP_KEPT: &[&str] = &[
    "RetransSegs",
    "InErrs",
    "InCsumErrors",
    "TCPTimeouts",
    "TCPLostRetransmit",
];

/// Every counter file in `dir` whose content is a number.
fn numbers_in(dir: &Path) -> BTreeMap<String, u64> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let v = std::fs::read_to_string(e.path()).ok()?.trim().parse().ok()?;
            Some((name, v))
        })
        .collect()
}

/// The `Tcp:`/`TcpExt:` pairs of header and value lines in /proc/net/snmp or /proc/net/netstat,
/// `keep` only.
pub fn proc_net_counters(text: &str, keep: &[&str]) -> BTreeMap<String, u64> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = BTreeMap::new();
    for pair in lines.windows(2) {
        let (names, values) = (pair[0], pair[1]);
        let (Some((p1, n)), Some((p2, v))) = (names.split_once(':'), values.split_once(':')) else {
            continue;
        };
        if p1 != p2
            || !(p1 == "Tcp" || p1 == "TcpExt")
            || n.split_whitespace().next().is_some_and(|w| w.parse::<i64>().is_ok())
        {
            continue;
        }
        for (k, x) in n.split_whitespace().zip(v.split_whitespace()) {
            if keep.contains(&k) {
                if let Ok(x) = x.parse::<u64>() {
                    out.insert(k.to_string(), x);
                }
            }
        }
    }
    out
}

/// Every counter of RDMA port `port` of `dev`: the port's `counters` and `hw_counters` and the
/// device's `hw_counters`.
pub fn port_counters(sysfs_root: &Path, dev: &str, port: u8) -> BTreeMap<String, u64> {
    let d = sysfs_root.join("class/infiniband").join(dev);
    let p = d.join("ports").join(port.to_string());
    let mut values = numbers_in(&p.join("counters"));
    values.extend(numbers_in(&p.join("hw_counters")));
    values.extend(numbers_in(&d.join("hw_counters")));
    values
}

/// Every counter of network interface `name`: its `statistics` and how often its link went down
/// ([`link_downs`]), so a link that dropped and came back during a run is named even when its
/// traffic looked fine.
pub fn interface_counters(sysfs_root: &Path, name: &str) -> BTreeMap<String, u64> {
    let dir = sysfs_root.join("class/net").join(name);
    let mut values = numbers_in(&dir.join("statistics"));
    values.extend(link_downs(sysfs_root, name));
    values
}

/// How often interface `name`'s link went down: `carrier_down_count` (Linux 4.16 and later),
/// else `carrier_changes` (downs and ups); empty where neither can be read.
pub fn link_downs(sysfs_root: &Path, name: &str) -> BTreeMap<String, u64> {
    let dir = sysfs_root.join("class/net").join(name);
    let read = |f: &str| -> Option<u64> { std::fs::read_to_string(dir.join(f)).ok()?.trim().parse().ok() };
    let mut values = BTreeMap::new();
    if let Some(n) = read("carrier_down_count") {
        values.insert("carrier_down_count".to_string(), n);
    } else if let Some(n) = read("carrier_changes") {
        values.insert("carrier_changes".to_string(), n);
    }
    values
}

/// The network interface under RoCE port `port` of `dev`: the one its GID at index 0 (the port's
/// default GID, made from the interface's own address) belongs to
/// (`ports/PORT/gid_attrs/ndevs/0`), else the first of the PCI function's (`device/net/`). None
/// on InfiniBand (no interface) or where sysfs does not say.
pub fn roce_interface(sysfs_root: &Path, dev: &str, port: u8) -> Option<String> {
    let d = sysfs_root.join("class/infiniband").join(dev);
    let p = d.join("ports").join(port.to_string());
    let link = std::fs::read_to_string(p.join("link_layer")).ok()?;
    if link.trim() != "Ethernet" {
        return None;
    }
    let by_gid = std::fs::read_to_string(p.join("gid_attrs/ndevs/0"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    by_gid.or_else(|| {
        let mut names: Vec<String> = std::fs::read_dir(d.join("device/net"))
            .ok()?
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names.into_iter().next()
    })
}

/// The counters of the NIC this rank's mesh uses (`end`, over `kind`), sysfs under
/// `sysfs_root`, /proc under `proc_root`.
pub fn snapshot(sysfs_root: &Path, proc_root: &Path, kind: TransportKind, end: &Endpoint) -> Vec<Counters> {
    let mut out = Vec::new();
    match kind {
        TransportKind::Verbs => {
            if let (Some(dev), Some(port)) = (&end.device, end.port) {
                out.push((format!("{dev} port {port}"), port_counters(sysfs_root, dev, port)));
                if let Some(ifname) = roce_interface(sysfs_root, dev, port) {
                    let downs = link_downs(sysfs_root, &ifname);
                    if !downs.is_empty() {
                        out.push((ifname, downs));
                    }
                }
            }
        }
        TransportKind::Tcp => {
            if let Some(i) = end.address.and_then(|ip| crate::netif::interface_for(sysfs_root, ip)) {
                let values = interface_counters(sysfs_root, &i.name);
                out.push((i.name, values));
            }
        }
    }
    let mut tcp = BTreeMap::new();
    for f in ["net/snmp", "net/netstat"] {
        if let Ok(text) = std::fs::read_to_string(proc_root.join(f)) {
            tcp.extend(proc_net_counters(&text, TCP_KEPT));
        }
    }
    if !tcp.is_empty() {
        out.push(("tcp".to_string(), tcp));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// /proc/net/snmp and /proc/net/netstat as Linux 6.1 writes them (cut to the lines read).
    #[test]
    fn tcp_counters_from_proc() {
        let snmp = "Ip: Forwarding DefaultTTL InReceives\nIp: 1 64 12345\n\
                    Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n\
                    Tcp: 1 200 120000 -1 2044 1006 3 40 12 1874431 2089355 317 2 101 0\n\
                    Udp: InDatagrams NoPorts\nUdp: 5 0\n";
        let got = proc_net_counters(snmp, TCP_KEPT);
        assert_eq!(
            got,
            [
                ("InCsumErrors".to_string(), 0),
                ("InErrs".to_string(), 2),
                ("RetransSegs".to_string(), 317)
            ]
            .into()
        );
        let netstat = "TcpExt: SyncookiesSent TCPTimeouts TCPLostRetransmit\nTcpExt: 0 9 4\n\
                       IpExt: InNoRoutes\nIpExt: 0\n";
        assert_eq!(
            proc_net_counters(netstat, TCP_KEPT),
            [("TCPLostRetransmit".to_string(), 4), ("TCPTimeouts".to_string(), 9)].into()
        );
        assert!(proc_net_counters("garbage\n:\nTcp: 1 2\n", TCP_KEPT).is_empty());
    }

    #[test]
    fn an_interfaces_statistics_and_its_link_downs_from_sysfs() {
        let root = std::env::temp_dir().join(format!("meshrun-if-counters-{}", std::process::id()));
        let eth0 = root.join("class/net/eth0");
        let eth1 = root.join("class/net/eth1");
        for d in [&eth0, &eth1] {
            std::fs::create_dir_all(d.join("statistics")).unwrap();
            std::fs::write(d.join("statistics/rx_bytes"), "4096\n").unwrap();
            std::fs::write(d.join("carrier_changes"), "5\n").unwrap();
        }
        // Linux 4.16+: the downs counted apart; an older kernel has carrier_changes only.
        std::fs::write(eth0.join("carrier_down_count"), "2\n").unwrap();
        std::fs::write(eth0.join("carrier_up_count"), "3\n").unwrap();
        let new = interface_counters(&root, "eth0");
        let old = interface_counters(&root, "eth1");
        let none = interface_counters(&root, "eth9");
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            new,
            [("carrier_down_count".to_string(), 2), ("rx_bytes".to_string(), 4096)].into()
        );
        assert_eq!(
            old,
            [("carrier_changes".to_string(), 5), ("rx_bytes".to_string(), 4096)].into()
        );
        assert!(none.is_empty());
    }

    #[test]
    fn an_rdma_ports_counters_from_sysfs() {
        let root = std::env::temp_dir().join(format!("meshrun-counters-{}", std::process::id()));
        let p = root.join("class/infiniband/mlx5_0/ports/1");
        std::fs::create_dir_all(p.join("counters")).unwrap();
        std::fs::create_dir_all(p.join("hw_counters")).unwrap();
        std::fs::write(p.join("counters/symbol_error"), "1204\n").unwrap();
        std::fs::write(p.join("counters/port_xmit_data"), "88\n").unwrap();
        std::fs::write(p.join("hw_counters/out_of_sequence"), "3\n").unwrap();
        std::fs::write(p.join("hw_counters/not_a_number"), "N/A\n").unwrap();
        let end = Endpoint {
            device: Some("mlx5_0".into()),
            port: Some(1),
            ..Endpoint::default()
        };
        let got = snapshot(&root, &root.join("no-proc"), TransportKind::Verbs, &end);
        // InfiniBand: no interface under the port, so no link-down source beside it.
        std::fs::write(p.join("link_layer"), "InfiniBand\n").unwrap();
        assert_eq!(roce_interface(&root, "mlx5_0", 1), None);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "mlx5_0 port 1");
        assert_eq!(
            got[0].1,
            [
                ("out_of_sequence".to_string(), 3),
                ("port_xmit_data".to_string(), 88),
                ("symbol_error".to_string(), 1204)
            ]
            .into()
        );
    }

    /// RoCE (here Soft-RoCE's layout: no PCI device, the interface named by GID 0): the port's
    /// counters, then its interface's link downs as a source of their own.
    #[test]
    fn a_roce_ports_interface_link_downs_beside_its_counters() {
        let root = std::env::temp_dir().join(format!("meshrun-roce-counters-{}", std::process::id()));
        let p = root.join("class/infiniband/rxe0/ports/1");
        std::fs::create_dir_all(p.join("hw_counters")).unwrap();
        std::fs::create_dir_all(p.join("gid_attrs/ndevs")).unwrap();
        std::fs::write(p.join("link_layer"), "Ethernet\n").unwrap();
        std::fs::write(p.join("hw_counters/rcvd_seq_err"), "7\n").unwrap();
        std::fs::write(p.join("gid_attrs/ndevs/0"), "eth2\n").unwrap();
        let eth2 = root.join("class/net/eth2");
        std::fs::create_dir_all(eth2.join("statistics")).unwrap();
        std::fs::write(eth2.join("statistics/rx_dropped"), "40\n").unwrap();
        std::fs::write(eth2.join("carrier_down_count"), "1\n").unwrap();
        // mlx5's layout: no GID table entry read, the PCI function's interface instead.
        let m = root.join("class/infiniband/mlx5_1");
        std::fs::create_dir_all(m.join("ports/1")).unwrap();
        std::fs::write(m.join("ports/1/link_layer"), "Ethernet\n").unwrap();
        std::fs::create_dir_all(m.join("device/net/enp65s0f1np1")).unwrap();
        let end = Endpoint {
            device: Some("rxe0".into()),
            port: Some(1),
            ..Endpoint::default()
        };
        let got = snapshot(&root, &root.join("no-proc"), TransportKind::Verbs, &end);
        let mlx = roce_interface(&root, "mlx5_1", 1);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            got,
            vec![
                ("rxe0 port 1".to_string(), [("rcvd_seq_err".to_string(), 7)].into()),
                // Only the link downs: the interface's own statistics do not count RoCE traffic.
                ("eth2".to_string(), [("carrier_down_count".to_string(), 1)].into()),
            ]
        );
        assert_eq!(mlx.as_deref(), Some("enp65s0f1np1"));
    }
}
