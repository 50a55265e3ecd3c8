//! A repeated run (`pairwise --repeat N`) on the synthetic fabric: N whole passes, each judged
//! as a run is, then the judgement across them that the run itself makes
//! (`analysis::pairwise::over_time::judge`, the code rank 0 runs).

use analysis::pairwise::blame::Part;
use analysis::pairwise::over_time::{self, Pass};
use analysis::pairwise::topology::Topology;
use analysis::pairwise::PairwiseOutcome;

use super::fabric::{Shape, Slowdown};
use super::noise::{Noise, Rng};
use super::{config, run_pass};

/// What the judgement across the passes named.
pub struct Named {
    /// Named slow in every pass.
    pub slow: Vec<Part>,
    /// Named in some passes and not others (or unstable within one).
    pub unstable: Vec<Part>,
}

impl Named {
    /// Every part named, either way.
    pub fn all(&self) -> impl Iterator<Item = &Part> {
        self.slow.iter().chain(&self.unstable)
    }
}

/// `passes` whole passes over `s`, `fault` slow throughout the passes whose flag in `slow_in`
/// is set and absent from the others (no fault: a clean campaign); the judgement across them.
pub fn campaign(
    s: &Shape,
    noise: Noise,
    fault: Option<Slowdown>,
    slow_in: &[bool],
    topo: Option<&Topology>,
    rng: &mut Rng,
) -> Named {
    let hosts = s.names();
    let passes: Vec<Pass> = slow_in
        .iter()
        .enumerate()
        .map(|(i, &slow)| {
            let j = run_pass(s, noise, fault.filter(|_| slow), topo, rng);
            let outcome = PairwiseOutcome {
                rails: j.rails,
                ..PairwiseOutcome::synthetic(
                    config(s),
                    "synthetic",
                    hosts.clone(),
                    j.rounds,
                    j.first,
                    j.retests,
                    j.verdict,
                )
            };
            Pass {
                index: i + 1,
                start_s: i as f64 * 60.0,
                started_at: i as f64 * 60.0,
                seconds: 60.0,
                outcome,
            }
        })
        .collect();
    let t = over_time::judge(&passes, false);
    Named {
        slow: t.slow.into_iter().map(|x| x.part).collect(),
        unstable: t.unstable.into_iter().map(|x| x.part).collect(),
    }
}

/// Which `of` passes a fault slow in `slow` of them is slow in, chosen at random.
pub fn slow_passes(slow: usize, of: usize, rng: &mut Rng) -> Vec<bool> {
    let mut v = vec![false; of];
    let mut left = slow.min(of);
    while left > 0 {
        let i = rng.below(of);
        if !v[i] {
            v[i] = true;
            left -= 1;
        }
    }
    v
}
