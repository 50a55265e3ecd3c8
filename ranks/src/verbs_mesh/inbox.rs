//! The two-sided stream's inbox: which slot each fragment lands in, and the credits that keep a
//! sender from overwriting a slot its peer has not read. [`Ledger`] holds the accounting (plain
//! numbers, tested alone); the methods below apply it to the queue pairs and regions of a peer.

use super::*;

/// A fragment that landed in an inbox slot: the slot, its bytes, and the length of the message
/// it belongs to (the immediate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Arrival {
    pub slot: usize,
    pub bytes: u32,
    pub msg_len: u32,
}

/// Slot and credit accounting of the stream between this rank and one peer, both directions.
///
/// Sending: fragment k goes into the peer's inbox slot k mod slots, from one of our `slots`
/// staging slots; it may go only once the peer has consumed fragment k - slots (its consumed
/// count, which the peer writes into our credit word) and a staging slot is free (its previous
/// send completed, in any order). Receiving: fragment k lands in our slot k mod slots, and with
/// several queue pairs per peer fragments arrive out of order across them (each lane keeps its
/// own order), so arrivals are recorded by slot and consumed in fragment order: fragment k once
/// slot k mod slots holds it. Consumed fragments are reported back lazily, once half the slots are
/// unreported, with at most one credit write in flight (a newer count waits for it to complete).
#[derive(Debug)]
pub(super) struct Ledger {
    slots: usize,
    sent: u64,
    free_send: Vec<usize>,
    /// What each inbox slot holds, arrived and not consumed.
    arrived: Vec<Option<Arrival>>,
    consumed: u64,
    reported: u64,
    credit_in_flight: bool,
    credit_stale: bool,
}

impl Ledger {
    pub fn new(slots: usize) -> Ledger {
        let slots = slots.max(1);
        Ledger {
            slots,
            sent: 0,
            free_send: (0..slots).rev().collect(),
            arrived: vec![None; slots],
            consumed: 0,
            reported: 0,
            credit_in_flight: false,
            credit_stale: false,
        }
    }

    /// The next fragment's (staging slot, peer inbox slot), counted as sent; None while the peer
    /// has not consumed enough (`peer_consumed`, read from the credit word) or no staging slot is
    /// free.
    pub fn reserve_send(&mut self, peer_consumed: u64) -> Option<(usize, usize)> {
        if self.sent >= peer_consumed + self.slots as u64 {
            return None;
        }
        let staging = self.free_send.pop()?;
        let remote = (self.sent % self.slots as u64) as usize;
        self.sent += 1;
        Some((staging, remote))
    }

    /// A send from `staging` completed: the slot may be filled again.
    pub fn send_done(&mut self, staging: usize) {
        self.free_send.push(staging);
    }

    /// A fragment of `bytes` of a `msg_len`-byte message arrived in inbox slot `slot`. False if
    /// the slot still holds one not consumed (the peer wrote past its credit: a broken stream).
    pub fn arrive_at(&mut self, slot: usize, bytes: u32, msg_len: u32) -> bool {
        match self.arrived.get_mut(slot) {
            Some(s @ None) => {
                *s = Some(Arrival { slot, bytes, msg_len });
                true
            }
            _ => false,
        }
    }

    /// The next fragment in stream order, if it has arrived.
    pub fn next_arrival(&self) -> Option<Arrival> {
        self.arrived[(self.consumed % self.slots as u64) as usize]
    }

    /// Take the next fragment in stream order (the caller copies its slot out and posts the
    /// slot's receive again), counting it consumed; None if it has not arrived.
    pub fn consume(&mut self) -> Option<Arrival> {
        let a = self.arrived[(self.consumed % self.slots as u64) as usize].take()?;
        self.consumed += 1;
        Some(a)
    }

    /// Whether the peer should hear our consumed count: half the slots (at least one) unreported.
    pub fn credit_due(&self) -> bool {
        self.consumed - self.reported >= (self.slots as u64 / 2).max(1)
    }

    /// The consumed count to write to the peer now, recorded as reported; None while a credit
    /// write is in flight (the count is sent when it completes, see [`Ledger::credit_done`]).
    pub fn start_credit(&mut self) -> Option<u64> {
        if self.credit_in_flight {
            self.credit_stale = true;
            return None;
        }
        self.credit_in_flight = true;
        self.credit_stale = false;
        self.reported = self.consumed;
        Some(self.consumed)
    }

    /// The credit write completed; true when a newer count is waiting to go.
    pub fn credit_done(&mut self) -> bool {
        self.credit_in_flight = false;
        self.credit_stale
    }
}

impl VerbsMesh {
    /// A completion of the two-sided machinery's background traffic: a fragment that arrived, or
    /// a credit write done. (Sends complete inside the exchange that posted them.)
    pub(super) fn background_completion(
        &mut self,
        p: usize,
        kind: Option<WrKind>,
        c: &Completion,
    ) -> Result<(), TransportError> {
        match kind {
            Some(WrKind::Recv) => self.arrival(p, c)?,
            Some(WrKind::Credit) => {
                let again = self.peers[p].as_mut().is_some_and(|peer| peer.ledger.credit_done());
                if again {
                    self.post_credit(p)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A fragment landed in our inbox (its WRITE-with-immediate consumed a posted receive): note
    /// the message length its immediate carries, by slot. The receive's id names the slot: each
    /// lane's receives are posted in the order of the slots it carries, and its fragments arrive
    /// in that order, so the n-th receive a lane completes is the n-th slot it carries.
    fn arrival(&mut self, p: usize, c: &Completion) -> Result<(), TransportError> {
        let (_, _, s) = decode(c.wr_id);
        let Some(peer) = self.peers[p].as_mut() else {
            return Ok(());
        };
        let (bytes, msg_len) = match &peer.notices {
            // iWARP: the notice in the receive's slot says what the write before it carried.
            Some(n) => {
                let note = &n.recv.as_slice()[s * NOTICE..(s + 1) * NOTICE];
                let word = |i: usize| u32::from_le_bytes([note[i], note[i + 1], note[i + 2], note[i + 3]]);
                (word(0), word(4))
            }
            None => (c.byte_len, c.imm.unwrap_or(u32::MAX)),
        };
        if peer.ledger.arrive_at(s, bytes, msg_len) {
            return Ok(());
        }
        Err(TransportError::Setup(format!(
            "rank {} ({}): a fragment from rank {p} ({}) landed in inbox slot {s}, which still holds one not read \
             (the peer wrote past its credit: a broken stream)",
            self.rank, self.hosts[self.rank], self.hosts[p]
        )))
    }

    /// Copy the next fragment in stream order from `p` into `dst` (its length, checked by the
    /// caller), post its slot's receive again and count it consumed.
    pub(super) fn claim_fragment(&mut self, p: usize, dst: Option<&mut [u8]>) -> Result<(), TransportError> {
        let sl = self.slot;
        let peer = self.peers[p].as_mut().expect("connected peer");
        let Some(Arrival { slot, .. }) = peer.ledger.consume() else {
            return Ok(());
        };
        if let Some(dst) = dst {
            dst.copy_from_slice(&peer.inbox.as_slice()[slot * sl..slot * sl + dst.len()]);
        }
        // Post the slot's receive again, on the lane that carries it: each lane's receives stay in
        // the order of its slots, so fragment k of a SEND lands in slot k mod slots too (a WRITE
        // only takes the immediate).
        let qp = peer.lane(slot);
        let r = match &peer.notices {
            Some(n) => qp.post_recv(&n.recv, slot * NOTICE, NOTICE, wr_id(p, WrKind::Recv, slot)),
            None => qp.post_recv(&peer.inbox, slot * sl, sl, wr_id(p, WrKind::Recv, slot)),
        };
        r.map_err(|e| self.verbs_err(e))
    }

    /// Whether `p` should hear how much of its traffic was consumed.
    pub(super) fn credit_due(&self, p: usize) -> bool {
        self.peers[p].as_ref().is_some_and(|x| x.ledger.credit_due())
    }

    /// A one-fragment message of exactly `buf.len()` bytes from `p`, if it has arrived: polls the
    /// completion queue once and never waits.
    pub(super) fn try_recv_small(
        &mut self,
        p: usize,
        buf: &mut [u8],
        comps: &mut Vec<Completion>,
    ) -> Result<bool, TransportError> {
        self.reap(comps)?;
        let Some(a) = self.peers[p].as_ref().and_then(|x| x.ledger.next_arrival()) else {
            return Ok(false);
        };
        if a.msg_len as usize != buf.len() || a.bytes as usize != buf.len() {
            return Err(self.length_mismatch(p, buf.len(), a.msg_len));
        }
        self.claim_fragment(p, Some(buf))?;
        if self.credit_due(p) {
            self.post_credit(p)?;
        }
        Ok(true)
    }

    /// Write our consumed count into `p`'s credit word, unless a credit write is still in flight
    /// (then it goes when that one completes).
    pub(super) fn post_credit(&mut self, p: usize) -> Result<(), TransportError> {
        let peer = self.peers[p].as_mut().expect("connected peer");
        let Some(count) = peer.ledger.start_credit() else {
            return Ok(());
        };
        peer.credit_src.as_mut_slice()[..8].copy_from_slice(&count.to_le_bytes());
        let (addr, rkey) = peer.remote_credit;
        let r = peer.qp.post(
            SendOp::Write {
                remote_addr: addr,
                rkey,
            },
            &peer.credit_src,
            0,
            8,
            wr_id(p, WrKind::Credit, 0),
        );
        r.map_err(|e| self.verbs_err(e))
    }

    /// A message from `p` whose length is not the `expected` one posted.
    pub(super) fn length_mismatch(&self, p: usize, expected: usize, got: u32) -> TransportError {
        TransportError::length_mismatch(self.rank, &self.hosts, p, expected, u64::from(got))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_wrap_around_the_peer_inbox() {
        let mut l = Ledger::new(4);
        let mut remote = Vec::new();
        for k in 0..10u64 {
            // The peer consumes as fast as we send; staging slots come back at once.
            let (staging, slot) = l.reserve_send(k).expect("room");
            remote.push(slot);
            l.send_done(staging);
        }
        assert_eq!(remote, vec![0, 1, 2, 3, 0, 1, 2, 3, 0, 1]);
        let mut r = Ledger::new(3);
        let mut slots = Vec::new();
        for (k, len) in [10, 20, 30, 40, 50].into_iter().enumerate() {
            assert!(r.arrive_at(k % 3, len, 99));
            let a = r.consume().expect("arrived");
            assert_eq!(a.bytes, len);
            slots.push(a.slot);
        }
        assert_eq!(slots, vec![0, 1, 2, 0, 1]);
    }

    #[test]
    fn fragments_arriving_out_of_order_across_lanes_are_consumed_in_stream_order() {
        // Four lanes over eight slots: lane j carries slots j and j + 4. Lane 3 is fast, lane 0
        // slow: fragments 3 and 7 land before fragment 0.
        let mut r = Ledger::new(8);
        for k in [3usize, 7, 1, 2, 5] {
            assert!(r.arrive_at(k, 100 + k as u32, 800));
        }
        assert_eq!(r.next_arrival(), None, "fragment 0 has not arrived: nothing to consume");
        assert_eq!(r.consume(), None);
        assert!(r.arrive_at(0, 100, 800));
        let got: Vec<u32> = std::iter::from_fn(|| r.consume()).map(|a| a.bytes).collect();
        assert_eq!(got, vec![100, 101, 102, 103], "0 to 3, then a gap at 4");
        assert!(r.arrive_at(4, 104, 800));
        assert!(r.arrive_at(6, 106, 800));
        let got: Vec<u32> = std::iter::from_fn(|| r.consume()).map(|a| a.bytes).collect();
        assert_eq!(got, vec![104, 105, 106, 107]);
        // A slot not yet consumed cannot take another fragment: that is a broken stream.
        assert!(r.arrive_at(0, 1, 1));
        assert!(!r.arrive_at(0, 1, 1), "slot 0 is still full");
        assert!(!r.arrive_at(8, 1, 1), "no slot 8");
    }

    #[test]
    fn a_sender_without_credit_waits_and_resumes_when_the_peer_consumes() {
        let mut l = Ledger::new(4);
        let staged: Vec<usize> = (0..4).map(|_| l.reserve_send(0).expect("room").0).collect();
        for s in &staged {
            l.send_done(*s);
        }
        // Four fragments out, none consumed: a fifth would overwrite unread slot 0.
        assert_eq!(l.reserve_send(0), None);
        assert_eq!(l.reserve_send(0), None, "asking again changes nothing");
        // The peer reports one consumed: exactly one more may go, into slot 0.
        assert_eq!(l.reserve_send(1).map(|x| x.1), Some(0));
        assert_eq!(l.reserve_send(1), None);
    }

    #[test]
    fn staging_memory_is_bounded_whatever_the_number_of_ranks() {
        let staging = |n| staging_within(n, 1, STAGING_BUDGET);
        let bytes = |n: usize| {
            let (slots, slot) = staging(n);
            2 * slots * slot * (n - 1)
        };
        // Small jobs keep the old geometry: 16 slots of 256 KiB.
        assert_eq!(staging(2), (16, 256 << 10));
        assert_eq!(staging(17), (16, 256 << 10));
        assert_eq!(staging(129), (2, 256 << 10));
        assert_eq!(staging(1025), (2, 32 << 10));
        assert_eq!(staging(4097), (2, 8 << 10));
        for n in [2, 3, 8, 17, 64, 129, 512, 1000, 1025, 2048, 4096, 4097] {
            assert!(bytes(n) <= STAGING_BUDGET, "{n} ranks: {} bytes", bytes(n));
            let (slots, slot) = staging(n);
            assert!((2..=16).contains(&slots) && slot % 4096 == 0 && slot >= SLOT_MIN);
        }
        // Beyond 4,097 ranks: 32 KiB per peer.
        assert_eq!(bytes(8193), 8192 * 32 * 1024);
        // The tests' small budget: 3 ranks get the 8 KiB slots of a 4,097-rank job.
        assert_eq!(staging_within(3, 1, 64 << 10), (2, 8 << 10));
    }

    #[test]
    fn several_lanes_get_a_multiple_of_their_number_of_slots_within_the_budget() {
        let b = STAGING_BUDGET;
        // Small jobs: 16 slots of 256 KiB share out over 2, 4, 8 or 16 lanes; 3 lanes take 15.
        for lanes in [2, 4, 8, 16] {
            assert_eq!(staging_within(2, lanes, b), (16, 256 << 10), "{lanes} lanes");
        }
        assert_eq!(staging_within(17, 3, b), (15, 256 << 10));
        // At 129 ranks two slots: four lanes need four, each half the size.
        assert_eq!(staging_within(129, 4, b), (4, 128 << 10));
        // How many lanes fit: one slot of at least 8 KiB each way per lane and peer.
        assert_eq!(lanes_within(2, b), MAX_LANES);
        assert_eq!(lanes_within(513, b), 16);
        assert_eq!(lanes_within(514, b), 15);
        assert_eq!(lanes_within(1025, b), 8);
        assert_eq!(lanes_within(2049, b), 4);
        assert_eq!(lanes_within(4096, b), 2);
        assert_eq!(lanes_within(4097, b), 2);
        assert_eq!(lanes_within(8193, b), 1);
        for n in [2, 3, 17, 100, 129, 513, 1025, 2049, 4096, 4097] {
            for lanes in 1..=lanes_within(n, b) {
                let (slots, slot) = staging_within(n, lanes, b);
                assert_eq!(slots % lanes, 0, "{n} ranks, {lanes} lanes: {slots} slots");
                assert!(slot >= SLOT_MIN && slot % 4096 == 0, "{n} ranks, {lanes} lanes: {slot}");
                assert!(
                    2 * slots * slot * (n - 1) <= b,
                    "{n} ranks, {lanes} lanes: over the budget"
                );
            }
        }
    }

    #[test]
    fn staging_slots_limit_sends_and_return_in_any_order() {
        let mut l = Ledger::new(3);
        let a = l.reserve_send(100).expect("room").0;
        let b = l.reserve_send(100).expect("room").0;
        let c = l.reserve_send(100).expect("room").0;
        let mut all = vec![a, b, c];
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2], "each staging slot once");
        assert_eq!(l.reserve_send(100), None, "plenty of credit, but no free staging slot");
        // Completions out of post order: each frees exactly its own slot.
        l.send_done(c);
        assert_eq!(l.reserve_send(100).map(|x| x.0), Some(c));
        l.send_done(a);
        l.send_done(b);
        let next: Vec<usize> = (0..2).filter_map(|_| l.reserve_send(100)).map(|x| x.0).collect();
        assert_eq!(next.len(), 2);
        assert!(next.contains(&a) && next.contains(&b));
    }

    #[test]
    fn credits_go_back_at_half_the_slots_one_write_at_a_time() {
        let mut l = Ledger::new(8);
        let mut k = 0usize;
        let mut take = |l: &mut Ledger| {
            assert!(l.arrive_at(k % 8, 4, 4));
            k += 1;
            l.consume().expect("arrived")
        };
        for _ in 0..3 {
            take(&mut l);
        }
        assert!(!l.credit_due(), "3 of 8 unreported");
        take(&mut l);
        assert!(l.credit_due(), "4 of 8 unreported");
        assert_eq!(l.start_credit(), Some(4));
        assert!(!l.credit_due());
        for _ in 0..5 {
            take(&mut l);
        }
        assert!(l.credit_due());
        // A write is in flight: the newer count waits for it.
        assert_eq!(l.start_credit(), None);
        assert!(l.credit_done(), "a newer count is waiting");
        assert_eq!(l.start_credit(), Some(9));
        assert!(!l.credit_done(), "nothing newer");
        assert_eq!(take(&mut l).slot, 1, "fragment 9 sits in slot 9 mod 8");
    }

    #[test]
    fn one_slot_reports_every_fragment() {
        let mut l = Ledger::new(1);
        assert!(l.arrive_at(0, 1, 1));
        l.consume();
        assert!(l.credit_due());
        assert_eq!(l.start_credit(), Some(1));
        assert_eq!(l.next_arrival(), None);
    }
}
