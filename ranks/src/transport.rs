//! The operations every transport offers, and their errors.
//!
//! Collectives and pairwise tests are written against [`Transport`]: a batch of two-sided operations
//! (send a buffer to a peer, receive a buffer from a peer) is posted and progressed concurrently
//! until all complete or a deadline passes. Sends and receives between one pair of ranks match in
//! the order they are posted, across batches, and the lengths must agree.

use std::time::{Duration, Instant};

/// What one operation does.
pub enum OpKind<'a> {
    Send(&'a [u8]),
    Recv(&'a mut [u8]),
}

/// One operation of a batch, with the time it completed once it has.
pub struct Op<'a> {
    pub peer: usize,
    pub kind: OpKind<'a>,
    pub done_at: Option<Instant>,
}

impl<'a> Op<'a> {
    pub fn send(peer: usize, buf: &'a [u8]) -> Self {
        Op {
            peer,
            kind: OpKind::Send(buf),
            done_at: None,
        }
    }
    pub fn recv(peer: usize, buf: &'a mut [u8]) -> Self {
        Op {
            peer,
            kind: OpKind::Recv(buf),
            done_at: None,
        }
    }
    pub fn len(&self) -> usize {
        match &self.kind {
            OpKind::Send(b) => b.len(),
            OpKind::Recv(b) => b.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A region of memory registered with a transport for zero-copy transfers
/// ([`Transport::register_region`]).
pub type RegionId = usize;

/// `len` bytes at `off` of a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub region: RegionId,
    pub off: usize,
    pub len: usize,
}

impl Span {
    pub fn new(region: RegionId, off: usize, len: usize) -> Span {
        Span { region, off, len }
    }
}

/// What one zero-copy operation does: send from, or receive into, registered memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectKind {
    Send(Span),
    Recv(Span),
}

/// One operation of a zero-copy batch ([`Transport::exchange_direct`]): the same matching rules
/// as [`Op`] (in post order per pair of ranks, lengths must agree), with the data moved by the
/// NIC between registered regions and never touched by the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectOp {
    pub peer: usize,
    pub kind: DirectKind,
    pub done_at: Option<Instant>,
}

impl DirectOp {
    pub fn send(peer: usize, span: Span) -> Self {
        DirectOp {
            peer,
            kind: DirectKind::Send(span),
            done_at: None,
        }
    }
    pub fn recv(peer: usize, span: Span) -> Self {
        DirectOp {
            peer,
            kind: DirectKind::Recv(span),
            done_at: None,
        }
    }
    pub fn span(&self) -> Span {
        match self.kind {
            DirectKind::Send(s) | DirectKind::Recv(s) => s,
        }
    }
}

/// A failure of a transport operation. Every variant names both ends.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("rank {rank} ({host}): timed out after {waited:.1?} waiting for rank {peer} ({peer_host}): {what}")]
    Timeout {
        rank: usize,
        host: String,
        peer: usize,
        peer_host: String,
        waited: Duration,
        what: String,
    },
    #[error("rank {rank} ({host}): rank {peer} ({peer_host}) closed the connection ({what}); did that rank die?")]
    PeerClosed {
        rank: usize,
        host: String,
        peer: usize,
        peer_host: String,
        what: String,
    },
    #[error("rank {rank} ({host}): message from rank {peer} ({peer_host}) is {got} bytes where {expected} were posted; are both ranks running the same command?")]
    LengthMismatch {
        rank: usize,
        host: String,
        peer: usize,
        peer_host: String,
        expected: usize,
        got: u64,
    },
    #[error("rank {rank} ({host}): {what} with rank {peer} ({peer_host}): {source}")]
    Io {
        rank: usize,
        host: String,
        peer: usize,
        peer_host: String,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("rank {rank}: peer {peer} is not a rank of this job (size {size}) or is this rank itself")]
    BadPeer { rank: usize, peer: usize, size: usize },
    #[error("{0}")]
    Setup(String),
}

/// Operations a transport offers beyond two-sided send and receive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// RDMA write into a peer's registered buffer.
    pub write: bool,
    /// RDMA read from a peer's registered buffer.
    pub read: bool,
    /// SEND from a registered window into receives posted in the peer's window, zero-copy on
    /// both sides (ib_send_bw's pattern, [`OneSidedOp::Send`]).
    pub send: bool,
}

/// A one-sided operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneSidedOp {
    Write,
    Read,
    /// Two-sided, but measured like the one-sided operations: SENDs from the initiator's window
    /// into receives the peer posts in its window, on a queue pair of their own (as ib_send_bw),
    /// so no copy and no credit traffic of the mesh's own messages is timed.
    Send,
}

/// This rank's part in a one-sided measurement with one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneSidedRole {
    /// Post `count` operations of `bytes` into (or from) the peer's window, at most `window` at once.
    Initiator { op: OneSidedOp, count: u64, window: usize },
    /// Expose a window of `bytes` and wait until the initiator is done (write and read).
    Target,
    /// The peer of a [`OneSidedOp::Send`] initiator: receive `count` messages of `bytes` into a
    /// window, keeping up to `window` receives posted.
    Receiver { count: u64, window: usize },
    /// Both at once (perftest's -b): each side exposes a window and posts `count` operations into
    /// the other's; each returns its own completions.
    Both { op: OneSidedOp, count: u64, window: usize },
    /// RDMA write ping-pong, as ib_write_lat: the leader writes `bytes` into the peer's window, the
    /// peer sees the last byte change and writes back; `count` round trips. The leader returns
    /// each round trip's seconds in `round_trips`.
    PingPong { count: u64, leader: bool },
    /// SEND ping-pong, as ib_send_lat: the leader sends `bytes`, the peer's receive completes and
    /// it sends back; `count` round trips, each returned in `round_trips` (leader only).
    SendPingPong { count: u64, leader: bool },
}

/// What the initiator saw: completion times in seconds since the first post.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OneSidedResult {
    pub completions: Vec<f64>,
    /// Ping-pong round trips, seconds (leader only).
    pub round_trips: Vec<f64>,
}

/// An all-to-all set of connections of one rank to every other rank of the job.
pub trait Transport {
    /// Short name: `tcp`, `verbs`.
    fn name(&self) -> &'static str;
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Host name of a rank, for reports and error messages.
    fn host_of(&self, rank: usize) -> &str;
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    /// Facts for report headers, in perftest's words (`Device`, `Mtu`, `Link type`, ...).
    fn details(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// One-sided RDMA write or read with `peer` (see [`OneSidedRole`]); only for transports whose
    /// [`Capabilities`] say so.
    fn one_sided(
        &mut self,
        peer: usize,
        bytes: usize,
        role: OneSidedRole,
        deadline: Instant,
    ) -> Result<OneSidedResult, TransportError> {
        let _ = (peer, bytes, role, deadline);
        Err(TransportError::Setup(format!(
            "the {} transport has no one-sided operations",
            self.name()
        )))
    }

    /// Make one-sided windows live in `mem` (GPU memory for `--use-cuda`) instead of host memory.
    /// Registers a probe window at once, so an unusable path fails here, and says which path works.
    fn use_window_memory(
        &mut self,
        mem: Box<dyn crate::verbs::WindowMemory>,
    ) -> Result<crate::verbs::ForeignPath, TransportError> {
        let _ = mem;
        Err(TransportError::Setup(format!(
            "the {} transport cannot reach GPU memory: --use-cuda needs RDMA (--transport verbs)",
            self.name()
        )))
    }

    /// Register `mem` (a GPU buffer) in place for [`Transport::exchange_direct`]; the transport
    /// keeps `mem`, and with it the memory, until [`Transport::release_region`]. Returns the
    /// region and how it was registered.
    fn register_region(
        &mut self,
        mem: Box<dyn crate::verbs::NicMemory>,
    ) -> Result<(RegionId, crate::verbs::ForeignPath), TransportError> {
        let _ = mem;
        Err(TransportError::Setup(format!(
            "the {} transport cannot move GPU memory without a copy: GPUDirect RDMA needs --transport verbs; \
             or add --gpu-staging",
            self.name()
        )))
    }

    /// Deregister a region (no-op for an unknown id).
    fn release_region(&mut self, region: RegionId) {
        let _ = region;
    }

    /// Progress zero-copy `ops` between registered regions until all complete, or fail once
    /// `deadline` has passed, naming the peer that stalled. Two ranks' first zero-copy batch with
    /// each other must list each other on both sides (it connects them).
    fn exchange_direct(&mut self, ops: &mut [DirectOp], deadline: Instant) -> Result<(), TransportError> {
        let _ = (ops, deadline);
        Err(TransportError::Setup(format!(
            "the {} transport has no zero-copy operations between registered regions",
            self.name()
        )))
    }

    /// Carry two-sided messages with the verbs SEND opcode (what perftest's ib_send_bw measures)
    /// instead of the transport's default (RDMA WRITE-with-immediate on verbs). Returns whether the
    /// transport has such a choice.
    fn use_send_opcode(&mut self, on: bool) -> bool {
        let _ = on;
        false
    }

    /// Progress all `ops` concurrently until every one has completed (each gets `done_at`), or fail
    /// once `deadline` has passed, naming the peer that stalled.
    fn exchange(&mut self, ops: &mut [Op<'_>], deadline: Instant) -> Result<(), TransportError>;
}
