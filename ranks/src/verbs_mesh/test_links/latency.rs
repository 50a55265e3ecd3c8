//! The latency ping-pongs on test links: RDMA write (ib_write_lat) and SEND (ib_send_lat).

use super::*;

impl VerbsMesh {
    /// RDMA write ping-pong (ib_write_lat): the message's last byte carries the iteration's
    /// value (1..=255, never the initial 0), and the receiver spins on it with volatile reads.
    /// RC delivers a write's bytes in order on every RDMA NIC perftest supports, so the last byte
    /// arriving means the message has. Windows are host memory: the CPU polls them.
    pub(super) fn ping_pong(
        &mut self,
        peer: usize,
        bytes: usize,
        count: u64,
        leader: bool,
        deadline: Instant,
    ) -> Result<OneSidedResult, TransportError> {
        let win = self
            .pd
            .register(bytes, Access::REMOTE_WRITE)
            .map_err(|e| self.verbs_err(e))?;
        let (remote_addr, rkey) = unkey(&self.swap(peer, key_of(&win), deadline)?);
        let mut src = self
            .pd
            .register(bytes, Access::LOCAL_WRITE)
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
                wr_id(peer, WrKind::OneSided, 0),
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
            if spins.is_multiple_of(CLOCK_EVERY) {
                *outstanding = outstanding.saturating_sub(self.reap(comps)?.0);
                if t0.elapsed() >= limit {
                    return Err(self.stalled(peer, t0, format!("the RDMA write ping-pong (iteration {iteration})")));
                }
            }
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// ib_send_lat on a test link: the leader sends `bytes` and waits for the peer's message back;
    /// the peer waits, then sends. Small messages go inline from host memory, as perftest's.
    pub(super) fn send_ping_pong(
        &mut self,
        peer: usize,
        bytes: usize,
        count: u64,
        leader: bool,
        deadline: Instant,
        reg: &mut dyn FnMut(usize, Access) -> Result<Window, VerbsError>,
    ) -> Result<OneSidedResult, TransportError> {
        const POSTED: u64 = 16;
        let local = Access::LOCAL_WRITE;
        let inbox = reg(bytes.max(1), local).map_err(|e| self.verbs_err(e))?;
        let src = self.source(reg, bytes.max(1), local)?;
        let recv_id = wr_id(peer, WrKind::Recv, 0);
        let first = count.min(POSTED);
        let link = self.test_link(
            peer,
            POSTED as u32 + 2,
            deadline,
            &mut |qp| (0..first).try_for_each(|_| qp.post_recv(inbox.reg(), 0, bytes, recv_id)),
            0,
        )?;
        let step = deadline.saturating_duration_since(Instant::now());
        let (mut posted_r, mut unacked) = (first, 0u64);
        let mut round_trips = Vec::with_capacity(count.min(10_000_000) as usize);
        let mut comps: Vec<Completion> = Vec::with_capacity(8);
        // Wait for the next receive, counting send completions on the way.
        let mut wait_recv = |me: &Self, posted_r: &mut u64, unacked: &mut u64, i: u64| -> Result<(), TransportError> {
            let t0 = Instant::now();
            let mut empty = 0u32;
            loop {
                comps.clear();
                link.cq.poll(8, &mut comps).map_err(|e| me.verbs_err(e))?;
                let mut got = false;
                for c in &comps {
                    if decode(c.wr_id).1 == Some(WrKind::Recv) {
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
                empty = empty.wrapping_add(1);
                if empty.is_multiple_of(CLOCK_EVERY) && t0.elapsed() >= step {
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
                .post(SendOp::Send, src.reg(), 0, bytes, wr_id(peer, WrKind::Send, 0))
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
}
