//! How many verbs calls this thread has made on its data path: work requests posted (each an
//! `ibv_post_send` of one request, so one doorbell), how many of them signalled, receives posted,
//! completion-queue polls and the completions they returned. Counted in the wrappers, so a bench
//! can set meshrun's work per message beside perftest's (`bench/verbs-vs-perftest`).

use std::cell::Cell;

thread_local! {
    /// Per thread, plain cells: the counts sit in spin loops (an empty poll is counted too), where
    /// an atomic add would be work perftest does not do. The one thread of a rank that drives the
    /// NIC makes every call.
    static COUNTS: Cell<Calls> = const { Cell::new(Calls::ZERO) };
}

fn bump(f: impl FnOnce(&mut Calls)) {
    COUNTS.with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
}

/// Verbs calls of this thread so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Calls {
    /// `ibv_post_send` calls, one work request each: the doorbells rung.
    pub post_send: u64,
    /// Of those, requests that asked for a completion.
    pub signaled: u64,
    /// Of those, requests with the payload inline.
    pub inline: u64,
    /// `ibv_post_recv` calls, one work request each.
    pub post_recv: u64,
    /// `ibv_poll_cq` calls, and how many returned nothing.
    pub poll_cq: u64,
    pub empty_polls: u64,
    /// Completions returned by the polls.
    pub completions: u64,
}

impl Calls {
    const ZERO: Calls = Calls {
        post_send: 0,
        signaled: 0,
        inline: 0,
        post_recv: 0,
        poll_cq: 0,
        empty_polls: 0,
        completions: 0,
    };
}

/// The calls this thread has made.
pub fn calls() -> Calls {
    COUNTS.with(Cell::get)
}

impl std::fmt::Display for Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "post_send {} (signaled {}, inline {}) post_recv {} poll_cq {} (empty {}) completions {}",
            self.post_send,
            self.signaled,
            self.inline,
            self.post_recv,
            self.poll_cq,
            self.empty_polls,
            self.completions
        )
    }
}

pub(super) fn sent(signaled: bool, inline: bool) {
    bump(|c| {
        c.post_send += 1;
        c.signaled += u64::from(signaled);
        c.inline += u64::from(inline);
    });
}

pub(super) fn received() {
    bump(|c| c.post_recv += 1);
}

pub(super) fn polled(got: usize) {
    bump(|c| {
        c.poll_cq += 1;
        c.empty_polls += u64::from(got == 0);
        c.completions += got as u64;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up() {
        let before = calls();
        sent(true, false);
        sent(false, true);
        received();
        polled(0);
        polled(3);
        let after = calls();
        // Counts are per thread: exactly these, whatever other tests do.
        let d = |a: u64, b: u64| a - b;
        assert_eq!(d(after.post_send, before.post_send), 2);
        assert_eq!(
            (d(after.signaled, before.signaled), d(after.inline, before.inline)),
            (1, 1)
        );
        assert_eq!(d(after.post_recv, before.post_recv), 1);
        assert_eq!(
            (
                d(after.poll_cq, before.poll_cq),
                d(after.empty_polls, before.empty_polls)
            ),
            (2, 1)
        );
        assert_eq!(d(after.completions, before.completions), 3);
        // Another thread's calls are its own.
        std::thread::spawn(|| assert_eq!(calls(), Calls::default()))
            .join()
            .unwrap();
        assert!(after.to_string().starts_with("post_send "));
    }
}
