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
        assert_eq!(self.code, Some(want), "exit status; output:\n{}", self.all());
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
    run_bounded_with(cmd, limit, Some((tag, linger)))
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
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if start.elapsed() > limit {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    let ended = std::time::SystemTime::now();
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
        status.is_some(),
        "command ran past its {limit:?} limit and was killed: {cmd:?}\n{}",
        run.all()
    );
    (run, leftovers)
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
