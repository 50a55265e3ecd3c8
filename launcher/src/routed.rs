//! Pairwise's default on a routed fabric: where ranks reach each other through a router, flows
//! between two hosts may take any of several equal-cost paths (a leaf-spine with ECMP), and one
//! connection per test sees one of them. There a bandwidth test over TCP opens [`ROUTED_QPS`]
//! connections unless `-q` says otherwise, so a slow cable shows as slow connections among fine
//! ones between the same hosts, each traced (issue 57), instead of a scatter of slow host pairs.

use std::net::IpAddr;

use analysis::pairwise::{Amount, PairwiseConfig, TestKind};
use ranks::route::{self, NextHop};

/// Connections per test on a routed fabric. With k equal-cost paths all four connections of one
/// direction hash onto one path with chance k^-3 (1 in 8 for two spines), so across the pairs
/// of a job every path is seen many times over; it is what the multipath accuracy rows judge
/// (`bench/verdict-accuracy --multipath-only`).
pub const ROUTED_QPS: usize = 4;

/// Whether the default applies: a bandwidth test over TCP, one direction at a time, of `-n`
/// messages (a test's own connections count messages, not `-D` seconds), with `-q` (and
/// `MESHRUN_QP`) not given.
pub fn applies(cfg: &PairwiseConfig, qps_given: bool, tcp: bool) -> bool {
    tcp && !qps_given
        && cfg.qps <= 1
        && cfg.test == TestKind::Bw
        && !cfg.bidirectional
        && matches!(cfg.amount, Amount::Iterations(_))
}

/// One rank's finding, as gathered: whether a peer is behind a router, which, and the router.
const RECORD: usize = 1 + 4 + 1 + 16;

/// This rank's first peer reached through a router, with the router, from the kernel's routes
/// to `peers` (rank, address); None where every peer is local or on a link, or the kernel could
/// not be asked (then the default stays one connection).
pub fn first_routed(peers: &[(usize, IpAddr)]) -> Option<(usize, IpAddr)> {
    let addrs: Vec<IpAddr> = peers.iter().map(|p| p.1).collect();
    let hops = route::next_hops(&addrs).ok()?;
    peers.iter().zip(hops).find_map(|(&(rank, _), hop)| match hop {
        NextHop::Gateway(g) => Some((rank, g)),
        NextHop::Local | NextHop::OnLink => None,
    })
}

/// `found` as this rank's gathered record.
pub fn record(found: Option<(usize, IpAddr)>) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    if let Some((peer, gw)) = found {
        r[0] = 1;
        r[1..5].copy_from_slice(&(peer as u32).to_le_bytes());
        match gw {
            IpAddr::V4(a) => {
                r[5] = 4;
                r[6..10].copy_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                r[5] = 6;
                r[6..22].copy_from_slice(&a.octets());
            }
        }
    }
    r
}

/// The first rank's finding in every rank's gathered records: (rank, peer, router).
pub fn first_found(all: &[u8]) -> Option<(usize, usize, IpAddr)> {
    all.chunks_exact(RECORD).enumerate().find_map(|(rank, r)| {
        if r[0] != 1 {
            return None;
        }
        let peer = u32::from_le_bytes([r[1], r[2], r[3], r[4]]) as usize;
        let gw = match r[5] {
            4 => IpAddr::from(<[u8; 4]>::try_from(&r[6..10]).ok()?),
            6 => IpAddr::from(<[u8; 16]>::try_from(&r[6..22]).ok()?),
            _ => return None,
        };
        Some((rank, peer, gw))
    })
}

/// The run header's note: why there are [`ROUTED_QPS`] connections per test.
pub fn note(hosts: &[String], (rank, peer, gw): (usize, usize, IpAddr)) -> String {
    let host = |r: usize| hosts.get(r).map_or("?", String::as_str);
    format!(
        "-q {ROUTED_QPS} by default on a routed fabric ({} reaches {} through router {gw}): each test's \
         connections spread over the equal-cost paths",
        host(rank),
        host(peer)
    )
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;
    use analysis::pairwise::OpName;

    #[test]
    fn records_round_trip_and_the_first_finding_wins() {
        let v4 = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1));
        let v6 = IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1));
        let mut all = Vec::new();
        all.extend(record(None));
        all.extend(record(Some((5, v6))));
        all.extend(record(Some((0, v4))));
        assert_eq!(first_found(&all), Some((1, 5, v6)));
        assert_eq!(first_found(&[record(None), record(None)].concat()), None);
        let hosts: Vec<String> = (1..=6).map(|i| format!("h{i}")).collect();
        assert_eq!(
            note(&hosts, (2, 0, v4)),
            "-q 4 by default on a routed fabric (h3 reaches h1 through router 10.0.1.1): each test's \
             connections spread over the equal-cost paths"
        );
    }

    #[test]
    fn the_default_is_for_one_way_bandwidth_over_tcp_without_q() {
        let bw = PairwiseConfig::synthetic(OpName::Send, 1 << 20, 10);
        assert_eq!(bw.test, TestKind::Bw);
        assert!(applies(&bw, false, true));
        assert!(!applies(&bw, true, true), "-q given");
        assert!(!applies(&bw, false, false), "over RDMA");
        let lat = PairwiseConfig {
            test: TestKind::Lat,
            ..PairwiseConfig::synthetic(OpName::Send, 1 << 20, 10)
        };
        assert!(!applies(&lat, false, true), "latency");
        let bidir = PairwiseConfig {
            bidirectional: true,
            ..PairwiseConfig::synthetic(OpName::Send, 1 << 20, 10)
        };
        assert!(!applies(&bidir, false, true), "-b");
        // -D: a test's own TCP connections count messages, so a timed run keeps one.
        let timed = PairwiseConfig {
            amount: Amount::Duration(5.0),
            ..PairwiseConfig::synthetic(OpName::Send, 1 << 20, 10)
        };
        assert!(!applies(&timed, false, true), "-D");
    }

    /// The kernel here: loopback is no router.
    #[test]
    fn loopback_peers_are_not_routed() {
        assert_eq!(first_routed(&[(1, IpAddr::V4(Ipv4Addr::LOCALHOST))]), None);
    }
}
