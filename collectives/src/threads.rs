//! How many threads a host reduction uses, and the pool they come from.
//!
//! The rule ([`for_bytes`]): below [`PARALLEL_MIN_BYTES`] one thread (the calling one: waking
//! others costs more than they save); from there, one more thread per
//! [`PARALLEL_MIN_BYTES`]` / 2` bytes, up to this rank's share of the machine ([`budget`]). The
//! threshold is measured by `bench/reduce-threads` (docs/evidence/reduce-threads-2026-12-06/).
//!
//! The share: a node runs several ranks, each with its own pool, so a rank takes
//! `online cores / ranks on this machine` threads (at least 1), and never more than the cores
//! its affinity mask allows (a rank bound to one core, as Open MPI binds np <= 2 without
//! `--bind-to none`, reduces on one thread). "This machine" counts ranks by kernel boot id, so
//! namespaces or pods on one node share it too ([`share_machine`], called once a rank knows its
//! world). Until then (unit tests, examples) a process takes every core it may run on.
//!
//! Each element is reduced on its own, so splitting by element ranges gives the bytes one
//! thread gives, for every type and op.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use rayon::prelude::*;

/// Bytes from which a host reduction is split across threads: 2 MiB, measured with
/// `bench/reduce-threads` on the 2-core development VM (docs/evidence/reduce-threads-2026-12-06/,
/// `run4.txt`, the second core free): float sum on 2 threads gained 2.1-2.6x at 2, 4 and 16 MiB,
/// was even at 1 MiB (1.01x) and lost at 256-512 KiB (0.53-0.94x: waking a pool thread and
/// splitting cost more than the work); so each thread gets at least 1 MiB. Where the second
/// core was busy with another session, 2 threads never paid (`run2.txt`).
pub const PARALLEL_MIN_BYTES: usize = 2 << 20;

/// Ranks sharing this machine, as [`share_machine`] set it (0: not set, a process alone).
static SHARING: AtomicUsize = AtomicUsize::new(0);

/// Say how many ranks run on this machine (all of them, whatever their host names), so the
/// pool takes this rank's share of the cores. Call it before the first reduction: the pool is
/// sized once.
pub fn share_machine(ranks: usize) {
    SHARING.store(ranks.max(1), Ordering::Relaxed);
}

/// Cores this process may run on (its affinity mask and cgroup quota, as the standard library
/// reads them).
fn allowed_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Cores the machine has online.
fn online_cores() -> usize {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN) {
        Ok(Some(n)) if n > 0 => n as usize,
        _ => allowed_cores(),
    }
}

/// This rank's share of the machine: `online / sharing` (at least 1), at most `allowed`.
pub fn share(online: usize, allowed: usize, sharing: usize) -> usize {
    (online / sharing.max(1)).clamp(1, allowed.max(1))
}

/// The most threads a reduction of this rank uses.
pub fn budget() -> usize {
    match SHARING.load(Ordering::Relaxed) {
        0 => allowed_cores(),
        n => share(online_cores(), allowed_cores(), n),
    }
}

/// Threads for a reduction of `bytes` bytes with at most `budget` threads: one below
/// [`PARALLEL_MIN_BYTES`], then at least half of it per thread.
pub fn rule(bytes: usize, budget: usize) -> usize {
    if bytes < PARALLEL_MIN_BYTES {
        1
    } else {
        (bytes / (PARALLEL_MIN_BYTES / 2)).clamp(1, budget.max(1))
    }
}

/// Threads for a reduction of `bytes` bytes on this rank.
pub fn for_bytes(bytes: usize) -> usize {
    rule(bytes, pool().map_or(1, |p| p.current_num_threads()))
}

/// The rank's reduction pool, [`budget`] threads, made on first use (None where the system
/// refused threads: reductions then run on the calling thread).
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let n = budget();
        (n > 1)
            .then(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .thread_name(|i| format!("meshrun-reduce-{i}"))
                    .build()
                    .ok()
            })
            .flatten()
    })
    .as_ref()
}

/// Run `f` in the rank's pool when `threads` > 1 (the split inside uses it), else here.
pub fn run<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    match pool() {
        Some(p) if threads > 1 => p.install(f),
        _ => f(),
    }
}

/// `f` over `threads` matching element ranges of `dst` and `src` (as a zip, up to the shorter),
/// on the current rayon pool.
pub fn split2<T: Send + Sync>(threads: usize, dst: &mut [T], src: &[T], f: impl Fn(&mut [T], &[T]) + Sync) {
    if threads <= 1 || dst.len() < 2 {
        return f(dst, src);
    }
    let per = dst.len().div_ceil(threads);
    dst.par_chunks_mut(per)
        .zip(src.par_chunks(per))
        .for_each(|(d, s)| f(d, s));
}

/// `f` over `threads` matching element ranges of `dst`, `a` and `b`.
pub fn split3<T: Send + Sync>(
    threads: usize,
    dst: &mut [T],
    a: &[T],
    b: &[T],
    f: impl Fn(&mut [T], &[T], &[T]) + Sync,
) {
    if threads <= 1 || dst.len() < 2 {
        return f(dst, a, b);
    }
    let per = dst.len().div_ceil(threads);
    dst.par_chunks_mut(per)
        .zip(a.par_chunks(per))
        .zip(b.par_chunks(per))
        .for_each(|((d, x), y)| f(d, x, y));
}

/// `f` over `threads` element ranges of `buf`.
pub fn split1<T: Send + Sync>(threads: usize, buf: &mut [T], f: impl Fn(&mut [T]) + Sync) {
    if threads <= 1 || buf.len() < 2 {
        return f(buf);
    }
    let per = buf.len().div_ceil(threads);
    buf.par_chunks_mut(per).for_each(&f);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thread_below_the_threshold_then_half_of_it_each() {
        assert_eq!(rule(0, 16), 1);
        assert_eq!(rule(PARALLEL_MIN_BYTES - 1, 16), 1);
        assert_eq!(rule(PARALLEL_MIN_BYTES, 16), 2);
        assert_eq!(rule(3 * PARALLEL_MIN_BYTES / 2, 16), 3);
        assert_eq!(rule(256 << 20, 16), 16);
        assert_eq!(rule(256 << 20, 2), 2);
        assert_eq!(rule(256 << 20, 0), 1);
    }

    #[test]
    fn a_rank_takes_its_share_of_the_machine() {
        // 64 cores, 8 ranks on the machine: 8 each; 3 ranks on 2 cores: 1 each, never 0.
        assert_eq!(share(64, 64, 8), 8);
        assert_eq!(share(2, 2, 3), 1);
        assert_eq!(share(2, 2, 1), 2);
        // Bound to one core (Open MPI's default at np <= 2): one thread whatever the share.
        assert_eq!(share(64, 1, 2), 1);
        // Bound to a socket of 16 cores, 2 ranks on a 64-core machine: the 16 it may use.
        assert_eq!(share(64, 16, 2), 16);
    }

    #[test]
    fn splits_cover_every_element_once() {
        for threads in 1..=5 {
            for len in [0, 1, 2, 7, 100, 101] {
                let mut dst = vec![0u32; len];
                let a: Vec<u32> = (0..len as u32).collect();
                split3(threads, &mut dst, &a, &a, |d, x, y| {
                    for ((d, x), y) in d.iter_mut().zip(x).zip(y) {
                        *d += x + y + 1;
                    }
                });
                let want: Vec<u32> = (0..len as u32).map(|i| 2 * i + 1).collect();
                assert_eq!(dst, want);
                split2(threads, &mut dst, &a, |d, x| {
                    d.iter_mut().zip(x).for_each(|(d, x)| *d -= x)
                });
                split1(threads, &mut dst, |d| d.iter_mut().for_each(|d| *d -= 1));
                assert_eq!(dst, a);
            }
        }
    }
}
