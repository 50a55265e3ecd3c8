use super::*;

#[test]
fn waits_are_bounded_and_keep_errors() {
    use std::time::Duration;
    let mut n = 0;
    let r: Result<Result<(), &str>, Duration> = wait_ready(Duration::from_secs(5), || {
        n += 1;
        Ok(n == 3000)
    });
    assert_eq!(r, Ok(Ok(())));
    assert_eq!(n, 3000);
    let r = wait_ready(Duration::from_secs(5), || Err::<bool, _>("CUDA_ERROR_ILLEGAL_ADDRESS"));
    assert_eq!(r, Ok(Err("CUDA_ERROR_ILLEGAL_ADDRESS")));
    let t0 = std::time::Instant::now();
    let r = wait_ready(Duration::from_millis(30), || Ok::<bool, ()>(false));
    let waited = r.expect_err("never ready: the limit ends the wait");
    assert!(waited >= Duration::from_millis(30) && t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn ordinals_by_local_rank_or_list() {
    assert_eq!(pick_ordinal(None, 3, 8, "h").unwrap(), 3);
    // Two ranks on one GPU share it.
    assert_eq!(pick_ordinal(None, 1, 1, "h").unwrap(), 0);
    assert_eq!(pick_ordinal(Some(&[2]), 1, 4, "h").unwrap(), 2);
    assert_eq!(pick_ordinal(Some(&[3, 2, 1, 0]), 1, 4, "h").unwrap(), 2);
}

#[test]
fn selection_errors_say_what_is_wrong() {
    let e = pick_ordinal(Some(&[0, 1]), 2, 4, "node7").unwrap_err().to_string();
    assert!(e.contains("node7") && e.contains("--gpu-ids lists 2 GPUs"), "{e}");
    let e = pick_ordinal(Some(&[5]), 0, 4, "h").unwrap_err().to_string();
    assert!(
        e.contains("GPU 5 does not exist: 4 GPU(s) visible") && e.contains("0 to 3"),
        "{e}"
    );
    let e = pick_ordinal(None, 0, 0, "h").unwrap_err().to_string();
    assert!(e.contains("sees no GPU"), "{e}");
    assert!(parse_ids("0,x").unwrap_err().contains("\"x\" is not a GPU ordinal"));
    assert_eq!(parse_ids("0, 1").unwrap(), vec![0, 1]);
}

/// The flush rule of the CUDA docs: a no-op (left out) where the writes ordering covers the
/// owner's scope; else a host flush where the options have it; else none possible.
#[test]
fn flush_rule_from_the_two_attributes() {
    use RdmaFlush::*;
    for (opts, order, want) in [
        (1, 0, Flush),
        (3, 0, Flush),
        (2, 0, Unavailable),
        (0, 0, Unavailable),
        (0, ORDERING_OWNER, NotNeeded),
        (1, ORDERING_OWNER, NotNeeded),
        (1, ORDERING_ALL_DEVICES, NotNeeded),
        (1, 50, Flush),
    ] {
        assert_eq!(
            RdmaFlush::from_attributes(opts, order),
            want,
            "options {opts}, ordering {order}"
        );
    }
}

fn probe() -> GpuDirectProbe {
    GpuDirectProbe {
        gpu: GpuInfo {
            ordinal: 1,
            name: "NVIDIA H200".into(),
            pci_bus_id: "0000:1b:00.0".into(),
            stand_in: false,
        },
        rdma_supported: Ok(true),
        dmabuf_supported: Ok(true),
        flush_options: Ok(FLUSH_OPTION_HOST),
        writes_ordering: Ok(ORDERING_OWNER),
        buffer_capable: Ok(true),
        pool_buffer_capable: Some(Ok(false)),
        dmabuf_export: Ok(PROBE_BYTES),
        page_size: 4096,
        flush: RdmaFlush::NotNeeded,
    }
}

#[test]
fn probe_lines_say_the_verdict_and_the_facts() {
    let p = probe();
    assert_eq!(
        p.line(),
        "# CUDA GPU 1 NVIDIA H200 [0000:1b:00.0]: GPUDirect RDMA usable; rdma_supported=yes buffer_capable=yes \
         pool_buffer_capable=no dmabuf_supported=yes dmabuf_export=ok(2097152 B at 4096-B alignment) \
         flush_options=host writes_ordering=owner(100) flush=not-needed"
    );
    // dma-buf export failing leaves nvidia-peermem's path.
    let q = GpuDirectProbe {
        dmabuf_export: Err("cuMemGetHandleForAddressRange(DMA_BUF_FD) failed: CUDA_ERROR_NOT_SUPPORTED".into()),
        ..probe()
    };
    assert!(q.usable());
    assert!(
        q.line().contains("dmabuf_export=failed(cuMemGetHandleForAddressRange"),
        "{}",
        q.line()
    );
    let q = GpuDirectProbe {
        buffer_capable: Err("cuPointerGetAttribute(IS_GPU_DIRECT_RDMA_CAPABLE): CUDA_ERROR_INVALID_VALUE".into()),
        ..probe()
    };
    assert_eq!(q.unusable(), Some("a cuMemAlloc buffer is not GPUDirect-capable"));
    assert!(
        q.line().contains("buffer_capable=unknown(cuPointerGetAttribute"),
        "{}",
        q.line()
    );
    let q = GpuDirectProbe {
        dmabuf_export: Err("x".into()),
        rdma_supported: Ok(false),
        ..probe()
    };
    assert_eq!(
        q.unusable(),
        Some("no dma-buf export and no GPUDirect RDMA (nv-p2p) support")
    );
}

#[test]
fn pages() {
    let p = host_page_size();
    assert!(p >= 4096 && p.is_power_of_two(), "{p}");
    assert_eq!(round_up(1, 4096), 4096);
    assert_eq!(round_up(4096, 4096), 4096);
    assert_eq!(round_up(PROBE_BYTES, p), PROBE_BYTES);
}

#[test]
fn short_bus_id_as_nccl_tests_prints_it() {
    let g = GpuInfo {
        ordinal: 0,
        name: "x".into(),
        pci_bus_id: "0000:1b:00.0".into(),
        stand_in: false,
    };
    assert_eq!(g.short_bus_id(), "0000:1b:00");
}
