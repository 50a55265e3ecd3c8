//! The progress loop of two-sided batches: post what credits allow, reap completions, hand
//! arrived fragments to posted receives in order, until every op is done or the deadline passes.

use std::collections::VecDeque;

use super::*;

/// Per-batch progress of one op.
#[derive(Default, Clone)]
struct OpState {
    frags_posted: usize,
    frags_total: usize,
    outstanding: usize,
    progress: usize,
    frags_claimed: usize,
}

fn frags(len: usize, slot: usize) -> usize {
    len.div_ceil(slot).max(1)
}

/// One batch in progress: per peer, the sends and receives not yet fully posted or claimed, in
/// post order; per op, its fragments; and how many ops are not done.
struct Batch {
    sends: Vec<VecDeque<usize>>,
    recvs: Vec<VecDeque<usize>>,
    st: Vec<OpState>,
    remaining: usize,
}

impl Batch {
    /// Mark op `i` done now.
    fn mark_done(&mut self, ops: &mut [Op<'_>], i: usize) {
        ops[i].done_at = Some(Instant::now());
        self.remaining -= 1;
    }
}

impl VerbsMesh {
    /// Progress `ops` to completion; `work`, if any, runs once after the first pass (the sends
    /// that credits allow posted, completions reaped, arrived fragments claimed).
    pub(super) fn exchange_ops(
        &mut self,
        ops: &mut [Op<'_>],
        deadline: Instant,
        mut work: Option<&mut dyn FnMut()>,
    ) -> Result<(), TransportError> {
        let start = Instant::now();
        let mut b = self.plan_batch(ops)?;
        let mut comps: Vec<Completion> = Vec::with_capacity(32);
        let mut idle_spins = 0u32;
        while b.remaining > 0 || work.is_some() {
            let posted = self.post_sends(&mut b, ops)?;
            let reaped = self.reap_batch(&mut b, ops, &mut comps)?;
            let claimed = self.deliver_arrivals(&mut b, ops)?;
            if let Some(w) = work.take() {
                w();
                continue;
            }
            if posted || reaped || claimed {
                idle_spins = 0;
                continue;
            }
            if Instant::now() >= deadline {
                return Err(self.batch_stalled(&b, start));
            }
            idle_spins += 1;
            idle_wait(idle_spins, self.patient);
        }
        Ok(())
    }

    /// Check every op and queue it under its peer.
    fn plan_batch(&self, ops: &mut [Op<'_>]) -> Result<Batch, TransportError> {
        let n = self.size;
        let mut b = Batch {
            sends: vec![VecDeque::new(); n],
            recvs: vec![VecDeque::new(); n],
            st: vec![OpState::default(); ops.len()],
            remaining: ops.len(),
        };
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
            b.st[i].frags_total = frags(op.len(), self.slot);
            match op.kind {
                OpKind::Send(_) => b.sends[op.peer].push_back(i),
                OpKind::Recv(_) | OpKind::Sink(_) => b.recvs[op.peer].push_back(i),
            }
        }
        Ok(b)
    }

    /// Post the fragments that credits and free staging slots allow; true if any was posted.
    fn post_sends(&mut self, b: &mut Batch, ops: &[Op<'_>]) -> Result<bool, TransportError> {
        let mut moved = false;
        let sl = self.slot;
        for (p, q) in b.sends.iter_mut().enumerate() {
            let Some(peer) = self.peers[p].as_mut() else { continue };
            while let Some(&i) = q.front() {
                let peer_consumed = peer.inbox.read_u64_volatile(self.slots * sl);
                // Fragment k goes to the peer's inbox slot k mod slots, free because the peer has
                // consumed fragment k - slots.
                let Some((slot, remote_slot)) = peer.ledger.reserve_send(peer_consumed) else {
                    break;
                };
                let OpKind::Send(buf) = &ops[i].kind else {
                    unreachable!("send queue holds sends")
                };
                let f = b.st[i].frags_posted;
                let chunk = &buf[(f * sl).min(buf.len())..((f + 1) * sl).min(buf.len())];
                peer.send_mr.as_mut_slice()[slot * sl..slot * sl + chunk.len()].copy_from_slice(chunk);
                let (inbox, rkey) = peer.remote_inbox;
                let remote_addr = inbox + (remote_slot * sl) as u64;
                // iWARP: the bytes by RDMA write, then an 8-byte SEND saying how many and of what
                // message; RC order places the write before the SEND completes there, and the
                // SEND's completion here (after the write's) frees the slot.
                if let Some(n) = peer.notices.as_mut() {
                    let note = &mut n.send.as_mut_slice()[slot * NOTICE..(slot + 1) * NOTICE];
                    note[..4].copy_from_slice(&(chunk.len() as u32).to_le_bytes());
                    note[4..].copy_from_slice(&(buf.len() as u32).to_le_bytes());
                }
                // Fragment k rides lane k mod lanes, which carries inbox slot k mod slots.
                let qp = peer.lane(remote_slot);
                let r = if let Some(n) = peer.notices.as_ref() {
                    let write = SendOp::Write { remote_addr, rkey };
                    qp.post(
                        write,
                        &peer.send_mr,
                        slot * sl,
                        chunk.len(),
                        wr_id(p, WrKind::Data, slot),
                    )
                    .and_then(|()| {
                        qp.post(
                            SendOp::Send,
                            &n.send,
                            slot * NOTICE,
                            NOTICE,
                            wr_id(p, WrKind::Send, slot),
                        )
                    })
                } else {
                    let how = if self.use_send {
                        SendOp::SendImm(buf.len() as u32)
                    } else {
                        SendOp::WriteImm {
                            remote_addr,
                            rkey,
                            imm: buf.len() as u32,
                        }
                    };
                    qp.post(how, &peer.send_mr, slot * sl, chunk.len(), wr_id(p, WrKind::Send, slot))
                };
                if let Err(e) = r {
                    return Err(self.verbs_err(e));
                }
                peer.inflight[slot] = Some(i);
                b.st[i].frags_posted += 1;
                b.st[i].outstanding += 1;
                moved = true;
                if b.st[i].frags_posted == b.st[i].frags_total {
                    q.pop_front();
                }
            }
        }
        Ok(moved)
    }

    /// Poll the completion queue once: send completions free their staging slot and may finish
    /// a send; arrivals and credit writes go to the inbox. True if anything completed.
    fn reap_batch(
        &mut self,
        b: &mut Batch,
        ops: &mut [Op<'_>],
        comps: &mut Vec<Completion>,
    ) -> Result<bool, TransportError> {
        comps.clear();
        if let Err(e) = self.cq.poll(32, comps) {
            return Err(self.verbs_err(e));
        }
        let any = !comps.is_empty();
        for c in comps.drain(..) {
            let (p, kind, slot) = decode(c.wr_id);
            if kind != Some(WrKind::Send) {
                self.background_completion(p, kind, &c)?;
                continue;
            }
            let peer = self.peers[p].as_mut().expect("connected peer");
            peer.ledger.send_done(slot);
            if let Some(i) = peer.inflight.get_mut(slot).and_then(Option::take) {
                let s = &mut b.st[i];
                s.outstanding -= 1;
                if s.outstanding == 0 && s.frags_posted == s.frags_total && ops[i].done_at.is_none() {
                    b.mark_done(ops, i);
                }
            }
        }
        Ok(any)
    }

    /// Hand arrived fragments to posted receives, in order, and return the credits; true if any
    /// fragment was claimed.
    fn deliver_arrivals(&mut self, b: &mut Batch, ops: &mut [Op<'_>]) -> Result<bool, TransportError> {
        let mut moved = false;
        for p in 0..self.size {
            let mut consumed_any = false;
            while let (Some(&i), Some(a)) = (
                b.recvs[p].front(),
                self.peers[p].as_ref().and_then(|x| x.ledger.next_arrival()),
            ) {
                let want = ops[i].len();
                if a.msg_len as usize != want {
                    return Err(self.length_mismatch(p, want, a.msg_len));
                }
                let buf: Option<&mut [u8]> = match &mut ops[i].kind {
                    OpKind::Recv(b) => Some(&mut b[..]),
                    OpKind::Sink(_) => None,
                    OpKind::Send(_) => unreachable!("receive queue holds receives"),
                };
                let s = &mut b.st[i];
                // This fragment's length follows from the message's: whole slots, then the rest.
                let expect = (want - s.progress).min(self.slot);
                if a.bytes as usize != expect {
                    return Err(TransportError::Setup(format!(
                        "rank {}: a {}-byte fragment from rank {p} where {expect} bytes were due",
                        self.rank, a.bytes
                    )));
                }
                self.claim_fragment(p, buf.map(|b| &mut b[s.progress..s.progress + expect]))?;
                s.progress += expect;
                s.frags_claimed += 1;
                consumed_any = true;
                moved = true;
                if s.frags_claimed == s.frags_total {
                    b.mark_done(ops, i);
                    b.recvs[p].pop_front();
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
        Ok(moved)
    }

    /// The deadline passed: name the first peer a receive waits on, else one a send waits on.
    fn batch_stalled(&self, b: &Batch, start: Instant) -> TransportError {
        let n = self.size;
        let peer = (0..n)
            .find(|&p| !b.recvs[p].is_empty())
            .or_else(|| (0..n).find(|&p| !b.sends[p].is_empty() || self.peers[p].as_ref().is_some_and(|x| x.sending())))
            .unwrap_or(0);
        let what = if !b.recvs[peer].is_empty() {
            "a message to arrive"
        } else {
            "a send to complete (no credit or no acknowledgement)"
        };
        self.stalled(peer, start, format!("waiting for {what} over RDMA"))
    }

    /// Poll the completion queue once: completions of the mesh's own traffic (sends, receives,
    /// credits) go to their handlers; returns how many one-sided completions arrived, and whether
    /// any completion did.
    pub(super) fn reap(&mut self, comps: &mut Vec<Completion>) -> Result<(u64, bool), TransportError> {
        comps.clear();
        self.cq.poll(32, comps).map_err(|e| self.verbs_err(e))?;
        let any = !comps.is_empty();
        let mut mine = 0;
        for c in comps.drain(..) {
            let (p, kind, _) = decode(c.wr_id);
            if kind == Some(WrKind::OneSided) {
                mine += 1;
            } else {
                self.background_completion(p, kind, &c)?;
            }
        }
        Ok((mine, any))
    }
}
