//! The mesh over RDMA verbs: one RC queue pair per peer, all completions on one polled CQ, and the
//! two-sided operations of [`Transport`] carried as RDMA WRITE-with-immediate into a ring of slots
//! the receiver advertised (its "inbox"), as NCCL's IB transport does: fragment k of the stream to
//! a peer lands in inbox slot k mod slots, and its immediate (the message length) raises a
//! completion on the receiver, which copies the slot out in order. Flow control by credits: the
//! receiver RDMA-writes the count of fragments it has consumed into a word at the end of the
//! sender's inbox, so a sender never overwrites a slot that is still unread and no credit update
//! consumes a receive. The immediate lets mismatched sends and receives be caught as on TCP.
//! Pairwise `--op send` switches the same machinery to SEND-with-immediate (what ib_send_bw
//! measures): receives are posted on the inbox slots in slot order, so fragment k still lands in
//! slot k mod slots.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Instant;

use crate::devices::{self, Choice, GidSummary};
use crate::transport::{
    Capabilities, DirectOp, OneSidedOp, OneSidedResult, OneSidedRole, Op, OpKind, RegionId, Transport, TransportError,
};
use crate::verbs::{
    Access, Completion, CompletionQueue, Context, Endpoint, ForeignPath, ForeignRegion, Init, MemoryRegion, NicMemory,
    ProtectionDomain, QueuePair, Registered, Rts, SendOp, VerbsError, WindowMemory, ENDPOINT_BYTES,
};
use crate::World;

#[path = "verbs_direct.rs"]
mod direct;

/// Bytes per staging slot (and so per fragment on the wire).
pub const SLOT: usize = 256 * 1024;
/// Inline data asked for at queue-pair creation: perftest's default for its latency tests.
pub const MAX_INLINE: u32 = 220;
/// Deepest send window of a pairwise test's own queue pair (perftest's -t goes to 8192 on some
/// devices; rxe and mlx5 take this many).
const MAX_TEST_DEPTH: usize = 1024;
/// Staging memory per rank for all its peers together, which sets the slots per peer (2 to 16).
const STAGING_BUDGET: usize = 128 << 20;

/// How to pick the device.
#[derive(Debug, Clone)]
pub struct VerbsOptions {
    pub device: Option<String>,
    /// One device per local rank (`--devices mlx5_0,mlx5_1`): local rank i uses entry i mod len.
    pub devices: Vec<String>,
    pub port: Option<u8>,
    pub gid_index: Option<u32>,
    pub sysfs_root: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum VerbsMeshError {
    #[error("rank {rank} ({host}): {msg}")]
    Setup { rank: usize, host: String, msg: String },
    #[error("rank {rank} ({host}): ranks {failed} could not set up RDMA (see their messages)")]
    PeersFailed { rank: usize, host: String, failed: String },
    #[error("{0}")]
    Inconsistent(String),
}

const KIND_SEND: u64 = 1;
const KIND_RECV: u64 = 2;
const KIND_CREDIT: u64 = 3;
const KIND_ONESIDED: u64 = 4;

fn wr_id(peer: usize, kind: u64, slot: usize) -> u64 {
    ((peer as u64) << 32) | (kind << 28) | slot as u64
}

fn decode(wr: u64) -> (usize, u64, usize) {
    ((wr >> 32) as usize, (wr >> 28) & 0xf, (wr & 0x0fff_ffff) as usize)
}

struct Peer {
    qp: QueuePair<Rts>,
    send_mr: MemoryRegion,
    /// Where the peer writes our incoming fragments (`slots` slots), then the word where it writes
    /// how many of our fragments it has consumed.
    inbox: MemoryRegion,
    /// Source of our own consumed count, written into the peer's credit word.
    credit_src: MemoryRegion,
    /// The peer's inbox (address, rkey); its credit word sits after its slots.
    remote_inbox: (u64, u32),
    remote_credit: (u64, u32),
    /// Fragments that have arrived from the peer so far (fragment k is in slot k mod slots).
    arrivals: u64,
    free_send: Vec<usize>,
    sent: u64,
    consumed: u64,
    /// The consumed count last written to the peer.
    reported: u64,
    credit_outstanding: bool,
    credit_dirty: bool,
    /// Fragments received and not yet claimed by a posted receive: (slot, bytes, message length).
    arrived: VecDeque<(usize, u32, u32)>,
    /// Sends posted and not completed: op index.
    inflight: VecDeque<usize>,
}

/// Send requests per completion in the pairwise bandwidth tests, perftest's default (--cq-mod).
const CQ_MODERATION: u64 = 100;

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
struct TestLink {
    qp: QueuePair<Rts>,
    cq: CompletionQueue,
}

/// An all-to-all RC mesh.
pub struct VerbsMesh {
    rank: usize,
    size: usize,
    hosts: Vec<String>,
    // Peers (and their queue pairs and regions) are dropped before the CQ and the context.
    peers: Vec<Option<Peer>>,
    /// Zero-copy links and registered regions (GPUDirect RDMA).
    direct: direct::Direct,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    _ctx: Context,
    slots: usize,
    choice: Choice,
    mtu: u32,
    /// Two-sided messages as SEND-with-immediate (pairwise --op send, as ib_send_bw) instead of
    /// RDMA WRITE-with-immediate (the default, and what collectives use).
    use_send: bool,
    /// Inline bytes per work request (as perftest's latency tests: small messages skip a DMA read).
    max_inline: u32,
    /// Where one-sided windows live when not in host memory (`--use-cuda`).
    window_mem: Option<Box<dyn WindowMemory>>,
    /// Sleep instead of spinning when an exchange has waited a while (a one-sided target).
    patient: bool,
}

/// A window's address and rkey as 12 bytes for the peer.
fn key_of(r: &dyn Registered) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..8].copy_from_slice(&r.addr().to_le_bytes());
    key[8..].copy_from_slice(&r.rkey().to_le_bytes());
    key
}

fn unkey(key: &[u8; 12]) -> (u64, u32) {
    let mut a = [0u8; 8];
    let mut k = [0u8; 4];
    a.copy_from_slice(&key[..8]);
    k.copy_from_slice(&key[8..]);
    (u64::from_le_bytes(a), u32::from_le_bytes(k))
}

/// A one-sided window: host memory (filled with a pattern) or foreign (GPU) memory.
enum Window {
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

impl VerbsMesh {
    /// The device, port and GID in use, for headers.
    pub fn describe(&self) -> String {
        format!("{}, path MTU up to {} B", self.choice.describe(), self.mtu)
    }

    fn fail(&self, peer: usize, what: String) -> TransportError {
        TransportError::PeerClosed {
            rank: self.rank,
            host: self.hosts[self.rank].clone(),
            peer,
            peer_host: self.hosts[peer].clone(),
            what,
        }
    }

    fn verbs_err(&self, e: VerbsError) -> TransportError {
        match e {
            VerbsError::Completion {
                wr_id,
                ref status,
                hint,
                ..
            } => {
                let (peer, _, _) = decode(wr_id);
                if peer < self.size && peer != self.rank {
                    return self.fail(peer, format!("RDMA completion {status}{hint}"));
                }
                TransportError::Setup(format!("rank {} ({}): {e}", self.rank, self.hosts[self.rank]))
            }
            e => TransportError::Setup(format!("rank {} ({}): {e}", self.rank, self.hosts[self.rank])),
        }
    }

    /// A completion of the two-sided machinery seen outside `exchange`: a message that arrived
    /// early, or a credit write done. (Sends complete inside the exchange that posted them.)
    fn background_completion(&mut self, p: usize, kind: u64, c: Completion) -> Result<(), TransportError> {
        match kind {
            KIND_RECV => self.arrival(p, &c),
            KIND_CREDIT => {
                let dirty = self.peers[p].as_mut().map(|peer| {
                    peer.credit_outstanding = false;
                    peer.credit_dirty
                });
                if dirty == Some(true) {
                    self.post_credit(p)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A fragment landed in our inbox (its WRITE-with-immediate consumed a posted receive): note
    /// which slot holds it and the message length its immediate carries.
    fn arrival(&mut self, p: usize, c: &Completion) {
        let slots = self.slots as u64;
        if let Some(peer) = self.peers[p].as_mut() {
            let slot = (peer.arrivals % slots) as usize;
            peer.arrivals += 1;
            peer.arrived.push_back((slot, c.byte_len, c.imm.unwrap_or(u32::MAX)));
        }
    }

    /// Copy the oldest fragment that arrived from `p` into `dst` (its length, checked by the
    /// caller), post its slot's receive again and count it consumed.
    fn claim_fragment(&mut self, p: usize, dst: &mut [u8]) -> Result<(), TransportError> {
        let peer = self.peers[p].as_mut().expect("connected peer");
        let Some((slot, _, _)) = peer.arrived.pop_front() else {
            return Ok(());
        };
        dst.copy_from_slice(&peer.inbox.as_slice()[slot * SLOT..slot * SLOT + dst.len()]);
        // Post the slot again: receives are posted in slot order, so fragment k of a SEND lands in
        // slot k mod slots too (a WRITE only takes the immediate).
        let r = peer
            .qp
            .post_recv(&peer.inbox, slot * SLOT, SLOT, wr_id(p, KIND_RECV, slot));
        peer.consumed += 1;
        r.map_err(|e| self.verbs_err(e))
    }

    /// Whether `p` should hear how much of its traffic was consumed: once half the slots are.
    fn credit_due(&self, p: usize) -> bool {
        self.peers[p]
            .as_ref()
            .is_some_and(|x| x.consumed - x.reported >= (self.slots as u64 / 2).max(1))
    }

    /// A one-fragment message of exactly `buf.len()` bytes from `p`, if it has arrived: polls the
    /// completion queue once and never waits.
    fn try_recv_small(
        &mut self,
        p: usize,
        buf: &mut [u8],
        comps: &mut Vec<Completion>,
    ) -> Result<bool, TransportError> {
        self.reap(comps)?;
        let Some((_, len, msg_len)) = self.peers[p].as_ref().and_then(|x| x.arrived.front().copied()) else {
            return Ok(false);
        };
        if msg_len as usize != buf.len() || len as usize != buf.len() {
            return Err(TransportError::LengthMismatch {
                rank: self.rank,
                host: self.hosts[self.rank].clone(),
                peer: p,
                peer_host: self.hosts[p].clone(),
                expected: buf.len(),
                got: u64::from(msg_len),
            });
        }
        self.claim_fragment(p, buf)?;
        if self.credit_due(p) {
            self.post_credit(p)?;
        }
        Ok(true)
    }

    fn post_credit(&mut self, p: usize) -> Result<(), TransportError> {
        let peer = self.peers[p].as_mut().expect("connected peer");
        if peer.credit_outstanding {
            peer.credit_dirty = true;
            return Ok(());
        }
        peer.credit_src.as_mut_slice()[..8].copy_from_slice(&peer.consumed.to_le_bytes());
        peer.reported = peer.consumed;
        let (addr, rkey) = peer.remote_credit;
        let r = peer.qp.post(
            SendOp::Write {
                remote_addr: addr,
                rkey,
            },
            &peer.credit_src,
            0,
            8,
            wr_id(p, KIND_CREDIT, 0),
        );
        peer.credit_outstanding = true;
        peer.credit_dirty = false;
        r.map_err(|e| self.verbs_err(e))
    }
}

/// What a progress loop does after `idle` polls that found nothing: busy-poll like perftest, yield
/// only when idle for long (more ranks than cores), and sleep if `patient` (a one-sided target
/// waiting out the initiator's run).
fn idle_wait(idle: u32, patient: bool) {
    if patient && idle > 1_000 {
        std::thread::sleep(std::time::Duration::from_micros(100));
    } else if idle > 50_000 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// Per-batch progress of one op.
#[derive(Default, Clone)]
struct OpState {
    frags_posted: usize,
    frags_total: usize,
    outstanding: usize,
    progress: usize,
    frags_claimed: usize,
}

fn frags(len: usize) -> usize {
    len.div_ceil(SLOT).max(1)
}

impl Transport for VerbsMesh {
    fn name(&self) -> &'static str {
        "verbs"
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn host_of(&self, rank: usize) -> &str {
        &self.hosts[rank]
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            write: true,
            read: true,
            send: true,
        }
    }

    fn one_sided(
        &mut self,
        peer: usize,
        bytes: usize,
        role: OneSidedRole,
        deadline: Instant,
    ) -> Result<OneSidedResult, TransportError> {
        if peer >= self.size || peer == self.rank {
            return Err(TransportError::BadPeer {
                rank: self.rank,
                peer,
                size: self.size,
            });
        }
        let pd = self.pd.clone();
        let mut foreign = self.window_mem.take();
        let mut reg = |len: usize, access: Access| -> Result<Window, VerbsError> {
            match foreign.as_mut() {
                Some(m) => m.register(&pd, len, access).map(Window::Foreign),
                None => pd.register(len, access).map(Window::Host),
            }
        };
        let result = self.one_sided_in(peer, bytes, role, deadline, &mut reg);
        self.window_mem = foreign;
        result
    }

    fn details(&self) -> Vec<(String, String)> {
        self.details_list()
    }

    fn exchange(&mut self, ops: &mut [Op<'_>], deadline: Instant) -> Result<(), TransportError> {
        self.exchange_ops(ops, deadline)
    }

    fn use_send_opcode(&mut self, on: bool) -> bool {
        self.use_send = on;
        true
    }

    fn register_region(&mut self, mem: Box<dyn NicMemory>) -> Result<(RegionId, ForeignPath), TransportError> {
        self.register_direct(mem)
    }

    fn release_region(&mut self, region: RegionId) {
        self.release_direct(region)
    }

    fn exchange_direct(&mut self, ops: &mut [DirectOp], deadline: Instant) -> Result<(), TransportError> {
        self.exchange_direct_ops(ops, deadline)
    }

    fn use_window_memory(&mut self, mut mem: Box<dyn WindowMemory>) -> Result<ForeignPath, TransportError> {
        let probe = mem
            .register(
                &self.pd,
                2 << 20,
                Access {
                    local_write: true,
                    remote_write: true,
                    remote_read: true,
                },
            )
            .map_err(|e| TransportError::Setup(e.to_string()))?;
        let path = probe.path();
        drop(probe);
        self.window_mem = Some(mem);
        Ok(path)
    }
}

impl VerbsMesh {
    fn one_sided_in(
        &mut self,
        peer: usize,
        bytes: usize,
        role: OneSidedRole,
        deadline: Instant,
        reg: &mut dyn FnMut(usize, Access) -> Result<Window, VerbsError>,
    ) -> Result<OneSidedResult, TransportError> {
        let remote = Access {
            local_write: true,
            remote_write: true,
            remote_read: true,
        };
        let local_only = Access {
            local_write: true,
            ..Access::default()
        };
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
                // The window the initiator writes into or reads from.
                let link = self.test_link(peer, 2, deadline, &mut |_| Ok(()))?;
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
                drop(link);
                Ok(OneSidedResult::default())
            }
            OneSidedRole::Initiator { op, count, window } => {
                let window = window.clamp(1, MAX_TEST_DEPTH);
                let link = self.test_link(peer, window as u32 + 1, deadline, &mut |_| Ok(()))?;
                let mut key = [0u8; 12];
                self.exchange(&mut [Op::recv(peer, &mut key)], deadline)?;
                let local = self.source(reg, bytes, local_only)?;
                let completions =
                    self.post_loop(&link, peer, op, &key, &local, bytes, count, window, None, deadline)?;
                self.exchange(&mut [Op::send(peer, &[0u8; 8])], deadline)?;
                Ok(OneSidedResult {
                    completions,
                    ..Default::default()
                })
            }
            OneSidedRole::Both { op, count, window } => {
                let window = window.clamp(1, MAX_TEST_DEPTH);
                let link = self.test_link(peer, window as u32 + 1, deadline, &mut |_| Ok(()))?;
                let mine = reg(bytes, remote).map_err(|e| self.verbs_err(e))?;
                let theirs = self.swap(peer, key_of(mine.reg()), deadline)?;
                let local = self.source(reg, bytes, local_only)?;
                let completions =
                    self.post_loop(&link, peer, op, &theirs, &local, bytes, count, window, None, deadline)?;
                // Neither side leaves while the other may still write into or read its window.
                self.swap(peer, [0u8; 12], deadline)?;
                drop(mine);
                Ok(OneSidedResult {
                    completions,
                    ..Default::default()
                })
            }
            OneSidedRole::PingPong { count, leader } => self.ping_pong(peer, bytes.max(1), count, leader, deadline),
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

    /// The bandwidth loop on a test link, as perftest's: post `count` operations of `bytes` from
    /// `local` (an RDMA write or read into or from the window `key` names, or a SEND), at most
    /// `window` in flight and one in [`CQ_MODERATION`] signalled; meanwhile, with `recvs`, repost
    /// receives into its window as they complete until all its messages are in. Returns the send
    /// side's completion times in seconds since the first post.
    #[allow(clippy::too_many_arguments)]
    fn post_loop(
        &self,
        link: &TestLink,
        peer: usize,
        op: OneSidedOp,
        key: &[u8; 12],
        local: &Window,
        bytes: usize,
        count: u64,
        window: usize,
        mut recvs: Option<Receives<'_>>,
        deadline: Instant,
    ) -> Result<Vec<f64>, TransportError> {
        let (remote_addr, rkey) = unkey(key);
        let sop = match op {
            OneSidedOp::Write => SendOp::Write { remote_addr, rkey },
            OneSidedOp::Read => SendOp::Read { remote_addr, rkey },
            OneSidedOp::Send => SendOp::Send,
        };
        let (mut posted, mut done) = (0u64, 0u64);
        let mut moderation = Moderation::new(window);
        let mut completions = Vec::with_capacity(count.min(10_000_000) as usize);
        let mut comps: Vec<Completion> = Vec::with_capacity(32);
        let t0 = Instant::now();
        // The deadline bounds how long we wait without any completion, not the whole run.
        let idle_limit = deadline.saturating_duration_since(t0);
        let mut last_progress = t0;
        while done < count || recvs.as_ref().is_some_and(|r| r.done < r.total) {
            while posted < count && posted - done < window as u64 {
                let signaled = moderation.next(posted + 1 == count);
                link.qp
                    .post_flagged(sop, local.reg(), 0, bytes, wr_id(peer, KIND_ONESIDED, 0), signaled)
                    .map_err(|e| self.verbs_err(e))?;
                posted += 1;
            }
            comps.clear();
            link.cq.poll(32, &mut comps).map_err(|e| self.verbs_err(e))?;
            if comps.is_empty() {
                if last_progress.elapsed() >= idle_limit {
                    let received = recvs
                        .as_ref()
                        .map(|r| format!(", {} of {} received", r.done, r.total))
                        .unwrap_or_default();
                    return Err(self.stalled(
                        peer,
                        t0,
                        format!("RDMA {op:?} completions ({done} of {count} done{received})"),
                    ));
                }
                std::hint::spin_loop();
                continue;
            }
            last_progress = Instant::now();
            let at = t0.elapsed().as_secs_f64();
            for c in &comps {
                match recvs.as_mut() {
                    Some(r) if decode(c.wr_id).1 == KIND_RECV => {
                        r.done += 1;
                        if r.posted < r.total {
                            link.qp
                                .post_recv(r.window.reg(), 0, bytes, c.wr_id)
                                .map_err(|e| self.verbs_err(e))?;
                            r.posted += 1;
                        }
                    }
                    _ => {
                        let retired = moderation.retired();
                        done += retired;
                        completions.extend(std::iter::repeat_n(at, retired as usize));
                    }
                }
            }
        }
        Ok(completions)
    }

    /// Poll the completion queue once: completions of the mesh's own traffic (sends, receives,
    /// credits) go to their handlers; returns how many one-sided completions arrived, and whether
    /// any completion did.
    fn reap(&mut self, comps: &mut Vec<Completion>) -> Result<(u64, bool), TransportError> {
        comps.clear();
        self.cq.poll(32, comps).map_err(|e| self.verbs_err(e))?;
        let any = !comps.is_empty();
        let mut mine = 0;
        for c in comps.drain(..) {
            let (p, kind, _) = decode(c.wr_id);
            if kind == KIND_ONESIDED {
                mine += 1;
            } else {
                self.background_completion(p, kind, c)?;
            }
        }
        Ok((mine, any))
    }

    fn stalled(&self, peer: usize, since: Instant, what: String) -> TransportError {
        TransportError::Timeout {
            rank: self.rank,
            host: self.hosts[self.rank].clone(),
            peer,
            peer_host: self.hosts[peer].clone(),
            waited: since.elapsed(),
            what,
        }
    }

    /// RDMA write ping-pong (ib_write_lat): the message's last byte carries the iteration's
    /// value (1..=255, never the initial 0), and the receiver spins on it with volatile reads.
    /// RC delivers a write's bytes in order on every RDMA NIC perftest supports, so the last byte
    /// arriving means the message has. Windows are host memory: the CPU polls them.
    fn ping_pong(
        &mut self,
        peer: usize,
        bytes: usize,
        count: u64,
        leader: bool,
        deadline: Instant,
    ) -> Result<OneSidedResult, TransportError> {
        let win = self
            .pd
            .register(
                bytes,
                Access {
                    local_write: true,
                    remote_write: true,
                    remote_read: false,
                },
            )
            .map_err(|e| self.verbs_err(e))?;
        let (remote_addr, rkey) = unkey(&self.swap(peer, key_of(&win), deadline)?);
        let mut src = self
            .pd
            .register(
                bytes,
                Access {
                    local_write: true,
                    ..Access::default()
                },
            )
            .map_err(|e| self.verbs_err(e))?;
        let last = bytes - 1;
        let step = deadline.saturating_duration_since(Instant::now());
        let mut outstanding = 0u64;
        let mut round_trips = Vec::with_capacity(count.min(10_000_000) as usize);
        let mut comps: Vec<Completion> = Vec::with_capacity(32);
        for i in 0..count {
            let v = (i % 255 + 1) as u8;
            let t0 = Instant::now();
            if !leader {
                self.wait_byte(peer, &win, last, v, step, &mut outstanding, &mut comps, i)?;
            }
            src.as_mut_slice()[last] = v;
            let qp = &self.peers[peer].as_ref().expect("connected peer").qp;
            qp.post(
                SendOp::Write { remote_addr, rkey },
                &src,
                0,
                bytes,
                wr_id(peer, KIND_ONESIDED, 0),
            )
            .map_err(|e| self.verbs_err(e))?;
            outstanding += 1;
            if leader {
                self.wait_byte(peer, &win, last, v, step, &mut outstanding, &mut comps, i)?;
                round_trips.push(t0.elapsed().as_secs_f64());
            }
        }
        // Reap our last writes' completions before the region goes away.
        let t0 = Instant::now();
        while outstanding > 0 {
            outstanding = outstanding.saturating_sub(self.reap(&mut comps)?.0);
            if outstanding > 0 && t0.elapsed() >= step {
                return Err(self.stalled(peer, t0, "the last ping-pong write's completion".into()));
            }
        }
        self.swap(peer, [0u8; 12], deadline)?;
        Ok(OneSidedResult {
            round_trips,
            ..Default::default()
        })
    }

    /// Spin until byte `at` of `win` is `v`, reaping completions meanwhile; at most `limit`.
    #[allow(clippy::too_many_arguments)]
    fn wait_byte(
        &mut self,
        peer: usize,
        win: &MemoryRegion,
        at: usize,
        v: u8,
        limit: std::time::Duration,
        outstanding: &mut u64,
        comps: &mut Vec<Completion>,
        iteration: u64,
    ) -> Result<(), TransportError> {
        let t0 = Instant::now();
        let mut spins = 0u32;
        while win.read_u8_volatile(at) != v {
            spins += 1;
            if spins.is_multiple_of(64) {
                *outstanding = outstanding.saturating_sub(self.reap(comps)?.0);
                if t0.elapsed() >= limit {
                    return Err(self.stalled(peer, t0, format!("the RDMA write ping-pong (iteration {iteration})")));
                }
            }
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// A queue pair of its own to `peer` for one pairwise measurement, as perftest connects one per
    /// test: its send queue is as deep as the test's window (the mesh's queue pairs keep room for
    /// credits), its receive queue holds only the test's receives (never the mesh's inbox
    /// receives), and its completions arrive on their own queue. `prepare` posts receives while the queue pair is in INIT, before the peer can send;
    /// both sides are ready to send when this returns.
    fn test_link(
        &mut self,
        peer: usize,
        depth: u32,
        deadline: Instant,
        prepare: &mut dyn FnMut(&QueuePair<Init>) -> Result<(), VerbsError>,
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
        // Remote write and read allowed on the queue pair; each region still grants only what its
        // test needs.
        let access = Access {
            remote_write: true,
            remote_read: true,
            ..Access::default()
        };
        let qp = self
            .pd
            .create_rc_qp_signalling(&cq, &cq, depth, MAX_INLINE, false)
            .and_then(|q| q.into_init(port, access))
            .map_err(|e| self.verbs_err(e))?;
        prepare(&qp).map_err(|e| self.verbs_err(e))?;
        let psn = (qp.qpn().wrapping_mul(2_654_435_761)) & 0x00ff_ffff;
        let mine = Endpoint {
            qpn: qp.qpn(),
            psn,
            lid: info.lid,
            gid,
            mtu: info.mtu_enum,
            addr: 0,
            rkey: 0,
        };
        let mut theirs = [0u8; ENDPOINT_BYTES];
        self.exchange(
            &mut [Op::send(peer, &mine.to_bytes()), Op::recv(peer, &mut theirs)],
            deadline,
        )?;
        let remote = Endpoint::from_bytes(&theirs).ok_or_else(|| {
            TransportError::Setup(format!("rank {}: malformed test endpoint from rank {peer}", self.rank))
        })?;
        let grh = info.ethernet.then_some(self.choice.gid.index as u8);
        let qp = qp
            .into_rtr(&remote, port, info.mtu_enum.min(remote.mtu), grh)
            .and_then(|q| q.into_rts(psn))
            .map_err(|e| self.verbs_err(e))?;
        // Both ends connected before either sends: a SEND to a queue pair still in INIT is dropped
        // and only retried after the transport timeout.
        self.swap(peer, [0u8; 12], deadline)?;
        Ok(TestLink { qp, cq })
    }

    /// ib_send_bw's loop on a test link: post `sends` SENDs of `bytes` from a source window, at most
    /// `window` in flight, while `recvs` receives land in a receive window with up to twice
    /// `window` posted. Returns the send completion times, in seconds since the first post.
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
        let local = Access {
            local_write: true,
            ..Access::default()
        };
        let inbox = reg(bytes.max(1), local).map_err(|e| self.verbs_err(e))?;
        let src = self.source(reg, bytes.max(1), local)?;
        // Twice the sender's window of receives posted, as perftest's receive depth exceeds its
        // send depth: a receiver that reposts late then costs no receiver-not-ready retry.
        let posted = 2 * window;
        let first = recvs.min(posted as u64);
        let recv_id = wr_id(peer, KIND_RECV, 0);
        let link = self.test_link(peer, posted as u32 + 1, deadline, &mut |qp| {
            (0..first).try_for_each(|_| qp.post_recv(inbox.reg(), 0, bytes, recv_id))
        })?;
        let receives = (recvs > 0).then_some(Receives {
            window: &inbox,
            total: recvs,
            posted: first,
            done: 0,
        });
        let completions = self.post_loop(
            &link,
            peer,
            OneSidedOp::Send,
            &[0u8; 12],
            &src,
            bytes,
            sends,
            window,
            receives,
            deadline,
        )?;
        // Neither side tears its queue pair down while the other may still be acknowledging.
        self.swap(peer, [0u8; 12], deadline)?;
        drop(link);
        Ok(OneSidedResult {
            completions,
            ..Default::default()
        })
    }

    /// ib_send_lat on a test link: the leader sends `bytes` and waits for the peer's message back;
    /// the peer waits, then sends. Small messages go inline from host memory, as perftest's.
    fn send_ping_pong(
        &mut self,
        peer: usize,
        bytes: usize,
        count: u64,
        leader: bool,
        deadline: Instant,
        reg: &mut dyn FnMut(usize, Access) -> Result<Window, VerbsError>,
    ) -> Result<OneSidedResult, TransportError> {
        const POSTED: u64 = 16;
        let local = Access {
            local_write: true,
            ..Access::default()
        };
        let inbox = reg(bytes.max(1), local).map_err(|e| self.verbs_err(e))?;
        let src = self.source(reg, bytes.max(1), local)?;
        let recv_id = wr_id(peer, KIND_RECV, 0);
        let first = count.min(POSTED);
        let link = self.test_link(peer, POSTED as u32 + 2, deadline, &mut |qp| {
            (0..first).try_for_each(|_| qp.post_recv(inbox.reg(), 0, bytes, recv_id))
        })?;
        let step = deadline.saturating_duration_since(Instant::now());
        let (mut posted_r, mut unacked) = (first, 0u64);
        let mut round_trips = Vec::with_capacity(count.min(10_000_000) as usize);
        let mut comps: Vec<Completion> = Vec::with_capacity(8);
        // Wait for the next receive, counting send completions on the way.
        let mut wait_recv = |me: &Self, posted_r: &mut u64, unacked: &mut u64, i: u64| -> Result<(), TransportError> {
            let t0 = Instant::now();
            loop {
                comps.clear();
                link.cq.poll(8, &mut comps).map_err(|e| me.verbs_err(e))?;
                let mut got = false;
                for c in &comps {
                    if decode(c.wr_id).1 == KIND_RECV {
                        got = true;
                    } else {
                        *unacked = unacked.saturating_sub(1);
                    }
                }
                if got {
                    if *posted_r < count {
                        link.qp
                            .post_recv(inbox.reg(), 0, bytes, recv_id)
                            .map_err(|e| me.verbs_err(e))?;
                        *posted_r += 1;
                    }
                    return Ok(());
                }
                if t0.elapsed() >= step {
                    return Err(me.stalled(peer, t0, format!("the SEND ping-pong (iteration {i})")));
                }
                std::hint::spin_loop();
            }
        };
        for i in 0..count {
            let t0 = Instant::now();
            if !leader {
                wait_recv(self, &mut posted_r, &mut unacked, i)?;
            }
            link.qp
                .post(SendOp::Send, src.reg(), 0, bytes, wr_id(peer, KIND_SEND, 0))
                .map_err(|e| self.verbs_err(e))?;
            unacked += 1;
            if leader {
                wait_recv(self, &mut posted_r, &mut unacked, i)?;
                round_trips.push(t0.elapsed().as_secs_f64());
            }
        }
        // The last sends' completions before the link goes away.
        let t0 = Instant::now();
        while unacked > 0 {
            comps.clear();
            link.cq.poll(8, &mut comps).map_err(|e| self.verbs_err(e))?;
            unacked = unacked.saturating_sub(comps.len() as u64);
            if unacked > 0 && t0.elapsed() >= step {
                return Err(self.stalled(peer, t0, "the last SEND ping-pong completion".into()));
            }
        }
        self.swap(peer, [0u8; 12], deadline)?;
        drop(link);
        Ok(OneSidedResult {
            round_trips,
            ..Default::default()
        })
    }

    fn details_list(&self) -> Vec<(String, String)> {
        let c = &self.choice;
        let ethernet = c.link_layer == crate::devices::LinkLayer::Ethernet;
        let mut v = vec![
            ("Device".into(), c.device.clone()),
            (
                "Number of qps".into(),
                format!(
                    "1 per test (write, read, send -n; besides the mesh's {}, one per peer)",
                    self.size.saturating_sub(1)
                ),
            ),
            ("Transport type".into(), "IB".into()),
            ("Connection type".into(), "RC".into()),
            (
                "CQ Moderation".into(),
                format!("{CQ_MODERATION} (bandwidth tests; latency tests and the mesh's own traffic: 1)"),
            ),
            ("Mtu".into(), format!("{}[B]", self.mtu)),
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
                "Staging".into(),
                format!(
                    "{} inbox slots of {} KiB per peer, {} with immediate, credits by RDMA write",
                    self.slots,
                    SLOT / 1024,
                    if self.use_send { "SEND" } else { "RDMA write" }
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

    fn exchange_ops(&mut self, ops: &mut [Op<'_>], deadline: Instant) -> Result<(), TransportError> {
        let start = Instant::now();
        let n = self.size;
        let mut sends: Vec<VecDeque<usize>> = vec![VecDeque::new(); n];
        let mut recvs: Vec<VecDeque<usize>> = vec![VecDeque::new(); n];
        let mut st: Vec<OpState> = vec![OpState::default(); ops.len()];
        for (i, op) in ops.iter_mut().enumerate() {
            op.done_at = None;
            if op.peer >= n || op.peer == self.rank {
                return Err(TransportError::BadPeer {
                    rank: self.rank,
                    peer: op.peer,
                    size: n,
                });
            }
            if op.len() > u32::MAX as usize {
                return Err(TransportError::Setup(format!(
                    "rank {}: a {}-byte message is over the 4 GiB limit of the verbs transport",
                    self.rank,
                    op.len()
                )));
            }
            st[i].frags_total = frags(op.len());
            match op.kind {
                OpKind::Send(_) => sends[op.peer].push_back(i),
                OpKind::Recv(_) => recvs[op.peer].push_back(i),
            }
        }
        let mut remaining = ops.len();
        let mut comps: Vec<Completion> = Vec::with_capacity(32);
        let mut idle_spins = 0u32;
        while remaining > 0 {
            let mut moved = false;
            // 1. Post what credits and free slots allow.
            for (p, q) in sends.iter_mut().enumerate() {
                let Some(peer) = self.peers[p].as_mut() else { continue };
                while let Some(&i) = q.front() {
                    let peer_consumed = peer.inbox.read_u64_volatile(self.slots * SLOT);
                    if peer.sent >= peer_consumed + self.slots as u64 || peer.free_send.is_empty() {
                        break;
                    }
                    let OpKind::Send(buf) = &ops[i].kind else {
                        unreachable!("send queue holds sends")
                    };
                    let f = st[i].frags_posted;
                    let chunk = &buf[(f * SLOT).min(buf.len())..((f + 1) * SLOT).min(buf.len())];
                    let slot = peer.free_send.pop().expect("checked non-empty");
                    peer.send_mr.as_mut_slice()[slot * SLOT..slot * SLOT + chunk.len()].copy_from_slice(chunk);
                    // Fragment number `sent` goes to the peer's inbox slot `sent mod slots`, free
                    // because the credit check above saw the fragment `slots` before it consumed.
                    let (inbox, rkey) = peer.remote_inbox;
                    let remote_addr = inbox + (peer.sent % self.slots as u64) * SLOT as u64;
                    let how = if self.use_send {
                        SendOp::SendImm(buf.len() as u32)
                    } else {
                        SendOp::WriteImm {
                            remote_addr,
                            rkey,
                            imm: buf.len() as u32,
                        }
                    };
                    let r = peer
                        .qp
                        .post(how, &peer.send_mr, slot * SLOT, chunk.len(), wr_id(p, KIND_SEND, slot));
                    if let Err(e) = r {
                        return Err(self.verbs_err(e));
                    }
                    peer.sent += 1;
                    peer.inflight.push_back(i);
                    st[i].frags_posted += 1;
                    st[i].outstanding += 1;
                    moved = true;
                    if st[i].frags_posted == st[i].frags_total {
                        q.pop_front();
                    }
                }
            }
            // 2. Completions.
            comps.clear();
            if let Err(e) = self.cq.poll(32, &mut comps) {
                return Err(self.verbs_err(e));
            }
            for c in comps.drain(..) {
                moved = true;
                let (p, kind, slot) = decode(c.wr_id);
                match kind {
                    KIND_SEND => {
                        let peer = self.peers[p].as_mut().expect("connected peer");
                        peer.free_send.push(slot);
                        if let Some(i) = peer.inflight.pop_front() {
                            st[i].outstanding -= 1;
                            if st[i].outstanding == 0
                                && st[i].frags_posted == st[i].frags_total
                                && ops[i].done_at.is_none()
                            {
                                ops[i].done_at = Some(Instant::now());
                                remaining -= 1;
                            }
                        }
                    }
                    KIND_RECV => self.arrival(p, &c),
                    _ => {
                        let dirty = {
                            let peer = self.peers[p].as_mut().expect("connected peer");
                            peer.credit_outstanding = false;
                            peer.credit_dirty
                        };
                        if dirty {
                            self.post_credit(p)?;
                        }
                    }
                }
            }
            // 3. Hand arrived fragments to posted receives, in order, and return the credits.
            for (p, q) in recvs.iter_mut().enumerate() {
                let mut consumed_any = false;
                while let (Some(&i), Some(&(_, len, msg_len))) =
                    (q.front(), self.peers[p].as_ref().and_then(|x| x.arrived.front()))
                {
                    let want = ops[i].len();
                    if msg_len as usize != want {
                        return Err(TransportError::LengthMismatch {
                            rank: self.rank,
                            host: self.hosts[self.rank].clone(),
                            peer: p,
                            peer_host: self.hosts[p].clone(),
                            expected: want,
                            got: u64::from(msg_len),
                        });
                    }
                    let OpKind::Recv(buf) = &mut ops[i].kind else {
                        unreachable!("receive queue holds receives")
                    };
                    let s = &mut st[i];
                    // This fragment's length follows from the message's: whole slots, then the rest.
                    let expect = (want - s.progress).min(SLOT);
                    if len as usize != expect {
                        return Err(TransportError::Setup(format!(
                            "rank {}: a {len}-byte fragment from rank {p} where {expect} bytes were due",
                            self.rank
                        )));
                    }
                    self.claim_fragment(p, &mut buf[s.progress..s.progress + expect])?;
                    s.progress += expect;
                    s.frags_claimed += 1;
                    consumed_any = true;
                    moved = true;
                    if s.frags_claimed == s.frags_total {
                        ops[i].done_at = Some(Instant::now());
                        remaining -= 1;
                        q.pop_front();
                    }
                }
                // Credits go back lazily, once half the slots are consumed: a ping-pong then costs no
                // extra packet per message. No deadlock: a sender blocked on credits has `slots`
                // fragments unreported, so the receiver has over half of them to consume, and
                // consuming them crosses the threshold.
                if consumed_any && self.credit_due(p) {
                    self.post_credit(p)?;
                }
            }
            if moved {
                idle_spins = 0;
                continue;
            }
            if Instant::now() >= deadline {
                let peer = (0..n)
                    .find(|&p| !recvs[p].is_empty())
                    .or_else(|| {
                        (0..n).find(|&p| {
                            !sends[p].is_empty() || self.peers[p].as_ref().is_some_and(|x| !x.inflight.is_empty())
                        })
                    })
                    .unwrap_or(0);
                let what = if !recvs[peer].is_empty() {
                    "a message to arrive"
                } else {
                    "a send to complete (no credit or no acknowledgement)"
                };
                return Err(self.stalled(peer, start, format!("waiting for {what} over RDMA")));
            }
            idle_spins += 1;
            idle_wait(idle_spins, self.patient);
        }
        Ok(())
    }
}

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
            qp.post_recv(&inbox, s * SLOT, SLOT, wr_id(p, KIND_RECV, s))
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
                arrivals: 0,
                free_send: (0..slots).rev().collect(),
                sent: 0,
                consumed: 0,
                reported: 0,
                credit_outstanding: false,
                credit_dirty: false,
                arrived: VecDeque::new(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moderation_signals_every_hundredth_and_the_last() {
        // Window 128, 250 posts: signalled at 100, 200 and 250; completions retire 100, 100, 50.
        let mut m = Moderation::new(128);
        let signaled: Vec<u64> = (1..=250u64).filter(|&i| m.next(i == 250)).collect();
        assert_eq!(signaled, vec![100, 200, 250]);
        assert_eq!((m.retired(), m.retired(), m.retired(), m.retired()), (100, 100, 50, 0));
        // A window smaller than the interval signals once per window: never a full window of
        // unsignalled requests, which would wait forever.
        let mut m = Moderation::new(1);
        assert!((0..5).all(|i| m.next(i == 4)));
        let mut m = Moderation::new(16);
        let n = (1..=40u64).filter(|&i| m.next(i == 40)).count();
        assert_eq!(n, 3);
        assert_eq!((m.retired(), m.retired(), m.retired()), (16, 16, 8));
    }
}
