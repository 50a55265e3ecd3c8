//! Several hosts on one machine: network namespaces on a bridge, each with its own host name,
//! reached by `meshrun launch --rsh-agent` the way a Kubeflow MPIJob reaches its workers.

use std::time::Duration;

use e2e::*;

#[test]
fn mesh_check_across_three_namespace_hosts() {
    let c = NetnsCluster::up(3);
    let r = c.launch(
        &[],
        &["mesh-check", "--iters", "10", "--timeout", "30"],
        Duration::from_secs(120),
    );
    r.expect_code(0);
    let rows = table_rows(&r.stdout);
    let hosts: Vec<&str> = rows.iter().map(|row| row[1].as_str()).collect();
    assert_eq!(hosts, vec!["mr-h0", "mr-h1", "mr-h2"], "{}", r.stdout);
    assert!(r.stdout.contains("3 ranks on 3 host(s)"), "{}", r.stdout);
}

/// Pairwise with default options (the verdict decides from the distribution): unshaped TCP over
/// veths on a 2-core machine varies by +-30% and more between runs; a 100 Mbit link is far below.
const PAIRWISE: &[&str] = &["pairwise", "-s", "64K", "-n", "300", "--timeout", "60"];

#[test]
fn pairwise_names_exactly_the_one_slow_link() {
    let c = NetnsCluster::up(3);
    // Only traffic from mr-h0 into mr-h1 is limited.
    c.script(&["shape", "mr-h1", "100mbit", "mr-h0"]).expect_code(0);
    let r = c.names_only(
        PAIRWISE,
        "# SLOW HOST LINK: mr-h0 <-> mr-h1: 1 of its 1 rank pairs are slow",
    );
    assert!(
        r.stdout.contains(
            "# FAIL: 1 slow rank pair(s): 0 uplink(s), 0 node(s), 1 host link(s), 0 NIC(s), 0 other rank pair(s)"
        ),
        "{}",
        r.stdout
    );
}

/// A link that loses packets: traffic from mr-h0 into mr-h1 limited to 100 Mbit/s behind a queue
/// of 5 packets (a pfifo under the slow class: a TCP sender overflows it, so packets are dropped
/// whatever the machine's speed; netem is not in every kernel). The link is named, and beside it
/// the counters that moved: mr-h0's TCP resent what was lost.
#[test]
fn a_lossy_link_is_named_with_the_counters_that_moved() {
    let c = NetnsCluster::up(3);
    c.script(&["shape", "mr-h1", "100mbit", "mr-h0"]).expect_code(0);
    let loss = run_bounded(
        std::process::Command::new("tc").args([
            "qdisc", "add", "dev", "mrv1", "parent", "1:20", "handle", "20:", "pfifo", "limit", "5",
        ]),
        Duration::from_secs(10),
    );
    assert_eq!(loss.code, Some(0), "tc pfifo: {}", loss.all());
    let r = c.names_only(
        &[
            "pairwise",
            "-s",
            "1M",
            "-n",
            "20",
            "--timeout",
            "60",
            "--on-fail",
            "taint",
        ],
        "# SLOW HOST LINK: mr-h0 <-> mr-h1: 1 of its 1 rank pairs are slow",
    );
    // --on-fail taint without --apply: the kubectl commands for both ends of the link, printed.
    for h in ["mr-h0", "mr-h1"] {
        let want = format!(
            "# On fail (dry run, --apply runs it): kubectl taint node {h} --overwrite meshrun.io/fabric=slow:NoSchedule"
        );
        assert!(r.stdout.contains(&want), "{want}:\n{}", r.stdout);
    }
    assert!(!r.stdout.contains("node mr-h2"), "{}", r.stdout);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("# SLOW HOST LINK"))
        .unwrap_or(0);
    let evidence: Vec<&str> = lines[at + 1..]
        .iter()
        .take_while(|l| l.starts_with("#   counters: "))
        .copied()
        .collect();
    assert!(
        evidence
            .iter()
            .any(|l| l.starts_with("#   counters: mr-h0 tcp: ") && l.contains("RetransSegs +")),
        "no retransmits beside the lossy link:\n{}",
        r.stdout
    );
    eprintln!("lossy link: {}\n{}", lines[at], evidence.join("\n"));
    // Every counter that moved is in the JSON too: run again with --json.
    let json = c.dir.join("lossy.json");
    let r = c.launch(
        &[],
        &[
            "pairwise",
            "-s",
            "1M",
            "-n",
            "20",
            "--timeout",
            "60",
            "--json",
            json.to_str().expect("utf-8"),
        ],
        limits::LONG_JOB,
    );
    assert_eq!(r.code, Some(1), "{}", r.all());
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("JSON");
    let sources: Vec<String> = doc["counters"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| {
                    format!(
                        "{} {}",
                        m["host"].as_str().unwrap_or(""),
                        m["source"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    for h in ["mr-h0", "mr-h1", "mr-h2"] {
        assert!(sources.contains(&format!("{h} eth0")), "{h} eth0 in {sources:?}");
    }
    let h0 = doc["counters"]
        .as_array()
        .and_then(|a| a.iter().find(|m| m["host"] == "mr-h0" && m["source"] == "eth0"))
        .cloned()
        .unwrap_or_default();
    assert!(h0["deltas"]["tx_bytes"].as_u64().unwrap_or(0) > 20 << 20, "{h0}");
}

#[test]
fn pairwise_blames_the_node_whose_links_are_all_slow() {
    let c = NetnsCluster::up(3);
    c.script(&["shape", "mr-h1", "100mbit"]).expect_code(0);
    c.names_only(
        PAIRWISE,
        "# SLOW NODE: mr-h1: 2 of its 2 host links are slow (2 rank pairs)",
    );
}

#[test]
fn pairwise_without_shaping_passes() {
    let c = NetnsCluster::up(3);
    let r = c.launch(&[], PAIRWISE, limits::LONG_JOB);
    r.expect_code(0);
    assert!(r.stdout.contains("# PASS: no slow pairs"), "{}", r.stdout);
    let matrix: Vec<&str> = r
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("# Average bandwidth"))
        .skip(2)
        .take_while(|l| !l.starts_with('#'))
        .collect();
    assert_eq!(matrix.len(), 3, "matrix rows:\n{}", r.stdout);
    assert!(matrix.iter().all(|l| l.contains("mr-h")), "{matrix:?}");
    // The namespace "hosts" are one machine (one kernel boot id), and rank 0 says so once: what
    // an operator sees when two MPIJob workers land on one node.
    let warned: Vec<&str> = r.stderr.lines().filter(|l| l.contains("are one machine")).collect();
    assert_eq!(
        warned,
        [
            "meshrun: warning: hosts mr-h0, mr-h1, mr-h2 are one machine (one kernel boot id): traffic between them \
          never leaves it, so their pairs measure that machine, not the fabric; place one rank group per node \
          (Kubernetes: podAntiAffinity or topologySpreadConstraints; Slurm: check the allocation)"
        ],
        "{}",
        r.stderr
    );
}

/// Four hosts with two ranks each, default options: no blame in five runs in a row.
#[test]
fn four_hosts_two_ranks_each_unshaped_pass_five_times() {
    let c = NetnsCluster::up_with_slots(4, 2);
    for run in 0..5 {
        let r = c.launch(&[], PAIRWISE, limits::LONG_JOB);
        assert_eq!(r.code, Some(0), "run {run}:\n{}", r.all());
        assert!(r.stdout.contains("Ranks          : 8 on 4 host(s)"), "{}", r.stdout);
        assert!(blamed(&r.stdout).is_empty(), "run {run}:\n{}", r.stdout);
        assert!(
            !r.stdout.contains("# Config:"),
            "a uniform cluster has no findings:\n{}",
            r.stdout
        );
    }
}

/// One host-to-host link slow (traffic from mr-h0 into mr-h2, all four rank pairs): that link,
/// and nothing else.
#[test]
fn four_hosts_two_ranks_each_one_host_link_shaped() {
    let c = NetnsCluster::up_with_slots(4, 2);
    c.script(&["shape", "mr-h2", "100mbit", "mr-h0"]).expect_code(0);
    c.names_only(
        PAIRWISE,
        "# SLOW HOST LINK: mr-h0 <-> mr-h2: 4 of its 4 rank pairs are slow",
    );
}

/// Five hosts, so all pairs run in shift rounds (each host streaming out while it streams in):
/// everything into mr-h1 slow, through a 50 ms queue, which in the first pass slows its way
/// out too (TCP's acknowledgements of its outgoing stream queue behind the incoming data). The
/// retests, one direction at a time, clear the way out, and the node alone is named.
#[test]
fn five_hosts_in_shift_rounds_one_host_slow_into() {
    let c = NetnsCluster::up(5);
    c.script(&["shape", "mr-h1", "100mbit"]).expect_code(0);
    let r = c.names_only(PAIRWISE, "# SLOW NODE: mr-h1: 4 of its 4 host links are slow");
    // Odd: 4 shift rounds, every rank sending and receiving in each.
    assert!(r.stdout.contains("Rounds         : 4"), "{}", r.stdout);
}

/// One host slow (everything into mr-h1): that node, and nothing else.
#[test]
fn four_hosts_two_ranks_each_one_host_shaped() {
    let c = NetnsCluster::up_with_slots(4, 2);
    c.script(&["shape", "mr-h1", "100mbit"]).expect_code(0);
    c.names_only(
        PAIRWISE,
        "# SLOW NODE: mr-h1: 3 of its 3 host links are slow (12 rank pairs)",
    );
}

/// Two leaf switches (bridges) of two hosts each, joined by an uplink limited to 200 Mbit/s both
/// ways: with --topology the uplink is named, and nothing else.
#[test]
fn two_leaves_and_a_slow_uplink_with_a_topology_file() {
    let c = NetnsCluster::up_with(4, 2, 2);
    c.script(&["shape-uplink", "200mbit"]).expect_code(0);
    let topology = c.dir.join("topology").display().to_string();
    let args = [
        "pairwise",
        "-s",
        "64K",
        "-n",
        "100",
        "--timeout",
        "60",
        "--topology",
        &topology,
    ];
    c.names_only(
        &args,
        "# SLOW UPLINK: leaf0 <-> leaf1: 4 of the 4 host links across it are slow (16 rank pairs)",
    );
}

/// One host's interface at another MTU: named before any traffic, with the MTU the others have.
#[test]
fn a_different_mtu_is_named_before_any_traffic() {
    let c = NetnsCluster::up(3);
    c.script(&["exec", "mr-h1", "ip link set eth0 mtu 1400"]).expect_code(0);
    let r = c.launch(&[], PAIRWISE, limits::LONG_JOB);
    r.expect_code(0);
    let first = r.stdout.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        "# Config: MTU differs: eth0 on mr-h1 (rank 1) has 1400 B where the other ranks have 1500 B; its pairs run at \
         the smaller end's MTU",
        "{}",
        r.stdout
    );
}

/// `--rails auto` finds every host's two interfaces itself (no `--tcp-if` list; the listed form
/// runs in `quiet_fabric.rs` and `intermittent.rs`), and refuses a job whose ranks per host, or
/// whose hosts' ports, do not make rails, in one line saying what to start.
#[test]
fn two_rails_one_slow_nic_is_named_with_its_host_rail_and_interface() {
    // Four hosts, each with eth0 (rail 0) and eth1 (rail 1); local rank i uses eth<i>. mr-h2's
    // eth1 (rank 5) is slow both ways.
    let c = NetnsCluster::up_with_rails(4, 2);
    c.script(&["shape-rail", "mr-h2", "1", "200mbit"]).expect_code(0);
    let json = c.dir.join("rails.json");
    let json_arg = json.display().to_string();
    let mut args = PAIRWISE.to_vec();
    args.extend(["--rails", "auto", "--json", &json_arg]);
    let r = c.names_only(
        &args,
        "# SLOW NIC: mr-h2 on rail 1 (rank 5, eth1): 3 of its 3 pairs on the rail are slow",
    );
    let out = &r.stdout;
    assert!(
        out.contains("# Rail pairing: local rank i on port i of its host (mr-h0: eth0, eth1); no GPU paired"),
        "{out}"
    );
    assert!(out.contains("--rails auto found eth0, eth1 on every host"), "{out}");
    assert!(out.contains(" Pairs           : rails "), "{out}");
    // Only rail pairs, rails side by side: 3 rounds for 4 hosts.
    assert!(out.contains("Rounds         : 3"), "{out}");
    assert!(
        out.contains("# Rail 0 (local rank 0): 4 rank(s) on as many hosts, NIC eth0"),
        "{out}"
    );
    assert!(out.contains("# Rail 0: PASS"), "{out}");
    assert!(out.contains("# Rail 1: FAIL: 3 slow rank pair(s)"), "{out}");
    // One matrix per rail, over that rail's ranks.
    assert!(
        out.contains("  rank  host         0        2        4        6\n"),
        "{out}"
    );
    assert!(
        out.contains("  rank  host         1        3        5        7\n"),
        "{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    let rails = v["rails"].as_array().expect("rails in the JSON");
    assert_eq!(rails.len(), 2);
    assert_eq!(rails[1]["ranks"], serde_json::json!([1, 3, 5, 7]));
    let part = &rails[1]["verdict"]["blamed"][0];
    assert_eq!(part["level"], "rail_nic", "{part}");
    assert_eq!(
        (part["host"].as_str(), part["rail"].as_u64(), part["nic"].as_str()),
        (Some("mr-h2"), Some(1), Some("eth1"))
    );
    assert_eq!(v["verdict"]["blamed"].as_array().map(Vec::len), Some(1));
    // One rank per host where each has two interfaces: the count to start, before any traffic.
    let r = c.launch(&["--ppn", "1"], &args, limits::LONG_JOB);
    r.expect_code(2);
    assert!(
        r.stderr.contains(
            "meshrun: --rails auto: every host has 2 active interfaces (eth0, eth1), so the job needs 2 rank(s) per \
             host, one per port; mr-h0 has 1: start 2 per host (meshrun launch --ppn 2, or mpirun -np 8 --map-by \
             ppr:2:node)"
        ),
        "{}",
        r.stderr
    );
    // A host with one interface down: named, with what the first host has.
    c.script(&["exec", "mr-h3", "ip link set eth1 down"]).expect_code(0);
    let r = c.launch(&[], &args, limits::LONG_JOB);
    r.expect_code(2);
    assert!(
        r.stderr
            .contains("hosts differ in their active interfaces: mr-h0 has 2 (eth0, eth1), mr-h3 has 1 (eth0)"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_quick_pass_follows_its_suspects_up_all_pairs_and_names_the_node() {
    // One random partner each: a slow node shows as one slow pair, which alone cannot say which
    // end is at fault; the follow-up tests both ends against healthy references.
    let c = NetnsCluster::up(6);
    c.script(&["shape", "mr-h2", "100mbit"]).expect_code(0);
    let mut args = PAIRWISE.to_vec();
    args.extend(["--pairs", "random:1"]);
    let r = c.names_only(&args, "# SLOW NODE: mr-h2: ");
    let out = &r.stdout;
    let follow = out
        .lines()
        .find(|l| l.starts_with(" Follow-up       : all pairs of ranks "))
        .unwrap_or_else(|| panic!("no follow-up line:\n{out}"));
    assert!(follow.contains('2'), "{follow}");
    // The one quick round, then the follow-up's rounds.
    let rounds: usize = out
        .lines()
        .find_map(|l| l.split("Rounds         : ").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no rounds:\n{out}"));
    assert!(rounds > 1, "{out}");
}

/// How many meshrun processes run in namespace `host`.
fn ranks_in(host: &str) -> usize {
    let out = std::process::Command::new("ip")
        .args(["netns", "pids", host])
        .output()
        .expect("ip netns pids");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "meshrun"))
        .count()
}

/// Rounds of a fixed duration (`-D 4`), each direction 4 s, for the tests that change a link
/// while the rounds run; a 20 s deadline on every wait.
const TIMED_ROUNDS: &[&str] = &[
    "pairwise",
    "-s",
    "1M",
    "-D",
    "4",
    "--timeout",
    "20",
    "--transport",
    "tcp",
];

#[test]
fn a_link_cut_mid_run_names_the_host_and_the_job_ends() {
    // 3 hosts x 2 ranks; once the rounds run, mr-h2's interface goes down: the post-mortem must
    // name mr-h2 (from rank 0 on mr-h0, and from rank 5 on mr-h2 itself, which reaches nobody),
    // and once the link is back the job ends with status 3 and leaves no process behind.
    let c = NetnsCluster::up_with_slots(3, 2);
    let cmd = c.launch_command(
        &[],
        // Rounds of a fixed duration (-D), not of a fixed count: the pairs of a round end
        // close together (with -n 3000 of 1 MiB, a loaded machine kept one pair busy past the
        // deadline of the ranks waiting for it, before the cut). Even so a -D pair calibrated
        // on a moment of less load runs long, and with a 6 s deadline a rank waiting at a
        // round's end raised its alarm before the cut on a heavily loaded machine: 20 s.
        TIMED_ROUNDS,
    );
    let job = Background::start(cmd, &c.dir, "cut");
    // The progress line of round 1 says the rounds run (nothing is on stdout before the end).
    let running = job.stderr_shows("round 1/", Duration::from_secs(90));
    let cut = std::time::Instant::now();
    let down = c.script(&["exec", "mr-h2", "ip", "link", "set", "eth0", "down"]);
    // Both collectors conclude while the link is down: rank 0 (mr-h0), whose line mpirun prints
    // at once, and rank 5 (mr-h2), whose line waits in mr-h2's orted until the link is back. So
    // the link comes back only once rank 0 has spoken and no rank process is left in mr-h2 (a
    // collector exits once it has printed, the other rank after its alarm): a collector still
    // querying when the link came back would see a half-restored network (CI once saw rank 5
    // reach mr-h1 again but not yet mr-h0, and name mr-h0).
    let named = job.stderr_shows("root cause of the stall", Duration::from_secs(20 + 15));
    let to_verdict = cut.elapsed();
    let h2_done = wait_for(Duration::from_secs(60), || ranks_in("mr-h2") == 0);
    let up = c.script(&["exec", "mr-h2", "ip", "link", "set", "eth0", "up"]);
    let (status, stdout, stderr) = job.finish(Duration::from_secs(60));
    assert!(running, "the run never started:\n{stdout}\n{stderr}");
    assert_eq!(
        (down.code, up.code),
        (Some(0), Some(0)),
        "ip link: {}{}",
        down.all(),
        up.all()
    );
    assert!(named, "no root cause within the deadline + 15 s of the cut:\n{stderr}");
    assert!(
        h2_done,
        "the ranks on mr-h2 had not ended 60 s after rank 0's verdict:\n{stderr}"
    );
    let status = status.unwrap_or_else(|| panic!("the job did not end within 60 s of the link coming back:\n{stderr}"));
    assert_eq!(status.code(), Some(3), "{stdout}\n{stderr}");
    let roots: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("root cause of the stall"))
        .collect();
    assert!(
        roots
            .iter()
            .any(|l| l.contains("host mr-h2 (ranks 4, 5) cannot be reached from rank 0 (mr-h0)")),
        "{stderr}"
    );
    assert!(
        roots
            .iter()
            .any(|l| l.contains("host mr-h2 (of rank 5) reaches none of the other 2 hosts")),
        "{stderr}"
    );
    for l in &roots {
        assert!(l.contains("host mr-h2"), "every root-cause line names mr-h2: {l}");
    }
    for h in ["mr-h0", "mr-h1", "mr-h2"] {
        let pids = std::process::Command::new("ip")
            .args(["netns", "pids", h])
            .output()
            .expect("ip netns pids");
        let pids = String::from_utf8_lossy(&pids.stdout);
        assert!(pids.trim().is_empty(), "processes left in {h}: {pids}");
    }
    eprintln!(
        "link cut: root cause {:.1} s after the cut (deadline 20 s); lines: {roots:?}",
        to_verdict.as_secs_f64()
    );
}

/// A link that drops and comes back while the rounds run, as a cable reseated at the switch:
/// mr-h2's switch port (the bridge's end of its veth, mrv2) goes down for a moment and up again.
/// TCP carries on, and whatever the bandwidth read, the report names mr-h2's interface with its
/// link-down counter (`carrier_down_count`), and nobody else's.
#[test]
fn a_link_that_drops_and_comes_back_mid_run_is_named_by_its_counter() {
    let c = NetnsCluster::up(3);
    // Rounds of a fixed duration (-D: 3 rounds of two 4 s directions, a progress line once 5 s
    // have passed), so the drop, once round 1's line is out, falls inside them on any machine.
    let cmd = c.launch_command(&[], TIMED_ROUNDS);
    let job = Background::start(cmd, &c.dir, "drop");
    let running = job.stderr_shows("round 1/", Duration::from_secs(90));
    let ip = |state: &str| {
        run_bounded(
            std::process::Command::new("ip").args(["link", "set", "mrv2", state]),
            Duration::from_secs(10),
        )
    };
    let down = ip("down");
    std::thread::sleep(Duration::from_millis(300));
    let up = ip("up");
    let (status, stdout, stderr) = job.finish(Duration::from_secs(120));
    assert!(running, "the run never started:\n{stdout}\n{stderr}");
    assert_eq!(
        (down.code, up.code),
        (Some(0), Some(0)),
        "ip link: {}{}",
        down.all(),
        up.all()
    );
    let status = status.unwrap_or_else(|| panic!("the job did not end within 120 s of the drop:\n{stderr}"));
    // A PASS, or a FAIL naming what the drop slowed: the report either way, never a stall.
    assert!(
        matches!(status.code(), Some(0 | 1)),
        "status {status:?}:\n{stdout}\n{stderr}"
    );
    let named: Vec<&str> = stdout.lines().filter(|l| l.contains("carrier_down_count")).collect();
    assert!(
        named.iter().any(|l| (l.starts_with("# Counters: mr-h2 eth0: ")
            || l.starts_with("#   counters: mr-h2 eth0: "))
            && l.contains("carrier_down_count +1 (the link went down)")),
        "mr-h2's link drop not named:\n{stdout}"
    );
    assert!(
        named.iter().all(|l| l.contains("mr-h2 eth0")),
        "a link that did not drop was named: {named:?}"
    );
    eprintln!("link drop: {named:?}");
}
