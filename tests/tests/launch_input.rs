//! `meshrun launch` and rank subcommands on bad input: one line, exit status 2, no panic.

use std::time::Duration;

use e2e::*;

/// How long a run here may take: each is refused, or a dry run, before any rank works.
const LIMIT: Duration = Duration::from_secs(60);

/// A file `name` holding `text` in this test process's own temp directory.
fn tmpfile(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("meshrun-launch-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The run was refused with status 2 and nothing on stdout, and a line of stderr holds
/// `contains`; nothing panicked.
fn one_line_error(r: &Run, contains: &str) {
    r.expect_code(2);
    assert!(r.stdout.is_empty(), "no output on stdout: {}", r.stdout);
    let lines: Vec<&str> = r.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(
        lines.iter().any(|l| l.contains(contains)),
        "want `{contains}` in:\n{}",
        r.stderr
    );
}

/// `meshrun launch --hostfile FILE --dry-run -- mesh-check`.
fn dry_run_with_hostfile(f: &std::path::Path) -> Run {
    meshrun(
        &[
            "launch",
            "--hostfile",
            f.to_str().unwrap(),
            "--dry-run",
            "--",
            "mesh-check",
        ],
        LIMIT,
    )
}

#[test]
fn malformed_hostfile_names_file_line_column() {
    let f = tmpfile("bad-hosts", "node01 slots=2\nnode02 slots=two\n");
    let r = dry_run_with_hostfile(&f);
    one_line_error(
        &r,
        &format!("{}:2:14: `slots` value `two` is not a whole number", f.display()),
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}

#[test]
fn reversed_and_huge_hostlists() {
    let r = meshrun(
        &["launch", "--hosts", "node[04-01]", "--dry-run", "--", "mesh-check"],
        LIMIT,
    );
    one_line_error(&r, "reversed range");
    let r = meshrun(
        &["launch", "--hosts", "n[1-10000000]", "--dry-run", "--", "mesh-check"],
        LIMIT,
    );
    one_line_error(&r, "expands to 10000000 hosts");
}

#[test]
fn more_ranks_than_slots() {
    let f = tmpfile("two-slots", "localhost slots=2\n");
    let r = meshrun(
        &[
            "launch",
            "--hostfile",
            f.to_str().unwrap(),
            "--np",
            "3",
            "--dry-run",
            "--",
            "mesh-check",
        ],
        LIMIT,
    );
    one_line_error(&r, "--np 3 is more than the 2 slots");
}

#[test]
fn missing_mpirun() {
    let r = meshrun(
        &[
            "launch",
            "--np",
            "2",
            "--mpirun",
            "/nonexistent/mpirun",
            "--",
            "mesh-check",
        ],
        LIMIT,
    );
    one_line_error(&r, "`/nonexistent/mpirun` was not found");
}

#[test]
fn unresolvable_host() {
    // A real launch stops before starting mpirun.
    let r = meshrun(
        &[
            "launch",
            "--hosts",
            "no-such-host-meshrun.invalid",
            "--ppn",
            "2",
            "--",
            "mesh-check",
        ],
        LIMIT,
    );
    one_line_error(
        &r,
        "host `no-such-host-meshrun.invalid` (from --hosts) does not resolve",
    );
    // A dry run (perhaps made outside the cluster) warns and prints the command.
    let r = meshrun(
        &[
            "launch",
            "--hosts",
            "no-such-host-meshrun.invalid",
            "--ppn",
            "2",
            "--dry-run",
            "--",
            "mesh-check",
        ],
        LIMIT,
    );
    r.expect_code(0);
    assert!(
        r.stderr.starts_with(
            "meshrun launch: warning (--dry-run): host `no-such-host-meshrun.invalid` (from --hosts) does not resolve"
        ) && r
            .stderr
            .trim_end()
            .ends_with("; the command may still work on the cluster"),
        "{}",
        r.stderr
    );
    assert!(
        r.stdout.contains("--host no-such-host-meshrun.invalid:2"),
        "{}",
        r.stdout
    );
}

#[test]
fn shell_syntax_in_host_names_is_refused() {
    let f = tmpfile("inject", "node01;reboot slots=1\n");
    let r = dry_run_with_hostfile(&f);
    one_line_error(&r, "character `;` is not allowed");
}

#[test]
fn unknown_option_and_bad_values() {
    let r = meshrun(&["mesh-check", "--frobnicate"], LIMIT);
    r.expect_code(2);
    assert!(r.stderr.contains("unexpected argument '--frobnicate'"), "{}", r.stderr);
    let r = meshrun(&["mesh-check", "--timeout", "-1"], LIMIT);
    r.expect_code(2);
    let r = meshrun(&["mesh-check", "--bytes", "12Q"], LIMIT);
    r.expect_code(2);
    assert!(r.stderr.contains("not a size"), "{}", r.stderr);
}

#[test]
fn dry_run_prints_the_exact_command() {
    let f = tmpfile("mpich-style", "# two nodes\nnode-a:2\nnode-b:2\n");
    // The caller's own MESHRUN_* or NCCL_* variables would be forwarded too: not in this test.
    let mut cmd = std::process::Command::new(meshrun_bin());
    without_forwarded_env(mpi_env(&mut cmd)).args([
        "launch",
        "--hostfile",
        f.to_str().unwrap(),
        "--mpi",
        "openmpi",
        "--no-resolve-check",
        "--rsh-agent",
        "/opt/my agent",
        "-x",
        "NCCL_DEBUG=INFO",
        "--meshrun",
        "/usr/bin/meshrun",
        "--dry-run",
        "--",
        "mesh-check",
        "--iters",
        "5",
    ]);
    let r = run_bounded(&mut cmd, LIMIT);
    r.expect_code(0);
    let root = if nix::unistd::geteuid().is_root() {
        "--allow-run-as-root "
    } else {
        ""
    };
    assert_eq!(
        r.stdout.trim(),
        format!(
            "mpirun {root}-np 4 --host node-a:2,node-b:2 --bind-to none --mca plm_rsh_agent '/opt/my agent' \
             --mca odls_base_sigkill_timeout 0 -x MESHRUN_EXPECT_NODES=2 -x NCCL_DEBUG=INFO /usr/bin/meshrun mesh-check --iters 5"
        )
    );
}

#[test]
fn version_names_the_revision_the_mpi_library_and_what_this_machine_has() {
    let r = meshrun(&["--version"], LIMIT);
    r.expect_code(0);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", r.stdout);
    assert!(lines[0].starts_with("meshrun 0."), "{}", r.stdout);
    let rev = lines[1].strip_prefix("git revision: ").unwrap_or_default();
    if root().join(".git").exists() {
        assert!(
            rev.len() >= 12 && rev[..12].chars().all(|c| c.is_ascii_hexdigit()),
            "{}",
            r.stdout
        );
    } else {
        assert!(rev.starts_with("unknown"), "{}", r.stdout);
    }
    assert!(lines[2].starts_with("MPI library: Open MPI v"), "{}", r.stdout);
    assert!(
        lines[3] == "CUDA: libcuda loads here" || lines[3].starts_with("CUDA: libcuda not found here"),
        "{}",
        r.stdout
    );
    // What this machine has: RDMA devices under /sys/class/infiniband, or none.
    let rdma = e2e::rdma_devices_here();
    let want = if rdma {
        " RDMA device(s) here"
    } else {
        "RDMA: libibverbs linked; no RDMA device"
    };
    assert!(lines[4].contains(want), "{}", r.stdout);
}

/// `meshrun completions SHELL` and `meshrun manpage`: what a packager installs.
#[test]
fn completions_and_man_page() {
    let r = meshrun(&["completions", "bash"], LIMIT);
    r.expect_code(0);
    for want in ["pairwise", "all_reduce", "--tcp-if", "--gid-index", "complete -F"] {
        assert!(r.stdout.contains(want), "bash completion lacks `{want}`");
    }
    // The script is valid bash.
    let dir = std::env::temp_dir().join(format!("meshrun-completions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("meshrun.bash");
    std::fs::write(&f, &r.stdout).unwrap();
    let ok = std::process::Command::new("bash").arg("-n").arg(&f).status().unwrap();
    assert!(ok.success(), "bash -n refused the completion script");
    for (shell, want) in [("zsh", "#compdef meshrun"), ("fish", "complete -c meshrun")] {
        let r = meshrun(&["completions", shell], LIMIT);
        r.expect_code(0);
        assert!(
            r.stdout.contains(want),
            "{shell}: {}",
            &r.stdout[..r.stdout.len().min(300)]
        );
    }
    one_line_error(&meshrun(&["completions", "tcsh"], LIMIT), "invalid value 'tcsh'");

    let r = meshrun(&["manpage"], LIMIT);
    r.expect_code(0);
    assert!(r.stdout.contains(".TH meshrun 1"), "{}", &r.stdout[..300]);
    for want in ["MESHRUN\\-PAIRWISE", "MESHRUN_TCP_IF", "NCCL_IB_HCA", ".SH ENVIRONMENT"] {
        assert!(r.stdout.contains(want), "man page lacks `{want}`");
    }
    // groff formats it without a warning (groff-base: scripts/install-deps installs it).
    let page = dir.join("meshrun.1");
    std::fs::write(&page, &r.stdout).unwrap();
    let out = std::process::Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(&page)
        .output()
        .expect("groff (Debian's groff-base) is needed: scripts/install-deps installs it");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "groff: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A bad rank command is refused where `meshrun launch` runs, dry run or not, before mpirun
/// starts: `--mpirun` names a program that does not exist, so reaching mpirun would be a
/// different error.
#[test]
fn launch_refuses_a_bad_rank_command_before_mpirun() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["--np", "4", "--", "all_reduce", "-b", "64M", "-e", "8"],
            "the rank command `all_reduce -b 64M -e 8`: -b 67108864 is larger than -e 8; expected -b <= -e",
        ),
        (
            &["--np", "4", "--dry-run", "--", "pairwise", "--bogus"],
            "the rank command `pairwise --bogus`: unexpected argument '--bogus' found",
        ),
        (&["--np", "4", "--", "pairwise", "-s", "0"], "size 0 is not a message"),
        (
            &["--np", "0", "--", "mesh-check"],
            "--np 0 starts no rank; expected --np 2 or more",
        ),
        (
            &["--np", "1", "--dry-run", "--", "mesh-check"],
            "mesh-check needs at least 2 ranks to have a pair to check; this job has 1",
        ),
        (
            &["--np", "4", "--", "broadcast", "-r", "4"],
            "-r 4: this job has ranks 0 to 3",
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["launch", "--mpirun", "/nonexistent/mpirun"];
        all.extend_from_slice(args);
        let r = meshrun(&all, LIMIT);
        one_line_error(&r, want);
        assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("nonexistent"), "mpirun was reached: {}", r.stderr);
    }
}

/// Ranks started by mpirun directly with a bad argument: rank 0 alone says it, in one line, and
/// every rank leaves with status 2. Rank 0 is forced to start 2 s after the others (an MPMD job
/// whose first program sleeps, then becomes meshrun): ranks that left at once would have mpirun
/// end rank 0 before it said anything, as happened under load.
#[test]
fn a_bad_argument_under_mpirun_is_said_once() {
    let late = format!("sleep 2; exec '{}' pairwise -s 0", meshrun_bin().display());
    let mut cmd = std::process::Command::new("mpirun");
    mpi_env(&mut cmd)
        .args(["--bind-to", "none", "-np", "1", "sh", "-c", &late, ":", "-np", "2"])
        .arg(meshrun_bin())
        .args(["pairwise", "-s", "0"]);
    let r = run_bounded(&mut cmd, LIMIT);
    let said: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("meshrun:")).collect();
    assert_eq!(said.len(), 1, "{}", r.stderr);
    assert!(
        said[0].contains("size 0 is not a message") && said[0].ends_with("see `meshrun pairwise --help`"),
        "{}",
        said[0]
    );
    assert!(!r.stderr.contains("Usage:"), "{}", r.stderr);
    r.expect_code(2);
    // mesh-check on one rank refuses, as pairwise does, and nothing says `inf`.
    let r = mpirun(1, &["mesh-check"], &[], LIMIT);
    r.expect_code(2);
    assert!(
        r.stderr
            .contains("mesh-check needs at least 2 ranks to have a pair to check; this job has 1"),
        "{}",
        r.stderr
    );
    assert!(!r.all().contains(" inf "), "{}", r.all());
}

/// --ssh-port reaches ssh through Open MPI's plm_rsh_args, after what OMPI_MCA_plm_rsh_args
/// holds (an MPIJob operator's `-o ConnectionAttempts=10`); MPICH has no such option: one line.
#[test]
fn ssh_port_is_added_to_the_operators_rsh_args() {
    let mut cmd = std::process::Command::new(meshrun_bin());
    without_forwarded_env(mpi_env(&mut cmd))
        .env("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10")
        .args([
            "launch",
            "--mpi",
            "openmpi",
            "--np",
            "2",
            "--ssh-port",
            "2222",
            "--dry-run",
            "--",
            "mesh-check",
        ]);
    let r = run_bounded(&mut cmd, LIMIT);
    r.expect_code(0);
    assert!(
        r.stdout
            .contains(" --mca plm_rsh_args '-o ConnectionAttempts=10 -p 2222' "),
        "{}",
        r.stdout
    );
    let r = meshrun(
        &[
            "launch",
            "--mpi",
            "mpich",
            "--np",
            "2",
            "--ssh-port",
            "2222",
            "--dry-run",
            "--",
            "mesh-check",
        ],
        LIMIT,
    );
    one_line_error(&r, "--ssh-port: MPICH's mpiexec has no option for the ssh port");
}
