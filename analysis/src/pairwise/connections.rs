//! `-q N` over TCP: a bandwidth test's N connections, each from its own source port so that an
//! ECMP hash of the 5-tuple may send each its own way through a multipath fabric; the test's bytes
//! spread over them, each one's own Gb/s, and the path its 5-tuple took where it was traced
//! (`ranks::trace`, by the sending rank, right after the measurement).
//!
//! What is kept is per direction and per connection, its figure beside its path, so that a later
//! verdict can tell a slow cable (every connection through it slow, whichever pair) from a slow
//! host link (every connection of the host slow, whichever path). The verdict does not read it
//! yet: a test's figure is still its bytes over its time, as with one connection.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::router_names::{named, RouterNames};
use super::{Measurement, PairwiseOutcome};

/// One connection of a test: its 5-tuple's two ends, the bytes it carried, its own Gb/s (its bytes
/// over its own time, from the test's start to the receiver's acknowledgement of its last byte),
/// and its path (None where tracing was off, `--no-trace`, or not asked for at this size).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Connection {
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub bytes: u64,
    pub gbps: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<Path>,
}

/// The path a connection's 5-tuple took, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Path {
    /// The routers in order, one per TTL (`None`: no answer at that TTL), and whether a probe
    /// reached the far end.
    Traced { hops: Vec<Option<IpAddr>>, reached: bool },
    /// Why it was not traced: no CAP_NET_RAW, a socket error, no IPv4 address.
    Untraced { reason: String },
}

impl Path {
    /// The routers' addresses, as the text report writes them: `10.80.0.1 > * > 10.80.2.1`,
    /// `> ...` after the last when no probe reached the far end.
    pub fn phrase(&self) -> String {
        self.phrase_named(&RouterNames::new())
    }

    /// [`Path::phrase`] with each router that has a name written `name (address)`, as traceroute
    /// does: `leaf0 (10.80.0.1) > spine1-leaf0 (10.101.0.2) > ...`.
    pub fn phrase_named(&self, names: &RouterNames) -> String {
        match self {
            Path::Traced { hops, reached } => {
                let mut s: Vec<String> = hops
                    .iter()
                    .map(|h| h.map_or_else(|| "*".to_string(), |a| named(&a, names)))
                    .collect();
                if !reached {
                    s.push("...".into());
                }
                if s.is_empty() {
                    "direct".into()
                } else {
                    s.join(" > ")
                }
            }
            Path::Untraced { reason } => format!("not traced: {reason}"),
        }
    }
}

/// The distinct traced paths of one test's connections, in the order first taken, each with the
/// connections (their places in `conns`, from 0) that took it. Untraced connections are left out.
pub fn distinct_paths(conns: &[Connection]) -> Vec<(&Path, Vec<usize>)> {
    let mut out: Vec<(&Path, Vec<usize>)> = Vec::new();
    for (k, c) in conns.iter().enumerate() {
        let Some(p @ Path::Traced { .. }) = &c.path else {
            continue;
        };
        match out.iter_mut().find(|(q, _)| *q == p) {
            Some((_, ks)) => ks.push(k),
            None => out.push((p, vec![k])),
        }
    }
    out
}

/// Why connections went untraced, each reason once with how many of the connections of `ms` it
/// kept from being traced, most first.
pub fn untraced(ms: &[Measurement]) -> Vec<(&str, usize)> {
    let mut out: Vec<(&str, usize)> = Vec::new();
    for c in ms.iter().flat_map(|m| &m.connections) {
        if let Some(Path::Untraced { reason }) = &c.path {
            match out.iter_mut().find(|(r, _)| *r == reason.as_str()) {
                Some((_, n)) => *n += 1,
                None => out.push((reason, 1)),
            }
        }
    }
    out.sort_by_key(|x| std::cmp::Reverse(x.1));
    out
}

/// Every distinct router address a traced connection of the run crossed: its first pass, its
/// retests and each repeated pass. What rank 0 asks the resolver for (none: nothing to ask).
pub fn traced_hops(o: &PairwiseOutcome) -> BTreeSet<IpAddr> {
    let passes = o.repeats.iter().map(|p| &p.outcome).chain(std::iter::once(o));
    passes
        .flat_map(|p| p.measurements.iter().chain(&p.retests))
        .flat_map(|m| &m.connections)
        .filter_map(|c| match &c.path {
            Some(Path::Traced { hops, .. }) => Some(hops.iter().flatten().copied()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests;
