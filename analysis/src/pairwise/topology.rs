//! `--topology FILE`: which hosts hang off which leaf switch, so a verdict can blame a switch
//! uplink when the slow host links all cross it.
//!
//! Two forms, mixed freely, one entry per line (blank lines and `#` comments skipped):
//! - `SWITCH: HOSTLIST`, e.g. `leaf1: node[01-16]`;
//! - Slurm's `topology.conf`: `SwitchName=leaf1 Nodes=node[01-16]`. Lines naming only
//!   `Switches=` (spines) place no host and are accepted without effect.
//!
//! Or a whole file of `ibnetdiscover` output (InfiniBand: each host under the switch its HCA is
//! cabled to, named from the HCAs' NodeDescriptions; `topology/ibnetdiscover.rs`).

mod ibnetdiscover;

use std::collections::BTreeMap;
use std::path::Path;

/// Each host's leaf switch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    switch_of: BTreeMap<String, String>,
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
    pub fn read(path: &Path) -> Result<Topology, TopologyError> {
        let text = std::fs::read_to_string(path).map_err(|e| TopologyError {
            file: path.display().to_string(),
            line: 0,
            why: format!("cannot read it: {e}"),
        })?;
        Topology::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, file: &str) -> Result<Topology, TopologyError> {
        if ibnetdiscover::looks_like(text) {
            return ibnetdiscover::parse(text)
                .map(|switch_of| Topology { switch_of })
                .map_err(|(line, why)| TopologyError {
                    file: file.to_string(),
                    line,
                    why,
                });
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
