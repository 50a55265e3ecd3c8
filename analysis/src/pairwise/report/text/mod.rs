//! Human text on stdout ([`PairwiseText`]): a header block and per-pair rows in perftest's
//! columns (with source and destination rank and host after them), the N x N matrix, per-host
//! summaries and the verdict. One file per section: `header`, `matrix`, the verdict's `bar` and
//! `blamed` lines, `paths`; `connections`, the TCP connections of each test under `-q`.

mod bar;
mod blamed;
mod connections;
mod header;
mod matrix;
mod over_time;
mod paths;

use std::fmt::Write as _;

use super::{score_to_value, unit};
use crate::export::{ExportError, Exporter};
use crate::pairwise::rails::RailOutcome;
use crate::pairwise::verdict::Verdict;
use crate::pairwise::{PairwiseOutcome, TestKind};

const RULE: &str = "---------------------------------------------------------------------------------------";

/// The pairwise text report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairwiseText {
    /// The whole report, as `meshrun pairwise` prints it on stdout ([`render`]).
    Whole,
    /// The report from the matrix on, as `meshrun verdict` prints a run judged again
    /// ([`render_judged`]).
    Judged,
}

impl Exporter<PairwiseOutcome> for PairwiseText {
    fn render(&self, o: &PairwiseOutcome) -> Result<Vec<u8>, ExportError> {
        let text = match self {
            PairwiseText::Whole => render(o),
            PairwiseText::Judged => render_judged(o),
        };
        Ok(text.into_bytes())
    }
}

/// The whole text report, as printed on stdout.
pub fn render(o: &PairwiseOutcome) -> String {
    let mut s = String::new();
    header::header(&mut s, o);
    header::rows(&mut s, o);
    connections::connections(&mut s, o);
    s.push_str(&render_judged(o));
    s
}

/// The report from the matrix on: the matrix (one per rail), the summaries, the bar, what the
/// run could detect and the verdict (what `meshrun verdict` prints for a run judged again).
pub fn render_judged(o: &PairwiseOutcome) -> String {
    judged(o, true)
}

/// The verdict's lines alone: [`render_judged`] without its matrices (the HTML report shows them
/// as tables of its own).
pub(crate) fn verdict_lines(o: &PairwiseOutcome) -> String {
    judged(o, false)
}

/// The header's title and facts (see [`header::facts`]).
pub(crate) fn header_facts(o: &PairwiseOutcome) -> (String, Vec<Vec<(String, String)>>) {
    header::facts(o)
}

/// What the matrix holds, as its text heading says it.
pub(crate) fn matrix_caption(o: &PairwiseOutcome) -> String {
    matrix::caption(o)
}

fn judged(o: &PairwiseOutcome, matrices: bool) -> String {
    let mut s = String::new();
    let mx = super::matrix(o);
    if let Some(t) = &o.over_time {
        // Repeated: the last pass's matrix, then every pass and the judgement across them.
        let all: Vec<usize> = (0..o.hosts.len()).collect();
        if matrices {
            matrix::matrix_table(&mut s, o, &mx, &all);
        }
        matrix::summaries(&mut s, o, &mx);
        over_time::section(&mut s, o, t);
        return s;
    }
    if o.rails.is_empty() {
        let all: Vec<usize> = (0..o.hosts.len()).collect();
        if matrices {
            matrix::matrix_table(&mut s, o, &mx, &all);
        }
        matrix::summaries(&mut s, o, &mx);
        verdict(&mut s, o, &o.verdict);
    } else {
        for r in &o.rails {
            rail_section(&mut s, o, &mx, r, matrices);
        }
        matrix::summaries(&mut s, o, &mx);
        // Pairs within hosts, and the nodes slow on every rail; each rail's parts were said above.
        let mut rest = o.verdict.clone();
        rest.blamed
            .retain(|p| !o.rails.iter().any(|r| r.verdict.blamed.contains(p)));
        rest.cleared
            .retain(|p| !o.rails.iter().any(|r| r.verdict.cleared.contains(p)));
        rest.unstable
            .retain(|x| !o.rails.iter().any(|r| r.verdict.unstable.contains(x)));
        verdict(&mut s, o, &rest);
    }
    paths::paths(&mut s, o);
    connections::slow_links(&mut s, o);
    blamed::unblamed_counters(&mut s, o);
    blamed::pass_line(&mut s, o, &o.verdict);
    s
}

/// The bar, what was cleared and the blamed parts of one verdict (the run's, or a rail's).
fn verdict(s: &mut String, o: &PairwiseOutcome, v: &Verdict) {
    bar::bar_lines(s, o, v);
    blamed::cleared_lines(s, o, v);
    blamed::blamed_lines(s, o, v);
    blamed::unstable_lines(s, o, v);
}

/// How a run's scores read in its text: the unit, a score as the unit shows it, and the word
/// for the slow side of a bar.
struct Scale {
    test: TestKind,
    unit: &'static str,
    /// `below` (bandwidth) or `above` (latency).
    cmp: &'static str,
}

impl Scale {
    fn of(o: &PairwiseOutcome) -> Scale {
        let test = o.config.test;
        Scale {
            test,
            unit: unit(test),
            cmp: if test == TestKind::Bw { "below" } else { "above" },
        }
    }

    /// A verdict score in the unit shown.
    fn val(&self, score: f64) -> f64 {
        score_to_value(self.test, score)
    }
}

/// One rail under `--rails`: its ranks and NICs, its matrix, its bar and its verdict.
fn rail_section(s: &mut String, o: &PairwiseOutcome, mx: &[Vec<Option<f64>>], r: &RailOutcome, matrices: bool) {
    let mut nics: Vec<&str> = r.nics.iter().flatten().map(String::as_str).collect();
    nics.sort_unstable();
    nics.dedup();
    let nics = if nics.is_empty() {
        String::new()
    } else {
        format!(", NIC {}", nics.join(", "))
    };
    let _ = writeln!(
        s,
        "# Rail {} (local rank {}): {} rank(s) on as many hosts{nics}",
        r.rail,
        r.rail,
        r.ranks.len()
    );
    if matrices {
        matrix::matrix_table(s, o, mx, &r.ranks);
    }
    verdict(s, o, &r.verdict);
    let v = &r.verdict;
    let unstable = v.unstable.len();
    // A slow pair of an unstable part is that part's (its line says so), not one more slow pair.
    let steady = v
        .confirmed
        .iter()
        .filter(|p| !v.held_by_unstable(&o.hosts, (p.a, p.b)))
        .count();
    let what = match (v.pass, steady) {
        (true, _) if unstable > 0 => format!("PASS; {unstable} unstable part(s), a warning (--on-unstable warn)"),
        (true, _) => "PASS".to_string(),
        (false, 0) => format!("FAIL: {unstable} unstable part(s) (slow at times, fine at others)"),
        (false, n) if unstable > 0 && !o.config.unstable_warns => {
            format!("FAIL: {n} slow rank pair(s), {unstable} unstable part(s)")
        }
        (false, n) => format!("FAIL: {n} slow rank pair(s)"),
    };
    let _ = writeln!(s, "# Rail {}: {what}", r.rail);
}

/// Distinct host names, in rank order.
fn nodes(o: &PairwiseOutcome) -> Vec<&String> {
    let mut nodes: Vec<&String> = Vec::new();
    for h in &o.hosts {
        if !nodes.contains(&h) {
            nodes.push(h);
        }
    }
    nodes
}

/// Width of the host column.
fn host_width(o: &PairwiseOutcome) -> usize {
    o.hosts.iter().map(String::len).max().unwrap_or(4).max(4)
}
