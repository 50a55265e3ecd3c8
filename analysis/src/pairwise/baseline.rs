//! A run against an earlier good run of the same hosts (`--baseline GOOD.json`): history per
//! link. Each direction measured in both, at the same message size, is scored as now / then (its
//! best figure in each run: the first pass or a retest alone), and those ratios are judged as the
//! verdict judges rates: the healthy bulk of ratios (about 1 on an unchanged fabric), the bar at
//! four of their spreads or 7%, whichever is larger, and blame at the most general level that
//! explains the slower directions (uplink with a topology, node, host link, NIC, rank pair). The
//! bulk itself is held to the same margin below 1: a fabric slower everywhere is named as a
//! whole. There are no retests: a
//! comparison on a noisy fabric says so by its spread and names only what lies beyond it.
//! A part is named when it got slower than the run-to-run spread allows, even where it still
//! passes today's verdict against its peers, as a link that lost 15% last week and everything
//! else did not.

use super::bulk::Bulk;
use super::defaults::{DEVIATIONS, MIN_DROP};
use super::saved::best_scores;
use super::topology::Topology;
use super::verdict::{self, RetestPlan, Verdict};
use super::{Measurement, OpName, PairwiseConfig, PairwiseOutcome, TestKind};

/// Ratios scaled so that "unchanged" is 100 (the reports print them as percentages).
const PERCENT: f64 = 100.0;

/// What the comparison found.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Directions measured in both runs.
    pub cells: usize,
    /// The verdict on the ratios (scores are percent of the baseline): parts slower than the
    /// rest of the fabric, beyond the run-to-run spread.
    pub verdict: Verdict,
    /// The whole fabric slower than before: the median ratio and the bar it is below (percent).
    pub fabric: Option<(f64, f64)>,
}

impl Comparison {
    /// Nothing slower than in the baseline.
    pub fn pass(&self) -> bool {
        self.verdict.pass && self.fabric.is_none()
    }
}

/// Why two runs cannot be compared.
pub fn comparable(now: &PairwiseOutcome, then: &PairwiseOutcome) -> Result<(), String> {
    if now.hosts != then.hosts {
        return Err(format!(
            "the baseline ran on other hosts or ranks ({} ranks on {}, here {} on {}); compare runs of the same hostfile",
            then.hosts.len(),
            distinct(&then.hosts),
            now.hosts.len(),
            distinct(&now.hosts)
        ));
    }
    if now.config.test != then.config.test || now.config.matrix_size() != then.config.matrix_size() {
        return Err(format!(
            "the baseline measured {} at {} bytes, this run {} at {} bytes; compare runs of the same test and size",
            test_name(then.config.test),
            then.config.matrix_size(),
            test_name(now.config.test),
            now.config.matrix_size()
        ));
    }
    Ok(())
}

fn test_name(t: TestKind) -> &'static str {
    match t {
        TestKind::Bw => "bw",
        TestKind::Lat => "lat",
    }
}

fn distinct(hosts: &[String]) -> String {
    let mut h: Vec<&String> = hosts.iter().collect();
    h.sort_unstable();
    h.dedup();
    match h.len() {
        0 => "no host".into(),
        1 => h[0].clone(),
        n => format!("{n} hosts, {} ..", h[0]),
    }
}

/// Compare `now` with `then` ([`comparable`] first).
pub fn comparison(now: &PairwiseOutcome, then: &PairwiseOutcome, topology: Option<&Topology>) -> Comparison {
    let (a, b) = (best_scores(now), best_scores(then));
    let size = now.config.matrix_size() as u64;
    let mut cells: Vec<Measurement> = a
        .iter()
        .filter_map(|(&(src, dst), &x)| {
            let y = *b.get(&(src, dst))?;
            let ratio = if y > 0.0 { PERCENT * x.max(0.0) / y } else { PERCENT };
            Some(ratio_cell(src, dst, size, ratio))
        })
        .collect();
    cells.sort_by_key(|m| (m.src, m.dst));
    let cfg = ratio_config(now.config.matrix_size());
    let v = verdict::judge_pairs(&cells, &[], &cfg, &now.hosts, &RetestPlan::default(), topology);
    // The fabric as a whole, from 100% (unchanged): a fabric that lost speed everywhere has no
    // part slower than the rest, and is named as one. The margin is the ratios' own noise: four
    // of their spreads, at least the 7% floor.
    let ratios: Vec<f64> = cells.iter().map(Measurement::score).collect();
    let fabric = Bulk::of(&ratios).and_then(|b| {
        let bar = PERCENT * (-(DEVIATIONS * b.spread).max(MIN_DROP)).exp();
        (b.median < bar).then_some((b.median, bar))
    });
    Comparison {
        cells: cells.len(),
        verdict: v,
        fabric,
    }
}

fn ratio_cell(src: usize, dst: usize, bytes: u64, percent: f64) -> Measurement {
    Measurement::bandwidth(src, dst, bytes, 1, percent, false)
}

/// The default rule over ratios (bandwidth-like: higher is better).
fn ratio_config(size: usize) -> PairwiseConfig {
    PairwiseConfig {
        retest: false,
        ..PairwiseConfig::synthetic(OpName::Send, size, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pairwise::report::baseline::render as render_text;
    use crate::pairwise::saved;

    fn run(hosts: usize, rate: impl Fn(usize, usize) -> f64) -> PairwiseOutcome {
        let cfg = PairwiseConfig {
            sizes: vec![1 << 20],
            ..ratio_config(1 << 20)
        };
        let mut ms = Vec::new();
        for s in 0..hosts {
            for d in 0..hosts {
                if s != d {
                    ms.push(ratio_cell(s, d, 1 << 20, rate(s, d)));
                }
            }
        }
        let names: Vec<String> = (0..hosts).map(|h| format!("h{h}")).collect();
        let v = verdict::judge_pairs(&ms, &[], &cfg, &names, &RetestPlan::default(), None);
        PairwiseOutcome::synthetic(cfg, "tcp", names, hosts - 1, ms, Vec::new(), v)
    }

    /// A quiet fabric's rate with a little deterministic noise (+-1%).
    fn quiet(s: usize, d: usize) -> f64 {
        100.0 * (1.0 + 0.01 * (((s * 7 + d * 13) % 5) as f64 - 2.0) / 2.0)
    }

    #[test]
    fn a_link_that_got_slower_is_named_though_it_passes_today() {
        let then = run(6, quiet);
        // Every link today at 80% of the fabric's old rate, except h1 <-> h4 at 68% (85% of that):
        // today's verdict sees a uniform fabric with one link 15% down; against the baseline,
        // everything is 20% down and that link 32%.
        let now = run(6, |s, d| {
            let hit = (s.min(d), s.max(d)) == (1, 4);
            quiet(s, d) * if hit { 0.68 } else { 0.8 }
        });
        comparable(&now, &then).expect("same hosts and size");
        let c = comparison(&now, &then, None);
        assert_eq!(c.cells, 30);
        let text = render_text(&c, "good.json");
        assert!(
            text.contains(
                "# SLOWER THAN BASELINE: HOST LINK h1 <-> h4: 1 of its 1 rank pairs; worst 68% of the baseline"
            ),
            "{text}"
        );
        assert!(
            text.contains("# SLOWER THAN BASELINE: the fabric as a whole: its directions run at a median 80%"),
            "{text}"
        );
        assert_eq!(text.matches("# SLOWER THAN BASELINE").count(), 2, "{text}");
        assert!(
            text.contains("# BASELINE FAIL: the fabric as a whole and 1 rank pair(s) slower than in good.json"),
            "{text}"
        );
        // Nothing slower: a pass, and the sensitivity is the 7% floor on a quiet fabric.
        let same = comparison(&run(6, quiet), &then, None);
        let text = render_text(&same, "good.json");
        assert!(
            text.contains("# BASELINE PASS: nothing slower than in good.json"),
            "{text}"
        );
        assert!(
            text.contains("a pair 7% or more slower than in the baseline would have been named"),
            "{text}"
        );
    }

    #[test]
    fn a_fabric_slower_everywhere_is_named_everywhere() {
        let then = run(4, quiet);
        let now = run(4, |s, d| quiet(s, d) * 0.5);
        let c = comparison(&now, &then, None);
        assert!(
            !c.pass() && c.verdict.pass,
            "no part slower than the rest: {:?}",
            c.verdict
        );
        let text = render_text(&c, "good.json");
        assert!(text.contains("now / then median 50%"), "{text}");
        assert!(
            text.contains(
                "# SLOWER THAN BASELINE: the fabric as a whole: its directions run at a median 50% of the baseline, \
                 below the 93% its spread allows"
            ),
            "{text}"
        );
        assert_eq!(text.matches("# SLOWER THAN BASELINE").count(), 1, "{text}");
        assert!(
            text.contains("# BASELINE FAIL: the fabric as a whole and 0 rank pair(s) slower than in good.json"),
            "{text}"
        );
    }

    #[test]
    fn a_node_slower_than_before_is_a_node() {
        let then = run(6, quiet);
        let now = run(6, |s, d| quiet(s, d) * if s == 2 || d == 2 { 0.85 } else { 1.0 });
        let text = render_text(&comparison(&now, &then, None), "good.json");
        assert!(
            text.contains("# SLOWER THAN BASELINE: NODE h2: 5 of its 5 host links; worst 8"),
            "{text}"
        );
        assert_eq!(text.matches("# SLOWER THAN BASELINE").count(), 1, "{text}");
    }

    #[test]
    fn runs_of_other_hosts_or_sizes_are_refused() {
        let then = run(6, quiet);
        let e = comparable(&run(5, quiet), &then).unwrap_err();
        assert!(
            e.starts_with("the baseline ran on other hosts or ranks (6 ranks on 6 hosts, h0 .., here 5 on 5 hosts"),
            "{e}"
        );
        let mut other = run(6, quiet);
        other.config.sizes = vec![65536];
        let e = comparable(&other, &then).unwrap_err();
        assert!(e.contains("at 1048576 bytes, this run bw at 65536 bytes"), "{e}");
    }

    #[test]
    fn a_saved_run_reads_back_and_rejudges_under_another_rule() {
        // h1 <-> h4 at 85%: today's default rule names it; --threshold 0.8 does not.
        let o = run(6, |s, d| {
            quiet(s, d) * if (s.min(d), s.max(d)) == (1, 4) { 0.85 } else { 1.0 }
        });
        let json = crate::pairwise::report::json::render(&o);
        let back = saved::parse(&json).expect("reads back");
        // serde_json reads a float back to within an ulp: the same cells, the same figures.
        assert_eq!(back.measurements.len(), o.measurements.len());
        for (x, y) in back.measurements.iter().zip(&o.measurements) {
            assert_eq!((x.src, x.dst, x.bytes), (y.src, y.dst, y.bytes));
            assert!((x.score() - y.score()).abs() < 1e-9 * y.score(), "{x:?} {y:?}");
        }
        assert_eq!(back.hosts, o.hosts);
        let default = saved::rejudge(&back, &back.config, None);
        assert!(!default.verdict.pass);
        assert_eq!(default.verdict.blamed.len(), 1);
        let loose = PairwiseConfig {
            threshold: Some(0.8),
            ..back.config.clone()
        };
        assert!(saved::rejudge(&back, &loose, None).verdict.pass);
        // Not a pairwise file: one line that says what it is not.
        let e = saved::parse(b"{\"tool\": \"meshrun\", \"test\": \"all_reduce\"}").unwrap_err();
        assert!(e.starts_with("not a `meshrun pairwise --json` file"), "{e}");
        assert!(saved::parse(b"hello").unwrap_err().starts_with("not JSON"));
    }
}
