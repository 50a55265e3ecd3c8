//! Connecting the TCP mesh: every rank listens, connects to lower ranks and accepts higher ones,
//! and both ends of each connection check the other's hello (job token, rank, size).

use super::progress::poll_timeout;
use super::*;

/// Draw a job token from the kernel's random source.
pub fn random_token() -> io::Result<JobToken> {
    let mut t = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut t)?;
    Ok(t)
}

/// A rank's listening socket, before endpoints are exchanged.
pub struct TcpListening {
    listener: TcpListener,
    local: SocketAddr,
}

/// A mesh of `n` ranks inside this process, each connected on loopback from a thread of its
/// own (host names `h0`, `h1`, ...), for tests and examples that run ranks as threads; every
/// connect bounded by `timeout`.
pub fn loopback_mesh(n: usize, timeout: Duration) -> Result<Vec<TcpMesh>, TransportError> {
    let token = random_token().map_err(|e| TransportError::Local(format!("a job token: {e}")))?;
    let listening = (0..n)
        .map(|_| TcpListening::bind(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| TransportError::Local(format!("listening on loopback: {e}")))?;
    let eps: Vec<SocketAddr> = listening.iter().map(TcpListening::local_addr).collect();
    let hosts: Vec<String> = (0..n).map(|r| format!("h{r}")).collect();
    let handles: Vec<_> = listening
        .into_iter()
        .enumerate()
        .map(|(r, l)| {
            let (eps, hosts) = (eps.clone(), hosts.clone());
            std::thread::spawn(move || l.connect_all(r, &eps, hosts, token, timeout))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| TransportError::Local("a loopback rank's thread panicked".into()))?
        })
        .collect()
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
        let address = self.local_addr().ip();
        let job = ConnectJob {
            rank,
            size,
            hosts: &hosts,
            token,
            deadline: Instant::now() + timeout,
            timeout,
        };
        let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
        // 1. Connect to every lower rank. Their listen backlog completes the handshake even while
        //    they are busy connecting to their own lower ranks, so this cannot deadlock.
        for peer in 0..rank {
            streams[peer] = Some(job.connect_lower(peer, endpoints[peer])?);
        }
        // 2. Accept every higher rank; refuse connections without this job's token.
        self.accept_higher(&job, &mut streams)?;
        // 3. Check the answers of the lower ranks.
        for (peer, slot) in streams.iter().enumerate().take(rank) {
            if let Some(s) = slot {
                job.check_answer(peer, s, endpoints[peer])?;
            }
        }
        let mut peers = Vec::with_capacity(size);
        for (peer, s) in streams.into_iter().enumerate() {
            peers.push(s.map(|s| job.ready_peer(peer, s)).transpose()?);
        }
        Ok(TcpMesh {
            rank,
            size,
            hosts,
            peers,
            address,
            token,
        })
    }

    /// Accept connections until every higher rank has sent a valid hello (and got ours back).
    /// Hellos are read from every accepted socket at once, each bounded by [`HELLO_WAIT`]: a
    /// stray connection that never speaks, or speaks garbage, is dropped on its own without
    /// holding up the ranks behind it.
    fn accept_higher(&self, job: &ConnectJob<'_>, streams: &mut [Option<TcpStream>]) -> Result<(), TransportError> {
        let rank = job.rank;
        self.listener
            .set_nonblocking(true)
            .map_err(|e| job.io_err(rank, "listening".into(), e))?;
        let mut missing: Vec<usize> = (rank + 1..job.size).collect();
        let mut pending: Vec<PendingHello> = Vec::new();
        let refuse = |p: &PendingHello, why: &str| {
            crate::eline!(
                "meshrun: rank {rank} ({}): refused a connection from {}: {why}",
                job.hosts[rank],
                p.from
            );
        };
        while !missing.is_empty() {
            // 1. Take every connection waiting in the backlog.
            loop {
                match self.listener.accept() {
                    Ok((s, from)) => {
                        let _ = s.set_nonblocking(true);
                        pending.push(PendingHello {
                            s,
                            from,
                            buf: [0u8; <Hello as Record>::LEN],
                            have: 0,
                            until: Instant::now() + job.left().min(HELLO_WAIT),
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(job.io_err(rank, "accepting connections".into(), e)),
                }
            }
            // 2. Read what each pending connection has sent; settle the complete ones.
            let mut i = 0;
            while i < pending.len() {
                let p = &mut pending[i];
                let outcome = match (&p.s).read(&mut p.buf[p.have..]) {
                    Ok(0) => Some(Err("it closed before a hello")),
                    Ok(n) => {
                        p.have += n;
                        (p.have == p.buf.len()).then_some(Ok(()))
                    }
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {
                        (Instant::now() >= p.until).then_some(Err("no hello within 5 s"))
                    }
                    Err(_) => Some(Err("it failed before a hello")),
                };
                let Some(outcome) = outcome else {
                    i += 1;
                    continue;
                };
                let p = pending.swap_remove(i);
                let peer = match outcome {
                    Ok(()) => match Hello::check(&p.buf, &job.token, job.size) {
                        Some(peer) if missing.contains(&peer) => peer,
                        _ => {
                            refuse(&p, "no valid hello with this job's token");
                            continue;
                        }
                    },
                    Err(why) => {
                        refuse(&p, why);
                        continue;
                    }
                };
                let s = p.s;
                s.set_nonblocking(false)
                    .map_err(|e| job.io_err(peer, "configuring the socket".into(), e))?;
                s.set_nodelay(true)
                    .map_err(|e| job.io_err(peer, "setting TCP_NODELAY".into(), e))?;
                let _ = s.set_write_timeout(Some(job.left()));
                (&s).write_all(&job.hello())
                    .map_err(|e| job.io_err(peer, "answering the hello".into(), e))?;
                missing.retain(|&m| m != peer);
                streams[peer] = Some(s);
            }
            if missing.is_empty() {
                break;
            }
            // 3. Wait for a new connection or more bytes, until the nearest deadline.
            let now = Instant::now();
            let left = job.deadline.saturating_duration_since(now);
            if left.is_zero() {
                let names: Vec<String> = missing.iter().map(|&m| format!("{m} ({})", job.hosts[m])).collect();
                return Err(job.timeout(
                    missing[0],
                    format!("no connection came from ranks {}", names.join(", ")),
                ));
            }
            let wait = pending
                .iter()
                .map(|p| p.until.saturating_duration_since(now))
                .fold(left, Duration::min);
            let mut fds: Vec<PollFd<'_>> = std::iter::once(PollFd::new(self.listener.as_fd(), PollFlags::POLLIN))
                .chain(pending.iter().map(|p| PollFd::new(p.s.as_fd(), PollFlags::POLLIN)))
                .collect();
            let _ = poll(&mut fds, poll_timeout(wait.max(Duration::from_millis(1))));
        }
        Ok(())
    }
}

/// How long an accepted connection may take to send its hello.
const HELLO_WAIT: Duration = Duration::from_secs(5);

/// An accepted connection whose hello is still coming.
struct PendingHello {
    s: TcpStream,
    from: SocketAddr,
    buf: [u8; <Hello as Record>::LEN],
    have: usize,
    until: Instant,
}

/// What every step of connecting needs: who we are, the job, and the deadline.
struct ConnectJob<'a> {
    rank: usize,
    size: usize,
    hosts: &'a [String],
    token: JobToken,
    deadline: Instant,
    timeout: Duration,
}

impl ConnectJob<'_> {
    fn hello(&self) -> Vec<u8> {
        hello(self.token, self.rank, self.size)
    }

    /// Time left, at least a millisecond (socket timeouts refuse zero).
    fn left(&self) -> Duration {
        self.deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }

    fn io_err(&self, peer: usize, what: String, source: io::Error) -> TransportError {
        TransportError::io(self.rank, self.hosts, peer, what, source)
    }

    fn timeout(&self, peer: usize, what: String) -> TransportError {
        TransportError::timeout(self.rank, self.hosts, peer, self.timeout, what)
    }

    /// Connect to lower rank `peer` at `addr` (retrying while it is not listening yet) and send
    /// our hello.
    fn connect_lower(&self, peer: usize, addr: SocketAddr) -> Result<TcpStream, TransportError> {
        let s = loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timeout(peer, format!("connecting to {addr}")));
            }
            match TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(5))) {
                Ok(s) => break s,
                Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::TimedOut) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(self.io_err(peer, format!("connecting to {addr}"), e)),
            }
        };
        s.set_nodelay(true)
            .map_err(|e| self.io_err(peer, "setting TCP_NODELAY".into(), e))?;
        s.set_write_timeout(Some(self.left()))
            .map_err(|e| self.io_err(peer, "setting a write timeout".into(), e))?;
        (&s).write_all(&self.hello())
            .map_err(|e| self.io_err(peer, "sending the hello".into(), e))?;
        Ok(s)
    }

    /// The lower rank `peer` answered our hello with its own, of this job.
    fn check_answer(&self, peer: usize, s: &TcpStream, addr: SocketAddr) -> Result<(), TransportError> {
        let _ = s.set_read_timeout(Some(self.left()));
        let mut buf = [0u8; <Hello as Record>::LEN];
        match s.try_clone().and_then(|mut c| c.read_exact(&mut buf)) {
            Ok(()) if Hello::check(&buf, &self.token, self.size) == Some(peer) => Ok(()),
            Ok(()) => Err(TransportError::Setup(format!(
                "rank {} ({}): the answer from rank {peer} ({}) at {addr} does not carry this job's token or rank; is another job using that address?",
                self.rank, self.hosts[self.rank], self.hosts[peer]
            ))),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                Err(self.timeout(peer, "waiting for the answer to our hello".into()))
            }
            Err(e) => Err(self.io_err(peer, "reading the answer to our hello".into(), e)),
        }
    }

    /// A connected socket made ready for the progress loop: no timeouts, non-blocking.
    fn ready_peer(&self, peer: usize, s: TcpStream) -> Result<PeerConn, TransportError> {
        let cfg = |e| self.io_err(peer, "configuring the socket".into(), e);
        s.set_read_timeout(None).map_err(cfg)?;
        s.set_write_timeout(None).map_err(cfg)?;
        s.set_nonblocking(true).map_err(cfg)?;
        Ok(PeerConn::new(s))
    }
}

pub(super) fn hello(token: JobToken, rank: usize, size: usize) -> Vec<u8> {
    Hello {
        token,
        rank: rank as u32,
        size: size as u32,
    }
    .to_bytes()
}
