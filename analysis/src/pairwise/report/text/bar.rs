//! The verdict's bar lines: for each population judged, the bar a pair is slow below (`# Slow:`),
//! what the run could have named (`# Sensitivity:`), and the retests alone that settle it.

use std::fmt::Write as _;

use super::Scale;
use crate::pairwise::defaults::{DEVIATIONS, MIN_CELLS, MIN_DROP};
use crate::pairwise::defaults::{FEW_SUSPECTS, QUIET_SPREAD};
use crate::pairwise::verdict::{Judged, Population, Rule, Verdict};
use crate::pairwise::{PairwiseOutcome, TestKind};

/// The bar, the sensitivity and the retests alone of each population `v` judged.
pub(super) fn bar_lines(s: &mut String, o: &PairwiseOutcome, v: &Verdict) {
    let sc = Scale::of(o);
    let floor = match (o.config.test, o.config.expect_gbps) {
        (TestKind::Bw, Some(f)) => format!(", or the floor --expect-gbps {f}"),
        _ => String::new(),
    };
    let (u, cmp) = (sc.unit, sc.cmp);
    for j in &v.judged {
        let b = &j.bulk;
        // A node's pairs over IPC are named under either rule: they have a bar of their own.
        let pop = match (v.judged.len(), j.population, &j.host) {
            (_, _, Some(h)) => format!(" (within {h}, GPU to GPU over IPC)"),
            (1, _, None) => String::new(),
            (_, _, None) if matches!(v.rule, Rule::Threshold(_)) => String::new(),
            (_, Population::BetweenHosts, None) => " (between hosts)".into(),
            (_, Population::WithinHost, None) => " (within a host)".into(),
        };
        let pop = pop.as_str();
        match v.rule {
            Rule::Threshold(f) => {
                let _ = writeln!(
                    s,
                    "# Slow{pop}: {cmp} {:.2} {u} ({:.0}% of the median {:.2} {u}{floor}); suspects are retested alone",
                    sc.val(b.bar),
                    f * 100.0,
                    sc.val(b.median)
                );
                sensitivity(s, &sc, pop, j, false);
            }
            Rule::Robust => {
                let assumed = match (assumed(j), b.small_noise) {
                    (true, _) => " assumed",
                    (false, Some(_)) => " from its pairs' two directions",
                    (false, None) => "",
                };
                let _ = writeln!(
                    s,
                    "# Slow{pop}: {cmp} {:.2} {u}, the larger of {DEVIATIONS} robust deviations and {:.0}% from the healthy bulk \
                     (median {:.2} {u}, spread +-{:.0}%{assumed}, {} of {} cells){floor}",
                    sc.val(b.bar),
                    (1.0 - (-MIN_DROP).exp()) * 100.0,
                    sc.val(b.median),
                    pct(b.spread),
                    b.healthy,
                    b.cells
                );
                sensitivity(s, &sc, pop, j, true);
                retested_alone(s, &sc, pop, j);
            }
        }
    }
}

/// Whether population `j`'s bar rests on an assumed spread: too few healthy cells to measure
/// one, and no noise measured from its pairs' directions (`verdict/small.rs`).
fn assumed(j: &Judged) -> bool {
    j.bulk.healthy < MIN_CELLS && j.bulk.small_noise.is_none()
}

/// A robust spread (log scale) as a percentage either way.
fn pct(spread: f64) -> f64 {
    (spread.exp() - 1.0) * 100.0
}

/// `# Sensitivity: ...`: what the run could have named, from the same bar the verdict used
/// (`robust`: under the robust rule, whose spread may have been assumed).
fn sensitivity(s: &mut String, sc: &Scale, pop: &str, j: &Judged, robust: bool) {
    let d = j.sensitivity.clamp(0.0, 1.0);
    let what = match sc.test {
        // Bandwidth: a fraction below the median.
        TestKind::Bw => format!("{:.0}% or more below", d * 100.0),
        // Latency: the score is 1/latency, so a drop d of it is a rise of 1/(1-d) - 1.
        TestKind::Lat if d < 1.0 => format!("{:.0}% or more above", (1.0 / (1.0 - d) - 1.0) * 100.0),
        TestKind::Lat => "any amount above".to_string(),
    };
    // Where the spread was assumed, the run could not measure its noise: it says so rather
    // than let a PASS read as a measured one.
    let cannot_tell = if robust && assumed(j) {
        format!(
            "; too few cells to measure the noise, so +-{:.0}% was assumed and a smaller drop cannot be told from it",
            pct(j.bulk.spread)
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "# Sensitivity{pop}: a pair {what} the healthy bulk's {:.2} {} would have been named ({} cells judged{cannot_tell})",
        sc.val(j.bulk.median),
        sc.unit,
        j.bulk.cells
    );
}

/// `# Retested alone: ...`: how the suspects were retested, the reference pairs' rate alone and
/// the bar alone (nothing where the population was not retested).
fn retested_alone(s: &mut String, sc: &Scale, pop: &str, j: &Judged) {
    let Some(alone) = j.reference_alone else {
        return;
    };
    let (u, cmp) = (sc.unit, sc.cmp);
    let noise = j.alone_spread.map_or(String::new(), |sd| {
        format!(
            " (4 deviations of the retests' own noise, +-{:.0}% from pass to pass)",
            pct(sd)
        )
    });
    let how = match (j.retested_at_once, j.at_once_noise) {
        (true, None) => " (pairs sharing no host at once: the first pass was quiet)".to_string(),
        (true, Some(sd)) => format!(
            " (pairs sharing no host at once: the first pass was quiet; a pass at once that varied \
             +-{:.0}% from pass to pass ran again one pair at a time)",
            pct(sd)
        ),
        (false, Some(sd)) => format!(
            " (one pair at a time: pairs sharing no host at once varied +-{:.0}% from pass to pass, \
             though the first pass was quiet)",
            pct(sd)
        ),
        (false, None) => String::new(),
    };
    let settled = if j.settled_in_two_passes {
        format!(
            "; two passes settled it (at most {FEW_SUSPECTS} suspect pairs; each direction of the slow ones alike within {:.1}% in both)",
            pct(QUIET_SPREAD)
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "# Retested alone{pop}{how}: the suspects, and {} reference pair(s) from the bulk, which ran at {:.2} {u} alone: \
         {cmp} {:.2} {u} alone is slow{noise}{settled}",
        j.references.len(),
        sc.val(alone),
        sc.val(j.bar_alone)
    );
}
