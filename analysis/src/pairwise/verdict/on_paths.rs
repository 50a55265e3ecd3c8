//! Without traces: pairs slow through one of an uplink's equal-cost paths, judged from the
//! first pass and not retested alone.
//!
//! A cable slow on one of k paths between two leaves slows the connections hashed onto it while
//! the rest of the job loads the fabric. Alone, a pair's new connections hash anew and TCP moves
//! its load onto the fine paths, so the retests clear it (the leaf-spine bed, cable at 60 Mbit/s,
//! `--no-trace --topology`: 8 pairs slow in the first pass, every one cleared alone, PASS). Where
//! the traces name the link, `on_links.rs` sets such pairs aside; without them the topology and
//! the pairs' own connections show the same: the first pass's slow pairs blamed on an uplink
//! ([`blame`]), whose connections split into a slow share and a fine rest as one of k paths
//! would ([`PathShare::partial`], [`PathShare::paths`]), and each such pair with slow and fine
//! connections of its own (a slow host slows all of its connections, not a share). Those pairs
//! are confirmed from the first pass: the uplink is named, with the share under it.

use std::collections::BTreeSet;

use super::bars::{bars, rule, slow_pair, suspect_pairs};
use super::cells::{at_matrix_size, by_pair, distinct_pairs};
use crate::pairwise::blame::{blame, Part, SlowPair};
use crate::pairwise::cables::healthy_bar;
use crate::pairwise::connections::Path;
use crate::pairwise::path_share::path_shares;
use crate::pairwise::topology::Topology;
use crate::pairwise::{Measurement, PairwiseConfig};
use crate::schedule::Pair;

/// The first pass's pairs slow through one of an uplink's paths (none without a topology, with
/// traces, or without several connections a test).
pub(super) fn on_paths(
    first: &[Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    topology: Option<&Topology>,
) -> BTreeSet<Pair> {
    let Some(t) = topology else {
        return BTreeSet::new();
    };
    let conns = || first.iter().filter(|m| !m.retest).flat_map(|m| &m.connections);
    let traced = conns().any(|c| matches!(c.path, Some(Path::Traced { .. })));
    if traced || !first.iter().any(|m| m.connections.len() >= 2) {
        return BTreeSet::new();
    }
    // The bar `path_shares` splits connections at.
    let Some(slow_conn) = healthy_bar(conns().map(|c| c.gbps).filter(|g| g.is_finite()).collect()) else {
        return BTreeSet::new();
    };
    let bars = bars(first, cfg, hosts);
    let rule = rule(cfg);
    let of = by_pair(at_matrix_size(first, cfg));
    let suspects: Vec<SlowPair> = suspect_pairs(first, cfg, hosts, &bars)
        .into_iter()
        .map(|p| slow_pair(p, of.get(&p).map_or(&[], Vec::as_slice), &bars, rule, hosts))
        .collect();
    let tested = distinct_pairs(at_matrix_size(first, cfg));
    let uplinks: Vec<Part> = blame(hosts, &tested, &suspects, Some(t))
        .into_iter()
        .filter(|p| matches!(p, Part::Uplink { .. }))
        .collect();
    let shares = path_shares(first, hosts, &uplinks, t);
    let across_a_share = |a: usize, b: usize| {
        let (x, y) = (t.switch_of(&hosts[a]), t.switch_of(&hosts[b]));
        shares.iter().any(|s| {
            s.partial()
                && s.paths().is_some()
                && ((x == Some(&s.switch_a) && y == Some(&s.switch_b))
                    || (x == Some(&s.switch_b) && y == Some(&s.switch_a)))
        })
    };
    // Slow and fine connections of its own, in either direction.
    let split = |a: usize, b: usize| {
        let mine: Vec<f64> = of
            .get(&(a, b))
            .into_iter()
            .flatten()
            .flat_map(|m| &m.connections)
            .map(|c| c.gbps)
            .collect();
        mine.iter().any(|&g| g < slow_conn) && mine.iter().any(|&g| g >= slow_conn)
    };
    suspects
        .iter()
        .map(|p| (p.a, p.b))
        .filter(|&(a, b)| across_a_share(a, b) && split(a, b))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pairwise::verdict::{judge_pairs, plan_retests_in};

    /// The bed's run with default options but `--no-trace --topology`, cable leaf0-spine1 at
    /// 60 Mbit/s: live, its retests alone cleared all 8 pairs across leaf0's uplinks and it
    /// passed.
    const UNTRACED: &str =
        include_str!("../../../../docs/evidence/leafspine-defaults-2026-12-06/untraced-cable-leaf0-spine1-60mbit.json");

    fn topology() -> Topology {
        Topology::parse("leaf0: mrls-h[0-1]\nleaf1: mrls-h[2-3]\nleaf2: mrls-h[4-5]\n", "test").expect("topology")
    }

    #[test]
    fn a_cable_on_one_of_two_paths_is_named_as_leaf0s_uplinks_and_not_retested() {
        let o = crate::pairwise::saved::parse(UNTRACED.as_bytes()).expect("a saved run");
        let (c, h, t) = (&o.config, &o.hosts, topology());
        // As it ran: every suspect cleared alone.
        assert!(
            o.verdict.pass && o.verdict.cleared.len() == 8,
            "{:?}",
            o.verdict.cleared
        );
        let on = on_paths(&o.measurements, c, h, Some(&t));
        let expect: BTreeSet<Pair> = [(0, 2), (0, 3), (0, 4), (0, 5), (1, 2), (1, 3), (1, 4), (1, 5)].into();
        assert_eq!(on, expect, "every pair across leaf0's uplinks, none else");
        let plan = plan_retests_in(&o.measurements, c, h, Some(&t));
        assert!(plan.suspects.iter().all(|p| !on.contains(p)), "{plan:?}");
        // Judged with its own retests: those pairs confirmed from the first pass, the uplinks
        // named with the share of their connections that is slow.
        let v = judge_pairs(&o.measurements, &o.retests, c, h, &plan, Some(&t));
        assert!(!v.pass);
        assert!(v.cleared.is_empty(), "{:?}", v.cleared);
        let labels: Vec<String> = v.blamed.iter().map(Part::label).collect();
        assert_eq!(labels, ["uplink leaf0-leaf1", "uplink leaf0-leaf2"]);
        assert_eq!(v.uplink_paths.len(), 2);
        for s in &v.uplink_paths {
            assert!(s.partial() && s.paths().is_some_and(|(lo, _)| lo == 2), "{s:?}");
        }
        // Without the topology nothing changes: the pairs are retested and cleared.
        assert!(on_paths(&o.measurements, c, h, None).is_empty());
        let v = judge_pairs(
            &o.measurements,
            &o.retests,
            c,
            h,
            &plan_retests_in(&o.measurements, c, h, None),
            None,
        );
        assert!(v.pass && v.cleared.len() == 8);
    }
}
