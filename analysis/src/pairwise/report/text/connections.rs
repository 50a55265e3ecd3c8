//! `-q N` over TCP (or RoCE v2): each direction's connections (queue pairs), by source port, with their own Gb/s; where a
//! direction's connections took different paths, a letter per connection and a line naming each
//! path's routers; why paths were not traced, once for the run.

use std::fmt::Write as _;

use crate::pairwise::connections::{distinct_paths, untraced};
use crate::pairwise::PairwiseOutcome;

/// The section, after the rows (nothing where no test had several connections).
pub(super) fn connections(s: &mut String, o: &PairwiseOutcome) {
    let with: Vec<_> = o.measurements.iter().filter(|m| !m.connections.is_empty()).collect();
    let Some(n) = with.iter().map(|m| m.connections.len()).max() else {
        return;
    };
    // Over RDMA the connections are RoCE v2 queue pairs (UDP to 4791 from their flow labels' ports).
    let what = if o.transport == "tcp" {
        "TCP connections per test, each from its own source port"
    } else {
        "RoCE v2 queue pairs per test, each from the UDP source port of its flow label"
    };
    let _ = writeln!(
        s,
        "# Connections: {n} {what}; each one's Gb/s by its source port, and where a test's connections took \
         different paths, which path (letters) and its routers"
    );
    let width = super::host_width(o);
    for m in with {
        let paths = distinct_paths(&m.connections);
        let letter = |k: usize| -> String {
            if paths.len() < 2 {
                return String::new();
            }
            paths
                .iter()
                .position(|(_, ks)| ks.contains(&k))
                .map_or(" -".into(), |p| format!(" {}", path_letter(p)))
        };
        let each: Vec<String> = m
            .connections
            .iter()
            .enumerate()
            .map(|(k, c)| format!("{} {:.2}{}", c.from.port(), c.gbps, letter(k)))
            .collect();
        let _ = writeln!(
            s,
            "# {:>4} -> {:<4} {:>width$} -> {:<width$} {:>8}B: {}",
            m.src,
            m.dst,
            o.hosts[m.src],
            o.hosts[m.dst],
            m.bytes,
            each.join("  ")
        );
        if paths.len() >= 2 {
            let named: Vec<String> = paths
                .iter()
                .enumerate()
                .map(|(p, (path, _))| format!("{}: {}", path_letter(p), path.phrase_named(&o.router_names)))
                .collect();
            let _ = writeln!(s, "#   {} paths: {}", paths.len(), named.join("; "));
        }
    }
    let total: usize = o.measurements.iter().map(|m| m.connections.len()).sum();
    for (reason, k) in untraced(&o.measurements) {
        let _ = writeln!(s, "# Paths not traced ({k} of {total} connections): {reason}");
    }
}

/// Path p's letter: A, B, .. Z, then AA, AB, ...
fn path_letter(p: usize) -> String {
    let letter = |i: usize| char::from(b'A' + (i % 26) as u8);
    if p < 26 {
        letter(p).to_string()
    } else {
        format!("{}{}", letter(p / 26 - 1), letter(p))
    }
}

/// The fabric links the slow connections share (`cables`), one line each: where they arrive,
/// from which router, their median against the others'.
pub(super) fn slow_links(s: &mut String, o: &PairwiseOutcome) {
    for c in &o.cables {
        let from: Vec<String> = c.link.from.iter().map(|e| e.named(&o.router_names)).collect();
        // From InfiniBand routes the cable by both its switch ports, its directions; traced, the
        // interface it arrives on and the routers before it, its connections.
        let (head, unit, hops) = if c.link.routed() {
            (
                format!("{} -> {} (the subnet manager's routes)", from.join(", "), c.link.to),
                "direction(s)",
                "switch(es)",
            )
        } else {
            (
                format!("into {} from {}", c.link.to.named(&o.router_names), from.join(", ")),
                "connection(s)",
                "router(s)",
            )
        };
        let _ = writeln!(
            s,
            "# SLOW FABRIC LINK: {head}: its {} {unit} at a median {:.4} Gb/sec against {:.4} for {} {unit} that \
             left the same {hops} by another link or reached the same hosts by another ({:.2} of them, rank test \
             z {:.1})",
            c.connections,
            c.median,
            c.others_median,
            c.others,
            c.median / c.others_median,
            c.z
        );
    }
    let fabric = &o.verdict.fabric;
    if !fabric.is_empty() {
        let pairs: Vec<String> = fabric
            .iter()
            .map(|p| format!("{}-{} ({} <-> {})", p.a, p.b, p.host_a, p.host_b))
            .collect();
        let _ = writeln!(
            s,
            "#   slow through the link(s) above, not blamed on their hosts: {} rank pair(s): {}",
            fabric.len(),
            pairs.join(", ")
        );
    }
    let unrouted = &o.verdict.unrouted;
    if !unrouted.is_empty() {
        let host = |r: usize| o.hosts.get(r).map_or("?", String::as_str);
        let mut named: Vec<String> = unrouted
            .iter()
            .take(UNROUTED_NAMED)
            .map(|&(a, b)| format!("{a}->{b} ({} -> {})", host(a), host(b)))
            .collect();
        if unrouted.len() > UNROUTED_NAMED {
            named.push(format!("and {} more", unrouted.len() - UNROUTED_NAMED));
        }
        let _ = writeln!(
            s,
            "# No route given for {} direction(s) between hosts (--topology's routes name none, and none was \
             traced): {}; left out of the search for slow fabric links, judged as host pairs",
            unrouted.len(),
            named.join(", ")
        );
    }
}

/// How many directions without a route the text names before counting the rest.
const UNROUTED_NAMED: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pairwise::router_names::RouterNames;

    /// The leaf-spine bed with its leaf0-spine1 cable at 60 Mbit/s (`-q 4`, traced), read back.
    fn slowed_bed() -> PairwiseOutcome {
        let json = include_str!(
            "../../../../../docs/evidence/leafspine-paths-2026-12-06/pairwise-q4-cable-leaf0-spine1-60mbit.json"
        );
        let mut o = crate::pairwise::saved::parse(json.as_bytes()).expect("a pairwise --json run");
        o.cables = crate::pairwise::cables::slow_links(&o.measurements);
        o
    }

    /// The bed's router interfaces as its /etc/hosts names them (scripts/leafspine).
    fn bed_names() -> RouterNames {
        [
            ("10.80.0.1", "mrls-leaf0"),
            ("10.101.0.1", "mrls-leaf0-spine1"),
            ("10.101.0.2", "mrls-spine1-leaf0"),
            ("10.101.2.1", "mrls-leaf2-spine1"),
        ]
        .into_iter()
        .map(|(a, n)| (a.parse().expect("an address"), n.to_string()))
        .collect()
    }

    #[test]
    fn the_slow_cable_is_named_by_its_routers_names_beside_their_addresses() {
        let mut o = slowed_bed();
        let mut before = String::new();
        slow_links(&mut before, &o);
        assert!(
            before.contains("# SLOW FABRIC LINK: into 10.101.0.2 from 10.80.0.1: "),
            "{before}"
        );
        o.router_names = bed_names();
        let mut s = String::new();
        slow_links(&mut s, &o);
        assert!(
            s.contains("# SLOW FABRIC LINK: into mrls-spine1-leaf0 (10.101.0.2) from mrls-leaf0 (10.80.0.1): "),
            "{s}"
        );
        // Only the names changed: the same lines, the same figures.
        assert_eq!(s.lines().count(), before.lines().count());
    }

    #[test]
    fn a_tests_paths_carry_the_names_beside_the_addresses_and_unnamed_hops_stay_bare() {
        let mut o = slowed_bed();
        o.router_names = bed_names();
        let mut s = String::new();
        connections(&mut s, &o);
        // Host 0 to host 4 (leaf0 to leaf2) over spine1: every hop named.
        assert!(
            s.contains("mrls-leaf0 (10.80.0.1) > mrls-spine1-leaf0 (10.101.0.2) > mrls-leaf2-spine1 (10.101.2.1)"),
            "{s}"
        );
        // Over spine0, whose interfaces have no name here: the addresses alone.
        assert!(s.contains("mrls-leaf0 (10.80.0.1) > 10.100.0.2 > 10.100.2.1"), "{s}");
    }

    #[test]
    fn paths_are_lettered_past_z() {
        assert_eq!(path_letter(0), "A");
        assert_eq!(path_letter(25), "Z");
        assert_eq!(path_letter(26), "AA");
        assert_eq!(path_letter(27), "AB");
    }
}
