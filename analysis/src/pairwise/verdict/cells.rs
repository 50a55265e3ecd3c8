//! The first pass's cells as the verdict reads them: at the matrix size, by unordered pair and
//! by population (within a host or between hosts).

use std::collections::HashMap;

use super::Population;
use crate::pairwise::{Measurement, PairwiseConfig};
use crate::schedule::Pair;

/// The measurements of `ms` at the matrix size ([`PairwiseConfig::matrix_size`]).
pub(super) fn at_matrix_size<'a>(ms: &'a [Measurement], cfg: &PairwiseConfig) -> impl Iterator<Item = &'a Measurement> {
    let size = cfg.matrix_size() as u64;
    ms.iter().filter(move |m| m.bytes == size)
}

/// Measurements indexed by their (unordered) pair.
pub(super) fn by_pair<'a>(ms: impl Iterator<Item = &'a Measurement>) -> HashMap<Pair, Vec<&'a Measurement>> {
    let mut index: HashMap<Pair, Vec<&Measurement>> = HashMap::new();
    for m in ms {
        index.entry(m.pair()).or_default().push(m);
    }
    index
}

/// Whether a measurement ran within one host or between two.
pub(super) fn population(hosts: &[String], m: &Measurement) -> Population {
    if hosts[m.src] == hosts[m.dst] {
        Population::WithinHost
    } else {
        Population::BetweenHosts
    }
}

/// The scores of `first` at the matrix size in population `p` (every population for None).
pub(super) fn scores_in(
    first: &[Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    p: Option<Population>,
) -> Vec<f64> {
    at_matrix_size(first, cfg)
        .filter(|m| p.is_none_or(|p| population(hosts, m) == p))
        .map(Measurement::score)
        .collect()
}

/// The distinct pairs of `ms`, sorted.
pub(super) fn distinct_pairs<'a>(ms: impl Iterator<Item = &'a Measurement>) -> Vec<Pair> {
    let mut v: Vec<Pair> = ms.map(Measurement::pair).collect();
    v.sort_unstable();
    v.dedup();
    v
}
