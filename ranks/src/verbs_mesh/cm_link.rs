//! Connecting over the RDMA connection manager (`--rdma-cm`, perftest's `-R`): every rank listens
//! on its device's IP address, the listeners' addresses go round in one MPI allgather, and each
//! rank connects to every lower rank and accepts every higher one; the manager resolves the
//! route and moves the queue pairs to RTS, so no GID or queue pair number crosses MPI. Each
//! connection request and reply carries a small record (who is calling, the inbox to write to,
//! the MTU), and requests that do not carry this job's record are rejected. The pairwise tests'
//! own queue pairs connect the same way, through the same listener ([`CmMesh::link`]).

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

use super::*;
use crate::verbs::{CmEvent, CmEventKind, CmId, ConnParams, EventChannel};

/// Tokens of ids: the listener, a mesh connection to rank p's lane j (MESH + p x lanes + j), a
/// test link's (TEST + k).
const LISTENER: u64 = 1;
const MESH: u64 = 1 << 32;
const TEST: u64 = 2 << 32;
/// "MRCM", then the record's version.
const MAGIC: u32 = 0x4d52_434d;
const VERSION: u8 = 2;
/// How long one address or route resolution may take (ms).
const RESOLVE_MS: i32 = 5000;
/// Outstanding RDMA reads each way (perftest's -R asks for the device's maximum; 16 is what the
/// queue pairs connected by hand use).
const PARAMS: ConnParams = ConnParams { rd_atomic: 16 };

/// What a connection request or reply carries (28 bytes: within the 56 an InfiniBand/RoCE
/// request may carry after the connection manager's own header, and iWARP's MPA limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CmHello {
    /// What the connection is for: 0 the mesh, 1 a pairwise test's queue pair.
    pub kind: u8,
    /// Which of the mesh's queue pairs to this peer (0 .. lanes); 0 for a test.
    pub lane: u8,
    /// The caller's rank.
    pub rank: u32,
    /// The caller's inbox (address, rkey) for a mesh connection; zero for a test.
    pub addr: u64,
    pub rkey: u32,
    /// The caller's active MTU (IBV_MTU_* enum).
    pub mtu: u8,
    /// The number of ranks of the caller's job (a request from another job is rejected).
    pub size: u32,
}

impl CmHello {
    pub const LEN: usize = 28;

    pub fn to_bytes(self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = VERSION;
        b[5] = self.kind;
        b[6] = self.mtu;
        b[7] = self.lane;
        b[8..12].copy_from_slice(&self.rank.to_le_bytes());
        b[12..20].copy_from_slice(&self.addr.to_le_bytes());
        b[20..24].copy_from_slice(&self.rkey.to_le_bytes());
        b[24..28].copy_from_slice(&self.size.to_le_bytes());
        b
    }

    /// None for anything but this version's record (a stranger's, or a truncated one).
    pub fn from_bytes(b: &[u8]) -> Option<CmHello> {
        if b.len() < Self::LEN || b[0..4] != MAGIC.to_le_bytes() || b[4] != VERSION {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[12..20]);
        Some(CmHello {
            kind: b[5],
            mtu: b[6],
            lane: b[7],
            rank: u32_at(8),
            addr: u64::from_le_bytes(addr),
            rkey: u32_at(20),
            size: u32_at(24),
        })
    }
}

/// A listener's address as the allgather carries it (zeros where a rank's setup failed).
fn addr_bytes(a: Option<SocketAddrV4>) -> [u8; 6] {
    let mut b = [0u8; 6];
    if let Some(a) = a {
        b[..4].copy_from_slice(&a.ip().octets());
        b[4..].copy_from_slice(&a.port().to_be_bytes());
    }
    b
}

fn addr_from(b: &[u8]) -> Option<SocketAddrV4> {
    let ip = Ipv4Addr::new(b[0], b[1], b[2], b[3]);
    let port = u16::from_be_bytes([b[4], b[5]]);
    (port != 0).then_some(SocketAddrV4::new(ip, port))
}

/// The connection manager's side of a mesh: the channel, this rank's listener and address, every
/// rank's listener, and connection requests that arrived before they were waited for.
pub(super) struct CmMesh {
    chan: EventChannel,
    listener: CmId,
    ip: Ipv4Addr,
    addrs: Vec<Option<SocketAddrV4>>,
    /// Test-link requests not yet claimed: (caller's rank, its id).
    stash: VecDeque<(usize, CmId)>,
    next_token: u64,
    size: usize,
    tos: u8,
}

/// Local setup for a connection-manager mesh: the listener, and the device it picked.
pub(super) struct CmLocal {
    pub cm: CmMesh,
    pub ctx: Context,
}

/// The IPv4 address an iWARP device answers on: the first of the interface whose MAC its GID
/// holds.
fn iwarp_ipv4(choice: &Choice, sysfs_root: &std::path::Path) -> Result<Ipv4Addr, String> {
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&choice.gid.raw[..6]);
    let name = crate::netif::interface_with_mac(sysfs_root, mac).ok_or_else(|| {
        format!(
            "{}: no network interface has the MAC address of its GID ({})",
            choice.device,
            choice.describe()
        )
    })?;
    crate::netif::local_addresses()
        .map_err(|e| e.to_string())?
        .into_iter()
        .find_map(|a| match a.ip {
            std::net::IpAddr::V4(v4) if a.name == name => Some(v4),
            _ => None,
        })
        .ok_or_else(|| {
            format!(
                "{}: its network interface {name} has no IPv4 address; give it one",
                choice.device
            )
        })
}

/// Listen on the IPv4 address of this rank's chosen GID (RoCE v2), or of an iWARP device's
/// interface, port chosen by the system.
pub(super) fn listen(
    choice: &Choice,
    n: usize,
    qos: crate::verbs::Qos,
    sysfs_root: &std::path::Path,
) -> Result<CmLocal, String> {
    if qos.sl != 0 {
        return Err(format!(
            "--sl {} with --rdma-cm: the connection manager takes the service level from the path it resolves; \
             drop --sl (or -R, to set it by hand)",
            qos.sl
        ));
    }
    let tos = qos.traffic_class;
    let ip = if choice.iwarp {
        Some(iwarp_ipv4(choice, sysfs_root)?)
    } else {
        choice.gid.ipv4()
    };
    let ip = ip.ok_or_else(|| {
        format!(
            "--rdma-cm needs an IPv4 address: {} GID {} is not IPv4-mapped (choose a RoCE v2 IPv4 GID with -x N; see meshrun devices)",
            choice.device, choice.gid.index
        )
    })?;
    if ip.is_loopback() {
        return Err(format!(
            "--rdma-cm: GID {} of {} is a loopback address ({ip}), which the connection manager binds to no device; \
             use an RDMA device on a real network interface (see meshrun devices)",
            choice.gid.index, choice.device
        ));
    }
    let chan = EventChannel::new().map_err(|e| e.to_string())?;
    let listener = chan.create_id(LISTENER).map_err(|e| e.to_string())?;
    listener
        .bind(SocketAddrV4::new(ip, 0))
        .map_err(|e| format!("{ip}: {e}"))?;
    listener.listen(n.clamp(16, 1024) as i32).map_err(|e| e.to_string())?;
    let ctx = listener.context().map_err(|e| e.to_string())?;
    if ctx.name() != choice.device {
        return Err(format!(
            "--rdma-cm: {ip} (GID {} of {}) belongs to RDMA device {} for the connection manager; choose that device or a GID of {}",
            choice.gid.index,
            choice.device,
            ctx.name(),
            choice.device
        ));
    }
    Ok(CmLocal {
        cm: CmMesh {
            chan,
            listener,
            ip,
            addrs: Vec::new(),
            stash: VecDeque::new(),
            next_token: 0,
            size: n,
            tos,
        },
        ctx,
    })
}

/// Every rank's listener, by one MPI allgather (None where a rank's setup failed).
pub(super) fn exchange_addrs(world: &World, local: Option<&CmLocal>) -> Vec<Option<SocketAddrV4>> {
    let mine = local.map(|l| SocketAddrV4::new(l.cm.ip, l.cm.listener.local_port()));
    let all = world.all_gather_bytes(&addr_bytes(mine), "exchanging rdma_cm listener addresses");
    all.chunks(6).map(addr_from).collect()
}

impl CmMesh {
    pub fn set_addrs(&mut self, addrs: Vec<Option<SocketAddrV4>>) {
        self.addrs = addrs;
    }

    fn event(&self, deadline: Instant, what: &str) -> Result<CmEvent, String> {
        self.chan.next(deadline, what).map_err(|e| e.to_string())
    }

    fn failed(ev: &CmEvent, peer: usize, host: &str) -> String {
        format!(
            "rdma_cm connection to rank {peer} ({host}) failed: {:?} (status {}){}",
            ev.kind,
            ev.status,
            match ev.kind {
                CmEventKind::Rejected => " (is the peer listening, and on the same job? a firewall or another job's port?)",
                CmEventKind::Unreachable | CmEventKind::AddrError | CmEventKind::RouteError =>
                    " (is the peer's IP address reachable from this device? check the routes and the RoCE GIDs: meshrun devices)",
                _ => "",
            }
        )
    }

    /// Start an active connection to rank `peer`'s listener with an id of token `token`.
    fn start(&self, peer: usize, token: u64) -> Result<CmId, String> {
        let dst = self
            .addrs
            .get(peer)
            .copied()
            .flatten()
            .ok_or_else(|| format!("no rdma_cm address for rank {peer}"))?;
        let id = self.chan.create_id(token).map_err(|e| e.to_string())?;
        if self.tos != 0 {
            id.set_tos(self.tos).map_err(|e| e.to_string())?;
        }
        id.set_ack_timeout(14);
        id.resolve_addr(self.ip, dst, RESOLVE_MS)
            .map_err(|e| format!("{dst}: {e}"))?;
        Ok(id)
    }

    /// Connect the mesh: `lanes` connections to every other rank (this rank calls the lower ranks
    /// and answers the higher ones), each queue pair made by `make` (peer, lane, id), which also
    /// returns what to send the peer. Returns, per peer, its lanes in order: the queue pair in
    /// RTS and the peer's record; the first failure ends it.
    #[allow(clippy::type_complexity)]
    pub fn connect_mesh(
        &mut self,
        rank: usize,
        hosts: &[String],
        lanes: usize,
        deadline: Instant,
        make: &mut dyn FnMut(usize, usize, &CmId) -> Result<(QueuePair<Init>, CmHello), String>,
    ) -> Result<Vec<Option<Vec<(QueuePair<Rts>, CmHello)>>>, String> {
        let n = self.size;
        let lanes = lanes.max(1);
        // Connection c is peer c / lanes, lane c mod lanes.
        let conns = n * lanes;
        let mut pending: Vec<Option<(QueuePair<Init>, CmHello)>> = (0..conns).map(|_| None).collect();
        let mut done: Vec<Option<(QueuePair<Rts>, CmHello)>> = (0..conns).map(|_| None).collect();
        // Active ids awaiting their queue pair (address and route still resolving).
        let mut calling: Vec<Option<CmId>> = (0..conns).map(|_| None).collect();
        for (c, slot) in calling.iter_mut().enumerate().take(rank * lanes) {
            *slot = Some(self.start(c / lanes, MESH + c as u64)?);
        }
        let mut left = (n - 1) * lanes;
        while left > 0 {
            let ev = match self.chan.next(deadline, "rdma_cm mesh connections") {
                Ok(ev) => ev,
                // Name who never connected: the peers this rank called and those it waited for.
                Err(crate::verbs::VerbsError::Timeout { waited, .. }) => {
                    let missing: Vec<String> = (0..n)
                        .filter(|&p| p != rank)
                        .filter_map(|p| {
                            let short = (0..lanes).filter(|j| done[p * lanes + j].is_none()).count();
                            let how = if p < rank { "called" } else { "waited for" };
                            let of = if lanes > 1 {
                                format!(", {short} of {lanes} queue pairs")
                            } else {
                                String::new()
                            };
                            (short > 0).then(|| format!("rank {p} ({}, {how}{of})", hosts[p]))
                        })
                        .collect();
                    return Err(format!(
                        "rdma_cm: {left} of {} connections not established after {waited:.1?}: {}",
                        (n - 1) * lanes,
                        missing.join(", ")
                    ));
                }
                Err(e) => return Err(e.to_string()),
            };
            if ev.kind == CmEventKind::ConnectRequest {
                let Some(id) = ev.new_id else { continue };
                let hello = CmHello::from_bytes(&ev.private_data);
                let conn = |h: &CmHello| h.rank as usize * lanes + h.lane as usize;
                match hello {
                    Some(h)
                        if h.kind == 0
                            && (h.rank as usize) > rank
                            && (h.rank as usize) < n
                            && h.size as usize == n
                            && (h.lane as usize) < lanes
                            && pending[conn(&h)].is_none()
                            && done[conn(&h)].is_none() =>
                    {
                        let (p, c) = (h.rank as usize, conn(&h));
                        id.set_token(MESH + c as u64);
                        let (qp, mine) = make(p, h.lane as usize, &id)?;
                        id.accept(&mine.to_bytes(), PARAMS)
                            .map_err(|e| format!("accepting rank {p} ({}): {e}", hosts[p]))?;
                        pending[c] = Some((qp, h));
                    }
                    Some(h) if h.kind == 1 => {
                        // A test link's request come early (this rank is still connecting): kept.
                        id.set_token(0);
                        self.stash.push_back((h.rank as usize, id));
                    }
                    _ => {
                        let _ = id.reject();
                    }
                }
                continue;
            }
            let c = match ev.token.checked_sub(MESH) {
                Some(c) if (c as usize) < conns && ev.token < TEST => c as usize,
                _ => continue,
            };
            let (p, lane) = (c / lanes, c % lanes);
            match ev.kind {
                CmEventKind::AddrResolved => {
                    if let Some(id) = &calling[c] {
                        id.resolve_route(RESOLVE_MS).map_err(|e| e.to_string())?;
                    }
                }
                CmEventKind::RouteResolved => {
                    if let Some(id) = calling[c].take() {
                        let (qp, mine) = make(p, lane, &id)?;
                        id.connect(&mine.to_bytes(), PARAMS)
                            .map_err(|e| format!("connecting to rank {p} ({}): {e}", hosts[p]))?;
                        pending[c] = Some((qp, mine));
                    }
                }
                CmEventKind::Established => {
                    let Some((qp, h)) = pending[c].take() else { continue };
                    // The caller learns the peer's record from the reply; the answerer had it
                    // in the request.
                    let theirs = if p < rank {
                        CmHello::from_bytes(&ev.private_data)
                            .filter(|t| t.lane as usize == lane)
                            .ok_or_else(|| format!("rank {p} ({}) answered without meshrun's record", hosts[p]))?
                    } else {
                        h
                    };
                    let qp = qp.established().map_err(|e| e.to_string())?;
                    done[c] = Some((qp, theirs));
                    left -= 1;
                }
                CmEventKind::Disconnected | CmEventKind::Other(_) => {}
                _ => return Err(Self::failed(&ev, p, &hosts[p])),
            }
        }
        let mut by_peer: Vec<Option<Vec<(QueuePair<Rts>, CmHello)>>> = Vec::with_capacity(n);
        let mut it = done.into_iter();
        for _ in 0..n {
            let mine: Vec<_> = it.by_ref().take(lanes).flatten().collect();
            by_peer.push((mine.len() == lanes).then_some(mine));
        }
        Ok(by_peer)
    }

    /// One pairwise test's queue pair to `peer`, connected through the connection manager: the
    /// higher rank calls, the lower answers (a request that came early is taken from the stash).
    /// `make` builds the queue pair on the id (and posts its receives) before it connects.
    pub fn link(
        &mut self,
        rank: usize,
        peer: usize,
        host: &str,
        mtu: u8,
        deadline: Instant,
        make: &mut dyn FnMut(&CmId) -> Result<QueuePair<Init>, String>,
    ) -> Result<QueuePair<Rts>, String> {
        self.next_token += 1;
        let token = TEST + (self.next_token & 0xffff_ffff);
        let hello = CmHello {
            kind: 1,
            lane: 0,
            rank: rank as u32,
            addr: 0,
            rkey: 0,
            mtu,
            size: self.size as u32,
        };
        let mut pending: Option<QueuePair<Init>> = None;
        let mut calling = None;
        if rank > peer {
            calling = Some(self.start(peer, token)?);
        } else if let Some(i) = self.stash.iter().position(|(r, _)| *r == peer) {
            let (_, id) = self.stash.remove(i).ok_or("stash")?;
            pending = Some(self.answer(&id, token, &hello, make)?);
        }
        loop {
            let ev = self.event(
                deadline,
                &format!("an rdma_cm test connection with rank {peer} ({host})"),
            )?;
            if ev.kind == CmEventKind::ConnectRequest {
                let Some(id) = ev.new_id else { continue };
                match CmHello::from_bytes(&ev.private_data) {
                    Some(h)
                        if h.kind == 1
                            && h.size as usize == self.size
                            && h.rank as usize == peer
                            && rank < peer
                            && pending.is_none() =>
                    {
                        pending = Some(self.answer(&id, token, &hello, make)?);
                    }
                    Some(h) if h.kind == 1 && h.size as usize == self.size => {
                        self.stash.push_back((h.rank as usize, id));
                    }
                    _ => {
                        let _ = id.reject();
                    }
                }
                continue;
            }
            if ev.token != token {
                continue;
            }
            match ev.kind {
                CmEventKind::AddrResolved => {
                    if let Some(id) = &calling {
                        id.resolve_route(RESOLVE_MS).map_err(|e| e.to_string())?;
                    }
                }
                CmEventKind::RouteResolved => {
                    if let Some(id) = calling.take() {
                        let qp = make(&id)?;
                        id.connect(&hello.to_bytes(), PARAMS)
                            .map_err(|e| format!("connecting a test queue pair to rank {peer} ({host}): {e}"))?;
                        pending = Some(qp);
                    }
                }
                CmEventKind::Established => {
                    if let Some(qp) = pending.take() {
                        return qp.established().map_err(|e| e.to_string());
                    }
                }
                CmEventKind::Disconnected | CmEventKind::Other(_) => {}
                _ => return Err(Self::failed(&ev, peer, host)),
            }
        }
    }

    fn answer(
        &self,
        id: &CmId,
        token: u64,
        hello: &CmHello,
        make: &mut dyn FnMut(&CmId) -> Result<QueuePair<Init>, String>,
    ) -> Result<QueuePair<Init>, String> {
        id.set_token(token);
        let qp = make(id)?;
        id.accept(&hello.to_bytes(), PARAMS).map_err(|e| e.to_string())?;
        Ok(qp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_strangers_are_refused() {
        let h = CmHello {
            kind: 0,
            lane: 3,
            rank: 4095,
            addr: 0x7f00_dead_beef_0000,
            rkey: 0x1234_5678,
            mtu: 5,
            size: 4096,
        };
        let b = h.to_bytes();
        assert_eq!(CmHello::from_bytes(&b), Some(h));
        // iWARP and RoCE may pad private data: longer is fine, shorter is not.
        let mut long = b.to_vec();
        long.extend_from_slice(&[0; 28]);
        assert_eq!(CmHello::from_bytes(&long), Some(h));
        assert_eq!(CmHello::from_bytes(&b[..CmHello::LEN - 1]), None);
        let mut other = b;
        other[0] ^= 1;
        assert_eq!(CmHello::from_bytes(&other), None, "another magic");
        let mut v1 = b;
        v1[4] = 1;
        assert_eq!(CmHello::from_bytes(&v1), None, "another version (1 had no lanes)");
        const { assert!(CmHello::LEN <= 56, "fits an InfiniBand/RoCE request's private data") };
    }

    #[test]
    fn listener_addresses_round_trip_and_a_failed_rank_is_none() {
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 2, 0, 1), 40_001);
        assert_eq!(addr_from(&addr_bytes(Some(a))), Some(a));
        assert_eq!(addr_from(&addr_bytes(None)), None);
    }
}
