//! `-q N` over TCP: one direction of a bandwidth test over N connections of its own
//! ([`ranks::transport::Streams`]), each from its own source port, the test's messages dealt out
//! over them (connection k carries messages k, k + N, ...). The sender times each connection to
//! the receiver's answer for its last byte: the test's Gb/s is all the bytes over the slowest
//! connection's time, each connection's its own bytes over its own time. Then, where asked, the
//! sender traces each connection's 5-tuple ([`ranks::trace`]) while both ends hold it open and
//! idle, all of a test's traces within [`TRACE_BUDGET`], and tells the receiver over the mesh when
//! it is done.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use analysis::pairwise::connections::{Connection, Path};
use analysis::pairwise::formulas::{gbps, mpps, BwResult};
use analysis::pairwise::Amount;
use ranks::trace::{self, TraceError, TraceOptions};
use ranks::transport::Streams;
use ranks::{Op, Transport, TransportError};

use super::measure::MeasureSpec;

/// The most time one test's traces take, all its connections together (at most half the
/// per-operation timeout): the peer waits on the mesh meanwhile.
pub const TRACE_BUDGET: Duration = Duration::from_secs(4);

/// How each connection is traced: a leaf-spine path is 2 to 6 hops, so 8 TTLs; a router answers
/// within milliseconds, so 250 ms per probe and two tries; two silent TTLs in a row end it.
fn trace_options(total: Duration) -> TraceOptions {
    TraceOptions {
        max_hops: 8,
        probe_timeout: Duration::from_millis(250),
        attempts: 2,
        gap_limit: 2,
        total,
    }
}

/// Messages per connection: `iters` dealt out over `n`, the first `iters % n` one more.
pub fn dealt(iters: u64, n: usize) -> Vec<u64> {
    let n = n.max(1) as u64;
    (0..n).map(|k| iters / n + u64::from(k < iters % n)).collect()
}

/// The bound on one phase of `msgs` messages: the per-operation timeout per window, as the
/// two-sided loops allow.
fn phase_deadline(spec: &MeasureSpec, msgs: u64) -> Instant {
    let windows = msgs.div_ceil(spec.window.max(1) as u64).max(1);
    Instant::now() + spec.op_timeout.saturating_mul(windows.min(u32::MAX as u64) as u32)
}

fn iterations(spec: &MeasureSpec) -> Result<u64, TransportError> {
    match spec.amount {
        Amount::Iterations(n) => Ok(n),
        Amount::Duration(_) => Err(TransportError::Setup(
            "-q over TCP counts messages: use -n ITERS, not -D".into(),
        )),
    }
}

fn streams_of(t: &mut dyn Transport) -> Result<&mut dyn Streams, TransportError> {
    let kind = t.kind();
    t.streams()
        .ok_or_else(|| TransportError::Setup(format!("the {kind} transport has no TCP connections of its own for -q")))
}

/// The sender's side: the test's result and each connection's ends, figure and (with `traced`)
/// path.
pub fn bw_send(
    t: &mut dyn Transport,
    peer: usize,
    spec: &MeasureSpec,
    traced: bool,
) -> Result<(BwResult, Vec<Connection>), TransportError> {
    let iters = iterations(spec)?;
    let mesh = streams_of(t)?;
    let mut s = mesh.open_streams(peer, spec.qps, true, Instant::now() + spec.op_timeout)?;
    let ends = s.ends();
    let bytes = |msgs: &[u64]| -> Vec<u64> { msgs.iter().map(|m| m * spec.bytes as u64).collect() };
    if spec.warmup > 0 {
        s.send(&bytes(&dealt(spec.warmup, spec.qps)), phase_deadline(spec, spec.warmup))?;
    }
    let counts = bytes(&dealt(iters, spec.qps));
    let secs = s.send(&counts, phase_deadline(spec, iters))?;
    let slowest = secs.iter().copied().fold(0.0, f64::max);
    let avg = gbps(counts.iter().sum::<u64>() as f64, slowest);
    let result = BwResult {
        bytes: spec.bytes as u64,
        iterations: iters,
        peak_gbps: avg,
        avg_gbps: avg,
        msg_rate_mpps: mpps(iters as f64, slowest),
        low_gbps: None,
    };
    let budget = TRACE_BUDGET.min(spec.op_timeout / 2);
    let end = Instant::now() + budget;
    let conns = ends
        .into_iter()
        .zip(counts.iter().zip(&secs))
        .map(|((from, to), (&b, &sec))| Connection {
            from,
            to,
            bytes: b,
            gbps: gbps(b as f64, sec),
            path: traced.then(|| path_of(from, to, end, budget)),
        })
        .collect();
    if traced {
        // The receiver held its ends open and idle while they were traced (its FIN must not
        // read as a probe's answer); now both close.
        t.exchange(
            &mut [Op::send(peer, &0u64.to_le_bytes())],
            Instant::now() + spec.op_timeout,
        )?;
    }
    drop(s);
    Ok((result, conns))
}

/// The receiver's side; with `traced` (as the sender's), its ends stay open until the sender
/// has traced them.
pub fn bw_recv(t: &mut dyn Transport, peer: usize, spec: &MeasureSpec, traced: bool) -> Result<(), TransportError> {
    let iters = iterations(spec)?;
    let mesh = streams_of(t)?;
    let mut s = mesh.open_streams(peer, spec.qps, false, Instant::now() + spec.op_timeout)?;
    if spec.warmup > 0 {
        s.receive(phase_deadline(spec, spec.warmup))?;
    }
    s.receive(phase_deadline(spec, iters))?;
    if traced {
        let mut done = [0u8; 8];
        t.exchange(&mut [Op::recv(peer, &mut done)], Instant::now() + spec.op_timeout)?;
    }
    drop(s);
    Ok(())
}

/// The path of the connection `from` -> `to`, traced by `end` (the test's `budget` for traces).
fn path_of(from: SocketAddr, to: SocketAddr, end: Instant, budget: Duration) -> Path {
    let (SocketAddr::V4(local), SocketAddr::V4(remote)) = (from, to) else {
        return Path::Untraced {
            reason: "IPv6 connections are not traced".into(),
        };
    };
    let left = end.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Path::Untraced {
            reason: format!(
                "out of time: a test's traces take {:.1} s at most",
                budget.as_secs_f64()
            ),
        };
    }
    traced_path(trace::trace(trace::Connection { local, remote }, &trace_options(left)))
}

/// A trace as the report keeps it: its routers and whether it arrived, or why there is none.
pub(super) fn traced_path(t: Result<trace::Trace, TraceError>) -> Path {
    match t {
        Ok(tr) => Path::Traced {
            hops: tr.routers().into_iter().map(|h| h.map(Into::into)).collect(),
            reached: tr.reached(),
        },
        Err(TraceError::NotPermitted) => Path::Untraced {
            reason: "no CAP_NET_RAW (the probes go out on raw sockets: run as root, or setcap cap_net_raw+ep \
                     meshrun; --no-trace skips them)"
                .into(),
        },
        Err(e) => Path::Untraced { reason: e.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_dealt_over_the_connections_first_ones_first() {
        assert_eq!(dealt(10, 4), [3, 3, 2, 2]);
        assert_eq!(dealt(8, 4), [2, 2, 2, 2]);
        assert_eq!(dealt(2, 4), [1, 1, 0, 0]);
        assert_eq!(dealt(0, 2), [0, 0]);
        assert_eq!(dealt(5, 0), [5], "no connections reads as one");
        assert_eq!(dealt(1000, 7).iter().sum::<u64>(), 1000);
    }

    #[test]
    fn an_ipv6_connection_is_not_traced_and_says_so() {
        let a: SocketAddr = "[fe80::1]:40000".parse().unwrap();
        let b: SocketAddr = "[fe80::2]:5000".parse().unwrap();
        let end = Instant::now() + Duration::from_secs(1);
        assert_eq!(
            path_of(a, b, end, Duration::from_secs(1)),
            Path::Untraced {
                reason: "IPv6 connections are not traced".into()
            }
        );
        // Out of the test's budget: no probe at all.
        let (a, b) = ("10.0.0.1:40000".parse().unwrap(), "10.0.0.2:5000".parse().unwrap());
        let p = path_of(a, b, Instant::now(), Duration::from_secs(4));
        assert_eq!(
            p,
            Path::Untraced {
                reason: "out of time: a test's traces take 4.0 s at most".into()
            }
        );
    }
}
