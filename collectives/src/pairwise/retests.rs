//! The retests alone: suspects and references retested one pair at a time (or pairs that share
//! no host side by side), the passes kept in the order they ran, and the watch (a part that may
//! be changing, its pairs retested spaced over time).

use ranks::{Transport, World};

use super::{gather_measurements, measure_pair, share, GpuPairs, PairwiseError};
use analysis::pairwise::{defaults, verdict, Measurement, PairwiseConfig};
use analysis::schedule::{host_disjoint_groups, Pair};

/// Retest `pairs` at the matrix size, `passes` times over (the whole list, then again), so each
/// pair's passes are apart in time; rank 0 gets the results. One pair at a time, or with
/// `at_once` the pairs that share no host together ([`host_disjoint_groups`]): a group's pairs
/// start after one barrier and the next group after the next. The ranks that sit a group out
/// wait in a barrier that sleeps ([`World::barrier_idle`]), so they leave the cores to those
/// measuring.
fn retest(
    world: &World,
    t: &mut dyn Transport,
    cfg: &PairwiseConfig,
    pairs: &[Pair],
    (passes, at_once): (usize, bool),
    gpus: &mut Option<&mut GpuPairs>,
) -> Result<Option<Vec<Measurement>>, PairwiseError> {
    let me = t.rank();
    let groups = if at_once {
        host_disjoint_groups(pairs, world.node_of())
    } else {
        pairs.iter().map(|&p| vec![p]).collect()
    };
    let mut mine = Vec::new();
    for _ in 0..passes {
        for group in &groups {
            let names: Vec<String> = group.iter().map(|(a, b)| format!("{a}-{b}")).collect();
            ranks::postmortem::enter(&format!("retest {}", names.join(" ")));
            if let Some(peer) = analysis::schedule::peer_in(group, me) {
                mine.extend(measure_pair(
                    t,
                    peer,
                    cfg,
                    (cfg.matrix_size(), true),
                    gpus.as_deref_mut(),
                )?);
            }
            world.barrier_idle("end of a retest");
        }
    }
    Ok(gather_measurements(world, &mine, "gathering retest results")?)
}

/// The retests alone so far, in the order they ran (rank 0 holds them), and what they cost.
#[derive(Default)]
pub(super) struct Retests {
    pub measured: Option<Vec<Measurement>>,
    /// Pair retests run, each pass of each pair counted once.
    pub count: usize,
    pub seconds: f64,
    /// The largest pass-to-pass spread of retests at once that ran again alone
    /// ([`verdict::unsteady_at_once`]).
    pub at_once_noise: Option<f64>,
}

impl Retests {
    /// Retest `pairs` in `passes` passes on every rank (alone, or host-disjoint pairs at once)
    /// and keep what rank 0 gathers, after what was retested before. Retests at once that
    /// varied more from pass to pass than a quiet fabric does ([`verdict::unsteady_at_once`],
    /// decided by rank 0) are dropped and run again one pair at a time. Whether the kept ones
    /// ran at once.
    pub(super) fn run(
        &mut self,
        world: &World,
        t: &mut dyn Transport,
        cfg: &PairwiseConfig,
        pairs: &[Pair],
        (passes, at_once): (usize, bool),
        gpus: &mut Option<&mut GpuPairs>,
    ) -> Result<bool, PairwiseError> {
        let started = std::time::Instant::now();
        let mut more = retest(world, t, cfg, pairs, (passes, at_once), gpus)?;
        self.count += pairs.len() * passes;
        let mut held = at_once;
        if at_once {
            let noise = more
                .as_deref()
                .and_then(|ms| verdict::unsteady_at_once(ms, world.hosts()));
            if let Some(sd) = share(world, &noise, "sharing whether the retests at once were steady")? {
                self.at_once_noise = Some(self.at_once_noise.map_or(sd, |n| n.max(sd)));
                more = retest(world, t, cfg, pairs, (passes, false), gpus)?;
                self.count += pairs.len() * passes;
                held = false;
            }
        }
        self.seconds += started.elapsed().as_secs_f64();
        match (self.measured.as_mut(), more) {
            (Some(all), Some(more)) => all.extend(more),
            (None, more) => self.measured = more,
            (Some(_), None) => {}
        }
        Ok(held)
    }
}

impl Retests {
    /// Watch `pairs`: [`WATCH_PASSES`](defaults::WATCH_PASSES) passes of one retest each, one
    /// pair at a time (or, `at_once`, the pairs that share no host together, as the retests
    /// ran), [`WATCH_GAP_S`](defaults::WATCH_GAP_S) apart, so a part that changes is sampled
    /// across its period rather than in one moment; each retest is kept with its pass as its
    /// slot.
    pub(super) fn watch(
        &mut self,
        world: &World,
        t: &mut dyn Transport,
        cfg: &PairwiseConfig,
        (pairs, at_once): (&[Pair], bool),
        gpus: &mut Option<&mut GpuPairs>,
    ) -> Result<(), PairwiseError> {
        let started = std::time::Instant::now();
        for k in 0..defaults::WATCH_PASSES {
            if k > 0 {
                std::thread::sleep(std::time::Duration::from_secs_f64(defaults::WATCH_GAP_S));
            }
            let more = retest(world, t, cfg, pairs, (1, at_once), gpus)?;
            self.count += pairs.len();
            if let (Some(all), Some(more)) = (self.measured.as_mut(), more) {
                all.extend(more.into_iter().map(|m| Measurement {
                    slot: Some(k as u32),
                    ..m
                }));
            }
        }
        self.seconds += started.elapsed().as_secs_f64();
        Ok(())
    }
}
