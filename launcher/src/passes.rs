//! The passes of `meshrun pairwise` on each rank: one pass (`collectives::pairwise::run`) with
//! the NIC's counters read just before and just after it, and `--repeat`/`--repeat-for`'s loop
//! of passes, judged over time on rank 0 (`analysis::pairwise::over_time`).
//!
//! Rank 0 decides whether another pass starts ([`Repeats::another`]) and every rank learns it
//! by one broadcast, bounded by the MPI deadline as every MPI step is; rank 0 prints the
//! progress line before each pass.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use analysis::pairwise::over_time::{self, plan::Repeats, Pass};
use analysis::pairwise::rails::Fabric;
use analysis::pairwise::{PairwiseConfig, PairwiseOutcome};
use collectives::pairwise;
use collectives::progress::Progress;

use crate::exit::RankFailure;
use crate::rank::Mesh;

/// What one pass needs besides the mesh.
pub struct PassSetup<'a> {
    pub cfg: &'a PairwiseConfig,
    pub fabric: Fabric<'a>,
    /// `--sysfs-root`, where the counters are read.
    pub sysfs_root: &'a Path,
}

/// One pass: the rounds, retests and verdict, with the counters that moved on every rank's NIC
/// meanwhile (rank 0 gets the outcome).
pub fn one(
    world: &ranks::World,
    t: &mut Mesh,
    setup: &PassSetup,
    progress: &mut Progress,
    gpus: Option<&mut pairwise::GpuPairs>,
) -> Result<Option<PairwiseOutcome>, RankFailure> {
    // The NIC's counters before and after the traffic: what moved is evidence beside a blamed
    // part (analysis::counters).
    let read_counters =
        |t: &Mesh| ranks::counters::snapshot(setup.sysfs_root, Path::new("/proc"), t.kind(), &t.endpoint());
    let before = read_counters(&*t);
    let mut outcome = pairwise::run(world, t, setup.cfg, (setup.fabric, progress), gpus)?;
    let after = read_counters(&*t);
    let counters = gather_counters(world, &before, &after)?;
    if let Some(o) = outcome.as_mut() {
        o.counters = analysis::counters::per_source(counters.unwrap_or_default().into_iter().flatten().collect());
    }
    Ok(outcome)
}

/// Passes until `repeats` says stop (rank 0 decides, every rank follows), then on rank 0 the
/// last pass's outcome holding every pass and the judgement across them.
pub fn repeated(
    world: &ranks::World,
    t: &mut Mesh,
    setup: &PassSetup,
    repeats: Repeats,
    progress: &mut Progress,
    mut gpus: Option<&mut pairwise::GpuPairs>,
) -> Result<Option<PairwiseOutcome>, RankFailure> {
    let first = Instant::now();
    let mut took: Vec<f64> = Vec::new();
    let mut passes: Vec<Pass> = Vec::new();
    loop {
        let elapsed = first.elapsed().as_secs_f64();
        let go = world.rank() == 0 && repeats.another(&took, elapsed);
        let go = world.broadcast_vec(&[u8::from(go)], "deciding whether another pass starts");
        if go.first() != Some(&1) {
            break;
        }
        let index = took.len() + 1;
        if world.rank() == 0 {
            crate::rank::say(&repeats.progress(index, &took, elapsed));
        }
        ranks::postmortem::enter(&format!("pairwise pass {index}"));
        let started_at = collectives::output::unix_seconds();
        let start = Instant::now();
        let outcome = one(world, t, setup, progress, gpus.as_deref_mut())?;
        let seconds = start.elapsed().as_secs_f64();
        took.push(seconds);
        if let Some(outcome) = outcome {
            passes.push(Pass {
                index,
                start_s: start.duration_since(first).as_secs_f64(),
                started_at,
                seconds,
                outcome,
            });
        }
    }
    let Some(last) = passes.last() else {
        return Ok(None);
    };
    let mut o = last.outcome.clone();
    o.over_time = Some(over_time::judge(&passes, setup.cfg.unstable_warns));
    o.repeats = passes;
    Ok(Some(o))
}

/// Every rank's counters that moved between `before` and `after`, gathered to rank 0.
fn gather_counters(
    world: &ranks::World,
    before: &[ranks::counters::Counters],
    after: &[ranks::counters::Counters],
) -> Result<Option<Vec<Vec<MovedCounters>>>, RankFailure> {
    let mine: Vec<MovedCounters> = counter_deltas(before, after)
        .into_iter()
        .map(|(source, d)| (world.rank(), world.host().to_string(), source, d))
        .collect();
    Ok(collectives::gather_json(world, &mine, "gathering port counters")?)
}

/// One rank's counters of one source that moved: rank, host, source, the deltas.
type MovedCounters = (usize, String, String, BTreeMap<String, u64>);

/// What moved between two snapshots of this rank's counters, as `analysis::counters` takes them.
fn counter_deltas(
    before: &[ranks::counters::Counters],
    after: &[ranks::counters::Counters],
) -> Vec<(String, BTreeMap<String, u64>)> {
    use analysis::counters::{deltas, Snapshot};
    let snap = |c: &[ranks::counters::Counters]| -> Vec<Snapshot> {
        c.iter()
            .map(|(source, values)| Snapshot {
                source: source.clone(),
                values: values.clone(),
            })
            .collect()
    };
    deltas(&snap(before), &snap(after))
        .into_iter()
        .filter(|(_, d)| !d.is_empty())
        .collect()
}
