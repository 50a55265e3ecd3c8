//! NCCL's NIC variables and `MESHRUN_<FLAG>` with real mpirun: the choice they make, the
//! precedence flag > MESHRUN_ > NCCL_, the header line that says where each choice came from,
//! a bad value as a one-line error, NCCL's configuration file read after the environment, and
//! `meshrun launch` passing them to the ranks.

use std::process::Command;

use e2e::*;

const AR: [&str; 9] = ["all_reduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0"];

#[test]
fn nccl_socket_ifname_picks_the_interface_and_the_header_says_so() {
    let r = mpirun(2, &AR, &[("NCCL_SOCKET_IFNAME", "=lo")], limits::SMALL_JOB);
    r.expect_code(0);
    assert!(
        r.stdout
            .contains("#  NIC choice: --tcp-if lo from NCCL_SOCKET_IFNAME==lo\n"),
        "{}",
        r.stdout
    );
    // The header is the subject here, not the verdict: one pair on a busy 2-core machine can show
    // its two directions 5x apart (seen in CI).
    let r = pairwise_unjudged(
        2,
        &["-s", "4K", "-n", "200"],
        &[("NCCL_SOCKET_IFNAME", "lo")],
        limits::SMALL_JOB,
    );
    r.expect_code(0);
    assert!(
        r.stdout
            .contains(" NIC choice      : --tcp-if lo from NCCL_SOCKET_IFNAME=lo\n"),
        "{}",
        r.stdout
    );
}

#[test]
fn flag_beats_meshrun_variable_beats_nccl() {
    // MESHRUN_TCP_IF over NCCL's variable, which would fail here.
    let r = mpirun(
        2,
        &AR,
        &[("NCCL_SOCKET_IFNAME", "nosuchif"), ("MESHRUN_TCP_IF", "lo")],
        limits::SMALL_JOB,
    );
    r.expect_code(0);
    assert!(
        r.stdout.contains("#  NIC choice: --tcp-if lo from MESHRUN_TCP_IF\n"),
        "{}",
        r.stdout
    );
    // The flag over both: no header line (every choice is the command line's).
    let mut args = AR.to_vec();
    args.extend(["--tcp-if", "lo"]);
    let r = mpirun(
        2,
        &args,
        &[("NCCL_SOCKET_IFNAME", "nosuchif"), ("MESHRUN_TCP_IF", "nosuchif")],
        limits::SMALL_JOB,
    );
    r.expect_code(0);
    assert!(!r.stdout.contains("NIC choice"), "{}", r.stdout);
    // MESHRUN_<FLAG> works for any flag: here -n (--iters) of the sweep.
    let r = mpirun(
        2,
        &["all_reduce", "-b", "8", "-e", "8", "-w", "0"],
        &[("MESHRUN_ITERS", "3")],
        limits::SMALL_JOB,
    );
    r.expect_code(0);
    assert!(r.stdout.contains(" iters: 3 "), "{}", r.stdout);
}

#[test]
fn a_bad_nccl_value_is_one_line_naming_it() {
    let r = mpirun(2, &AR, &[("NCCL_SOCKET_IFNAME", "nosuchif")], limits::SMALL_JOB);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr
            .contains("meshrun: NCCL_SOCKET_IFNAME=nosuchif matches none of the interfaces with an address here ("),
        "{}",
        r.stderr
    );
    // RDMA variables under --transport verbs on a host without RDMA devices: named, with the fix.
    let r = mpirun(
        2,
        &[
            "all_reduce",
            "-b",
            "8",
            "-e",
            "8",
            "--transport",
            "verbs",
            "--sysfs-root",
            "/nonexistent",
        ],
        &[("NCCL_IB_HCA", "mlx5_0:1")],
        limits::SMALL_JOB,
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("meshrun: NCCL_IB_HCA=mlx5_0:1"), "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

/// NCCL's configuration file (here `NCCL_CONF_FILE`, which NCCL reads before /etc/nccl.conf)
/// chooses as the environment would, after it; the header and an error name the file.
#[test]
fn nccls_configuration_file_is_read_after_the_environment() {
    let dir = fresh_dir("nccl-conf");
    let conf = dir.join("nccl.conf");
    std::fs::write(&conf, "# the training job's file\nNCCL_SOCKET_IFNAME==lo\n").expect("write nccl.conf");
    let conf_env = conf.display().to_string();
    let r = mpirun(2, &AR, &[("NCCL_CONF_FILE", &conf_env)], limits::SMALL_JOB);
    r.expect_code(0);
    let want = format!("#  NIC choice: --tcp-if lo from NCCL_SOCKET_IFNAME==lo in {conf_env}\n");
    assert!(r.stdout.contains(&want), "{}", r.stdout);
    // The environment first: the file's value is not used.
    std::fs::write(&conf, "NCCL_SOCKET_IFNAME=nosuchif\n").expect("write nccl.conf");
    let env = [("NCCL_CONF_FILE", conf_env.as_str()), ("NCCL_SOCKET_IFNAME", "lo")];
    let r = mpirun(2, &AR, &env, limits::SMALL_JOB);
    r.expect_code(0);
    assert!(
        r.stdout
            .contains("#  NIC choice: --tcp-if lo from NCCL_SOCKET_IFNAME=lo\n"),
        "{}",
        r.stdout
    );
    // Alone, the file's bad value is an error that says where it was set.
    let r = mpirun(2, &AR, &[("NCCL_CONF_FILE", &conf_env)], limits::SMALL_JOB);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr
            .contains("meshrun: NCCL_SOCKET_IFNAME=nosuchif matches none of the interfaces with an address here (")
            && r.stderr.contains(&format!("(set in {conf_env})")),
        "{}",
        r.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn launch_passes_the_variables_to_the_ranks() {
    let mut cmd = Command::new(meshrun_bin());
    cmd.args(["launch", "--np", "2", "--dry-run", "--", "mesh-check"])
        .env("NCCL_IB_HCA", "mlx5")
        .env("MESHRUN_TIMEOUT", "30")
        .env("NCCL_DEBUG_UNRELATED", "x");
    let out = cmd.output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{s}{}", String::from_utf8_lossy(&out.stderr));
    assert!(s.contains(" -x MESHRUN_TIMEOUT "), "{s}");
    assert!(s.contains(" -x NCCL_IB_HCA "), "{s}");
    assert!(!s.contains("NCCL_DEBUG_UNRELATED"), "{s}");
}

/// `args -q 4`, and `args` with MESHRUN_QP=4, on a TCP mesh: refused in one line per rank naming
/// the mesh and the fix (`what`: "per test" for pairwise, "per peer" for the collectives).
fn q_refused_on_tcp(args: &[&str], what: &str) {
    let with_q = [args, &["-q", "4"]].concat();
    for (args, env) in [(&with_q[..], &[][..]), (args, &[("MESHRUN_QP", "4")][..])] {
        let r = mpirun(2, args, env, limits::SMALL_JOB);
        assert_eq!(r.code, Some(2), "{}", r.all());
        let lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains("-q 4:")).collect();
        assert!(!lines.is_empty(), "{}", r.all());
        let want = format!("-q 4: several queue pairs {what} need RDMA verbs, and this job's mesh is tcp");
        for l in lines {
            assert!(l.contains(&want) && l.contains("drop -q"), "{l}");
        }
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
}

#[test]
fn queue_pairs_are_connections_over_tcp_and_nccls_variable_waits_for_rdma() {
    // -q (and MESHRUN_QP) on a TCP mesh: that many connections per test; -b is refused with it.
    for (args, env) in [
        (&["-s", "4K", "-n", "20", "-q", "4"][..], &[][..]),
        (&["-s", "4K", "-n", "20"][..], &[("MESHRUN_QP", "4")][..]),
    ] {
        let r = pairwise_unjudged(2, args, env, limits::SMALL_JOB);
        r.expect_code(0);
        assert!(
            r.stdout.contains("# Connections: 4 TCP connections per test"),
            "{}",
            r.stdout
        );
    }
    let r = mpirun(
        2,
        &["pairwise", "-s", "4K", "-n", "20", "-q", "4", "-b"],
        &[],
        limits::SMALL_JOB,
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr
            .contains("-q 4 over tcp: a test's connections carry one direction at a time"),
        "{}",
        r.all()
    );
    // NCCL's variable is an RDMA setting: a job on TCP runs as without it, and says nothing of it.
    let r = pairwise_unjudged(
        2,
        &["-s", "4K", "-n", "20"],
        &[("NCCL_IB_QPS_PER_CONNECTION", "4")],
        limits::SMALL_JOB,
    );
    r.expect_code(0);
    assert!(!r.stdout.contains("NCCL_IB_QPS_PER_CONNECTION"), "{}", r.stdout);
    assert!(!r.stdout.contains("\"paths\""), "{}", r.stdout);
}

#[test]
fn the_collectives_queue_pairs_per_peer_need_rdma_and_nccls_variable_waits_for_it() {
    // -q (and MESHRUN_QP) on the collectives over a TCP mesh: refused in one line per rank.
    q_refused_on_tcp(&AR, "per peer");
    // Out of range: refused before MPI starts a mesh, with the range.
    let r = mpirun(2, &[&AR[..], &["-q", "17"]].concat(), &[], limits::SMALL_JOB);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr
            .contains("-q 17: expected 1 to 16 queue pairs per peer (each needs staging slots of its own)"),
        "{}",
        r.stderr
    );
    // NCCL's variable is an RDMA setting: on TCP the job runs as without it, and says nothing of it.
    let r = mpirun(2, &AR, &[("NCCL_IB_QPS_PER_CONNECTION", "4")], limits::SMALL_JOB);
    r.expect_code(0);
    assert!(!r.stdout.contains("queue pair"), "{}", r.stdout);
    assert!(!r.stdout.contains("NCCL_IB_QPS_PER_CONNECTION"), "{}", r.stdout);
    // A value NCCL would not take either: one line naming it.
    let r = mpirun(2, &AR, &[("NCCL_IB_QPS_PER_CONNECTION", "lots")], limits::SMALL_JOB);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr
            .contains("NCCL_IB_QPS_PER_CONNECTION=lots: expected a whole number from 1 to 128"),
        "{}",
        r.stderr
    );
}
