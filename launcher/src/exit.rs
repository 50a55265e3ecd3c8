//! The exit statuses of `meshrun`, and the one place that maps a failure to its status.
//!
//! 0 all good; 1 the test ran and found a problem (wrong data, a slow or failed link); 2 bad input
//! or setup (flags, files, a missing driver, ranks that disagree); 3 a peer died or a deadline
//! expired; 4 a fault of this rank's own hardware during the run (a GPU call or a NIC operation
//! that failed locally), so a broken GPU is never reported as a dead peer.

use ranks::TransportError;

/// What a `meshrun` process exits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok = 0,
    FoundProblem = 1,
    Usage = 2,
    PeerOrDeadline = 3,
    LocalFault = 4,
}

impl Status {
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// 0 when the run found nothing wrong, else 1.
pub fn of_pass(ok: bool) -> Status {
    if ok {
        Status::Ok
    } else {
        Status::FoundProblem
    }
}

/// The status for a transport failure: a peer that stopped answering or closed the connection is
/// 3, a local device fault 4, anything that says the ranks or the flags disagree 2.
pub fn of_transport(e: &TransportError) -> Status {
    match e {
        TransportError::Timeout { .. }
        | TransportError::PeerClosed { .. }
        | TransportError::Io { .. }
        | TransportError::LengthMismatch { .. } => Status::PeerOrDeadline,
        TransportError::Local(_) => Status::LocalFault,
        TransportError::BadPeer { .. } | TransportError::Setup(_) => Status::Usage,
    }
}

/// Why a rank stops early.
#[derive(Debug, thiserror::Error)]
pub enum RankFailure {
    /// Bad input discovered on the ranks (same on every rank).
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A device call of this rank's GPU failed or stalled (the message names the rank and host).
    #[error("{0}")]
    Gpu(String),
    /// What a rank sent could not be decoded (ranks running different meshrun builds).
    #[error("{0}")]
    Gathered(#[from] ranks::wire::WireError),
    /// Every rank agreed to stop with this status, and the reason has been said already (a GPU
    /// that did not open on some rank, say).
    #[error("stopped with status {}", .0.code())]
    Stopped(Status),
}

impl From<collectives::pairwise::PairwiseError> for RankFailure {
    fn from(e: collectives::pairwise::PairwiseError) -> Self {
        match e {
            collectives::pairwise::PairwiseError::Transport(t) => RankFailure::Transport(t),
            collectives::pairwise::PairwiseError::Gathered(w) => RankFailure::Gathered(w),
            collectives::pairwise::PairwiseError::Ipc(e) => RankFailure::Gpu(e.to_string()),
        }
    }
}

impl RankFailure {
    pub fn status(&self) -> Status {
        match self {
            RankFailure::Usage(_) | RankFailure::Gathered(_) => Status::Usage,
            RankFailure::Transport(e) => of_transport(e),
            RankFailure::Gpu(_) => Status::LocalFault,
            RankFailure::Stopped(s) => *s,
        }
    }
}

/// With `MESHRUN_SELF_REPORT=1` (the soak test), one stderr line at exit: this process's open
/// files, threads and memory from /proc/self, so growth across many jobs shows.
pub fn self_report(code: i32) {
    if std::env::var("MESHRUN_SELF_REPORT").as_deref() != Ok("1") {
        return;
    }
    let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let rank = std::env::var("OMPI_COMM_WORLD_RANK")
        .or_else(|_| std::env::var("PMI_RANK"))
        .unwrap_or_else(|_| "-".into());
    ranks::stderr_line(&format!(
        "meshrun: self-report: pid {} rank {rank} status {code} fds {fds} threads {} rss_kib {} hwm_kib {}",
        std::process::id(),
        field("Threads:"),
        field("VmRSS:"),
        field("VmHWM:")
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn statuses_are_the_documented_numbers() {
        assert_eq!(
            [
                Status::Ok,
                Status::FoundProblem,
                Status::Usage,
                Status::PeerOrDeadline,
                Status::LocalFault
            ]
            .map(Status::code),
            [0, 1, 2, 3, 4]
        );
        // The MPI watchdog exits on its own, with the same status as a peer deadline.
        assert_eq!(Status::PeerOrDeadline.code(), ranks::watchdog::EXIT_TIMEOUT);
        assert_eq!(Status::FoundProblem.code(), collectives::EXIT_FOUND_PROBLEM);
    }

    #[test]
    fn each_failure_maps_to_its_status() {
        let (rank, host, peer, peer_host) = (1, "a".to_string(), 2, "b".to_string());
        let timeout = TransportError::Timeout {
            rank,
            host: host.clone(),
            peer,
            peer_host: peer_host.clone(),
            waited: Duration::from_secs(1),
            what: "x".into(),
        };
        let closed = TransportError::PeerClosed {
            rank,
            host: host.clone(),
            peer,
            peer_host: peer_host.clone(),
            what: "x".into(),
        };
        let mismatch = TransportError::LengthMismatch {
            rank,
            host,
            peer,
            peer_host,
            expected: 8,
            got: 4,
        };
        for e in [timeout, closed, mismatch] {
            assert_eq!(RankFailure::from(e).status(), Status::PeerOrDeadline);
        }
        let local = TransportError::Local("rank 1 (a): ibv_post_send failed".into());
        assert_eq!(RankFailure::from(local).status(), Status::LocalFault);
        assert_eq!(
            RankFailure::Gpu("rank 0 (a): cuMemcpy failed".into()).status(),
            Status::LocalFault
        );
        let setup = TransportError::Setup("the tcp transport has no one-sided operations".into());
        assert_eq!(RankFailure::from(setup).status(), Status::Usage);
        let bad = TransportError::BadPeer {
            rank: 0,
            peer: 9,
            size: 2,
        };
        assert_eq!(RankFailure::from(bad).status(), Status::Usage);
        assert_eq!(RankFailure::Usage("-b".into()).status(), Status::Usage);
        let wire = ranks::wire::WireError {
            rank: 3,
            what: "results".into(),
        };
        assert_eq!(RankFailure::from(wire).status(), Status::Usage);
    }
}
