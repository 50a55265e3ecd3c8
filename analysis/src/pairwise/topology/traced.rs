//! A pairwise `--json` report whose connections were traced, read as a topology: each host under
//! the first router its connections to other leaves crossed (its gateway, the leaf's address on
//! the host's subnet), called by the name the resolver gave it where the run kept one
//! (`router_names`), else `router-ADDRESS`, and the paths seen between each two such routers,
//! each hop written `name (address)` where it has a name.
//! So a routed fabric nobody wrote down can be judged with `--topology` the next time, and
//! `meshrun topology RUN.json` shows what the traces found. Only a source's first hop places it:
//! the last router before a destination answers from its interface toward the spines, not the
//! destination's subnet.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use crate::pairwise::connections::Path;
use crate::pairwise::router_names::{named, RouterNames};
use crate::pairwise::Measurement;

/// What a topology reads of a pairwise report: its hosts, its first pass's measurements with
/// their traced connections, and the names the resolver gave the routers. Read here rather
/// than through the saved-run reader, which judges the run again and sits above the topology.
#[derive(Deserialize)]
struct Report {
    hosts: Vec<String>,
    results: Vec<Measurement>,
    #[serde(default)]
    router_names: RouterNames,
}

/// What the traces show: each host's first router, and the router paths (hops joined by ` > `)
/// from each first router to each other.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Traced {
    pub switch_of: BTreeMap<String, String>,
    pub paths: BTreeMap<(String, String), BTreeSet<String>>,
}

/// Whether `text` is a meshrun pairwise report (JSON with `results` and `hosts`).
pub(super) fn looks_like(text: &str) -> bool {
    if !text.trim_start().starts_with('{') {
        return false;
    }
    serde_json::from_str::<serde_json::Value>(text)
        .is_ok_and(|v| v.get("results").is_some_and(|r| r.is_array()) && v.get("hosts").is_some_and(|h| h.is_array()))
}

/// The name a first router takes: the resolver's, else `router-ADDRESS`.
fn router(addr: &std::net::IpAddr, names: &RouterNames) -> String {
    names.get(addr).cloned().unwrap_or_else(|| format!("router-{addr}"))
}

/// The topology the report's traced connections show, or why there is none (line 0).
pub(super) fn parse(text: &str) -> Result<Traced, (usize, String)> {
    let o: Report = serde_json::from_str(text).map_err(|e| (0, format!("not a pairwise report: {e}")))?;
    let host = |r: usize| o.hosts.get(r).cloned().unwrap_or_else(|| format!("rank {r}"));
    let mut first: BTreeMap<String, BTreeSet<std::net::IpAddr>> = BTreeMap::new();
    let mut hops_of: Vec<(String, String, Vec<String>)> = Vec::new();
    for m in o.results.iter().filter(|m| !m.retest) {
        for c in &m.connections {
            let Some(Path::Traced { hops, .. }) = &c.path else {
                continue;
            };
            let named: Vec<String> = hops
                .iter()
                .map(|h| h.map_or("*".into(), |a| named(&a, &o.router_names)))
                .collect();
            if let Some(Some(gw)) = hops.first() {
                first.entry(host(m.src)).or_default().insert(*gw);
            }
            if !named.is_empty() {
                hops_of.push((host(m.src), host(m.dst), named));
            }
        }
    }
    if first.is_empty() {
        return Err((
            0,
            "a pairwise report with no connection traced through a router: run pairwise as root over a routed \
             fabric (4 traced connections a test there by default), without --no-trace"
                .into(),
        ));
    }
    let mut t = Traced::default();
    for (h, gws) in &first {
        if gws.len() > 1 {
            let list: Vec<String> = gws.iter().map(|a| named(a, &o.router_names)).collect();
            return Err((
                0,
                format!(
                    "host {h}'s connections left through {} routers ({}): one leaf a host, or give the rails' topology \
                     by hand",
                    gws.len(),
                    list.join(", ")
                ),
            ));
        }
        if let Some(gw) = gws.first() {
            t.switch_of.insert(h.clone(), router(gw, &o.router_names));
        }
    }
    for (src, dst, named) in hops_of {
        if let (Some(a), Some(b)) = (t.switch_of.get(&src), t.switch_of.get(&dst)) {
            if a != b {
                t.paths
                    .entry((a.clone(), b.clone()))
                    .or_default()
                    .insert(named.join(" > "));
            }
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> std::net::IpAddr {
        s.parse().expect("an address")
    }

    /// The leaf-spine bed with default options (4 traced connections a test), cable leaf0-spine1
    /// slowed: 3 leaves x 2 hosts x 2 spines.
    const BED: &str = include_str!("../../../../docs/evidence/leafspine-defaults-2026-12-06/runs/default-cable-1.json");

    #[test]
    fn the_beds_traces_give_its_three_leaves_and_both_spines_between_each_two() {
        assert!(looks_like(BED));
        let t = parse(BED).expect("a traced run");
        let by_leaf = |gw: &str| -> Vec<&str> {
            t.switch_of
                .iter()
                .filter(|(_, s)| *s == &router(&ip(gw), &RouterNames::new()))
                .map(|(h, _)| h.as_str())
                .collect()
        };
        // Each leaf's gateway is 10.80.L.1 on its hosts' subnet 10.80.L.0/24.
        assert_eq!(by_leaf("10.80.0.1"), ["mrls-h0", "mrls-h1"]);
        assert_eq!(by_leaf("10.80.1.1"), ["mrls-h2", "mrls-h3"]);
        assert_eq!(by_leaf("10.80.2.1"), ["mrls-h4", "mrls-h5"]);
        assert_eq!(t.switch_of.len(), 6);
        // Every ordered pair of leaves, each over both spines (10.100.* is spine0's cables,
        // 10.101.* spine1's): leaf0 to leaf2 as leaf0's gateway, the spine's end of leaf0's
        // cable, then leaf2's end of that spine's cable.
        assert_eq!(t.paths.len(), 6);
        let none = RouterNames::new();
        let p = &t.paths[&(router(&ip("10.80.0.1"), &none), router(&ip("10.80.2.1"), &none))];
        let want: BTreeSet<String> = [
            "10.80.0.1 > 10.100.0.2 > 10.100.2.1",
            "10.80.0.1 > 10.101.0.2 > 10.101.2.1",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(p, &want);
    }

    #[test]
    fn a_run_with_router_names_calls_each_first_router_by_its_name() {
        let mut doc: serde_json::Value = serde_json::from_str(BED).expect("JSON");
        doc["router_names"] = serde_json::json!({
            "10.80.0.1": "mrls-leaf0",
            "10.80.2.1": "mrls-leaf2",
            "10.101.0.2": "mrls-spine1-leaf0",
        });
        let t = parse(&doc.to_string()).expect("a traced run");
        assert_eq!(t.switch_of["mrls-h0"], "mrls-leaf0");
        assert_eq!(t.switch_of["mrls-h5"], "mrls-leaf2");
        // A first router without a name keeps its address's.
        assert_eq!(t.switch_of["mrls-h2"], "router-10.80.1.1");
        let p = &t.paths[&("mrls-leaf0".to_string(), "mrls-leaf2".to_string())];
        assert!(
            p.contains("mrls-leaf0 (10.80.0.1) > mrls-spine1-leaf0 (10.101.0.2) > 10.101.2.1"),
            "{p:?}"
        );
        assert!(p.contains("mrls-leaf0 (10.80.0.1) > 10.100.0.2 > 10.100.2.1"), "{p:?}");
    }

    #[test]
    fn reports_without_traces_and_other_json_are_told_apart() {
        // The untraced run of the same bed: a report, but nothing to place.
        let untraced =
            include_str!("../../../../docs/evidence/leafspine-defaults-2026-12-06/runs/untraced-cable-1.json");
        assert!(looks_like(untraced));
        let (_, why) = parse(untraced).expect_err("no traces");
        assert!(why.contains("no connection traced through a router"), "{why}");
        // lldpctl's JSON is not a report.
        assert!(!looks_like(r#"{"lldp": {"interface": {}}}"#));
        assert!(!looks_like("leaf0: h[1-2]\n"));
    }
}
