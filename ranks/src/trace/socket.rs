//! The sockets of a trace: a raw TCP socket the probes go out on (bound to the connection's local
//! address, its TTL set per probe), which also sees every TCP segment coming in, the far end's
//! answer among them; and a raw ICMP socket the routers' errors come back on. Both need
//! CAP_NET_RAW; both are read without blocking, with one `poll` bounded by a deadline.

use std::io::{self, Read};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsFd;
use std::time::Instant;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::{Probe, TraceError};

/// What one read brought: a datagram (IPv4 header first) from either socket (`Tcp`: the probes'
/// own socket, UDP for RoCE v2 probes).
#[derive(Debug)]
pub enum Datagram {
    Icmp(Vec<u8>),
    Tcp(Vec<u8>),
}

/// The two raw sockets of one trace.
pub struct ProbeSockets {
    tcp: Socket,
    icmp: Socket,
}

/// The largest datagram read: an ICMP error quotes at most 576 bytes in all (RFC 1812), a TCP
/// segment seen in passing may be a whole jumbo frame; only its headers are read.
const READ_BUF: usize = 9216;

fn raw(protocol: Protocol, what: &'static str) -> Result<Socket, TraceError> {
    Socket::new(Domain::IPV4, Type::RAW, Some(protocol)).map_err(|e| opening_failed(what, e))
}

/// Why a raw socket could not be opened: a refusal (no CAP_NET_RAW) is an error of its own.
pub(super) fn opening_failed(what: &'static str, e: io::Error) -> TraceError {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => TraceError::NotPermitted,
        _ => TraceError::io(what, e),
    }
}

impl ProbeSockets {
    /// Both sockets, probes leaving from `local` (the traced connection's local address): a raw
    /// TCP socket for TCP probes, a raw UDP one for RoCE v2's.
    pub fn open(local: Ipv4Addr, probe: Probe) -> Result<ProbeSockets, TraceError> {
        let tcp = match probe {
            Probe::Tcp => raw(Protocol::TCP, "raw TCP socket")?,
            Probe::RoceV2 => raw(Protocol::UDP, "raw UDP socket")?,
        };
        tcp.bind(&SockAddr::from(SocketAddrV4::new(local, 0)))
            .map_err(|e| TraceError::io("bind the raw probe socket to the flow's address", e))?;
        let icmp = raw(Protocol::ICMPV4, "raw ICMP socket")?;
        for s in [&tcp, &icmp] {
            s.set_nonblocking(true)
                .map_err(|e| TraceError::io("non-blocking raw socket", e))?;
        }
        Ok(ProbeSockets { tcp, icmp })
    }

    /// Send `segment` (a TCP header and whatever follows) to `to` with time to live `ttl`.
    pub fn send(&self, ttl: u8, segment: &[u8], to: Ipv4Addr) -> Result<(), TraceError> {
        self.tcp
            .set_ttl(u32::from(ttl))
            .map_err(|e| TraceError::io("set the probe's TTL", e))?;
        self.tcp
            .send_to(segment, &SockAddr::from(SocketAddrV4::new(to, 0)))
            .map_err(|e| TraceError::io("send a probe", e))?;
        Ok(())
    }

    /// The next datagram on either socket, or `None` once `deadline` has passed.
    pub fn next(&self, deadline: Instant) -> Result<Option<Datagram>, TraceError> {
        loop {
            if let Some(d) = read_one(&self.icmp)? {
                return Ok(Some(Datagram::Icmp(d)));
            }
            if let Some(d) = read_one(&self.tcp)? {
                return Ok(Some(Datagram::Tcp(d)));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            // Rounded up, so a wait of less than a millisecond still waits.
            let ms = u16::try_from(left.as_millis() + 1).unwrap_or(u16::MAX);
            let mut fds = [
                PollFd::new(self.icmp.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.tcp.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(TraceError::io("poll the raw sockets", e.into())),
            }
        }
    }
}

/// One datagram from `s` if one is waiting.
fn read_one(s: &Socket) -> Result<Option<Vec<u8>>, TraceError> {
    let mut buf = vec![0u8; READ_BUF];
    let mut r: &Socket = s;
    match r.read(&mut buf) {
        Ok(n) => {
            buf.truncate(n);
            Ok(Some(buf))
        }
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => Ok(None),
        Err(e) => Err(TraceError::io("read a raw socket", e)),
    }
}
