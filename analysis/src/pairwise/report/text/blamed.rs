//! The verdict's parts: the pairs cleared alone, each blamed part with its figures and its NICs'
//! error counters, the counters no blamed part explains, and the closing PASS or FAIL line.

use std::fmt::Write as _;

use super::Scale;
use crate::counters;
use crate::pairwise::blame::{Part, SlowCounts};
use crate::pairwise::report::part::{Members, Voice};
use crate::pairwise::verdict::{self, Population, Rule, Verdict};
use crate::pairwise::PairwiseOutcome;

/// `# cleared: ...`: each pair slow only with other pairs running, with what it ran at alone
/// against the bar alone of its population, so a reader sees how near the bar it was (a wide bar
/// on a noisy run clears a pair a quiet run would name).
pub(super) fn cleared_lines(s: &mut String, o: &PairwiseOutcome, v: &Verdict) {
    let sc = Scale::of(o);
    // A cleared pair of an unstable part was not slow for what ran beside it: its part's line
    // says what it was.
    for &(a, b) in v.cleared.iter().filter(|&&p| !v.held_by_unstable(&o.hosts, p)) {
        let judged = verdict::judged_for(&v.judged, v.rule, &o.hosts, (a, b));
        let figures = match (verdict::alone_score(&o.retests, (a, b)), judged) {
            (Some(alone), Some(j)) => format!(
                " ({:.2} {u}; slow alone is {cmp} {:.2} {u})",
                sc.val(alone),
                sc.val(j.bar_alone),
                u = sc.unit,
                cmp = sc.cmp
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "# cleared: rank {a} ({}) <-> rank {b} ({}) was slow only with other pairs running; fine alone{figures}",
            o.hosts[a], o.hosts[b]
        );
    }
}

/// `# SLOW ...`: each blamed part of `v`, named as [`Part::phrase`] says, with its figures and
/// the error counters of the NICs it carried.
pub(super) fn blamed_lines(s: &mut String, o: &PairwiseOutcome, v: &Verdict) {
    let sc = Scale::of(o);
    let u = sc.unit;
    let bulk_of = |within: bool| {
        let want = if within {
            Population::WithinHost
        } else {
            Population::BetweenHosts
        };
        // Under --threshold one bar covers both populations.
        let j = v
            .judged
            .iter()
            .find(|j| j.population == want)
            .or(v.judged.first().filter(|_| matches!(v.rule, Rule::Threshold(_))));
        j.map_or(String::new(), |j| {
            format!("; healthy bulk {:.2} {u}", sc.val(j.bulk.median))
        })
    };
    let worst = |k: &SlowCounts| {
        let alone = k
            .worst_retest
            .map_or(", not retested".to_string(), |r| format!(", alone {:.2}", sc.val(r)));
        format!("worst {:.2} {u}{alone}{}", sc.val(k.worst), bulk_of(false))
    };
    let voice = Voice::Verdict {
        rails: !o.rails.is_empty(),
    };
    for part in &v.blamed {
        let head = part.phrase(voice);
        let written = match part.members() {
            Members::Counts(k) => writeln!(s, "# SLOW {head}; {}", worst(k)),
            Members::Pair(p) => {
                let dirs: Vec<String> = p.directions.iter().map(|(x, y)| format!("{x}->{y}")).collect();
                let retest = p
                    .retest
                    .map_or("not retested".to_string(), |r| format!("alone {:.2}", sc.val(r)));
                writeln!(
                    s,
                    "# SLOW {head}: {:.2} {u} ({retest}), direction {}{}",
                    sc.val(p.first),
                    dirs.join(", "),
                    bulk_of(p.host_a == p.host_b)
                )
            }
        };
        if written.is_ok() {
            if let Part::Uplink { switch_a, switch_b, .. } = part {
                paths_line(s, v, switch_a, switch_b);
            }
            for line in counters::evidence(&o.counters, &part_ranks(o, part)) {
                let _ = writeln!(s, "#   counters: {line}");
            }
        }
    }
}

/// `#   one of its paths ...`: where an uplink's connections (`-q` over TCP, untraced) were slow
/// in part only, the share, and how many equal-cost paths it fits ([`PathShare`]).
///
/// [`PathShare`]: crate::pairwise::path_share::PathShare
fn paths_line(s: &mut String, v: &Verdict, a: &str, b: &str) {
    let Some(p) = v
        .uplink_paths
        .iter()
        .find(|p| p.switch_a == a && p.switch_b == b && p.partial())
    else {
        return;
    };
    let fits = match p.paths() {
        Some((lo, hi)) if lo == hi => format!(", as one of {lo} equal-cost paths would be"),
        Some((lo, hi)) => format!(", as one of {lo} to {hi} equal-cost paths would be"),
        None => String::new(),
    };
    let _ = writeln!(
        s,
        "#   one of the paths between {a} and {b} is slow, not all: {} of its {} connections at a median {:.4} Gb/sec against {:.4} for the rest ({:.0}%{fits}); a cable or a spine's port, which traced connections name (run as root, without --no-trace)",
        p.slow,
        p.of,
        p.slow_median,
        p.rest_median,
        100.0 * p.slow as f64 / p.of as f64
    );
}

/// `# UNSTABLE ...`: each part slow at times and fine at others, with when it was slow (the
/// first pass's slots), what ran beside it then and what its pairs ran at alone, and the
/// counters of the NICs it carried.
pub(super) fn unstable_lines(s: &mut String, o: &PairwiseOutcome, v: &Verdict) {
    let sc = Scale::of(o);
    let u = sc.unit;
    for x in &v.unstable {
        let slots: Vec<String> = x.slow_in.iter().map(|k| (k + 1).to_string()).collect();
        let plural = if slots.len() == 1 { "" } else { "s" };
        let alone = if x.alone_min.is_finite() {
            format!(
                ", alone {:.2}-{:.2} {u}",
                sc.val(x.alone_min.min(x.alone_max)),
                sc.val(x.alone_max.max(x.alone_min))
            )
        } else {
            String::new()
        };
        let written = writeln!(
            s,
            "# UNSTABLE {} in the first pass while the pairs beside them were not (slot{plural} {} of {}; worst {:.2} {u}, beside it {:.2}){alone}: its speed changed while the run lasted",
            x.part.phrase(Voice::Unstable {
                rails: !o.rails.is_empty()
            }),
            slots.join(", "),
            x.slots,
            sc.val(x.worst),
            sc.val(x.beside),
        );
        if written.is_ok() {
            for line in counters::evidence(&o.counters, &part_ranks(o, &x.part)) {
                let _ = writeln!(s, "#   counters: {line}");
            }
        }
    }
}

/// The ranks whose traffic a blamed part carried, whose NICs' counters are its evidence (none
/// for an uplink: the switches' counters are not the hosts').
pub(super) fn part_ranks(o: &PairwiseOutcome, part: &Part) -> Vec<usize> {
    let on = |hosts: &[&str]| -> Vec<usize> {
        (0..o.hosts.len())
            .filter(|&r| hosts.contains(&o.hosts[r].as_str()))
            .collect()
    };
    match part {
        Part::Uplink { .. } => Vec::new(),
        Part::Node { host, .. } => on(&[host]),
        Part::HostLink { host_a, host_b, .. } => on(&[host_a, host_b]),
        Part::Nic { rank, .. } | Part::RailNic { rank, .. } => vec![*rank],
        Part::RankPair { pair } => vec![pair.a, pair.b],
    }
}

/// Sources that counted errors though no blamed part involves them: a link that corrects its
/// errors can be fast enough to pass.
pub(super) fn unblamed_counters(s: &mut String, o: &PairwiseOutcome) {
    let blamed: Vec<usize> = o
        .verdict
        .blamed
        .iter()
        .chain(o.rails.iter().flat_map(|r| &r.verdict.blamed))
        .chain(o.verdict.unstable.iter().map(|x| &x.part))
        .chain(o.rails.iter().flat_map(|r| r.verdict.unstable.iter().map(|x| &x.part)))
        .flat_map(|p| part_ranks(o, p))
        .collect();
    for line in counters::unblamed(&o.counters, &blamed) {
        let _ = writeln!(
            s,
            "# Counters: {line}: errors counted during the run, though no slow pair involves it"
        );
    }
}

/// The run's PASS or FAIL, with what was blamed at each level.
pub(super) fn pass_line(s: &mut String, o: &PairwiseOutcome, v: &Verdict) {
    let slow_paths = o.paths.as_ref().map_or(0, |p| p.confirmed.len());
    let links = o.cables.len();
    if v.pass && links > 0 {
        let _ = writeln!(
            s,
            "# FAIL: {links} slow fabric link(s) (the connections across a link slower than those around it), {}",
            match v.fabric.len() {
                0 => "no slow pair".to_string(),
                k => format!("{k} slow rank pair(s) through them, no other"),
            }
        );
    } else if v.pass && slow_paths > 0 {
        let _ = writeln!(
            s,
            "# FAIL: {slow_paths} slow path(s) (one queue pair of a pair slower than its others), no slow pair"
        );
    } else if v.pass && !v.unstable.is_empty() {
        let _ = writeln!(
            s,
            "# PASS: no slow pairs; {} unstable part(s), a warning (--on-unstable warn)",
            v.unstable.len()
        );
    } else if v.pass {
        let _ = writeln!(s, "# PASS: no slow pairs");
    } else if v.blamed.is_empty() {
        let _ = writeln!(
            s,
            "# FAIL: {} unstable part(s) (slow at times, fine at others), nothing else slow",
            v.unstable.len()
        );
        if slow_paths > 0 {
            let _ = writeln!(
                s,
                "# FAIL: and {slow_paths} slow path(s) (one queue pair of a pair slower than its others)"
            );
        }
        if links > 0 {
            let _ = writeln!(s, "# FAIL: and {links} slow fabric link(s)");
        }
    } else {
        let count = |level: &str| v.blamed.iter().filter(|p| p.level() == level).count();
        let _ = writeln!(
            s,
            "# FAIL: {} slow rank pair(s): {} uplink(s), {} node(s), {} host link(s), {} NIC(s), {} other rank pair(s)",
            v.confirmed.len(),
            count("uplink"),
            count("node"),
            count("host link"),
            count("NIC"),
            count("rank pair")
        );
        if slow_paths > 0 {
            let _ = writeln!(
                s,
                "# FAIL: and {slow_paths} slow path(s) (one queue pair of a pair slower than its others)"
            );
        }
        if links > 0 {
            let _ = writeln!(s, "# FAIL: and {links} slow fabric link(s)");
        }
        if !v.unstable.is_empty() && !o.config.unstable_warns {
            let _ = writeln!(
                s,
                "# FAIL: and {} unstable part(s) (slow at times, fine at others)",
                v.unstable.len()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::pairwise::report::text::render;
    use crate::pairwise::topology::Topology;
    use crate::pairwise::verdict::{judge_pairs, RetestPlan};
    use crate::pairwise::{Measurement, OpName, PairwiseConfig, PairwiseOutcome};

    const SIZE: usize = 1 << 20;

    /// `hosts` (a rank each, or as listed), every direction at 100 Gb/s but those that `slow`
    /// says at 40, judged with `topology` and rendered as text.
    fn report(hosts: &[&str], slow: impl Fn(usize, usize) -> bool, topology: Option<&Topology>) -> String {
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        let n = hosts.len();
        let ms: Vec<Measurement> = (0..n)
            .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| (a, b)))
            .enumerate()
            .map(|(i, (a, b))| {
                let g = if slow(a, b) { 40.0 } else { 100.0 + (i % 7) as f64 * 0.3 };
                Measurement::bandwidth(a, b, SIZE as u64, 100, g, false)
            })
            .collect();
        let cfg = PairwiseConfig::synthetic(OpName::Write, SIZE, 100);
        let v = judge_pairs(&ms, &[], &cfg, &hosts, &RetestPlan::default(), topology);
        render(&PairwiseOutcome::synthetic(cfg, "tcp", hosts, n - 1, ms, Vec::new(), v))
    }

    fn data(p: &str) -> Topology {
        Topology::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(p)).expect("a topology")
    }

    #[test]
    fn a_slow_host_link_names_each_hosts_switch_port_from_lldp() {
        // The published lldpctl outputs: gpu01 on `router` port ge-1/0/1, gpu02 on a switch
        // known by its MAC, port g17; gpu03 and gpu04 are not in them.
        let t = data("lldp/hosts");
        let hosts = ["gpu01", "gpu01", "gpu02", "gpu02", "gpu03", "gpu03", "gpu04", "gpu04"];
        let across = |a: usize, b: usize| (a / 2).min(b / 2) == 0 && (a / 2).max(b / 2) == 1;
        let with = report(&hosts, across, Some(&t));
        assert!(
            with.contains(
                "# SLOW HOST LINK: gpu01 (switch router port ge-1/0/1) <-> gpu02 (switch 44:94:fc:9d:55:0a port g17): \
                 4 of its 4 rank pairs are slow"
            ),
            "{with}"
        );
        // Without the topology the line is as it was.
        let without = report(&hosts, across, None);
        assert!(
            without.contains("# SLOW HOST LINK: gpu01 <-> gpu02: 4 of its 4 rank pairs are slow"),
            "{without}"
        );
        // A host the topology does not place is named alone.
        let other = |a: usize, b: usize| (a / 2).min(b / 2) == 2 && (a / 2).max(b / 2) == 3;
        let with = report(&hosts, other, Some(&t));
        assert!(
            with.contains("# SLOW HOST LINK: gpu03 <-> gpu04: 4 of its 4 rank pairs"),
            "{with}"
        );
    }

    #[test]
    fn a_slow_nic_names_its_hosts_switch_port_from_ibtracert() {
        // The published route ends: hxa-gpu01's HCA on hxa-su1-leaf-r1 port 1.
        let t = data("ibtracert/hxa-ibsim.txt");
        let hosts = [
            "hxa-gpu01",
            "hxa-gpu01",
            "hxa-gpu03",
            "hxa-gpu03",
            "h3",
            "h3",
            "h4",
            "h4",
        ];
        let nic = |a: usize, b: usize| (a == 1 || b == 1) && a / 2 != b / 2;
        let with = report(&hosts, nic, Some(&t));
        assert!(
            with.contains(
                "# SLOW NIC: rank 1 (hxa-gpu01, switch hxa-su1-leaf-r1 (S-0000000000200002) port 1): 6 of its 6 pairs \
                 to other hosts are slow"
            ),
            "{with}"
        );
        let without = report(&hosts, nic, None);
        assert!(
            without.contains("# SLOW NIC: rank 1 (hxa-gpu01): 6 of its 6 pairs to other hosts are slow"),
            "{without}"
        );
    }
}
