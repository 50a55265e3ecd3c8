//! Intermittent faults on the quiet shaped cluster (every directed host link at 100 Mbit/s, so
//! the shaper, not this machine's CPU, sets the speed): a node whose links flap between a fifth of
//! the rate and the rate, 3 s each, as a flapping NIC does. Its pairs are slow in the first pass
//! while the pairs beside them run at speed, and fine alone when retested in a fast moment: the
//! verdict names the node unstable, alone, and the run fails; so with one NIC of a two-rail node
//! flapping, the NIC. A host link slow for longer than a whole pass is named unstable across the
//! passes of `--repeat`. (The steady quiet fabric passing
//! run after run is quiet_fabric.rs's; the noisy cluster's tests are netns_cluster.rs's.)

use std::time::Duration;

use e2e::*;

/// The check: 1 MiB messages, 30 per direction (2.5 s at 100 Mbit/s, so each shift slot
/// overlaps a slow moment of a 6 s cycle but for one start in twelve), default verdict.
const PAIRWISE: &[&str] = &["pairwise", "-s", "1M", "-n", "30", "--timeout", "60"];

#[test]
fn a_flapping_node_is_named_unstable_alone() {
    let c = NetnsCluster::up(6);
    c.script(&["shape-fabric", "100mbit"]).expect_code(0);
    let flap = c.flap_node(
        "mr-h4",
        "20mbit",
        "100mbit",
        Duration::from_secs(3),
        Duration::from_secs(240),
    );
    let r = c.launch(&[], PAIRWISE, limits::LONG_JOB);
    c.unflap(&[&flap]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    let found = blamed(&r.stdout);
    assert_eq!(found.len(), 1, "one finding:\n{}", r.stdout);
    assert!(
        found[0].starts_with("# UNSTABLE NODE: mr-h4: ")
            && found[0].contains(" while the pairs beside them were not ("),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("# FAIL: 1 unstable part(s) (slow at times, fine at others), nothing else slow"),
        "{}",
        r.stdout
    );
    // Its pairs were not slow for what ran beside them: no `cleared` line says they were.
    assert!(
        !r.stdout
            .lines()
            .any(|l| l.starts_with("# cleared: ") && l.contains("(mr-h4)")),
        "{}",
        r.stdout
    );
    eprintln!("flapping node: {}", found[0]);
}

/// A flapping NIC on a two-rail node: mr-h3's eth1 (rail 1, rank 7) flaps as the node above did,
/// its eth0 steady. Rail 1 names that NIC unstable, alone; rail 0 passes.
#[test]
fn a_flapping_nic_of_two_rails_is_named_unstable_alone() {
    let c = NetnsCluster::up_with_rails(6, 2);
    c.script(&["shape-fabric", "100mbit"]).expect_code(0);
    let flap = c.flap_nic(
        "mr-h3",
        1,
        "20mbit",
        "100mbit",
        Duration::from_secs(3),
        Duration::from_secs(240),
    );
    let mut args = PAIRWISE.to_vec();
    args.extend(["--rails", "--tcp-if", "eth0,eth1"]);
    let r = c.launch(&[], &args, limits::LONG_JOB);
    c.unflap(&[&flap]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    let found = blamed(&r.stdout);
    assert_eq!(found.len(), 1, "one finding:\n{}", r.stdout);
    assert!(
        found[0].starts_with("# UNSTABLE NIC: mr-h3 on rail 1 (rank 7, eth1): "),
        "{}",
        r.stdout
    );
    for line in [
        "# Rail 0: PASS",
        "# Rail 1: FAIL: 1 unstable part(s) (slow at times, fine at others)",
        "# FAIL: 1 unstable part(s) (slow at times, fine at others), nothing else slow",
    ] {
        assert!(r.stdout.lines().any(|l| l == line), "no `{line}`:\n{}", r.stdout);
    }
    eprintln!("flapping NIC: {}", found[0]);
}

/// A host link slow for its first 25 s, then at speed, with passes of 3 to 15 s: the first whole
/// pass finds it slow (slow alone too, so no pass calls it unstable), the last ones fine; across
/// `--repeat 4` (about 35 s) it is unstable, alone, and the run fails.
#[test]
fn a_link_slow_for_whole_passes_is_named_unstable_over_the_passes() {
    let c = NetnsCluster::up(6);
    c.script(&["shape-fabric", "100mbit"]).expect_code(0);
    let flap = c.flap_link(
        "mr-h1",
        "mr-h2",
        "20mbit",
        "100mbit",
        Duration::from_secs(25),
        Duration::from_secs(120),
    );
    let args = ["pairwise", "-s", "256K", "-n", "20", "--timeout", "60", "--repeat", "4"];
    let r = c.launch(&[], &args, limits::LONG_JOB);
    c.unflap(&[&flap]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    let found = blamed(&r.stdout);
    assert_eq!(found.len(), 1, "one finding:\n{}", r.stdout);
    assert!(
        found[0].starts_with("# UNSTABLE HOST LINK: mr-h1 <-> mr-h2: named in ")
            && found[0].contains(" of 4 passes (pass"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("\n# FAIL over 4 passes: 1 unstable part(s)"),
        "{}",
        r.stdout
    );
    eprintln!("flapping link over passes: {}\n{}", found[0], r.stdout);
}
