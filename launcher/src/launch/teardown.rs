//! mpirun run to its end, within a bound after the job's. Open MPI 4.1's mpirun (Debian 12's
//! 4.1.4 over PMIx 4.2) now and then deadlocks, or segfaults, in its own teardown after it has
//! said how the job ended and every rank has gone (docs/evidence/mpirun-teardown-hang-2026-12-07,
//! ompi#13650): a launch that waited on it alone would then never end, or end with 139 for a job
//! whose rank reported 3. So `meshrun launch` passes mpirun's stderr on as it comes, reads in it
//! the notice by which mpirun says how the job ended ([`NoticeReader`]), and where mpirun is still
//! there `grace` after that notice, ends it and exits with the status mpirun reported; where
//! mpirun then dies of a signal instead of exiting, it exits with that status too.
//!
//! Signals: SIGTERM and SIGHUP (a batch system's or the kubelet's, sent to the launcher alone)
//! are passed on to mpirun, which ends the job, and the same bound then applies. SIGINT and
//! SIGQUIT from a terminal reach mpirun directly (one process group): the launcher does not die
//! of them before mpirun, so mpirun's last words still have a reader.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};

use super::LaunchError;

/// How the job ended, as mpirun said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    /// The status mpirun exits with after such a notice: the process's exit code, or 128 + the
    /// signal that ended it.
    pub status: i32,
    /// Which rank, and how, in words.
    pub what: String,
}

/// Reads mpirun's stderr a line at a time for Open MPI's notices of a job's end:
///
/// ```text
/// mpirun detected that one or more processes exited with non-zero status, thus causing
/// the job to be terminated. The first process to do so was:
///
///   Process name: [[9634,1],0]
///   Exit code:    3
/// ```
///
/// and `mpirun noticed that process rank 2 with PID 0 on node vm exited on signal 9 (Killed).`
/// (orte/tools/orterun's help-orterun.txt; the texts of Open MPI 4.1's runs in
/// tests/fixtures/).
#[derive(Debug, Default)]
pub struct NoticeReader {
    /// Inside a "detected ... non-zero status" notice: the rank named so far, if any.
    detected: Option<Option<u64>>,
}

impl NoticeReader {
    /// The job's end, where `line` completes a notice of it.
    pub fn line(&mut self, line: &str) -> Option<Reported> {
        let l = line.trim();
        // `mpirun`, or the name it was started by (Open MPI 5's PRRTE writes its tool's name).
        let after_tool = |text: &str| {
            l.split_once(' ')
                .and_then(|(tool, rest)| (!tool.is_empty()).then_some(rest))
                .and_then(|rest| rest.strip_prefix(text))
        };
        if after_tool("detected that one or more processes exited with non-zero status").is_some() {
            self.detected = Some(None);
            return None;
        }
        if let Some(rank) = self.detected.as_mut() {
            if let Some(name) = l.strip_prefix("Process name:") {
                // [[jobid,1],RANK]
                *rank = name
                    .trim()
                    .trim_end_matches(']')
                    .rsplit(',')
                    .next()
                    .and_then(|r| r.parse().ok());
            } else if let Some(code) = l.strip_prefix("Exit code:") {
                let rank = rank.take();
                self.detected = None;
                let status: i32 = code.trim().parse().ok()?;
                let who = rank.map_or("a rank".to_string(), |r| format!("rank {r}"));
                return Some(Reported {
                    status,
                    what: format!("{who} exited with status {status}"),
                });
            } else if l.starts_with("-----") {
                self.detected = None;
            }
            return None;
        }
        let rest = after_tool("noticed that process rank ")?;
        let (rank, rest) = rest.split_once(" with PID ")?;
        let (_, rest) = rest.split_once(" on node ")?;
        let (node, rest) = rest.split_once(" exited on signal ")?;
        let (sig, name) = rest.split_once(' ').unwrap_or((rest.trim_end_matches('.'), ""));
        let sig: i32 = sig.trim_end_matches('.').parse().ok()?;
        let name = name.trim_end_matches('.').trim();
        Some(Reported {
            status: 128 + sig,
            what: format!(
                "rank {rank} on {node} was ended by signal {sig}{}",
                if name.is_empty() {
                    String::new()
                } else {
                    format!(" {name}")
                }
            ),
        })
    }
}

/// The most of one line of mpirun's stderr read for a notice.
const LINE_MAX: usize = 1024;

/// What the watch hears while mpirun runs.
enum Event {
    Reported(Reported),
    /// A signal passed on to mpirun.
    Forwarded(Signal),
    /// mpirun's stderr is at its end.
    Eof,
}

/// Run mpirun (`argv`) to its end; its exit status, or 128 + the signal that ended it; or,
/// after its notice of the job's end, the status it reported where it stays past `grace` (then
/// ended) or dies of a signal.
pub fn run(argv: &[String], grace: Duration) -> Result<i32, LaunchError> {
    let (tx, rx) = mpsc::channel();
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| LaunchError::Spawn {
            mpirun: argv[0].clone(),
            source,
        })?;
    // Blocked after mpirun started (a child inherits the mask: mpirun must not start with them
    // blocked) and before the watch's threads start, which inherit it: only the signal thread
    // takes them.
    let signals = {
        let mut s = SigSet::empty();
        for sig in [Signal::SIGINT, Signal::SIGQUIT, Signal::SIGTERM, Signal::SIGHUP] {
            s.add(sig);
        }
        s
    };
    let _ = signals.thread_block();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    {
        let tx = tx.clone();
        std::thread::spawn(move || loop {
            let Ok(sig) = signals.wait() else { continue };
            if matches!(sig, Signal::SIGTERM | Signal::SIGHUP) {
                let _ = nix::sys::signal::kill(pid, sig);
                if tx.send(Event::Forwarded(sig)).is_err() {
                    return;
                }
            }
        });
    }
    if let Some(err) = child.stderr.take() {
        std::thread::spawn(move || relay(err, &tx));
    }
    Ok(watch(&mut child, &rx, grace))
}

/// Pass `err` on to this process's stderr as it comes (a progress bar's `\r` included), and
/// each notice of the job's end to `tx`.
fn relay(mut err: impl Read, tx: &mpsc::Sender<Event>) {
    let mut reader = NoticeReader::default();
    let (mut buf, mut line) = ([0u8; 8192], Vec::new());
    loop {
        let n = match err.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut out = std::io::stderr().lock();
        let _ = out.write_all(&buf[..n]).and_then(|()| out.flush());
        drop(out);
        // Lines end at \n or \r (a progress bar's); a notice's lines are short, so a line's
        // first LINE_MAX bytes are enough, and a long one costs no memory.
        for &b in &buf[..n] {
            if b != b'\n' && b != b'\r' {
                if line.len() < LINE_MAX {
                    line.push(b);
                }
                continue;
            }
            if let Some(r) = reader.line(&String::from_utf8_lossy(&line)) {
                let _ = tx.send(Event::Reported(r));
            }
            line.clear();
        }
    }
    let _ = tx.send(Event::Eof);
}

/// What the watch has heard.
#[derive(Default)]
struct Heard {
    reported: Option<Reported>,
    /// Since the first notice of the job's end, or the first signal passed on.
    since: Option<Instant>,
    /// The first signal passed on.
    forwarded: Option<Signal>,
    eof: bool,
}

impl Heard {
    fn take(&mut self, ev: Event) {
        match ev {
            Event::Reported(r) => {
                if self.reported.is_none() {
                    self.reported = Some(r);
                    self.since.get_or_insert_with(Instant::now);
                }
            }
            Event::Forwarded(sig) => {
                self.forwarded.get_or_insert(sig);
                self.since.get_or_insert_with(Instant::now);
            }
            Event::Eof => self.eof = true,
        }
    }
}

/// Wait for `child` (mpirun) as [`run`] says.
fn watch(child: &mut Child, rx: &mpsc::Receiver<Event>, grace: Duration) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    let mut heard = Heard::default();
    let status = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break st;
        }
        while let Ok(ev) = rx.try_recv() {
            heard.take(ev);
        }
        if heard.since.is_some_and(|t| t.elapsed() > grace) {
            let _ = child.kill();
            let _ = child.wait();
            let (status, why) = match (&heard.reported, heard.forwarded) {
                (Some(r), _) => (r.status, format!("reported the job's end ({})", r.what)),
                (None, sig) => {
                    let sig = sig.unwrap_or(Signal::SIGTERM);
                    (128 + sig as i32, format!("was passed {sig} to end the job"))
                }
            };
            ranks::eline!(
                "meshrun launch: mpirun {why} {:.0} s ago and had not exited since (Open MPI 4.1 can hang in its own teardown; --teardown-grace sets the wait): ended it; exit status {status}",
                grace.as_secs_f64()
            );
            return status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // What mpirun wrote last, out before this process's own line and exit (bounded: a process
    // mpirun left behind may hold its stderr open).
    let until = Instant::now() + Duration::from_secs(2);
    while !heard.eof {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(ev) => heard.take(ev),
            Err(_) => break,
        }
    }
    match (status.code(), status.signal(), heard.reported) {
        (Some(c), _, _) => c,
        (None, Some(sig), Some(r)) => {
            ranks::eline!(
                "meshrun launch: mpirun died of signal {sig} after it reported the job's end ({}) (Open MPI 4.1 can crash in its own teardown); exit status {}",
                r.what,
                r.status
            );
            r.status
        }
        (None, sig, _) => 128 + sig.unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<Reported> {
        let mut r = NoticeReader::default();
        text.lines().filter_map(|l| r.line(l)).collect()
    }

    /// The stderr of a real run whose mpirun hung after its notice (Open MPI 4.1.4, PMIx 4.2).
    #[test]
    fn the_hung_runs_notice_gives_rank_and_status() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/mpirun-teardown-hang.stderr"
        ))
        .expect("fixture");
        assert_eq!(
            read(&text),
            [Reported {
                status: 3,
                what: "rank 0 exited with status 3".into()
            }]
        );
    }

    /// Open MPI 4.1.4's notices for a rank that exited 5 and one killed by SIGKILL (mpirun then
    /// exits 5 and 137), as this machine's mpirun printed them.
    #[test]
    fn exit_codes_and_signals_are_read_as_mpirun_exits_with_them() {
        let exited = "--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[26453,1],1]
  Exit code:    5
--------------------------------------------------------------------------
";
        assert_eq!(
            read(exited),
            [Reported {
                status: 5,
                what: "rank 1 exited with status 5".into()
            }]
        );
        let killed = "--------------------------------------------------------------------------
mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).
--------------------------------------------------------------------------
";
        assert_eq!(
            read(killed),
            [Reported {
                status: 137,
                what: "rank 1 on vm was ended by signal 9 (Killed)".into()
            }]
        );
    }

    /// Open MPI 5 (PRRTE) writes the name the tool was started by.
    #[test]
    fn the_tools_own_name_is_read_too() {
        let text =
            "prterun noticed that process rank 3 with PID 0 on node n2 exited on signal 11 (Segmentation fault).";
        assert_eq!(
            read(text),
            [Reported {
                status: 139,
                what: "rank 3 on n2 was ended by signal 11 (Segmentation fault)".into()
            }]
        );
    }

    /// A rank's own lines that mention exit codes, and a notice cut short, report nothing.
    #[test]
    fn other_lines_report_nothing() {
        assert!(read("meshrun: rank 2 (vm): Exit code: 3 is what it said\nExit code: 4\n").is_empty());
        let cut = "mpirun detected that one or more processes exited with non-zero status, thus causing
--------------------------------------------------------------------------
  Exit code:    3
";
        assert!(read(cut).is_empty());
    }
}
