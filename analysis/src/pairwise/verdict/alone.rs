//! A pair as the verdict holds it after the retests: the population it was judged in, and its
//! figure alone. Below both the judging and the unstable parts, which read them.

use std::collections::HashMap;

use super::{Judged, Population, Rule};
use crate::pairwise::Measurement;
use crate::schedule::Pair;

/// The population a pair was judged in: the pair's own population (within a host or between
/// hosts; of its node, for pairs over IPC), or under a threshold the one judgement where there is
/// no such population.
pub fn judged_for<'a>(judged: &'a [Judged], rule: Rule, hosts: &[String], pair: Pair) -> Option<&'a Judged> {
    let p = if hosts.get(pair.0) == hosts.get(pair.1) {
        Population::WithinHost
    } else {
        Population::BetweenHosts
    };
    let own = judged
        .iter()
        .find(|j| j.population == p && j.host.as_ref().is_none_or(|h| hosts.get(pair.0) == Some(h)));
    match rule {
        // One judgement, or under a split (rails, nodes over IPC) one per group: the pair's own
        // where it has one.
        Rule::Threshold(_) => own.or(judged.first()),
        Rule::Robust => own,
    }
}

/// A pair's figure alone, as the verdict judges it: its worst direction, each direction at its
/// best retest pass (score units). None when the pair was not retested.
pub fn alone_score(retests: &[Measurement], pair: Pair) -> Option<f64> {
    let key = (pair.0.min(pair.1), pair.0.max(pair.1));
    let re: Vec<&Measurement> = retests.iter().filter(|m| m.pair() == key).collect();
    (!re.is_empty()).then(|| worst_of_best(&re))
}

/// The worst direction of a pair's retests, each direction at its best pass.
pub(super) fn worst_of_best(re: &[&Measurement]) -> f64 {
    let mut best: HashMap<(usize, usize), f64> = HashMap::new();
    for m in re {
        let b = best.entry((m.src, m.dst)).or_insert(f64::NEG_INFINITY);
        *b = b.max(m.score());
    }
    best.into_values().fold(f64::INFINITY, f64::min)
}
