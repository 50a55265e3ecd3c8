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

mod cm_link;
mod connect;
mod details;
mod direct;
mod inbox;
pub mod mtu;
mod progress;
mod test_links;
mod wr;

use std::path::PathBuf;
use std::time::Instant;

use crate::devices::{self, Choice, GidSummary};
use crate::transport::{
    DirectOp, ForeignPath, NicMemory, OneSidedOp, OneSidedResult, OneSidedRole, Op, OpKind, Rdma, RegionId, Transport,
    TransportError, TransportKind, WindowMemory,
};
use crate::verbs::{
    Access, Completion, CompletionQueue, Context, ForeignRegion, Init, MemoryRegion, ProtectionDomain, QpEndpoint,
    QueuePair, Registered, Rts, SendOp, VerbsError,
};
use crate::World;

use inbox::Ledger;
use test_links::Window;
use wr::{decode, wr_id, WrKind};

pub use connect::connect;

/// Bytes per staging slot (and so per fragment on the wire) while the budget allows.
pub const SLOT_MAX: usize = 256 * 1024;
/// The least bytes per slot, reached at 4,097 ranks.
pub const SLOT_MIN: usize = 8 * 1024;
/// Inline data asked for at queue-pair creation: perftest's default for its latency tests.
pub const MAX_INLINE: u32 = 220;
/// Deepest send window of a pairwise test's own queue pair (perftest's -t goes to 8192 on some
/// devices; rxe and mlx5 take this many).
const MAX_TEST_DEPTH: usize = 1024;
/// Staging memory per rank for all its peers together (send slots and inbox), which sets the
/// slots per peer and their size.
pub const STAGING_BUDGET: usize = 128 << 20;

/// Most queue pairs per peer the mesh opens (`-q` on the collectives): each needs a staging slot
/// of its own each way, and a peer has at most 16.
pub const MAX_LANES: usize = 16;

/// Slots per peer and bytes per slot for a job of `n` ranks whose mesh has `lanes` queue pairs
/// per peer. Each peer gets `slots` send slots and `slots` inbox slots, so a rank registers
/// 2 x slots x slot x (n - 1) bytes of staging: 16 slots of 256 KiB up to 17 ranks, fewer slots
/// down to 2 at 129 ranks, then 2 slots that shrink (to 8 KiB at 4,097 ranks), so the total stays
/// within [`STAGING_BUDGET`] (128 MiB) up to 4,097 ranks and grows by 32 KiB per peer beyond.
/// With several lanes the slots are a multiple of them (fragment k rides lane k mod lanes into
/// slot k mod slots, so each lane owns every lanes-th slot): rounded down, at least one per lane,
/// the slot size shrinking to stay within the budget; [`max_lanes`] says how many fit.
pub fn staging(n: usize, lanes: usize) -> (usize, usize) {
    staging_within(n, lanes, staging_budget())
}

/// The staging budget: [`STAGING_BUDGET`], or MESHRUN_STAGING_BUDGET (bytes, tests only), which
/// shrinks it so a few ranks exercise the small slots of a big job.
fn staging_budget() -> usize {
    std::env::var("MESHRUN_STAGING_BUDGET")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(STAGING_BUDGET)
}

/// [`staging`] for a budget of `budget` bytes.
pub fn staging_within(n: usize, lanes: usize, budget: usize) -> (usize, usize) {
    let peers = n.saturating_sub(1).max(1);
    let lanes = lanes.clamp(1, MAX_LANES);
    let slots = (budget / (2 * SLOT_MAX * peers)).clamp(2, 16);
    let slots = (slots / lanes * lanes).max(lanes);
    let slot = (budget / (2 * slots * peers)).clamp(SLOT_MIN, SLOT_MAX);
    (slots, slot / 4096 * 4096)
}

/// The most queue pairs per peer a job of `n` ranks may have: every lane needs a slot of at least
/// [`SLOT_MIN`] each way to every peer within the staging budget (16 up to 1,025 ranks, 2 at
/// 4,096), and at most [`MAX_LANES`].
pub fn max_lanes(n: usize) -> usize {
    lanes_within(n, staging_budget())
}

/// [`max_lanes`] for a budget of `budget` bytes.
pub fn lanes_within(n: usize, budget: usize) -> usize {
    let peers = n.saturating_sub(1).max(1);
    (budget / (2 * SLOT_MIN * peers)).clamp(1, MAX_LANES)
}

/// How to pick the device.
#[derive(Debug, Clone)]
pub struct VerbsOptions {
    pub device: Option<String>,
    /// One device per local rank (`--devices mlx5_0,mlx5_1`): local rank i uses entry i mod len.
    pub devices: Vec<String>,
    pub port: Option<u8>,
    pub gid_index: Option<u32>,
    pub sysfs_root: PathBuf,
    /// Service level and traffic class of every queue pair.
    pub qos: crate::verbs::Qos,
    /// Connect through the RDMA connection manager (`--rdma-cm`, perftest's `-R`) instead of
    /// exchanging GIDs and queue pair numbers over MPI.
    pub rdma_cm: bool,
    /// Queue pairs per peer (NCCL_IB_QPS_PER_CONNECTION): the two-sided stream is striped over
    /// them fragment by fragment; at most [`max_lanes`] for the job's size.
    pub lanes: usize,
    /// The path MTU in bytes of every queue pair (perftest's `-m`; None: the port's active MTU).
    /// Larger than the active MTU, or not an InfiniBand MTU, is a setup error.
    pub mtu: Option<u32>,
}

impl VerbsOptions {
    /// The device asked for at `local_rank` (None: perftest's choice).
    pub fn device_for(&self, local_rank: usize) -> Option<String> {
        if self.devices.is_empty() {
            self.device.clone()
        } else {
            Some(self.devices[local_rank % self.devices.len()].clone())
        }
    }

    /// The device, port and GID this rank uses, as the mesh chose them.
    pub fn choice(&self, local_rank: usize) -> Result<devices::Choice, String> {
        let devs = devices::discover(&self.sysfs_root).map_err(|e| e.to_string())?;
        devices::choose_device_with(
            &devs,
            self.device_for(local_rank).as_deref(),
            self.port,
            self.gid_index,
            self.rdma_cm,
        )
        .map_err(|e| e.to_string())
    }
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

struct Peer {
    /// Lane 0: the first queue pair to the peer, which also carries the credit writes.
    qp: QueuePair<Rts>,
    /// The peer's GID, where this rank connected its queue pairs to it from its endpoint (None
    /// through the connection manager).
    gid: Option<[u8; 16]>,
    /// Lanes 1.. (several queue pairs per peer): fragment k rides lane k mod lanes.
    lanes: Vec<QueuePair<Rts>>,
    send_mr: MemoryRegion,
    /// Where the peer writes our incoming fragments (`slots` slots), then the word where it writes
    /// how many of our fragments it has consumed.
    inbox: MemoryRegion,
    /// Source of our own consumed count, written into the peer's credit word.
    credit_src: MemoryRegion,
    /// The peer's inbox (address, rkey); its credit word sits after its slots.
    remote_inbox: (u64, u32),
    remote_credit: (u64, u32),
    /// Slot and credit accounting of the stream both ways.
    ledger: Ledger,
    /// Sends posted and not completed: the op each staging slot's fragment belongs to (send
    /// completions free their slot by work-request id, in any order across lanes).
    inflight: Vec<Option<usize>>,
    /// iWARP only (no immediate data): where each slot's notice arrives (8 bytes a slot: the
    /// fragment's length, then the message's), receives posted here instead of on the inbox; and
    /// the notices we send, one per send slot.
    notices: Option<Notices>,
}

/// A peer's staging and inbox regions (before its queue pairs exist): send slots, inbox, credit
/// source and, on iWARP, the notice regions.
pub(super) struct Regions {
    send_mr: MemoryRegion,
    inbox: MemoryRegion,
    credit_src: MemoryRegion,
    notices: Option<Notices>,
}

impl Peer {
    /// A connected peer: its queue pairs (lane 0 first), our regions for it, and its inbox
    /// (address, rkey), whose credit word sits after its `slots` slots of `slot` bytes.
    fn new(mut qps: Vec<QueuePair<Rts>>, r: Regions, (addr, rkey): (u64, u32), (slots, slot): (usize, usize)) -> Peer {
        let qp = qps.remove(0);
        Peer {
            qp,
            gid: None,
            lanes: qps,
            send_mr: r.send_mr,
            inbox: r.inbox,
            credit_src: r.credit_src,
            remote_inbox: (addr, rkey),
            remote_credit: (addr + (slots * slot) as u64, rkey),
            ledger: Ledger::new(slots),
            inflight: vec![None; slots],
            notices: r.notices,
        }
    }

    /// The queue pair that carries inbox slot `slot`'s fragments: lane slot mod lanes.
    fn lane(&self, slot: usize) -> &QueuePair<Rts> {
        match slot % (1 + self.lanes.len()) {
            0 => &self.qp,
            j => &self.lanes[j - 1],
        }
    }

    /// Whether any send is posted and not completed.
    fn sending(&self) -> bool {
        self.inflight.iter().any(Option::is_some)
    }
}

/// An iWARP mesh queue pair's notice regions: `recv` (our receives land here), `send` (sources).
struct Notices {
    recv: MemoryRegion,
    send: MemoryRegion,
}

/// Bytes of one notice: the fragment's length and the message's, little-endian u32s.
const NOTICE: usize = 8;

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
    /// Bytes per staging slot ([`staging`]).
    slot: usize,
    choice: Choice,
    /// The service level and traffic class every queue pair uses.
    qos: crate::verbs::Qos,
    mtu: u32,
    /// Smallest and largest path MTU to a peer (each pair runs at its smaller end's MTU).
    path_mtu: (u32, u32),
    /// `-m` as an IBV_MTU_* value: the test links' MTU is at most this.
    mtu_cap: Option<u32>,
    /// Two-sided messages as SEND-with-immediate (pairwise --op send, as ib_send_bw) instead of
    /// RDMA WRITE-with-immediate (the default, and what collectives use).
    use_send: bool,
    /// Inline bytes per work request (as perftest's latency tests: small messages skip a DMA read).
    max_inline: u32,
    /// Where one-sided windows live when not in host memory (`--use-cuda`).
    window_mem: Option<crate::verbs::SharedWindow>,
    /// Sleep instead of spinning when an exchange has waited a while (a one-sided target).
    patient: bool,
    /// Queue pairs per bandwidth test ([`Rdma::set_test_qps`]).
    test_qps: usize,
    /// Connection setup through the RDMA connection manager (`--rdma-cm`): its channel and
    /// listener, through which the pairwise tests' queue pairs connect too.
    cm: Option<cm_link::CmMesh>,
    /// The device is iWARP: fragments go as an RDMA write and a notice SEND (no immediates).
    iwarp: bool,
    /// Queue pairs per peer of the two-sided stream ([`VerbsOptions::lanes`], as agreed).
    lanes: usize,
}

impl VerbsMesh {
    /// The device, port and GID in use, for headers.
    pub fn describe(&self) -> String {
        format!("{}, path MTU up to {} B", self.choice.describe(), self.mtu)
    }

    fn fail(&self, peer: usize, what: String) -> TransportError {
        TransportError::peer_closed(self.rank, &self.hosts, peer, what)
    }

    /// A verbs failure as a transport error: a failed completion of a peer's traffic is that peer
    /// gone; any other verbs failure is this rank's own device.
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
                TransportError::Local(format!("rank {} ({}): {e}", self.rank, self.hosts[self.rank]))
            }
            // Memory that cannot be registered (GPU memory without a GPUDirect path) is setup.
            VerbsError::Window(_) => {
                TransportError::Setup(format!("rank {} ({}): {e}", self.rank, self.hosts[self.rank]))
            }
            e => TransportError::Local(format!("rank {} ({}): {e}", self.rank, self.hosts[self.rank])),
        }
    }

    pub(super) fn stalled(&self, peer: usize, since: Instant, what: String) -> TransportError {
        TransportError::timeout(self.rank, &self.hosts, peer, since.elapsed(), what)
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

impl Transport for VerbsMesh {
    fn kind(&self) -> TransportKind {
        TransportKind::Verbs
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

    fn details(&self) -> Vec<(String, String)> {
        self.details_list()
    }

    fn endpoint(&self) -> crate::transport::Endpoint {
        crate::transport::Endpoint {
            device: Some(self.choice.device.clone()),
            port: Some(self.choice.port),
            mtu: Some(self.mtu),
            address: None,
        }
    }

    fn exchange_with(
        &mut self,
        ops: &mut [Op<'_>],
        deadline: Instant,
        work: Option<&mut dyn FnMut()>,
    ) -> Result<(), TransportError> {
        self.exchange_ops(ops, deadline, work)
    }

    fn rdma(&mut self) -> Option<&mut dyn Rdma> {
        Some(self)
    }
}

impl Rdma for VerbsMesh {
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
        let foreign = self.window_mem.clone();
        let mut reg = |len: usize, access: Access| -> Result<Window, VerbsError> {
            match &foreign {
                Some(m) => pd.register_window(m, len, access).map(Window::Foreign),
                None => pd.register(len, access).map(Window::Host),
            }
        };
        self.one_sided_in(peer, bytes, role, deadline, &mut reg)
    }

    fn use_send_opcode(&mut self, on: bool) {
        self.use_send = on;
    }

    fn set_test_qps(&mut self, n: usize) {
        self.test_qps = n.max(1);
    }

    fn roce_v2_flows(&self, peer: usize) -> Option<crate::transport::RoceFlows> {
        use crate::devices::{GidKind, LinkLayer};
        use crate::transport::rdma::{gid_ipv4, roce_sport};
        let roce_v2 = self.choice.link_layer == LinkLayer::Ethernet && self.choice.gid.kind == Some(GidKind::RoceV2);
        if !roce_v2 || self.cm.is_some() || self.test_qps < 2 {
            return None;
        }
        let remote = gid_ipv4(&self.peers.get(peer)?.as_ref()?.gid?)?;
        Some(crate::transport::RoceFlows {
            local: gid_ipv4(&self.choice.gid.raw)?,
            remote,
            // Queue pair k carries flow label k + 1 ([`Rdma::set_test_qps`]).
            sports: (1..=self.test_qps as u32).map(roce_sport).collect(),
        })
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

    fn use_window_memory(&mut self, mem: Box<dyn WindowMemory>) -> Result<ForeignPath, TransportError> {
        let mem = std::sync::Arc::new(std::sync::Mutex::new(mem));
        let probe = self
            .pd
            .register_window(&mem, 2 << 20, Access::REMOTE_READ_WRITE)
            .map_err(|e| TransportError::Setup(e.to_string()))?;
        let path = probe.path();
        drop(probe);
        self.window_mem = Some(mem);
        Ok(path)
    }
}
