//! The RDMA extension of a transport: one-sided windows (perftest's write and read tests), SEND
//! between registered windows on queue pairs of their own, and zero-copy transfers between
//! memory registered in place (GPUDirect RDMA), with the memory types those take.

use std::time::Instant;

use super::TransportError;

/// A region of memory registered with a transport for zero-copy transfers
/// ([`Rdma::register_region`]).
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

/// One operation of a zero-copy batch ([`Rdma::exchange_direct`]): the same matching rules
/// as [`super::Op`] (in post order per pair of ranks, lengths must agree), with the data moved by the
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
    /// Every queue pair's completions together, in time order.
    pub completions: Vec<f64>,
    /// With several queue pairs per test ([`Rdma::set_test_qps`]): each one's completions, in
    /// queue pair order (empty with one).
    pub per_qp: Vec<Vec<f64>>,
    /// Ping-pong round trips, seconds (leader only).
    pub round_trips: Vec<f64>,
}

/// Memory outside the transport, described as what it is, for the transport to register with
/// its NIC: the owner (a GPU, or its stand-in) says where the memory is; the transport chooses
/// how to register it.
#[derive(Debug)]
pub enum Memory {
    /// `len` bytes of host memory at `addr` (what stands in for a GPU in tests).
    Host { addr: u64, len: usize },
    /// `len` bytes of GPU memory at device address `addr`: a dma-buf of the allocation that
    /// holds it where the GPU driver exports one (or why not), registered by it first; else the
    /// device address itself, which a NIC can register where nvidia-peermem is loaded.
    Device {
        addr: u64,
        len: usize,
        dmabuf: Result<DmaBuf, String>,
        /// Whose memory, for messages: `GPU 0 (NVIDIA H200)`.
        owner: String,
    },
}

/// A dma-buf file descriptor exported by a GPU driver; `addr` lies `offset` bytes into it.
#[derive(Debug)]
pub struct DmaBuf {
    pub fd: std::os::fd::OwnedFd,
    pub offset: u64,
}

/// Memory outside the transport (GPU memory) that one-sided windows use instead of host buffers.
///
/// # Safety
/// Every range [`WindowMemory::memory`] describes must stay allocated for as long as this object
/// lives: the transport registers it with the NIC and keeps the object for the registration's life.
pub unsafe trait WindowMemory: Send {
    /// At least `len` bytes of this memory (grown where it is smaller).
    fn memory(&mut self, len: usize) -> Result<Memory, String>;
}

/// Memory allocated outside the transport (a GPU buffer) that a transport registers in place for
/// zero-copy transfers.
///
/// # Safety
/// The range [`NicMemory::memory`] describes must stay allocated for as long as this object lives:
/// the transport keeps the object for as long as the registration lives.
pub unsafe trait NicMemory: Send {
    /// Bytes to register.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// All of this memory.
    fn memory(&self) -> Memory;
}

/// How memory outside the verbs layer was registered with the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForeignPath {
    /// `ibv_reg_dmabuf_mr` on a dma-buf file descriptor exported by the GPU driver.
    DmaBuf,
    /// `ibv_reg_mr` on the device address, resolved by the nvidia-peermem kernel module.
    PeerMem,
    /// `ibv_reg_mr` on host memory standing in for GPU memory (tests only).
    HostStandIn,
}

impl ForeignPath {
    pub fn describe(self) -> &'static str {
        match self {
            ForeignPath::DmaBuf => "GPUDirect RDMA via dma-buf (ibv_reg_dmabuf_mr)",
            ForeignPath::PeerMem => "GPUDirect RDMA via nvidia-peermem (ibv_reg_mr on device memory)",
            ForeignPath::HostStandIn => "direct RDMA on host memory standing in for a GPU (tests only)",
        }
    }
}

/// What a transport with RDMA offers beyond two-sided messages (see [`super::Transport::rdma`]).
pub trait Rdma {
    /// One-sided RDMA write or read (or a SEND test) with `peer` (see [`OneSidedRole`]).
    fn one_sided(
        &mut self,
        peer: usize,
        bytes: usize,
        role: OneSidedRole,
        deadline: Instant,
    ) -> Result<OneSidedResult, TransportError>;

    /// Make one-sided windows live in `mem` (GPU memory for `--use-cuda`) instead of host memory.
    /// Registers a probe window at once, so an unusable path fails here, and says which path works.
    fn use_window_memory(&mut self, mem: Box<dyn WindowMemory>) -> Result<ForeignPath, TransportError>;

    /// Register `mem` (a GPU buffer) in place for [`Rdma::exchange_direct`]; the transport keeps
    /// `mem`, and with it the memory, until [`Rdma::release_region`]. Returns the region and how it
    /// was registered.
    fn register_region(&mut self, mem: Box<dyn NicMemory>) -> Result<(RegionId, ForeignPath), TransportError>;

    /// Deregister a region (no-op for an unknown id).
    fn release_region(&mut self, region: RegionId);

    /// Progress zero-copy `ops` between registered regions until all complete, or fail once
    /// `deadline` has passed, naming the peer that stalled. Two ranks' first zero-copy batch with
    /// each other must list each other on both sides (it connects them).
    fn exchange_direct(&mut self, ops: &mut [DirectOp], deadline: Instant) -> Result<(), TransportError>;

    /// Carry two-sided messages with the verbs SEND opcode (what perftest's ib_send_bw measures)
    /// instead of RDMA WRITE-with-immediate.
    fn use_send_opcode(&mut self, on: bool);

    /// Queue pairs per bandwidth test (perftest's `-q`, NCCL_IB_QPS_PER_CONNECTION): each of the
    /// `n` posts the test's `count` operations, at most `window` in flight on each, as perftest's
    /// multi-QP loop does; queue pair k of a pair's test carries flow label k + 1 (with n > 1), so
    /// on RoCE v2 each takes its own UDP source port, and so its own ECMP path, and a retest of
    /// the pair takes the same paths. Latency tests always use one. Both ends must set the same n.
    fn set_test_qps(&mut self, n: usize);

    /// Where a bandwidth test's queue pairs with `peer` go as RoCE v2 packets over IPv4: this
    /// rank's and the peer's addresses (their GIDs, IPv4-mapped) and each queue pair's UDP source
    /// port, from the flow label it carries (none: not RoCE v2 over IPv4, or the connection
    /// manager chose the flow labels).
    fn roce_v2_flows(&self, peer: usize) -> Option<RoceFlows> {
        let _ = peer;
        None
    }
}

/// A test's RoCE v2 flows with one peer ([`Rdma::roce_v2_flows`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoceFlows {
    pub local: std::net::Ipv4Addr,
    pub remote: std::net::Ipv4Addr,
    /// Queue pair k's UDP source port.
    pub sports: Vec<u16>,
}

/// The UDP source port of a RoCE v2 queue pair with flow label `fl`, as the kernel's
/// `rdma_flow_label_to_udp_sport` (include/rdma/ib_verbs.h) folds it: the label's low 14 bits
/// xored with its high 6, in the range from 0xc000 that RoCE v2 reserves.
pub fn roce_sport(fl: u32) -> u16 {
    let fl = fl & 0x000f_ffff;
    let low = (fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14);
    (low | 0xc000) as u16
}

/// The IPv4 address in an IPv4-mapped GID (`::ffff:a.b.c.d`, how RoCE v2 GIDs carry an IPv4
/// address).
pub fn gid_ipv4(gid: &[u8; 16]) -> Option<std::net::Ipv4Addr> {
    std::net::Ipv6Addr::from(*gid).to_ipv4_mapped()
}

#[cfg(test)]
mod roce_tests {
    use super::*;

    #[test]
    fn flow_labels_fold_into_roce_source_ports_as_the_kernel_does() {
        // Labels 1-4 (a -q 4 test): 0xc001-0xc004, as the Soft-RoCE VM test captures them.
        assert_eq!(
            (1..=4).map(roce_sport).collect::<Vec<_>>(),
            [0xc001, 0xc002, 0xc003, 0xc004]
        );
        // Low 14 bits 0x3fff, high 6 bits 0x3f: 0x3fff ^ 0x3f = 0x3fc0.
        assert_eq!(roce_sport(0xf_ffff), 0xc000 | 0x3fc0);
        // Label 0x4001: low 1, high 1: 1 ^ 1 = 0 -> 0xc000. Bits above 20 are not the label's.
        assert_eq!(roce_sport(0x4001), 0xc000);
        assert_eq!(roce_sport(0x10_0001), 0xc001);
    }

    #[test]
    fn only_ipv4_mapped_gids_give_an_address() {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[10, 80, 0, 10]);
        assert_eq!(gid_ipv4(&g), Some(std::net::Ipv4Addr::new(10, 80, 0, 10)));
        // A link-local RoCE v1/IB GID (fe80::...): none.
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        ll[15] = 1;
        assert_eq!(gid_ipv4(&ll), None);
    }
}
