//! Which pairs are slow, and whether to blame a link or a node.
//!
//! A direction is suspect when its score (Gb/s; 1/latency for latency tests) is below `threshold`
//! times the median of all first-pass scores at the matrix size, or below `--expect-gbps`. Suspect
//! pairs are retested alone; those still below the same bar are confirmed. A host is blamed when
//! more than half of the (at least two) tested pairs that touch it are confirmed slow: one bad node
//! makes all its pairs slow. Confirmed pairs not explained by a blamed host are blamed on their link.

use serde::{Deserialize, Serialize};

use super::{Measurement, PairwiseConfig, TestKind};
use crate::schedule::Pair;
use crate::stats::median;

/// A confirmed slow pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowPair {
    pub a: usize,
    pub b: usize,
    pub host_a: String,
    pub host_b: String,
    /// Worst first-pass score of the pair (either direction).
    pub first: f64,
    /// Worst retest score, when retested.
    pub retest: Option<f64>,
    /// The slow directions (src, dst) of the first pass.
    pub directions: Vec<(usize, usize)>,
}

/// A host most of whose pairs are slow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowNode {
    pub host: String,
    pub slow_pairs: usize,
    pub pairs: usize,
}

/// The outcome of the checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Median first-pass score at the matrix size.
    pub median: f64,
    /// The bar below which a pair is slow (in score units).
    pub bar: f64,
    /// Suspects of the first pass that were fine when retested alone (slow only under load).
    pub cleared: Vec<Pair>,
    pub slow_nodes: Vec<SlowNode>,
    /// Confirmed slow pairs not explained by a slow node.
    pub slow_links: Vec<SlowPair>,
    /// Every confirmed slow pair.
    pub confirmed: Vec<SlowPair>,
    pub pass: bool,
}

fn at_matrix_size<'a>(ms: &'a [Measurement], cfg: &PairwiseConfig) -> impl Iterator<Item = &'a Measurement> {
    let size = cfg.matrix_size() as u64;
    ms.iter().filter(move |m| m.bytes == size)
}

/// The bar: threshold x median, raised to the absolute floor for bandwidth tests.
fn bar(first: &[Measurement], cfg: &PairwiseConfig) -> (f64, f64) {
    let mut scores: Vec<f64> = at_matrix_size(first, cfg).map(Measurement::score).collect();
    let med = median(&mut scores);
    let mut bar = cfg.threshold * med;
    if let (TestKind::Bw, Some(floor)) = (cfg.test, cfg.expect_gbps) {
        bar = bar.max(floor);
    }
    (med, bar)
}

fn unordered(m: &Measurement) -> Pair {
    (m.src.min(m.dst), m.src.max(m.dst))
}

/// Pairs with a direction below the bar in the first pass.
pub fn suspects(first: &[Measurement], cfg: &PairwiseConfig) -> Vec<Pair> {
    let (_, bar) = bar(first, cfg);
    let mut v: Vec<Pair> = at_matrix_size(first, cfg)
        .filter(|m| m.score() < bar)
        .map(unordered)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Decide, from the first pass and the retests.
pub fn decide(first: &[Measurement], retests: &[Measurement], cfg: &PairwiseConfig, hosts: &[String]) -> Verdict {
    let (med, bar) = bar(first, cfg);
    let mut confirmed = Vec::new();
    let mut cleared = Vec::new();
    let tested: Vec<Pair> = {
        let mut v: Vec<Pair> = at_matrix_size(first, cfg).map(unordered).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    for (a, b) in suspects(first, cfg) {
        let of_pair = |m: &&Measurement| unordered(m) == (a, b);
        let slow_dirs: Vec<&Measurement> = at_matrix_size(first, cfg)
            .filter(of_pair)
            .filter(|m| m.score() < bar)
            .collect();
        let worst_first = slow_dirs.iter().map(|m| m.score()).fold(f64::INFINITY, f64::min);
        let re: Vec<&Measurement> = retests.iter().filter(of_pair).collect();
        let worst_re = re.iter().map(|m| m.score()).fold(f64::INFINITY, f64::min);
        let retested = !re.is_empty();
        if retested && worst_re >= bar {
            cleared.push((a, b));
            continue;
        }
        confirmed.push(SlowPair {
            a,
            b,
            host_a: hosts[a].clone(),
            host_b: hosts[b].clone(),
            first: worst_first,
            retest: retested.then_some(worst_re),
            directions: slow_dirs.iter().map(|m| (m.src, m.dst)).collect(),
        });
    }
    let mut names: Vec<&String> = Vec::new();
    for h in hosts {
        if !names.contains(&h) {
            names.push(h);
        }
    }
    let touches = |p: &Pair, h: &str| hosts[p.0] == h || hosts[p.1] == h;
    let slow_nodes: Vec<SlowNode> = names
        .iter()
        .filter_map(|h| {
            let pairs = tested.iter().filter(|p| touches(p, h)).count();
            let slow_pairs = confirmed.iter().filter(|s| touches(&(s.a, s.b), h)).count();
            (pairs >= 2 && slow_pairs * 2 > pairs).then(|| SlowNode {
                host: (*h).clone(),
                slow_pairs,
                pairs,
            })
        })
        .collect();
    let slow_links = confirmed
        .iter()
        .filter(|s| !slow_nodes.iter().any(|n| n.host == s.host_a || n.host == s.host_b))
        .cloned()
        .collect();
    Verdict {
        median: med,
        bar,
        cleared,
        slow_nodes,
        slow_links,
        pass: confirmed.is_empty(),
        confirmed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pairwise::measure::{Amount, BwResult};
    use crate::pairwise::{OpName, Selection};
    use std::time::Duration;

    fn cfg() -> PairwiseConfig {
        PairwiseConfig {
            test: TestKind::Bw,
            op: OpName::Send,
            sizes: vec![65536],
            amount: Amount::Iterations(10),
            window: 4,
            warmup: 0,
            bidirectional: false,
            selection: Selection::All,
            threshold: 0.9,
            expect_gbps: None,
            retest: true,
            op_timeout: Duration::from_secs(1),
        }
    }

    fn m(src: usize, dst: usize, gbps: f64) -> Measurement {
        let bw = BwResult {
            bytes: 65536,
            iterations: 10,
            peak_gbps: gbps,
            avg_gbps: gbps,
            msg_rate_mpps: 0.0,
        };
        Measurement {
            src,
            dst,
            bytes: 65536,
            bw: Some(bw),
            lat: None,
            iterations: 10,
            retest: false,
        }
    }

    /// Every ordered pair of `n` ranks at `fast`, except those listed.
    fn matrix(n: usize, fast: f64, slow: &[(usize, usize, f64)]) -> Vec<Measurement> {
        let mut v = Vec::new();
        for s in 0..n {
            for d in 0..n {
                if s != d {
                    let g = slow.iter().find(|x| x.0 == s && x.1 == d).map_or(fast, |x| x.2);
                    v.push(m(s, d, g));
                }
            }
        }
        v
    }

    fn hosts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("h{i}")).collect()
    }

    #[test]
    fn one_slow_link_is_blamed_on_the_link() {
        let first = matrix(4, 10.0, &[(0, 1, 0.1)]);
        assert_eq!(suspects(&first, &cfg()), vec![(0, 1)]);
        let retests = vec![m(0, 1, 0.1), m(1, 0, 10.0)];
        let v = decide(&first, &retests, &cfg(), &hosts(4));
        assert!(!v.pass);
        assert!(v.slow_nodes.is_empty());
        assert_eq!(v.slow_links.len(), 1);
        let l = &v.slow_links[0];
        assert_eq!((l.a, l.b, l.directions.clone()), (0, 1, vec![(0, 1)]));
        assert_eq!(l.retest, Some(0.1));
        assert_eq!(v.median, 10.0);
        assert!((v.bar - 9.0).abs() < 1e-12);
    }

    #[test]
    fn all_pairs_of_one_host_slow_blames_the_node() {
        // Traffic into rank 1 is slow from everyone (3 hosts).
        let first = matrix(3, 10.0, &[(0, 1, 0.1), (2, 1, 0.1)]);
        let retests = vec![m(0, 1, 0.1), m(1, 0, 10.0), m(1, 2, 10.0), m(2, 1, 0.1)];
        let v = decide(&first, &retests, &cfg(), &hosts(3));
        assert_eq!(
            v.slow_nodes,
            vec![SlowNode {
                host: "h1".into(),
                slow_pairs: 2,
                pairs: 2
            }]
        );
        assert!(v.slow_links.is_empty(), "{:?}", v.slow_links);
        assert_eq!(v.confirmed.len(), 2);
    }

    #[test]
    fn fine_when_retested_alone_is_cleared() {
        let first = matrix(4, 10.0, &[(2, 3, 5.0)]);
        let v = decide(&first, &[m(2, 3, 9.5), m(3, 2, 10.0)], &cfg(), &hosts(4));
        assert!(v.pass);
        assert_eq!(v.cleared, vec![(2, 3)]);
    }

    #[test]
    fn absolute_floor_and_no_retest() {
        let first = matrix(2, 10.0, &[]);
        let mut c = cfg();
        c.expect_gbps = Some(25.0);
        c.retest = false;
        let v = decide(&first, &[], &c, &hosts(2));
        assert!(!v.pass);
        // Two ranks: one pair, so no host has two pairs to blame; the link is named.
        assert!(v.slow_nodes.is_empty());
        assert_eq!(v.slow_links.len(), 1);
        assert_eq!(v.bar, 25.0);
    }

    #[test]
    fn uniform_matrix_passes() {
        let v = decide(&matrix(5, 10.0, &[]), &[], &cfg(), &hosts(5));
        assert!(v.pass && v.confirmed.is_empty() && v.cleared.is_empty());
    }
}
