//! Running a command within a time limit: its output, its status, the processes it left behind,
//! and polling for a condition until a deadline.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a finished command left.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// From the start to the command's exit (not counting any wait for leftovers after it).
    pub elapsed: Duration,
    /// When the command exited.
    pub ended: std::time::SystemTime,
}

impl Run {
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
    /// Panic with the output unless the exit status is `want`.
    pub fn expect_code(&self, want: i32) -> &Self {
        // stderr first: a CI log's tail then shows the end of stdout, where a report's verdict is.
        assert_eq!(
            self.code,
            Some(want),
            "exit status after {:.1} s; its stderr, then its stdout:\n{}\n{}",
            self.elapsed.as_secs_f64(),
            self.stderr,
            self.stdout
        );
        self
    }
}

/// Run `cmd` to completion, killing its process group after `limit`.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Run {
    run_bounded_with(cmd, limit, None).0
}

/// Like [`run_bounded`], with `tag` (`NAME=value`) set in the command's environment; then wait up
/// to `linger` for every process carrying it (the ranks) to go. Returns those still there after
/// that (then killed), as `pid (comm) state` lines.
pub fn run_bounded_leftovers(cmd: &mut Command, limit: Duration, tag: &str, linger: Duration) -> (Run, Vec<String>) {
    if let Some((k, v)) = tag.split_once('=') {
        cmd.env(k, v);
    }
    let (run, left, _) = run_bounded_watched(cmd, limit, Some((tag, linger)), None);
    (run, left)
}

/// A launcher (mpirun) that outlived its ranks: every `comm` process carrying the tag had gone
/// (after at least one had run) `grace` before the launcher was killed.
#[derive(Debug, Clone, Copy)]
pub struct OutlivedRanks {
    /// When the last of them was seen gone.
    pub since: std::time::SystemTime,
}

/// Like [`run_bounded_leftovers`], also watching the ranks (processes named `comm` carrying the
/// tag): where the launcher is still running `grace` after the last of them went, it is killed
/// and the run ends there, `ended` being when the ranks were gone, and that is returned. For
/// Open MPI 4.1's mpirun, which now and then deadlocks in its own teardown after it reported the
/// job's end (see the fault tests' `job_status`); any other command is run as
/// [`run_bounded_leftovers`] runs it.
pub fn run_bounded_outlived(
    cmd: &mut Command,
    limit: Duration,
    tag: &str,
    linger: Duration,
    comm: &str,
    grace: Duration,
) -> (Run, Vec<String>, Option<OutlivedRanks>) {
    if let Some((k, v)) = tag.split_once('=') {
        cmd.env(k, v);
    }
    run_bounded_watched(cmd, limit, Some((tag, linger)), Some((comm, grace)))
}

/// Pids of the live processes named `comm` whose environment holds `tag` (a `NAME=value` the
/// test set on the launcher, which passes it on to every rank): found wherever they are, even
/// reparented to init after their launcher left.
pub fn tagged_pids(tag: &str, comm: &str) -> Vec<i32> {
    tagged(tag)
        .into_iter()
        .filter(|(_, c, _)| c == comm)
        .map(|(p, _, _)| p)
        .collect()
}

/// Poll `f` every 100 ms until it holds or `limit` passes; whether it held (asked once more at
/// the end).
pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

/// (pid, comm, state) of every live process whose environment holds `tag`.
fn tagged(tag: &str) -> Vec<(i32, String, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    dir.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            if pid == me {
                return None;
            }
            let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            if !env.split(|&b| b == 0).any(|v| v == tag.as_bytes()) {
                return None;
            }
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let comm = head.split_once('(')?.1.to_string();
            let state = rest.split_whitespace().next()?.to_string();
            (state != "Z").then_some((pid, comm, state))
        })
        .collect()
}

fn run_bounded_with(cmd: &mut Command, limit: Duration, linger: Option<(&str, Duration)>) -> (Run, Vec<String>) {
    let (run, left, _) = run_bounded_watched(cmd, limit, linger, None);
    (run, left)
}

fn run_bounded_watched(
    cmd: &mut Command,
    limit: Duration,
    linger: Option<(&str, Duration)>,
    ranks: Option<(&str, Duration)>,
) -> (Run, Vec<String>, Option<OutlivedRanks>) {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    // The ranks' watch: whether one has been seen, and since when none has been.
    let (mut seen, mut gone): (bool, Option<(Instant, std::time::SystemTime)>) = (false, None);
    let (mut outlived, mut polls) = (None, 0u64);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        polls += 1;
        // /proc read every 200 ms, not every poll: it reads every process's environment.
        if let (Some((tag, _)), Some((comm, grace)), 0) = (linger, ranks, polls % 10) {
            if tagged(tag).iter().any(|(_, c, _)| c == comm) {
                (seen, gone) = (true, None);
            } else if seen {
                let (at, when) = *gone.get_or_insert_with(|| (Instant::now(), std::time::SystemTime::now()));
                if at.elapsed() > grace {
                    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                    let _ = child.wait();
                    outlived = Some(OutlivedRanks { since: when });
                    break None;
                }
            }
        }
        if start.elapsed() > limit {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (elapsed, ended) = match (outlived, gone) {
        (Some(o), Some((at, _))) => (at.duration_since(start), o.since),
        _ => (start.elapsed(), std::time::SystemTime::now()),
    };
    let mut leftovers = Vec::new();
    if let Some((tag, linger)) = linger {
        let until = Instant::now() + linger;
        loop {
            let left = tagged(tag);
            leftovers = left.iter().map(|(p, c, s)| format!("{p} ({c}) {s}")).collect();
            if leftovers.is_empty() || Instant::now() > until {
                for (p, _, _) in left {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Leftover ranks of a failed job must not outlive the test.
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    let run = Run {
        code: status.and_then(|s| s.code()),
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
        elapsed,
        ended,
    };
    assert!(
        status.is_some() || outlived.is_some(),
        "command ran past its {limit:?} limit and was killed: {cmd:?}\n{}",
        run.all()
    );
    (run, leftovers, outlived)
}

/// A command running in the background in its own process group, its output going to files, for
/// a test that acts while it runs (cuts a link, drops one for a moment) and then reads the end.
pub struct Background {
    child: std::process::Child,
    out: std::path::PathBuf,
    err: std::path::PathBuf,
}

impl Background {
    /// Start `cmd` with its stdout and stderr in `name.out` and `name.err` under `dir`.
    pub fn start(mut cmd: Command, dir: &std::path::Path, name: &str) -> Background {
        use std::os::unix::process::CommandExt;
        let out = dir.join(format!("{name}.out"));
        let err = dir.join(format!("{name}.err"));
        cmd.stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .process_group(0);
        let child = cmd.spawn().expect("start the background command");
        Background { child, out, err }
    }

    /// Its process id (its process group's too).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Whether its stderr holds `text` within `limit`.
    pub fn stderr_shows(&self, text: &str, limit: Duration) -> bool {
        wait_for(limit, || self.stderr().contains(text))
    }

    /// Wait up to `limit` for it to end (else kill its process group); its status, or None when
    /// it had to be killed, and what it wrote.
    pub fn finish(mut self, limit: Duration) -> (Option<std::process::ExitStatus>, String, String) {
        let ended = wait_for(limit, || matches!(self.child.try_wait(), Ok(Some(_))));
        if !ended {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let status = self.child.wait().expect("wait for the background command");
        let stdout = std::fs::read_to_string(&self.out).unwrap_or_default();
        (ended.then_some(status), stdout, self.stderr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A launcher that stays after its one "rank" (a copy of sleep named meshrun, tagged) ended:
    /// killed `grace` after the rank went, with `ended` at the rank's end; one that leaves with
    /// its rank is waited for as before.
    #[test]
    fn a_launcher_that_outlives_its_ranks_is_ended_after_the_grace() {
        let dir = std::env::temp_dir().join(format!("meshrun-outlived-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let rank = dir.join("meshrun");
        std::fs::copy("/bin/sleep", &rank).expect("copy sleep");
        let tag = format!("MESHRUN_OUTLIVED_TEST={}", dir.display());
        let script = |after: &str| format!("'{}' 1; echo reported >&2; {after}", rank.display());
        let grace = Duration::from_secs(1);
        let start = std::time::SystemTime::now();
        let mut hung = Command::new("sh");
        hung.args(["-c", &script("exec sleep 60")]);
        let (run, left, outlived) =
            run_bounded_outlived(&mut hung, Duration::from_secs(30), &tag, grace, "meshrun", grace);
        let outlived = outlived.expect("the launcher outlived its rank");
        assert_eq!(run.code, None);
        assert!(run.stderr.contains("reported"), "{}", run.stderr);
        assert!(left.is_empty(), "{left:?}");
        let rank_ended = outlived
            .since
            .duration_since(start)
            .expect("after the start")
            .as_secs_f64();
        assert!((1.0..10.0).contains(&rank_ended), "the rank ended {rank_ended:.1} s in");
        assert_eq!(run.ended, outlived.since);
        let mut leaves = Command::new("sh");
        leaves.args(["-c", &script("exit 3")]);
        let (run, _, outlived) =
            run_bounded_outlived(&mut leaves, Duration::from_secs(30), &tag, grace, "meshrun", grace);
        assert!(outlived.is_none());
        assert_eq!(run.code, Some(3));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
