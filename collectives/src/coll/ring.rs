//! Pieces the ring and chain algorithms share: chunk bounds, slices, disjoint borrows.

use std::ops::Range;
use std::time::Instant;

use ranks::{Op, Transport};

use super::{CollError, Ctx};
use crate::reduce::{reduce_from, reduce_into};

/// Bytes per slice: a ring step moves its chunk in slices so sends and receives of one step
/// overlap and the kernel's socket buffers carry the next slice while the last one is reduced.
pub const SLICE: usize = 1 << 20;

/// Byte range of chunk `c` of `n` over `count` elements of `elt` bytes (sizes differ by at most one element).
pub fn chunk(count: usize, n: usize, c: usize, elt: usize) -> Range<usize> {
    (c * count / n * elt)..((c + 1) * count / n * elt)
}

/// Slices of a byte range, each a whole number of elements.
pub fn slices(r: Range<usize>, elt: usize) -> Vec<Range<usize>> {
    let step = (SLICE / elt).max(1) * elt;
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

/// Ring reduce-scatter: after n-1 steps rank r holds chunk r reduced over all ranks (not yet
/// finalised). Step s sends chunk r-s-1 right and receives chunk r-s-2 from the left, slice by
/// slice, reducing each received slice with this rank's own data for that chunk.
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
    let (n, r, elt) = (ctx.nranks, ctx.rank, ctx.elt());
    if n < 2 {
        return Ok(());
    }
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    let mut scratch = take_scratch(
        (0..n)
            .map(|c| bounds(c).len())
            .max()
            .unwrap_or(0)
            .min((SLICE / elt).max(1) * elt),
    );
    for s in 0..n - 1 {
        let sends = slices(bounds((r + 2 * n - s - 1) % n), elt);
        let recvs = slices(bounds((r + 2 * n - s - 2) % n), elt);
        for k in 0..sends.len().max(recvs.len()) {
            let deadline = Instant::now() + ctx.step_timeout;
            let tmp_len = recvs.get(k).map_or(0, |x| x.len());
            {
                let mut ops = Vec::with_capacity(2);
                if let Some(sr) = sends.get(k) {
                    // Step 0 sends this rank's own data; later steps what the last step reduced.
                    let from: &[u8] = match src {
                        Some(src) if s == 0 => src,
                        _ => buf,
                    };
                    ops.push(Op::send(right, &from[sr.clone()]));
                }
                if recvs.get(k).is_some() {
                    ops.push(Op::recv(left, &mut scratch[..tmp_len]));
                }
                t.exchange(&mut ops, deadline)?;
            }
            if let Some(rr) = recvs.get(k) {
                match src {
                    Some(src) => reduce_from(
                        ctx.dtype,
                        ctx.op,
                        &mut buf[rr.clone()],
                        &src[rr.clone()],
                        &scratch[..tmp_len],
                    )?,
                    None => reduce_into(ctx.dtype, ctx.op, &mut buf[rr.clone()], &scratch[..tmp_len])?,
                }
            }
        }
    }
    put_scratch(scratch);
    Ok(())
}

/// All-reduce between exactly two ranks: each sends its whole buffer to the other and reduces
/// what it receives, slice by slice (recursive doubling's single step). Against the ring's two
/// phases this moves the same bytes in one phase. Both ranks compute `mine op theirs`, and every
/// op is commutative bit for bit, so they agree.
/// With `src` (out of place) this rank's data is read from `src` and the result written to `buf`.
pub fn pair_all_reduce(t: &mut dyn Transport, ctx: &Ctx, src: Option<&[u8]>, buf: &mut [u8]) -> Result<(), CollError> {
    let peer = 1 - ctx.rank.min(1);
    let elt = ctx.elt();
    let parts = slices(0..buf.len(), elt);
    let mut scratch = take_scratch(parts.first().map_or(0, |r| r.len()));
    for r in parts {
        let deadline = Instant::now() + ctx.step_timeout;
        let len = r.len();
        {
            let from: &[u8] = match src {
                Some(src) => &src[r.clone()],
                None => &buf[r.clone()],
            };
            t.exchange(
                &mut [Op::send(peer, from), Op::recv(peer, &mut scratch[..len])],
                deadline,
            )?;
        }
        match src {
            Some(src) => reduce_from(ctx.dtype, ctx.op, &mut buf[r.clone()], &src[r.clone()], &scratch[..len])?,
            None => reduce_into(ctx.dtype, ctx.op, &mut buf[r.clone()], &scratch[..len])?,
        }
    }
    put_scratch(scratch);
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
    let (n, r, elt) = (ctx.nranks, ctx.rank, ctx.elt());
    if n < 2 {
        return Ok(());
    }
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    for s in 0..n - 1 {
        let sends = slices(bounds((r + n - s) % n), elt);
        let recvs = slices(bounds((r + 2 * n - s - 1) % n), elt);
        for k in 0..sends.len().max(recvs.len()) {
            let deadline = Instant::now() + ctx.step_timeout;
            match (sends.get(k), recvs.get(k)) {
                (Some(sr), Some(rr)) => {
                    let (out, inn) = split(buf, sr.clone(), rr.clone());
                    t.exchange(&mut [Op::send(right, out), Op::recv(left, inn)], deadline)?;
                }
                (Some(sr), None) => t.exchange(&mut [Op::send(right, &buf[sr.clone()])], deadline)?,
                (None, Some(rr)) => t.exchange(&mut [Op::recv(left, &mut buf[rr.clone()])], deadline)?,
                (None, None) => {}
            }
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

    #[test]
    fn slices_and_split() {
        let s = slices(0..(SLICE * 2 + 8), 8);
        assert_eq!(s.len(), 3);
        assert_eq!(s[2], SLICE * 2..SLICE * 2 + 8);
        assert!(slices(5..5, 4).is_empty());
        let mut b: Vec<u8> = (0..10).collect();
        let (x, y) = split(&mut b, 6..8, 1..3);
        assert_eq!(x, &[6, 7]);
        y[0] = 99;
        assert_eq!(b[1], 99);
    }
}
