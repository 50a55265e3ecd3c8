//! Pieces the ring and chain algorithms share: chunk bounds, slices, disjoint borrows.

use std::ops::Range;
use std::time::Instant;

use ranks::{Op, Transport};

use super::{CollError, Ctx};
use crate::reduce::{reduce_from, reduce_into};

/// Bytes per slice of the chains (broadcast, reduce) and of the device rings (one staging
/// buffer's worth): a step moves its data in slices so a chain pipelines along its ranks.
pub const SLICE: usize = 1 << 20;

/// Bytes per slice of the host rings: slice k is reduced while slice k+1 moves. 128 KiB (Open
/// MPI's TCP fragment) was fastest of 32 KiB-1 MiB from 1 to 16 MiB at 2 and 4 ranks on this
/// machine (2 MiB, 2 ranks: 0.85 ms at 128 KiB, 1.06 at 64 KiB, 1.23 at 256 KiB, 1.60 at 1 MiB;
/// medians of 5 alternating jobs); the chains were as fast or faster at 1 MiB.
pub const RING_SLICE: usize = 128 << 10;

/// The host rings' slice for chunks of at most `chunk` bytes: [`RING_SLICE`] where that cuts a
/// chunk into 4 or more slices, else the whole chunk (at 4 ranks and 1 MiB, chunks of 256 KiB in
/// two slices were slower than whole: the extra round trip costs more than the overlap saves).
pub fn ring_slice(chunk: usize) -> usize {
    if chunk >= 4 * RING_SLICE {
        RING_SLICE
    } else {
        chunk.max(1)
    }
}

/// Byte range of chunk `c` of `n` over `count` elements of `elt` bytes (sizes differ by at most one element).
pub fn chunk(count: usize, n: usize, c: usize, elt: usize) -> Range<usize> {
    (c * count / n * elt)..((c + 1) * count / n * elt)
}

/// Slices of a byte range of at most `slice` bytes, each a whole number of elements.
pub fn slices(r: Range<usize>, elt: usize, slice: usize) -> Vec<Range<usize>> {
    let step = (slice / elt).max(1) * elt;
    let mut v = Vec::new();
    let mut s = r.start;
    while s < r.end {
        let e = (s + step).min(r.end);
        v.push(s..e);
        s = e;
    }
    v
}

thread_local! {
    /// Receive scratch reused across calls: allocating (and zero-filling) a fresh slice-sized buffer
    /// for every operation costs a memset of up to 1 MiB each time.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A scratch buffer of at least `len` bytes (contents unspecified); give it back with [`put_scratch`].
pub fn take_scratch(len: usize) -> Vec<u8> {
    let mut v = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    if v.len() < len {
        v.resize(len, 0);
    }
    v
}

/// Return a buffer from [`take_scratch`] for the next call.
pub fn put_scratch(v: Vec<u8>) {
    SCRATCH.with(|s| *s.borrow_mut() = v);
}

/// `(&buf[a], &mut buf[b])` for disjoint ranges.
pub fn split(buf: &mut [u8], a: Range<usize>, b: Range<usize>) -> (&[u8], &mut [u8]) {
    assert!(
        a.end <= b.start || b.end <= a.start,
        "overlapping ranges {a:?} and {b:?}"
    );
    if a.start < b.start {
        let (lo, hi) = buf.split_at_mut(b.start);
        (&lo[a], &mut hi[..b.end - b.start])
    } else {
        let (lo, hi) = buf.split_at_mut(a.start);
        (&hi[..a.end - a.start], &mut lo[b])
    }
}

/// The two phases of a ring all-reduce, by the chunks they move at step s: reduce-scatter sends
/// chunk r-s-1 and receives chunk r-s-2; all-gather sends chunk r-s and receives chunk r-s-1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    ReduceScatter,
    AllGather,
}

/// One slice of one ring step: the byte ranges this rank sends to the right and receives from the
/// left (one side runs out first when the two chunks differ in size).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub step: usize,
    pub send: Option<Range<usize>>,
    pub recv: Option<Range<usize>>,
}

/// This rank's (right, left) neighbours on the ring.
pub fn neighbours(ctx: &Ctx) -> (usize, usize) {
    let (n, r) = (ctx.nranks, ctx.rank);
    ((r + 1) % n, (r + n - 1) % n)
}

/// Every piece of a ring phase in order: steps 0..n-1, each cut into slices. The host rings here
/// and the device rings (`device.rs`, staged or GPUDirect) walk the same schedule.
pub fn pieces(ctx: &Ctx, phase: Phase, bounds: &dyn Fn(usize) -> Range<usize>, slice: usize) -> Vec<Piece> {
    let (n, r, elt) = (ctx.nranks, ctx.rank, ctx.elt());
    let mut v = Vec::new();
    if n < 2 {
        return v;
    }
    let (send_back, recv_back) = match phase {
        Phase::ReduceScatter => (1, 2),
        Phase::AllGather => (0, 1),
    };
    for step in 0..n - 1 {
        let sends = slices(bounds((r + 2 * n - step - send_back) % n), elt, slice);
        let recvs = slices(bounds((r + 2 * n - step - recv_back) % n), elt, slice);
        for k in 0..sends.len().max(recvs.len()) {
            v.push(Piece {
                step,
                send: sends.get(k).cloned(),
                recv: recvs.get(k).cloned(),
            });
        }
    }
    v
}

/// Ring reduce-scatter: after n-1 steps rank r holds chunk r reduced over all ranks (not yet
/// finalised). Step s sends chunk r-s-1 right and receives chunk r-s-2 from the left, slice by
/// slice, reducing each received slice with this rank's own data for that chunk.
///
/// Pipelined: slice k is reduced while slice k+1 is in flight ([`Transport::exchange_overlapped`]),
/// the two received slices alternating between the halves of a scratch buffer; where the next
/// send reads what that reduction writes (a chunk of one slice), the reduction goes first.
///
/// With `src` (out of place) this rank's data is read from `src` and results are written to `buf`,
/// which needs no prior copy: step 0 sends straight from `src`, and every chunk of `buf` is
/// written by a reduction before it is sent. Without `src`, `buf` holds the data and is reduced in place.
pub fn reduce_scatter(
    t: &mut dyn Transport,
    ctx: &Ctx,
    src: Option<&[u8]>,
    buf: &mut [u8],
    bounds: &dyn Fn(usize) -> Range<usize>,
) -> Result<(), CollError> {
    let (n, elt) = (ctx.nranks, ctx.elt());
    let (right, left) = neighbours(ctx);
    let largest = (0..n).map(|c| bounds(c).len()).max().unwrap_or(0);
    let slice = ring_slice(largest);
    let pieces = pieces(ctx, Phase::ReduceScatter, bounds, slice);
    if pieces.is_empty() {
        return Ok(());
    }
    let half = largest.min((slice / elt).max(1) * elt);
    let mut scratch = take_scratch(2 * half);
    // The piece received but not yet reduced: where it goes in `buf`, and its scratch half.
    let mut pending: Option<(Range<usize>, usize)> = None;
    for (k, p) in pieces.into_iter().enumerate() {
        let deadline = Instant::now() + ctx.step_timeout;
        let from_src = src.filter(|_| p.step == 0);
        let (lo, hi) = scratch.split_at_mut(half);
        let (mine, theirs) = if k % 2 == 0 { (lo, hi) } else { (hi, lo) };
        // This piece's send reads what the pending reduction writes: reduce first.
        if let (Some(sr), Some((rr, _)), None) = (&p.send, &pending, from_src) {
            if sr.start < rr.end && rr.start < sr.end {
                let (rr, _) = pending.take().expect("checked above");
                reduce_piece(ctx, src, &mut buf[rr.clone()], rr.clone(), &theirs[..rr.len()])?;
            }
        }
        let dst_range = pending.as_ref().map(|(rr, _)| rr.clone());
        let (send, dst): (Option<&[u8]>, Option<&mut [u8]>) = match (from_src, &p.send) {
            (Some(s), Some(sr)) => (Some(&s[sr.clone()]), dst_range.clone().map(|d| &mut buf[d])),
            (_, None) => (None, dst_range.clone().map(|d| &mut buf[d])),
            (None, Some(sr)) => match dst_range.clone() {
                Some(d) => {
                    let (a, b) = split(buf, sr.clone(), d);
                    (Some(a), Some(b))
                }
                None => (Some(&buf[sr.clone()]), None),
            },
        };
        let tmp_len = p.recv.as_ref().map_or(0, |x| x.len());
        let mut ops = Vec::with_capacity(2);
        if let Some(s) = send {
            ops.push(Op::send(right, s));
        }
        if p.recv.is_some() {
            ops.push(Op::recv(left, &mut mine[..tmp_len]));
        }
        match (dst, dst_range) {
            (Some(dst), Some(rr)) => {
                let data = &theirs[..rr.len()];
                let mut result = Ok(());
                let mut work = || result = reduce_piece(ctx, src, &mut *dst, rr.clone(), data);
                t.exchange_overlapped(&mut ops, deadline, &mut work)?;
                result?;
            }
            _ => t.exchange(&mut ops, deadline)?,
        }
        drop(ops);
        pending = p.recv.map(|rr| (rr, k % 2));
    }
    if let Some((rr, k)) = pending {
        let at = if k == 0 { 0 } else { half };
        reduce_piece(ctx, src, &mut buf[rr.clone()], rr.clone(), &scratch[at..at + rr.len()])?;
    }
    put_scratch(scratch);
    Ok(())
}

/// Reduce one received slice into its place `dst` (= `buf[rr]`): with this rank's own data from
/// `src[rr]` out of place, with what `dst` holds in place.
fn reduce_piece(ctx: &Ctx, src: Option<&[u8]>, dst: &mut [u8], rr: Range<usize>, data: &[u8]) -> Result<(), CollError> {
    match src {
        Some(src) => reduce_from(ctx.dtype, ctx.op, dst, &src[rr], data)?,
        None => reduce_into(ctx.dtype, ctx.op, dst, data)?,
    }
    Ok(())
}

/// Ring all-gather in place: rank r starts with chunk r; step s sends chunk r-s right and
/// receives chunk r-s-1 from the left straight into place.
pub fn all_gather(
    t: &mut dyn Transport,
    ctx: &Ctx,
    buf: &mut [u8],
    bounds: &dyn Fn(usize) -> Range<usize>,
) -> Result<(), CollError> {
    let (right, left) = neighbours(ctx);
    let slice = ring_slice((0..ctx.nranks).map(|c| bounds(c).len()).max().unwrap_or(0));
    for p in pieces(ctx, Phase::AllGather, bounds, slice) {
        let deadline = Instant::now() + ctx.step_timeout;
        match (p.send, p.recv) {
            (Some(sr), Some(rr)) => {
                let (out, inn) = split(buf, sr, rr);
                t.exchange(&mut [Op::send(right, out), Op::recv(left, inn)], deadline)?;
            }
            (Some(sr), None) => t.exchange(&mut [Op::send(right, &buf[sr])], deadline)?,
            (None, Some(rr)) => t.exchange(&mut [Op::recv(left, &mut buf[rr])], deadline)?,
            (None, None) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_without_gaps() {
        for (count, n) in [(10, 3), (1, 4), (0, 2), (1000, 7)] {
            let mut end = 0;
            for c in 0..n {
                let r = chunk(count, n, c, 4);
                assert_eq!(r.start, end);
                end = r.end;
            }
            assert_eq!(end, count * 4);
        }
    }

    fn ctx(rank: usize, nranks: usize) -> Ctx {
        Ctx::for_test(rank, nranks, std::time::Duration::from_secs(1))
    }

    #[test]
    fn ring_schedule_by_hand() {
        // 3 ranks, chunk c = bytes 100c..100c+100 (whole slices). Rank 0, reduce-scatter: step 0
        // sends chunk 2 (r-1) and receives chunk 1 (r-2); step 1 sends chunk 1, receives chunk 0,
        // which it then owns. All-gather: step 0 sends chunk 0, receives chunk 2; step 1 sends
        // chunk 2, receives chunk 1.
        let b = |c: usize| 100 * c..100 * c + 100;
        let rs = pieces(&ctx(0, 3), Phase::ReduceScatter, &b, SLICE);
        let got: Vec<_> = rs.iter().map(|p| (p.step, p.send.clone(), p.recv.clone())).collect();
        assert_eq!(
            got,
            vec![(0, Some(200..300), Some(100..200)), (1, Some(100..200), Some(0..100))]
        );
        let ag = pieces(&ctx(0, 3), Phase::AllGather, &b, SLICE);
        let got: Vec<_> = ag.iter().map(|p| (p.step, p.send.clone(), p.recv.clone())).collect();
        assert_eq!(
            got,
            vec![(0, Some(0..100), Some(200..300)), (1, Some(200..300), Some(100..200))]
        );
        assert_eq!(neighbours(&ctx(0, 3)), (1, 2));
        assert!(pieces(&ctx(0, 1), Phase::AllGather, &b, SLICE).is_empty());
        // Unequal chunks: the longer side keeps going alone, one slice at a time.
        let big = |c: usize| if c == 2 { 0..SLICE + 8 } else { 0..4 };
        let rs = pieces(&ctx(0, 3), Phase::ReduceScatter, &big, SLICE);
        assert_eq!(rs[0].send, Some(0..SLICE));
        assert_eq!(rs[0].recv, Some(0..4));
        assert_eq!(
            (rs[1].step, rs[1].send.clone(), rs[1].recv.clone()),
            (0, Some(SLICE..SLICE + 8), None)
        );
    }

    #[test]
    fn host_ring_slices_only_chunks_of_four_slices_or_more() {
        assert_eq!(ring_slice(4 * RING_SLICE), RING_SLICE);
        assert_eq!(ring_slice(64 << 20), RING_SLICE);
        assert_eq!(ring_slice(4 * RING_SLICE - 4), 4 * RING_SLICE - 4);
        assert_eq!(ring_slice(100), 100);
        assert_eq!(ring_slice(0), 1);
        // 1 MiB at 2 ranks: chunks of 512 KiB in 4 slices; at 4 ranks: 256 KiB chunks, whole.
        assert_eq!(slices(0..(512 << 10), 4, ring_slice(512 << 10)).len(), 4);
        assert_eq!(slices(0..(256 << 10), 4, ring_slice(256 << 10)).len(), 1);
    }

    #[test]
    fn slices_and_split() {
        let s = slices(0..(SLICE * 2 + 8), 8, SLICE);
        assert_eq!(s.len(), 3);
        assert_eq!(s[2], SLICE * 2..SLICE * 2 + 8);
        assert!(slices(5..5, 4, SLICE).is_empty());
        let mut b: Vec<u8> = (0..10).collect();
        let (x, y) = split(&mut b, 6..8, 1..3);
        assert_eq!(x, &[6, 7]);
        y[0] = 99;
        assert_eq!(b[1], 99);
    }
}
