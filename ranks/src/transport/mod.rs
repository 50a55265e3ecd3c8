//! The operations every transport offers, and their errors.
//!
//! Collectives and pairwise tests are written against [`Transport`]: a batch of two-sided operations
//! (send a buffer to a peer, receive a buffer from a peer) is posted and progressed concurrently
//! until all complete or a deadline passes. Sends and receives between one pair of ranks match in
//! the order they are posted, across batches, and the lengths must agree. What only RDMA can do
//! (one-sided windows, zero-copy transfers between registered GPU memory, perftest's test links)
//! is the [`Rdma`] extension, reached through [`Transport::rdma`].

pub mod rdma;
pub mod streams;

pub use rdma::{
    DirectKind, DirectOp, DmaBuf, ForeignPath, Memory, NicMemory, OneSidedOp, OneSidedResult, OneSidedRole, Rdma,
    RegionId, RoceFlows, Span, WindowMemory,
};
pub use streams::{StreamSet, Streams};

use std::time::{Duration, Instant};

/// What one operation does.
pub enum OpKind<'a> {
    Send(&'a [u8]),
    Recv(&'a mut [u8]),
    /// Receive a message of this many bytes and drop its payload: a bandwidth test streaming
    /// more messages at once than any receive buffer would hold.
    Sink(usize),
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
    /// Receive a `len`-byte message from `peer` and drop its payload ([`OpKind::Sink`]).
    pub fn sink(peer: usize, len: usize) -> Self {
        Op {
            peer,
            kind: OpKind::Sink(len),
            done_at: None,
        }
    }
    pub fn len(&self) -> usize {
        match &self.kind {
            OpKind::Send(b) => b.len(),
            OpKind::Recv(b) => b.len(),
            OpKind::Sink(n) => *n,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
    /// The ranks or the flags ask for something this transport or setup cannot do.
    #[error("{0}")]
    Setup(String),
    /// A fault of this rank's own device or operating system (a NIC operation that failed
    /// locally), not of a peer; the message names the rank and host.
    #[error("{0}")]
    Local(String),
}

/// Constructors that name both ends: `rank` is this rank, `hosts` every rank's host.
impl TransportError {
    pub fn timeout(rank: usize, hosts: &[String], peer: usize, waited: Duration, what: String) -> Self {
        TransportError::Timeout {
            rank,
            host: hosts[rank].clone(),
            peer,
            peer_host: hosts[peer].clone(),
            waited,
            what,
        }
    }
    pub fn peer_closed(rank: usize, hosts: &[String], peer: usize, what: String) -> Self {
        TransportError::PeerClosed {
            rank,
            host: hosts[rank].clone(),
            peer,
            peer_host: hosts[peer].clone(),
            what,
        }
    }
    pub fn io(rank: usize, hosts: &[String], peer: usize, what: String, source: std::io::Error) -> Self {
        TransportError::Io {
            rank,
            host: hosts[rank].clone(),
            peer,
            peer_host: hosts[peer].clone(),
            what,
            source,
        }
    }
    pub fn length_mismatch(rank: usize, hosts: &[String], peer: usize, expected: usize, got: u64) -> Self {
        TransportError::LengthMismatch {
            rank,
            host: hosts[rank].clone(),
            peer,
            peer_host: hosts[peer].clone(),
            expected,
            got,
        }
    }
}

/// Which transport carries the mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    Tcp,
    Verbs,
}

impl TransportKind {
    /// The name in reports and messages: `tcp`, `verbs`.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Verbs => "verbs",
        }
    }
    /// Whether transports of this kind have the [`Rdma`] extension.
    pub fn has_rdma(self) -> bool {
        self == TransportKind::Verbs
    }
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// This rank's end of the mesh as the transport built it, so callers read the facts instead of
/// deriving them again (reopening the device, resolving the address once more).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Endpoint {
    /// The RDMA device (verbs).
    pub device: Option<String>,
    /// Its port (verbs).
    pub port: Option<u8>,
    /// The port's active MTU, bytes (verbs; TCP's comes from the interface).
    pub mtu: Option<u32>,
    /// The address the mesh listens on (TCP).
    pub address: Option<std::net::IpAddr>,
}

/// An all-to-all set of connections of one rank to every other rank of the job.
pub trait Transport {
    fn kind(&self) -> TransportKind;
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Host name of a rank, for reports and error messages.
    fn host_of(&self, rank: usize) -> &str;
    /// Facts for report headers, in perftest's words (`Device`, `Mtu`, `Link type`, ...).
    fn details(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// This rank's end of the mesh: device, port, MTU, address.
    fn endpoint(&self) -> Endpoint {
        Endpoint::default()
    }
    /// Progress all `ops` concurrently until every one has completed (each gets `done_at`), or fail
    /// once `deadline` has passed, naming the peer that stalled. With `work`, run it once while the
    /// ops are in flight: after they are posted and have made what progress they can without
    /// waiting, before the wait for the rest (how a pipelined collective reduces slice k while
    /// slice k+1 moves). `work` must not touch the ops' buffers (the borrows see to it). The one
    /// method a transport implements; [`Transport::exchange`] and
    /// [`Transport::exchange_overlapped`] call it.
    fn exchange_with(
        &mut self,
        ops: &mut [Op<'_>],
        deadline: Instant,
        work: Option<&mut dyn FnMut()>,
    ) -> Result<(), TransportError>;
    /// All `ops` to completion by `deadline` ([`Transport::exchange_with`] without work).
    fn exchange(&mut self, ops: &mut [Op<'_>], deadline: Instant) -> Result<(), TransportError> {
        self.exchange_with(ops, deadline, None)
    }
    /// All `ops` to completion by `deadline`, running `work` once while they are in flight.
    fn exchange_overlapped(
        &mut self,
        ops: &mut [Op<'_>],
        deadline: Instant,
        work: &mut dyn FnMut(),
    ) -> Result<(), TransportError> {
        self.exchange_with(ops, deadline, Some(work))
    }
    /// What only RDMA can do; None for transports without it (TCP).
    fn rdma(&mut self) -> Option<&mut dyn Rdma> {
        None
    }
    /// A test's connections of its own ([`Streams`]); None for transports without them (verbs).
    fn streams(&mut self) -> Option<&mut dyn Streams> {
        None
    }
}

impl dyn Transport + '_ {
    /// The RDMA extension, or an error saying this transport `cannot` (what it lacks, and the fix).
    pub fn require_rdma(&mut self, cannot: &str) -> Result<&mut dyn Rdma, TransportError> {
        let kind = self.kind();
        self.rdma()
            .ok_or_else(|| TransportError::Setup(format!("the {kind} transport {cannot}")))
    }
}
