//! The mesh over TCP: one connection per pair of ranks, a per-job token in the first bytes, and one
//! progress loop (non-blocking sockets and `poll`) that drives every outstanding operation.
//!
//! Wire format: a 32-byte hello each way when a connection opens (magic, version, token, rank,
//! size), then messages framed as an 8-byte little-endian length, zero padding, and the payload.
//! The padding is empty for payloads under [`ALIGN_MIN`]; larger payloads are padded so that they
//! start on a 64-byte boundary of the byte stream (counted from the first byte after the hello).
//! Both ends compute the padding from their own count of the stream, so it is never sent as a
//! field. Why: the kernel copies a payload into socket buffers, and out of them, at the stream's
//! alignment; a stream whose payloads start 8 bytes past a cache line (an 8-byte header alone)
//! copies 2-2.7x slower than an aligned one (1 MiB swapped both ways over loopback, plain C:
//! 318 us aligned, 660-880 us at offset 8).

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::transport::{Op, OpKind, Transport, TransportError};

const MAGIC: &[u8; 4] = b"MSHR";
const VERSION: u32 = 2;
const HELLO_LEN: usize = 32;
/// Size of an encoded endpoint in the MPI allgather.
pub const ENDPOINT_LEN: usize = 20;
/// Receives at least this large go straight into the user's buffer; smaller ones through a staging buffer.
const DIRECT_READ_MIN: usize = 64 * 1024;
const STAGING: usize = 256 * 1024;
/// Most messages coalesced into one `writev` (three iovecs each: length, padding, payload).
const MAX_BATCH: usize = 32;
/// Payloads at least this large start on an [`ALIGN`]-byte boundary of the stream.
pub const ALIGN_MIN: usize = 4096;
/// Stream alignment of large payloads: a cache line.
pub const ALIGN: usize = 64;
const HEADER: usize = 8;
const ZEROS: [u8; ALIGN] = [0; ALIGN];

/// Padding between the length and a `len`-byte payload whose frame starts at stream offset `at`.
fn pad_for(at: u64, len: usize) -> usize {
    if len < ALIGN_MIN {
        return 0;
    }
    let misalign = ((at + HEADER as u64) % ALIGN as u64) as usize;
    (ALIGN - misalign) % ALIGN
}

/// A random token shared by all ranks of one job (rank 0 draws it and MPI broadcasts it).
pub type JobToken = [u8; 16];

/// Draw a job token from the kernel's random source.
pub fn random_token() -> io::Result<JobToken> {
    let mut t = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut t)?;
    Ok(t)
}

/// Encode a socket address for the allgather: family byte, 16 address bytes, port, padding.
pub fn encode_endpoint(addr: SocketAddr) -> [u8; ENDPOINT_LEN] {
    let mut out = [0u8; ENDPOINT_LEN];
    match addr.ip() {
        IpAddr::V4(v4) => {
            out[0] = 4;
            out[1..5].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out[0] = 6;
            out[1..17].copy_from_slice(&v6.octets());
        }
    }
    out[17..19].copy_from_slice(&addr.port().to_le_bytes());
    out
}

/// Decode what [`encode_endpoint`] wrote.
pub fn decode_endpoint(b: &[u8]) -> Option<SocketAddr> {
    if b.len() < ENDPOINT_LEN {
        return None;
    }
    let port = u16::from_le_bytes([b[17], b[18]]);
    let ip = match b[0] {
        4 => IpAddr::from([b[1], b[2], b[3], b[4]]),
        6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[1..17]);
            IpAddr::V6(Ipv6Addr::from(o))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// A rank's listening socket, before endpoints are exchanged.
pub struct TcpListening {
    listener: TcpListener,
    local: SocketAddr,
}

impl TcpListening {
    /// Listen on an ephemeral port of `ip`.
    pub fn bind(ip: IpAddr) -> io::Result<Self> {
        let domain = if ip.is_ipv4() {
            socket2::Domain::IPV4
        } else {
            socket2::Domain::IPV6
        };
        let sock = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
        sock.set_reuse_address(true)?;
        sock.bind(&SocketAddr::new(ip, 0).into())?;
        // A large backlog: every higher rank connects at once.
        sock.listen(4096)?;
        let listener: TcpListener = sock.into();
        let local = listener.local_addr()?;
        Ok(TcpListening { listener, local })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Connect to every other rank: connect to lower ranks, accept higher ranks, and check the
    /// job token both ways. `endpoints` and `hosts` are indexed by rank.
    pub fn connect_all(
        self,
        rank: usize,
        endpoints: &[SocketAddr],
        hosts: Vec<String>,
        token: JobToken,
        timeout: Duration,
    ) -> Result<TcpMesh, TransportError> {
        let size = endpoints.len();
        let deadline = Instant::now() + timeout;
        let host = hosts[rank].clone();
        let ctx = |peer: usize| (rank, host.clone(), peer, hosts[peer].clone());
        let io_err = |peer: usize, what: String, source: io::Error| {
            let (rank, host, peer, peer_host) = ctx(peer);
            TransportError::Io {
                rank,
                host,
                peer,
                peer_host,
                what,
                source,
            }
        };
        let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();

        // 1. Connect to every lower rank. Their listen backlog completes the handshake even while
        //    they are busy connecting to their own lower ranks, so this cannot deadlock.
        for peer in 0..rank {
            let addr = endpoints[peer];
            let s = loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let (rank, host, peer, peer_host) = ctx(peer);
                    return Err(TransportError::Timeout {
                        rank,
                        host,
                        peer,
                        peer_host,
                        waited: timeout,
                        what: format!("connecting to {addr}"),
                    });
                }
                match TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(5))) {
                    Ok(s) => break s,
                    Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::TimedOut) => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => return Err(io_err(peer, format!("connecting to {addr}"), e)),
                }
            };
            s.set_nodelay(true)
                .map_err(|e| io_err(peer, "setting TCP_NODELAY".into(), e))?;
            s.set_write_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ))
            .map_err(|e| io_err(peer, "setting a write timeout".into(), e))?;
            (&s).write_all(&hello(token, rank, size))
                .map_err(|e| io_err(peer, "sending the hello".into(), e))?;
            streams[peer] = Some(s);
        }

        // 2. Accept every higher rank; refuse connections without this job's token.
        self.listener
            .set_nonblocking(true)
            .map_err(|e| io_err(rank, "listening".into(), e))?;
        let mut missing: Vec<usize> = (rank + 1..size).collect();
        while !missing.is_empty() {
            match self.listener.accept() {
                Ok((s, from)) => {
                    let left = deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(1));
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(left.min(Duration::from_secs(5))));
                    let mut buf = [0u8; HELLO_LEN];
                    let peer = match (&s)
                        .read_exact(&mut buf)
                        .ok()
                        .and_then(|_| parse_hello(&buf, &token, size))
                    {
                        Some(p) if missing.contains(&p) => p,
                        _ => {
                            eprintln!("meshrun: rank {rank} ({host}): refused a connection from {from}: no valid hello with this job's token");
                            continue;
                        }
                    };
                    s.set_nodelay(true)
                        .map_err(|e| io_err(peer, "setting TCP_NODELAY".into(), e))?;
                    let _ = s.set_write_timeout(Some(left));
                    (&s).write_all(&hello(token, rank, size))
                        .map_err(|e| io_err(peer, "answering the hello".into(), e))?;
                    missing.retain(|&m| m != peer);
                    streams[peer] = Some(s);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        let (rank, host, peer, peer_host) = ctx(missing[0]);
                        let names: Vec<String> = missing.iter().map(|&m| format!("{m} ({})", hosts[m])).collect();
                        return Err(TransportError::Timeout {
                            rank,
                            host,
                            peer,
                            peer_host,
                            waited: timeout,
                            what: format!("no connection came from ranks {}", names.join(", ")),
                        });
                    }
                    let mut fds = [PollFd::new(self.listener.as_fd(), PollFlags::POLLIN)];
                    let _ = poll(&mut fds, poll_timeout(left));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(rank, "accepting connections".into(), e)),
            }
        }

        // 3. Check the answers of the lower ranks.
        for (peer, slot) in streams.iter().enumerate().take(rank) {
            let Some(s) = slot else { continue };
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            let _ = s.set_read_timeout(Some(left));
            let mut buf = [0u8; HELLO_LEN];
            match s.try_clone().and_then(|mut c| c.read_exact(&mut buf)) {
                Ok(()) if parse_hello(&buf, &token, size) == Some(peer) => {}
                Ok(()) => {
                    let (rank, host, peer, peer_host) = ctx(peer);
                    return Err(TransportError::Setup(format!(
                        "rank {rank} ({host}): the answer from rank {peer} ({peer_host}) at {} does not carry this job's token or rank; is another job using that address?",
                        endpoints[peer]
                    )));
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    let (rank, host, peer, peer_host) = ctx(peer);
                    return Err(TransportError::Timeout {
                        rank,
                        host,
                        peer,
                        peer_host,
                        waited: timeout,
                        what: "waiting for the answer to our hello".into(),
                    });
                }
                Err(e) => return Err(io_err(peer, "reading the answer to our hello".into(), e)),
            }
        }

        let mut peers = Vec::with_capacity(size);
        for (peer, s) in streams.into_iter().enumerate() {
            match s {
                Some(s) => {
                    s.set_read_timeout(None)
                        .map_err(|e| io_err(peer, "configuring the socket".into(), e))?;
                    s.set_write_timeout(None)
                        .map_err(|e| io_err(peer, "configuring the socket".into(), e))?;
                    s.set_nonblocking(true)
                        .map_err(|e| io_err(peer, "configuring the socket".into(), e))?;
                    peers.push(Some(PeerConn {
                        stream: s,
                        rx: vec![0u8; STAGING].into_boxed_slice(),
                        rx_start: 0,
                        rx_end: 0,
                        tx_off: 0,
                        rx_off: 0,
                    }));
                }
                None => peers.push(None),
            }
        }
        Ok(TcpMesh {
            rank,
            size,
            hosts,
            peers,
        })
    }
}

fn hello(token: JobToken, rank: usize, size: usize) -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    b[0..4].copy_from_slice(MAGIC);
    b[4..8].copy_from_slice(&VERSION.to_le_bytes());
    b[8..24].copy_from_slice(&token);
    b[24..28].copy_from_slice(&(rank as u32).to_le_bytes());
    b[28..32].copy_from_slice(&(size as u32).to_le_bytes());
    b
}

/// The sender's rank when `b` is a valid hello of this job.
fn parse_hello(b: &[u8; HELLO_LEN], token: &JobToken, size: usize) -> Option<usize> {
    let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    if &b[0..4] != MAGIC || word(4) != VERSION || &b[8..24] != token || word(28) as usize != size {
        return None;
    }
    let r = word(24) as usize;
    (r < size).then_some(r)
}

fn poll_timeout(left: Duration) -> PollTimeout {
    let ms = left.as_millis().clamp(1, 100) as u16;
    PollTimeout::from(ms)
}

struct PeerConn {
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

/// An all-to-all TCP mesh.
pub struct TcpMesh {
    rank: usize,
    size: usize,
    hosts: Vec<String>,
    peers: Vec<Option<PeerConn>>,
}

impl TcpMesh {
    fn closed(&self, peer: usize, what: String) -> TransportError {
        TransportError::PeerClosed {
            rank: self.rank,
            host: self.hosts[self.rank].clone(),
            peer,
            peer_host: self.hosts[peer].clone(),
            what,
        }
    }

    fn io(&self, peer: usize, what: &str, e: io::Error) -> TransportError {
        if matches!(
            e.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
        ) {
            return self.closed(peer, format!("{what}: {e}"));
        }
        TransportError::Io {
            rank: self.rank,
            host: self.hosts[self.rank].clone(),
            peer,
            peer_host: self.hosts[peer].clone(),
            what: what.into(),
            source: e,
        }
    }

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
    fn progress_recv(&mut self, peer: usize, q: &mut Queue, ops: &mut [Op<'_>]) -> Result<bool, TransportError> {
        let mut moved = false;
        while q.pending() {
            let (idx, pad) = (q.ops[q.head], q.pads[q.head]);
            let expected = ops[idx].len();
            let frame = HEADER + pad + expected;
            if !q.have_header && q.progress >= HEADER {
                let len = u64::from_le_bytes(q.hdr);
                if len != expected as u64 {
                    return Err(TransportError::LengthMismatch {
                        rank: self.rank,
                        host: self.hosts[self.rank].clone(),
                        peer,
                        peer_host: self.hosts[peer].clone(),
                        expected,
                        got: len,
                    });
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
            let OpKind::Recv(buf) = &mut ops[idx].kind else {
                unreachable!("receive queue holds receives")
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
                    buf,
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
                iov.push(IoSliceMut::new(&mut buf[from..]));
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
        TransportError::Timeout {
            rank: self.rank,
            host: self.hosts[self.rank].clone(),
            peer,
            peer_host: self.hosts[peer].clone(),
            waited,
            what,
        }
    }
}

/// Copy stream bytes that start at byte `at` of a frame into place: the length field, the padding
/// (dropped), the payload.
fn scatter(mut src: &[u8], mut at: usize, hdr: &mut [u8; HEADER], pad: usize, buf: &mut [u8]) {
    if at < HEADER {
        let k = (HEADER - at).min(src.len());
        hdr[at..at + k].copy_from_slice(&src[..k]);
        src = &src[k..];
        at += k;
    }
    if at < HEADER + pad {
        let k = (HEADER + pad - at).min(src.len());
        src = &src[k..];
        at += k;
    }
    if !src.is_empty() {
        let from = at - HEADER - pad;
        buf[from..from + src.len()].copy_from_slice(src);
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

impl Transport for TcpMesh {
    fn name(&self) -> &'static str {
        "tcp"
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn host_of(&self, rank: usize) -> &str {
        &self.hosts[rank]
    }

    fn exchange(&mut self, ops: &mut [Op<'_>], deadline: Instant) -> Result<(), TransportError> {
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
                OpKind::Recv(_) => (&mut recvs[op.peer], &mut conn.rx_off),
            };
            let pad = pad_for(*off, len);
            *off += (HEADER + pad + len) as u64;
            q.ops.push(i);
            q.pads.push(pad);
        }
        let active: Vec<usize> = (0..self.size)
            .filter(|&p| sends[p].pending() || recvs[p].pending())
            .collect();
        loop {
            let mut moved = false;
            let mut pending = false;
            for &p in &active {
                if sends[p].pending() {
                    moved |= self.progress_send(p, &mut sends[p], ops)?;
                }
                if recvs[p].pending() {
                    moved |= self.progress_recv(p, &mut recvs[p], ops)?;
                }
                pending |= sends[p].pending() || recvs[p].pending();
            }
            if !pending {
                return Ok(());
            }
            if moved {
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
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
                    return Err(TransportError::Setup(format!(
                        "rank {} ({}): poll failed: {e}",
                        self.rank, self.hosts[self.rank]
                    )))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// A mesh of `n` ranks inside one process, one thread per rank.
    fn local_mesh(n: usize) -> Vec<TcpMesh> {
        let token = random_token().unwrap();
        let listening: Vec<TcpListening> = (0..n)
            .map(|_| TcpListening::bind(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap())
            .collect();
        let eps: Vec<SocketAddr> = listening.iter().map(|l| l.local_addr()).collect();
        let hosts: Vec<String> = (0..n).map(|r| format!("h{r}")).collect();
        let handles: Vec<_> = listening
            .into_iter()
            .enumerate()
            .map(|(r, l)| {
                let (eps, hosts) = (eps.clone(), hosts.clone());
                std::thread::spawn(move || l.connect_all(r, &eps, hosts, token, Duration::from_secs(10)).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn endpoint_roundtrip() {
        for a in ["10.1.2.3:4567", "[fe80::1]:9"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(decode_endpoint(&encode_endpoint(a)), Some(a));
        }
        assert_eq!(decode_endpoint(&[9u8; ENDPOINT_LEN]), None);
    }

    #[test]
    fn hello_checks_token_rank_and_size() {
        let t = [7u8; 16];
        assert_eq!(parse_hello(&hello(t, 3, 4), &t, 4), Some(3));
        assert_eq!(parse_hello(&hello(t, 3, 4), &[8u8; 16], 4), None);
        assert_eq!(parse_hello(&hello(t, 3, 4), &t, 5), None);
        assert_eq!(parse_hello(&hello(t, 4, 4), &t, 4), None);
    }

    #[test]
    fn large_payloads_start_on_a_cache_line_of_the_stream() {
        // Small payloads: no padding, wherever they start.
        assert_eq!(pad_for(0, 0), 0);
        assert_eq!(pad_for(3, ALIGN_MIN - 1), 0);
        // Large ones: length field, then padding to the next 64-byte boundary.
        assert_eq!(pad_for(0, ALIGN_MIN), 56);
        assert_eq!(pad_for(56, ALIGN_MIN), 0);
        assert_eq!(pad_for(57, 1 << 20), 63);
        assert_eq!(pad_for(1 << 20, 1 << 20), 56);
        for at in 0..200u64 {
            let pad = pad_for(at, 1 << 16);
            assert!(pad < ALIGN);
            assert_eq!((at + (HEADER + pad) as u64) % ALIGN as u64, 0, "frame at {at}");
        }
    }

    #[test]
    fn scatter_places_length_padding_and_payload() {
        let frame: Vec<u8> = (0..(HEADER + 5 + 6) as u8).collect();
        for cut in 0..frame.len() {
            let (mut hdr, mut buf) = ([0u8; HEADER], [0u8; 6]);
            scatter(&frame[..cut], 0, &mut hdr, 5, &mut buf);
            scatter(&frame[cut..], cut, &mut hdr, 5, &mut buf);
            assert_eq!(hdr, [0, 1, 2, 3, 4, 5, 6, 7]);
            assert_eq!(buf, [13, 14, 15, 16, 17, 18], "cut at {cut}");
        }
    }

    #[test]
    fn padded_and_unpadded_frames_interleave_in_one_stream() {
        // Odd small sizes shift the stream so every large frame needs a different padding, and
        // sizes on both sides of the staging/direct-read threshold take both receive paths.
        let meshes = local_mesh(2);
        let sizes = [
            5usize,
            ALIGN_MIN,
            1,
            ALIGN_MIN + 3,
            7,
            DIRECT_READ_MIN - 1,
            13,
            DIRECT_READ_MIN + 5,
            0,
            1 << 20,
            3,
            2 * STAGING + 11,
        ];
        let handles: Vec<_> = meshes
            .into_iter()
            .map(|mut m| {
                std::thread::spawn(move || {
                    let (r, peer) = (m.rank(), 1 - m.rank());
                    let pattern = |who: usize, k: usize, len: usize| -> Vec<u8> {
                        (0..len).map(|i| (i * 7 + k * 13 + who * 101) as u8).collect()
                    };
                    // All in one batch, then again one message per exchange.
                    let sends: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(k, &l)| pattern(r, k, l)).collect();
                    let mut recvs: Vec<Vec<u8>> = sizes.iter().map(|&l| vec![0u8; l]).collect();
                    let mut ops: Vec<Op<'_>> = sends.iter().map(|b| Op::send(peer, b)).collect();
                    ops.extend(recvs.iter_mut().map(|b| Op::recv(peer, b)));
                    m.exchange(&mut ops, Instant::now() + Duration::from_secs(20)).unwrap();
                    drop(ops);
                    for (k, b) in recvs.iter().enumerate() {
                        assert!(
                            *b == pattern(peer, k, sizes[k]),
                            "batched message {k} ({} bytes)",
                            sizes[k]
                        );
                    }
                    for (k, &len) in sizes.iter().enumerate() {
                        let send = pattern(r, k, len);
                        let mut recv = vec![0u8; len];
                        let mut ops = [Op::send(peer, &send), Op::recv(peer, &mut recv)];
                        m.exchange(&mut ops, Instant::now() + Duration::from_secs(20)).unwrap();
                        assert!(recv == pattern(peer, k, len), "message {k} ({len} bytes)");
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn ring_exchange_mixed_sizes_and_many_small_messages() {
        let n = 3;
        let meshes = local_mesh(n);
        let handles: Vec<_> = meshes
            .into_iter()
            .map(|mut m| {
                std::thread::spawn(move || {
                    let r = m.rank();
                    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
                    // Sizes straddle the staging/direct-read threshold; zero-length too.
                    for len in [0usize, 1, 7, 8, 4096, 65535, 65536, 1 << 20, 3 << 20] {
                        let send: Vec<u8> = (0..len)
                            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(r as u8))
                            .collect();
                        let mut recv = vec![0u8; len];
                        let mut ops = [Op::send(right, &send), Op::recv(left, &mut recv)];
                        m.exchange(&mut ops, Instant::now() + Duration::from_secs(20)).unwrap();
                        assert!(ops.iter().all(|o| o.done_at.is_some()));
                        let want: Vec<u8> = (0..len)
                            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(left as u8))
                            .collect();
                        assert_eq!(recv, want, "len {len}");
                    }
                    // A window of 500 small messages each way in one batch.
                    let send = vec![r as u8; 3];
                    let mut bufs = vec![[0u8; 3]; 500];
                    let mut ops: Vec<Op<'_>> = (0..500).map(|_| Op::send(right, &send)).collect();
                    ops.extend(bufs.iter_mut().map(|b| Op::recv(left, b)));
                    m.exchange(&mut ops, Instant::now() + Duration::from_secs(20)).unwrap();
                    drop(ops);
                    assert!(bufs.iter().all(|b| *b == [left as u8; 3]));
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn receive_times_out_naming_the_peer() {
        let mut meshes = local_mesh(2);
        let mut buf = [0u8; 4];
        let mut ops = [Op::recv(1, &mut buf)];
        let e = meshes[0]
            .exchange(&mut ops, Instant::now() + Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("rank 0 (h0): timed out after"), "{e}");
        assert!(e.contains("waiting for rank 1 (h1)"), "{e}");
    }

    #[test]
    fn dead_peer_is_reported_not_waited_for() {
        let mut meshes = local_mesh(2);
        drop(meshes.pop());
        let mut buf = [0u8; 4];
        let mut ops = [Op::recv(1, &mut buf)];
        let t0 = Instant::now();
        let e = meshes[0]
            .exchange(&mut ops, Instant::now() + Duration::from_secs(30))
            .unwrap_err()
            .to_string();
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(e.contains("rank 1 (h1) closed the connection"), "{e}");
    }

    #[test]
    fn length_mismatch_is_an_error() {
        let meshes = local_mesh(2);
        let mut it = meshes.into_iter();
        let (mut a, mut b) = (it.next().unwrap(), it.next().unwrap());
        let t = std::thread::spawn(move || {
            let mut ops = [Op::send(0, &[1u8; 5])];
            b.exchange(&mut ops, Instant::now() + Duration::from_secs(5)).unwrap();
            b
        });
        let mut buf = [0u8; 4];
        let mut ops = [Op::recv(1, &mut buf)];
        let e = a
            .exchange(&mut ops, Instant::now() + Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is 5 bytes where 4 were posted"), "{e}");
        t.join().unwrap();
    }

    #[test]
    fn connection_without_token_is_refused() {
        let token = random_token().unwrap();
        let l0 = TcpListening::bind(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        let l1 = TcpListening::bind(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        let eps = vec![l0.local_addr(), l1.local_addr()];
        // A stray client with the wrong token connects first.
        let mut stray = TcpStream::connect(eps[0]).unwrap();
        stray.write_all(&hello([0u8; 16], 1, 2)).unwrap();
        let hosts = vec!["h0".to_string(), "h1".to_string()];
        let (e2, h2) = (eps.clone(), hosts.clone());
        let t = std::thread::spawn(move || l1.connect_all(1, &e2, h2, token, Duration::from_secs(5)).map(|_| ()));
        let m0 = l0.connect_all(0, &eps, hosts, token, Duration::from_secs(5));
        assert!(m0.is_ok());
        assert!(t.join().unwrap().is_ok());
        // The stray got no answer: its connection was dropped.
        let mut b = [0u8; 1];
        stray.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(stray.read(&mut b).unwrap_or(0), 0);
    }
}
