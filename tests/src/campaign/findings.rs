//! What a pairwise report blamed, read from its text as an operator reads it: every `# SLOW ...`
//! and `# UNSTABLE ...` line, its level, and the hosts, rail, switches or cable it names.

/// One blamed part, as a report line names it.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// The report's line.
    pub line: String,
    pub unstable: bool,
    pub level: Level,
    /// The hosts it names (`mr-h3`, `mrls-h0`), in order.
    pub hosts: Vec<String>,
    /// `... on rail N`: the rail of a NIC on a rail.
    pub rail: Option<usize>,
    /// The switches it names (`leaf0`, `spine1`), in order.
    pub switches: Vec<String>,
    /// A fabric link's far end (the `into` part): (leaf, spine, whether the end is the spine's).
    pub into_cable: Option<(usize, usize, bool)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Node,
    HostLink,
    Nic,
    Uplink,
    RankPair,
    FabricLink,
    /// A failed run with no part named in a line of its own (its `# FAIL` line).
    Unnamed,
}

const LEVELS: [(&str, Level); 6] = [
    ("NODE", Level::Node),
    ("HOST LINK", Level::HostLink),
    ("NIC", Level::Nic),
    ("UPLINK", Level::Uplink),
    ("RANK PAIR", Level::RankPair),
    ("FABRIC LINK", Level::FabricLink),
];

/// Every finding of a report; a run that failed (`exit` 1) with none of them gets one `Unnamed`
/// finding holding its `# FAIL` line, so a failure is never scored as a pass.
pub fn findings(stdout: &str, exit: Option<i32>) -> Vec<Finding> {
    let mut out: Vec<Finding> = stdout.lines().filter_map(finding).collect();
    if out.is_empty() && exit == Some(1) {
        let line = stdout
            .lines()
            .find(|l| l.starts_with("# FAIL"))
            .unwrap_or("(exit 1, no # FAIL line)");
        out.push(Finding {
            line: line.to_string(),
            unstable: false,
            level: Level::Unnamed,
            hosts: Vec::new(),
            rail: None,
            switches: Vec::new(),
            into_cable: None,
        });
    }
    out
}

fn finding(line: &str) -> Option<Finding> {
    let (unstable, rest) = if let Some(r) = line.strip_prefix("# SLOW ") {
        (false, r)
    } else {
        (true, line.strip_prefix("# UNSTABLE ")?)
    };
    let (level, rest) = LEVELS
        .iter()
        .find_map(|(word, level)| Some((*level, rest.strip_prefix(word)?.strip_prefix(": ")?)))?;
    // The part's name ends at the first ": " (host and switch names here have no ": ").
    let name = rest.split_once(": ").map_or(rest, |(n, _)| n);
    let words: Vec<&str> = name
        .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | ','))
        .filter(|w| !w.is_empty())
        .collect();
    let hosts = words.iter().filter(|w| is_host(w)).map(|w| w.to_string()).collect();
    let switches = words
        .iter()
        .filter_map(|w| switch_name(w))
        .filter(|w| level != Level::FabricLink || !w.contains('-'))
        .collect();
    let rail = name
        .split_once(" on rail ")
        .and_then(|(_, r)| r.split_whitespace().next()?.parse().ok());
    let into_cable = (level == Level::FabricLink)
        .then(|| {
            let into = name.strip_prefix("into ")?;
            let into = into.split_once(" from ").map_or(into, |(i, _)| i);
            into.split(|c: char| c.is_whitespace() || matches!(c, '(' | ')'))
                .find_map(cable_end)
        })
        .flatten();
    Some(Finding {
        line: line.to_string(),
        unstable,
        level,
        hosts,
        rail,
        switches,
        into_cable,
    })
}

/// `mr-h3`, `mrls-h12`.
fn is_host(w: &str) -> bool {
    ["mr-h", "mrls-h"].iter().any(|p| {
        w.strip_prefix(p)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// `leaf0`, `spine1`, or a router interface's name on the leaf-spine bed (`mrls-leaf0-spine1`)
/// as its switch and the far one.
fn switch_name(w: &str) -> Option<String> {
    let w = w.strip_prefix("mrls-").unwrap_or(w);
    let head = w.split('-').next()?;
    let n = head.strip_prefix("leaf").or_else(|| head.strip_prefix("spine"))?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| w.to_string())
}

/// A cable end on the leaf-spine bed, by name (`mrls-spine1-leaf0`: spine 1's end of the cable
/// to leaf 0) or by address (10.(100 + spine).leaf.1 is the leaf's end, .2 the spine's).
fn cable_end(w: &str) -> Option<(usize, usize, bool)> {
    let num = |s: &str, p: &str| -> Option<usize> { s.strip_prefix(p)?.parse().ok() };
    if let Some(n) = w.strip_prefix("mrls-") {
        let (a, b) = n.split_once('-')?;
        if let (Some(l), Some(s)) = (num(a, "leaf"), num(b, "spine")) {
            return Some((l, s, false));
        }
        if let (Some(s), Some(l)) = (num(a, "spine"), num(b, "leaf")) {
            return Some((l, s, true));
        }
        return None;
    }
    let o: Vec<usize> = w.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    match o[..] {
        [10, s, l, end @ (1 | 2)] if (100..200).contains(&s) => Some((l, s - 100, end == 2)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_is_read_with_its_parts() {
        let out = "\
# SLOW NODE: mr-h2: 3 of its 3 host links are slow (12 rank pairs); worst 0.05 Gb/sec
# SLOW HOST LINK: mr-h0 <-> mr-h4: 4 of its 4 rank pairs are slow; worst 61.2 Gb/sec
# SLOW NIC: mr-h3 on rail 1 (rank 7, eth1): 3 of its 4 pairs
# UNSTABLE NIC: rank 1 (mr-h1): 5 of its 5 pairs slow
# SLOW UPLINK: leaf0 <-> leaf1: 8 of its 8 host links are slow
# SLOW RANK PAIR: rank 0 (mr-h0) <-> rank 5 (mr-h2): 0.07 Gb/sec (alone 0.08)
# SLOW FABRIC LINK: into mrls-spine1-leaf0 (10.101.0.2) from mrls-leaf0 (10.80.0.1): its 8 connections
# SLOW FABRIC LINK: into 10.80.2.1 from 10.102.2.2: its 3 connections
# Sensitivity (between hosts): a pair 9% or more below
# FAIL: 3 slow rank pair(s)
";
        let f = findings(out, Some(1));
        assert_eq!(f.len(), 8);
        assert_eq!(
            (f[0].level, f[0].hosts.as_slice()),
            (Level::Node, &["mr-h2".to_string()][..])
        );
        assert_eq!(f[1].hosts, ["mr-h0", "mr-h4"]);
        assert_eq!(
            (f[2].level, f[2].rail, f[2].hosts.as_slice()),
            (Level::Nic, Some(1), &["mr-h3".to_string()][..])
        );
        assert!(f[3].unstable && f[3].rail.is_none() && f[3].hosts == ["mr-h1"]);
        assert_eq!(f[4].switches, ["leaf0", "leaf1"]);
        assert_eq!((f[5].level, f[5].hosts.len()), (Level::RankPair, 2));
        assert_eq!(f[6].into_cable, Some((0, 1, true)));
        assert!(f[6].hosts.is_empty());
        // Into a leaf's gateway: no cable end.
        assert_eq!(f[7].into_cable, None);
    }

    #[test]
    fn a_failed_run_with_no_part_named_is_a_finding_and_a_pass_is_none() {
        let f = findings("# Slow path: one of the 4 paths\n# FAIL: 1 slow path(s)\n", Some(1));
        assert_eq!((f.len(), f[0].level), (1, Level::Unnamed));
        assert!(findings("# PASS: no slow pairs\n", Some(0)).is_empty());
    }

    #[test]
    fn cable_ends_by_address() {
        assert_eq!(cable_end("10.101.3.1"), Some((3, 1, false)));
        assert_eq!(cable_end("10.100.0.2"), Some((0, 0, true)));
        assert_eq!(cable_end("10.80.0.1"), None);
        assert_eq!(cable_end("mrls-leaf2-spine0"), Some((2, 0, false)));
    }
}
