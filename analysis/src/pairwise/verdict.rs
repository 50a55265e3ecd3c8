//! Which pairs are slow, and which part of the fabric they point to.
//!
//! By default the bar comes from the distribution ([`Bulk`]): a direction (Gb/s; 1/latency for
//! latency tests) is suspect when it lies well below the healthy bulk of its own population,
//! pairs between hosts and pairs within a host being judged apart (they use different paths).
//! Suspect pairs are retested alone, with a few reference pairs from the middle of the bulk
//! retested alone the same way, [`RETEST_PASSES`](super::defaults::RETEST_PASSES) times over
//! (and the pairs still slow then [`CONFIRM_PASSES`](super::defaults::CONFIRM_PASSES) more),
//! each direction counting at its best pass: a suspect is confirmed when, alone, it is still
//! below a bar set under where the references ran alone, by four deviations of the retests' own
//! noise ([`alone_spread`], never less than the 7% floor) or, with too few retests to measure
//! it, by the first pass's relative drop; so a pair is never judged alone against figures
//! measured under load, nor by the first pass's contention. `--threshold F` instead sets the bar
//! at F times the median of all directions (retests judged against the same bar), and
//! `--expect-gbps` is a floor under either rule. Confirmed pairs are then blamed on an uplink, a
//! node, a host link, a
//! NIC or a single rank pair ([`super::blame`]).
//!
//! The parts: `cells` (the first pass's cells by size, pair and population), `bars` (the
//! bars and the suspects), `plan` (what to retest alone), `noise` (the retests' own noise),
//! `settling` (what the confirmation passes run on), `judging` (the verdict), `unstable`
//! (parts slow at times and fine at others) and `small` (the noise of a small population, from
//! its pairs' two directions).

mod alone;
mod bars;
mod cells;
mod judging;
mod noise;
mod on_links;
mod on_paths;
mod plan;
mod settling;
mod small;
mod unstable;

use serde::{Deserialize, Serialize};

pub use alone::{alone_score, judged_for};
pub(super) use bars::rule;
pub use judging::judge_pairs;
pub use noise::{alone_spread, unsteady_at_once};
pub use plan::{plan_retests, plan_retests_in, retest_amount, RetestAmount, RetestPlan};
pub use settling::{settled_in_two, to_confirm};
pub use unstable::{part_holds, Unstable};

pub use super::blame::{Part, SlowPair};
use super::bulk::Bulk;
use super::{Measurement, PairwiseConfig};
use crate::schedule::Pair;

/// What a verdict is drawn from, passed as one: the first pass's measurements (those a slow
/// fabric link does not explain), the retests alone, the run's configuration and each rank's
/// host.
#[derive(Clone, Copy)]
pub(crate) struct Evidence<'a> {
    pub first: &'a [Measurement],
    pub retests: &'a [Measurement],
    pub cfg: &'a PairwiseConfig,
    pub hosts: &'a [String],
}

/// How the bar was set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// From the distribution (the default).
    Robust,
    /// `--threshold F`: F times the median of all directions.
    Threshold(f64),
}

/// Pairs on one host, or on two: judged apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Population {
    BetweenHosts,
    WithinHost,
}

/// One population's bar, and what the references showed alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judged {
    pub population: Population,
    /// A population of one node's pairs over IPC (GPU to GPU, `--use-cuda`): that node, judged
    /// apart from the network's pairs and from other nodes' ([`rails`](super::rails)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub bulk: Bulk,
    /// Reference pairs retested alone (robust rule, when there were suspects).
    pub references: Vec<Pair>,
    /// Median score of the references alone.
    pub reference_alone: Option<f64>,
    /// The bar a retest is judged against.
    pub bar_alone: f64,
    /// What this run could detect: the least drop of a direction's score below the healthy
    /// bulk's median that the rule names (0.07 for 7%; `1 - bar / median`, floor included).
    /// A PASS means no direction fell this far, or none that stayed there when retested alone.
    #[serde(default)]
    pub sensitivity: f64,
    /// How much a direction's score varied from one retest pass to the next (robust standard
    /// deviation of one retest, log units), where it set the bar alone (wider or narrower than
    /// the first pass's relative drop): see [`alone_spread`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alone_spread: Option<f64>,
    /// The retests ran pairs that share no host at once ([`RetestPlan::at_once`]) rather than
    /// one pair at a time: apart from the rounds' traffic either way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retested_at_once: bool,
    /// Retests at once that varied this much from pass to pass and ran again one pair at a time
    /// ([`RetestPlan::at_once_noise`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_once_noise: Option<f64>,
    /// The pairs still slow after two passes were decided on them, without the confirmation
    /// passes ([`RetestPlan::settled`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub settled_in_two_passes: bool,
}

/// The outcome of the checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub rule: Rule,
    /// Per population (between hosts first).
    pub judged: Vec<Judged>,
    /// Suspects of the first pass that were fine when retested alone (slow only under load).
    pub cleared: Vec<Pair>,
    /// Every confirmed slow pair.
    pub confirmed: Vec<SlowPair>,
    /// Where the confirmed pairs point, most general part first.
    pub blamed: Vec<Part>,
    /// Parts slow at times and fine at others: cleared pairs that were slow while the pairs
    /// beside them were not (`verdict/unstable.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unstable: Vec<Unstable>,
    pub pass: bool,
    /// Slow pairs put down to a slow fabric link ([`cables`](super::cables)): their traced
    /// connections across it were slow and their others fine, so they are not in `confirmed`
    /// and not blamed on their hosts; the link itself fails the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fabric: Vec<SlowPair>,
    /// The slow fabric links themselves (`verdict/on_links.rs`): each slowed a pair of
    /// `fabric`. The outcome's `cables` are these (every rail's, with `--rails`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<super::cables::SlowLink>,
    /// With a topology that gives routes (`ibtracert`): the first-pass directions between hosts
    /// (source rank, destination rank) with neither a traced connection nor a route, left out of
    /// the search for slow links rather than given a guessed path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unrouted: Vec<(usize, usize)>,
    /// Each blamed uplink's connections (`-q` over TCP, `--topology`), slow and fine: whether
    /// one of its paths is slow rather than all ([`path_share`](super::path_share)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uplink_paths: Vec<super::path_share::PathShare>,
}

impl Verdict {
    /// Whether the run passes on `confirmed` and `unstable`: nothing slow, and nothing unstable
    /// unless `--on-unstable warn`.
    pub fn passes(confirmed: &[SlowPair], unstable: &[Unstable], cfg: &super::PairwiseConfig) -> bool {
        confirmed.is_empty() && (unstable.is_empty() || cfg.unstable_warns)
    }

    /// Whether rank pair `pair` belongs to one of the unstable parts (`hosts`: each rank's host):
    /// then it is that part's, reported on its line, not on its own.
    pub fn held_by_unstable(&self, hosts: &[String], pair: Pair) -> bool {
        self.unstable.iter().any(|u| part_holds(&u.part, hosts, pair))
    }
}

#[cfg(test)]
mod tests;
