//! `--topology FILE`: which hosts hang off which leaf switch, so a verdict can blame a switch
//! uplink when the slow host links all cross it.
//!
//! Two forms, mixed freely, one entry per line (blank lines and `#` comments skipped):
//! - `SWITCH: HOSTLIST`, e.g. `leaf1: node[01-16]`;
//! - Slurm's `topology.conf`: `SwitchName=leaf1 Nodes=node[01-16]`. Lines naming only
//!   `Switches=` (spines) place no host and are accepted without effect.
//!
//! Or a whole file of a fabric tool's output, recognised by its content:
//! - `ibnetdiscover` (InfiniBand: each host under the switch its HCA is cabled to, named from the
//!   HCAs' NodeDescriptions; `topology/ibnetdiscover.rs`);
//! - `ibtracert` (InfiniBand routes between hosts, one or many; each host under the first switch
//!   of its routes, and the routes kept; `topology/ibtracert.rs`);
//! - `lldpctl -f json` (Ethernet: one host's LLDP neighbours, the host named by the file,
//!   `HOST.json`; `topology/lldp.rs`);
//! - a meshrun pairwise `--json` report with traced connections (each host under its first
//!   router, `router-ADDRESS`, and the router paths between them; `topology/traced.rs`).
//!
//! A directory is read as all its files (hidden ones skipped), each by its content, so one
//! `lldpctl -f json > lldp/$(hostname -s).json` per host makes one topology.

mod ibnetdiscover;
mod ibtracert;
mod lldp;
mod sources;
mod traced;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub use ibtracert::{Hop, Route};

/// Each host's leaf switch, with the cable between them where the source names it, and the
/// routes between hosts an `ibtracert` source gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    switch_of: BTreeMap<String, String>,
    link_of: BTreeMap<String, HostLink>,
    routes: BTreeMap<(String, String), Route>,
    /// From a traced pairwise report: the router paths seen from each first router to each other.
    paths: BTreeMap<(String, String), BTreeSet<String>>,
}

/// The cable from a host up to its leaf: the host's end (an interface, `eno1`, or an HCA port,
/// `mlx5_0 port 1`) and the switch's port (`Ethernet12`, `17`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLink {
    pub host_end: String,
    pub switch_port: String,
}

/// A line that is not one of the two forms, or names a host twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {why}")]
pub struct TopologyError {
    pub file: String,
    pub line: usize,
    pub why: String,
}

impl Topology {
    /// A file, or a directory of them (see the module notes).
    pub fn read(path: &Path) -> Result<Topology, TopologyError> {
        sources::read(path)
    }

    /// Several files or directories as one (`meshrun topology A B`): a host two of them place
    /// under different switches is an error naming the later.
    pub fn read_all(paths: &[std::path::PathBuf]) -> Result<Topology, TopologyError> {
        let mut all = Topology::default();
        for p in paths {
            all.merge(Topology::read(p)?).map_err(|why| TopologyError {
                file: p.display().to_string(),
                line: 0,
                why,
            })?;
        }
        Ok(all)
    }

    /// One file's text; `file` names it in errors and, for an LLDP file, names its host
    /// (`lldp/gpu01.json` is gpu01's).
    pub fn parse(text: &str, file: &str) -> Result<Topology, TopologyError> {
        let at = |(line, why): (usize, String)| TopologyError {
            file: file.to_string(),
            line,
            why,
        };
        if traced::looks_like(text) {
            let tr = traced::parse(text).map_err(at)?;
            return Ok(Topology {
                switch_of: tr.switch_of,
                paths: tr.paths,
                ..Topology::default()
            });
        }
        if lldp::looks_like(text) {
            let host = sources::host_of_file(file).map_err(|w| at((0, w)))?;
            let (switch, host_end, switch_port) = lldp::placement(text, &host).map_err(at)?;
            let mut t = Topology::default();
            t.switch_of.insert(host.clone(), switch);
            t.link_of.insert(host, HostLink { host_end, switch_port });
            return Ok(t);
        }
        if ibtracert::looks_like(text) {
            return Topology::of_routes(ibtracert::parse(text).map_err(at)?).map_err(|w| at((0, w)));
        }
        if ibnetdiscover::looks_like(text) {
            return ibnetdiscover::parse(text)
                .map(|p| Topology {
                    switch_of: p.switch_of,
                    link_of: p.link_of,
                    ..Topology::default()
                })
                .map_err(at);
        }
        let mut t = Topology::default();
        for (i, raw) in text.lines().enumerate() {
            let err = |why: String| TopologyError {
                file: file.to_string(),
                line: i + 1,
                why,
            };
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let Some((switch, hosts)) = entry(line).map_err(err)? else {
                continue;
            };
            let names = hostfiles::expand_hostlist(hosts).map_err(|e| err(e.to_string()))?;
            for h in names {
                if let Some(prev) = t.switch_of.insert(h.clone(), switch.to_string()) {
                    return Err(err(format!("host {h} is already under switch {prev}")));
                }
            }
        }
        if t.switch_of.is_empty() {
            return Err(TopologyError {
                file: file.to_string(),
                line: 0,
                why: "no host is placed under a switch; expected lines like `leaf1: node[01-16]` or \
                      `SwitchName=leaf1 Nodes=node[01-16]`"
                    .into(),
            });
        }
        Ok(t)
    }

    /// Each leaf switch with the hosts under it, in name order.
    pub fn leaves(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (h, s) in &self.switch_of {
            out.entry(s.as_str()).or_default().push(h.as_str());
        }
        out
    }

    /// The leaf switch of `host`, if the file places it.
    pub fn switch_of(&self, host: &str) -> Option<&str> {
        self.switch_of.get(host).map(String::as_str)
    }

    /// The cable from `host` to its leaf, where the source names it (LLDP, ibtracert).
    pub fn link_of(&self, host: &str) -> Option<&HostLink> {
        self.link_of.get(host)
    }

    /// The route from `src` to `dst` an ibtracert source gave: the switches it crosses, each
    /// named with the port it arrived on ([`Hop::arrival`]) as a traced connection's hops are.
    pub fn route(&self, src: &str, dst: &str) -> Option<&Route> {
        self.routes.get(&(src.to_string(), dst.to_string()))
    }

    /// Every route given, by (source host, destination host).
    pub fn routes(&self) -> impl Iterator<Item = &Route> {
        self.routes.values()
    }

    /// The router paths a traced pairwise report showed, by (first router, first router).
    pub fn traced_paths(&self) -> &BTreeMap<(String, String), BTreeSet<String>> {
        &self.paths
    }

    /// The hosts and leaves routes show: each end under the switch next to it.
    fn of_routes(routes: Vec<Route>) -> Result<Topology, String> {
        let mut t = Topology::default();
        for r in routes {
            if let (Some(first), Some(last)) = (r.hops.first(), r.hops.last()) {
                let ends = [
                    (&r.src, &first.switch, &r.src_hca, first.in_port),
                    (&r.dst, &last.switch, &r.dst_hca, last.out_port),
                ];
                for (host, switch, hca, port) in ends {
                    let link = HostLink {
                        host_end: hca.clone(),
                        switch_port: port.to_string(),
                    };
                    t.place(host, switch, Some(link))?;
                }
            }
            let key = (r.src.clone(), r.dst.clone());
            match t.routes.get(&key) {
                Some(prev) if *prev != r => {
                    return Err(format!(
                        "two different routes from {} to {}: {} and {}",
                        r.src,
                        r.dst,
                        prev.phrase(),
                        r.phrase()
                    ))
                }
                _ => {
                    t.routes.insert(key, r);
                }
            }
        }
        Ok(t)
    }

    /// `host` under `switch`, or why not: it is under another already, as rails are.
    fn place(&mut self, host: &str, switch: &str, link: Option<HostLink>) -> Result<(), String> {
        match self.switch_of.get(host) {
            Some(prev) if prev != switch => Err(format!(
                "host {host} is under two switches, {prev} and {switch} (rails?): --topology places \
                 a host under one leaf; give the routes or neighbours of the rail to judge"
            )),
            _ => {
                self.switch_of.insert(host.to_string(), switch.to_string());
                if let Some(l) = link {
                    let ends = self.link_of.entry(host.to_string()).or_insert(l.clone());
                    if *ends != l && !ends.switch_port.split(',').any(|p| p == l.switch_port) {
                        ends.host_end = format!("{},{}", ends.host_end, l.host_end);
                        ends.switch_port = format!("{},{}", ends.switch_port, l.switch_port);
                    }
                }
                Ok(())
            }
        }
    }

    /// `other` added to this one: a host placed by both must be under the same switch, a
    /// route given by both the same route.
    fn merge(&mut self, other: Topology) -> Result<(), String> {
        for (host, switch) in &other.switch_of {
            self.place(host, switch, other.link_of.get(host).cloned())?;
        }
        for (key, ps) in other.paths {
            self.paths.entry(key).or_default().extend(ps);
        }
        for (key, r) in other.routes {
            match self.routes.get(&key) {
                Some(prev) if *prev != r => {
                    return Err(format!("two different routes from {} to {}", key.0, key.1));
                }
                _ => {
                    self.routes.insert(key, r);
                }
            }
        }
        Ok(())
    }
}

/// The (switch, hostlist) of one line; None for a Slurm line without nodes (a spine).
fn entry(line: &str) -> Result<Option<(&str, &str)>, String> {
    if line.starts_with("SwitchName=") {
        let mut switch = None;
        let mut nodes = None;
        for field in line.split_whitespace() {
            match field.split_once('=') {
                Some(("SwitchName", v)) => switch = Some(v),
                Some(("Nodes", v)) => nodes = Some(v),
                Some(("Switches" | "LinkSpeed", _)) => {}
                _ => {
                    return Err(format!(
                        "`{field}` is not a topology.conf field (SwitchName=, Nodes=, Switches=)"
                    ))
                }
            }
        }
        let switch = switch.filter(|s| !s.is_empty()).ok_or("SwitchName= is empty")?;
        return Ok(nodes.map(|n| (switch, n)));
    }
    match line.split_once(':') {
        Some((s, h)) if !s.trim().is_empty() && !h.trim().is_empty() => Ok(Some((s.trim(), h.trim()))),
        _ => Err(format!(
            "`{line}` is neither `SWITCH: HOSTLIST` nor `SwitchName=... Nodes=...`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_with_hostlists() {
        let t = Topology::parse(
            "# two leaves\nleaf1: node[01-02]\nSwitchName=leaf2 Nodes=node[03-04] LinkSpeed=100\n\
             SwitchName=spine Switches=leaf[1-2]\n",
            "topo",
        )
        .unwrap();
        assert_eq!(t.switch_of("node02"), Some("leaf1"));
        assert_eq!(t.switch_of("node04"), Some("leaf2"));
        assert_eq!(t.switch_of("node05"), None);
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let e = Topology::parse("leaf1: a\nthis is not it\n", "t.conf").unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("t.conf", 2));
        let e = Topology::parse("leaf1: a\nleaf2: a\n", "t").unwrap_err();
        assert!(e.why.contains("already under switch leaf1"), "{e}");
        let e = Topology::parse("SwitchName=s1 Nodes=n[1-2] Speed=9\n", "t").unwrap_err();
        assert!(e.why.contains("`Speed=9`"), "{e}");
        assert!(Topology::parse("# nothing\n", "t").is_err());
        assert!(Topology::parse("leaf1: n[3-1]\n", "t").is_err(), "reversed range");
    }
}
