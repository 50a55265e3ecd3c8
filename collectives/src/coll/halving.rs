//! Halving-doubling all-reduce (Rabenseifner's algorithm, as MPICH and Open MPI use it for mid
//! sizes): a reduce-scatter by recursive halving, then an all-gather by recursive doubling. Each
//! rank moves (p-1)/p of the buffer each way, as the ring does, but in 2 log2(p) exchanges instead
//! of the ring's 2(p-1), so it wins where per-exchange latency still counts.
//!
//! Halving step with partner d ^ mask (mask = p/2, p/4, .. 1): both hold the same element range;
//! the one whose bit is clear keeps the lower half, the other the upper; each sends the half it
//! gives away and reduces the half it keeps with what arrives. After log2(p) steps doubling rank d
//! owns one segment, fully reduced, and finalises it. The all-gather retraces the steps: send
//! what it holds, receive the partner's half straight into place. Every segment is reduced by
//! one rank only, so every rank ends with the same bits.
//!
//! Used for powers of two only: elsewhere a fold (as in doubling.rs) would move the whole buffer
//! twice more between the folded pairs, and the ring needs no fold.

use std::ops::Range;
use std::time::Instant;

use ranks::{Op, Transport};

use super::ring::{put_scratch, ring_slice, slices, split, take_scratch};
use super::{CollError, Ctx};
use crate::reduce::{finalize, reduce_from, reduce_into};

/// Whether an all-reduce of `bytes` over `n` ranks uses halving-doubling: 4, 8, 16, .. ranks,
/// above recursive doubling's range and up to [`MAX_BYTES`]. At 2 ranks it is the ring's
/// exchanges; with n not a power of two the ring (see the module notes).
pub fn used_for(n: usize, bytes: usize) -> bool {
    n >= 4 && n.is_power_of_two() && bytes > super::doubling::max_bytes(n) && bytes <= MAX_BYTES
}

/// Above this the ring. Measured at 4 ranks on this 2-core machine (time per call, median of 5
/// alternating jobs of 30 iterations, ring time / halving time): 64 KiB 1.89, 256 KiB 2.52,
/// 1 MiB 1.48; with the halving steps sliced and overlapped as the ring's, 1 MiB 1.37, 2 MiB
/// 1.26 (0.89-1.59; 1.02 unsliced), 4 MiB 0.93, 8 MiB 0.84, 16 MiB 0.94; with the doubling steps
/// sliced too, 4 MiB 0.81 (0.65-1.51), 8 MiB 0.97, 16 MiB 1.17 (0.91-1.51): no clear gain above.
pub const MAX_BYTES: usize = 2 << 20;

/// The element ranges of the halving steps for doubling rank `d` of `p` over `count` elements:
/// per step, (kept, given away), the kept range halving each time.
pub fn halving_steps(d: usize, p: usize, count: usize) -> Vec<(Range<usize>, Range<usize>)> {
    let mut v = Vec::new();
    let mut range = 0..count;
    let mut mask = p / 2;
    while mask >= 1 {
        let mid = range.start + range.len() / 2;
        let (lower, upper) = (range.start..mid, mid..range.end);
        let (keep, give) = if d & mask == 0 { (lower, upper) } else { (upper, lower) };
        v.push((keep.clone(), give));
        range = keep;
        mask /= 2;
    }
    v
}

/// All-reduce `buf` over a power-of-two number of ranks and finalise it (mean, etc.). With `src` (out of place) this rank's data is
/// read from `src`, and `buf` needs no prior copy: each part of `buf` is written by a reduction
/// or a receive before it is read. Without `src`, `buf` holds the data.
pub fn all_reduce(t: &mut dyn Transport, ctx: &Ctx, src: Option<&[u8]>, buf: &mut [u8]) -> Result<(), CollError> {
    let (p, d, elt) = (ctx.nranks, ctx.rank, ctx.elt());
    assert!(
        p.is_power_of_two(),
        "halving-doubling on {p} ranks: callers check used_for"
    );
    let count = buf.len() / elt;
    let bytes = |r: &Range<usize>| r.start * elt..r.end * elt;
    // Where this rank's own data still is: `src` until the first reduction writes `buf`.
    let mut own = src;
    let steps = halving_steps(d, p, count);
    let first_keep = steps.first().map_or(0, |s| s.0.len() * elt);
    let mut scratch = take_scratch(2 * first_keep);
    let result = (|| -> Result<(), CollError> {
        for (i, (keep, give)) in steps.iter().enumerate() {
            let partner = d ^ (p >> (i + 1));
            halving_step(t, ctx, partner, own, buf, bytes(keep), bytes(give), &mut scratch)?;
            own = None;
        }
        let mine = steps.last().map_or(0..count, |s| s.0.clone());
        if let Some(s) = own.take() {
            // One rank: nothing was exchanged.
            buf.copy_from_slice(s);
        }
        finalize(ctx.dtype, ctx.op, &mut buf[bytes(&mine)], p)?;
        for (i, (keep, give)) in steps.iter().enumerate().rev() {
            let partner = d ^ (p >> (i + 1));
            doubling_step(t, ctx, partner, buf, bytes(keep), bytes(give))?;
        }
        Ok(())
    })();
    put_scratch(scratch);
    result
}

/// One halving step: send `give` to the partner and receive its part of `keep`, reducing it
/// into `buf[keep]` (from `own[keep]` while this rank's data is still in `src`). Large halves go
/// in slices as the ring's do (`ring_slice`), each received slice reduced while the next moves:
/// what is sent (`give`) and what is reduced (`keep`) never overlap, so any slice can overlap.
#[allow(clippy::too_many_arguments)]
fn halving_step(
    t: &mut dyn Transport,
    ctx: &Ctx,
    partner: usize,
    own: Option<&[u8]>,
    buf: &mut [u8],
    keep: Range<usize>,
    give: Range<usize>,
    scratch: &mut [u8],
) -> Result<(), CollError> {
    let elt = ctx.elt();
    let slice = ring_slice(keep.len().max(give.len()));
    let (ks, gs) = (slices(keep.clone(), elt, slice), slices(give, elt, slice));
    let half = keep.len().min((slice / elt).max(1) * elt);
    // The slice received but not yet reduced: where it goes in `buf`, and its scratch half.
    let mut pending: Option<Range<usize>> = None;
    for k in 0..ks.len().max(gs.len()) {
        let deadline = Instant::now() + ctx.step_timeout;
        let (lo, hi) = scratch[..2 * half].split_at_mut(half);
        let (mine, theirs) = if k % 2 == 0 { (lo, hi) } else { (hi, lo) };
        let (out, dst): (Option<&[u8]>, Option<&mut [u8]>) = match (own, gs.get(k).cloned(), pending.clone()) {
            (Some(s), g, r) => (g.map(|g| &s[g]), r.map(|r| &mut buf[r])),
            (None, Some(g), Some(r)) => {
                let (a, b) = split(buf, g, r);
                (Some(a), Some(b))
            }
            (None, Some(g), None) => (Some(&buf[g]), None),
            (None, None, r) => (None, r.map(|r| &mut buf[r])),
        };
        let recv = ks.get(k).cloned();
        let mut ops = Vec::with_capacity(2);
        if let Some(o) = out {
            ops.push(Op::send(partner, o));
        }
        if let Some(r) = &recv {
            ops.push(Op::recv(partner, &mut mine[..r.len()]));
        }
        match (dst, &pending) {
            (Some(dst), Some(r)) => {
                let (data, mine_part) = (&theirs[..r.len()], own.map(|s| &s[r.clone()]));
                let mut result = Ok(());
                let mut work = || result = reduce_part(ctx, mine_part, &mut *dst, data);
                t.exchange_overlapped(&mut ops, deadline, &mut work)?;
                result?;
            }
            _ => t.exchange(&mut ops, deadline)?,
        }
        drop(ops);
        pending = recv;
    }
    if let Some(r) = pending {
        // The last slice went to half (n-1) % 2 of the scratch.
        let at = if (ks.len() - 1) % 2 == 0 { 0 } else { half };
        let data = &scratch[at..at + r.len()];
        reduce_part(ctx, own.map(|s| &s[r.clone()]), &mut buf[r], data)?;
    }
    Ok(())
}

/// One doubling step of the all-gather: send what this rank holds (`have`), receive the
/// partner's half (`fill`) straight into place, in the ring's slices where a half is large (a
/// whole 1 MiB half at once was 20% slower at 4 ranks and 2 MiB: 3.8 vs 3.1 ms, medians of 5).
fn doubling_step(
    t: &mut dyn Transport,
    ctx: &Ctx,
    partner: usize,
    buf: &mut [u8],
    have: Range<usize>,
    fill: Range<usize>,
) -> Result<(), CollError> {
    let elt = ctx.elt();
    let slice = ring_slice(have.len().max(fill.len()));
    let (hs, fs) = (slices(have, elt, slice), slices(fill, elt, slice));
    for k in 0..hs.len().max(fs.len()) {
        let deadline = Instant::now() + ctx.step_timeout;
        match (hs.get(k).cloned(), fs.get(k).cloned()) {
            (Some(h), Some(f)) => {
                let (out, inn) = split(buf, h, f);
                t.exchange(&mut [Op::send(partner, out), Op::recv(partner, inn)], deadline)?;
            }
            (Some(h), None) => t.exchange(&mut [Op::send(partner, &buf[h])], deadline)?,
            (None, Some(f)) => t.exchange(&mut [Op::recv(partner, &mut buf[f])], deadline)?,
            (None, None) => {}
        }
    }
    Ok(())
}

/// `dst = mine op data` (this rank's data still in `src`), or `dst op= data`.
fn reduce_part(ctx: &Ctx, mine: Option<&[u8]>, dst: &mut [u8], data: &[u8]) -> Result<(), CollError> {
    match mine {
        Some(m) => reduce_from(ctx.dtype, ctx.op, dst, m, data)?,
        None => reduce_into(ctx.dtype, ctx.op, dst, data)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halving_by_hand_and_segments_cover_the_buffer() {
        // 4 ranks, 10 elements: rank 0 keeps 0..5 then 0..2; rank 3 keeps 5..10 then 7..10.
        assert_eq!(halving_steps(0, 4, 10), vec![(0..5, 5..10), (0..2, 2..5)]);
        assert_eq!(halving_steps(3, 4, 10), vec![(5..10, 0..5), (7..10, 5..7)]);
        for p in [1usize, 2, 4, 8, 16] {
            for count in [0usize, 1, 3, 15, 16, 1000] {
                let mut owned: Vec<Range<usize>> = (0..p)
                    .map(|d| halving_steps(d, p, count).last().map_or(0..count, |s| s.0.clone()))
                    .collect();
                owned.sort_by_key(|r| r.start);
                let mut end = 0;
                for r in &owned {
                    assert_eq!(r.start, end, "p={p} count={count} {owned:?}");
                    end = r.end;
                }
                assert_eq!(end, count);
                // Partners hold the same range at every step, and split it the other way.
                for d in 0..p {
                    for (i, (keep, give)) in halving_steps(d, p, count).iter().enumerate() {
                        let other = halving_steps(d ^ (p >> (i + 1)), p, count);
                        assert_eq!((&other[i].0, &other[i].1), (give, keep));
                    }
                }
            }
        }
    }

    #[test]
    fn used_only_for_powers_of_two_from_four_ranks_mid_sizes() {
        assert!(!used_for(2, 1 << 20));
        assert!(!used_for(3, 1 << 20));
        assert!(!used_for(6, 1 << 20));
        assert!(used_for(4, 1 << 20));
        assert!(used_for(8, MAX_BYTES));
        assert!(!used_for(4, MAX_BYTES + 4));
        assert!(!used_for(4, 32 << 10));
        assert!(used_for(4, (32 << 10) + 4));
    }
}
