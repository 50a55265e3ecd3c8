//! The verbs wrappers on real RDMA verbs: these need an RDMA device, so they are ignored on machines
//! without one (cargo reports them as ignored) and run inside the Soft-RoCE VM, where
//! `scripts/softroce-vm test` runs this binary with `--ignored` on device `rxelo` (GID index 1).

use std::time::{Duration, Instant};

use ranks::verbs::{
    Access, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpEndpoint, QueuePair, Rts, SendOp,
};

const REASON: &str = "needs RDMA verbs; runs in the Soft-RoCE VM (scripts/softroce-vm test)";

fn device() -> (Context, u8, u8) {
    let name = std::env::var("MESHRUN_VERBS_DEVICE").unwrap_or_else(|_| "rxelo".into());
    let gid: u8 = std::env::var("MESHRUN_VERBS_GID")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    (
        Context::open(Some(&name)).unwrap_or_else(|e| panic!("{REASON}: {e}")),
        1,
        gid,
    )
}

struct Side {
    qp: QueuePair<Rts>,
    mr: MemoryRegion,
    cq: CompletionQueue,
}

/// Two RC queue pairs on one device, connected to each other.
fn connected_pair(ctx: &Context, port: u8, gid_index: u8, len: usize) -> (Side, Side, ProtectionDomain) {
    let info = ctx.query_port(port).expect("query_port");
    assert!(info.active, "port {port} of {} is not active", ctx.name());
    let gid = ctx.query_gid(port, gid_index as i32).expect("query_gid");
    let pd = ctx.alloc_pd().expect("pd");
    let access = Access {
        local_write: true,
        remote_write: true,
        remote_read: true,
    };
    let mut sides = Vec::new();
    let mut eps = Vec::new();
    for psn in [0x1000u32, 0x2000] {
        let cq = ctx.create_cq(64).expect("cq");
        let qp = pd
            .create_rc_qp(&cq, &cq, 32, 0)
            .expect("qp")
            .into_init(port, access)
            .expect("init");
        let mr = pd.register(len, access).expect("reg_mr");
        eps.push(QpEndpoint {
            qpn: qp.qpn(),
            psn,
            lid: info.lid,
            gid,
            mtu: info.mtu_enum,
            addr: mr.addr(),
            rkey: mr.rkey(),
        });
        sides.push((qp, mr, cq, psn));
    }
    let grh = info.ethernet.then_some(gid_index);
    let mut out = Vec::new();
    for (i, (qp, mr, cq, psn)) in sides.into_iter().enumerate() {
        let remote = eps[1 - i];
        let qp = qp
            .into_rtr(
                &remote,
                port,
                info.mtu_enum.min(remote.mtu),
                grh,
                ranks::verbs::Qos::default(),
            )
            .expect("rtr")
            .into_rts(psn)
            .expect("rts");
        out.push(Side { qp, mr, cq });
    }
    let b = out.pop().expect("b");
    let a = out.pop().expect("a");
    (a, b, pd)
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

#[test]
#[ignore = "needs RDMA verbs; runs in the Soft-RoCE VM (scripts/softroce-vm test)"]
fn send_write_and_read_move_verified_data() {
    let (ctx, port, gid) = device();
    let len = 1 << 20;
    let (mut a, mut b, _pd) = connected_pair(&ctx, port, gid, len);
    for (i, x) in a.mr.as_mut_slice().iter_mut().enumerate() {
        *x = (i % 251) as u8;
    }
    // Two-sided send into a posted receive.
    b.qp.post_recv(&b.mr, 0, len, 7).expect("post_recv");
    a.qp.post(SendOp::Send, &a.mr, 0, len, 1).expect("send");
    assert_eq!(a.cq.wait(1, deadline(), "send").expect("send completion")[0].wr_id, 1);
    let c = b.cq.wait(1, deadline(), "receive").expect("recv completion");
    assert_eq!((c[0].wr_id, c[0].byte_len as usize), (7, len));
    assert_eq!(a.mr.as_slice(), b.mr.as_slice());

    // RDMA write with immediate into the peer's region, signalled by the immediate.
    for x in a.mr.as_mut_slice()[..4096].iter_mut() {
        *x = 0xC3;
    }
    b.qp.post_recv(&b.mr, 0, 0, 8).expect("post_recv for imm");
    a.qp.post(
        SendOp::WriteImm {
            remote_addr: b.mr.addr() + 8192,
            rkey: b.mr.rkey(),
            imm: 0xABCD,
        },
        &a.mr,
        0,
        4096,
        2,
    )
    .expect("write");
    a.cq.wait(1, deadline(), "write").expect("write completion");
    let c = b.cq.wait(1, deadline(), "write immediate").expect("imm completion");
    assert_eq!(c[0].imm, Some(0xABCD));
    assert!(b.mr.as_slice()[8192..8192 + 4096].iter().all(|&x| x == 0xC3));

    // RDMA read back from the peer.
    for x in b.mr.as_mut_slice()[..100].iter_mut() {
        *x = 0x5A;
    }
    a.qp.post(
        SendOp::Read {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        },
        &a.mr,
        100_000,
        100,
        3,
    )
    .expect("read");
    a.cq.wait(1, deadline(), "read").expect("read completion");
    assert!(a.mr.as_slice()[100_000..100_100].iter().all(|&x| x == 0x5A));
}

#[test]
#[ignore = "needs RDMA verbs; runs in the Soft-RoCE VM (scripts/softroce-vm test)"]
fn dead_peer_is_an_error_within_seconds() {
    let (ctx, port, gid) = device();
    let (a, b, _pd) = connected_pair(&ctx, port, gid, 4096);
    drop(b);
    let t0 = Instant::now();
    a.qp.post(SendOp::Send, &a.mr, 0, 64, 9).expect("send");
    let e =
        a.cq.wait(1, Instant::now() + Duration::from_secs(30), "send to a dead peer")
            .unwrap_err()
            .to_string();
    assert!(t0.elapsed() < Duration::from_secs(15), "took {:?}", t0.elapsed());
    assert!(e.contains("work request 9 completed with"), "{e}");
}

#[test]
#[ignore = "needs RDMA verbs; runs in the Soft-RoCE VM (scripts/softroce-vm test)"]
fn bad_gid_index_and_port_are_named() {
    let (ctx, _, _) = device();
    let e = ctx.query_gid(1, 4000).unwrap_err().to_string();
    assert!(e.contains("ibv_query_gid failed on") && e.contains("-x N"), "{e}");
    let e = ctx.query_port(9).unwrap_err().to_string();
    assert!(e.contains("ibv_query_port failed on"), "{e}");
}
