//! The foundation end to end: launch, World, the TCP mesh and mesh-check with real mpirun.

use std::time::Duration;

use e2e::*;

fn check_ok_table(r: &Run, n: usize) {
    r.expect_code(0);
    let rows = table_rows(&r.stdout);
    assert_eq!(rows.len(), n, "one row per rank:\n{}", r.stdout);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row[0], i.to_string());
        assert_eq!(row.len(), 2 + n, "rank, host and one cell per rank: {row:?}");
        assert_eq!(row[2 + i], "-");
        for (j, cell) in row[2..].iter().enumerate() {
            if j != i {
                let v: f64 = cell.parse().unwrap_or_else(|_| panic!("cell {i},{j} is `{cell}`"));
                assert!(v > 0.0 && v < 1e6, "RTT {v} us");
            }
        }
    }
    assert!(
        r.stdout
            .contains(&format!("# OK: all {} pairs reachable", n * (n - 1) / 2)),
        "{}",
        r.stdout
    );
}

#[test]
fn mesh_check_two_ranks() {
    let r = mpirun(2, &["mesh-check", "--iters", "10"], &[], limits::SMALL_JOB);
    check_ok_table(&r, 2);
}

#[test]
fn mesh_check_four_ranks_through_launch() {
    let r = meshrun(
        &[
            "launch",
            "--np",
            "4",
            "--",
            "mesh-check",
            "--iters",
            "10",
            "--bytes",
            "1M",
        ],
        limits::SMALL_JOB,
    );
    check_ok_table(&r, 4);
    assert!(r.stdout.contains("1048576-byte payload"), "{}", r.stdout);
}

#[test]
fn killed_rank_ends_the_job_within_the_deadline_and_is_named() {
    let r = mpirun(
        4,
        &["mesh-check", "--iters", "2000", "--timeout", "10"],
        &[("MESHRUN_FAULT", "kill:rank=2:round=1")],
        limits::SMALL_JOB,
    );
    assert_eq!(r.code, Some(137), "mpirun's 128 + SIGKILL:\n{}", r.all());
    assert!(r.elapsed < Duration::from_secs(30), "took {:?}", r.elapsed);
    let all = r.all();
    // mpirun names the dead rank itself; a peer that saw the connection close says so too, when
    // it gets to print before mpirun ends it (a race a busy machine can lose, as CI saw).
    assert!(
        all.contains("process rank 2 with PID") || all.contains("rank 2 (") && all.contains("closed the connection"),
        "{all}"
    );
}

#[test]
fn stalled_rank_is_named_when_the_deadline_expires() {
    let r = mpirun(
        4,
        &["mesh-check", "--iters", "5", "--timeout", "3"],
        &[("MESHRUN_FAULT", "stall:rank=1:round=1")],
        limits::SMALL_JOB,
    );
    assert_ne!(r.code, Some(0), "{}", r.all());
    assert!(
        r.elapsed >= Duration::from_secs(3) && r.elapsed < Duration::from_secs(30),
        "took {:?}",
        r.elapsed
    );
    let all = r.all();
    assert!(all.contains("timed out after 3.0s waiting for rank 1 ("), "{all}");
}

#[test]
fn corrupted_payload_fails_the_pair() {
    let r = mpirun(
        3,
        &["mesh-check", "--iters", "5", "--json", "-"],
        &[("MESHRUN_FAULT", "corrupt:rank=1:round=0")],
        limits::SMALL_JOB,
    );
    assert_ne!(r.code, Some(0));
    assert!(r.stdout.contains("FAIL"), "{}", r.stdout);
    assert!(r.stdout.contains("bytes wrong from rank 1"), "{}", r.stdout);
    // --json -: the same result after the table: rank 1's pair of round 0 (rank 2, as the
    // text's `rank 2 (...) received ... wrong from rank 1` says) wrong, the others ok.
    assert!(r.stdout.contains("# FAILED: rank 2 ("), "{}", r.stdout);
    let doc: serde_json::Value = serde_json::from_str(
        &analysis::export::embedded_json(&r.stdout).unwrap_or_else(|| panic!("no JSON block: {}", r.stdout)),
    )
    .expect("JSON");
    assert_eq!(
        (doc["test"].as_str(), doc["schema_version"].as_u64()),
        (Some("mesh-check"), Some(1))
    );
    assert_eq!(doc["pass"], false);
    let states: Vec<(u64, u64, &str)> = doc["pairs"]
        .as_array()
        .expect("pairs")
        .iter()
        .map(|p| {
            (
                p["a"].as_u64().unwrap_or(9),
                p["b"].as_u64().unwrap_or(9),
                p["state"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(states, [(0, 1, "ok"), (0, 2, "ok"), (1, 2, "wrong_payload")], "{doc}");
}

#[test]
fn collapsed_placement_is_an_error() {
    // The launcher placed ranks on 2 hosts, but mpirun put them all on this one.
    let r = mpirun(2, &["mesh-check"], &[("MESHRUN_EXPECT_NODES", "2")], limits::SMALL_JOB);
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains("all 2 ranks run on 1 node(s)") && r.stderr.contains("ignored the host list"),
        "{}",
        r.stderr
    );
}

#[test]
fn unknown_interface_is_bad_input() {
    let r = mpirun(2, &["mesh-check", "--tcp-if", "nosuch0"], &[], limits::SMALL_JOB);
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains("--tcp-if nosuch0: no local interface of that name"),
        "{}",
        r.stderr
    );
    let r = mpirun(2, &["mesh-check", "--tcp-if", "127.0.0.0/8"], &[], limits::SMALL_JOB);
    r.expect_code(0);
}

#[test]
fn wrong_mpi_launcher_is_detected() {
    // The Open MPI build started by MPICH's launcher: every rank is its own world of 1.
    let hydra = ["mpiexec.hydra", "mpiexec.mpich"].into_iter().find(|p| {
        std::process::Command::new(p)
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok()
    });
    let hydra =
        hydra.expect("MPICH's mpiexec.hydra is needed for this test (apt-get install mpich; scripts/test installs it)");
    let mut cmd = std::process::Command::new(hydra);
    cmd.args(["-n", "2"]).arg(meshrun_bin()).args(["mesh-check"]);
    let r = run_bounded(&mut cmd, limits::SMALL_JOB);
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains("MPI reports a world of 1 rank") && r.stderr.contains("PMI_SIZE=2"),
        "{}",
        r.stderr
    );
}

/// `bash -c SCRIPT` with the MPI environment, `$MESHRUN` naming the binary under test.
fn shell(script: &str) -> Run {
    let mut cmd = std::process::Command::new("bash");
    mpi_env(&mut cmd)
        .env("MESHRUN", meshrun_bin())
        .env("OMPI_MCA_mpi_yield_when_idle", "1")
        .args(["-c", script]);
    run_bounded(&mut cmd, limits::SMALL_JOB)
}

#[test]
fn a_low_soft_open_file_limit_is_raised_by_launch() {
    // 64 local ranks do not fit a soft limit of 48 (mpirun alone hung there); the hard limit
    // is higher, so launch raises the soft one before starting mpirun.
    let r = shell(r#"ulimit -Sn 48 && "$MESHRUN" launch --np 64 -- mesh-check --iters 2"#);
    r.expect_code(0);
    assert!(r.stdout.contains("# OK: all 2016 pairs reachable"), "{}", r.all());
}

#[test]
fn a_hard_open_file_limit_too_low_fails_before_mpirun_starts() {
    let r = shell(r#"ulimit -n 100 && "$MESHRUN" launch --np 64 -- mesh-check --iters 2"#);
    r.expect_code(2);
    assert_eq!(
        r.stderr.trim(),
        "meshrun launch: mpirun needs about 320 open files (pipes for its 64 local ranks) but the limit is 100 \
         (ulimit -Hn, the hard limit); raise the hard limit (`nofile` in /etc/security/limits.conf, LimitNOFILE= \
         for systemd or slurmd, `ulimit -Hn` as root) or run fewer ranks"
    );
    assert!(r.elapsed < Duration::from_secs(10), "{:?}", r.elapsed);
}

#[test]
fn a_rank_whose_peers_do_not_fit_its_open_file_limit_says_so_before_connecting() {
    // Started by mpirun directly (as Slurm or an MPIJob would): 8 ranks need 7 sockets + 64.
    let r = shell(r#"ulimit -n 70 && mpirun --bind-to none -np 8 "$MESHRUN" mesh-check --transport tcp --iters 2"#);
    assert_eq!(r.code, Some(2), "{}", r.all());
    let lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains("open files")).collect();
    assert_eq!(lines.len(), 1, "once per host:\n{}", r.all());
    assert!(
        lines[0].starts_with("meshrun: rank 0 (")
            && lines[0].contains(") needs about 71 open files (a TCP socket to each of 7 peers, 64 for MPI and the process) but the limit is 70"),
        "{}",
        r.all()
    );
}
