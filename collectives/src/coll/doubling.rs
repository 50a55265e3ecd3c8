//! Recursive doubling for small all-reduces (MPICH's scheme): log2(p) exchanges of the whole
//! buffer instead of the ring's 2(n-1) steps, so latency, not bandwidth, sets the time. When n is
//! not a power of two, the first 2 x rem ranks (rem = n - p, p the largest power of two <= n)
//! fold in pairs first: each even rank hands its data to the odd rank after it and sits out, and
//! gets the result back at the end.
//!
//! Every rank combines the same values in a mirrored order (a + b on one side, b + a on the
//! other), which commutative operations make bit-identical.

use std::time::Instant;

use ranks::{Op, Transport};

use super::ring::{put_scratch, take_scratch};
use super::{CollError, Ctx};
use crate::reduce::reduce_into;

/// Up to how many bytes an all-reduce of `n` ranks uses recursive doubling; above it the ring,
/// where each rank moves 2(n-1)/n of the data instead of log2(n) times all of it. Two ranks
/// double in one exchange, which beats the ring's two half-size ones up to 512 KiB (median of 5
/// alternating runs, loopback TCP: 29 vs 34 us at 64 KiB, equal at 512 KiB, 849 vs 603 us at
/// 1 MiB); from three ranks on, 32 KiB.
pub fn max_bytes(n: usize) -> usize {
    if n == 2 {
        512 * 1024
    } else {
        32 * 1024
    }
}

/// The largest power of two <= n (n >= 1).
fn power_below(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// Where rank `rank` of `n` stands: Some(its rank among the p that double), or None for an even
/// rank of the folded pairs.
fn doubling_rank(rank: usize, n: usize) -> Option<usize> {
    let rem = n - power_below(n);
    if rank < 2 * rem {
        (rank % 2 == 1).then_some(rank / 2)
    } else {
        Some(rank - rem)
    }
}

/// The job rank of doubling rank `d`.
fn job_rank(d: usize, n: usize) -> usize {
    let rem = n - power_below(n);
    if d < rem {
        2 * d + 1
    } else {
        d + rem
    }
}

/// All-reduce `buf` (holding this rank's data; `src` first copied in when out of place).
pub fn all_reduce(t: &mut dyn Transport, ctx: &Ctx, src: Option<&[u8]>, buf: &mut [u8]) -> Result<(), CollError> {
    let (n, rank) = (ctx.nranks, ctx.rank);
    if let Some(s) = src {
        buf.copy_from_slice(s);
    }
    let p = power_below(n);
    let rem = n - p;
    let deadline = || Instant::now() + ctx.step_timeout;
    let mut scratch = take_scratch(buf.len());
    let scratch_buf = &mut scratch[..buf.len()];
    if rank < 2 * rem {
        if rank % 2 == 0 {
            t.exchange(&mut [Op::send(rank + 1, buf)], deadline())?;
        } else {
            t.exchange(&mut [Op::recv(rank - 1, scratch_buf)], deadline())?;
            reduce_into(ctx.dtype, ctx.op, buf, scratch_buf)?;
        }
    }
    if let Some(d) = doubling_rank(rank, n) {
        let mut mask = 1;
        while mask < p {
            let partner = job_rank(d ^ mask, n);
            t.exchange(
                &mut [Op::send(partner, buf), Op::recv(partner, scratch_buf)],
                deadline(),
            )?;
            reduce_into(ctx.dtype, ctx.op, buf, scratch_buf)?;
            mask <<= 1;
        }
    }
    if rank < 2 * rem {
        if rank % 2 == 0 {
            t.exchange(&mut [Op::recv(rank + 1, buf)], deadline())?;
        } else {
            t.exchange(&mut [Op::send(rank - 1, buf)], deadline())?;
        }
    }
    put_scratch(scratch);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_doubles_or_folds_and_partners_agree() {
        for n in 1..=40usize {
            let p = power_below(n);
            assert!(p <= n && 2 * p > n);
            let doubling: Vec<usize> = (0..n).filter_map(|r| doubling_rank(r, n)).collect();
            assert_eq!(doubling, (0..p).collect::<Vec<_>>(), "n={n}");
            for r in 0..n {
                if let Some(d) = doubling_rank(r, n) {
                    assert_eq!(job_rank(d, n), r);
                    let mut mask = 1;
                    while mask < p {
                        let partner = job_rank(d ^ mask, n);
                        assert_eq!(doubling_rank(partner, n), Some(d ^ mask), "n={n} r={r}");
                        mask <<= 1;
                    }
                }
            }
        }
    }
}
