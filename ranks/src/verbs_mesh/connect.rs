//! Connecting the mesh: local setup (device, port, queue pairs, inbox), one MPI allgather of
//! endpoint records, a consistency check across ranks, then every queue pair to RTS.

use std::time::Instant;

use super::*;
use crate::wire::{ConnectRecord, Record};

/// A peer's queue pairs, one per lane (in INIT, each lane's receives posted), and regions.
type PendingPeer = (Vec<QueuePair<crate::verbs::Init>>, Regions);

/// What one rank set up locally, before connecting.
struct LocalSetup {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    choice: Choice,
    mtu_enum: u32,
    mtu: u32,
    ethernet: bool,
    qps: Vec<Option<PendingPeer>>,
    /// This rank's endpoint of each queue pair: peer p's lane j at p x lanes + j.
    endpoints: Vec<QpEndpoint>,
}

fn setup_local(
    world: &World,
    opts: &VerbsOptions,
    (slots, slot): (usize, usize),
    lanes: usize,
) -> Result<LocalSetup, String> {
    let choice = opts.choice(world.local_rank())?;
    let ctx = Context::open(Some(&choice.device)).map_err(|e| e.to_string())?;
    let info = ctx.query_port(choice.port).map_err(|e| e.to_string())?;
    if !info.active {
        return Err(format!(
            "{} port {} is not active (ibv_query_port)",
            choice.device, choice.port
        ));
    }
    let cap = mtu::cap_for(opts.mtu, (&choice.device, choice.port), &info, false)?;
    let info = mtu::lowered(info, cap);
    let gid = ctx
        .query_gid(choice.port, choice.gid.index as i32)
        .map_err(|e| e.to_string())?;
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let n = world.size();
    let cq = ctx.create_cq(cq_depth(n, slots, lanes)).map_err(|e| e.to_string())?;
    let mut qps = Vec::with_capacity(n);
    let mut endpoints = Vec::with_capacity(n * lanes);
    for p in 0..n {
        if p == world.rank() {
            qps.push(None);
            for _ in 0..lanes {
                endpoints.push(QpEndpoint {
                    qpn: 0,
                    psn: 0,
                    lid: 0,
                    gid,
                    mtu: info.mtu_enum,
                    addr: 0,
                    rkey: 0,
                });
            }
            continue;
        }
        let regions = peer_regions(&pd, (slots, slot), false)?;
        let mut lane_qps = Vec::with_capacity(lanes);
        for lane in 0..lanes {
            // The QP allows remote writes (credits, one-sided writes) and reads (one-sided reads);
            // what a peer may touch is limited by each memory region's own access.
            let qp = pd
                .create_rc_qp(&cq, &cq, peer_depth(slots, lanes), MAX_INLINE)
                .and_then(|q| q.into_init(choice.port, Access::REMOTE_READ_WRITE))
                .map_err(|e| e.to_string())?;
            post_lane_recvs(&qp, &regions, p, (lane, lanes), (slots, slot))?;
            let psn = ((world.rank() as u32).wrapping_mul(7919)
                ^ (p as u32).wrapping_mul(104_729)
                ^ (lane as u32).wrapping_mul(15_485_863))
                & 0x00ff_ffff;
            endpoints.push(QpEndpoint {
                qpn: qp.qpn(),
                psn,
                lid: info.lid,
                gid,
                mtu: info.mtu_enum,
                addr: regions.inbox.addr(),
                rkey: regions.inbox.rkey(),
            });
            lane_qps.push(qp);
        }
        qps.push(Some((lane_qps, regions)));
    }
    Ok(LocalSetup {
        ctx,
        pd,
        cq,
        choice,
        mtu_enum: info.mtu_enum,
        mtu: info.active_mtu,
        ethernet: info.ethernet,
        qps,
        endpoints,
    })
}

/// Completion queue entries for a mesh of `n` ranks: every slot each way and a credit per peer,
/// and room for each lane's stray completions.
fn cq_depth(n: usize, slots: usize, lanes: usize) -> i32 {
    ((n.saturating_sub(1)) * (3 * slots + 8 * lanes)).max(256) as i32
}

/// Work requests per queue of one lane of a mesh queue pair: every slot the lane carries each way
/// (two work requests a fragment on iWARP), and room for credits.
fn peer_depth(slots: usize, lanes: usize) -> u32 {
    (2 * slots.div_ceil(lanes.max(1)) + 8) as u32
}

/// A peer's regions (send slots, inbox, credit source); for iWARP (`iwarp`) also the notice
/// regions, on which the receives are posted instead.
fn peer_regions(pd: &ProtectionDomain, (slots, slot): (usize, usize), iwarp: bool) -> Result<Regions, String> {
    let send_mr = pd
        .register(slots * slot, Access::default())
        .map_err(|e| e.to_string())?;
    // The inbox: slots the peer writes fragments into, then its credit word (8 bytes).
    let inbox = pd
        .register(slots * slot + 8, Access::REMOTE_WRITE)
        .map_err(|e| e.to_string())?;
    let credit_src = pd.register(8, Access::default()).map_err(|e| e.to_string())?;
    let notices = if iwarp {
        let recv = pd
            .register(slots * NOTICE, Access::LOCAL_WRITE)
            .map_err(|e| e.to_string())?;
        let send = pd
            .register(slots * NOTICE, Access::default())
            .map_err(|e| e.to_string())?;
        Some(Notices { recv, send })
    } else {
        None
    };
    Ok(Regions {
        send_mr,
        inbox,
        credit_src,
        notices,
    })
}

/// Post on `qp`, lane `lane` of `lanes` to peer `p`, the receive of every inbox slot it carries
/// (slots lane, lane + lanes, ...), in slot order.
fn post_lane_recvs(
    qp: &QueuePair<Init>,
    r: &Regions,
    p: usize,
    (lane, lanes): (usize, usize),
    (slots, slot): (usize, usize),
) -> Result<(), String> {
    for s in (lane..slots).step_by(lanes.max(1)) {
        match &r.notices {
            Some(n) => qp.post_recv(&n.recv, s * NOTICE, NOTICE, wr_id(p, WrKind::Recv, s)),
            None => qp.post_recv(&r.inbox, s * slot, slot, wr_id(p, WrKind::Recv, s)),
        }
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Queue pairs per peer as every rank has it: one MPI allgather, and an error naming the ranks
/// that differ from rank 0 (a job whose ranks disagree would wait forever for lanes never made).
/// Capped at what the job's size allows ([`max_lanes`]), the same on every rank.
fn agree_lanes(world: &World, lanes: usize) -> Result<usize, VerbsMeshError> {
    let mine = lanes.clamp(1, 255) as u8;
    let all = world.all_gather_bytes(&[mine], "agreeing on queue pairs per peer");
    let odd: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(_, &l)| l != all[0])
        .map(|(r, l)| format!("rank {r} ({}) {l}", world.hosts()[r]))
        .collect();
    if !odd.is_empty() {
        return Err(VerbsMeshError::Inconsistent(format!(
            "queue pairs per peer differ between ranks: rank 0 ({}) {}, {}; give every rank the same -q \
             (or NCCL_IB_QPS_PER_CONNECTION)",
            world.hosts()[0],
            all[0],
            odd.join(", ")
        )));
    }
    Ok(usize::from(all[0]).min(max_lanes(world.size())))
}

/// Connect every pair of ranks over RDMA RC queue pairs. Every rank takes part in the MPI exchanges
/// even when its own setup failed, so one failure ends the job everywhere instead of hanging it.
/// Its waits are MPI steps, each bounded by the MPI watchdog.
pub fn connect(world: &World, opts: &VerbsOptions) -> Result<VerbsMesh, VerbsMeshError> {
    if opts.rdma_cm {
        return connect_cm(world, opts);
    }
    let (rank, n, host) = (world.rank(), world.size(), world.host().to_string());
    let lanes = agree_lanes(world, opts.lanes)?;
    let (slots, slot) = staging(n, lanes);
    let local = setup_local(world, opts, (slots, slot), lanes);
    let records = exchange_records(world, local.as_ref().ok().map(|l| &l.choice));
    let remote = exchange_endpoints(world, local.as_ref().ok(), lanes);
    crate::postmortem::enter("connect");
    let local = local.map_err(|msg| VerbsMeshError::Setup {
        rank,
        host: host.clone(),
        msg,
    })?;
    check_records(world, records)?;
    let (peers, first_err) = connect_peers(
        world,
        local.qps,
        (&local.endpoints, &remote),
        (slots, slot, lanes),
        &local.choice,
        (local.mtu_enum, local.ethernet, opts.qos),
    );
    // Every rank votes: all connected (and all receives posted) before anyone sends, and a failure
    // anywhere is a failure everywhere.
    let all = world.all_ok(first_err.is_none(), "RDMA mesh connected");
    if let Some(e) = first_err {
        return Err(e);
    }
    if !all {
        return Err(VerbsMeshError::PeersFailed {
            rank,
            host,
            failed: "some".into(),
        });
    }
    // The path MTU of each pair is its smaller end's.
    let path_mtus: Vec<u32> = (0..n)
        .filter(|&p| p != rank)
        .filter_map(|p| remote[p].as_ref())
        .map(|remote| path_mtu_of(local.mtu_enum, remote.mtu))
        .collect();
    Ok(assemble(
        world,
        opts,
        Connected {
            pd: local.pd,
            cq: local.cq,
            ctx: local.ctx,
            choice: local.choice,
            peers,
            mtu: local.mtu,
            path_mtus,
            cm: None,
            iwarp: false,
        },
        (slots, slot, lanes),
    ))
}

/// The path MTU in bytes of a pair whose ends' active MTUs are `mine` and `theirs` (IBV_MTU_*
/// enums): its smaller end's.
fn path_mtu_of(mine: u32, theirs: u32) -> u32 {
    128u32 << mine.min(theirs).clamp(1, 5)
}

/// What either way of connecting (by hand or through the connection manager) ends with.
struct Connected {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    ctx: Context,
    choice: Choice,
    peers: Vec<Option<Peer>>,
    /// This end's active MTU in bytes, and each connected pair's path MTU.
    mtu: u32,
    path_mtus: Vec<u32>,
    cm: Option<cm_link::CmMesh>,
    iwarp: bool,
}

/// The mesh made of what connecting left: the range of path MTUs, the inline data every queue
/// pair was granted, and every test setting at its default.
fn assemble(
    world: &World,
    opts: &VerbsOptions,
    c: Connected,
    (slots, slot, lanes): (usize, usize, usize),
) -> VerbsMesh {
    let path_mtu = (
        c.path_mtus.iter().copied().min().unwrap_or(c.mtu),
        c.path_mtus.iter().copied().max().unwrap_or(c.mtu),
    );
    // What every queue pair was granted (all are created alike; a device may grant less than asked).
    let max_inline = c.peers.iter().flatten().map(|p| p.qp.max_inline()).min().unwrap_or(0);
    VerbsMesh {
        pd: c.pd,
        rank: world.rank(),
        size: world.size(),
        hosts: world.hosts().to_vec(),
        peers: c.peers,
        direct: direct::Direct::default(),
        cq: c.cq,
        _ctx: c.ctx,
        slots,
        slot,
        choice: c.choice,
        qos: opts.qos,
        mtu: c.mtu,
        path_mtu,
        mtu_cap: opts.mtu.and_then(mtu::enum_of),
        max_inline,
        use_send: false,
        window_mem: None,
        patient: false,
        test_qps: 1,
        cm: c.cm,
        iwarp: c.iwarp,
        lanes,
    }
}

/// What a rank sets up before connecting through the connection manager.
struct CmSetup {
    cm: cm_link::CmLocal,
    choice: Choice,
    info: crate::verbs::PortInfo,
    pd: ProtectionDomain,
    cq: CompletionQueue,
}

fn setup_cm(world: &World, opts: &VerbsOptions, lanes: usize) -> Result<CmSetup, String> {
    let n = world.size();
    let (slots, _) = staging(n, lanes);
    let choice = opts.choice(world.local_rank())?;
    let cm = cm_link::listen(&choice, n, opts.qos, &opts.sysfs_root)?;
    let info = cm.ctx.query_port(choice.port).map_err(|e| e.to_string())?;
    if !info.active {
        return Err(format!(
            "{} port {} is not active (ibv_query_port)",
            choice.device, choice.port
        ));
    }
    // The connection manager sets the path MTU from the route: -m is refused below it.
    mtu::cap_for(opts.mtu, (&choice.device, choice.port), &info, true)?;
    let pd = cm.ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = cm.ctx.create_cq(cq_depth(n, slots, lanes)).map_err(|e| e.to_string())?;
    Ok(CmSetup {
        cm,
        choice,
        info,
        pd,
        cq,
    })
}

/// [`connect`] through the connection manager (`--rdma-cm`): listeners' addresses over MPI, then
/// a connection to every peer, each carrying the inbox the peer writes to. Every rank still takes
/// part in every MPI step and in the final vote, so one failure ends the job everywhere.
fn connect_cm(world: &World, opts: &VerbsOptions) -> Result<VerbsMesh, VerbsMeshError> {
    let (rank, n, host) = (world.rank(), world.size(), world.host().to_string());
    let lanes = agree_lanes(world, opts.lanes)?;
    let (slots, slot) = staging(n, lanes);
    let local = setup_cm(world, opts, lanes);
    let records = exchange_records(world, local.as_ref().ok().map(|l| &l.choice));
    let addrs = cm_link::exchange_addrs(world, local.as_ref().ok().map(|l| &l.cm));
    crate::postmortem::enter("connect");
    let setup_err = |msg: String| VerbsMeshError::Setup {
        rank,
        host: host.clone(),
        msg,
    };
    let local = local.map_err(setup_err)?;
    check_records(world, records)?;
    let CmSetup {
        cm: cm_link::CmLocal { mut cm, ctx },
        choice,
        info,
        pd,
        cq,
    } = local;
    cm.set_addrs(addrs);
    // Every peer's regions first: a lane's request may come before lane 0's, and each lane posts
    // its receives on the same inbox. A failure here still goes through the vote below, so the
    // other ranks learn of it instead of waiting for connections that never come.
    let regions: Result<Vec<Option<Regions>>, String> = (0..n)
        .map(|p| {
            (p != rank)
                .then(|| peer_regions(&pd, (slots, slot), choice.iwarp))
                .transpose()
        })
        .collect();
    let deadline = Instant::now() + world.mpi_timeout();
    let connected = match &regions {
        Ok(regions) => {
            let mut make = |p: usize, lane: usize, id: &crate::verbs::CmId| {
                let r = regions[p].as_ref().ok_or("no regions for a peer")?;
                let qp = id
                    .create_qp(&pd, &cq, peer_depth(slots, lanes), MAX_INLINE, true)
                    .map_err(|e| e.to_string())?;
                post_lane_recvs(&qp, r, p, (lane, lanes), (slots, slot))?;
                let hello = cm_link::CmHello {
                    kind: 0,
                    lane: lane as u8,
                    rank: rank as u32,
                    addr: r.inbox.addr(),
                    rkey: r.inbox.rkey(),
                    mtu: info.mtu_enum as u8,
                    size: n as u32,
                };
                Ok((qp, hello))
            };
            cm.connect_mesh(rank, world.hosts(), lanes, deadline, &mut make)
        }
        Err(e) => Err(e.clone()),
    };
    let all = world.all_ok(connected.is_ok(), "RDMA mesh connected (rdma_cm)");
    let connected = connected.map_err(setup_err)?;
    let regions = regions.map_err(setup_err)?;
    if !all {
        return Err(VerbsMeshError::PeersFailed {
            rank,
            host,
            failed: "some".into(),
        });
    }
    let mut peers = Vec::with_capacity(n);
    let mut path_mtus = Vec::new();
    for (c, r) in connected.into_iter().zip(regions) {
        peers.push(c.zip(r).map(|(qps, r)| {
            // Every lane's record names the same inbox and MTU.
            let theirs = qps[0].1;
            path_mtus.push(path_mtu_of(info.mtu_enum, u32::from(theirs.mtu)));
            Peer::new(
                qps.into_iter().map(|(qp, _)| qp).collect(),
                r,
                (theirs.addr, theirs.rkey),
                (slots, slot),
            )
        }));
    }
    let iwarp = choice.iwarp;
    Ok(assemble(
        world,
        opts,
        Connected {
            pd,
            cq,
            ctx,
            choice,
            peers,
            mtu: info.active_mtu,
            path_mtus,
            cm: Some(cm),
            iwarp,
        },
        (slots, slot, lanes),
    ))
}

/// One MPI allgather of every rank's [`ConnectRecord`] (a rank whose setup failed sends an empty
/// one); None for a record that does not decode.
fn exchange_records(world: &World, choice: Option<&Choice>) -> Vec<Option<ConnectRecord>> {
    let mine = ConnectRecord {
        summary: choice.map(|c| c.gid_summary()),
    };
    let all = world.all_gather_bytes(&mine.to_bytes(), "exchanging RDMA device summaries");
    all.chunks(ConnectRecord::LEN).map(ConnectRecord::from_bytes).collect()
}

/// Each peer's endpoints for this rank (one per lane), by an all-to-all: this rank sends peer p
/// only the endpoints of its queue pairs to p (zeros where its setup failed), so a rank handles
/// O(N) bytes. Peer p's lane j is at p x lanes + j.
fn exchange_endpoints(world: &World, local: Option<&LocalSetup>, lanes: usize) -> Vec<Option<QpEndpoint>> {
    let n = world.size();
    let mut out = vec![0u8; n * lanes * QpEndpoint::LEN];
    if let Some(l) = local {
        for (c, e) in l.endpoints.iter().enumerate().take(n * lanes) {
            let b = e.to_bytes();
            out[c * QpEndpoint::LEN..c * QpEndpoint::LEN + b.len()].copy_from_slice(&b);
        }
    }
    let got = world.all_to_all_bytes(&out, "exchanging RDMA endpoints");
    got.chunks(QpEndpoint::LEN).map(QpEndpoint::from_bytes).collect()
}

/// Every rank set up, and all chose GIDs that can talk to each other.
fn check_records(world: &World, records: Vec<Option<ConnectRecord>>) -> Result<(), VerbsMeshError> {
    let failed: Vec<String> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.as_ref().and_then(|r| r.summary.as_ref()).is_none())
        .map(|(r, _)| format!("{r} ({})", world.hosts()[r]))
        .collect();
    if !failed.is_empty() {
        return Err(VerbsMeshError::PeersFailed {
            rank: world.rank(),
            host: world.host().to_string(),
            failed: failed.join(", "),
        });
    }
    let summaries: Vec<(usize, String, GidSummary)> = records
        .into_iter()
        .enumerate()
        .filter_map(|(r, rec)| Some((r, world.hosts()[r].clone(), rec?.summary?)))
        .collect();
    devices::check_consistent(&summaries).map_err(VerbsMeshError::Inconsistent)
}

/// Move every queue pair to RTS against its peer's endpoint; the first failure is returned
/// beside the peers (this rank still votes, so the others learn of it).
fn connect_peers(
    world: &World,
    qps: Vec<Option<PendingPeer>>,
    (mine, remote): (&[QpEndpoint], &[Option<QpEndpoint>]),
    (slots, slot, lanes): (usize, usize, usize),
    choice: &Choice,
    (mtu_enum, ethernet, qos): (u32, bool, crate::verbs::Qos),
) -> (Vec<Option<Peer>>, Option<VerbsMeshError>) {
    let rank = world.rank();
    let setup_err = |msg: String| VerbsMeshError::Setup {
        rank,
        host: world.host().to_string(),
        msg,
    };
    let grh = ethernet.then_some(choice.gid.index as u8);
    let mut peers = Vec::with_capacity(qps.len());
    let mut first_err = None;
    for (p, q) in qps.into_iter().enumerate() {
        let Some((lane_qps, regions)) = q else {
            peers.push(None);
            continue;
        };
        let mut ready = Vec::with_capacity(lanes);
        let mut inbox = (0, 0);
        for (lane, qp) in lane_qps.into_iter().enumerate() {
            let c = p * lanes + lane;
            let (Some(Some(remote)), Some(mine)) = (remote.get(c), mine.get(c)) else {
                first_err.get_or_insert_with(|| setup_err("malformed endpoint record".into()));
                break;
            };
            inbox = (remote.addr, remote.rkey);
            let path_mtu = mtu_enum.min(remote.mtu);
            // Several lanes: queue pair k (from 1) carries flow label k, as a pairwise test's -q
            // queue pairs do, so each has a UDP source port of its own on RoCE v2 (0xc000 + k on
            // rxe and mlx5) and so, through ECMP, a path of its own.
            let qos = if lanes > 1 {
                crate::verbs::Qos {
                    flow_label: lane as u32 + 1,
                    ..qos
                }
            } else {
                qos
            };
            match qp
                .into_rtr(remote, choice.port, path_mtu, grh, qos)
                .and_then(|q| q.into_rts(mine.psn))
            {
                Ok(qp) => ready.push(qp),
                Err(e) => {
                    let which = if lanes > 1 {
                        format!(" (queue pair {} of {lanes})", lane + 1)
                    } else {
                        String::new()
                    };
                    first_err.get_or_insert_with(|| {
                        setup_err(format!("connecting to rank {p} ({}){which}: {e}", world.hosts()[p]))
                    });
                    break;
                }
            }
        }
        if ready.len() == lanes {
            let mut peer = Peer::new(ready, regions, inbox, (slots, slot));
            peer.gid = remote.get(p * lanes).and_then(Option::as_ref).map(|r| r.gid);
            peers.push(Some(peer));
        } else {
            peers.push(None);
        }
    }
    (peers, first_err)
}
