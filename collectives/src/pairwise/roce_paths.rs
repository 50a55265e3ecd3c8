//! `-q N` over RoCE v2: each of a test's queue pairs as a connection of the report (its UDP
//! source port, from the flow label it carries, to 4791; its Gb/s), and the path its packets
//! take, traced with UDP probes of those ports ([`ranks::trace::Probe::RoceV2`]) by the rank
//! whose queue pairs send the data, right after its measurement in the first pass. The queue
//! pairs are traced at once (each trace has its own sockets, its probes their own ports), all
//! within [`TRACE_BUDGET`](super::streams::TRACE_BUDGET). A RoCE NIC never answers a probe, so a
//! trace ends at the first silent TTL after the last router; a peer the kernel reaches on a link
//! of its own (no router between, [`ranks::route`]) is not probed: its path has no hop.

use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use analysis::pairwise::connections::{Connection, Path};
use ranks::route::{self, NextHop};
use ranks::trace::{self, Probe, TraceOptions, ROCE_V2_PORT};
use ranks::transport::RoceFlows;

// The far end never answers, so a trace that reached its last router reads as not reached:
// its routers are the path.
use super::streams::{traced_path, TRACE_BUDGET};

/// How a queue pair's path is probed: as a TCP connection's, but one silent TTL ends it (the far
/// end is a RoCE NIC, which drops the probes).
fn trace_options() -> TraceOptions {
    TraceOptions {
        max_hops: 8,
        probe_timeout: Duration::from_millis(250),
        attempts: 2,
        gap_limit: 1,
        total: TRACE_BUDGET,
    }
}

/// The test's queue pairs as connections: queue pair k from `flows.sports[k]`, `bytes` each, at
/// `gbps[k]`, each with its path where `traced`.
pub fn connections(flows: &RoceFlows, bytes: u64, gbps: &[f64], traced: bool) -> Vec<Connection> {
    let to = SocketAddr::V4(SocketAddrV4::new(flows.remote, ROCE_V2_PORT));
    let paths = if traced {
        paths(flows)
    } else {
        vec![None; flows.sports.len()]
    };
    flows
        .sports
        .iter()
        .zip(gbps)
        .zip(paths)
        .map(|((&sport, &g), path)| Connection {
            from: SocketAddr::V4(SocketAddrV4::new(flows.local, sport)),
            to,
            bytes,
            gbps: g,
            path,
        })
        .collect()
}

/// Each queue pair's path: no hop where the kernel reaches the peer on a link, else traced.
fn paths(flows: &RoceFlows) -> Vec<Option<Path>> {
    let on_link = matches!(
        route::next_hops(&[IpAddr::V4(flows.remote)]).as_deref(),
        Ok([NextHop::OnLink | NextHop::Local])
    );
    if on_link {
        let direct = Path::Traced {
            hops: Vec::new(),
            reached: true,
        };
        return vec![Some(direct); flows.sports.len()];
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = flows
            .sports
            .iter()
            .map(|&sport| {
                s.spawn(move || {
                    let c = trace::Connection {
                        local: SocketAddrV4::new(flows.local, sport),
                        remote: SocketAddrV4::new(flows.remote, ROCE_V2_PORT),
                    };
                    traced_path(trace::trace_as(c, Probe::RoceV2, &trace_options()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                Some(h.join().unwrap_or_else(|_| Path::Untraced {
                    reason: "the trace's thread panicked".into(),
                }))
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn each_queue_pair_is_a_connection_from_its_source_port() {
        let flows = RoceFlows {
            local: Ipv4Addr::new(10, 80, 0, 10),
            remote: Ipv4Addr::new(10, 80, 2, 10),
            sports: vec![0xc001, 0xc002],
        };
        let c = connections(&flows, 1 << 20, &[12.5, 6.0], false);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].from, "10.80.0.10:49153".parse::<SocketAddr>().unwrap());
        assert_eq!(c[1].from, "10.80.0.10:49154".parse::<SocketAddr>().unwrap());
        assert!(c
            .iter()
            .all(|c| c.to == "10.80.2.10:4791".parse::<SocketAddr>().unwrap()));
        assert_eq!((c[0].gbps, c[1].gbps, c[0].bytes), (12.5, 6.0, 1 << 20));
        assert!(c.iter().all(|c| c.path.is_none()), "not traced when not asked");
    }

    /// The kernel here: a peer at this host's own loopback address is not probed.
    #[test]
    fn a_peer_without_a_router_between_has_a_path_of_no_hop() {
        let flows = RoceFlows {
            local: Ipv4Addr::LOCALHOST,
            remote: Ipv4Addr::LOCALHOST,
            sports: vec![0xc001, 0xc002, 0xc003],
        };
        let c = connections(&flows, 8, &[1.0, 1.0, 1.0], true);
        for conn in &c {
            assert_eq!(
                conn.path,
                Some(Path::Traced {
                    hops: Vec::new(),
                    reached: true
                })
            );
        }
    }
}
