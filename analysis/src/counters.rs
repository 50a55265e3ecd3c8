//! Port and interface counters as evidence: what each rank's NIC counted between a snapshot
//! before the traffic and one after, which of those counters say something went wrong, and the
//! lines that put them beside a blamed part (or name a part that counted errors yet was not
//! blamed).
//!
//! Sources, as the rank side reads them (`ranks::counters`): an RDMA port (`mlx5_0 port 1`: the
//! InfiniBand port counters and the device's `hw_counters`, RoCE and Soft-RoCE), a network
//! interface (`eth0`: `/sys/class/net/eth0/statistics`), and the host's TCP (`tcp`: from
//! `/proc/net/snmp` and `/proc/net/netstat`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One source's counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub source: String,
    pub values: BTreeMap<String, u64>,
}

/// What one source counted during the run, from one rank of the ranks that share it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    pub host: String,
    pub source: String,
    /// The ranks whose traffic this source carried.
    pub ranks: Vec<usize>,
    /// Every counter that moved, by how much (a counter that went down was reset: left out).
    pub deltas: BTreeMap<String, u64>,
}

/// What a counter says when it moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meaning {
    /// Bytes and packets: the traffic itself.
    Traffic,
    /// Congestion or recovery a healthy fabric also shows under load (TCP retransmits, IB
    /// transmit waits, RoCE congestion notifications): evidence beside a blamed part, no
    /// finding on its own.
    Congestion,
    /// An error a healthy link does not count: symbol errors, CRC errors, drops, sequence
    /// errors, timeouts.
    Error,
}

/// IB port counters that count traffic (`/sys/class/infiniband/*/ports/*/counters`).
const IB_TRAFFIC: &[&str] = &[
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "unicast_xmit_packets",
    "unicast_rcv_packets",
    "multicast_xmit_packets",
    "multicast_rcv_packets",
];
/// `hw_counters` of mlx5 and rxe that count traffic, time, or the flushes of a queue pair's
/// normal teardown.
const HW_TRAFFIC: &[&str] = &[
    "lifespan",
    "sent_pkts",
    "rcvd_pkts",
    "rdma_sends",
    "rdma_recvs",
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "rx_dct_connect",
    "req_cqe_flush_error",
    "resp_cqe_flush_error",
];
/// Counters of congestion and recovery, whatever the source.
const CONGESTION: &[&str] = &[
    "port_xmit_wait",
    "np_cnp_sent",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "np_ecn_marked_roce_packets",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_adp_retrans",
    "ack_deferred",
    "RetransSegs",
    "TCPTimeouts",
    "TCPLostRetransmit",
];

/// What counter `name` of source `source` says when it moves.
pub fn meaning(source: &str, name: &str) -> Meaning {
    if CONGESTION.contains(&name) {
        return Meaning::Congestion;
    }
    if source == "tcp" {
        // InErrs, InCsumErrors: segments that arrived damaged.
        return Meaning::Error;
    }
    if IB_TRAFFIC.contains(&name) || HW_TRAFFIC.contains(&name) {
        return Meaning::Traffic;
    }
    // Interface statistics: bytes, packets, multicast and compression counts are traffic; the
    // rest (errors, drops, fifo, crc, frame, missed, carrier, collisions) are errors.
    let netdev_traffic = ["rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "multicast"];
    if netdev_traffic.contains(&name) || name.ends_with("_compressed") {
        return Meaning::Traffic;
    }
    Meaning::Error
}

/// The counters of `after` that moved since `before`, source by source (a source missing from
/// `before` is left out: nothing to compare with).
pub fn deltas(before: &[Snapshot], after: &[Snapshot]) -> Vec<(String, BTreeMap<String, u64>)> {
    after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.source == a.source)?;
            let moved: BTreeMap<String, u64> = a
                .values
                .iter()
                .filter_map(|(k, &v)| {
                    let was = *b.values.get(k)?;
                    (v > was).then(|| (k.clone(), v - was))
                })
                .collect();
            Some((a.source.clone(), moved))
        })
        .collect()
}

/// Every rank's deltas (rank, host, source, deltas) merged to one entry per (host, source): the
/// ranks of a host share its NIC's and its TCP's counters, so the first rank's figures stand
/// for all of them.
pub fn per_source(all: Vec<(usize, String, String, BTreeMap<String, u64>)>) -> Vec<Moved> {
    let mut out: Vec<Moved> = Vec::new();
    for (rank, host, source, deltas) in all {
        match out.iter_mut().find(|m| m.host == host && m.source == source) {
            Some(m) => m.ranks.push(rank),
            None => out.push(Moved {
                host,
                source,
                ranks: vec![rank],
                deltas,
            }),
        }
    }
    out
}

/// What a network interface's link counter says in words (`class/net/IF/carrier_down_count`,
/// or `carrier_changes` on kernels before 4.16, which counts the ups as well): a link that
/// dropped and came back is what stalls a job later, whatever the bandwidth read.
fn link_event(name: &str) -> &'static str {
    match name {
        "carrier_down_count" => " (the link went down)",
        "carrier_changes" => " (the link went down or up)",
        _ => "",
    }
}

/// `1,204`: thousands separated, as counters are read.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Moved {
    /// The moved counters whose meaning is one of `which`, in a line:
    /// `h4 mlx5_0 port 1: symbol_error +1,204, port_rcv_errors +37`; None when none moved.
    pub fn line(&self, which: &[Meaning]) -> Option<String> {
        let parts: Vec<String> = self
            .deltas
            .iter()
            .filter(|(k, _)| which.contains(&meaning(&self.source, k)))
            .map(|(k, v)| format!("{k} +{}{}", grouped(*v), link_event(k)))
            .collect();
        (!parts.is_empty()).then(|| format!("{} {}: {}", self.host, self.source, parts.join(", ")))
    }

    /// Whether an error counter moved.
    pub fn counted_errors(&self) -> bool {
        self.deltas.keys().any(|k| meaning(&self.source, k) == Meaning::Error)
    }
}

/// The evidence lines for a part whose traffic was carried by `ranks`: errors and congestion
/// counted by the sources of those ranks.
pub fn evidence(moved: &[Moved], ranks: &[usize]) -> Vec<String> {
    moved
        .iter()
        .filter(|m| m.ranks.iter().any(|r| ranks.contains(r)))
        .filter_map(|m| m.line(&[Meaning::Error, Meaning::Congestion]))
        .collect()
}

/// Findings for sources that counted errors although none of their ranks is in `blamed_ranks`:
/// a link that corrects its errors can still be fast enough to pass.
pub fn unblamed(moved: &[Moved], blamed_ranks: &[usize]) -> Vec<String> {
    moved
        .iter()
        .filter(|m| m.counted_errors() && !m.ranks.iter().any(|r| blamed_ranks.contains(r)))
        .filter_map(|m| m.line(&[Meaning::Error]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(source: &str, kv: &[(&str, u64)]) -> Snapshot {
        Snapshot {
            source: source.into(),
            values: kv.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    #[test]
    fn deltas_keep_what_moved_and_drop_resets() {
        let before = [
            snap(
                "mlx5_0 port 1",
                &[("symbol_error", 10), ("port_xmit_data", 5), ("link_downed", 3)],
            ),
            snap("tcp", &[("RetransSegs", 100)]),
        ];
        let after = [
            snap(
                "mlx5_0 port 1",
                &[("symbol_error", 1214), ("port_xmit_data", 900), ("link_downed", 0)],
            ),
            snap("tcp", &[("RetransSegs", 100)]),
            snap("eth9", &[("rx_errors", 4)]),
        ];
        let d = deltas(&before, &after);
        assert_eq!(d.len(), 2, "eth9 has no snapshot before: {d:?}");
        assert_eq!(
            d[0].1,
            [("port_xmit_data".to_string(), 895), ("symbol_error".to_string(), 1204)].into()
        );
        assert!(d[1].1.is_empty());
    }

    #[test]
    fn meanings() {
        assert_eq!(meaning("mlx5_0 port 1", "symbol_error"), Meaning::Error);
        assert_eq!(meaning("mlx5_0 port 1", "port_rcv_errors"), Meaning::Error);
        assert_eq!(meaning("mlx5_0 port 1", "port_xmit_data"), Meaning::Traffic);
        assert_eq!(meaning("mlx5_0 port 1", "port_xmit_wait"), Meaning::Congestion);
        assert_eq!(meaning("rxe0 port 1", "out_of_seq_request"), Meaning::Error);
        assert_eq!(meaning("rxe0 port 1", "sent_pkts"), Meaning::Traffic);
        assert_eq!(meaning("mlx5_0 port 1", "np_cnp_sent"), Meaning::Congestion);
        assert_eq!(meaning("eth0", "rx_dropped"), Meaning::Error);
        assert_eq!(meaning("eth0", "rx_crc_errors"), Meaning::Error);
        assert_eq!(meaning("eth0", "tx_bytes"), Meaning::Traffic);
        assert_eq!(meaning("tcp", "RetransSegs"), Meaning::Congestion);
        assert_eq!(meaning("tcp", "InErrs"), Meaning::Error);
        assert_eq!(meaning("eth0", "carrier_down_count"), Meaning::Error);
        assert_eq!(meaning("eth0", "carrier_changes"), Meaning::Error);
    }

    #[test]
    fn a_link_that_went_down_is_said_in_words() {
        let all = vec![
            moved(
                "h3",
                "eth0",
                &[3],
                &[("carrier_down_count", 2), ("rx_bytes", 9_000_000)],
            ),
            moved("h5", "eth1", &[5], &[("carrier_changes", 4)]),
        ];
        assert_eq!(
            unblamed(&all, &[]),
            [
                "h3 eth0: carrier_down_count +2 (the link went down)",
                "h5 eth1: carrier_changes +4 (the link went down or up)"
            ]
        );
        assert_eq!(
            evidence(&all, &[3]),
            ["h3 eth0: carrier_down_count +2 (the link went down)"]
        );
    }

    fn moved(host: &str, source: &str, ranks: &[usize], kv: &[(&str, u64)]) -> Moved {
        Moved {
            host: host.into(),
            source: source.into(),
            ranks: ranks.to_vec(),
            deltas: kv.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    #[test]
    fn evidence_beside_the_blamed_part_and_errors_elsewhere_as_findings() {
        let all = vec![
            moved(
                "h4",
                "mlx5_0 port 1",
                &[4, 5],
                &[
                    ("symbol_error", 1204),
                    ("port_rcv_errors", 37),
                    ("port_xmit_data", 9_000_000),
                ],
            ),
            moved("h4", "tcp", &[4, 5], &[("RetransSegs", 12)]),
            moved("h2", "mlx5_0 port 1", &[2, 3], &[("port_xmit_data", 9_000_000)]),
            moved(
                "h7",
                "mlx5_0 port 1",
                &[7],
                &[("link_error_recovery", 2), ("port_xmit_wait", 50)],
            ),
        ];
        // A link h2 <-> h4 blamed: ranks 2-5.
        assert_eq!(
            evidence(&all, &[2, 3, 4, 5]),
            [
                "h4 mlx5_0 port 1: port_rcv_errors +37, symbol_error +1,204",
                "h4 tcp: RetransSegs +12"
            ]
        );
        // h7 counted errors and was not blamed: a finding, congestion left out.
        assert_eq!(
            unblamed(&all, &[2, 3, 4, 5]),
            ["h7 mlx5_0 port 1: link_error_recovery +2"]
        );
        assert!(unblamed(&all, &[2, 3, 4, 5, 7]).is_empty());
    }

    #[test]
    fn one_entry_per_host_and_source() {
        let d = |n: u64| -> BTreeMap<String, u64> { [("rx_dropped".to_string(), n)].into() };
        let m = per_source(vec![
            (0, "a".into(), "eth0".into(), d(1)),
            (1, "a".into(), "eth0".into(), d(1)),
            (2, "b".into(), "eth0".into(), d(2)),
        ]);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].ranks, [0, 1]);
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(12), "12");
    }
}
