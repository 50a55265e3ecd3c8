//! Which fabric link the slow connections of a multipath run share (network tomography over
//! `-q N` connections and their traced paths; issue 57, a first cut, not yet in the verdict).
//!
//! A traced path is the routers a connection's 5-tuple crossed, each named by the address it
//! answered from: the interface the probe arrived on, so each hop after the first names the
//! cable it came over. A link here is a pair of consecutive hops (the router it left, the
//! interface it arrived on). Its connections are compared with those that left the same router
//! by another link, on their own figures (not divided by their test's: a test's connections
//! share a host link, and TCP gives the others what a slow one loses, which hides the slow one;
//! docs/evidence/leafspine-paths-2026-12-06/README.md). A link is slow where its connections
//! read below the others by more than [`MIN_DROP`] and a rank test says it is not chance
//! ([`MAX_Z`]). The deepest drop is taken first and its connections set aside, so the same cable
//! seen again through other routers' connections (its other direction, or a link downstream
//! of it) is not named a second time unless it is slow on its own.

use std::collections::BTreeSet;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::connections::Path;
use super::Measurement;
use crate::stats::median;

/// A link is named only where its connections' median is at most this fraction below the
/// alternatives' (a 20% drop).
pub const MIN_DROP: f64 = 0.2;
/// ... and the Mann-Whitney z of "slower" is at most this (one-sided p about 0.0013).
pub const MAX_Z: f64 = -3.0;
/// Connections needed on each side.
pub const MIN_CONNECTIONS: usize = 4;

/// A directed fabric link, named by the interface a connection arrived on at its far router
/// (`to`: one cable's end, whichever router the connection came from) and the addresses the
/// router before it answered from (`from`: one router seen from different directions answers
/// from different interfaces).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub from: Vec<IpAddr>,
    pub to: IpAddr,
}

/// A link named slow, with the figures that show it (Gb/s): its connections against the others
/// that left the same routers by another link or reached the same hosts by another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowLink {
    pub link: Link,
    pub connections: usize,
    pub median: f64,
    pub others: usize,
    pub others_median: f64,
    pub z: f64,
}

/// One traced connection: its figure, the routers it crossed, the host it went to.
struct Traced {
    gbps: f64,
    hops: Vec<IpAddr>,
    dst: IpAddr,
}

impl Traced {
    /// The router before `to` on this path, where it arrived on `to`.
    fn before(&self, to: IpAddr) -> Option<IpAddr> {
        self.hops.windows(2).find(|w| w[1] == to).map(|w| w[0])
    }
}

/// Every connection of `ms` whose path was traced with an answer at every hop.
fn traced(ms: &[Measurement]) -> Vec<Traced> {
    ms.iter()
        .filter(|m| !m.retest)
        .flat_map(|m| &m.connections)
        .filter_map(|c| match &c.path {
            Some(Path::Traced { hops, .. }) if hops.len() >= 2 && hops.iter().all(Option::is_some) => Some(Traced {
                gbps: c.gbps,
                hops: hops.iter().flatten().copied().collect(),
                dst: c.to.ip(),
            }),
            _ => None,
        })
        .filter(|t| t.gbps.is_finite() && t.gbps > 0.0)
        .collect()
}

/// Mann-Whitney U of `a` against `b` as a z score (negative: `a` lower), ties at their mean rank.
pub fn rank_z(a: &[f64], b: &[f64]) -> f64 {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let mut all: Vec<(f64, bool)> = a
        .iter()
        .map(|&x| (x, true))
        .chain(b.iter().map(|&x| (x, false)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut r1 = 0.0;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j < all.len() && all[j].0 == all[i].0 {
            j += 1;
        }
        let rank = (i + j + 1) as f64 / 2.0;
        r1 += rank * all[i..j].iter().filter(|x| x.1).count() as f64;
        i = j;
    }
    let u = r1 - n1 * (n1 + 1.0) / 2.0;
    let sd = (n1 * n2 * (n1 + n2 + 1.0) / 12.0).sqrt();
    (u - n1 * n2 / 2.0) / sd
}

/// The link arriving on `to` judged against its alternatives in `pool`; None where either side
/// has too few connections or it is not slow.
fn judge(pool: &[Traced], to: IpAddr) -> Option<SlowLink> {
    let on: Vec<&Traced> = pool.iter().filter(|t| t.before(to).is_some()).collect();
    let mut from: Vec<IpAddr> = on.iter().filter_map(|t| t.before(to)).collect();
    from.sort();
    from.dedup();
    let dsts: BTreeSet<IpAddr> = on.iter().map(|t| t.dst).collect();
    // The others: left one of the same routers by another link (a diverging branch), or
    // reached one of the same hosts by another (a converging one).
    let mut off: Vec<f64> = pool
        .iter()
        .filter(|t| t.before(to).is_none())
        .filter(|t| dsts.contains(&t.dst) || t.hops.iter().any(|h| from.contains(h)))
        .map(|t| t.gbps)
        .collect();
    let mut on_g: Vec<f64> = on.iter().map(|t| t.gbps).collect();
    if on_g.len() < MIN_CONNECTIONS || off.len() < MIN_CONNECTIONS {
        return None;
    }
    let z = rank_z(&on_g, &off);
    let (n_on, n_off) = (on_g.len(), off.len());
    let (m_on, m_off) = (median(&mut on_g), median(&mut off));
    if m_on > (1.0 - MIN_DROP) * m_off || z > MAX_Z || explained_elsewhere(&on, to, m_off) {
        return None;
    }
    Some(SlowLink {
        link: Link { from, to },
        connections: n_on,
        median: m_on,
        others: n_off,
        others_median: m_off,
        z,
    })
}

/// Whether the link into `to` is slow only through some of its connections: grouped by where
/// they came from before it (the hop before its router, or their source router) or where they
/// went after it (the next hop, or their host), a group of at least [`MIN_CONNECTIONS`] reads
/// above the bar (`others`, their median, less [`MIN_DROP`]): then what slows the rest lies
/// on their own branch, upstream or downstream, not on this link, which all of them cross.
fn explained_elsewhere(on: &[&Traced], to: IpAddr, others: f64) -> bool {
    let fine = (1.0 - MIN_DROP) * others;
    let branch = |t: &Traced, upstream: bool| -> Option<IpAddr> {
        let i = t.hops.iter().position(|&h| h == to)?;
        if upstream {
            Some(if i >= 2 { t.hops[i - 2] } else { t.hops[0] })
        } else {
            Some(t.hops.get(i + 1).copied().unwrap_or(t.dst))
        }
    };
    [true, false].into_iter().any(|upstream| {
        let mut groups: std::collections::BTreeMap<IpAddr, Vec<f64>> = std::collections::BTreeMap::new();
        for t in on {
            if let Some(b) = branch(t, upstream) {
                groups.entry(b).or_default().push(t.gbps);
            }
        }
        groups.len() > 1
            && groups
                .values_mut()
                .any(|g| g.len() >= MIN_CONNECTIONS && median(g) >= fine)
    })
}

/// The slow links of a run's traced connections, deepest drop first, each explaining its
/// connections away before the next is looked for.
pub fn slow_links(ms: &[Measurement]) -> Vec<SlowLink> {
    let mut pool = traced(ms);
    let mut out: Vec<SlowLink> = Vec::new();
    loop {
        let arrivals: BTreeSet<IpAddr> = pool.iter().flat_map(|t| t.hops.iter().skip(1).copied()).collect();
        // The deepest drop first (not the largest z: a link all of whose connections are slow
        // explains them better than one beside it that carries half of them and, with more
        // connections, may have the larger z).
        let best = arrivals
            .into_iter()
            .filter_map(|to| judge(&pool, to))
            .min_by(|a, b| (a.median / a.others_median).total_cmp(&(b.median / b.others_median)));
        let Some(b) = best else { break };
        pool.retain(|t| t.before(b.link.to).is_none());
        out.push(b);
    }
    out
}

#[cfg(test)]
mod tests;
