//! A bandwidth test's connections of its own (`pairwise -q N` over TCP): N sockets between the
//! two ranks of a test, apart from the mesh's one connection per pair, each from its own
//! ephemeral source port, so that an ECMP hash of the 5-tuple may send each its own way through a
//! multipath fabric.
//!
//! The receiver listens on an ephemeral port of the mesh's address and sends that address over
//! the mesh; the sender connects N times from the mesh's address, each connection opening with
//! the mesh's hello (this job's token, the sender's rank), which the receiver checks (a stray
//! connection is dropped). A phase then sends on every connection at once: an 8-byte count
//! ([`u64`]'s record) and that many bytes; the receiver answers each connection with the count it
//! read (the same record) once it has all of it, and the sender times each connection from the
//! phase's start to its answer. Every wait is bounded by the caller's deadline; a peer that closes
//! a connection is an error at once.

use super::progress::poll_timeout;
use super::*;
use crate::transport::{StreamSet, Streams};

/// Bytes written or read per call.
const CHUNK: usize = 256 * 1024;

/// The connections of one test with one peer.
pub struct TestStreams {
    rank: usize,
    host: String,
    peer: usize,
    peer_host: String,
    conns: Vec<TcpStream>,
}

impl Streams for TcpMesh {
    fn open_streams(
        &mut self,
        peer: usize,
        n: usize,
        sender: bool,
        deadline: Instant,
    ) -> Result<Box<dyn StreamSet>, TransportError> {
        if peer >= self.size || peer == self.rank {
            return Err(TransportError::BadPeer {
                rank: self.rank,
                peer,
                size: self.size,
            });
        }
        let mut t = TestStreams {
            rank: self.rank,
            host: self.hosts[self.rank].clone(),
            peer,
            peer_host: self.hosts[peer].clone(),
            conns: Vec::with_capacity(n),
        };
        if sender {
            let mut b = [0u8; <SocketAddr as Record>::LEN];
            self.exchange(&mut [Op::recv(peer, &mut b)], deadline)?;
            let to = SocketAddr::from_bytes(&b).ok_or_else(|| {
                TransportError::Setup(format!(
                    "rank {} ({}): the test address rank {peer} ({}) sent could not be decoded; are both ranks \
                     running the same meshrun?",
                    t.rank, t.host, t.peer_host
                ))
            })?;
            let hello = connect::hello(self.token, self.rank, self.size);
            for _ in 0..n {
                let s = t.connect(self.address, to, &hello, deadline)?;
                t.conns.push(s);
            }
        } else {
            let l = listen(self.address).map_err(|e| t.io("listening for the test's connections", e))?;
            let at = l.local_addr().map_err(|e| t.io("the test listener's address", e))?;
            self.exchange(&mut [Op::send(peer, &at.to_bytes())], deadline)?;
            while t.conns.len() < n {
                let s = t.accept(&l, &self.token, self.size, deadline)?;
                t.conns.push(s);
            }
        }
        for s in &t.conns {
            s.set_nonblocking(true)
                .and_then(|()| s.set_nodelay(true))
                .map_err(|e| t.io("configuring a test connection", e))?;
        }
        Ok(Box::new(t))
    }

    fn peer_address(&self, peer: usize) -> Option<IpAddr> {
        self.peers.get(peer)?.as_ref()?.peer_address()
    }
}

/// A listener on an ephemeral port of `ip`, not blocking.
fn listen(ip: IpAddr) -> io::Result<TcpListener> {
    let domain = socket2::Domain::for_address(SocketAddr::new(ip, 0));
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    sock.bind(&SocketAddr::new(ip, 0).into())?;
    sock.listen(1024)?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

impl TestStreams {
    fn io(&self, what: &str, e: io::Error) -> TransportError {
        if matches!(
            e.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
        ) {
            return self.closed(what);
        }
        TransportError::Io {
            rank: self.rank,
            host: self.host.clone(),
            peer: self.peer,
            peer_host: self.peer_host.clone(),
            what: what.into(),
            source: e,
        }
    }

    fn closed(&self, what: &str) -> TransportError {
        TransportError::PeerClosed {
            rank: self.rank,
            host: self.host.clone(),
            peer: self.peer,
            peer_host: self.peer_host.clone(),
            what: format!("a test connection, {what}"),
        }
    }

    fn timeout(&self, started: Instant, what: &str) -> TransportError {
        TransportError::Timeout {
            rank: self.rank,
            host: self.host.clone(),
            peer: self.peer,
            peer_host: self.peer_host.clone(),
            waited: started.elapsed(),
            what: what.into(),
        }
    }

    /// One connection to `to` from an ephemeral port of `from`, opened with `hello`.
    fn connect(
        &self,
        from: IpAddr,
        to: SocketAddr,
        hello: &[u8],
        deadline: Instant,
    ) -> Result<TcpStream, TransportError> {
        let started = Instant::now();
        let left = deadline.saturating_duration_since(started);
        if left.is_zero() {
            return Err(self.timeout(started, "connecting a test connection"));
        }
        let domain = socket2::Domain::for_address(to);
        let sock = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))
            .and_then(|s| s.bind(&SocketAddr::new(from, 0).into()).map(|()| s))
            .map_err(|e| self.io("a test connection's socket", e))?;
        sock.connect_timeout(&to.into(), left).map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                self.timeout(started, "connecting a test connection")
            }
            _ => self.io(&format!("connecting a test connection to {to}"), e),
        })?;
        let s: TcpStream = sock.into();
        s.set_write_timeout(Some(left.max(Duration::from_millis(1))))
            .and_then(|()| (&s).write_all(hello))
            .map_err(|e| self.io("sending a test connection's hello", e))?;
        Ok(s)
    }

    /// The next connection on `l` whose hello is this job's from the peer; others are dropped.
    fn accept(
        &self,
        l: &TcpListener,
        token: &JobToken,
        size: usize,
        deadline: Instant,
    ) -> Result<TcpStream, TransportError> {
        let started = Instant::now();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timeout(started, "waiting for the test's connections"));
            }
            match l.accept() {
                Ok((s, _)) => {
                    let mut b = [0u8; <Hello as Record>::LEN];
                    let read = s
                        .set_nonblocking(false)
                        .and_then(|()| s.set_read_timeout(Some(left.max(Duration::from_millis(1)))))
                        .and_then(|()| (&s).read_exact(&mut b));
                    if read.is_ok() && Hello::check(&b, token, size) == Some(self.peer) {
                        return Ok(s);
                    }
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {
                    let mut fds = [PollFd::new(l.as_fd(), PollFlags::POLLIN)];
                    let _ = poll(&mut fds, poll_timeout(left));
                }
                Err(e) => return Err(self.io("accepting a test connection", e)),
            }
        }
    }

    /// Connection k's answer: the count it read, written whole by `deadline`.
    fn answer(&self, k: usize, count: u64, deadline: Instant) -> Result<(), TransportError> {
        let b = count.to_bytes();
        let mut at = 0;
        let t0 = Instant::now();
        while at < b.len() {
            match (&self.conns[k]).write(&b[at..]) {
                Ok(w) => at += w,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(self.timeout(t0, "answering a test connection"));
                    }
                    let mut fds = [PollFd::new(self.conns[k].as_fd(), PollFlags::POLLOUT)];
                    let _ = poll(&mut fds, poll_timeout(left));
                }
                Err(e) => return Err(self.io("answering a test connection", e)),
            }
        }
        Ok(())
    }
}

impl StreamSet for TestStreams {
    fn ends(&self) -> Vec<(SocketAddr, SocketAddr)> {
        self.conns
            .iter()
            .filter_map(|s| Some((s.local_addr().ok()?, s.peer_addr().ok()?)))
            .collect()
    }

    /// Send `counts[k]` bytes on connection k, every connection at once, and wait for each one's
    /// answer; each connection's seconds from the start to its answer, by `deadline`.
    fn send(&mut self, counts: &[u64], deadline: Instant) -> Result<Vec<f64>, TransportError> {
        let data: Vec<u8> = (0..CHUNK).map(|i| i as u8).collect();
        let n = self.conns.len();
        // Each connection's stream: the count, then its bytes; how far it got; its answer.
        let total: Vec<u64> = (0..n).map(|k| 8 + counts.get(k).copied().unwrap_or(0)).collect();
        let mut sent = vec![0u64; n];
        let mut answer = vec![[0u8; 8]; n];
        let mut heard = vec![0usize; n];
        let mut secs = vec![0.0f64; n];
        let t0 = Instant::now();
        while heard.iter().any(|&h| h < 8) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timeout(t0, "a test connection's bytes or their answer"));
            }
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(n);
            let mut which = Vec::with_capacity(n);
            for k in 0..n {
                let want = if sent[k] < total[k] {
                    PollFlags::POLLOUT
                } else if heard[k] < 8 {
                    PollFlags::POLLIN
                } else {
                    continue;
                };
                fds.push(PollFd::new(self.conns[k].as_fd(), want));
                which.push(k);
            }
            let _ = poll(&mut fds, poll_timeout(left));
            let ready: Vec<usize> = fds
                .iter()
                .zip(&which)
                .filter(|(f, _)| f.revents().is_some_and(|r| !r.is_empty()))
                .map(|(_, &k)| k)
                .collect();
            drop(fds);
            for k in ready {
                if sent[k] < total[k] {
                    let header = counts.get(k).copied().unwrap_or(0).to_bytes();
                    let r = if sent[k] < 8 {
                        (&self.conns[k]).write(&header[sent[k] as usize..])
                    } else {
                        let len = (total[k] - sent[k]).min(CHUNK as u64) as usize;
                        (&self.conns[k]).write(&data[..len])
                    };
                    match r {
                        Ok(w) => sent[k] += w as u64,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(self.io("sending on a test connection", e)),
                    }
                } else {
                    match (&self.conns[k]).read(&mut answer[k][heard[k]..]) {
                        Ok(0) => return Err(self.closed("before answering")),
                        Ok(r) => {
                            heard[k] += r;
                            if heard[k] == 8 {
                                secs[k] = t0.elapsed().as_secs_f64();
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(self.io("reading a test connection's answer", e)),
                    }
                }
            }
        }
        Ok(secs)
    }

    /// Read what the peer's [`TestStreams::send`] sends on every connection and answer each once
    /// it has all its bytes, by `deadline`.
    fn receive(&mut self, deadline: Instant) -> Result<(), TransportError> {
        let n = self.conns.len();
        let mut scratch = vec![0u8; CHUNK];
        let mut header = vec![[0u8; 8]; n];
        let mut got = vec![0u64; n];
        // Bytes still to come, once the count has arrived.
        let mut left: Vec<Option<u64>> = vec![None; n];
        let mut done = vec![false; n];
        let t0 = Instant::now();
        while done.iter().any(|d| !d) {
            let wait = deadline.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                return Err(self.timeout(t0, "a test connection's bytes"));
            }
            let which: Vec<usize> = (0..n).filter(|&k| !done[k]).collect();
            let mut fds: Vec<PollFd<'_>> = which
                .iter()
                .map(|&k| PollFd::new(self.conns[k].as_fd(), PollFlags::POLLIN))
                .collect();
            let _ = poll(&mut fds, poll_timeout(wait));
            drop(fds);
            for k in which {
                let r = match left[k] {
                    None => (&self.conns[k]).read(&mut header[k][got[k] as usize..]),
                    Some(l) => (&self.conns[k]).read(&mut scratch[..(l.min(CHUNK as u64) as usize)]),
                };
                match r {
                    Ok(0) if left[k] != Some(0) => return Err(self.closed("before all its bytes came")),
                    Ok(r) => match left[k].as_mut() {
                        None => {
                            got[k] += r as u64;
                            if got[k] == 8 {
                                left[k] = u64::from_bytes(&header[k]);
                            }
                        }
                        Some(l) => *l -= r as u64,
                    },
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(self.io("reading a test connection", e)),
                }
                if left[k] == Some(0) {
                    let count = u64::from_bytes(&header[k]).unwrap_or(0);
                    self.answer(k, count, deadline)?;
                    done[k] = true;
                }
            }
        }
        Ok(())
    }
}
