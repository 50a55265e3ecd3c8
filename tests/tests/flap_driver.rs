//! The namespace cluster's flap driver (`scripts/netns-cluster flap-link`, `flap-node`,
//! `flap-nic`, `flap-uplink`, `unflap`): on a shaped fabric, a part's htb classes alternate between two rates,
//! the first first, a period each, in the background; the flap ends by itself at its bound, the
//! part back at the fabric's rate and no process left, or earlier when `unflap` or the cluster's
//! Drop stops it. What is asserted is what the classes were seen at, with margins of seconds: a
//! slow or busy machine samples less often, it does not fail.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::*;

const FABRIC: &str = "100mbit";
const RATE_A: &str = "30mbit";
const RATE_B: &str = "60mbit";
const PERIOD: Duration = Duration::from_secs(1);
const HOSTS: usize = 3;

/// Every htb class of bridge port `dev` (`mrvI`, in this namespace): class id -> rate as tc
/// prints it (`30Mbit`).
fn classes(dev: &str) -> BTreeMap<String, String> {
    let r = run_bounded(
        Command::new("tc").args(["class", "show", "dev", dev]),
        Duration::from_secs(10),
    );
    r.expect_code(0);
    r.stdout
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let id = w.get(2)?;
            let rate = w.iter().position(|x| *x == "rate").and_then(|i| w.get(i + 1))?;
            Some((id.to_string(), rate.to_string()))
        })
        .collect()
}

/// The rates of the directed links `src -> dst` (the class of `src` at `dst`'s port), each.
fn link_rates(links: &[(usize, usize)]) -> Vec<String> {
    links
        .iter()
        .map(|&(src, dst)| {
            classes(&format!("mrv{dst}"))
                .remove(&format!("1:{}", 10 + src))
                .unwrap_or_else(|| panic!("no class for mr-h{src} at mrv{dst}"))
        })
        .collect()
}

/// Both directions of every link of host `h`.
fn node_links(h: usize) -> Vec<(usize, usize)> {
    (0..HOSTS).filter(|&j| j != h).flat_map(|j| [(h, j), (j, h)]).collect()
}

/// The one rate all of `links` are at (lower case, as the script takes it), or None mid-switch.
fn one_rate(links: &[(usize, usize)]) -> Option<String> {
    let r = link_rates(links);
    r.iter().all(|x| *x == r[0]).then(|| r[0].to_lowercase())
}

fn shaped() -> NetnsCluster {
    let c = NetnsCluster::up(HOSTS);
    c.script(&["shape-fabric", FABRIC]).expect_code(0);
    c
}

#[test]
fn a_flapping_node_alternates_its_two_rates_then_stops_by_itself() {
    let c = shaped();
    let bound = 6 * PERIOD;
    let links = node_links(1);
    let start = Instant::now();
    let part = c.flap_node("mr-h1", RATE_A, RATE_B, PERIOD, bound);
    assert_eq!(part, "node:mr-h1");
    let pid = c.flapper(&part).expect("a flapper running");
    // What the classes were seen at, as runs of one rate with the time each was first seen.
    let mut phases: Vec<(String, Duration)> = Vec::new();
    while start.elapsed() < bound + Duration::from_secs(4) {
        if let Some(rate) = one_rate(&links) {
            if phases.last().map(|p| &p.0) != Some(&rate) {
                phases.push((rate.clone(), start.elapsed()));
            }
            if rate == FABRIC {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen: Vec<&str> = phases.iter().map(|p| p.0.as_str()).collect();
    let (end, flapped) = phases.split_last().expect("some rate seen");
    // RATE_A first, then B, A, ... (six phases of a second in 6 s; a busy sampler may miss one or
    // two, never see more), then the fabric's rate.
    assert_eq!(end.0, FABRIC, "never back at the fabric's rate: {phases:?}");
    assert_eq!(seen[0], RATE_A, "{phases:?}");
    for (i, p) in flapped.iter().enumerate() {
        assert!(p.0 == RATE_A || p.0 == RATE_B, "{phases:?}");
        assert!(i == 0 || p.0 != flapped[i - 1].0, "{phases:?}");
    }
    assert!(
        (4..=6).contains(&flapped.len()),
        "{} phases seen: {phases:?}",
        flapped.len()
    );
    // About a period between switches (the median, so one late sample does not count).
    let mut gaps: Vec<Duration> = flapped.windows(2).map(|w| w[1].1 - w[0].1).collect();
    gaps.sort();
    let median = gaps[gaps.len() / 2];
    assert!(
        median >= PERIOD * 6 / 10 && median <= PERIOD * 16 / 10,
        "median switch gap {median:?}: {phases:?}"
    );
    // It ran to its bound, not past it by more than a busy machine's delay.
    assert!(
        end.1 >= bound - Duration::from_millis(300) && end.1 <= bound + Duration::from_secs(3),
        "back at the fabric's rate after {:?}: {phases:?}",
        end.1
    );
    // And left nothing: no flapper, nothing of its session, no pid file, every class at the fabric's.
    assert!(
        wait_for(Duration::from_secs(3), || session_members(pid).is_empty()),
        "left running: {:?}",
        session_members(pid)
    );
    assert_eq!(c.flapper(&part), None);
    assert!(!c.dir.join("flap/node:mr-h1.pid").exists());
    assert_eq!(one_rate(&links).as_deref(), Some(FABRIC));
}

#[test]
fn unflap_and_the_cluster_going_down_stop_a_flap_early() {
    let c = shaped();
    let long = Duration::from_secs(60);
    // A link, named either way round, flapped until unflap: it stops at once, back at the fabric's
    // rate, and the other links were never touched.
    let start = Instant::now();
    let part = c.flap_link("mr-h2", "mr-h0", RATE_A, RATE_B, PERIOD, long);
    assert_eq!(part, "link:mr-h0:mr-h2");
    let pid = c.flapper(&part).expect("a flapper running");
    let link = [(0, 2), (2, 0)];
    assert!(
        wait_for(Duration::from_secs(5), || one_rate(&link).as_deref() == Some(RATE_B)),
        "never switched to {RATE_B}: {:?}",
        link_rates(&link)
    );
    assert_eq!(one_rate(&[(0, 1), (1, 0), (1, 2), (2, 1)]).as_deref(), Some(FABRIC));
    c.unflap(&["link:mr-h2:mr-h0"]);
    assert!(start.elapsed() < Duration::from_secs(20), "{:?}", start.elapsed());
    assert!(
        wait_for(Duration::from_secs(2), || session_members(pid).is_empty()),
        "left running: {:?}",
        session_members(pid)
    );
    assert_eq!(one_rate(&link).as_deref(), Some(FABRIC));

    // Wrong arguments: one line naming the argument, status 2.
    for (args, want) in [
        (
            ["flap-node", "mr-h1", RATE_A, RATE_B, "0.01", "5"],
            "PERIOD 0.01 is too short",
        ),
        (
            ["flap-node", "mr-h1", RATE_A, "fast", "1", "5"],
            "RATE_B fast is not a rate",
        ),
        (
            ["flap-node", "mr-h7", RATE_A, RATE_B, "1", "5"],
            "HOST mr-h7 is not a host",
        ),
        (
            ["flap-node", "mr-h1", RATE_A, RATE_B, "1", "soon"],
            "SECONDS soon is not a number of seconds",
        ),
    ] {
        let r = c.script(&args);
        r.expect_code(2);
        assert!(
            r.stderr.contains(want) && r.stderr.lines().count() == 1,
            "{want}: {}",
            r.stderr
        );
    }

    // A NIC's flap (rail 0) left running: the cluster's Drop ends it.
    let part = c.flap_nic("mr-h1", 0, RATE_A, RATE_B, Duration::from_millis(500), long);
    assert_eq!(part, "nic:mr-h1:0");
    let pid = c.flapper(&part).expect("a flapper running");
    drop(c);
    assert!(
        wait_for(Duration::from_secs(2), || session_members(pid).is_empty()),
        "left running: {:?}",
        session_members(pid)
    );
}

/// Uneven phases (`LOW/HIGH` seconds) and the flapper's own log of its switches, which the
/// verdict campaign reads as the truth of when a part was low: `a` (RATE_A) and `b` in turn from
/// the start, each logged as it is made, then `fabric` at the bound; a quarter of the time at
/// RATE_A. Margins are the log's own timestamps against the period, so a busy machine that
/// samples late does not fail it.
#[test]
fn uneven_phases_switch_on_time_and_each_switch_is_logged() {
    let c = shaped();
    let r = c.script(&["flap-link", "mr-h0", "mr-h1", RATE_A, RATE_B, "0.4/1.2", "4.8"]);
    r.expect_code(0);
    assert!(
        r.stdout.contains("30mbit for 0.4 s and 60mbit for 1.2 s in turn"),
        "{}",
        r.stdout
    );
    let log = c.dir.join("flap/link:mr-h0:mr-h1.phases");
    assert!(
        wait_for(Duration::from_secs(12), || std::fs::read_to_string(&log)
            .is_ok_and(|l| l.contains("fabric"))),
        "the flap did not end: {:?}",
        std::fs::read_to_string(&log)
    );
    let phases = e2e::campaign::bed::read_phases(&log);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let kinds: Vec<&str> = text.lines().filter_map(|l| l.split_whitespace().nth(1)).collect();
    // a b a b a b, then back: six switches in 4.8 s, the last the fabric's.
    assert_eq!(kinds, ["a", "b", "a", "b", "a", "b", "fabric"], "{text}");
    let gap = |i: usize| phases[i + 1].0 - phases[i].0;
    for i in [0, 2, 4] {
        assert!(
            (0.2..0.9).contains(&gap(i)),
            "low phase {i} lasted {:.2} s:\n{text}",
            gap(i)
        );
    }
    for i in [1, 3] {
        assert!(
            (0.9..1.6).contains(&gap(i)),
            "high phase {i} lasted {:.2} s:\n{text}",
            gap(i)
        );
    }
    // Switches do not drift: the end is at the bound from the first switch.
    let span = phases[6].0 - phases[0].0;
    assert!((4.6..5.6).contains(&span), "ended {span:.2} s after it began:\n{text}");
    let share = e2e::campaign::bed::low_share(&phases, (phases[0].0, phases[6].0));
    assert!((0.15..0.35).contains(&share), "low for {share:.2} of it:\n{text}");
    assert_eq!(one_rate(&[(0, 1), (1, 0)]).as_deref(), Some(FABRIC));
}

/// The uplink between two leaves flaps too (`flap-uplink`, after `shape-uplink`): its tbf at
/// RATE_A first, back at the uplink's own rate when stopped.
#[test]
fn the_uplink_flaps_and_comes_back_at_its_rate() {
    let c = NetnsCluster::up_with(4, 1, 2);
    let tbf = |dev: &str| {
        let r = run_bounded(
            Command::new("tc").args(["qdisc", "show", "dev", dev]),
            Duration::from_secs(10),
        );
        r.expect_code(0);
        r.stdout
    };
    c.script(&["shape-uplink", "50mbit"]).expect_code(0);
    let r = c.script(&["flap-uplink", RATE_A, "50mbit", "1/1", "60"]);
    r.expect_code(0);
    assert!(r.stdout.starts_with("flapping uplink "), "{}", r.stdout);
    for dev in ["mrup0", "mrup1"] {
        assert!(tbf(dev).contains("rate 30Mbit"), "{dev}: {}", tbf(dev));
    }
    c.unflap(&["uplink"]);
    for dev in ["mrup0", "mrup1"] {
        assert!(tbf(dev).contains("rate 50Mbit"), "{dev}: {}", tbf(dev));
    }
    let r = c.script(&["flap-uplink", RATE_A, "50mbit", "1"]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("flap-uplink takes RATE_A RATE_B PERIOD SECONDS"),
        "{}",
        r.stderr
    );
}
