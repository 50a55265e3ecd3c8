//! The bandwidth loops on test links, as perftest's ib_write_bw, ib_read_bw and ib_send_bw
//! measure: each queue pair's window of posts, CQ moderation, and the receives of a SEND test.

use std::collections::VecDeque;

use super::*;

/// CQ moderation on a test link's send queue: which posts are signalled (every
/// `min(window, CQ_MODERATION)`th, and the last), and how many requests each completion retires
/// (completions come back in post order on an RC send queue). The window is at least the
/// interval, so a full window always holds a signalled request.
struct Moderation {
    every: u64,
    open: u64,
    batches: VecDeque<u64>,
}

impl Moderation {
    fn new(window: usize) -> Self {
        Moderation {
            every: (window as u64).clamp(1, CQ_MODERATION),
            open: 0,
            batches: VecDeque::new(),
        }
    }
    /// Whether the next post is signalled; `last` for the run's final post.
    fn next(&mut self, last: bool) -> bool {
        self.open += 1;
        if self.open == self.every || last {
            self.batches.push_back(self.open);
            self.open = 0;
            return true;
        }
        false
    }
    /// Requests retired by the next completion.
    fn retired(&mut self) -> u64 {
        self.batches.pop_front().unwrap_or(0)
    }
}

/// The receive side of a SEND test on a test link: receives posted into `window`, `total` in all.
struct Receives<'a> {
    window: &'a Window,
    total: u64,
    posted: u64,
    done: u64,
}

/// One queue pair's share of a bandwidth loop: what it posted and retired, its moderation, its
/// completion times and (a SEND test's receive side) its receives.
struct Lane<'a> {
    link: &'a TestLink,
    posted: u64,
    done: u64,
    moderation: Moderation,
    completions: Vec<f64>,
    recvs: Option<Receives<'a>>,
}

impl Lane<'_> {
    fn busy(&self, count: u64) -> bool {
        self.done < count || self.recvs.as_ref().is_some_and(|r| r.done < r.total)
    }
}

/// Every queue pair's completions in one time-ordered list, and each one's apart when there
/// are several.
pub(super) fn result_of(per_qp: Vec<Vec<f64>>) -> OneSidedResult {
    if per_qp.len() == 1 {
        return OneSidedResult {
            completions: per_qp.into_iter().next().unwrap_or_default(),
            ..Default::default()
        };
    }
    let mut completions: Vec<f64> = per_qp.iter().flatten().copied().collect();
    completions.sort_by(f64::total_cmp);
    OneSidedResult {
        completions,
        per_qp,
        ..Default::default()
    }
}

impl VerbsMesh {
    /// The bandwidth loop on a test's queue pairs, as perftest's: each queue pair posts `count`
    /// operations of `bytes` from `local` (an RDMA write or read into or from the window `key`
    /// names, or a SEND), at most `window` in flight and one in [`CQ_MODERATION`] signalled;
    /// meanwhile, with `recvs` (the receive window, the receives in all per queue pair, and
    /// those already posted on each), repost receives into the window as they complete until
    /// all its messages are in. Returns each queue pair's send completion times in seconds since
    /// the first post.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn post_loop(
        &self,
        links: &[TestLink],
        peer: usize,
        op: OneSidedOp,
        key: &[u8; 12],
        local: &Window,
        bytes: usize,
        count: u64,
        window: usize,
        recvs: Option<(&Window, u64, u64)>,
        deadline: Instant,
    ) -> Result<Vec<Vec<f64>>, TransportError> {
        let (remote_addr, rkey) = unkey(key);
        let sop = match op {
            OneSidedOp::Write => SendOp::Write { remote_addr, rkey },
            OneSidedOp::Read => SendOp::Read { remote_addr, rkey },
            OneSidedOp::Send => SendOp::Send,
        };
        let mut lanes: Vec<Lane<'_>> = links
            .iter()
            .map(|link| Lane {
                link,
                posted: 0,
                done: 0,
                moderation: Moderation::new(window),
                completions: Vec::with_capacity(count.min(10_000_000) as usize),
                recvs: recvs.and_then(|(window, total, posted)| {
                    (total > 0).then_some(Receives {
                        window,
                        total,
                        posted,
                        done: 0,
                    })
                }),
            })
            .collect();
        let mut comps: Vec<Completion> = Vec::with_capacity(32);
        let t0 = Instant::now();
        // The deadline bounds how long we wait without any completion, not the whole run.
        let idle_limit = deadline.saturating_duration_since(t0);
        let mut last_progress = t0;
        // Empty polls since the clock was last read: the deadline is checked every CLOCK_EVERY,
        // so a spin costs one poll, as perftest's does (a clock read per poll delays noticing a
        // completion, measurably so in a read latency under emulation).
        let mut empty = 0u32;
        // The lane served first turns each pass: a fixed order would let queue pair 0 post (and
        // so reach the wire) first every time, a bias of the loop that -q's per-path figures
        // would show as a slower last path.
        let mut first = 0usize;
        while lanes.iter().any(|l| l.busy(count)) {
            let mut progressed = false;
            let n_lanes = lanes.len();
            for j in 0..n_lanes {
                let q = (first + j) % n_lanes;
                let lane = &mut lanes[q];
                while lane.posted < count && lane.posted - lane.done < window as u64 {
                    let signaled = lane.moderation.next(lane.posted + 1 == count);
                    lane.link
                        .qp
                        .post_flagged(sop, local.reg(), 0, bytes, wr_id(peer, WrKind::OneSided, q), signaled)
                        .map_err(|e| self.verbs_err(e))?;
                    lane.posted += 1;
                }
                comps.clear();
                lane.link.cq.poll(32, &mut comps).map_err(|e| self.verbs_err(e))?;
                if comps.is_empty() {
                    continue;
                }
                progressed = true;
                let now = Instant::now();
                last_progress = now;
                let at = now.duration_since(t0).as_secs_f64();
                for c in &comps {
                    match lane.recvs.as_mut() {
                        Some(r) if decode(c.wr_id).1 == Some(WrKind::Recv) => {
                            r.done += 1;
                            if r.posted < r.total {
                                lane.link
                                    .qp
                                    .post_recv(r.window.reg(), 0, bytes, c.wr_id)
                                    .map_err(|e| self.verbs_err(e))?;
                                r.posted += 1;
                            }
                        }
                        _ => {
                            let retired = lane.moderation.retired();
                            lane.done += retired;
                            lane.completions.extend(std::iter::repeat_n(at, retired as usize));
                        }
                    }
                }
            }
            first = (first + 1) % n_lanes.max(1);
            if progressed {
                continue;
            }
            empty = empty.wrapping_add(1);
            if empty.is_multiple_of(CLOCK_EVERY) && last_progress.elapsed() >= idle_limit {
                let done: u64 = lanes.iter().map(|l| l.done).sum();
                let received = if lanes.iter().any(|l| l.recvs.is_some()) {
                    let (got, want) = lanes
                        .iter()
                        .filter_map(|l| l.recvs.as_ref())
                        .fold((0, 0), |(a, b), r| (a + r.done, b + r.total));
                    format!(", {got} of {want} received")
                } else {
                    String::new()
                };
                let on = if lanes.len() > 1 {
                    format!(" on {} queue pairs", lanes.len())
                } else {
                    String::new()
                };
                return Err(self.stalled(
                    peer,
                    t0,
                    format!(
                        "RDMA {op:?} completions ({done} of {} done{received}{on})",
                        count * lanes.len() as u64
                    ),
                ));
            }
            std::hint::spin_loop();
        }
        Ok(lanes.into_iter().map(|l| l.completions).collect())
    }

    /// ib_send_bw's loop on a test's queue pairs: each posts `sends` SENDs of `bytes` from a
    /// source window, at most `window` in flight, while `recvs` receives per queue pair land in a
    /// receive window with up to twice `window` posted on each. Returns each queue pair's send
    /// completion times, in seconds since the first post.
    pub(super) fn send_stream(
        &mut self,
        peer: usize,
        bytes: usize,
        (sends, recvs): (u64, u64),
        window: usize,
        deadline: Instant,
        reg: &mut dyn FnMut(usize, Access) -> Result<Window, VerbsError>,
    ) -> Result<OneSidedResult, TransportError> {
        let window = window.clamp(1, MAX_TEST_DEPTH);
        let local = Access::LOCAL_WRITE;
        let inbox = reg(bytes.max(1), local).map_err(|e| self.verbs_err(e))?;
        let src = self.source(reg, bytes.max(1), local)?;
        // Twice the sender's window of receives posted, as perftest's receive depth exceeds its
        // send depth: a receiver that reposts late then costs no receiver-not-ready retry.
        let posted = 2 * window;
        let first = recvs.min(posted as u64);
        let recv_id = wr_id(peer, WrKind::Recv, 0);
        let links = self.test_links(peer, posted as u32 + 1, deadline, &mut |qp| {
            (0..first).try_for_each(|_| qp.post_recv(inbox.reg(), 0, bytes, recv_id))
        })?;
        let per_qp = self.post_loop(
            &links,
            peer,
            OneSidedOp::Send,
            &[0u8; 12],
            &src,
            bytes,
            sends,
            window,
            Some((&inbox, recvs, first)),
            deadline,
        )?;
        // Neither side tears its queue pair down while the other may still be acknowledging.
        self.swap(peer, [0u8; 12], deadline)?;
        drop(links);
        Ok(result_of(per_qp))
    }
}

#[cfg(test)]
mod tests;
