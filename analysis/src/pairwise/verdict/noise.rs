//! The retests' own noise, from pass to pass: what sets the bar alone, and what says retests
//! run at once did not stay steady.

use std::collections::HashMap;

use super::cells::population;
use super::small::certainly_slow;
use super::Population;
use crate::pairwise::defaults::{ALONE_DIFFS, QUIET_SPREAD};
use crate::pairwise::Measurement;
use crate::stats::{median, sd_from_abs_lower_median, MAD_TO_SD};

/// How much one retest alone varies, from the retests themselves: each direction retested in
/// [`RETEST_PASSES`](crate::pairwise::defaults::RETEST_PASSES) passes gives the differences of its
/// log scores from pass to pass, and their lower median (scaled, a difference being two draws:
/// [`sd_from_abs_lower_median`]) is the robust standard deviation of one retest (log units). The
/// lower median, since with the fewest differences (six: one suspect and two references) a stall
/// that slowed one pass of three directions takes the plain median with it and widens the bar alone
/// past a slow link; the best-of-passes scores and the confirmation passes, not this bar, are what
/// stand against such a tail (evidence: `docs/evidence/settled-in-two-2026-12-05/`, the
/// lower-median runs). A slow link is slow in every pass, so a fault does not add to it: it is the
/// measurement's own noise alone, which the first pass under load cannot show. On a quiet fabric it
/// is about 1% and changes nothing; on a busy machine (TCP ranks outnumbering cores) a pair alone
/// can vary by a quarter between passes, and a bar 7% below the references would confirm healthy
/// pairs; and where the first pass's contention spread the cells over a factor of several while a
/// pair alone varies by a few percent, the first pass's bar would clear a pair alone at a fiftieth
/// of the references. None for fewer than [`ALONE_DIFFS`] differences.
///
/// Directions certainly slow (`verdict/small.rs`) under the references alone (`reference_alone`, score units) are
/// left out where the others give [`ALONE_DIFFS`] differences: a part down to a floor measures the
/// same every pass, and a dead node's ten steady directions took the lower median to nought, the
/// bar alone to the 7% floor, while its healthy neighbours alone varied by a fifth. With fewer
/// left, every direction counts, as where a noisy first pass left only the references and a
/// node at a fiftieth to measure the noise from.
///
/// The differences follow the order of `retests`, which is pass order: each rank appends its passes
/// as it runs them, the gather keeps each rank's order, and a confirmation pass
/// ([`CONFIRM_PASSES`](crate::pairwise::defaults::CONFIRM_PASSES)) comes after both others, adding
/// one difference per direction and pass.
pub fn alone_spread(retests: &[Measurement], hosts: &[String], p: Population, reference_alone: f64) -> Option<f64> {
    let centre = reference_alone.max(f64::MIN_POSITIVE).ln();
    let healthy = pass_diffs(retests, hosts, p, |best| !certainly_slow(best, centre));
    let mut diffs = if healthy.len() >= ALONE_DIFFS {
        healthy
    } else {
        pass_diffs(retests, hosts, p, |_| true)
    };
    (diffs.len() >= ALONE_DIFFS).then(|| sd_from_abs_lower_median(&mut diffs) / std::f64::consts::SQRT_2)
}

/// Whether retests run at once ([`RetestPlan::at_once`](super::RetestPlan::at_once)) kept the first
/// pass's promise: the largest pass-to-pass spread (robust standard deviation of one retest, log
/// units, as [`alone_spread`]) of a population in `retests` when it is above [`QUIET_SPREAD`], else
/// None. The first pass being quiet says pairs at once did not disturb each other then; a machine
/// whose load changes after it (another job) can still make the retests at once vary by a tenth
/// from pass to pass, and the bar alone, four such deviations wide, would then clear a node at 85%
/// (evidence: `docs/evidence/retest-idle-barrier-2026-12-05/`). Retests that fail this are run
/// again one pair at a time. Any difference counts here (a gate, not a bar): a population with a
/// single pair retested twice is judged on it.
pub fn unsteady_at_once(retests: &[Measurement], hosts: &[String]) -> Option<f64> {
    [Population::BetweenHosts, Population::WithinHost]
        .into_iter()
        .filter_map(|p| pass_to_pass(retests, hosts, p))
        .filter(|&sd| sd > QUIET_SPREAD)
        .reduce(f64::max)
}

/// The robust standard deviation of one measurement from its pass-to-pass differences (log
/// units, their plain median), None where there is no difference.
fn pass_to_pass(retests: &[Measurement], hosts: &[String], p: Population) -> Option<f64> {
    let mut diffs = pass_diffs(retests, hosts, p, |_| true);
    (!diffs.is_empty()).then(|| MAD_TO_SD * median(&mut diffs) / std::f64::consts::SQRT_2)
}

/// The absolute differences of each direction's log scores from one retest pass to the next,
/// of the directions whose best log score passes `keep`.
fn pass_diffs(retests: &[Measurement], hosts: &[String], p: Population, keep: impl Fn(f64) -> bool) -> Vec<f64> {
    let mut by_dir: HashMap<(usize, usize), Vec<f64>> = HashMap::new();
    for m in retests.iter().filter(|m| population(hosts, m) == p) {
        let s = m.score();
        if s > 0.0 {
            by_dir.entry((m.src, m.dst)).or_default().push(s.ln());
        }
    }
    by_dir
        .values()
        .filter(|v| keep(v.iter().copied().fold(f64::NEG_INFINITY, f64::max)))
        .flat_map(|v| v.windows(2).map(|w| (w[1] - w[0]).abs()))
        .collect()
}
