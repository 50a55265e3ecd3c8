//! `meshrun launch` ends within a bound after mpirun has said how the job ended, whatever mpirun
//! does then (launcher/src/launch/teardown.rs). Open MPI 4.1.4's mpirun now and then hangs, or
//! segfaults, in its own teardown after its notice of a failed rank
//! (docs/evidence/mpirun-teardown-hang-2026-12-07); that cannot be forced with the real one, so
//! these tests run a stand-in `--mpirun` that writes the hung run's recorded stderr
//! (tests/fixtures/mpirun-teardown-hang.stderr, or -segv.stderr) and then does what the real one
//! was seen to do: stays (gdb: a mutex wait in pmix_rte_finalize), or dies of SIGSEGV
//! (ompi#13650). It does nothing else; the launch's status and line are what an operator sees.

use std::time::{Duration, Instant};

use e2e::*;

/// A run's bound here: the launch waits its 2 s grace at most once, or not at all.
const LIMIT: Duration = Duration::from_secs(60);

/// An executable stand-in for mpirun holding `body` (after `#!/bin/sh`), in this test's own
/// directory.
fn stand_in(test: &str, body: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("meshrun-teardown-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("test dir");
    let p = dir.join("mpirun");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("stand-in");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

/// The stderr of the real run in `fixture` (tests/fixtures/), to the stand-in's stderr.
fn replay(fixture: &str) -> String {
    format!("cat '{}' >&2", root().join("tests/fixtures").join(fixture).display())
}

/// The hung run's stderr: the ranks' lines, then mpirun's notice (`Exit code: 3`).
fn notice() -> String {
    replay("mpirun-teardown-hang.stderr")
}

fn launch_args(mpirun: &std::path::Path) -> Vec<String> {
    [
        "launch",
        "--mpi",
        "openmpi",
        "--mpirun",
        &mpirun.display().to_string(),
        "--np",
        "2",
        "--teardown-grace",
        "2",
        "--",
        "mesh-check",
    ]
    .map(String::from)
    .to_vec()
}

/// `meshrun launch` of a 2-rank mesh-check over the stand-in `mpirun`, with a 2 s grace.
fn launch_command(mpirun: &std::path::Path) -> std::process::Command {
    let args = launch_args(mpirun);
    meshrun_command(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn launch(mpirun: &std::path::Path) -> Run {
    run_bounded(&mut launch_command(mpirun), LIMIT)
}

#[test]
fn an_mpirun_hung_after_its_notice_is_ended_and_the_reported_status_returned() {
    let m = stand_in("hang", &format!("{}\nexec sleep 600", notice()));
    let t0 = Instant::now();
    let r = launch(&m);
    let took = t0.elapsed();
    r.expect_code(3);
    // mpirun's words passed on whole, then the launch's one line.
    assert!(
        r.stderr.contains("  Process name: [[9634,1],0]\n  Exit code:    3\n"),
        "{}",
        r.stderr
    );
    let line =
        "meshrun launch: mpirun reported the job's end (rank 0 exited with status 3) 2 s ago and had not exited since";
    assert!(r.stderr.contains(line), "{}", r.stderr);
    assert!(took >= Duration::from_secs(2), "ended before its grace: {took:?}");
    assert!(took < Duration::from_secs(30), "not ended near its grace: {took:?}");
}

#[test]
fn an_mpirun_that_crashes_after_its_notice_gives_the_reported_status() {
    // The crashed run's stderr: the notice, then mpirun's own SIGSEGV backtrace.
    let m = stand_in(
        "crash",
        &format!("{}\nkill -SEGV $$", replay("mpirun-teardown-segv.stderr")),
    );
    let r = launch(&m);
    r.expect_code(3);
    assert!(
        r.stderr.contains(
            "meshrun launch: mpirun died of signal 11 after it reported the job's end (rank 0 exited with status 3)"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn an_mpirun_that_exits_keeps_its_own_status_and_no_line_is_added() {
    for (body, want) in [
        (format!("{}\nexit 3", notice()), 3),
        ("echo fine\nexit 0".to_string(), 0),
        ("exit 7".to_string(), 7),
    ] {
        let m = stand_in(&format!("exits-{want}"), &body);
        let r = launch(&m);
        r.expect_code(want);
        assert!(!r.stderr.contains("meshrun launch:"), "{}", r.stderr);
        assert!(r.elapsed < Duration::from_secs(30), "{:?}", r.elapsed);
    }
    // A rank's progress bar, which ends in \r, not \n, is passed on as it comes.
    let m = stand_in(
        "progress",
        "printf 'meshrun: [###---] round 1/2\\r' >&2\nexec sleep 600",
    );
    let cmd = launch_command(&m);
    let dir = std::env::temp_dir().join(format!("meshrun-teardown-{}-progress", std::process::id()));
    let bg = Background::start(cmd, &dir, "launch");
    assert!(
        bg.stderr_shows("round 1/2\r", Duration::from_secs(20)),
        "{:?}",
        bg.stderr()
    );
    let _ = bg.finish(Duration::ZERO);
}

/// SIGTERM sent to the launch alone (a batch system's, the kubelet's) reaches mpirun, whose own
/// end is then the launch's; an mpirun that ignores it is ended after the grace.
#[test]
fn sigterm_is_passed_on_to_mpirun_and_bounded() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    for (name, body, want, line) in [
        (
            "term",
            "trap 'kill $pid; echo \"mpirun: SIGTERM, ending the job\" >&2; exit 143' TERM\nsleep 600 &\npid=$!\necho started >&2\nwait $pid",
            143,
            None,
        ),
        (
            "deaf",
            "trap '' TERM\necho started >&2\nexec sleep 600",
            143,
            Some("meshrun launch: mpirun was passed SIGTERM to end the job 2 s ago and had not exited since"),
        ),
    ] {
        let m = stand_in(name, body);
        let dir = std::env::temp_dir().join(format!("meshrun-teardown-{}-{name}", std::process::id()));
        let cmd = launch_command(&m);
        let bg = Background::start(cmd, &dir, "launch");
        // mpirun has started (the launch passed its line on), so the launch's watch is up.
        assert!(bg.stderr_shows("started\n", Duration::from_secs(20)), "{name}: {}", bg.stderr());
        kill(Pid::from_raw(bg.pid()), Signal::SIGTERM).expect("SIGTERM the launch");
        let (status, _, err) = bg.finish(Duration::from_secs(30));
        let status = status.unwrap_or_else(|| panic!("{name}: the launch did not end after SIGTERM: {err}"));
        assert_eq!(status.code(), Some(want), "{name}: {err}");
        match line {
            None => assert!(err.contains("mpirun: SIGTERM, ending the job"), "{name}: {err}"),
            Some(l) => assert!(err.contains(l), "{name}: {err}"),
        }
    }
}
