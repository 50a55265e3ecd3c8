use super::*;

#[test]
fn data_moves_only_through_uploads_and_downloads() {
    let mut g = HostStandIn::new(0);
    let a = g.alloc(16).unwrap();
    let b = g.alloc(16).unwrap();
    g.upload(At::new(a, 0), &[1u8; 16]).unwrap();
    g.upload(At::new(b, 8), &[2u8; 8]).unwrap();
    // a[0..8] = a[0..8] + b[8..16], in place.
    g.reduce(
        DataType::Uint8,
        RedOp::Sum,
        At::new(a, 0),
        At::new(a, 0),
        At::new(b, 8),
        8,
    )
    .unwrap();
    let mut out = [0u8; 16];
    g.download(At::new(a, 0), &mut out).unwrap();
    assert_eq!(out, [3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1]);
    let e = g.upload(At::new(b, 10), &[0u8; 8]).unwrap_err().to_string();
    assert!(e.contains("upload past the end") && e.contains("10..18"), "{e}");
    // Device-to-device copy within one buffer.
    g.copy(At::new(a, 8), At::new(a, 0), 4).unwrap();
    g.download(At::new(a, 0), &mut out).unwrap();
    assert_eq!(out, [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1]);
    let e = g.copy(At::new(a, 12), At::new(b, 0), 8).unwrap_err().to_string();
    assert!(e.contains("copy destination past the end"), "{e}");
    g.free(b);
    assert!(g.download(At::new(b, 0), &mut out[..1]).is_err());
    assert!(g.nic_memory(b).is_err(), "a freed buffer cannot be registered");
}

/// The probe makes the calls the CUDA probe makes, in its order, on a buffer placed as device
/// buffers are, and reports what the modelled device says.
#[test]
fn probe_models_the_cuda_calls() {
    let mut g = HostStandIn::new(3);
    let p = g.probe();
    let calls = g.journal().lock().unwrap().clone();
    assert_eq!(
        calls,
        [
            Call::DeviceAttributes,
            Call::Alloc(super::super::PROBE_BYTES),
            Call::PointerAttribute,
            Call::DmaBufExport(super::super::PROBE_BYTES),
            Call::Free
        ]
    );
    assert_eq!(p.dmabuf_export, Ok(super::super::PROBE_BYTES));
    assert_eq!(p.flush, RdmaFlush::Flush);
    assert!(p.usable());
    let l = p.line();
    assert!(
        l.starts_with("# CUDA GPU 3 host stand-in for a GPU") && l.contains("GPUDirect RDMA usable;"),
        "{l}"
    );
    assert!(
        l.contains("flush_options=host writes_ordering=none(0) flush=before-reads"),
        "{l}"
    );
    // The export refuses what the driver refuses: a range off the host page size.
    let b = g.alloc(3 * 4096).unwrap();
    let e = g.export(b, 4096 + 256, 4096).unwrap_err();
    assert!(e.contains("CUDA_ERROR_INVALID_VALUE") && e.contains("4352"), "{e}");
    assert_eq!(g.export(b, 2 * 4096, 4096), Ok(2 * 4096));
    // A device that orders RDMA writes needs no flush; one that neither orders nor flushes
    // cannot take GPUDirect writes safely.
    let p = HostStandIn::with_attributes(0, 3, 100).probe();
    assert_eq!(p.flush, RdmaFlush::NotNeeded);
    assert!(p
        .line()
        .contains("flush_options=host+memops writes_ordering=owner(100) flush=not-needed"));
    let p = HostStandIn::with_attributes(0, 0, 0).probe();
    assert!(!p.usable());
    assert!(
        p.line()
            .contains("GPUDirect RDMA NOT usable: RDMA writes are not ordered"),
        "{}",
        p.line()
    );
}

/// Flushes happen only between RDMA writes landing and the next read of device memory, and
/// only where the device needs them.
#[test]
fn flush_only_when_needed_and_before_reads() {
    let run = |g: &mut HostStandIn| {
        let a = g.alloc(8).unwrap();
        g.upload(At::new(a, 0), &[1u8; 8]).unwrap();
        g.rdma_writes_landed();
        g.rdma_writes_landed();
        g.reduce(
            DataType::Uint8,
            RedOp::Sum,
            At::new(a, 0),
            At::new(a, 0),
            At::new(a, 0),
            8,
        )
        .unwrap();
        // Nothing landed since: the next read needs no flush.
        g.finalize(DataType::Uint8, RedOp::Avg, a, 0..8, 2).unwrap();
        g.rdma_writes_landed();
        let mut out = [0u8; 8];
        g.download(At::new(a, 0), &mut out).unwrap();
        g.journal().lock().unwrap().clone()
    };
    let mut g = HostStandIn::new(0);
    let calls = run(&mut g);
    assert_eq!(calls.iter().filter(|c| **c == Call::Flush).count(), 2, "{calls:?}");
    check_journal(&calls, RdmaFlush::Flush, 1).unwrap();
    let mut g = HostStandIn::with_attributes(0, 1, 200);
    let calls = run(&mut g);
    assert!(!calls.contains(&Call::Flush), "{calls:?}");
    check_journal(&calls, RdmaFlush::NotNeeded, 1).unwrap();
}

/// The journal rules catch what they are for.
#[test]
fn journal_rules_catch_broken_orders() {
    use Call::*;
    let f = RdmaFlush::Flush;
    let at = At::new(0, 0);
    let upload = |n| Upload(at, n);
    let reduce = |n| Reduce {
        dst: at,
        a: at,
        b: at,
        bytes: n,
    };
    let e = check_journal(&[Alloc(8), RdmaLanded, reduce(8)], f, 1).unwrap_err();
    assert!(e.contains("without a flush"), "{e}");
    // A started kernel reads device memory as a waited one does.
    let start = ReduceStart {
        dst: at,
        a: at,
        b: at,
        bytes: 8,
    };
    let e = check_journal(&[RdmaLanded, start, ReduceDone(8)], f, 1).unwrap_err();
    assert!(e.contains("without a flush"), "{e}");
    let e = check_journal(&[RdmaLanded, Flush], RdmaFlush::NotNeeded, 1).unwrap_err();
    assert!(e.contains("does not need one"), "{e}");
    let e = check_journal(&[Flush], f, 1).unwrap_err();
    assert!(e.contains("no RDMA writes"), "{e}");
    let e = check_journal(&[HostStaging(8), HostStaging(8), upload(8), HostStaging(8)], f, 1).unwrap_err();
    assert!(e.contains("3 staging allocations for 1 run"), "{e}");
    let e = check_journal(&[HostStaging(8), upload(8), HostStaging(8)], f, 1).unwrap_err();
    assert!(e.contains("after the first upload"), "{e}");
    check_journal(
        &[HostStaging(8), HostStaging(8), upload(8), RdmaLanded, Flush, Copy(8)],
        f,
        1,
    )
    .unwrap();
    let s = summary(
        &[
            HostStaging(64),
            HostStaging(64),
            upload(8),
            RdmaLanded,
            Flush,
            reduce(8),
        ],
        f,
    );
    assert!(
        s.starts_with("host_staging=2 staging_bytes=64,64 ") && s.ends_with("flush=1 probe_exports=0 rules=kept"),
        "{s}"
    );
}

/// CUDA IPC, modelled over shared memory: a buffer one "rank" exports is opened by another (a
/// thread of its own, its own stand-in), which copies into it; the exporter sees the bytes. The
/// opened buffer is closed by `free`, and a handle of a freed buffer is refused as stale.
#[test]
fn ipc_export_open_copy_close_and_a_stale_handle() {
    let mut a = HostStandIn::new(0);
    let buf = a.alloc(4096 + 8).unwrap();
    let h = a.export_peer(buf).unwrap();
    assert_eq!((h.offset, h.len), (0, 4104));
    let journal = std::thread::spawn(move || {
        let mut b = HostStandIn::new(1);
        let mine = b.alloc(16).unwrap();
        b.upload(At::new(mine, 0), &[5u8; 16]).unwrap();
        let theirs = b.open_peer(&h).unwrap();
        b.copy(At::new(theirs, 4096), At::new(mine, 0), 8).unwrap();
        let e = b.copy(At::new(theirs, 4100), At::new(mine, 0), 8).unwrap_err();
        assert!(e.to_string().contains("copy destination past the end"), "{e}");
        b.free(theirs);
        b.journal().lock().unwrap().clone()
    })
    .join()
    .unwrap();
    assert_eq!(
        journal[2..],
        [Call::IpcOpen, Call::PeerCopy(8), Call::PeerCopy(8), Call::IpcClose]
    );
    let mut out = [0u8; 8];
    a.download(At::new(buf, 4096), &mut out).unwrap();
    assert_eq!(out, [5u8; 8], "the peer's copy landed in the exporter's buffer");
    a.free(buf);
    let e = HostStandIn::new(1).open_peer(&h).unwrap_err().to_string();
    assert!(e.contains("cuIpcOpenMemHandle failed: stale handle"), "{e}");
    assert!(a.export_peer(buf).is_err(), "a freed buffer is not exported");
    let calls = a.journal().lock().unwrap().clone();
    assert!(summary(&calls, RdmaFlush::Flush).contains("ipc_export=1 ipc_open=0 peer_copy=0"));
}
