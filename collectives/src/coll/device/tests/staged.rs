//! The staged device ring at 2 and 3 ranks, each rank a thread over a real TCP mesh on loopback
//! and a stand-in GPU of its own: overlapped, it gives the same bytes as without overlap and as
//! the host ring, for every type, op and placement, on odd sizes; and its journal keeps the
//! order rules ([`super::check_overlap`]).

use std::time::Duration;

use ranks::tcp::TcpMesh;

use super::*;
use crate::coll::ring;
use crate::dtype::{DataType, RedOp};

/// The rings' slice here: small, so a few KiB make several slices a chunk.
const SLICE: usize = 512;

/// A mesh of `n` ranks in this process, one per thread.
pub(super) fn local_mesh(n: usize) -> Vec<TcpMesh> {
    ranks::tcp::loopback_mesh(n, Duration::from_secs(10)).unwrap()
}

/// Bytes that are no particular values (random floats, NaNs included), one sequence per rank,
/// type and op of `ctx`: the comparison is of bytes, and each element's operations are the same
/// on every path.
pub(super) fn noise(ctx: &Ctx, len: usize) -> Vec<u8> {
    let seed = (ctx.rank * 1000 + ctx.dtype as usize * 10 + ctx.op as usize) as u64;
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A stand-in GPU holding `data` as a run places it (in place one buffer; out of place a send
/// buffer and a receive buffer), with host staging of its size: what every device-ring case of
/// these tests starts from, before its `DeviceRun`.
pub(super) struct OnDevice {
    pub g: HostStandIn,
    pub journal: Journal,
    pub staging: HostStaging,
    /// The send buffer, out of place.
    pub src: Option<BufId>,
    /// The result's buffer (the data's too, in place).
    pub buf: BufId,
    pub bufs: DevBufs,
}

impl OnDevice {
    pub(super) fn new(data: &[u8], in_place: bool) -> OnDevice {
        let bytes = data.len();
        let mut g = HostStandIn::new(0);
        let journal = g.journal();
        let staging = HostStaging::new(&mut g, bytes).unwrap();
        let (src, buf) = if in_place {
            (None, g.alloc(bytes).unwrap())
        } else {
            (Some(g.alloc(bytes).unwrap()), g.alloc(bytes).unwrap())
        };
        g.upload(At::new(src.unwrap_or(buf), 0), data).unwrap();
        let bufs = match src {
            Some(send) => DevBufs::OutOfPlace { send, recv: buf },
            None => DevBufs::InPlace { buf },
        };
        OnDevice {
            g,
            journal,
            staging,
            src,
            buf,
            bufs,
        }
    }
}

/// One case's results on one rank: the device ring overlapped (and its journal), not
/// overlapped, and the host ring.
struct Results {
    overlapped: Vec<u8>,
    plain: Vec<u8>,
    host: Vec<u8>,
    journal: Vec<Call>,
}

/// The ring reduce-scatter of `count` elements on this rank, three ways.
fn one_case(t: &mut TcpMesh, ctx: &Ctx, count: usize, in_place: bool) -> Results {
    let (n, elt) = (ctx.nranks, ctx.elt());
    let bounds = |c: usize| ring::chunk(count, n, c, elt);
    let bytes = count * elt;
    let data = noise(ctx, bytes);
    let mut device = |overlap: bool| -> (Vec<u8>, Vec<Call>) {
        let OnDevice {
            mut g,
            journal,
            mut staging,
            src,
            buf,
            bufs,
        } = OnDevice::new(&data, in_place);
        let mut dr =
            DeviceRun::with_slice(&mut g, t, DataPath::Staged, bytes, bufs, Some(&mut staging), SLICE).unwrap();
        dr.overlap = overlap;
        let from = journal.lock().unwrap().len();
        ring_reduce_scatter(t, ctx, &mut dr, src, buf, &bounds).unwrap();
        let calls = journal.lock().unwrap()[from..].to_vec();
        dr.release(t);
        let mut out = vec![0u8; bytes];
        g.download(At::new(buf, 0), &mut out).unwrap();
        (out, calls)
    };
    let (overlapped, journal) = device(true);
    let (plain, _) = device(false);
    let mut host = vec![0u8; bytes];
    match in_place {
        true => {
            host.copy_from_slice(&data);
            ring::reduce_scatter(t, ctx, None, &mut host, &bounds).unwrap();
        }
        false => ring::reduce_scatter(t, ctx, Some(&data), &mut host, &bounds).unwrap(),
    }
    // Only this rank's own chunk is its result; the rest holds partial sums that differ
    // between placements and paths (the host ring writes nothing there out of place).
    let mine = bounds(ctx.rank);
    Results {
        overlapped: overlapped[mine.clone()].to_vec(),
        plain: plain[mine.clone()].to_vec(),
        host: host[mine].to_vec(),
        journal,
    }
}

/// Elements a rank's data holds: one slice or less a chunk, and several slices a chunk with a
/// short last one (odd counts, so chunks differ by an element).
const COUNTS: [usize; 2] = [7, 1001];

/// Every case, in the order every rank runs them.
fn cases() -> Vec<(DataType, RedOp, usize, bool)> {
    let mut v = Vec::new();
    for dt in DataType::ALL {
        for op in RedOp::ALL {
            for count in COUNTS {
                for in_place in [false, true] {
                    v.push((dt, op, count, in_place));
                }
            }
        }
    }
    v
}

/// Every rank runs every case; rank by rank, the results of each.
fn run_everywhere(n: usize) -> Vec<Vec<Results>> {
    let handles: Vec<_> = local_mesh(n)
        .into_iter()
        .enumerate()
        .map(|(rank, mut t)| {
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for (dt, op, count, in_place) in cases() {
                    let ctx = Ctx {
                        dtype: dt,
                        op,
                        ..Ctx::for_test(rank, n, Duration::from_secs(20))
                    };
                    out.push(one_case(&mut t, &ctx, count, in_place));
                }
                out
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Overlapped, the staged ring gives the bytes it gave without overlap, and the host ring's,
/// for every type, op and placement at 2 and 3 ranks; and each rank's journal keeps the order
/// rules, with every slice but the last of a multi-slice case overlapped.
#[test]
fn overlapped_staged_ring_gives_the_same_bytes_in_order() {
    for n in [2, 3] {
        let all = run_everywhere(n);
        for (rank, results) in all.iter().enumerate() {
            for ((dt, op, count, in_place), r) in cases().into_iter().zip(results) {
                let case = format!(
                    "{n} ranks, rank {rank}, {} {} x{count} in_place={in_place}",
                    dt.name(),
                    op.name()
                );
                assert!(
                    r.overlapped == r.plain,
                    "{case}: overlapped differs from not overlapped"
                );
                assert!(r.plain == r.host, "{case}: the device ring differs from the host ring");
                let overlapped = check_overlap(&r.journal).unwrap_or_else(|e| panic!("{case}: {e}"));
                // Slices this rank received: n-1 steps of its chunks' slices; all but the last
                // overlap the next one's transfer, unless a chunk is a single slice.
                let slices = ring::slices(0..(count / n + 1) * dt.size(), dt.size(), SLICE).len();
                if slices > 1 {
                    assert!(overlapped >= (n - 1) * (slices - 1), "{case}: {overlapped} overlapped");
                } else {
                    assert_eq!(overlapped, 0, "{case}");
                }
            }
        }
    }
}
