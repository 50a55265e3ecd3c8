use super::*;
use crate::gpu::standin::{check_journal, Call, HostStandIn, Journal};
use crate::gpu::RdmaFlush;
use ranks::{ForeignPath, NicMemory, OneSidedResult, OneSidedRole, Rdma, TransportError, TransportKind, WindowMemory};

/// Rank 0 of `n` with RDMA: zero-copy batches "complete" at once (the stand-in's memory is not
/// written), each noted in the stand-in's journal, so the order of network and device calls
/// shows; two-sided operations are an error (the direct path must not use them).
struct FakeRdma {
    n: usize,
    journal: Journal,
    regions: usize,
}

impl Transport for FakeRdma {
    fn kind(&self) -> TransportKind {
        TransportKind::Verbs
    }
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        self.n
    }
    fn host_of(&self, _: usize) -> &str {
        "fake"
    }
    fn exchange_with(
        &mut self,
        _: &mut [Op<'_>],
        _: Instant,
        _: Option<&mut dyn FnMut()>,
    ) -> Result<(), TransportError> {
        Err(TransportError::Setup("a two-sided operation on the direct path".into()))
    }
    fn rdma(&mut self) -> Option<&mut dyn Rdma> {
        Some(self)
    }
}

impl Rdma for FakeRdma {
    fn one_sided(&mut self, _: usize, _: usize, _: OneSidedRole, _: Instant) -> Result<OneSidedResult, TransportError> {
        Err(TransportError::Setup("not in this test".into()))
    }
    fn use_window_memory(&mut self, _: Box<dyn WindowMemory>) -> Result<ForeignPath, TransportError> {
        Err(TransportError::Setup("not in this test".into()))
    }
    fn register_region(&mut self, _: Box<dyn NicMemory>) -> Result<(RegionId, ForeignPath), TransportError> {
        self.regions += 1;
        Ok((self.regions, ForeignPath::HostStandIn))
    }
    fn release_region(&mut self, _: RegionId) {}
    fn exchange_direct(&mut self, ops: &mut [DirectOp], _: Instant) -> Result<(), TransportError> {
        let recv = ops.iter().any(|o| matches!(o.kind, ranks::DirectKind::Recv(_)));
        self.journal.lock().unwrap().push(Call::Note(if recv {
            "exchange with receives"
        } else {
            "exchange, sends only"
        }));
        Ok(())
    }
    fn use_send_opcode(&mut self, _: bool) {}
    fn set_test_qps(&mut self, _: usize) {}
}

fn ctx(nranks: usize) -> Ctx {
    Ctx::for_test(0, nranks, std::time::Duration::from_secs(5))
}

/// A ring reduce-scatter over GPUDirect RDMA on a stand-in GPU whose device reports these
/// attributes, 3 ranks of 1000-byte chunks in slices of `slice` bytes; the journal of its calls
/// from the first transfer on.
fn ring_over_rdma(flush_options: i32, ordering: i32, slice: usize) -> (Vec<Call>, RdmaFlush) {
    let mut g = HostStandIn::with_attributes(0, flush_options, ordering);
    let journal = g.journal();
    let mut t = FakeRdma {
        n: 3,
        journal: journal.clone(),
        regions: 0,
    };
    let buf = g.alloc(3000).unwrap();
    let rule = g.flush_rule();
    let mut dr = DeviceRun::with_slice(
        &mut g,
        &mut t,
        DataPath::Direct(ForeignPath::HostStandIn),
        3000,
        DevBufs::InPlace { buf },
        None,
        slice,
    )
    .unwrap();
    dr.overlap = true;
    let start = journal.lock().unwrap().len();
    ring_reduce_scatter(&mut t, &ctx(3), &mut dr, None, buf, &|c| c * 1000..(c + 1) * 1000).unwrap();
    // The check's download of the result reads device memory too.
    let mut out = vec![0u8; 1000];
    dr.gpu.download(At::new(buf, 0), &mut out).unwrap();
    dr.release(&mut t);
    let calls = journal.lock().unwrap()[start..].to_vec();
    (calls, rule)
}

/// Where the device needs it, every slice an RDMA write placed is flushed before the reduce
/// kernel reads it: exchange, landed, flush, reduce, for each of the ring's two steps.
#[test]
fn rdma_writes_are_flushed_before_the_kernel_reads_them() {
    let (calls, rule) = ring_over_rdma(crate::gpu::FLUSH_OPTION_HOST, 0, super::super::ring::SLICE);
    assert_eq!(rule, RdmaFlush::Flush);
    // One slice a chunk: the next step sends what this one reduces, so nothing overlaps.
    let step = ["exchange with receives", "landed", "flush", "reduce 1000"];
    let want: Vec<&str> = step.iter().chain(&step).copied().chain(["download 1000"]).collect();
    assert_eq!(said(&calls)[..want.len()], want[..], "{calls:?}");
    check_journal(&calls, rule, 1).unwrap();
}

/// A device that orders RDMA writes for its own kernels (OWNER or ALL_DEVICES) is never flushed.
#[test]
fn no_flush_where_the_device_orders_rdma_writes() {
    for ordering in [crate::gpu::ORDERING_OWNER, crate::gpu::ORDERING_ALL_DEVICES] {
        let (calls, rule) = ring_over_rdma(crate::gpu::FLUSH_OPTION_HOST, ordering, super::super::ring::SLICE);
        assert_eq!(rule, RdmaFlush::NotNeeded);
        assert!(calls.contains(&Call::RdmaLanded), "{calls:?}");
        assert!(!calls.contains(&Call::Flush), "{calls:?}");
        assert_eq!(calls.iter().filter(|c| matches!(c, Call::Reduce { .. })).count(), 2);
        check_journal(&calls, rule, 1).unwrap();
    }
}

/// The staged path takes the run's staging and allocates none of its own; staging smaller
/// than the case is refused (the run must allocate it at its largest size).
#[test]
fn staged_runs_share_the_run_staging() {
    let mut g = HostStandIn::new(0);
    let journal = g.journal();
    let mut t = FakeRdma {
        n: 2,
        journal: journal.clone(),
        regions: 0,
    };
    let mut staging = HostStaging::new(&mut g, 4096).unwrap();
    for bytes in [64, 1024, 4096] {
        let buf = g.alloc(bytes).unwrap();
        let dr = DeviceRun::new(
            &mut g,
            &mut t,
            DataPath::Staged,
            bytes,
            DevBufs::InPlace { buf },
            Some(&mut staging),
        )
        .unwrap();
        dr.release(&mut t);
        g.free(buf);
    }
    let e = DeviceRun::new(
        &mut g,
        &mut t,
        DataPath::Staged,
        8192,
        DevBufs::InPlace { buf: 0 },
        Some(&mut staging),
    )
    .err()
    .expect("staging too small");
    assert!(e.to_string().contains("host staging is smaller than this case"), "{e}");
    assert!(DeviceRun::new(&mut g, &mut t, DataPath::Staged, 8, DevBufs::InPlace { buf: 0 }, None).is_err());
    let calls = journal.lock().unwrap().clone();
    let staging_calls: Vec<&Call> = calls.iter().filter(|c| matches!(c, Call::HostStaging(_))).collect();
    assert_eq!(staging_calls, [&Call::HostStaging(4096), &Call::HostStaging(4096)]);
    assert_eq!(t.regions, 0, "nothing registered on the staged path");
    check_journal(&calls, g.flush_rule(), 1).unwrap();
}

/// A journal as words: `exchange ...` notes, `landed`, `flush`, `reduce N`, `start N`, `done N`,
/// `upload N`, `download N`.
fn said(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .map(|c| match c {
            Call::Note(n) => n.to_string(),
            Call::RdmaLanded => "landed".into(),
            Call::Flush => "flush".into(),
            Call::Reduce { bytes, .. } => format!("reduce {bytes}"),
            Call::ReduceStart { bytes, .. } => format!("start {bytes}"),
            Call::ReduceDone(n) => format!("done {n}"),
            Call::Upload(_, n) => format!("upload {n}"),
            Call::Download(_, n) => format!("download {n}"),
            other => format!("{other:?}"),
        })
        .collect()
}

/// Over GPUDirect RDMA with five slices a chunk: slice k's kernel is started, slice k+1's
/// exchange runs, then the kernel is waited for; each slice RDMA wrote is flushed before the
/// kernel that reads it starts.
#[test]
fn rdma_ring_exchanges_the_next_slice_while_the_kernel_runs() {
    let (calls, rule) = ring_over_rdma(crate::gpu::FLUSH_OPTION_HOST, 0, 200);
    let got = said(&calls);
    let ex = "exchange with receives";
    let mut want = vec![ex, "landed"];
    // 10 slices received (2 steps of 5): each one's kernel runs while the next one moves, but the
    // last one's, after the loop. Step 1's first send (slice 0 of the chunk step 0 received)
    // does not read slice 4, the one reduced meanwhile, so the step boundary overlaps too.
    for _ in 0..9 {
        want.extend(["flush", "start 200", ex, "landed", "done 200"]);
    }
    want.extend(["flush", "reduce 200", "download 1000"]);
    assert_eq!(got[..want.len()], want[..], "{calls:?}");
    check_journal(&calls, rule, 1).unwrap();
    assert_eq!(check_overlap(&calls), Ok(9));
}

/// The order rules of an overlapped ring in a stand-in's journal, or the first one broken:
/// - every started reduction has the next slice's transfer (an upload or an exchange) issued
///   before it is waited for;
/// - no reduction reads scratch that is not the whole of the last upload into it (staged: each
///   slice is read only after its transfer completed), and no upload or download touches a
///   started reduction's operands or result before it is waited for.
fn check_overlap(calls: &[Call]) -> Result<usize, String> {
    let overlaps = |x: At, xl: usize, y: At, yl: usize| x.buf == y.buf && x.off < y.off + yl && y.off < x.off + xl;
    let mut started: Option<(usize, [At; 3], usize, bool)> = None;
    let mut uploads: Vec<(At, usize)> = Vec::new();
    let mut overlapped = 0;
    for (i, c) in calls.iter().enumerate() {
        let reads = match c {
            Call::Reduce { dst, a, b, bytes } | Call::ReduceStart { dst, a, b, bytes } => {
                Some(([*dst, *a, *b], *bytes))
            }
            _ => None,
        };
        if let Some(([_, _, b], bytes)) = reads {
            // The operand in scratch: its last upload covered exactly it, if uploads feed it.
            let last = uploads.iter().rev().find(|(at, n)| overlaps(*at, *n, b, bytes));
            if let Some(&(at, n)) = last {
                if (at, n) != (b, bytes) {
                    return Err(format!(
                        "call {i}: {c:?} reads {b:?} ({bytes} B), last written by an upload of {n} B at {at:?}"
                    ));
                }
            } else if uploads.iter().any(|(at, _)| at.buf == b.buf) {
                return Err(format!("call {i}: {c:?} reads scratch no upload wrote"));
            }
        }
        match c {
            Call::ReduceStart { dst, a, b, bytes } => {
                if started.is_some() {
                    return Err(format!(
                        "call {i}: a second reduction started before the first was waited for"
                    ));
                }
                started = Some((i, [*dst, *a, *b], *bytes, false));
            }
            Call::ReduceDone(_) => {
                let (at, _, _, moved) = started.take().ok_or(format!("call {i}: a wait with nothing started"))?;
                if !moved {
                    return Err(format!(
                        "call {i}: the reduction started at call {at} was waited for with no transfer meanwhile"
                    ));
                }
                overlapped += 1;
            }
            Call::Upload(to, n) | Call::Download(to, n) => {
                if let Some((at, places, bytes, moved)) = &mut started {
                    if places.iter().any(|p| overlaps(*p, *bytes, *to, *n)) {
                        return Err(format!(
                            "call {i}: {c:?} touches the reduction started at call {at} before it was waited for"
                        ));
                    }
                    *moved |= matches!(c, Call::Upload(..));
                }
                if let Call::Upload(to, n) = c {
                    uploads.push((*to, *n));
                }
            }
            Call::Note(n) if n.starts_with("exchange") => {
                if let Some((_, _, _, moved)) = &mut started {
                    *moved = true;
                }
            }
            Call::Reduce { .. } | Call::Copy(_) | Call::Finalize(_) if started.is_some() => {
                return Err(format!("call {i}: {c:?} while a started reduction runs"));
            }
            _ => {}
        }
    }
    match started {
        Some((at, ..)) => Err(format!("the reduction started at call {at} was never waited for")),
        None => Ok(overlapped),
    }
}

#[path = "tests/ipc.rs"]
mod ipc;
#[path = "tests/staged.rs"]
mod staged;
