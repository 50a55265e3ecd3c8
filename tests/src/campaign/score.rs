//! A run's verdict against the fabric's truth: named alone, named with something else, named as
//! the wrong part, missed; on a clean fabric any finding is a false one. Beside it, what the run
//! itself measured of the fault (its depth in the first pass) and what it said it could detect
//! (its sensitivity line), so an unshaped draw can check that line.

use super::draw::{Fabric, Family, Part};
use super::findings::{Finding, Level};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// A fault, and every finding names it.
    NamedAlone,
    /// The fault named, and something else too.
    NamedWithOther,
    /// Findings, none of them the fault.
    WrongPart,
    /// A fault and no finding.
    Missed,
    /// No fault and no finding.
    CleanPass,
    /// No fault, and a finding.
    FalseFinding,
    /// The run ended with neither pass nor fail (0 or 1), or wrote no report.
    RunFailed,
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::NamedAlone => "named alone",
            Outcome::NamedWithOther => "named with another part",
            Outcome::WrongPart => "wrong part",
            Outcome::Missed => "missed",
            Outcome::CleanPass => "clean, passed",
            Outcome::FalseFinding => "clean, false finding",
            Outcome::RunFailed => "run failed",
        }
    }

    /// The outcome [`Outcome::name`] gives `name`.
    pub fn from_name(name: &str) -> Option<Outcome> {
        [
            Outcome::NamedAlone,
            Outcome::NamedWithOther,
            Outcome::WrongPart,
            Outcome::Missed,
            Outcome::CleanPass,
            Outcome::FalseFinding,
            Outcome::RunFailed,
        ]
        .into_iter()
        .find(|o| o.name() == name)
    }

    /// The right part named, alone or not.
    pub fn named(&self) -> bool {
        matches!(self, Outcome::NamedAlone | Outcome::NamedWithOther)
    }
}

/// Whether `f` names the faulty `part` of `fabric`.
pub fn names(fabric: &Fabric, part: &Part, f: &Finding) -> bool {
    let h = |i: usize| fabric.family.host(i);
    let hosts_are = |want: &[String]| {
        let mut a = f.hosts.clone();
        let mut b = want.to_vec();
        a.sort();
        b.sort();
        a == b
    };
    // One rank per host: a NIC is its node, a rank pair its host link.
    let one_rank = !matches!(fabric.family, Family::Rails { .. });
    match *part {
        Part::Node { host } => hosts_are(&[h(host)]) && (f.level == Level::Node || (one_rank && f.level == Level::Nic)),
        Part::Nic { host, rail } => f.level == Level::Nic && hosts_are(&[h(host)]) && f.rail == Some(rail),
        Part::HostLink { a, b } => {
            hosts_are(&[h(a), h(b)]) && (f.level == Level::HostLink || (one_rank && f.level == Level::RankPair))
        }
        Part::Uplink => {
            f.level == Level::Uplink && {
                let mut s = f.switches.clone();
                s.sort();
                s == ["leaf0", "leaf1"]
            }
        }
        // With two leaves every path over a spine crosses both leaves' cables to it, one after
        // the other, each way: no end-to-end measurement tells the two apart, so either is the
        // fault as far as any run can know (with three leaves or more, paths to the third part
        // them).
        Part::Cable { leaf, spine } => {
            let two_leaves = matches!(fabric.family, Family::LeafSpine { leaves: 2, .. });
            f.level == Level::FabricLink
                && f.into_cable
                    .is_some_and(|(l, s, _)| s == spine && (l == leaf || two_leaves))
        }
    }
}

/// The verdict of one run against the truth.
pub fn outcome(fabric: &Fabric, exit: Option<i32>, found: &[Finding]) -> Outcome {
    if !matches!(exit, Some(0 | 1)) {
        return Outcome::RunFailed;
    }
    let Some(fault) = fabric.fault else {
        return if found.is_empty() {
            Outcome::CleanPass
        } else {
            Outcome::FalseFinding
        };
    };
    // With rails, a node is named in each rail's section as its NIC there and then as the node:
    // its NICs' lines are that node's, not parts of their own.
    let nodes: Vec<&Vec<String>> = found
        .iter()
        .filter(|f| f.level == Level::Node)
        .map(|f| &f.hosts)
        .collect();
    let found: Vec<&Finding> = found
        .iter()
        .filter(|f| !(f.level == Level::Nic && nodes.contains(&&f.hosts)))
        .collect();
    let right = found.iter().filter(|f| names(fabric, &fault.part, f)).count();
    match (right, found.len()) {
        (_, 0) => Outcome::Missed,
        (0, _) => Outcome::WrongPart,
        (r, n) if r == n => Outcome::NamedAlone,
        _ => Outcome::NamedWithOther,
    }
}

/// Whether a finding blames a host part (a node, a NIC, a host link, a rank pair).
pub fn blames_a_host(f: &Finding) -> bool {
    matches!(f.level, Level::Node | Level::Nic | Level::HostLink | Level::RankPair)
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// What the run's first pass measured of the fault: 1 - (the median of the directions that
/// cross the faulty part) / (the median of the other directions between hosts). None for a
/// cable (which directions crossed it is the traces' business) or where the JSON lacks it.
pub fn depth(fabric: &Fabric, json: &serde_json::Value) -> Option<f64> {
    let part = fabric.fault?.part;
    let hosts: Vec<&str> = json["hosts"].as_array()?.iter().filter_map(|h| h.as_str()).collect();
    // A rank's rail: its place among its host's ranks.
    let rail = |r: usize| hosts[..r].iter().filter(|h| **h == hosts[r]).count();
    let leaf = |h: &str| {
        let i: usize = h.trim_start_matches(|c: char| !c.is_ascii_digit()).parse().unwrap_or(0);
        usize::from(i >= fabric.family.hosts() / 2)
    };
    let name = |i: usize| fabric.family.host(i);
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for m in json["results"].as_array()? {
        if m["retest"].as_bool() != Some(false) {
            continue;
        }
        let (Some(s), Some(d), Some(g)) = (m["src"].as_u64(), m["dst"].as_u64(), m["bw"]["avg_gbps"].as_f64()) else {
            continue;
        };
        let (s, d) = (s as usize, d as usize);
        let (hs, hd) = (*hosts.get(s)?, *hosts.get(d)?);
        if hs == hd {
            continue;
        }
        let crosses = match part {
            Part::Node { host } => hs == name(host) || hd == name(host),
            Part::Nic { host, rail: r } => rail(s) == r && rail(d) == r && (hs == name(host) || hd == name(host)),
            Part::HostLink { a, b } => {
                let (a, b) = (name(a), name(b));
                (hs == a && hd == b) || (hs == b && hd == a)
            }
            Part::Uplink => leaf(hs) != leaf(hd),
            Part::Cable { .. } => return None,
        };
        if crosses {
            on.push(g)
        } else {
            off.push(g)
        }
    }
    Some(1.0 - median(on)? / median(off)?)
}

/// The run's own sensitivity line between hosts (`verdict.judged[].sensitivity`): the smallest
/// drop it says it would have named. With rails, the largest of the rails' (each rail is judged
/// on its own): a fault deeper than that is one every rail could have named.
pub fn sensitivity(json: &serde_json::Value) -> Option<f64> {
    let mut all: Vec<f64> = json["verdict"]["judged"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|j| j["population"].as_str() == Some("between_hosts"))
        .filter_map(|j| j["sensitivity"].as_f64())
        .collect();
    for r in json["rails"].as_array().into_iter().flatten() {
        for j in r["verdict"]["judged"].as_array().into_iter().flatten() {
            if j["population"].as_str() == Some("between_hosts") {
                all.extend(j["sensitivity"].as_f64());
            }
        }
    }
    all.into_iter().reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::super::draw::{draw, Fault, Shaping, Timing};
    use super::super::findings::findings;
    use super::*;

    fn fabric(family: Family, part: Option<Part>) -> Fabric {
        Fabric {
            seed: 0,
            family,
            shaping: Shaping::Quiet,
            host_mbit: 100,
            cable_mbit: 200,
            fault: part.map(|part| Fault {
                part,
                low_mbit: 60.0,
                level: Some(0.6),
                timing: Timing::Steady,
            }),
        }
    }

    #[test]
    fn each_fault_is_scored_against_the_lines_that_name_it() {
        let flat = Family::Flat { hosts: 6, leaves: 2 };
        let node = fabric(flat, Some(Part::Node { host: 2 }));
        let out = |s: &str, f: &Fabric| outcome(f, Some(1), &findings(s, Some(1)));
        assert_eq!(out("# SLOW NODE: mr-h2: 5 of its 5\n", &node), Outcome::NamedAlone);
        assert_eq!(
            out("# UNSTABLE NIC: rank 2 (mr-h2): 5 of\n", &node),
            Outcome::NamedAlone
        );
        assert_eq!(
            out("# SLOW NODE: mr-h2: 5\n# SLOW HOST LINK: mr-h0 <-> mr-h1: 1\n", &node),
            Outcome::NamedWithOther
        );
        assert_eq!(out("# SLOW NODE: mr-h3: 5\n", &node), Outcome::WrongPart);
        assert_eq!(outcome(&node, Some(0), &[]), Outcome::Missed);
        assert_eq!(outcome(&node, Some(3), &[]), Outcome::RunFailed);
        let link = fabric(flat, Some(Part::HostLink { a: 1, b: 4 }));
        assert_eq!(
            out("# SLOW HOST LINK: mr-h4 <-> mr-h1: 1 of\n", &link),
            Outcome::NamedAlone
        );
        assert_eq!(
            out("# SLOW RANK PAIR: rank 1 (mr-h1) <-> rank 4 (mr-h4): 0.05\n", &link),
            Outcome::NamedAlone
        );
        assert_eq!(out("# SLOW NODE: mr-h1: 5\n", &link), Outcome::WrongPart);
        let up = fabric(flat, Some(Part::Uplink));
        assert_eq!(
            out("# SLOW UPLINK: leaf0 <-> leaf1: 9 of its 9\n", &up),
            Outcome::NamedAlone
        );
        // On rails a NIC is one of a node's two: naming it for the node is the wrong part.
        let rails = Family::Rails { hosts: 4 };
        let rnode = fabric(rails, Some(Part::Node { host: 1 }));
        assert_eq!(
            out("# SLOW NIC: mr-h1 on rail 0 (rank 2, eth0): 3\n", &rnode),
            Outcome::WrongPart
        );
        // Each rail's NIC line, then the node's: the node, named alone (seed 23's report).
        let per_rail = "# SLOW NIC: mr-h1 on rail 0 (rank 2, eth0): 3 of its 3\n\
                        # SLOW NIC: mr-h1 on rail 1 (rank 3, eth1): 3 of its 3\n\
                        # SLOW NODE: mr-h1: its NICs on 2 of its 2 rails are slow (6 rank pairs)\n";
        assert_eq!(out(per_rail, &rnode), Outcome::NamedAlone);
        // Another host's NIC beside it is another part.
        let beside = format!("{per_rail}# SLOW NIC: mr-h2 on rail 0 (rank 4, eth0): 3 of its 3\n");
        assert_eq!(out(&beside, &rnode), Outcome::NamedWithOther);
        let nic = fabric(rails, Some(Part::Nic { host: 1, rail: 1 }));
        assert_eq!(
            out("# SLOW NIC: mr-h1 on rail 1 (rank 3, eth1): 3\n", &nic),
            Outcome::NamedAlone
        );
        assert_eq!(
            out("# SLOW NIC: mr-h1 on rail 0 (rank 2, eth0): 3\n", &nic),
            Outcome::WrongPart
        );
        let ls = Family::LeafSpine {
            leaves: 3,
            hosts: 2,
            spines: 2,
        };
        let cable = fabric(ls, Some(Part::Cable { leaf: 0, spine: 1 }));
        let both = "# SLOW FABRIC LINK: into mrls-spine1-leaf0 (10.101.0.2) from mrls-leaf0 (10.80.0.1): x\n\
                    # SLOW FABRIC LINK: into mrls-leaf0-spine1 (10.101.0.1) from mrls-spine1-leaf1 (10.101.1.2): x\n";
        assert_eq!(out(both, &cable), Outcome::NamedAlone);
        assert_eq!(
            out(
                "# SLOW FABRIC LINK: into mrls-spine0-leaf0 (10.100.0.2) from mrls-leaf0 (10.80.0.1): x\n",
                &cable
            ),
            Outcome::WrongPart
        );
        // Three leaves: leaf 1's cable to spine 1 is another cable. Two: the same path's, either.
        let other = "# SLOW FABRIC LINK: into mrls-spine1-leaf1 (10.101.1.2) from mrls-leaf1 (10.80.1.1): x\n";
        assert_eq!(out(other, &cable), Outcome::WrongPart);
        let two = fabric(
            Family::LeafSpine {
                leaves: 2,
                hosts: 3,
                spines: 2,
            },
            Some(Part::Cable { leaf: 0, spine: 1 }),
        );
        assert_eq!(out(other, &two), Outcome::NamedAlone);
        let clean = fabric(flat, None);
        assert_eq!(outcome(&clean, Some(0), &[]), Outcome::CleanPass);
        assert_eq!(out("# FAIL: 1 slow path(s)\n", &clean), Outcome::FalseFinding);
        // Every drawn fault can be named by some line: none is unscorable.
        assert!((0..300).filter_map(|s| draw(s).fault).count() > 150);
    }

    #[test]
    fn the_depth_is_the_faulty_directions_median_against_the_others() {
        // 3 hosts, node mr-h2 at half: its 4 directions 5, the other 2 at 10.
        let f = fabric(Family::Flat { hosts: 3, leaves: 1 }, Some(Part::Node { host: 2 }));
        let m =
            |s: u64, d: u64, g: f64| serde_json::json!({"src": s, "dst": d, "retest": false, "bw": {"avg_gbps": g}});
        let json = serde_json::json!({
            "hosts": ["mr-h0", "mr-h1", "mr-h2"],
            "results": [m(0, 1, 10.0), m(1, 0, 10.0), m(0, 2, 5.0), m(2, 0, 5.0), m(1, 2, 4.0), m(2, 1, 6.0),
                        {"src": 2, "dst": 1, "retest": true, "bw": {"avg_gbps": 0.1}}],
            "verdict": {"judged": [{"population": "between_hosts", "sensitivity": 0.3},
                                   {"population": "within_hosts", "sensitivity": 0.9}]}
        });
        assert!((depth(&f, &json).unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(sensitivity(&json), Some(0.3));
    }
}
