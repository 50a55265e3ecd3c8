//! How many verbs calls this process has made on its data path: work requests posted (each an
//! `ibv_post_send` of one request, so one doorbell), how many of them signalled, receives posted,
//! completion-queue polls and the completions they returned. Counted in the wrappers, so a bench
//! can set meshrun's work per message beside perftest's (`bench/verbs-vs-perftest`).

use std::sync::atomic::{AtomicU64, Ordering};

static SENDS: AtomicU64 = AtomicU64::new(0);
static SIGNALED: AtomicU64 = AtomicU64::new(0);
static INLINE: AtomicU64 = AtomicU64::new(0);
static RECVS: AtomicU64 = AtomicU64::new(0);
static POLLS: AtomicU64 = AtomicU64::new(0);
static EMPTY_POLLS: AtomicU64 = AtomicU64::new(0);
static COMPLETIONS: AtomicU64 = AtomicU64::new(0);

/// Verbs calls of this process so far.
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

pub fn calls() -> Calls {
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    Calls {
        post_send: l(&SENDS),
        signaled: l(&SIGNALED),
        inline: l(&INLINE),
        post_recv: l(&RECVS),
        poll_cq: l(&POLLS),
        empty_polls: l(&EMPTY_POLLS),
        completions: l(&COMPLETIONS),
    }
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
    SENDS.fetch_add(1, Ordering::Relaxed);
    if signaled {
        SIGNALED.fetch_add(1, Ordering::Relaxed);
    }
    if inline {
        INLINE.fetch_add(1, Ordering::Relaxed);
    }
}

pub(super) fn received() {
    RECVS.fetch_add(1, Ordering::Relaxed);
}

pub(super) fn polled(got: usize) {
    POLLS.fetch_add(1, Ordering::Relaxed);
    if got == 0 {
        EMPTY_POLLS.fetch_add(1, Ordering::Relaxed);
    } else {
        COMPLETIONS.fetch_add(got as u64, Ordering::Relaxed);
    }
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
        // Other tests of this process may post too: the counts only grow, by at least these.
        assert!(after.post_send >= before.post_send + 2);
        assert!(after.signaled > before.signaled && after.inline > before.inline);
        assert!(after.post_recv > before.post_recv);
        assert!(after.poll_cq >= before.poll_cq + 2 && after.empty_polls > before.empty_polls);
        assert!(after.completions >= before.completions + 3);
        assert!(after.to_string().starts_with("post_send "));
    }
}
