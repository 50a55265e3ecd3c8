//! Pairs slow through a slow fabric link, taken out of the first pass before it is judged.
//!
//! A cable slow on one of several equal-cost paths slows every pair a connection of which
//! hashed onto it, a scatter of host pairs across two leaves. Left in, those cells were judged
//! as host pairs: eight host links named for one cable (the leaf-spine bed, issue 57), two
//! nodes named beside it, or, with a slow node as well on a fabric of six hosts, a population so
//! spread by the two faults that its bar named nothing at all. So the slow links are found first
//! from the traced connections ([`slow_links`]); the pairs they explain ([`explained_pairs`])
//! are the links', set aside before the bars and the retest plan are drawn; and those of them
//! below the bar the rest drew are reported with the links, not blamed on their hosts.
//!
//! A link is kept only where a pair is slow by that bar through the link's own connections
//! (those it was judged on: not those of a link named before it): one TCP connection of a test
//! can read a quarter under its others while the test as a whole is fine (connections sharing a
//! host link split it unevenly, the more so on a busy machine), and on the bed a leaf's uplink
//! beside the slow cable was named with it (its connections at 0.77-0.79 of the others, z
//! -3.3), once while every pair across it was in the bulk and once while its only slow pairs
//! were those whose other connections went on over the cable.
//!
//! Where the topology gives routes (InfiniBand `ibtracert` files), a direction no connection of
//! which was traced takes its hosts' route as its path ([`Routes`]), so a slow InfiniBand cable is
//! found the same way, named by its two switch ports.

use std::borrow::Cow;
use std::collections::BTreeSet;

use super::bars::{bar_for, bars, rule};
use super::cells::at_matrix_size;
use crate::pairwise::cables::{explained_pairs_in, pairs_across_in, slow_links_in, unrouted, Routes, SlowLink};
use crate::pairwise::topology::Topology;
use crate::pairwise::{Measurement, PairwiseConfig};
use crate::schedule::Pair;

/// The first pass judged apart from the slow fabric links: the pass without the pairs they
/// explain, those pairs, and the links (none, and the pass as it is, where no connection was
/// traced or no link slowed a pair), and the directions between hosts that a topology with
/// routes left without a path ([`unrouted`]).
pub(super) struct OffLinks<'a> {
    pub rest: Cow<'a, [Measurement]>,
    pub on: BTreeSet<Pair>,
    pub links: Vec<SlowLink>,
    pub unrouted: Vec<(usize, usize)>,
}

pub(super) fn off_links<'a>(
    first: &'a [Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    topology: Option<&Topology>,
) -> OffLinks<'a> {
    let routes = Routes::of(topology, hosts, cfg);
    let unrouted = routes.map_or(Vec::new(), |r| unrouted(first, r));
    let mut links = slow_links_in(first, routes);
    loop {
        let on = explained_pairs_in(first, &links, routes);
        if on.is_empty() {
            return OffLinks {
                rest: Cow::Borrowed(first),
                on,
                links: Vec::new(),
                unrouted,
            };
        }
        let rest: Vec<Measurement> = first.iter().filter(|m| !on.contains(&m.pair())).cloned().collect();
        let bars = bars(&rest, cfg, hosts);
        let rule = rule(cfg);
        let slow: BTreeSet<Pair> = at_matrix_size(first, cfg)
            .filter(|m| on.contains(&m.pair()) && m.score() < bar_for(&bars, rule, hosts, m))
            .map(Measurement::pair)
            .collect();
        // Each link by the connections it was judged on (the search sets aside those of a link
        // named before it): a link beside the slow cable must slow a pair through connections of
        // its own, not through connections that went on over the cable. One link is dropped at a
        // time, the last found first: while a spurious link's pairs are set aside, the rest can
        // be too few to measure their noise, and a bar drawn from the prior would drop the
        // cable with it (a synthetic 3x2x2 fabric's trial named leaf0's hosts as nodes instead).
        let before = links.len();
        let own = pairs_across_in(first, &links, routes);
        if let Some(k) = (0..links.len()).rev().find(|&k| own[k].is_disjoint(&slow)) {
            links.remove(k);
        }
        if links.len() == before {
            return OffLinks {
                rest: Cow::Owned(rest),
                on,
                links,
                unrouted,
            };
        }
    }
}
