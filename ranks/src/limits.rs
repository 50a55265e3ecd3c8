//! Open-file limits. The TCP mesh holds one socket per peer, so a job of N ranks needs about N
//! descriptors per rank on top of what MPI itself opens; many clusters default the soft
//! `ulimit -n` to 1024. Every process raises its soft limit to the hard one at start (as the
//! kernel allows without privilege), and where N still cannot fit it fails before connecting,
//! naming the limit and the fix.

use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};

/// Descriptors a rank keeps besides one socket per peer: stdio, the listening socket, epoll,
/// MPI's own pipes, sockets and shared-memory files (about 30 measured at 16 local ranks under
/// Open MPI's ob1/tcp/vader), with room to spare.
pub const RANK_RESERVE: u64 = 64;
/// Descriptors `mpirun` keeps per local rank (stdio forwarding pipes and the like: about 2
/// measured) and besides them.
pub const LAUNCHER_PER_RANK: u64 = 4;
pub const LAUNCHER_RESERVE: u64 = 64;

/// The soft and hard open-file limits after raising the soft one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    pub soft: u64,
    pub hard: u64,
}

/// The ceiling the kernel puts on an unlimited hard limit (`/proc/sys/fs/nr_open`).
fn nr_open() -> u64 {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20)
}

/// Raise the soft open-file limit to the hard limit (children inherit it). Returns the limits
/// in force afterwards; if raising fails the old ones stand.
pub fn raise_open_files() -> OpenFiles {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return OpenFiles {
            soft: RLIM_INFINITY,
            hard: RLIM_INFINITY,
        };
    };
    let target = if hard == RLIM_INFINITY { nr_open() } else { hard };
    if soft < target && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
        return OpenFiles { soft: target, hard };
    }
    OpenFiles { soft, hard }
}

/// Descriptors one rank of an `n`-rank job needs.
pub fn rank_needs(n: usize) -> u64 {
    n.saturating_sub(1) as u64 + RANK_RESERVE
}

/// Descriptors `mpirun` needs to start `local` ranks on its own host.
pub fn launcher_needs(local: usize) -> u64 {
    local as u64 * LAUNCHER_PER_RANK + LAUNCHER_RESERVE
}

/// Why a job cannot fit in the open-file limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{who} needs about {need} open files ({why}) but the limit is {limit} ({what}); raise the hard limit \
     (`nofile` in /etc/security/limits.conf, LimitNOFILE= for systemd or slurmd, `ulimit -Hn` as root) \
     or run fewer ranks"
)]
pub struct TooFewFiles {
    pub who: String,
    pub need: u64,
    pub why: String,
    pub limit: u64,
    pub what: &'static str,
}

/// Check `need` against the limits (after [`raise_open_files`]).
pub fn check(limits: OpenFiles, need: u64, who: String, why: String) -> Result<(), TooFewFiles> {
    if limits.soft >= need {
        return Ok(());
    }
    Err(TooFewFiles {
        who,
        need,
        why,
        limit: limits.soft,
        what: if limits.soft == limits.hard {
            "ulimit -Hn, the hard limit"
        } else {
            "ulimit -n; the hard limit could not be reached"
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_grow_linearly_and_are_checked() {
        assert_eq!(rank_needs(1), 64);
        assert_eq!(rank_needs(1024), 1023 + 64);
        assert_eq!(launcher_needs(64), 64 * 4 + 64);
        let l = OpenFiles { soft: 1024, hard: 1024 };
        assert!(check(l, rank_needs(961), "rank 0".into(), "x".into()).is_ok());
        let e = check(l, rank_needs(1024), "rank 3 (n1)".into(), "one socket per peer".into()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rank 3 (n1) needs about 1087 open files (one socket per peer) but the limit is 1024 (ulimit -Hn, \
             the hard limit); raise the hard limit (`nofile` in /etc/security/limits.conf, LimitNOFILE= for \
             systemd or slurmd, `ulimit -Hn` as root) or run fewer ranks"
        );
    }

    #[test]
    fn raising_reaches_the_hard_limit() {
        let l = raise_open_files();
        assert_eq!(l.soft, if l.hard == RLIM_INFINITY { nr_open() } else { l.hard });
        let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
        assert_eq!(soft, l.soft);
    }
}
