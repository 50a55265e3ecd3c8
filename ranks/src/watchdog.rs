//! Deadlines for blocking steps that cannot be bounded from inside, such as an MPI collective whose
//! peer died: a watchdog thread ends the process with a message naming the rank, host and step.

use std::io::Write;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Exit status used when a deadline expires.
pub const EXIT_TIMEOUT: i32 = 3;

struct Armed {
    id: u64,
    deadline: Instant,
    message: String,
}

struct State {
    armed: Vec<Armed>,
    next_id: u64,
}

struct Watchdog {
    state: Mutex<State>,
    changed: Condvar,
}

fn watchdog() -> &'static Watchdog {
    static W: OnceLock<&'static Watchdog> = OnceLock::new();
    W.get_or_init(|| {
        let w: &'static Watchdog = Box::leak(Box::new(Watchdog {
            state: Mutex::new(State {
                armed: Vec::new(),
                next_id: 0,
            }),
            changed: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("meshrun-watchdog".into())
            .spawn(move || run(w))
            .map_err(|e| crate::eline!("meshrun: cannot start the watchdog thread: {e}"))
            .ok();
        w
    })
}

fn run(w: &'static Watchdog) {
    let mut st = match w.state.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    loop {
        let now = Instant::now();
        if let Some(a) = st.armed.iter().find(|a| a.deadline <= now) {
            let message = a.message.clone();
            drop(st);
            if let Some(hook) = ON_EXPIRY.get() {
                hook(&message);
            }
            crate::stderr_line(&format!("meshrun: {message}"));
            let _ = std::io::stdout().flush();
            crate::sys::exit_now(EXIT_TIMEOUT);
        }
        let wait = st
            .armed
            .iter()
            .map(|a| a.deadline - now)
            .min()
            .unwrap_or(Duration::from_secs(3600));
        st = match w.changed.wait_timeout(st, wait) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
    }
}

/// What to do instead of printing and leaving when a deadline expires (the post-mortem); the
/// first call wins. The hook does not return.
static ON_EXPIRY: OnceLock<fn(&str) -> !> = OnceLock::new();

/// Install the expiry hook.
pub fn set_on_expiry(f: fn(&str) -> !) {
    let _ = ON_EXPIRY.set(f);
}

/// While this guard lives, the process is ended with `message` (and exit status 3) once `timeout`
/// has passed. Drop it when the step finishes.
#[must_use = "the deadline is disarmed when the guard is dropped"]
pub struct DeadlineGuard {
    id: u64,
}

/// Arm a deadline for a blocking step.
pub fn arm(timeout: Duration, message: String) -> DeadlineGuard {
    let w = watchdog();
    let mut st = match w.state.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let id = st.next_id;
    st.next_id += 1;
    st.armed.push(Armed {
        id,
        deadline: Instant::now() + timeout,
        message,
    });
    w.changed.notify_all();
    DeadlineGuard { id }
}

impl Drop for DeadlineGuard {
    fn drop(&mut self) {
        let w = watchdog();
        let mut st = match w.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        st.armed.retain(|a| a.id != self.id);
        w.changed.notify_all();
    }
}
