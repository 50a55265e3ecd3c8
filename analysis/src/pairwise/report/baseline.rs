//! `--baseline GOOD.json`: the comparison with an earlier good run as text ([`BaselineText`]),
//! after the run's own report: what was compared, what it could detect, each part slower than
//! before (named as [`Part::phrase`](crate::pairwise::blame::Part::phrase) says), and a closing
//! `# BASELINE PASS` or `# BASELINE FAIL`.

use std::fmt::Write as _;

use super::part::{Members, Voice};
use crate::export::{ExportError, Exporter};
use crate::pairwise::baseline::Comparison;
use crate::pairwise::verdict::Population;

/// The comparison's text, against the baseline file `baseline` (as the user named it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaselineText<'a> {
    pub baseline: &'a str,
}

impl Exporter<Comparison> for BaselineText<'_> {
    fn render(&self, c: &Comparison) -> Result<Vec<u8>, ExportError> {
        Ok(render(c, self.baseline).into_bytes())
    }
}

/// The comparison's lines, against the baseline file `baseline`.
pub fn render(c: &Comparison, baseline: &str) -> String {
    let mut s = String::new();
    let v = &c.verdict;
    let _ = writeln!(
        s,
        "# Baseline: {baseline}: {} directions measured in both runs",
        c.cells
    );
    for j in &v.judged {
        let pop = match (v.judged.len(), j.population) {
            (1, _) => "",
            (_, Population::BetweenHosts) => " between hosts",
            (_, Population::WithinHost) => " within a host",
        };
        let _ = writeln!(
            s,
            "# Baseline{pop}: now / then median {:.0}%, spread +-{:.0}%; a pair {:.0}% or more slower than in the baseline would have been named",
            j.bulk.median,
            (j.bulk.spread.exp() - 1.0) * 100.0,
            j.sensitivity * 100.0
        );
    }
    if let Some((median, bar)) = c.fabric {
        let _ = writeln!(
            s,
            "# SLOWER THAN BASELINE: the fabric as a whole: its directions run at a median {median:.0}% of the baseline, \
             below the {bar:.0}% its spread allows"
        );
    }
    // The scores compared are percent of the baseline.
    for part in &v.blamed {
        let head = part.phrase(Voice::Baseline);
        let _ = match part.members() {
            Members::Counts(k) => writeln!(
                s,
                "# SLOWER THAN BASELINE: {head}; worst {:.0}% of the baseline",
                k.worst
            ),
            Members::Pair(p) => writeln!(s, "# SLOWER THAN BASELINE: {head}: {:.0}% of the baseline", p.first),
        };
    }
    if c.pass() {
        let _ = writeln!(s, "# BASELINE PASS: nothing slower than in {baseline}");
    } else {
        let whole = if c.fabric.is_some() {
            "the fabric as a whole and "
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "# BASELINE FAIL: {whole}{} rank pair(s) slower than in {baseline}",
            v.confirmed.len()
        );
    }
    s
}
