//! The progress loop of TCP batches: frames laid out per peer in post order, written with
//! `writev` and read through a staging buffer (or straight into large receive buffers), one `poll`
//! over every socket with work, until all ops are done or the deadline passes.

use super::frame::{scatter, ZEROS};
use super::*;

/// Bytes of the buffer sinks read into (a whole receive's direct read needs no more per call).
const SINK: usize = 1 << 20;

pub(super) fn poll_timeout(left: Duration) -> PollTimeout {
    let ms = left.as_millis().clamp(1, 100) as u16;
    PollTimeout::from(ms)
}

pub(super) struct PeerConn {
    stream: TcpStream,
    /// Bytes read ahead of the current receive: `rx[rx_start..rx_end]`.
    rx: Box<[u8]>,
    rx_start: usize,
    rx_end: usize,
    /// Stream bytes framed for sending so far (after the hello); sets the next frame's padding.
    tx_off: u64,
    /// Stream bytes framed for receiving so far, the peer's `tx_off` for this direction.
    rx_off: u64,
}

impl PeerConn {
    /// The peer's address on this connection.
    pub(super) fn peer_address(&self) -> Option<std::net::IpAddr> {
        self.stream.peer_addr().ok().map(|a| a.ip())
    }

    pub(super) fn new(stream: TcpStream) -> PeerConn {
        PeerConn {
            stream,
            rx: vec![0u8; STAGING].into_boxed_slice(),
            rx_start: 0,
            rx_end: 0,
            tx_off: 0,
            rx_off: 0,
        }
    }
}

/// Per-batch progress of one peer's queue of sends or receives.
#[derive(Default)]
struct Queue {
    ops: Vec<usize>,
    /// Padding of each op's frame, indexed like `ops`.
    pads: Vec<usize>,
    head: usize,
    /// Bytes of the head's frame (length, padding, payload) written or consumed.
    progress: usize,
    /// Receives: the head's length has been read and checked.
    have_header: bool,
    /// Receives: the head's length field.
    hdr: [u8; HEADER],
}

impl Queue {
    fn pending(&self) -> bool {
        self.head < self.ops.len()
    }
}

impl TcpMesh {
    /// Write as much of `peer`'s send queue as the socket takes. Returns whether anything moved.
    fn progress_send(&mut self, peer: usize, q: &mut Queue, ops: &mut [Op<'_>]) -> Result<bool, TransportError> {
        let mut moved = false;
        while q.pending() {
            let batch = (q.ops.len() - q.head).min(MAX_BATCH);
            let mut headers = [[0u8; HEADER]; MAX_BATCH];
            for (h, &i) in headers.iter_mut().zip(&q.ops[q.head..q.head + batch]) {
                *h = (ops[i].len() as u64).to_le_bytes();
            }
            let written = {
                let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(3 * batch);
                let queued = q.ops[q.head..].iter().zip(&q.pads[q.head..]);
                for (k, (header, (&i, &pad))) in headers.iter().zip(queued).take(batch).enumerate() {
                    let OpKind::Send(buf) = &ops[i].kind else {
                        unreachable!("send queue holds sends")
                    };
                    let done = if k == 0 { q.progress } else { 0 };
                    let frame = [&header[..], &ZEROS[..pad], buf];
                    let mut skip = done;
                    for part in frame {
                        if skip >= part.len() {
                            skip -= part.len();
                            continue;
                        }
                        iov.push(IoSlice::new(&part[skip..]));
                        skip = 0;
                    }
                }
                let Some(conn) = self.peers[peer].as_mut() else {
                    return Err(self.bad_peer(peer));
                };
                match conn.stream.write_vectored(&iov) {
                    Ok(0) => return Err(self.closed(peer, "sending".into())),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(moved),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(self.io(peer, "sending", e)),
                }
            };
            moved = true;
            let mut left = written;
            while left > 0 && q.pending() {
                let total = HEADER + q.pads[q.head] + ops[q.ops[q.head]].len();
                let take = left.min(total - q.progress);
                q.progress += take;
                left -= take;
                if q.progress == total {
                    ops[q.ops[q.head]].done_at = Some(Instant::now());
                    q.head += 1;
                    q.progress = 0;
                }
            }
        }
        Ok(moved)
    }

    /// Read as much of `peer`'s receive queue as has arrived. Returns whether anything moved.
    /// The payloads of sinks ([`OpKind::Sink`]) are read into `sink` and dropped.
    fn progress_recv(
        &mut self,
        peer: usize,
        q: &mut Queue,
        ops: &mut [Op<'_>],
        sink: &mut [u8],
    ) -> Result<bool, TransportError> {
        let mut moved = false;
        while q.pending() {
            let (idx, pad) = (q.ops[q.head], q.pads[q.head]);
            let expected = ops[idx].len();
            let frame = HEADER + pad + expected;
            if !q.have_header && q.progress >= HEADER {
                let len = u64::from_le_bytes(q.hdr);
                if len != expected as u64 {
                    return Err(TransportError::length_mismatch(
                        self.rank,
                        &self.hosts,
                        peer,
                        expected,
                        len,
                    ));
                }
                q.have_header = true;
            }
            if q.progress == frame && q.have_header {
                ops[idx].done_at = Some(Instant::now());
                q.head += 1;
                q.progress = 0;
                q.have_header = false;
                continue;
            }
            let Some(conn) = self.peers[peer].as_mut() else {
                return Err(self.bad_peer(peer));
            };
            let mut buf: Option<&mut [u8]> = match &mut ops[idx].kind {
                OpKind::Recv(b) => Some(&mut b[..]),
                OpKind::Sink(_) => None,
                OpKind::Send(_) => unreachable!("receive queue holds receives"),
            };
            // Bytes read ahead into the staging buffer first; the length alone until it is checked.
            let staged = conn.rx_end - conn.rx_start;
            if staged > 0 {
                let limit = if q.have_header { frame } else { HEADER };
                let take = staged.min(limit - q.progress);
                scatter(
                    &conn.rx[conn.rx_start..conn.rx_start + take],
                    q.progress,
                    &mut q.hdr,
                    pad,
                    buf.as_deref_mut(),
                );
                conn.rx_start += take;
                q.progress += take;
                moved = true;
                continue;
            }
            let direct = expected >= DIRECT_READ_MIN;
            let r = if direct {
                // One readv straight into place: what is left of the length, the padding, and
                // the payload in the user's buffer (no staging copy for large messages).
                let mut padding = [0u8; ALIGN];
                let at = q.progress;
                let mut iov: Vec<IoSliceMut<'_>> = Vec::with_capacity(3);
                if at < HEADER {
                    iov.push(IoSliceMut::new(&mut q.hdr[at..]));
                }
                if at < HEADER + pad {
                    iov.push(IoSliceMut::new(&mut padding[..HEADER + pad - at.max(HEADER)]));
                }
                let from = at.max(HEADER + pad) - HEADER - pad;
                match buf {
                    Some(b) => iov.push(IoSliceMut::new(&mut b[from..])),
                    None => {
                        let n = (expected - from).min(sink.len());
                        iov.push(IoSliceMut::new(&mut sink[..n]));
                    }
                }
                conn.stream.read_vectored(&mut iov)
            } else {
                fill(conn)
            };
            match r {
                Ok(0) => {
                    return Err(self.closed(
                        peer,
                        format!(
                            "after {} of {} bytes of a message",
                            q.progress.saturating_sub(HEADER + pad),
                            expected
                        ),
                    ))
                }
                Ok(n) => {
                    if direct {
                        q.progress += n;
                    }
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(moved),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io(peer, "receiving", e)),
            }
        }
        Ok(moved)
    }

    fn bad_peer(&self, peer: usize) -> TransportError {
        TransportError::BadPeer {
            rank: self.rank,
            peer,
            size: self.size,
        }
    }

    fn timeout_error(&self, sends: &[Queue], recvs: &[Queue], ops: &[Op<'_>], waited: Duration) -> TransportError {
        let peer = (0..self.size)
            .find(|&p| recvs[p].pending())
            .or_else(|| (0..self.size).find(|&p| sends[p].pending()))
            .unwrap_or(0);
        let (q, dir) = if recvs[peer].pending() {
            (&recvs[peer], "receive")
        } else {
            (&sends[peer], "send")
        };
        let cur = ops[q.ops[q.head]].len();
        let what = format!(
            "{} of {} {}s from/to this peer still pending; the current one has moved {} of {} bytes",
            q.ops.len() - q.head,
            q.ops.len(),
            dir,
            q.progress.saturating_sub(HEADER + q.pads[q.head]).min(cur),
            cur
        );
        TransportError::timeout(self.rank, &self.hosts, peer, waited, what)
    }

    /// Progress `ops` to completion; `work`, if any, runs once after the first pass over the
    /// sockets (every send has written what the socket took, every receive read what had arrived).
    pub(super) fn exchange_batch(
        &mut self,
        ops: &mut [Op<'_>],
        deadline: Instant,
        mut work: Option<&mut dyn FnMut()>,
    ) -> Result<(), TransportError> {
        let start = Instant::now();
        let mut sends: Vec<Queue> = (0..self.size).map(|_| Queue::default()).collect();
        let mut recvs: Vec<Queue> = (0..self.size).map(|_| Queue::default()).collect();
        for (i, op) in ops.iter_mut().enumerate() {
            op.done_at = None;
            if op.peer >= self.size || op.peer == self.rank {
                return Err(self.bad_peer(op.peer));
            }
            let len = op.len();
            let Some(conn) = self.peers[op.peer].as_mut() else {
                return Err(self.bad_peer(op.peer));
            };
            // Frames are laid out now, in queue order; an exchange that fails leaves the
            // connection unusable anyway (a peer mid-message), as before.
            let (q, off) = match op.kind {
                OpKind::Send(_) => (&mut sends[op.peer], &mut conn.tx_off),
                OpKind::Recv(_) | OpKind::Sink(_) => (&mut recvs[op.peer], &mut conn.rx_off),
            };
            let pad = pad_for(*off, len);
            *off += (HEADER + pad + len) as u64;
            q.ops.push(i);
            q.pads.push(pad);
        }
        // Where sinks' payloads are read and dropped: large enough for the direct reads' pace.
        let mut sink = if ops.iter().any(|o| matches!(o.kind, OpKind::Sink(_))) {
            vec![0u8; SINK]
        } else {
            Vec::new()
        };
        let active: Vec<usize> = (0..self.size)
            .filter(|&p| sends[p].pending() || recvs[p].pending())
            .collect();
        // Until this instant, try again (yielding) instead of sleeping in poll.
        let mut spin_until = Instant::now() + SPIN;
        loop {
            let mut moved = false;
            let mut pending = false;
            for &p in &active {
                if sends[p].pending() {
                    moved |= self.progress_send(p, &mut sends[p], ops)?;
                }
                if recvs[p].pending() {
                    moved |= self.progress_recv(p, &mut recvs[p], ops, &mut sink)?;
                }
                pending |= sends[p].pending() || recvs[p].pending();
            }
            if let Some(w) = work.take() {
                w();
                // The peers' data may have arrived meanwhile: look again before sleeping.
                spin_until = Instant::now() + SPIN;
                continue;
            }
            if !pending {
                return Ok(());
            }
            let now = Instant::now();
            if moved {
                spin_until = now + SPIN;
                continue;
            }
            if now < spin_until && now < deadline {
                // Let another rank on this core run (ranks may outnumber cores).
                std::thread::yield_now();
                continue;
            }
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() {
                return Err(self.timeout_error(&sends, &recvs, ops, start.elapsed()));
            }
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(active.len());
            for &p in &active {
                let mut flags = PollFlags::empty();
                if sends[p].pending() {
                    flags |= PollFlags::POLLOUT;
                }
                if recvs[p].pending() {
                    flags |= PollFlags::POLLIN;
                }
                if let (false, Some(c)) = (flags.is_empty(), self.peers[p].as_ref()) {
                    fds.push(PollFd::new(c.stream.as_fd(), flags));
                }
            }
            match poll(&mut fds, poll_timeout(left)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    return Err(TransportError::Local(format!(
                        "rank {} ({}): poll failed: {e}",
                        self.rank, self.hosts[self.rank]
                    )))
                }
            }
        }
    }
}

/// Read whatever is available into the staging buffer.
fn fill(conn: &mut PeerConn) -> io::Result<usize> {
    if conn.rx_start > 0 {
        conn.rx.copy_within(conn.rx_start..conn.rx_end, 0);
        conn.rx_end -= conn.rx_start;
        conn.rx_start = 0;
    }
    if conn.rx_end == conn.rx.len() {
        return Ok(0);
    }
    let n = conn.stream.read(&mut conn.rx[conn.rx_end..])?;
    conn.rx_end += n;
    Ok(n)
}
