//! The path one TCP connection takes through a routed fabric, hop by hop, as tcptraceroute and
//! Paris traceroute find it: probes that carry the connection's own addresses, ports and
//! protocol, with TTL 1, 2, 3 ..., so that every ECMP hash on the way (an L4 hash of the 5-tuple)
//! sends them where the connection's segments go; each router where a probe's TTL runs out
//! answers with an ICMP time-exceeded from its address.
//!
//! The probe is a bare TCP ACK with no data, sent on a raw socket. Why not the connection's own
//! socket with `IP_RECVERR`: its TTL would apply to its data too, which routers would then drop
//! and the connection retransmit. Why not UDP with the same ports (no raw socket needed): the
//! protocol is in the hash, so UDP probes may take another path. A bare ACK out of the
//! receiver's window changes nothing there: the far end drops it and answers with a duplicate
//! ACK (at most one per half second, `tcp_invalid_ratelimit`), which is how a trace knows its
//! probe reached the destination. To a port with no connection the far end answers with a
//! reset, so a connection need not exist to trace the path it would take. Each probe's sequence
//! number names it (its TTL and attempt, from a random base); the ICMP error quotes it. An ICMP
//! error about a probe also reaches the local end of the traced connection, which ignores it:
//! its sequence number is outside what that end has in flight.
//!
//! A bare ACK or a reset from the far end of the 5-tuple after a probe counts as the answer (its
//! data, SYN or FIN do not: [`is_own_traffic`]), so trace a connection while it is idle (before or
//! after a measurement), not while it carries data.
//!
//! A RoCE v2 queue pair's packets are UDP to port 4791 from a source port that follows from its
//! flow label (the kernel's `rdma_flow_label_to_udp_sport`), so its path is traced with UDP
//! probes of those ports ([`Probe::RoceV2`], [`trace_as`]), told apart by their length (in no
//! hash); a RoCE NIC at the far end drops them, so such a trace ends at the last router (a host
//! without RoCE answers port unreachable, which counts as the far end).
//!
//! Raw sockets need CAP_NET_RAW: without it [`trace`] fails with [`TraceError::NotPermitted`],
//! and a caller goes on without paths.
//!
//! By hand, in a host of the leaf-spine test bed (`scripts/leafspine`):
//! ```text
//! cargo build -p ranks --example trace
//! scripts/leafspine exec mrls-h4 target/debug/examples/trace --listen 5000 --for 30 &
//! scripts/leafspine exec mrls-h0 target/debug/examples/trace 10.80.2.10:5000 --sport 40000 --connect
//! ```
//! prints each hop (`1  10.80.0.1  0.062 ms`), then whether the probes reached the destination.
//! Without `--connect` it traces the 5-tuple with no connection behind it.

mod packet;
mod socket;

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

pub use packet::{
    is_own_traffic, parse_icmp_error, parse_tcp, tcp_checksum, tcp_probe, udp_probe, IcmpError, IcmpKind, UDP_HEADER,
};
use socket::{Datagram, ProbeSockets};

/// The connection whose path is traced: the probes carry these addresses and ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
}

/// What a trace's probes are: the traced flow's own protocol, so every hash on the way sends them
/// where the flow goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Bare ACKs of a TCP connection.
    Tcp,
    /// UDP datagrams of a RoCE v2 queue pair: its source port to [`ROCE_V2_PORT`].
    RoceV2,
}

/// RoCE v2's UDP destination port (IANA).
pub const ROCE_V2_PORT: u16 = 4791;

/// How far and how long a trace probes.
#[derive(Debug, Clone, Copy)]
pub struct TraceOptions {
    /// The largest TTL tried.
    pub max_hops: u8,
    /// How long one probe waits for its answer.
    pub probe_timeout: Duration,
    /// Probes per TTL before it counts as silent.
    pub attempts: u8,
    /// The trace gives up after this many silent TTLs in a row.
    pub gap_limit: u8,
    /// The whole trace's bound: no probe is sent, and none waited for, past it (the hops found
    /// by then are the trace, short of the far end).
    pub total: Duration,
}

impl Default for TraceOptions {
    /// A leaf-spine path is 2 to 6 hops; 16 leaves room. Routers answer within milliseconds; a
    /// second attempt comes after the far end's half-second limit on duplicate ACKs.
    fn default() -> Self {
        TraceOptions {
            max_hops: 16,
            probe_timeout: Duration::from_millis(600),
            attempts: 2,
            gap_limit: 3,
            total: Duration::from_secs(10),
        }
    }
}

/// What answered the probes of one TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// A router where the TTL ran out (time exceeded), at this address.
    Router(Ipv4Addr),
    /// The far end itself: a TCP segment of the 5-tuple came back.
    Destination,
    /// Destination unreachable (this code) from this address: the path ends there.
    Unreachable(Ipv4Addr, u8),
    /// Nothing within the deadline, every attempt.
    Silent,
}

/// One TTL of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    pub ttl: u8,
    pub reply: Reply,
    /// From the answered probe's send to its answer.
    pub rtt: Option<Duration>,
}

/// A connection's path: a hop per TTL tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub connection: Connection,
    pub hops: Vec<Hop>,
}

impl Trace {
    /// Whether a probe reached the far end.
    pub fn reached(&self) -> bool {
        self.hops.last().is_some_and(|h| h.reply == Reply::Destination)
    }

    /// The routers on the path in order, `None` for a silent TTL.
    pub fn routers(&self) -> Vec<Option<Ipv4Addr>> {
        self.hops
            .iter()
            .filter_map(|h| match h.reply {
                Reply::Router(a) | Reply::Unreachable(a, _) => Some(Some(a)),
                Reply::Silent => Some(None),
                Reply::Destination => None,
            })
            .collect()
    }
}

/// Why a trace could not run.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("tracing needs CAP_NET_RAW (run as root, or setcap cap_net_raw+ep meshrun); the verdict falls back to inference")]
    NotPermitted,
    #[error("path trace: {what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("path trace: {0}")]
    Options(&'static str),
}

impl TraceError {
    fn io(what: &'static str, source: io::Error) -> TraceError {
        TraceError::Io { what, source }
    }
}

/// Trace `connection`'s path: TTL 1, 2, ... until the far end answers, a router says it is
/// unreachable, `gap_limit` TTLs in a row stay silent, `max_hops`, or `total` has passed. Every
/// wait is bounded: at most `max_hops x attempts x probe_timeout` in all, and never past `total`.
pub fn trace(connection: Connection, options: &TraceOptions) -> Result<Trace, TraceError> {
    trace_as(connection, Probe::Tcp, options)
}

/// [`trace`] with probes of kind `probe`: a RoCE v2 queue pair's path from its UDP source port
/// (`connection.remote`'s port is then [`ROCE_V2_PORT`]).
pub fn trace_as(connection: Connection, probe: Probe, options: &TraceOptions) -> Result<Trace, TraceError> {
    if options.max_hops == 0 || options.attempts == 0 || options.probe_timeout.is_zero() || options.total.is_zero() {
        return Err(TraceError::Options(
            "max hops, attempts, the probe timeout and the total must be above 0",
        ));
    }
    let end = Instant::now() + options.total;
    let sockets = ProbeSockets::open(*connection.local.ip(), probe)?;
    let base = random_base()?;
    let mut hops = Vec::new();
    let mut silent = 0u8;
    for ttl in 1..=options.max_hops {
        if Instant::now() >= end {
            break;
        }
        let hop = probe_ttl(&sockets, (connection, probe), base, ttl, options, end)?;
        silent = if hop.reply == Reply::Silent { silent + 1 } else { 0 };
        let last = matches!(hop.reply, Reply::Destination | Reply::Unreachable(..));
        hops.push(hop);
        if last || silent >= options.gap_limit.max(1) {
            break;
        }
    }
    Ok(Trace { connection, hops })
}

/// The sequence number of probe (`ttl`, `attempt`): distinct for every probe of a trace.
fn probe_seq(base: u32, ttl: u8, attempt: u8) -> u32 {
    base.wrapping_add((u32::from(ttl) << 8) | u32::from(attempt))
}

/// The length of UDP probe (`ttl`, `attempt`): distinct for every probe of a trace, and never
/// shorter than a header with a little after it.
fn probe_len(ttl: u8, attempt: u8, attempts: u8) -> u16 {
    (UDP_HEADER as u16 + 8) + u16::from(ttl) * u16::from(attempts) + u16::from(attempt)
}

fn probe_ttl(
    sockets: &ProbeSockets,
    (c, probe): (Connection, Probe),
    base: u32,
    ttl: u8,
    options: &TraceOptions,
    end: Instant,
) -> Result<Hop, TraceError> {
    for attempt in 0..options.attempts {
        if Instant::now() >= end {
            break;
        }
        let (seq, segment) = match probe {
            Probe::Tcp => {
                let seq = probe_seq(base, ttl, attempt);
                // The ACK number is as arbitrary as the sequence number: nothing acts on it.
                (seq, tcp_probe(c.local, c.remote, seq, seq.rotate_left(16)).to_vec())
            }
            Probe::RoceV2 => {
                let len = probe_len(ttl, attempt, options.attempts);
                (u32::from(len), udp_probe(c.local, c.remote, len))
            }
        };
        let sent = Instant::now();
        sockets.send(ttl, &segment, *c.remote.ip())?;
        let deadline = (sent + options.probe_timeout).min(end);
        while let Some(d) = sockets.next(deadline)? {
            if let Some(reply) = answer(&d, (c, probe), seq) {
                return Ok(Hop {
                    ttl,
                    reply,
                    rtt: Some(sent.elapsed()),
                });
            }
        }
    }
    Ok(Hop {
        ttl,
        reply: Reply::Silent,
        rtt: None,
    })
}

/// ICMP's "port unreachable": from the far end of a UDP probe, the probe arrived.
const PORT_UNREACHABLE: u8 = 3;

/// Whether `d` answers the probe `seq` (sequence number, or UDP length) of connection `c`, and how.
fn answer(d: &Datagram, (c, probe): (Connection, Probe), seq: u32) -> Option<Reply> {
    let udp = probe == Probe::RoceV2;
    match d {
        Datagram::Icmp(b) => {
            let e = parse_icmp_error(b)?;
            if e.src != c.local || e.dst != c.remote || e.seq != seq || e.udp != udp {
                return None;
            }
            Some(match e.kind {
                IcmpKind::TimeExceeded => Reply::Router(e.from),
                IcmpKind::Unreachable(PORT_UNREACHABLE) if udp && e.from == *c.remote.ip() => Reply::Destination,
                IcmpKind::Unreachable(code) => Reply::Unreachable(e.from, code),
            })
        }
        // What the raw UDP socket sees coming in is no answer to a probe.
        Datagram::Tcp(_) if udp => None,
        Datagram::Tcp(b) => (parse_tcp(b)? == (c.remote, c.local) && !is_own_traffic(b)).then_some(Reply::Destination),
    }
}

fn random_base() -> Result<u32, TraceError> {
    use std::io::Read;
    let mut b = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| TraceError::io("read /dev/urandom", e))?;
    Ok(u32::from_ne_bytes(b))
}

#[cfg(test)]
mod tests;
