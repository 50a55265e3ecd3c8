//! Without traces, what share of an uplink's connections are slow: "one of about k paths between
//! leaf A and leaf B is slow" (issue 57). Where `-q N` over TCP ran each test on connections of
//! its own but their paths were not traced (`--no-trace`, no CAP_NET_RAW, ICMP filtered), a slow
//! cable between two leaves is judged as the uplink between them (`--topology`); the connections
//! across it tell whether the whole uplink is slow or one of its parallel paths: a cable on one of
//! k equal-cost paths slows about one connection in k and leaves the rest fine.
//!
//! A connection is slow below [`MIN_DROP`](super::cables::MIN_DROP) under the upper quartile of
//! every connection's figure in the run (a fault only slows, and the upper quartile is healthy
//! where the median need not be).

use serde::{Deserialize, Serialize};

use super::blame::Part;
use super::cables::healthy_bar;
use super::topology::Topology;
use super::Measurement;
use crate::stats::median;

/// An uplink's connections, split into the slow and the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathShare {
    pub switch_a: String,
    pub switch_b: String,
    /// Connections across the uplink below the bar, of all across it.
    pub slow: usize,
    pub of: usize,
    pub slow_median: f64,
    pub rest_median: f64,
}

impl PathShare {
    /// How many equal-cost paths the share fits: each k from 2 to 16 for which `slow` lies within
    /// two binomial deviations of `of / k` (a hash spreads connections over k paths at random),
    /// as (fewest, most); None where no k fits.
    pub fn paths(&self) -> Option<(usize, usize)> {
        let (n, s) = (self.of as f64, self.slow as f64);
        let fits: Vec<usize> = (2..=16)
            .filter(|&k| {
                let p = 1.0 / k as f64;
                (s - n * p).abs() <= 2.0 * (n * p * (1.0 - p)).sqrt()
            })
            .collect();
        Some((*fits.first()?, *fits.last()?))
    }

    /// Whether some of the uplink's connections are fine while others are slow: part of it (a
    /// path, a cable, a spine's port), not all of it. Two in three or fewer slow, and at least
    /// two fine.
    pub fn partial(&self) -> bool {
        self.slow > 0 && 3 * self.slow <= 2 * self.of && self.of - self.slow >= 2
    }
}

/// The connections of every uplink in `blamed` (first pass, `-q` over TCP, untraced or not),
/// split at the run's bar; none where the run kept no connections.
pub fn path_shares(ms: &[Measurement], hosts: &[String], blamed: &[Part], t: &Topology) -> Vec<PathShare> {
    let first = || ms.iter().filter(|m| !m.retest);
    let all: Vec<f64> = first()
        .flat_map(|m| &m.connections)
        .map(|c| c.gbps)
        .filter(|g| g.is_finite())
        .collect();
    let Some(bar) = healthy_bar(all) else {
        return Vec::new();
    };
    blamed
        .iter()
        .filter_map(|p| match p {
            Part::Uplink { switch_a, switch_b, .. } => Some((switch_a, switch_b)),
            _ => None,
        })
        .filter_map(|(a, b)| {
            let across = |m: &Measurement| {
                let (x, y) = (t.switch_of(&hosts[m.src]), t.switch_of(&hosts[m.dst]));
                (x == Some(a) && y == Some(b)) || (x == Some(b) && y == Some(a))
            };
            let figures: Vec<f64> = first()
                .filter(|m| across(m))
                .flat_map(|m| &m.connections)
                .map(|c| c.gbps)
                .collect();
            let (mut slow, mut rest): (Vec<f64>, Vec<f64>) = figures.iter().partition(|&&g| g < bar);
            (!figures.is_empty()).then(|| PathShare {
                switch_a: a.clone(),
                switch_b: b.clone(),
                slow: slow.len(),
                of: figures.len(),
                slow_median: if slow.is_empty() { 0.0 } else { median(&mut slow) },
                rest_median: if rest.is_empty() { 0.0 } else { median(&mut rest) },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOW: &str =
        include_str!("../../../docs/evidence/leafspine-cables-2026-12-06/pairwise-q4-cable-leaf0-spine1-60mbit.json");

    fn topology() -> Topology {
        Topology::parse("leaf0: mrls-h[0-1]\nleaf1: mrls-h[2-3]\nleaf2: mrls-h[4-5]\n", "test").expect("topology")
    }

    fn untraced(json: &str) -> crate::pairwise::PairwiseOutcome {
        let mut o = crate::pairwise::saved::parse(json.as_bytes()).expect("a saved run");
        for m in &mut o.measurements {
            for c in &mut m.connections {
                c.path = None;
            }
        }
        o
    }

    #[test]
    fn the_slowed_cable_untraced_is_one_of_two_paths_of_leaf0s_uplinks() {
        // The bed's run with leaf0-spine1 at 60 Mbit/s, its traces taken out: judged with the
        // topology, leaf0's uplinks to both other leaves are slow, and half their connections.
        let o = untraced(SLOW);
        let t = topology();
        let again = crate::pairwise::saved::rejudge(&o, &o.config, Some(&t));
        assert!(again.cables.is_empty(), "no traces, no cable");
        let labels: Vec<String> = again.verdict.blamed.iter().map(Part::label).collect();
        assert_eq!(labels, ["uplink leaf0-leaf1", "uplink leaf0-leaf2"]);
        let shares = path_shares(&o.measurements, &o.hosts, &again.verdict.blamed, &t);
        assert_eq!(shares.len(), 2);
        for s in &shares {
            assert!(s.partial(), "{s:?}");
            // Two spines: the share fits two paths (and, from 32 connections, a few more).
            assert!(s.paths().is_some_and(|(lo, _)| lo == 2), "{s:?}");
            assert!(s.slow_median < 0.7 * s.rest_median, "{s:?}");
        }
    }

    #[test]
    fn a_whole_slow_uplink_is_not_partial() {
        let s = PathShare {
            switch_a: "a".into(),
            switch_b: "b".into(),
            slow: 15,
            of: 16,
            slow_median: 0.5,
            rest_median: 1.0,
        };
        assert!(!s.partial());
        assert_eq!(s.paths(), None);
        // 8 of 16: k = 2 (expected 8) and 3 (5.3, sd 1.9) fit; 4 (4, sd 1.7: 4 > 3.5) does not.
        let half = PathShare { slow: 8, ..s.clone() };
        assert!(half.partial());
        assert_eq!(half.paths(), Some((2, 3)));
        // 4 of 16: 1/2 is 8 (sd 2: 4 off, 2 sd, fits) ... 1/10 is 1.6 (sd 1.2: 2.4 off, fits),
        // 1/11 is 1.45 (sd 1.15: 2.55 off, no): 16 connections say little.
        let quarter = PathShare { slow: 4, ..s };
        assert!(quarter.partial());
        assert_eq!(quarter.paths(), Some((2, 10)));
    }
}
