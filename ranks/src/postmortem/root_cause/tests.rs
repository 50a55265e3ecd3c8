use super::*;

fn waiting(rank: u32, peer: u32, phase: &str) -> RankOutcome {
    RankOutcome::Reported(StallReport {
        rank,
        pid: 100 + rank,
        state: WaitState::WaitingOnPeer,
        peer: Some(peer),
        waited_ms: 10_000,
        phase: phase.into(),
        detail: format!("rank {rank} (h): timed out after 10.0s waiting for rank {peer} (h): moved 0 of 64 bytes"),
    })
}

fn busy(rank: u32, phase: &str) -> RankOutcome {
    RankOutcome::Reported(StallReport {
        rank,
        pid: 100 + rank,
        state: WaitState::Busy,
        peer: None,
        waited_ms: 0,
        phase: phase.into(),
        detail: String::new(),
    })
}

fn job(hosts: &[&str]) -> (Vec<String>, Vec<u32>) {
    let h = hosts.iter().map(|s| s.to_string()).collect();
    let p = (0..hosts.len() as u32).map(|r| 100 + r).collect();
    (h, p)
}

fn line_of(hosts: &[&str], me: usize, outcomes: &[RankOutcome]) -> String {
    root_cause_of(hosts, me, outcomes).line
}

fn root_cause_of(hosts: &[&str], me: usize, outcomes: &[RankOutcome]) -> RootCause {
    let (h, p) = job(hosts);
    root_cause(
        &StalledJob { hosts: &h, pids: &p },
        me,
        outcomes,
        Duration::from_secs(1),
    )
}

#[test]
fn a_frozen_rank_in_a_ring_is_the_root_not_its_neighbours() {
    // The case: rank 1 frozen; 2 waits on 1, 3 on 2, 0 on 3 (each blames its
    // neighbour), yet only rank 1 is silent.
    let o = [
        waiting(0, 3, "all_reduce 1048576 B"),
        RankOutcome::Silent,
        waiting(2, 1, "all_reduce 1048576 B"),
        waiting(3, 2, "all_reduce 1048576 B"),
    ];
    let v = line_of(&["a", "a", "b", "b"], 0, &o);
    assert!(v.starts_with("rank 1 (a, pid 101) stopped responding"), "{v}");
    assert!(v.contains("; rank 2 waited on it (rank 2 in all_reduce 1048576 B: timed out after 10.0s waiting for rank 1 (h): moved 0 of 64 bytes)"), "{v}");
    assert!(!v.contains("rank 3 ("), "{v}");
}

#[test]
fn a_dead_rank_is_named_as_dead_and_preferred_when_waited_on() {
    let o = [
        waiting(0, 2, "pairwise round 2"),
        busy(1, "pairwise round 2"),
        RankOutcome::Refused,
        RankOutcome::Silent,
    ];
    let v = line_of(&["a", "a", "b", "b"], 0, &o);
    assert!(
        v.starts_with("rank 2 (b, pid 102) died (its control port refuses connections)"),
        "{v}"
    );
    assert!(!v.contains("rank 3"), "rank 3 is silent but nobody waited on it: {v}");
    // Nobody waits on either: both are named.
    let o = [busy(0, "x"), busy(1, "x"), RankOutcome::Refused, RankOutcome::Silent];
    let v = line_of(&["a", "a", "b", "b"], 0, &o);
    assert!(
        v.contains("rank 2 (b, pid 102) died") && v.contains("rank 3 (b, pid 103) stopped responding"),
        "{v}"
    );
    assert!(v.ends_with("no rank reported waiting on them"), "{v}");
}

#[test]
fn two_live_ranks_waiting_on_each_other_are_a_link() {
    let o = [
        waiting(0, 2, "pairwise round 1"),
        busy(1, "pairwise round 1"),
        waiting(2, 0, "pairwise round 1"),
        busy(3, "pairwise round 1"),
    ];
    let v = line_of(&["a", "a", "b", "b"], 0, &o);
    assert!(
        v.starts_with("the link between rank 0 (a) and rank 2 (b): both ranks are alive"),
        "{v}"
    );
    assert!(v.contains("in pairwise round 1"), "{v}");
}

#[test]
fn a_live_rank_that_waits_on_nobody_is_stuck() {
    // Rank 1 sleeps in its main thread (alive, answers) while 0 and 2 wait on it.
    let o = [
        waiting(0, 1, "all_gather 8 B"),
        busy(1, "all_gather 8 B"),
        waiting(2, 1, "all_gather 8 B"),
    ];
    let v = line_of(&["a", "b", "c"], 0, &o);
    assert!(
        v.starts_with("rank 1 (b, pid 101) is alive and answers but made no progress in all_gather 8 B"),
        "{v}"
    );
    assert!(v.contains("ranks 0, 2 waited on it"), "{v}");
}

fn in_mpi(rank: u32, step: &str) -> RankOutcome {
    RankOutcome::Reported(StallReport {
        rank,
        pid: 100 + rank,
        state: WaitState::WaitingInMpi,
        peer: None,
        waited_ms: 0,
        phase: "all_gather 8 B".into(),
        detail: format!("rank {rank} (h): MPI step `{step}` did not finish within 4s"),
    })
}

#[test]
fn ranks_waiting_in_an_mpi_step_point_at_the_one_that_never_came() {
    // Rank 1 sleeps (alive, answers) before a barrier the others wait in.
    let o = [
        in_mpi(0, "before warm-up"),
        busy(1, "all_gather 8 B"),
        in_mpi(2, "before warm-up"),
    ];
    let v = line_of(&["a", "b", "c"], 0, &o);
    assert_eq!(
        v,
        "rank 1 (b, pid 101) is alive and answers but never reached MPI step `before warm-up` (still in all_gather 8 B); ranks 0, 2 waited in it"
    );
    // Rank 0 frozen before it: silent, and the others' MPI wait is said.
    let o = [
        RankOutcome::Silent,
        in_mpi(1, "before warm-up"),
        in_mpi(2, "before warm-up"),
    ];
    let v = line_of(&["a", "b", "c"], 2, &o);
    assert!(v.starts_with("rank 0 (a, pid 100) stopped responding"), "{v}");
    assert!(
        v.ends_with("; ranks 1, 2 timed out in MPI step `before warm-up`, which it never reached"),
        "{v}"
    );
}

#[test]
fn a_cycle_names_the_links_between_hosts_on_it() {
    let o = [waiting(0, 1, "p"), waiting(1, 2, "p"), waiting(2, 0, "p")];
    let v = line_of(&["a", "a", "b"], 0, &o);
    assert!(
        v.starts_with("ranks 0 -> 1 -> 2 -> 0 wait on each other in a cycle"),
        "{v}"
    );
    assert!(v.contains("links between hosts on it: 1-2 (a-b), 2-0 (b-a)"), "{v}");
}

#[test]
fn unreachable_hosts_are_named_whole() {
    // Host b's link is down: from rank 0 on a, both b ranks are unreachable, c answers.
    let o = [
        waiting(0, 2, "p"),
        busy(1, "p"),
        RankOutcome::Unreachable,
        RankOutcome::Unreachable,
        waiting(4, 3, "p"),
        busy(5, "p"),
    ];
    let v = line_of(&["a", "a", "b", "b", "c", "c"], 0, &o);
    assert!(
        v.starts_with("host b (ranks 2, 3) cannot be reached from rank 0 (a): its network link is down"),
        "{v}"
    );
    assert!(v.ends_with("2 ranks waited on them"), "{v}");
    // Rank 0's own host is the one cut off: every other host is out.
    let o = [
        waiting(0, 2, "p"),
        busy(1, "p"),
        RankOutcome::Unreachable,
        RankOutcome::Unreachable,
        RankOutcome::Unreachable,
        RankOutcome::Unreachable,
    ];
    let v = line_of(&["a", "a", "b", "b", "c", "c"], 0, &o);
    assert!(
        v.starts_with("host a (of rank 0) reaches none of the other 2 hosts: its network link is down"),
        "{v}"
    );
}

#[test]
fn nothing_to_blame_is_said_plainly() {
    let o = [busy(0, "x"), busy(1, "x")];
    assert_eq!(
        line_of(&["a", "b"], 0, &o),
        "every rank answered and none is waiting on a peer: no root cause could be named"
    );
    let mpi = RankOutcome::Reported(StallReport {
        rank: 1,
        pid: 101,
        state: WaitState::WaitingInMpi,
        peer: None,
        waited_ms: 0,
        phase: "connect".into(),
        detail: "rank 1 (b): MPI step `x` did not finish".into(),
    });
    let v = line_of(&["a", "b"], 0, &[RankOutcome::Unknown, mpi]);
    assert!(
        v.contains("rank 1 timed out in an MPI step (rank 1 in connect: MPI step `x` did not finish)"),
        "{v}"
    );
    let v = line_of(&["a", "b"], 0, &[busy(0, "x"), RankOutcome::Unknown]);
    assert!(v.contains("rank 1 (b, pid 101) opened no control port"), "{v}");
}
