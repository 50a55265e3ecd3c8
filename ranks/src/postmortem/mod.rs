//! Post-mortem of a stall: when a rank's deadline expires, the ranks that can still talk say what
//! they waited on, and one rank prints one line naming the root cause.
//!
//! The channel does not depend on the stalled rank or on MPI (a frozen rank would hang any MPI
//! collective): every rank listens on a small TCP *control port* served by its own thread,
//! opened at start-up and announced once over MPI with this process's pid. A rank whose deadline
//! expires sends an *alarm* (its [`StallReport`]) to the two collectors, rank 0 and rank n-1,
//! and waits. A collector, from the first alarm, waits [`WINDOW`] for more, then queries every
//! rank it has not heard from (connect and answer within [`ANSWER`]): a refused connection means
//! the process died, an accepted one with no answer a stopped or hung process, no connection an
//! unreachable host; an answer gives that rank's phase. [`root_cause::root_cause`] names the root,
//! rank 0 prints it (rank n-1 only when rank 0 did not answer), and the job ends with status 3.
//! With `--verbose` every rank also prints its own wait and the collector every rank's state.

mod control;
pub mod root_cause;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

pub use control::start;

use crate::wire::{StallReport, WaitState};

/// How long a collector waits for more alarms after the first.
pub const WINDOW: Duration = Duration::from_millis(1000);
/// How long a query waits to connect, and then for the answer.
pub const ANSWER: Duration = Duration::from_millis(1000);
/// How long a rank that raised an alarm waits for a collector to end the job before it prints
/// its own line and leaves.
pub const FALLBACK: Duration = Duration::from_millis(6000);

/// Exit status of a stall (the watchdog's).
pub const EXIT_STALL: i32 = crate::watchdog::EXIT_TIMEOUT;

/// This rank's own state: the phase it is in, and its report once its deadline expired.
struct ThisRank {
    phase: String,
    expired: Option<StallReport>,
}

fn local() -> &'static Mutex<ThisRank> {
    static L: OnceLock<Mutex<ThisRank>> = OnceLock::new();
    L.get_or_init(|| {
        Mutex::new(ThisRank {
            phase: String::new(),
            expired: None,
        })
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// A hook called on every phase change.
pub type PhaseHook = Box<dyn Fn(&str) + Send + Sync>;

/// A test-only hook called on every phase change (fault injection); set once by the binary.
static PHASE_HOOK: OnceLock<PhaseHook> = OnceLock::new();

/// Install the phase hook (the first call wins).
pub fn set_phase_hook(f: PhaseHook) {
    let _ = PHASE_HOOK.set(f);
}

/// One rank's state as the collector that names the root cause learnt it.
#[derive(Debug, Clone, PartialEq)]
pub struct RankState {
    pub rank: usize,
    pub host: String,
    /// `waiting_on_peer`, `waiting_in_mpi`, `peer_closed`, `busy` (it reported), or what its
    /// silence says: `gone` (connection refused), `silent` (stopped or hung), `unreachable`,
    /// `unknown` (no control port).
    pub state: &'static str,
    pub phase: String,
    pub peer: Option<usize>,
    pub waited_ms: u64,
    pub detail: String,
}

/// What the post-mortem concluded, for a report that keeps it (`--json`): the one line, the
/// ranks it names, and every rank's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Conclusion {
    pub line: String,
    pub roots: Vec<usize>,
    pub ranks: Vec<RankState>,
}

/// Called by the collector that prints the root cause, before it ends the process.
pub type ConclusionHook = fn(&Conclusion);

static CONCLUSION_HOOK: OnceLock<ConclusionHook> = OnceLock::new();

/// Install the conclusion hook (the first call wins).
pub fn on_conclusion(f: ConclusionHook) {
    let _ = CONCLUSION_HOOK.set(f);
}

/// Record the phase this rank enters (`bootstrap`, `endpoints`, `connect`, `pairwise round 3`,
/// `all_reduce 1048576 B`, ...): it is what the rank reports if it is asked or stalls.
pub fn enter(phase: &str) {
    {
        let mut l = lock(local());
        l.phase.clear();
        l.phase.push_str(phase);
    }
    if let Some(h) = PHASE_HOOK.get() {
        h(phase);
    }
}

/// The phase this rank is in.
pub fn phase() -> String {
    lock(local()).phase.clone()
}

/// Set once a post-mortem touched this rank (it raised an alarm or was queried): from then on it
/// stays quiet about peers that close their connections, since the job is ending.
static IN_POSTMORTEM: AtomicBool = AtomicBool::new(false);

/// Whether a post-mortem is under way on this rank.
pub fn in_progress() -> bool {
    IN_POSTMORTEM.load(Ordering::SeqCst)
}

/// This rank's report now: its expired wait if it had one, else busy in its phase.
fn current_report() -> StallReport {
    let l = lock(local());
    match &l.expired {
        Some(r) => r.clone(),
        None => StallReport {
            rank: control::my_rank() as u32,
            pid: std::process::id(),
            state: WaitState::Busy,
            peer: None,
            waited_ms: 0,
            phase: l.phase.clone(),
            detail: String::new(),
        },
    }
}

fn say(msg: &str) {
    crate::stderr_line(&format!("meshrun: {msg}"));
}

/// This rank's deadline expired (or a peer closed): raise the alarm, let the collectors name the
/// root cause, and end the process with status 3. `line` is this rank's own message: printed at
/// once with `--verbose` (or when there is no control channel), else only if no collector ends
/// the job within [`FALLBACK`]. `said` tells that the caller printed it already.
pub fn fail(state: WaitState, peer: Option<usize>, waited: Duration, line: &str, said: bool) -> ! {
    static ONCE: AtomicBool = AtomicBool::new(false);
    if ONCE.swap(true, Ordering::SeqCst) {
        // Another thread of this rank is already on its way out.
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    let Some(c) = control::get() else {
        if !said {
            say(line);
        }
        crate::exit_now(EXIT_STALL);
    };
    let report = StallReport {
        rank: c.rank as u32,
        pid: std::process::id(),
        state,
        peer: peer.map(|p| p as u32),
        waited_ms: waited.as_millis().min(u128::from(u64::MAX)) as u64,
        phase: phase(),
        detail: line.to_string(),
    };
    lock(local()).expired = Some(report.clone());
    let mut said = said;
    if c.verbose && !said {
        say(line);
        said = true;
    }
    IN_POSTMORTEM.store(true, Ordering::SeqCst);
    control::raise_alarm(c, &report);
    std::thread::sleep(FALLBACK);
    if !said {
        say(line);
    }
    crate::exit_now(EXIT_STALL)
}
