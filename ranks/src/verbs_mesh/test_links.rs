//! meshrun's own tests on queue pairs of their own (test links), as perftest measures but not
//! perftest's code: a test link per measurement (connected by hand or through the connection
//! manager), the one-sided windows, and which loop a role runs. The bandwidth loops are in
//! `bandwidth.rs`, the latency ping-pongs in `latency.rs`.

use super::*;
use crate::wire::{Record, WindowKey};

mod bandwidth;
mod latency;

use bandwidth::result_of;

/// Send requests per completion in the pairwise bandwidth tests, perftest's default (--cq-mod).
pub(super) const CQ_MODERATION: u64 = 100;

/// Spin loops read the clock (for their deadline) once per this many empty polls.
const CLOCK_EVERY: u32 = 64;

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
        let info = super::mtu::lowered(info, self.mtu_cap);
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
}
