//! Every default of a pairwise run in one place: the sizes and warm-up a run measures with, the
//! bar's constants ([`super::bulk`]), how the verdict retests and confirms ([`super::verdict`]),
//! and how large a follow-up is ([`super::follow_up`]). Each says why it is what it is; the
//! measurements behind those reasons are under `docs/evidence/`, named beside each.

// What a run measures.

/// The sizes of a sweep (`-a`), as perftest's: 2 B .. 8 MiB by powers of two.
pub fn sweep_sizes() -> Vec<usize> {
    (1..=23).map(|p| 1usize << p).collect()
}

/// Bytes a bandwidth test moves before timing, by default: past TCP's slow start (about half a
/// MiB on a 100 Gb/s, 20 us path) with room to spare, a small part of any timed run. Each shift
/// slot and retest pays it again at the slowest pair's rate (8 MiB is 0.2 s a slot at 400
/// Mbit/s, a tenth of the rounds), and 2 MiB reads healthy cells as 8 MiB does (within 0.16%). A
/// larger warm-up does not help a loaded machine: its shaper stalls every stream of a slot at
/// once whatever the warm-up, and the first pass reads that as a noisy fabric. Evidence:
/// `docs/evidence/pairwise-vs-mpigraph-2026-12-05/` (the warm-ups alternated under load, and the
/// receivers' arrival gaps).
pub const WARMUP_BYTES: usize = 2 << 20;

/// The fewest warm-up messages by default: in the shift rounds a receiver's clock starts when
/// the last warm-up message arrives, so the stream has run for a message before it does.
pub const MIN_WARMUP: u64 = 2;

/// The default warm-up of a bandwidth test at `size` (the largest of the run): [`WARMUP_BYTES`]
/// in messages, at least [`MIN_WARMUP`] and at most one window (`tx_depth`): 32 at 64 KiB, 2 at
/// 1 MiB.
pub fn default_bw_warmup(size: usize, tx_depth: u64) -> u64 {
    let n = WARMUP_BYTES.div_ceil(size.max(1)) as u64;
    n.clamp(MIN_WARMUP.min(tx_depth), tx_depth.max(1))
}

// The bar (the healthy bulk).

/// How many robust standard deviations below the bulk's centre a score must be to be slow.
pub const DEVIATIONS: f64 = 4.0;

/// The least drop that counts: 7% below the bulk's centre (ln(1/0.93)), HPC-X ClusterKit's
/// bar for a bad pair (below 93% of the best). On a quiet fabric (real InfiniBand and RoCE
/// pairs agree within about 1%) four deviations are less than this, so a link that lost 10% is
/// named; a noisy fabric's bar comes from its spread, and the retests alone against references
/// alone confirm every suspect.
pub const MIN_DROP: f64 = 0.072_570_692_834_835_4;

/// The spread assumed when the bulk has fewer than [`MIN_CELLS`] cells to estimate it from
/// (+-40%, what a short run on a busy machine shows): a pair of ranks alone cannot tell noise
/// from a fault, so only a factor of about 4 counts there.
pub const PRIOR_SPREAD: f64 = 0.35;

/// The least gap (log units: a factor of 3) that separates a slow group from the healthy bulk
/// whatever the bulk's own spread: on a busy machine a healthy bulk can spread over a factor of
/// 10, yet nothing healthy sits in an empty factor-of-3 interval below a quarter of the cells.
pub const GAP: f64 = 1.098_612_288_668_109_8;

/// Cells needed to estimate the spread from the data (fewer: [`PRIOR_SPREAD`]). A handful of
/// cells on a busy machine can look bimodal by chance: 8 is where the MAD stops being fooled
/// by that on the namespace clusters.
pub const MIN_CELLS: usize = 8;

/// Cells a population needs to be judged by its own spread alone (fewer: at least the spread of
/// the run's other, larger population).
pub const OWN_NOISE_CELLS: usize = 16;

// Retests alone.

/// Reference pairs retested alone per population that has suspects.
pub const REFERENCES: usize = 2;

/// How many times each suspect and reference is retested alone (the whole list, then again). A
/// direction counts at its best retest: a slow link is slow every time, while a healthy one that
/// a moment's load (another process, an interrupt storm) slowed in one retest is rarely slowed
/// the same way in the next, so a single hiccup does not confirm a healthy pair.
pub const RETEST_PASSES: usize = 2;

/// Further passes alone for the pairs still slow after [`RETEST_PASSES`]: a healthy direction
/// that a busy machine slowed in both passes is rarely slowed in two more, and with a hundred
/// suspects (a noisy first pass) some direction is slowed twice by chance; a slow link is slow
/// every time. Two, not one, since the bar alone comes from the retests' typical noise (the
/// median difference) while a busy machine's noise has a tail (a pass slowed to a half or a
/// quarter by contention) that the median does not see: on the synthetic campaign's noise
/// models two passes keep clean fabrics clean where one does not. Only confirmed pairs run
/// them, so a clean run pays nothing. Evidence:
/// `docs/evidence/confirm-skip-tail-model-2026-12-05/`.
pub const CONFIRM_PASSES: usize = 2;

/// The most suspect pairs whose confirmed ones may skip the [`CONFIRM_PASSES`]
/// ([`super::verdict::settled_in_two`]): with two suspect pairs there are four directions for
/// chance to slow alike twice, while with hundreds some healthy direction is. Evidence:
/// `docs/evidence/settled-in-two-2026-12-05/` (and, without this bound,
/// `docs/evidence/confirm-skip-tail-model-2026-12-05/`).
pub const FEW_SUSPECTS: usize = 2;

/// Seconds one retest direction is given at the slowest population's median rate of the first
/// pass, where the first pass's count takes longer. The first pass's count sets how precisely a
/// cell shows against the others measured at once; a retest only has to place one direction
/// against its references, and the bar alone is set from the retests' own pass-to-pass noise
/// ([`super::verdict::alone_spread`]): a shorter retest that is noisier widens that bar instead
/// of naming a healthy pair. Retests of a tenth of a second kept the bar alone at the 7% floor
/// on the shaped namespace cluster (its directions' two passes within about 2%). On RDMA at line
/// rate perftest's default 5,000 messages of 64 KiB take 26 ms at 100 Gb/s, so real fabrics keep
/// the count they were given. Evidence: `docs/evidence/pairwise-vs-mpigraph-2026-12-05/` and
/// `docs/evidence/verdict-netns-2026-12-05/`.
pub const RETEST_SECONDS: f64 = 0.1;

/// The fewest messages a shortened retest sends.
pub const MIN_RETEST_ITERATIONS: u64 = 4;

/// The fewest warm-up messages a shortened retest sends, where the first pass sent as many:
/// a retest's clock starts on an empty pipe after the warm-up's acknowledgement, and one message
/// of warm-up left some directions' two passes several percent apart where two kept every
/// direction within 0.6% on the shaped cluster. Evidence:
/// `docs/evidence/pairwise-vs-mpigraph-2026-12-05/`.
pub const MIN_RETEST_WARMUP: u64 = 2;

/// The largest healthy spread (robust deviation of the log scores) at which the retests of pairs
/// that share no host run at once. The first pass ran such pairs at once, so a bulk this tight
/// says concurrency did not disturb them: on a quiet fabric (the shaped namespace cluster,
/// +-1%; InfiniBand and RoCE pairs, +-0.5%) each retest pass then takes one pair's time instead
/// of one per pair, and the suspect and its references are measured side by side at the same
/// moment. A busy machine's first pass (TCP ranks outnumbering cores: +-10-30%) shows that pairs
/// at once contend for the CPU, and there each pair is retested alone. Quiet means most of the
/// pass agreed: the healthy bulk (grown from the fastest quarter) must also hold more than half
/// the cells, since under a load that starves the ranks the fastest few cells can agree within
/// 1% while the rest spread 30% below them. And the retests at once are held to the same bar
/// afterwards ([`super::verdict::unsteady_at_once`]), since a machine's load can change after
/// the first pass. Evidence: `docs/evidence/pairwise-vs-mpigraph-2026-12-05/` and
/// `docs/evidence/retest-idle-barrier-2026-12-05/`.
pub const QUIET_SPREAD: f64 = 0.025;

/// Pass-to-pass differences needed to estimate the retests' noise: the six directions of the
/// fewest pairs a population retests (one suspect and its two references).
pub const ALONE_DIFFS: usize = 6;

// A follow-up after a quick pattern.

/// Suspect ranks taken into the follow-up at most (the rest are reported from the quick pass).
pub const MAX_FOLLOW_UP_SUSPECTS: usize = 64;

/// Healthy reference ranks per group of suspects (per rail under `--rails`).
pub const FOLLOW_UP_REFERENCE_RANKS: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_warmup_moves_2_mib_within_one_window() {
        assert_eq!(default_bw_warmup(65536, 128), 32, "the default size");
        assert_eq!(default_bw_warmup(1 << 20, 128), 2);
        assert_eq!(default_bw_warmup(256 << 10, 128), 8);
        assert_eq!(default_bw_warmup(8 << 20, 128), 2, "never fewer than 2");
        assert_eq!(default_bw_warmup(4096, 128), 128, "never more than the window");
        assert_eq!(default_bw_warmup(4096, 4), 4);
        assert_eq!(default_bw_warmup(3 << 20, 2), 2);
        assert_eq!(default_bw_warmup(1 << 20, 1), 1);
    }
}
