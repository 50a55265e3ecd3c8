//! Connecting the mesh: local setup (device, port, queue pairs, inbox), one MPI allgather of
//! endpoint records, a consistency check across ranks, then every queue pair to RTS.

use super::*;

/// A peer's queue pair (in INIT, receives posted) and regions: send slots, inbox, credit source.
type PendingPeer = (QueuePair<crate::verbs::Init>, MemoryRegion, MemoryRegion, MemoryRegion);

/// What one rank set up locally, before connecting.
struct Local {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    choice: Choice,
    mtu_enum: u32,
    mtu: u32,
    ethernet: bool,
    qps: Vec<Option<PendingPeer>>,
    endpoints: Vec<Endpoint>,
}

fn setup_local(world: &World, opts: &VerbsOptions, slots: usize) -> Result<Local, String> {
    let devs = devices::discover(&opts.sysfs_root).map_err(|e| e.to_string())?;
    let dev = if opts.devices.is_empty() {
        opts.device.clone()
    } else {
        Some(opts.devices[world.local_rank() % opts.devices.len()].clone())
    };
    let choice = devices::select(&devs, dev.as_deref(), opts.port, opts.gid_index).map_err(|e| e.to_string())?;
    let ctx = Context::open(Some(&choice.device)).map_err(|e| e.to_string())?;
    let info = ctx.query_port(choice.port).map_err(|e| e.to_string())?;
    if !info.active {
        return Err(format!(
            "{} port {} is not active (ibv_query_port)",
            choice.device, choice.port
        ));
    }
    let gid = ctx
        .query_gid(choice.port, choice.gid.index as i32)
        .map_err(|e| e.to_string())?;
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let n = world.size();
    let depth = (2 * slots + 8) as u32;
    let cq = ctx
        .create_cq(((n.saturating_sub(1)) * (3 * slots + 8)).max(256) as i32)
        .map_err(|e| e.to_string())?;
    let mut qps = Vec::with_capacity(n);
    let mut endpoints = Vec::with_capacity(n);
    for p in 0..n {
        if p == world.rank() {
            qps.push(None);
            endpoints.push(Endpoint {
                qpn: 0,
                psn: 0,
                lid: 0,
                gid,
                mtu: info.mtu_enum,
                addr: 0,
                rkey: 0,
            });
            continue;
        }
        // The QP allows remote writes (credits, one-sided writes) and reads (one-sided reads); what a
        // peer may touch is limited by each memory region's own access.
        let qp = pd
            .create_rc_qp(&cq, &cq, depth, MAX_INLINE)
            .and_then(|q| {
                q.into_init(
                    choice.port,
                    Access {
                        remote_write: true,
                        remote_read: true,
                        ..Access::default()
                    },
                )
            })
            .map_err(|e| e.to_string())?;
        let send_mr = pd
            .register(slots * SLOT, Access::default())
            .map_err(|e| e.to_string())?;
        // The inbox: slots the peer writes fragments into, then its credit word (8 bytes).
        let inbox = pd
            .register(
                slots * SLOT + 8,
                Access {
                    remote_write: true,
                    ..Access::default()
                },
            )
            .map_err(|e| e.to_string())?;
        let credit_src = pd.register(8, Access::default()).map_err(|e| e.to_string())?;
        for s in 0..slots {
            qp.post_recv(&inbox, s * SLOT, SLOT, wr_id(p, WrKind::Recv, s))
                .map_err(|e| e.to_string())?;
        }
        let psn = ((world.rank() as u32).wrapping_mul(7919) ^ (p as u32).wrapping_mul(104_729)) & 0x00ff_ffff;
        endpoints.push(Endpoint {
            qpn: qp.qpn(),
            psn,
            lid: info.lid,
            gid,
            mtu: info.mtu_enum,
            addr: inbox.addr(),
            rkey: inbox.rkey(),
        });
        qps.push(Some((qp, send_mr, inbox, credit_src)));
    }
    Ok(Local {
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

const DESC_LEN: usize = 120;

/// Connect every pair of ranks over RDMA RC queue pairs. Every rank takes part in the MPI exchanges
/// even when its own setup failed, so one failure ends the job everywhere instead of hanging it.
/// Its waits are MPI steps, each bounded by the MPI watchdog.
pub fn connect(world: &World, opts: &VerbsOptions) -> Result<VerbsMesh, VerbsMeshError> {
    let (rank, n, host) = (world.rank(), world.size(), world.host().to_string());
    let slots = (STAGING_BUDGET / (2 * SLOT * n.saturating_sub(1).max(1))).clamp(2, 16);
    let local = setup_local(world, opts, slots);
    // Record: ok, ethernet, gid kind, ipv4, description, then one endpoint per peer.
    let rec_len = 4 + DESC_LEN + n * ENDPOINT_BYTES;
    let mut rec = vec![0u8; rec_len];
    if let Ok(l) = &local {
        let s: GidSummary = l.choice.summary();
        rec[0] = 1;
        rec[1] = u8::from(s.ethernet);
        rec[2] = s.kind;
        rec[3] = u8::from(s.ipv4);
        let d = s.describe.as_bytes();
        rec[4..4 + d.len().min(DESC_LEN)].copy_from_slice(&d[..d.len().min(DESC_LEN)]);
        for (p, e) in l.endpoints.iter().enumerate() {
            rec[4 + DESC_LEN + p * ENDPOINT_BYTES..][..ENDPOINT_BYTES].copy_from_slice(&e.to_bytes());
        }
    }
    let all = world.all_gather_bytes(&rec, "exchanging RDMA endpoints");
    let recs: Vec<&[u8]> = all.chunks(rec_len).collect();
    let local = local.map_err(|msg| VerbsMeshError::Setup {
        rank,
        host: host.clone(),
        msg,
    })?;
    let failed: Vec<String> = recs
        .iter()
        .enumerate()
        .filter(|(_, r)| r[0] != 1)
        .map(|(r, _)| format!("{r} ({})", world.hosts()[r]))
        .collect();
    if !failed.is_empty() {
        return Err(VerbsMeshError::PeersFailed {
            rank,
            host,
            failed: failed.join(", "),
        });
    }
    let summaries: Vec<(usize, String, GidSummary)> = recs
        .iter()
        .enumerate()
        .map(|(r, b)| {
            let d = &b[4..4 + DESC_LEN];
            let end = d.iter().position(|&x| x == 0).unwrap_or(DESC_LEN);
            (
                r,
                world.hosts()[r].clone(),
                GidSummary {
                    ethernet: b[1] == 1,
                    kind: b[2],
                    ipv4: b[3] == 1,
                    describe: String::from_utf8_lossy(&d[..end]).into_owned(),
                },
            )
        })
        .collect();
    devices::check_consistent(&summaries).map_err(VerbsMeshError::Inconsistent)?;
    let Local {
        ctx,
        pd,
        cq,
        choice,
        mtu_enum,
        mtu,
        ethernet,
        qps,
        ..
    } = local;
    // What every queue pair was granted (all are created alike; a device may grant less than asked).
    let max_inline = qps.iter().flatten().map(|(qp, ..)| qp.max_inline()).min().unwrap_or(0);
    let setup_err = |msg: String| VerbsMeshError::Setup {
        rank,
        host: host.clone(),
        msg,
    };
    let grh = ethernet.then_some(choice.gid.index as u8);
    let mut peers = Vec::with_capacity(n);
    let mut first_err = None;
    for (p, q) in qps.into_iter().enumerate() {
        let Some((qp, send_mr, inbox, credit_src)) = q else {
            peers.push(None);
            continue;
        };
        let (Some(remote), Some(mine)) = (
            Endpoint::from_bytes(&recs[p][4 + DESC_LEN + rank * ENDPOINT_BYTES..]),
            Endpoint::from_bytes(&recs[rank][4 + DESC_LEN + p * ENDPOINT_BYTES..]),
        ) else {
            first_err.get_or_insert_with(|| setup_err("malformed endpoint record".into()));
            peers.push(None);
            continue;
        };
        let path_mtu = mtu_enum.min(remote.mtu);
        match qp
            .into_rtr(&remote, choice.port, path_mtu, grh)
            .and_then(|q| q.into_rts(mine.psn))
        {
            Ok(qp) => peers.push(Some(Peer {
                qp,
                send_mr,
                inbox,
                credit_src,
                remote_inbox: (remote.addr, remote.rkey),
                remote_credit: (remote.addr + (slots * SLOT) as u64, remote.rkey),
                ledger: Ledger::new(slots),
                inflight: VecDeque::new(),
            })),
            Err(e) => {
                first_err
                    .get_or_insert_with(|| setup_err(format!("connecting to rank {p} ({}): {e}", world.hosts()[p])));
                peers.push(None);
            }
        }
    }
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
    Ok(VerbsMesh {
        pd,
        rank,
        size: n,
        hosts: world.hosts().to_vec(),
        peers,
        direct: direct::Direct::default(),
        cq,
        _ctx: ctx,
        slots,
        choice,
        mtu,
        max_inline,
        use_send: false,
        window_mem: None,
        patient: false,
    })
}
