//! The verdict itself: each population's bar alone from its references and the retests' noise,
//! each suspect confirmed or cleared against it, and the confirmed pairs blamed.

use super::alone::{judged_for, worst_of_best};
use super::bars::{bars, rule, slow_pair, suspect_pairs};
use super::cells::{at_matrix_size, by_pair, distinct_pairs};
use super::noise::alone_spread;
use super::on_links::off_links;
use super::on_paths::on_paths;
use super::plan::RetestPlan;
use super::unstable::{holds, unstable_parts};
use super::{Evidence, Judged, Population, Rule, Verdict};
use crate::pairwise::blame::{blame, SlowPair};
use crate::pairwise::bulk::Bulk;
use crate::pairwise::defaults::{DEVIATIONS, MIN_DROP};
use crate::pairwise::path_share::path_shares;
use crate::pairwise::topology::Topology;
use crate::pairwise::{Measurement, PairwiseConfig, TestKind};
use crate::schedule::Pair;
use crate::stats::median;

/// Bars alone closer than this (as a fraction of the references alone) are the same bar: the
/// retests' noise is reported only where it moved the bar.
const KEEP_EPSILON: f64 = 1e-9;

/// Judge the pairs, from the first pass and the retests (of suspects and references): each
/// population's bar alone, each suspect confirmed or cleared against it,
/// and the confirmed pairs blamed.
pub fn judge_pairs(
    first: &[Measurement],
    retests: &[Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    plan: &RetestPlan,
    topology: Option<&Topology>,
) -> Verdict {
    // Pairs slow through a slow fabric link (their traced connections across it slow, the
    // others fine) are the link's: judged apart from the rest, not blamed on their hosts, nor
    // judged unstable (alone, a pair's new connections hash anew and may miss the link).
    let whole = first;
    let apart = off_links(whole, cfg, hosts, topology);
    let first: &[Measurement] = &apart.rest;
    let bars = bars(first, cfg, hosts);
    let judged: Vec<Judged> = bars
        .iter()
        .map(|(p, bulk)| judge_population(*p, bulk, retests, cfg, hosts, plan))
        .collect();
    // Without traces, pairs slow through one of an uplink's paths are confirmed from the first
    // pass: alone their load would move to the fine paths (`on_paths.rs`).
    let paths = on_paths(first, cfg, hosts, topology);
    let evidence = Evidence {
        first,
        retests,
        cfg,
        hosts,
    };
    let (confirmed, cleared) = confirm_suspects(evidence, &bars, &judged, &paths);
    let fabric = below_the_bar(whole, cfg, hosts, &bars, &apart.on);
    let tested = distinct_pairs(at_matrix_size(first, cfg));
    let unstable = unstable_parts(evidence, &bars, &judged, &cleared, &confirmed, topology);
    // A pair slow alone that belongs to an unstable part is that part's: blamed once, as it.
    let steady: Vec<SlowPair> = confirmed
        .iter()
        .filter(|p| !unstable.iter().any(|u| holds(&u.part, hosts, p)))
        .cloned()
        .collect();
    let blamed = blame(hosts, &tested, &steady, topology);
    let uplink_paths = topology.map_or(Vec::new(), |t| path_shares(whole, hosts, &blamed, t));
    Verdict {
        rule: rule(cfg),
        judged,
        cleared,
        blamed,
        uplink_paths,
        pass: Verdict::passes(&confirmed, &unstable, cfg),
        unstable,
        confirmed,
        fabric,
        links: apart.links,
        unrouted: apart.unrouted,
    }
}

/// One population's judgement: its references alone and the bar a retest is held to.
fn judge_population(
    p: Population,
    bulk: &Bulk,
    retests: &[Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    plan: &RetestPlan,
) -> Judged {
    let refs: Vec<Pair> = plan
        .references
        .iter()
        .copied()
        .filter(|&(a, b)| (hosts[a] == hosts[b]) == (p == Population::WithinHost))
        .collect();
    let mut alone: Vec<f64> = retests
        .iter()
        .filter(|m| refs.contains(&m.pair()))
        .map(Measurement::score)
        .collect();
    let reference_alone = (!alone.is_empty()).then(|| median(&mut alone));
    // Below where the references ran alone: by four deviations of the retests' own
    // noise where there are enough retests to measure it (never less than the floor),
    // else by the first pass's relative drop. The retests run one pair at a time, so
    // their noise is theirs, not the first pass's contention: it widens the bar where a
    // pair alone varies more than the first pass showed, and narrows it where the first
    // pass was far noisier than a pair alone (a busy machine's first pass can spread over
    // a factor of 3, and a node at a fiftieth was cleared alone against a bar at 2%).
    let mut keep = bulk.bar / bulk.median.max(f64::MIN_POSITIVE);
    let mut from_noise = None;
    if let (Rule::Robust, Some(r)) = (rule(cfg), reference_alone) {
        if let Some(sd) = alone_spread(retests, hosts, p, r) {
            let k = (-(DEVIATIONS * sd).max(MIN_DROP)).exp();
            if (k - keep).abs() > KEEP_EPSILON {
                keep = k;
                from_noise = Some(sd);
            }
        }
    }
    let mut bar_alone = reference_alone.map_or(bulk.bar, |r| r * keep);
    if let (TestKind::Bw, Some(f)) = (cfg.test, cfg.expect_gbps) {
        bar_alone = bar_alone.max(f);
    }
    Judged {
        population: p,
        host: None,
        sensitivity: bulk.drop_fraction().max(1.0 - keep),
        bulk: *bulk,
        references: refs,
        reference_alone,
        bar_alone,
        alone_spread: from_noise,
        retested_at_once: plan.at_once && reference_alone.is_some(),
        at_once_noise: plan.at_once_noise.filter(|_| reference_alone.is_some()),
        settled_in_two_passes: plan.settled && reference_alone.is_some(),
    }
}

/// The pairs of `on_links` (slow through a slow fabric link) with a direction below the bar the
/// rest of the first pass drew, as slow pairs: reported with the links, never retested.
fn below_the_bar(
    whole: &[Measurement],
    cfg: &PairwiseConfig,
    hosts: &[String],
    bars: &[(Population, Bulk)],
    on_links: &std::collections::BTreeSet<Pair>,
) -> Vec<SlowPair> {
    let rule = rule(cfg);
    let of = by_pair(at_matrix_size(whole, cfg).filter(|m| on_links.contains(&m.pair())));
    let mut out: Vec<SlowPair> = of
        .into_iter()
        .map(|(p, ms)| slow_pair(p, &ms, bars, rule, hosts))
        .filter(|p| !p.directions.is_empty())
        .collect();
    out.sort_by_key(|p| (p.a, p.b));
    out
}

/// The suspects of the first pass, confirmed (still below their population's bar alone, or not
/// retested) or cleared.
fn confirm_suspects(
    evidence: Evidence<'_>,
    bars: &[(Population, Bulk)],
    judged: &[Judged],
    on_paths: &std::collections::BTreeSet<Pair>,
) -> (Vec<SlowPair>, Vec<Pair>) {
    let Evidence {
        first,
        retests,
        cfg,
        hosts,
    } = evidence;
    let rule = rule(cfg);
    let alone_bar = |pair: Pair| judged_for(judged, rule, hosts, pair).map_or(0.0, |j| j.bar_alone);
    let mut confirmed = Vec::new();
    let mut cleared = Vec::new();
    let first_of = by_pair(at_matrix_size(first, cfg));
    let retest_of = by_pair(retests.iter());
    for (a, b) in suspect_pairs(first, cfg, hosts, bars) {
        let re: Vec<&Measurement> = if on_paths.contains(&(a, b)) {
            Vec::new()
        } else {
            retest_of.get(&(a, b)).cloned().unwrap_or_default()
        };
        let worst_re = worst_of_best(&re);
        let retested = !re.is_empty();
        if retested && worst_re >= alone_bar((a, b)) {
            cleared.push((a, b));
            continue;
        }
        let mine = first_of.get(&(a, b)).map_or(&[][..], Vec::as_slice);
        confirmed.push(SlowPair {
            retest: retested.then_some(worst_re),
            ..slow_pair((a, b), mine, bars, rule, hosts)
        });
    }
    (confirmed, cleared)
}
