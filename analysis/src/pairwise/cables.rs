//! Which fabric link the slow connections of a multipath run share (network tomography over
//! `-q N` connections and their traced paths; issue 57). The pairs a slow link explains are the
//! link's, not their hosts' ([`explained_pairs`], applied in the verdict).
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
//!
//! On InfiniBand nothing is traced: each direction's path is the subnet manager's route, which
//! `--topology` may give (`ibtracert` files, [`Topology::route`]). A first-pass direction none
//! of whose connections was traced takes its hosts' route as its one path, at its own figure
//! ([`Routes`]): each switch after the first named by the port the route arrived on (the
//! cable's far end, as a traced hop is), the first by the switch alone (the leaf every host
//! under it enters by a port of its own, as a traced path's first router answers from the
//! hosts' gateway address), and a link named slow by both ends, the port it left the switch
//! before by and the port it arrived on. A direction with neither is left out and listed
//! ([`unrouted`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::connections::{Connection, Path};
use super::router_names::{named, RouterNames};
use super::topology::Topology;
use super::{Measurement, PairwiseConfig, TestKind};
use crate::schedule::Pair;
use crate::stats::median;

/// A link is named only where its connections' median is at most this fraction below the
/// alternatives' (a 20% drop).
pub const MIN_DROP: f64 = 0.2;
/// ... and the Mann-Whitney z of "slower" is at most this (one-sided p about 0.0013).
pub const MAX_Z: f64 = -3.0;
/// Connections needed on each side.
pub const MIN_CONNECTIONS: usize = 4;

/// One end of a fabric link as a path names it: a router's interface by the address it answered
/// a traced probe from, or an InfiniBand switch's port from a route (`port` None: the switch
/// as a whole, the first of a route). Written as the address alone or `{switch, port}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum End {
    Ip(IpAddr),
    Port {
        switch: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port: Option<u32>,
    },
}

impl End {
    /// As [`named`] writes an address (`name (address)`); a switch port as its own display.
    pub fn named(&self, names: &RouterNames) -> String {
        match self {
            End::Ip(a) => named(a, names),
            other => other.to_string(),
        }
    }
}

impl From<IpAddr> for End {
    fn from(a: IpAddr) -> End {
        End::Ip(a)
    }
}

impl fmt::Display for End {
    /// `10.101.0.2`, `spine1 port 3`, `leaf0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            End::Ip(a) => write!(f, "{a}"),
            End::Port { switch, port: Some(p) } => write!(f, "{switch} port {p}"),
            End::Port { switch, port: None } => write!(f, "{switch}"),
        }
    }
}

/// A directed fabric link, named by the interface a connection arrived on at its far router
/// (`to`: one cable's end, whichever router the connection came from) and the addresses the
/// router before it answered from (`from`: one router seen from different directions answers
/// from different interfaces). From routes: `to` the switch port the link arrives on and
/// `from` the port it left the switch before by, the cable's two ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub from: Vec<End>,
    pub to: End,
}

impl Link {
    /// Whether it was named from InfiniBand routes (switch ports) rather than traces.
    pub fn routed(&self) -> bool {
        matches!(self.to, End::Port { .. })
    }
}

/// The routes a `--topology` gives (`ibtracert`), for the first-pass directions with no traced
/// connection: each such direction at the matrix size `bytes` takes its hosts' route
/// ([`Topology::route`]) as its path, at its own figure.
#[derive(Debug, Clone, Copy)]
pub struct Routes<'a> {
    pub topology: &'a Topology,
    pub hosts: &'a [String],
    pub bytes: u64,
}

impl<'a> Routes<'a> {
    /// Routes for the cable search of a run under `cfg` where `topology` gives any (None else:
    /// the search is the traced connections' alone). Not for latency, nor bidirectional tests: a
    /// measurement of both directions at once crosses two routes, and its figure cannot say
    /// which was slow.
    pub fn of(topology: Option<&'a Topology>, hosts: &'a [String], cfg: &PairwiseConfig) -> Option<Routes<'a>> {
        topology
            .filter(|t| t.routes().next().is_some() && cfg.test == TestKind::Bw && !cfg.bidirectional)
            .map(|topology| Routes {
                topology,
                hosts,
                bytes: cfg.matrix_size() as u64,
            })
    }

    /// The first-pass directions of `ms` that take a route: bandwidth at the matrix size, between
    /// two hosts, no connection traced.
    fn directions<'m>(&self, ms: &'m [Measurement]) -> Vec<&'m Measurement> {
        let host = |r: usize| self.hosts.get(r);
        ms.iter()
            .filter(|m| {
                !m.retest
                    && m.bytes == self.bytes
                    && m.bw.is_some()
                    && host(m.src).is_some_and(|a| host(m.dst).is_some_and(|b| a != b))
                    && !m
                        .connections
                        .iter()
                        .any(|c| matches!(c.path, Some(Path::Traced { .. })))
            })
            .collect()
    }

    /// The route of `m`'s direction as a path of two hops or more, if the topology gives one.
    fn path(&self, m: &Measurement) -> Option<Traced> {
        let (a, b) = (self.hosts.get(m.src)?, self.hosts.get(m.dst)?);
        let r = self.topology.route(a, b)?;
        let gbps = m.score();
        let hops: Vec<End> = r
            .hops
            .iter()
            .enumerate()
            .map(|(i, h)| End::Port {
                switch: h.switch.clone(),
                port: (i > 0).then_some(h.in_port),
            })
            .collect();
        let left_by = r
            .hops
            .iter()
            .map(|h| {
                Some(End::Port {
                    switch: h.switch.clone(),
                    port: Some(h.out_port),
                })
            })
            .collect();
        (hops.len() >= 2 && gbps.is_finite() && gbps > 0.0).then(|| Traced {
            gbps,
            hops,
            left_by,
            src: Host::Named(a.clone()),
            dst: Host::Named(b.clone()),
            pair: m.pair(),
        })
    }
}

/// The first-pass directions between hosts that neither a traced connection nor a route of
/// `routes` gives a path, as (source rank, destination rank): the cable search leaves them out
/// rather than guess their path, and the report lists them.
pub fn unrouted(ms: &[Measurement], routes: Routes<'_>) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = routes
        .directions(ms)
        .into_iter()
        .filter(|m| {
            routes
                .topology
                .route(&routes.hosts[m.src], &routes.hosts[m.dst])
                .is_none()
        })
        .map(|m| (m.src, m.dst))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
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
    /// Of its connections, the share that read fine (above the others' median less
    /// [`MIN_DROP`]): none for a link that slows all it carries.
    #[serde(default)]
    pub fine_share: f64,
}

impl SlowLink {
    /// Whether `c` was traced across this link: an answer from the interface it arrives on at
    /// some hop of its path.
    pub fn carries(&self, c: &Connection) -> bool {
        matches!((&c.path, &self.link.to), (Some(Path::Traced { hops, .. }), End::Ip(to)) if hops.iter().flatten().any(|h| h == to))
    }
}

/// A host as the search keys it: by a traced connection's address, or by name on a route.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Host {
    Ip(IpAddr),
    Named(String),
}

/// One path: a traced connection (its figure, the routers it crossed, the hosts it joined), or
/// a direction's route.
struct Traced {
    gbps: f64,
    hops: Vec<End>,
    /// Where a route names it, the port each hop left its switch by (None on traced paths).
    left_by: Vec<Option<End>>,
    src: Host,
    dst: Host,
    pair: Pair,
}

impl Traced {
    /// The router before `to` on this path, where it arrived on `to`.
    fn before(&self, to: &End) -> Option<&End> {
        self.hops.windows(2).find(|w| w[1] == *to).map(|w| &w[0])
    }

    /// The link's near end as the path names it: the port it left the router before `to` by
    /// where a route names it, else that router's answer.
    fn left_for(&self, to: &End) -> Option<End> {
        let i = self.hops.iter().skip(1).position(|h| h == to)?;
        self.left_by
            .get(i)
            .cloned()
            .flatten()
            .or_else(|| self.hops.get(i).cloned())
    }
}

/// Every connection of `ms` whose path was traced with an answer at every hop, then (with
/// `routes`) every direction with none traced that has a route.
fn traced(ms: &[Measurement], routes: Option<Routes<'_>>) -> Vec<Traced> {
    let mut out: Vec<Traced> = ms
        .iter()
        .filter(|m| !m.retest)
        .flat_map(|m| m.connections.iter().map(move |c| (m.pair(), c)))
        .filter_map(|(pair, c)| match &c.path {
            Some(Path::Traced { hops, .. }) if hops.len() >= 2 && hops.iter().all(Option::is_some) => Some(Traced {
                gbps: c.gbps,
                hops: hops.iter().flatten().map(|&a| End::Ip(a)).collect(),
                left_by: vec![None; hops.len()],
                src: Host::Ip(c.from.ip()),
                dst: Host::Ip(c.to.ip()),
                pair,
            }),
            _ => None,
        })
        .filter(|t| t.gbps.is_finite() && t.gbps > 0.0)
        .collect();
    out.extend(routed(ms, routes));
    out
}

/// `pool` without the connections of slow hosts: a host whose connections read [`MIN_DROP`]
/// under the pool's upper quartile on every link out of and into its router that they took (two or
/// more) is slow itself, on every path alike, which is a node's or a host link's fault for the
/// verdict to name, not a fabric link's. Left in, its slow connections sat among the others a
/// link is judged against and hid a slow cable beside it, or made its router's uplink look slow.
fn without_slow_hosts(pool: Vec<Traced>) -> Vec<Traced> {
    let Some(bar) = healthy_bar(pool.iter().map(|t| t.gbps).collect()) else {
        return pool;
    };
    // Per host, its connections grouped by the link they took next to it: the first link out
    // (arriving on the hop after its router) or the last link in (arriving on its router).
    let mut by_host: BTreeMap<&Host, BTreeMap<(bool, &End), Vec<f64>>> = BTreeMap::new();
    for t in &pool {
        if let (Some(out), Some(into)) = (t.hops.get(1), t.hops.last()) {
            by_host
                .entry(&t.src)
                .or_default()
                .entry((true, out))
                .or_default()
                .push(t.gbps);
            by_host
                .entry(&t.dst)
                .or_default()
                .entry((false, into))
                .or_default()
                .push(t.gbps);
        }
    }
    let slow: BTreeSet<Host> = by_host
        .into_iter()
        .filter(|(_, links)| links.len() >= 2 && links.values().all(|g| median(&mut g.clone()) < bar))
        .map(|(h, _)| h.clone())
        .collect();
    pool.into_iter()
        .filter(|t| !slow.contains(&t.src) && !slow.contains(&t.dst))
        .collect()
}

/// The figure under which a connection reads slow: [`MIN_DROP`] under the upper quartile of
/// `figures` (every connection's of the run); None where there are none. Against the upper
/// quartile, not the median: a fault only slows, and on a small fabric one slow node and a slow
/// cable together slow more than half the connections, the median with them. Both the slow
/// hosts here and the untraced uplinks' shares (`path_share`) are judged against it.
pub(crate) fn healthy_bar(mut figures: Vec<f64>) -> Option<f64> {
    if figures.is_empty() {
        return None;
    }
    figures.sort_by(f64::total_cmp);
    Some((1.0 - MIN_DROP) * figures[(figures.len() - 1) * 3 / 4])
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
fn judge(pool: &[Traced], to: &End) -> Option<SlowLink> {
    let on: Vec<&Traced> = pool.iter().filter(|t| t.before(to).is_some()).collect();
    let mut from: Vec<&End> = on.iter().filter_map(|t| t.before(to)).collect();
    from.sort();
    from.dedup();
    let dsts: BTreeSet<&Host> = on.iter().map(|t| &t.dst).collect();
    // The others: left one of the same routers by another link (a diverging branch), or
    // reached one of the same hosts by another (a converging one).
    let mut off: Vec<f64> = pool
        .iter()
        .filter(|t| t.before(to).is_none())
        .filter(|t| dsts.contains(&t.dst) || t.hops.iter().any(|h| from.contains(&h)))
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
    let fine = on.iter().filter(|t| t.gbps >= (1.0 - MIN_DROP) * m_off).count();
    // Named by where the link leaves the router before it: its answer on a traced path, the
    // port a route left the switch by.
    let mut from: Vec<End> = on.iter().filter_map(|t| t.left_for(to)).collect();
    from.sort();
    from.dedup();
    Some(SlowLink {
        link: Link { from, to: to.clone() },
        connections: n_on,
        median: m_on,
        others: n_off,
        others_median: m_off,
        z,
        fine_share: fine as f64 / n_on as f64,
    })
}

/// Whether the link into `to` is slow only through some of its connections: grouped by where
/// they came from before it (the hop before its router, or their host) or where they
/// went after it (the next hop, or their host), a group of at least [`MIN_CONNECTIONS`] reads
/// above the bar (`others`, their median, less [`MIN_DROP`]): then what slows the rest lies
/// on their own branch, upstream or downstream, not on this link, which all of them cross.
fn explained_elsewhere(on: &[&Traced], to: &End, others: f64) -> bool {
    let fine = (1.0 - MIN_DROP) * others;
    fn branch<'t>(t: &'t Traced, to: &End, upstream: bool) -> Option<Result<&'t End, &'t Host>> {
        let i = t.hops.iter().position(|h| h == to)?;
        if upstream {
            Some(if i >= 2 { Ok(&t.hops[i - 2]) } else { Err(&t.src) })
        } else {
            Some(t.hops.get(i + 1).ok_or(&t.dst))
        }
    }
    [true, false].into_iter().any(|upstream| {
        let mut groups: BTreeMap<Result<&End, &Host>, Vec<f64>> = BTreeMap::new();
        for t in on {
            if let Some(b) = branch(t, to, upstream) {
                groups.entry(b).or_default().push(t.gbps);
            }
        }
        groups.len() > 1
            && groups
                .values_mut()
                .any(|g| g.len() >= MIN_CONNECTIONS && median(g) >= fine)
    })
}

/// How well a slow link explains what it carries: its slow connections, less three for each
/// fine one (a fine connection across a link is evidence that the link is not what slows the
/// others).
fn explains(l: &SlowLink) -> f64 {
    let fine = l.fine_share * l.connections as f64;
    (l.connections as f64 - fine) - 3.0 * fine
}

/// The slow links of a run's traced connections, deepest drop first, each explaining its
/// connections away before the next is looked for.
pub fn slow_links(ms: &[Measurement]) -> Vec<SlowLink> {
    slow_links_in(ms, None)
}

/// [`slow_links`] with the directions no connection of which was traced on their `routes`.
pub fn slow_links_in(ms: &[Measurement], routes: Option<Routes<'_>>) -> Vec<SlowLink> {
    let mut pool = without_slow_hosts(traced(ms, routes));
    let mut out: Vec<SlowLink> = Vec::new();
    loop {
        let arrivals: BTreeSet<End> = pool.iter().flat_map(|t| t.hops.iter().skip(1).cloned()).collect();
        // The link that explains the most slow connections while carrying few fine ones (a
        // greedy cover: [`explains`]), then the deepest drop. Not the largest z: a link all of
        // whose connections are slow explains them better than one beside it that carries half
        // of them and, with more connections, may have the larger z. Not the deepest drop
        // alone: a leaf's uplink all of whose connections went on over the slow cable (its
        // other branch carrying none that time) read as deep a drop as the cable, which carries
        // those and more, and was named in its place (1 of 50 synthetic fabrics with a slow
        // node as well).
        let best = arrivals.iter().filter_map(|to| judge(&pool, to)).max_by(|a, b| {
            explains(a)
                .total_cmp(&explains(b))
                .then((b.median / b.others_median).total_cmp(&(a.median / a.others_median)))
        });
        let Some(b) = best else { break };
        pool.retain(|t| t.before(&b.link.to).is_none());
        out.push(b);
    }
    out
}

/// For each of `links` (in the order [`slow_links`] named them), the rank pairs with a traced
/// first-pass connection across it and across none named before it: the connections that link
/// was judged on.
pub fn pairs_across(ms: &[Measurement], links: &[SlowLink]) -> Vec<BTreeSet<Pair>> {
    pairs_across_in(ms, links, None)
}

/// [`pairs_across`] with the directions of no traced connection on their `routes`.
pub fn pairs_across_in(ms: &[Measurement], links: &[SlowLink], routes: Option<Routes<'_>>) -> Vec<BTreeSet<Pair>> {
    let mut out = vec![BTreeSet::new(); links.len()];
    for m in ms.iter().filter(|m| !m.retest) {
        for c in &m.connections {
            if let Some(k) = links.iter().position(|l| l.carries(c)) {
                out[k].insert(m.pair());
            }
        }
    }
    for t in routed(ms, routes) {
        if let Some(k) = links.iter().position(|l| t.hops.contains(&l.link.to)) {
            out[k].insert(t.pair);
        }
    }
    out
}

/// The route paths of `ms`'s untraced directions (none without `routes`).
fn routed(ms: &[Measurement], routes: Option<Routes<'_>>) -> Vec<Traced> {
    routes.map_or(Vec::new(), |r| {
        r.directions(ms).into_iter().filter_map(|m| r.path(m)).collect()
    })
}

/// The rank pairs the slow `links` explain: pairs with a traced first-pass connection across one
/// of them, whose traced connections across none read at least [`MIN_DROP`] under the others of
/// the links they crossed, at their median (or that have no such connection: `-q 1` one way).
/// Such a pair is slow
/// because of the link, and its hosts are not to blame; a slow node's pair that happened to cross
/// the link too is not explained, its other connections being slow as well.
pub fn explained_pairs(ms: &[Measurement], links: &[SlowLink]) -> BTreeSet<Pair> {
    explained_pairs_in(ms, links, None)
}

/// [`explained_pairs`] with the directions of no traced connection on their `routes`.
pub fn explained_pairs_in(ms: &[Measurement], links: &[SlowLink], routes: Option<Routes<'_>>) -> BTreeSet<Pair> {
    let mut by_pair: BTreeMap<Pair, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for m in ms.iter().filter(|m| !m.retest) {
        for c in &m.connections {
            let Some(Path::Traced { hops, .. }) = &c.path else {
                continue;
            };
            if hops.len() < 2 || hops.iter().any(Option::is_none) {
                continue;
            }
            let crossed: Vec<&SlowLink> = links.iter().filter(|l| l.carries(c)).collect();
            let e = by_pair.entry(m.pair()).or_default();
            match crossed.iter().map(|l| l.others_median).reduce(f64::min) {
                Some(others) => e.0.push(others),
                None => e.1.push(c.gbps),
            }
        }
    }
    for t in routed(ms, routes) {
        let crossed = links.iter().filter(|l| t.hops.contains(&l.link.to));
        let e = by_pair.entry(t.pair).or_default();
        match crossed.map(|l| l.others_median).reduce(f64::min) {
            Some(others) => e.0.push(others),
            None => e.1.push(t.gbps),
        }
    }
    by_pair
        .into_iter()
        .filter(|(_, (crossed, rest))| {
            let others = crossed.iter().copied().fold(f64::INFINITY, f64::min);
            let mut rest = rest.clone();
            !crossed.is_empty() && (rest.is_empty() || median(&mut rest) >= (1.0 - MIN_DROP) * others)
        })
        .map(|(p, _)| p)
        .collect()
}

#[cfg(test)]
mod tests;
