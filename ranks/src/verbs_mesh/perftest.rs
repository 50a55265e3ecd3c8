//! perftest-style measurements on queue pairs of their own (test links): one-sided write and
//! read bandwidth, SEND bandwidth between registered windows, and the latency ping-pongs.

use std::collections::VecDeque;

use super::*;
use crate::wire::{Record, WindowKey};

mod latency;

/// Send requests per completion in the pairwise bandwidth tests, perftest's default (--cq-mod).
const CQ_MODERATION: u64 = 100;

/// Spin loops read the clock (for their deadline) once per this many empty polls.
const CLOCK_EVERY: u32 = 64;

/// CQ moderation on a test link's send queue: which posts are signalled (every
/// `min(window, CQ_MODERATION)`th, and the last), and how many requests each completion retires
/// (completions come back in post order on an RC send queue). The window is at least the
/// interval, so a full window always holds a signalled request.
struct Moderation {
    every: u64,
    open: u64,
    batches: VecDeque<u64>,
}

impl Moderation {
    fn new(window: usize) -> Self {
        Moderation {
            every: (window as u64).clamp(1, CQ_MODERATION),
            open: 0,
            batches: VecDeque::new(),
        }
    }
    /// Whether the next post is signalled; `last` for the run's final post.
    fn next(&mut self, last: bool) -> bool {
        self.open += 1;
        if self.open == self.every || last {
            self.batches.push_back(self.open);
            self.open = 0;
            return true;
        }
        false
    }
    /// Requests retired by the next completion.
    fn retired(&mut self) -> u64 {
        self.batches.pop_front().unwrap_or(0)
    }
}

/// The receive side of a SEND test on a test link: receives posted into `window`, `total` in all.
struct Receives<'a> {
    window: &'a Window,
    total: u64,
    posted: u64,
    done: u64,
}

/// A queue pair outside the mesh for one measurement, with its own completion queue (declared
/// after the queue pair: dropped after it).
pub(super) struct TestLink {
    pub(super) qp: QueuePair<Rts>,
    pub(super) cq: CompletionQueue,
}

/// A window's address and rkey as 12 bytes for the peer.
fn key_of(r: &dyn Registered) -> [u8; 12] {
    WindowKey {
        addr: r.addr(),
        rkey: r.rkey(),
    }
    .to_array()
}

fn unkey(key: &[u8; 12]) -> (u64, u32) {
    let k = WindowKey::from_array(key);
    (k.addr, k.rkey)
}

/// A one-sided window: host memory (filled with a pattern) or foreign (GPU) memory.
pub(super) enum Window {
    Host(MemoryRegion),
    Foreign(ForeignRegion),
}

impl Window {
    fn reg(&self) -> &dyn Registered {
        match self {
            Window::Host(m) => m,
            Window::Foreign(f) => f,
        }
    }
}

/// One queue pair's share of a bandwidth loop: what it posted and retired, its moderation, its
/// completion times and (a SEND test's receive side) its receives.
struct Lane<'a> {
    link: &'a TestLink,
    posted: u64,
    done: u64,
    moderation: Moderation,
    completions: Vec<f64>,
    recvs: Option<Receives<'a>>,
}

impl Lane<'_> {
    fn busy(&self, count: u64) -> bool {
        self.done < count || self.recvs.as_ref().is_some_and(|r| r.done < r.total)
    }
}

/// Every queue pair's completions in one time-ordered list, and each one's apart when there
/// are several.
fn result_of(per_qp: Vec<Vec<f64>>) -> OneSidedResult {
    if per_qp.len() == 1 {
        return OneSidedResult {
            completions: per_qp.into_iter().next().unwrap_or_default(),
            ..Default::default()
        };
    }
    let mut completions: Vec<f64> = per_qp.iter().flatten().copied().collect();
    completions.sort_by(f64::total_cmp);
    OneSidedResult {
        completions,
        per_qp,
        ..Default::default()
    }
}

impl VerbsMesh {
    pub(super) fn one_sided_in(
        &mut self,
        peer: usize,
        bytes: usize,
        role: OneSidedRole,
        deadline: Instant,
        reg: &mut dyn FnMut(usize, Access) -> Result<Window, VerbsError>,
    ) -> Result<OneSidedResult, TransportError> {
        let remote = Access::REMOTE_READ_WRITE;
        let local_only = Access::LOCAL_WRITE;
        match role {
            OneSidedRole::Initiator {
                op: OneSidedOp::Send,
                count,
                window,
            } => self.send_stream(peer, bytes, (count, 0), window, deadline, reg),
            OneSidedRole::Receiver { count, window } => {
                self.send_stream(peer, bytes, (0, count), window, deadline, reg)
            }
            OneSidedRole::Both {
                op: OneSidedOp::Send,
                count,
                window,
            } => self.send_stream(peer, bytes, (count, count), window, deadline, reg),
            OneSidedRole::SendPingPong { count, leader } => {
                self.send_ping_pong(peer, bytes, count, leader, deadline, reg)
            }
            OneSidedRole::Target => {
                // The window the initiator writes into or reads from (through every queue pair
                // of the test).
                let links = self.test_links(peer, 2, deadline, &mut |_| Ok(()))?;
                let mr = reg(bytes, remote).map_err(|e| self.verbs_err(e))?;
                self.exchange(&mut [Op::send(peer, &key_of(mr.reg()))], deadline)?;
                let mut done = [0u8; 8];
                // The target has nothing to do until the initiator is done, and on a software
                // RDMA device (rxe) a spinning target takes the CPU the device's kernel work
                // needs; perftest's passive side sleeps in a socket read the same way.
                self.patient = true;
                let r = self.exchange(&mut [Op::recv(peer, &mut done)], deadline);
                self.patient = false;
                r?;
                drop(links);
                Ok(OneSidedResult::default())
            }
            OneSidedRole::Initiator { op, count, window } => {
                let window = window.clamp(1, MAX_TEST_DEPTH);
                let links = self.test_links(peer, window as u32 + 1, deadline, &mut |_| Ok(()))?;
                let mut key = [0u8; 12];
                self.exchange(&mut [Op::recv(peer, &mut key)], deadline)?;
                let local = self.source(reg, bytes, self.sink_access(op, local_only))?;
                let per_qp = self.post_loop(&links, peer, op, &key, &local, bytes, count, window, None, deadline)?;
                self.exchange(&mut [Op::send(peer, &[0u8; 8])], deadline)?;
                Ok(result_of(per_qp))
            }
            OneSidedRole::Both { op, count, window } => {
                let window = window.clamp(1, MAX_TEST_DEPTH);
                let links = self.test_links(peer, window as u32 + 1, deadline, &mut |_| Ok(()))?;
                let mine = reg(bytes, remote).map_err(|e| self.verbs_err(e))?;
                let theirs = self.swap(peer, key_of(mine.reg()), deadline)?;
                let local = self.source(reg, bytes, self.sink_access(op, local_only))?;
                let per_qp = self.post_loop(&links, peer, op, &theirs, &local, bytes, count, window, None, deadline)?;
                // Neither side leaves while the other may still write into or read its window.
                self.swap(peer, [0u8; 12], deadline)?;
                drop(mine);
                Ok(result_of(per_qp))
            }
            OneSidedRole::PingPong { count, leader } => self.ping_pong(peer, bytes.max(1), count, leader, deadline),
        }
    }

    /// The access an initiator's own window needs: a read's sink on iWARP must grant remote
    /// write (the read response is placed as a tagged write), everywhere else local write only.
    fn sink_access(&self, op: OneSidedOp, local_only: Access) -> Access {
        if self.iwarp && op == OneSidedOp::Read {
            Access::REMOTE_WRITE
        } else {
            local_only
        }
    }

    /// The initiator's source buffer: host memory gets perftest's byte pattern.
    fn source(
        &self,
        reg: &mut dyn FnMut(usize, Access) -> Result<Window, VerbsError>,
        bytes: usize,
        access: Access,
    ) -> Result<Window, TransportError> {
        let mut local = reg(bytes, access).map_err(|e| self.verbs_err(e))?;
        if let Window::Host(local) = &mut local {
            for (i, x) in local.as_mut_slice().iter_mut().enumerate() {
                *x = i as u8;
            }
        }
        Ok(local)
    }

    /// Send `mine` to `peer` while receiving its 12 bytes.
    fn swap(&mut self, peer: usize, mine: [u8; 12], deadline: Instant) -> Result<[u8; 12], TransportError> {
        let mut theirs = [0u8; 12];
        self.exchange(&mut [Op::send(peer, &mine), Op::recv(peer, &mut theirs)], deadline)?;
        Ok(theirs)
    }

    /// The bandwidth loop on a test's queue pairs, as perftest's: each queue pair posts `count`
    /// operations of `bytes` from `local` (an RDMA write or read into or from the window `key`
    /// names, or a SEND), at most `window` in flight and one in [`CQ_MODERATION`] signalled;
    /// meanwhile, with `recvs` (the receive window, the receives in all per queue pair, and
    /// those already posted on each), repost receives into the window as they complete until
    /// all its messages are in. Returns each queue pair's send completion times in seconds since
    /// the first post.
    #[allow(clippy::too_many_arguments)]
    fn post_loop(
        &self,
        links: &[TestLink],
        peer: usize,
        op: OneSidedOp,
        key: &[u8; 12],
        local: &Window,
        bytes: usize,
        count: u64,
        window: usize,
        recvs: Option<(&Window, u64, u64)>,
        deadline: Instant,
    ) -> Result<Vec<Vec<f64>>, TransportError> {
        let (remote_addr, rkey) = unkey(key);
        let sop = match op {
            OneSidedOp::Write => SendOp::Write { remote_addr, rkey },
            OneSidedOp::Read => SendOp::Read { remote_addr, rkey },
            OneSidedOp::Send => SendOp::Send,
        };
        let mut lanes: Vec<Lane<'_>> = links
            .iter()
            .map(|link| Lane {
                link,
                posted: 0,
                done: 0,
                moderation: Moderation::new(window),
                completions: Vec::with_capacity(count.min(10_000_000) as usize),
                recvs: recvs.and_then(|(window, total, posted)| {
                    (total > 0).then_some(Receives {
                        window,
                        total,
                        posted,
                        done: 0,
                    })
                }),
            })
            .collect();
        let mut comps: Vec<Completion> = Vec::with_capacity(32);
        let t0 = Instant::now();
        // The deadline bounds how long we wait without any completion, not the whole run.
        let idle_limit = deadline.saturating_duration_since(t0);
        let mut last_progress = t0;
        // Empty polls since the clock was last read: the deadline is checked every CLOCK_EVERY,
        // so a spin costs one poll, as perftest's does (a clock read per poll delays noticing a
        // completion, measurably so in a read latency under emulation).
        let mut empty = 0u32;
        // The lane served first turns each pass: a fixed order would let queue pair 0 post (and
        // so reach the wire) first every time, a bias of the loop that -q's per-path figures
        // would show as a slower last path.
        let mut first = 0usize;
        while lanes.iter().any(|l| l.busy(count)) {
            let mut progressed = false;
            let n_lanes = lanes.len();
            for j in 0..n_lanes {
                let q = (first + j) % n_lanes;
                let lane = &mut lanes[q];
                while lane.posted < count && lane.posted - lane.done < window as u64 {
                    let signaled = lane.moderation.next(lane.posted + 1 == count);
                    lane.link
                        .qp
                        .post_flagged(sop, local.reg(), 0, bytes, wr_id(peer, WrKind::OneSided, q), signaled)
                        .map_err(|e| self.verbs_err(e))?;
                    lane.posted += 1;
                }
                comps.clear();
                lane.link.cq.poll(32, &mut comps).map_err(|e| self.verbs_err(e))?;
                if comps.is_empty() {
                    continue;
                }
                progressed = true;
                let now = Instant::now();
                last_progress = now;
                let at = now.duration_since(t0).as_secs_f64();
                for c in &comps {
                    match lane.recvs.as_mut() {
                        Some(r) if decode(c.wr_id).1 == Some(WrKind::Recv) => {
                            r.done += 1;
                            if r.posted < r.total {
                                lane.link
                                    .qp
                                    .post_recv(r.window.reg(), 0, bytes, c.wr_id)
                                    .map_err(|e| self.verbs_err(e))?;
                                r.posted += 1;
                            }
                        }
                        _ => {
                            let retired = lane.moderation.retired();
                            lane.done += retired;
                            lane.completions.extend(std::iter::repeat_n(at, retired as usize));
                        }
                    }
                }
            }
            first = (first + 1) % n_lanes.max(1);
            if progressed {
                continue;
            }
            empty = empty.wrapping_add(1);
            if empty.is_multiple_of(CLOCK_EVERY) && last_progress.elapsed() >= idle_limit {
                let done: u64 = lanes.iter().map(|l| l.done).sum();
                let received = if lanes.iter().any(|l| l.recvs.is_some()) {
                    let (got, want) = lanes
                        .iter()
                        .filter_map(|l| l.recvs.as_ref())
                        .fold((0, 0), |(a, b), r| (a + r.done, b + r.total));
                    format!(", {got} of {want} received")
                } else {
                    String::new()
                };
                let on = if lanes.len() > 1 {
                    format!(" on {} queue pairs", lanes.len())
                } else {
                    String::new()
                };
                return Err(self.stalled(
                    peer,
                    t0,
                    format!(
                        "RDMA {op:?} completions ({done} of {} done{received}{on})",
                        count * lanes.len() as u64
                    ),
                ));
            }
            std::hint::spin_loop();
        }
        Ok(lanes.into_iter().map(|l| l.completions).collect())
    }

    /// The queue pairs of one bandwidth test to `peer` ([`Rdma::set_test_qps`] of them), each
    /// made by [`Self::test_link`]; with several, queue pair k carries flow label k + 1.
    fn test_links(
        &mut self,
        peer: usize,
        depth: u32,
        deadline: Instant,
        prepare: &mut dyn FnMut(&QueuePair<Init>) -> Result<(), VerbsError>,
    ) -> Result<Vec<TestLink>, TransportError> {
        let n = self.test_qps.max(1);
        (0..n)
            .map(|k| {
                let label = if n > 1 { k as u32 + 1 } else { 0 };
                self.test_link(peer, depth, deadline, prepare, label)
            })
            .collect()
    }

    /// A queue pair of its own to `peer` for one pairwise measurement, as perftest connects one per
    /// test: its send queue is as deep as the test's window (the mesh's queue pairs keep room for
    /// credits), its receive queue holds only the test's receives (never the mesh's inbox
    /// receives), and its completions arrive on their own queue. `prepare` posts receives while the queue pair is in INIT, before the peer can send;
    /// both sides are ready to send when this returns. `flow_label` is what its packets carry (0: the
    /// device's choice).
    pub(super) fn test_link(
        &mut self,
        peer: usize,
        depth: u32,
        deadline: Instant,
        prepare: &mut dyn FnMut(&QueuePair<Init>) -> Result<(), VerbsError>,
        flow_label: u32,
    ) -> Result<TestLink, TransportError> {
        let port = self.choice.port;
        let info = self._ctx.query_port(port).map_err(|e| self.verbs_err(e))?;
        let gid = self
            ._ctx
            .query_gid(port, self.choice.gid.index as i32)
            .map_err(|e| self.verbs_err(e))?;
        let cq = self
            ._ctx
            .create_cq(2 * depth as i32 + 16)
            .map_err(|e| self.verbs_err(e))?;
        if self.cm.is_some() {
            // Through the connection manager (--rdma-cm): it picks the path and moves the queue
            // pair to RTS; the flow label is the device's choice (from the queue pair numbers).
            let host = self.hosts[peer].clone();
            let (rank, pd) = (self.rank, &self.pd);
            let cm = self
                .cm
                .as_mut()
                .ok_or_else(|| TransportError::Setup("rdma_cm".into()))?;
            let mut make = |id: &crate::verbs::CmId| {
                let qp = id
                    .create_qp(pd, &cq, depth, MAX_INLINE, false)
                    .map_err(|e| e.to_string())?;
                prepare(&qp).map_err(|e| e.to_string())?;
                Ok(qp)
            };
            let qp = cm
                .link(rank, peer, &host, info.mtu_enum as u8, deadline, &mut make)
                .map_err(|e| TransportError::Setup(format!("rank {rank} ({}): {e}", self.hosts[rank])))?;
            self.swap(peer, [0u8; 12], deadline)?;
            return Ok(TestLink { qp, cq });
        }
        // Remote write and read allowed on the queue pair; each region still grants only what its
        // test needs.
        let access = Access::REMOTE_READ_WRITE;
        let qp = self
            .pd
            .create_rc_qp_signalling(&cq, &cq, depth, MAX_INLINE, false)
            .and_then(|q| q.into_init(port, access))
            .map_err(|e| self.verbs_err(e))?;
        prepare(&qp).map_err(|e| self.verbs_err(e))?;
        let psn = (qp.qpn().wrapping_mul(2_654_435_761)) & 0x00ff_ffff;
        let mine = QpEndpoint {
            qpn: qp.qpn(),
            psn,
            lid: info.lid,
            gid,
            mtu: info.mtu_enum,
            addr: 0,
            rkey: 0,
        };
        let mut theirs = [0u8; <QpEndpoint as Record>::LEN];
        self.exchange(
            &mut [Op::send(peer, &mine.to_bytes()), Op::recv(peer, &mut theirs)],
            deadline,
        )?;
        let remote = QpEndpoint::from_bytes(&theirs).ok_or_else(|| {
            TransportError::Setup(format!("rank {}: malformed test endpoint from rank {peer}", self.rank))
        })?;
        let grh = info.ethernet.then_some(self.choice.gid.index as u8);
        let qos = crate::verbs::Qos { flow_label, ..self.qos };
        let qp = qp
            .into_rtr(&remote, port, info.mtu_enum.min(remote.mtu), grh, qos)
            .and_then(|q| q.into_rts(psn))
            .map_err(|e| self.verbs_err(e))?;
        // Both ends connected before either sends: a SEND to a queue pair still in INIT is dropped
        // and only retried after the transport timeout.
        self.swap(peer, [0u8; 12], deadline)?;
        Ok(TestLink { qp, cq })
    }

    /// ib_send_bw's loop on a test's queue pairs: each posts `sends` SENDs of `bytes` from a
    /// source window, at most `window` in flight, while `recvs` receives per queue pair land in a
    /// receive window with up to twice `window` posted on each. Returns each queue pair's send
    /// completion times, in seconds since the first post.
    fn send_stream(
        &mut self,
        peer: usize,
        bytes: usize,
        (sends, recvs): (u64, u64),
        window: usize,
        deadline: Instant,
        reg: &mut dyn FnMut(usize, Access) -> Result<Window, VerbsError>,
    ) -> Result<OneSidedResult, TransportError> {
        let window = window.clamp(1, MAX_TEST_DEPTH);
        let local = Access::LOCAL_WRITE;
        let inbox = reg(bytes.max(1), local).map_err(|e| self.verbs_err(e))?;
        let src = self.source(reg, bytes.max(1), local)?;
        // Twice the sender's window of receives posted, as perftest's receive depth exceeds its
        // send depth: a receiver that reposts late then costs no receiver-not-ready retry.
        let posted = 2 * window;
        let first = recvs.min(posted as u64);
        let recv_id = wr_id(peer, WrKind::Recv, 0);
        let links = self.test_links(peer, posted as u32 + 1, deadline, &mut |qp| {
            (0..first).try_for_each(|_| qp.post_recv(inbox.reg(), 0, bytes, recv_id))
        })?;
        let per_qp = self.post_loop(
            &links,
            peer,
            OneSidedOp::Send,
            &[0u8; 12],
            &src,
            bytes,
            sends,
            window,
            Some((&inbox, recvs, first)),
            deadline,
        )?;
        // Neither side tears its queue pair down while the other may still be acknowledging.
        self.swap(peer, [0u8; 12], deadline)?;
        drop(links);
        Ok(result_of(per_qp))
    }

    /// perftest's `Mtu` line: this end's active MTU, or, where peers differ, the path MTUs the
    /// pairs really run at (each pair's smaller end).
    fn mtu_detail(&self) -> String {
        match self.path_mtu {
            (lo, hi) if lo == hi && lo == self.mtu => format!("{}[B]", self.mtu),
            (lo, hi) if lo == hi => format!(
                "{lo}[B] path (this end {}[B]; a pair runs at its smaller end's)",
                self.mtu
            ),
            (lo, hi) => format!(
                "{lo}-{hi}[B] path (this end {}[B]; a pair runs at its smaller end's)",
                self.mtu
            ),
        }
    }

    /// The mesh's own queue pairs, for the header: "3, one per peer", or "12, 4 per peer, each
    /// message striped over them (flow labels 1-4)".
    fn mesh_qps(&self) -> String {
        let peers = self.size.saturating_sub(1);
        if self.lanes > 1 {
            format!(
                "{}, {} per peer, each message striped over them ({})",
                peers * self.lanes,
                self.lanes,
                if self.cm.is_some() {
                    "flow labels the device's: rdma_cm sets the path".to_string()
                } else {
                    format!("flow labels 1-{}", self.lanes)
                }
            )
        } else {
            format!("{peers}, one per peer")
        }
    }

    pub(super) fn details_list(&self) -> Vec<(String, String)> {
        let c = &self.choice;
        let ethernet = c.link_layer == crate::devices::LinkLayer::Ethernet;
        let mut v = vec![
            ("Device".into(), c.device.clone()),
            (
                "Number of qps".into(),
                if self.test_qps > 1 {
                    format!(
                        "{} per bandwidth test ({}), 1 per latency test (besides the mesh's {})",
                        self.test_qps,
                        if self.cm.is_some() {
                            "flow labels the device's, from the queue pair numbers: rdma_cm sets the path".to_string()
                        } else {
                            format!("flow labels 1-{}", self.test_qps)
                        },
                        self.mesh_qps()
                    )
                } else {
                    format!(
                        "1 per test (write, read, send -n; besides the mesh's {})",
                        self.mesh_qps()
                    )
                },
            ),
            (
                "Transport type".into(),
                if self.iwarp { "IW".into() } else { "IB".into() },
            ),
            (
                "Data ex. method".into(),
                if self.cm.is_some() {
                    "rdma_cm (each rank listens on its device's IPv4 address; the manager resolves the route)".into()
                } else {
                    "MPI (GIDs and queue pair numbers in one all-to-all)".into()
                },
            ),
            ("Connection type".into(), "RC".into()),
            (
                "CQ Moderation".into(),
                format!("{CQ_MODERATION} (bandwidth tests; latency tests and the mesh's own traffic: 1)"),
            ),
            ("Mtu".into(), self.mtu_detail()),
            (
                "Link type".into(),
                if ethernet { "Ethernet".into() } else { "IB".into() },
            ),
            (
                "GID index".into(),
                if ethernet { c.gid.index.to_string() } else { "-".into() },
            ),
            ("Max inline data".into(), format!("{}[B]", self.max_inline)),
            (
                "Service level".into(),
                format!(
                    "{}, traffic class {}{}",
                    self.qos.sl,
                    self.qos.traffic_class,
                    if ethernet {
                        format!(" (DSCP {})", self.qos.traffic_class >> 2)
                    } else {
                        String::new()
                    }
                ),
            ),
            (
                "Staging".into(),
                format!(
                    "{} inbox slots of {} KiB per peer, {}, credits by RDMA write",
                    self.slots,
                    self.slot / 1024,
                    if self.iwarp {
                        "RDMA write then an 8-byte SEND notice (iWARP has no immediate data)"
                    } else if self.use_send {
                        "SEND with immediate"
                    } else {
                        "RDMA write with immediate"
                    }
                ),
            ),
        ];
        if self.use_send {
            v.push((
                "Send tests".into(),
                "zero-copy: SEND between registered windows (-D: through the inbox slots)".into(),
            ));
        }
        v
    }
}

#[cfg(test)]
mod tests;
