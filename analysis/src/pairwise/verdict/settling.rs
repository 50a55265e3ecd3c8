//! After the retest passes: which pairs run the confirmation passes, and when two passes settle
//! them without.

use super::plan::RetestPlan;
use super::Verdict;
use crate::pairwise::defaults::{FEW_SUSPECTS, QUIET_SPREAD, RETEST_PASSES};
use crate::pairwise::Measurement;
use crate::schedule::Pair;

/// The pairs to retest once more before the verdict is final: those confirmed slow by their
/// retests (never those confirmed without one).
pub fn to_confirm(v: &Verdict) -> Vec<Pair> {
    let mut p: Vec<Pair> = v
        .confirmed
        .iter()
        .filter(|c| c.retest.is_some())
        .map(|c| (c.a, c.b))
        .collect();
    p.sort_unstable();
    p.dedup();
    p
}

/// Whether the pairs still slow after [`RETEST_PASSES`] (`still`, from [`to_confirm`]) are
/// settled without the [`CONFIRM_PASSES`](crate::pairwise::defaults::CONFIRM_PASSES): the retests ran at
/// once on a quiet first pass and stayed steady ([`RetestPlan::at_once`], no
/// [`RetestPlan::at_once_noise`]), at most [`FEW_SUSPECTS`] pairs were suspect, and every
/// retested direction of `still` read alike within [`QUIET_SPREAD`] in each of its passes. The
/// confirmation passes guard against chance: with hundreds of suspects some healthy direction is
/// slowed in both passes, while with two suspect pairs there are four directions for chance to
/// hit twice, alike within 2.5%, and a slow link reads alike every pass. Evidence:
/// `docs/evidence/settled-in-two-2026-12-05/` and `docs/evidence/confirm-skip-tail-model-2026-12-05/`.
pub fn settled_in_two(plan: &RetestPlan, retests: &[Measurement], still: &[Pair]) -> bool {
    let few = plan.suspects.len() <= FEW_SUSPECTS && plan.paths.is_empty();
    if still.is_empty() || !plan.at_once || plan.at_once_noise.is_some() || !few {
        return false;
    }
    let alike = |src: usize, dst: usize| {
        let v: Vec<f64> = retests
            .iter()
            .filter(|m| (m.src, m.dst) == (src, dst))
            .map(Measurement::score)
            .filter(|s| s.is_finite() && *s > 0.0)
            .collect();
        let (lo, hi) = v
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), &s| (lo.min(s), hi.max(s)));
        v.len() >= RETEST_PASSES && (hi / lo).ln() <= QUIET_SPREAD
    };
    still.iter().all(|&(a, b)| alike(a, b) && alike(b, a))
}
