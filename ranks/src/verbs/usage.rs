//! What this process holds of the device right now: registered bytes and regions (host and
//! foreign memory alike) and queue pairs, counted where they are created and destroyed, so a run
//! can report what it really registered rather than what a formula says it should.

use std::sync::atomic::{AtomicUsize, Ordering};

static BYTES: AtomicUsize = AtomicUsize::new(0);
static REGIONS: AtomicUsize = AtomicUsize::new(0);
static QPS: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Registered memory and queue pairs held by this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub bytes: usize,
    pub regions: usize,
    pub qps: usize,
    /// The most bytes registered at once so far.
    pub peak_bytes: usize,
}

pub fn usage() -> Usage {
    Usage {
        bytes: BYTES.load(Ordering::Relaxed),
        regions: REGIONS.load(Ordering::Relaxed),
        qps: QPS.load(Ordering::Relaxed),
        peak_bytes: PEAK_BYTES.load(Ordering::Relaxed),
    }
}

pub(super) fn registered(len: usize) {
    let now = BYTES.fetch_add(len, Ordering::Relaxed) + len;
    REGIONS.fetch_add(1, Ordering::Relaxed);
    PEAK_BYTES.fetch_max(now, Ordering::Relaxed);
}

pub(super) fn deregistered(len: usize) {
    BYTES.fetch_sub(len, Ordering::Relaxed);
    REGIONS.fetch_sub(1, Ordering::Relaxed);
}

pub(super) fn qp_created() {
    QPS.fetch_add(1, Ordering::Relaxed);
}

pub(super) fn qp_destroyed() {
    QPS.fetch_sub(1, Ordering::Relaxed);
}
