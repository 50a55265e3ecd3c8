//! Zero-copy transfers between registered regions over the verbs mesh: GPU buffers under
//! GPUDirect RDMA, where the NIC reads the sender's device memory and writes the receiver's, and
//! no CPU copy happens on either side. A rendezvous, as NCCL's IB transport and UCX's rndv
//! protocol do it: the receiver sends a clear-to-send naming its buffer (address, rkey, length)
//! over the mesh's two-sided path; the sender RDMA-writes its data straight into that buffer, the
//! last write carrying an immediate (the sender's length) that completes a receive on the
//! receiver. Each pair of ranks gets a queue pair of its own for the data, connected on first use,
//! so the data never consumes the receives of the mesh's inbox; with several queue pairs per peer
//! (`-q`), one per lane, transfer t between two ranks riding lane t mod lanes whole (as NCCL with
//! its default NCCL_IB_SPLIT_DATA_ON_QPS=0), each lane's receives matched in its own order.

use std::collections::VecDeque;
use std::time::Instant;

use super::test_links::TestLink;
use super::{decode, idle_wait, wr_id, VerbsMesh, WrKind};
use crate::transport::{DirectKind, DirectOp, Op, RegionId, TransportError};
use crate::transport::{ForeignPath, NicMemory};
use crate::verbs::{Access, Completion, ForeignRegion, MemoryRegion, Registered, SendOp};
use crate::wire::ClearToSend;

/// Work requests in flight on one pair's data queue pair, and receives kept posted on it: the
/// most receives one batch may hold from one peer.
const DEPTH: usize = 64;
/// Largest RDMA write posted (RC allows 2 GiB); longer transfers are split.
const FRAGMENT: usize = 1 << 30;
/// Bytes of a clear-to-send: address, rkey, length.
const CTS_BYTES: usize = 16;

/// One pair's data queue pairs (one per lane), and the region their receives point into (a
/// WRITE-with-immediate consumes a receive but writes nothing into it).
struct Link {
    lanes: Vec<TestLink>,
    sink: MemoryRegion,
}

/// The zero-copy state of a mesh.
#[derive(Default)]
pub(super) struct Direct {
    links: Vec<Option<Link>>,
    regions: Vec<Option<ForeignRegion>>,
    /// Per peer: transfers sent to it and received from it so far; the next one takes lane
    /// count mod lanes, on both ends alike.
    sent: Vec<u64>,
    received: Vec<u64>,
}

/// Per-op progress of one batch.
#[derive(Clone, Copy, Default)]
struct OpProgress {
    /// The peer's receive buffer (sends only): address, rkey.
    remote: (u64, u32),
    /// The lane (data queue pair) the transfer rides.
    lane: usize,
    posted: usize,
    frags: usize,
    outstanding: usize,
    /// Its clear-to-send has arrived (sends only).
    cleared: bool,
    /// The receiver posted another length: send only the immediate.
    mismatched: bool,
}

fn cts(addr: u64, rkey: u32, len: u32) -> [u8; CTS_BYTES] {
    ClearToSend { addr, rkey, len }.to_array()
}

fn uncts(b: &[u8; CTS_BYTES]) -> (u64, u32, u32) {
    let c = ClearToSend::from_array(b);
    (c.addr, c.rkey, c.len)
}

/// Writes a transfer of `len` bytes takes (a zero-byte transfer still sends its immediate).
fn fragments(len: usize) -> usize {
    len.div_ceil(FRAGMENT).max(1)
}

impl VerbsMesh {
    pub(super) fn register_direct(
        &mut self,
        mem: Box<dyn NicMemory>,
    ) -> Result<(RegionId, ForeignPath), TransportError> {
        if self.iwarp {
            return Err(TransportError::Setup(format!(
                "rank {} ({}): zero-copy transfers between registered regions signal with RDMA write-with-immediate, \
                 which iWARP ({}) does not have; add --gpu-staging to copy through host memory",
                self.rank, self.hosts[self.rank], self.choice.device
            )));
        }
        // Peers write into receive buffers; nobody reads a region remotely.
        let access = Access::REMOTE_WRITE;
        let region = self.pd.register_nic_memory(mem, access).map_err(|e| {
            TransportError::Setup(format!(
                "rank {} ({}): {e}; or add --gpu-staging to copy through host memory",
                self.rank, self.hosts[self.rank]
            ))
        })?;
        let path = region.path();
        let regions = &mut self.direct.regions;
        let id = match regions.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                regions.push(None);
                regions.len() - 1
            }
        };
        regions[id] = Some(region);
        Ok((id, path))
    }

    pub(super) fn release_direct(&mut self, id: RegionId) {
        if let Some(r) = self.direct.regions.get_mut(id) {
            *r = None;
        }
    }

    fn region(&self, id: RegionId) -> Option<&ForeignRegion> {
        self.direct.regions.get(id)?.as_ref()
    }

    /// Check a batch before anything is posted: peers, spans inside their regions, lengths, and
    /// at most [`DEPTH`] receives from one peer.
    fn check_direct(&self, ops: &[DirectOp]) -> Result<(), TransportError> {
        let mut recvs = vec![0usize; self.size];
        for op in ops {
            if op.peer >= self.size || op.peer == self.rank {
                return Err(TransportError::BadPeer {
                    rank: self.rank,
                    peer: op.peer,
                    size: self.size,
                });
            }
            let s = op.span();
            let len = self.region(s.region).map(|r| r.region_len());
            if len.is_none_or(|len| s.off.checked_add(s.len).is_none_or(|end| end > len)) {
                return Err(TransportError::Setup(format!(
                    "rank {}: zero-copy bytes {}..{} are outside region {} ({})",
                    self.rank,
                    s.off,
                    s.off.saturating_add(s.len),
                    s.region,
                    len.map_or("not registered".to_string(), |l| format!("{l} bytes")),
                )));
            }
            if s.len > u32::MAX as usize {
                return Err(TransportError::Setup(format!(
                    "rank {}: a {}-byte transfer is over the 4 GiB limit of the verbs transport",
                    self.rank, s.len
                )));
            }
            if let DirectKind::Recv(_) = op.kind {
                recvs[op.peer] += 1;
                if recvs[op.peer] > DEPTH {
                    return Err(TransportError::Setup(format!(
                        "rank {}: more than {DEPTH} zero-copy receives from rank {} in one batch",
                        self.rank, op.peer
                    )));
                }
            }
        }
        Ok(())
    }

    /// Connect the data queue pairs this batch needs, in ascending peer order: every rank walks
    /// its pairs in one global order, so the blocking endpoint swaps cannot wait in a cycle.
    fn direct_links(&mut self, peers: &[usize], deadline: Instant) -> Result<(), TransportError> {
        if self.direct.links.len() < self.size {
            self.direct.links.resize_with(self.size, || None);
            self.direct.sent.resize(self.size, 0);
            self.direct.received.resize(self.size, 0);
        }
        let lanes = self.lanes.max(1);
        for &p in peers {
            if self.direct.links[p].is_some() {
                continue;
            }
            let sink = self
                .pd
                .register(64, Access::LOCAL_WRITE)
                .map_err(|e| self.verbs_err(e))?;
            let mut links = Vec::with_capacity(lanes);
            for lane in 0..lanes {
                // Several lanes: lane k carries flow label k + 1, as the mesh's own queue pairs.
                let flow_label = if lanes > 1 { lane as u32 + 1 } else { 0 };
                links.push(self.test_link(
                    p,
                    DEPTH as u32,
                    deadline,
                    &mut |qp| (0..DEPTH).try_for_each(|_| qp.post_recv(&sink, 0, 64, wr_id(p, WrKind::DirectImm, 0))),
                    flow_label,
                )?);
            }
            self.direct.links[p] = Some(Link { lanes: links, sink });
        }
        Ok(())
    }

    pub(super) fn exchange_direct_ops(
        &mut self,
        ops: &mut [DirectOp],
        deadline: Instant,
    ) -> Result<(), TransportError> {
        let start = Instant::now();
        self.check_direct(ops)?;
        // The peers of this batch, ascending.
        let mut peers: Vec<usize> = ops.iter().map(|o| o.peer).collect();
        peers.sort_unstable();
        peers.dedup();
        self.direct_links(&peers, deadline)?;
        for op in ops.iter_mut() {
            op.done_at = None;
        }
        self.send_clear_to_sends(ops, deadline)?;
        let mut b = DirectBatch::new(ops, peers, self.size, self.lanes.max(1), &mut self.direct.received);
        let mut comps: Vec<Completion> = Vec::with_capacity(32);
        let mut idle = 0u32;
        while b.remaining > 0 {
            let cleared = self.take_clear_to_sends(&mut b, ops, &mut comps)?;
            let posted = self.post_writes(&mut b, ops)?;
            if let Some((peer, theirs, mine)) = b.mismatch {
                // The immediate that tells the receiver is posted; this side stops here.
                return Err(TransportError::Setup(format!(
                    "rank {} ({}): a {mine}-byte zero-copy send to rank {peer} ({}), which posted a {theirs}-byte \
                     receive for it; are both ranks running the same command?",
                    self.rank, self.hosts[self.rank], self.hosts[peer]
                )));
            }
            let completed = self.reap_direct(&mut b, ops, &mut comps)?;
            if cleared || posted || completed {
                idle = 0;
                continue;
            }
            if Instant::now() >= deadline {
                return Err(self.direct_stalled(&b, ops, start));
            }
            idle += 1;
            idle_wait(idle, false);
        }
        Ok(())
    }

    /// Step 1, clear-to-send: each receive names its buffer to its sender, all at once, over the
    /// mesh's two-sided path (matched in post order per pair, as every two-sided message).
    fn send_clear_to_sends(&mut self, ops: &[DirectOp], deadline: Instant) -> Result<(), TransportError> {
        let outs: Vec<(usize, [u8; CTS_BYTES])> = ops
            .iter()
            .filter_map(|o| match o.kind {
                DirectKind::Recv(s) => self
                    .region(s.region)
                    .map(|r| (o.peer, cts(r.addr() + s.off as u64, r.rkey(), s.len as u32))),
                DirectKind::Send(_) => None,
            })
            .collect();
        let mut ctl: Vec<Op<'_>> = outs.iter().map(|(p, b)| Op::send(*p, b)).collect();
        self.exchange_ops(&mut ctl, deadline, None)
    }

    /// Step 2, clear-to-sends that have arrived: each send may go as soon as its own is in (a peer may
    /// post the matching receives one batch at a time, a chain forwarding slice by slice). A
    /// length that differs from the send's is sent on as the immediate alone (no data), so both
    /// ends fail naming the two lengths instead of one waiting out its deadline.
    fn take_clear_to_sends(
        &mut self,
        b: &mut DirectBatch,
        ops: &[DirectOp],
        comps: &mut Vec<Completion>,
    ) -> Result<bool, TransportError> {
        let mut moved = false;
        for &p in &b.peers {
            while let Some(&i) = b.waiting[p].front() {
                let mut raw = [0u8; CTS_BYTES];
                if !self.try_recv_small(p, &mut raw, comps)? {
                    break;
                }
                b.waiting[p].pop_front();
                moved = true;
                let (addr, rkey, theirs) = uncts(&raw);
                let len = ops[i].span().len;
                let s = &mut b.st[i];
                // Sends clear in the order the peer posted its receives, which is this rank's
                // send order: the t-th transfer to the peer takes lane t mod lanes on both ends.
                s.lane = (self.direct.sent[p] % b.lanes as u64) as usize;
                self.direct.sent[p] += 1;
                s.remote = (addr, rkey);
                s.cleared = true;
                s.frags = fragments(len);
                if theirs as usize != len {
                    s.frags = 1;
                    s.mismatched = true;
                    b.mismatch.get_or_insert((p, theirs as usize, len));
                }
            }
        }
        Ok(moved)
    }

    /// Step 3: post what each link's send queue has room for: the fragments of cleared sends, the last
    /// one carrying the immediate.
    fn post_writes(&mut self, b: &mut DirectBatch, ops: &[DirectOp]) -> Result<bool, TransportError> {
        let mut moved = false;
        for (i, op) in ops.iter().enumerate() {
            let DirectKind::Send(span) = op.kind else { continue };
            while b.st[i].cleared && b.st[i].posted < b.st[i].frags && b.inflight[op.peer][b.st[i].lane] < DEPTH {
                let s = &mut b.st[i];
                let f = s.posted;
                let (off, len) = if s.mismatched {
                    (0, 0)
                } else {
                    (f * FRAGMENT, (span.len - f * FRAGMENT).min(FRAGMENT))
                };
                let (addr, rkey) = s.remote;
                let remote_addr = addr + off as u64;
                let how = if f + 1 == s.frags {
                    SendOp::WriteImm {
                        remote_addr,
                        rkey,
                        imm: span.len as u32,
                    }
                } else {
                    SendOp::Write { remote_addr, rkey }
                };
                let (Some(link), Some(local)) = (
                    self.direct.links[op.peer].as_ref(),
                    self.direct.regions[span.region].as_ref(),
                ) else {
                    unreachable!("links and regions were checked above")
                };
                link.lanes[s.lane]
                    .qp
                    .post(how, local, span.off + off, len, wr_id(op.peer, WrKind::DirectWrite, i))
                    .map_err(|e| self.verbs_err(e))?;
                s.posted += 1;
                s.outstanding += 1;
                b.inflight[op.peer][s.lane] += 1;
                moved = true;
            }
        }
        Ok(moved)
    }

    /// Step 4, completions of every link this batch uses: our writes done, and the immediates that say
    /// a peer's data has landed in one of our receives (in post order per peer).
    fn reap_direct(
        &mut self,
        b: &mut DirectBatch,
        ops: &mut [DirectOp],
        comps: &mut Vec<Completion>,
    ) -> Result<bool, TransportError> {
        let mut moved = false;
        for &p in &b.peers {
            let Some(link) = self.direct.links[p].as_ref() else {
                continue;
            };
            for (lane, data) in link.lanes.iter().enumerate() {
                comps.clear();
                data.cq.poll(16, comps).map_err(|e| self.verbs_err(e))?;
                for c in comps.drain(..) {
                    moved = true;
                    let (peer, kind, i) = decode(c.wr_id);
                    if kind == Some(WrKind::DirectWrite) {
                        let s = &mut b.st[i];
                        s.outstanding -= 1;
                        b.inflight[peer][lane] -= 1;
                        if s.outstanding == 0 && s.posted == s.frags {
                            ops[i].done_at = Some(Instant::now());
                            b.remaining -= 1;
                        }
                        continue;
                    }
                    // Each lane keeps its order: its n-th immediate lands in its n-th receive.
                    let Some(i) = b.recv_q[peer][lane].pop_front() else {
                        return Err(TransportError::Setup(format!(
                            "rank {}: zero-copy data from rank {peer} that no receive was posted for",
                            self.rank
                        )));
                    };
                    let want = ops[i].span().len;
                    let got = c.imm.unwrap_or(u32::MAX);
                    if got as usize != want {
                        return Err(self.length_mismatch(peer, want, got));
                    }
                    data.qp
                        .post_recv(&link.sink, 0, 64, wr_id(peer, WrKind::DirectImm, 0))
                        .map_err(|e| self.verbs_err(e))?;
                    ops[i].done_at = Some(Instant::now());
                    b.remaining -= 1;
                }
            }
        }
        Ok(moved)
    }

    /// The deadline passed: name the peer of the first op not done, and what it waits for.
    fn direct_stalled(&self, b: &DirectBatch, ops: &[DirectOp], start: Instant) -> TransportError {
        let stalled = ops.iter().zip(&b.st).find(|(o, _)| o.done_at.is_none());
        let (peer, what) = match stalled {
            Some((o, s)) if matches!(o.kind, DirectKind::Send(_)) && !s.cleared => {
                (o.peer, "its clear-to-send (it has not posted the matching receive)")
            }
            Some((o, _)) if matches!(o.kind, DirectKind::Send(_)) => {
                (o.peer, "an RDMA write into its registered buffer to complete")
            }
            Some((o, _)) => (
                o.peer,
                "its data to land (RDMA write into this rank's registered buffer)",
            ),
            None => (self.rank, "nothing"),
        };
        self.stalled(peer, start, format!("waiting for {what}"))
    }
}

/// One zero-copy batch in progress.
struct DirectBatch {
    /// The peers of the batch, ascending.
    peers: Vec<usize>,
    st: Vec<OpProgress>,
    /// Per peer, sends still waiting for their clear-to-send, in post order.
    waiting: Vec<VecDeque<usize>>,
    /// Per peer and lane, receives not yet landed, in post order.
    recv_q: Vec<Vec<VecDeque<usize>>>,
    /// Writes posted and not completed, per peer and lane (each queue pair's send queue holds
    /// DEPTH).
    inflight: Vec<Vec<usize>>,
    /// Data queue pairs per peer.
    lanes: usize,
    remaining: usize,
    /// The first send whose receiver posted another length: (peer, its length, ours).
    mismatch: Option<(usize, usize, usize)>,
}

impl DirectBatch {
    /// The batch of `ops`, each receive queued on its lane: the t-th transfer from a peer
    /// (counting `received` before this batch) rides lane t mod `lanes`.
    fn new(ops: &[DirectOp], peers: Vec<usize>, size: usize, lanes: usize, received: &mut [u64]) -> DirectBatch {
        let mut waiting: Vec<VecDeque<usize>> = vec![VecDeque::new(); size];
        let mut recv_q: Vec<Vec<VecDeque<usize>>> = vec![vec![VecDeque::new(); lanes]; size];
        for (i, op) in ops.iter().enumerate() {
            match op.kind {
                DirectKind::Recv(_) => {
                    let lane = (received[op.peer] % lanes as u64) as usize;
                    received[op.peer] += 1;
                    recv_q[op.peer][lane].push_back(i);
                }
                DirectKind::Send(_) => waiting[op.peer].push_back(i),
            }
        }
        DirectBatch {
            peers,
            st: vec![OpProgress::default(); ops.len()],
            waiting,
            recv_q,
            inflight: vec![vec![0; lanes]; size],
            lanes,
            remaining: ops.len(),
            mismatch: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clear_to_send_round_trips() {
        let b = cts(0x7f00_dead_beef_0000, 0x1234_5678, 3 << 20);
        assert_eq!(uncts(&b), (0x7f00_dead_beef_0000, 0x1234_5678, 3 << 20));
    }

    #[test]
    fn transfers_split_at_one_gibibyte() {
        assert_eq!(fragments(0), 1, "a zero-byte transfer still carries its immediate");
        assert_eq!(fragments(1), 1);
        assert_eq!(fragments(FRAGMENT), 1);
        assert_eq!(fragments(FRAGMENT + 1), 2);
        assert_eq!(fragments(u32::MAX as usize), 4);
    }
}
