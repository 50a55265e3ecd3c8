//! One measurement between two ranks over the two-sided operations of a [`Transport`].
//!
//! Bandwidth: the sender posts messages in batches of the window (`-t`), the receiver receives them
//! and answers with a 16-byte acknowledgement carrying its peak and slowest slice rates. Average
//! bandwidth is the bytes over the time from the sender's first post to that acknowledgement
//! (perftest: first post to last completion). Latency: ping-pong, the lower rank timing each round trip; samples are half trips.

use std::time::{Duration, Instant};

use analysis::pairwise::formulas::{gbps, mpps, peak_and_low, per_qp_gbps, BwResult, LatencyStats};
use analysis::pairwise::Amount;
use ranks::{OneSidedOp, OneSidedRole, Op, Transport, TransportError};

pub use super::timed::MeasureSpec;
use super::timed::{count_for, probe_len, run_deadline};

/// Receive buffers at most this large in total per batch. A window of 8 MiB messages would need
/// 1 GiB, and spreading receives over a large scratch area evicts the caches a stream benefits
/// from; over TCP the receive batch does not change what is on the wire.
const RECV_BATCH_BYTES: usize = 2 << 20;

fn recv_batch_len(spec: &MeasureSpec) -> usize {
    spec.window.min((RECV_BATCH_BYTES / spec.bytes.max(1)).max(1)).max(1)
}

/// Send `n` messages of `buf` to `peer` in batches of `window`.
fn send_n(
    t: &mut dyn Transport,
    peer: usize,
    buf: &[u8],
    n: u64,
    window: usize,
    timeout: Duration,
) -> Result<(), TransportError> {
    let mut left = n;
    while left > 0 {
        let k = left.min(window as u64) as usize;
        let mut ops: Vec<Op<'_>> = (0..k).map(|_| Op::send(peer, buf)).collect();
        t.exchange(&mut ops, Instant::now() + timeout)?;
        left -= k as u64;
    }
    Ok(())
}

/// Receive `n` messages of `bytes` from `peer`; returns completion times in seconds since `t0`
/// when `times` is asked for.
fn recv_n(
    t: &mut dyn Transport,
    peer: usize,
    spec: &MeasureSpec,
    n: u64,
    scratch: &mut [u8],
    times: Option<(&mut Vec<f64>, Instant)>,
) -> Result<(), TransportError> {
    let k_max = recv_batch_len(spec);
    let mut left = n;
    let mut times = times;
    while left > 0 {
        let k = left.min(k_max as u64) as usize;
        let mut ops: Vec<Op<'_>> = if spec.bytes == 0 {
            (0..k).map(|_| Op::recv(peer, &mut [])).collect()
        } else {
            scratch[..k * spec.bytes]
                .chunks_mut(spec.bytes)
                .map(|b| Op::recv(peer, b))
                .collect()
        };
        t.exchange(&mut ops, Instant::now() + spec.op_timeout)?;
        if let Some((v, t0)) = times.as_mut() {
            v.extend(
                ops.iter()
                    .filter_map(|o| o.done_at)
                    .map(|d| d.duration_since(*t0).as_secs_f64()),
            );
        }
        left -= k as u64;
    }
    Ok(())
}

/// What a bandwidth test sends: `spec.bytes` of a counting pattern.
fn payload(spec: &MeasureSpec) -> Vec<u8> {
    (0..spec.bytes).map(|i| i as u8).collect()
}

fn scratch_for(spec: &MeasureSpec) -> Vec<u8> {
    vec![0u8; recv_batch_len(spec) * spec.bytes]
}

/// The sender's side of a unidirectional bandwidth test. Returns the result.
pub fn bw_send(t: &mut dyn Transport, peer: usize, spec: &MeasureSpec) -> Result<BwResult, TransportError> {
    let buf = payload(spec);
    let mut ack = [0u8; 8];
    let deadline = || Instant::now() + spec.op_timeout;
    if spec.warmup > 0 {
        send_n(t, peer, &buf, spec.warmup, spec.window, spec.op_timeout)?;
        t.exchange(&mut [Op::recv(peer, &mut ack)], deadline())?;
    }
    let iters = match spec.amount {
        Amount::Iterations(n) => n,
        Amount::Duration(secs) => {
            // Calibrate: time a few windows, then size the run to the duration asked for.
            let probe = probe_len(spec);
            let t0 = Instant::now();
            send_n(t, peer, &buf, probe, spec.window, spec.op_timeout)?;
            t.exchange(&mut [Op::recv(peer, &mut ack)], deadline())?;
            let n = count_for(secs, t0.elapsed().as_secs_f64() / probe as f64, spec.window);
            t.exchange(&mut [Op::send(peer, &n.to_le_bytes())], deadline())?;
            n
        }
    };
    let t0 = Instant::now();
    send_n(t, peer, &buf, iters, spec.window, spec.op_timeout)?;
    // The receiver's timing of the run: its peak slice, then its slowest.
    let mut slices = [0u8; 16];
    t.exchange(&mut [Op::recv(peer, &mut slices)], deadline())?;
    let (peak, low) = slices.split_at(8);
    let f = |b: &[u8]| f64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    Ok(stream_result(
        spec,
        iters,
        t0.elapsed().as_secs_f64(),
        (f(peak), f(low)),
    ))
}

/// A one-way stream's result: `iters` messages of `spec.bytes` in `secs`, with the receiver's
/// `peak` slice where it is a finite rate above the average (else the average) and its `low`
/// slice where it is a finite rate not above it (else none: no slice was timed).
fn stream_result(spec: &MeasureSpec, iters: u64, secs: f64, (peak, low): (f64, f64)) -> BwResult {
    let avg = gbps(spec.bytes as f64 * iters as f64, secs);
    BwResult {
        bytes: spec.bytes as u64,
        iterations: iters,
        peak_gbps: if peak.is_finite() && peak > avg { peak } else { avg },
        avg_gbps: avg,
        msg_rate_mpps: mpps(iters as f64, secs),
        low_gbps: (low.is_finite() && low > 0.0 && low <= avg).then_some(low),
    }
}

/// The receiver's side of a unidirectional bandwidth test.
pub fn bw_recv(t: &mut dyn Transport, peer: usize, spec: &MeasureSpec) -> Result<(), TransportError> {
    let mut scratch = scratch_for(spec);
    let deadline = || Instant::now() + spec.op_timeout;
    if spec.warmup > 0 {
        recv_n(t, peer, spec, spec.warmup, &mut scratch, None)?;
        t.exchange(&mut [Op::send(peer, &0f64.to_le_bytes())], deadline())?;
    }
    let iters = match spec.amount {
        Amount::Iterations(n) => n,
        Amount::Duration(_) => {
            let probe = probe_len(spec);
            recv_n(t, peer, spec, probe, &mut scratch, None)?;
            t.exchange(&mut [Op::send(peer, &0f64.to_le_bytes())], deadline())?;
            let mut n = [0u8; 8];
            t.exchange(&mut [Op::recv(peer, &mut n)], deadline())?;
            u64::from_le_bytes(n)
        }
    };
    let t0 = Instant::now();
    let mut times = Vec::with_capacity(iters.min(10_000_000) as usize);
    recv_n(t, peer, spec, iters, &mut scratch, Some((&mut times, t0)))?;
    let (peak, low) = peak_and_low(&times, spec.bytes, spec.window, None);
    let (peak, low) = (peak.unwrap_or(0.0), low.unwrap_or(0.0));
    let mut slices = [0u8; 16];
    slices[..8].copy_from_slice(&peak.to_le_bytes());
    slices[8..].copy_from_slice(&low.to_le_bytes());
    t.exchange(&mut [Op::send(peer, &slices)], deadline())?;
    Ok(())
}

/// One slot of the shift rounds ([`analysis::schedule::Shifts`]): this rank streams `warmup +
/// n` messages to `to` while it receives as many from `from`, every one posted at once in a
/// single exchange, the receives dropping their payloads ([`Op::sink`]), so neither direction
/// waits on the other: a slow stream into this rank never holds back the one out of it, as the
/// window-by-window exchange of [`bw_send`] would. Timed by the receiver, from the arrival of the
/// last warm-up message (without warm-up, from the post) to the arrival of the last message.
/// Returns the result of the direction `from` -> this rank, if it received one.
pub fn bw_stream(
    t: &mut dyn Transport,
    to: Option<usize>,
    from: Option<usize>,
    spec: &MeasureSpec,
) -> Result<Option<BwResult>, TransportError> {
    let Amount::Iterations(iters) = spec.amount else {
        return Err(TransportError::Setup(
            "-D (duration) is measured one direction at a time; the shift rounds need -n".into(),
        ));
    };
    let total = spec.warmup + iters;
    let buf = payload(spec);
    let mut ops: Vec<Op<'_>> = Vec::new();
    if let Some(to) = to {
        ops.extend((0..total).map(|_| Op::send(to, &buf)));
    }
    let first_recv = ops.len();
    if let Some(from) = from {
        ops.extend((0..total).map(|_| Op::sink(from, spec.bytes)));
    }
    // The bound the window-by-window exchange allows: the per-operation timeout per window.
    let windows = total.div_ceil(spec.window.max(1) as u64).max(1);
    let deadline = Instant::now() + spec.op_timeout.saturating_mul(windows.min(u32::MAX as u64) as u32);
    let t0 = Instant::now();
    t.exchange(&mut ops, deadline)?;
    if from.is_none() || iters == 0 {
        return Ok(None);
    }
    let arrived: Vec<f64> = ops[first_recv..]
        .iter()
        .filter_map(|o| o.done_at)
        .map(|d| d.duration_since(t0).as_secs_f64())
        .collect();
    let start = match spec.warmup {
        0 => 0.0,
        w => arrived.get(w as usize - 1).copied().unwrap_or(0.0),
    };
    let measured = &arrived[(spec.warmup as usize).min(arrived.len())..];
    let secs = measured.last().copied().unwrap_or(start) - start;
    // No slice (too few arrivals to window): the average stands in as the peak, as
    // stream_result makes it, and no slowest slice is given.
    let (peak, low) = peak_and_low(measured, spec.bytes, spec.window, None);
    Ok(Some(stream_result(
        spec,
        iters,
        secs,
        (peak.unwrap_or(0.0), low.unwrap_or(0.0)),
    )))
}

/// Both directions at once (`-b`): each side sends and receives `iters` messages concurrently.
/// Returns this side's result with both directions counted, as perftest's duplex mode does.
pub fn bw_bidir(t: &mut dyn Transport, peer: usize, spec: &MeasureSpec) -> Result<BwResult, TransportError> {
    let iters = match spec.amount {
        Amount::Iterations(n) => n,
        Amount::Duration(_) => {
            return Err(TransportError::Setup(
                "-D (duration) with -b over TCP: both directions run a count of messages; use -n".into(),
            ))
        }
    };
    let buf = payload(spec);
    let k_max = recv_batch_len(spec);
    let mut scratch = scratch_for(spec);
    let mut ack = [0u8; 8];
    let t0 = Instant::now();
    let mut left = iters;
    while left > 0 {
        let k = left.min(k_max as u64) as usize;
        let mut ops: Vec<Op<'_>> = (0..k).map(|_| Op::send(peer, &buf)).collect();
        if spec.bytes == 0 {
            ops.extend((0..k).map(|_| Op::recv(peer, &mut [])));
        } else {
            ops.extend(
                scratch[..k * spec.bytes]
                    .chunks_mut(spec.bytes)
                    .map(|b| Op::recv(peer, b)),
            );
        }
        t.exchange(&mut ops, Instant::now() + spec.op_timeout)?;
        left -= k as u64;
    }
    t.exchange(
        &mut [Op::send(peer, &[0u8; 8]), Op::recv(peer, &mut ack)],
        Instant::now() + spec.op_timeout,
    )?;
    Ok(duplex(spec.bytes, iters, t0.elapsed().as_secs_f64()))
}

/// Both directions at once: `iters` messages of `bytes` each way in `secs` (the slower side's
/// time), counted together as perftest's duplex mode reports them.
pub fn duplex(bytes: usize, iters: u64, secs: f64) -> BwResult {
    let avg = gbps(2.0 * bytes as f64 * iters as f64, secs);
    BwResult {
        bytes: bytes as u64,
        iterations: iters,
        peak_gbps: avg,
        avg_gbps: avg,
        msg_rate_mpps: mpps(2.0 * iters as f64, secs),
        low_gbps: None,
    }
}

/// Ping-pong latency. The lower rank of the pair times; returns its statistics (None on the other side).
pub fn latency(
    t: &mut dyn Transport,
    peer: usize,
    spec: &MeasureSpec,
) -> Result<Option<(u64, LatencyStats)>, TransportError> {
    let iters = match spec.amount {
        Amount::Iterations(n) => n,
        Amount::Duration(_) => {
            return Err(TransportError::Setup(
                "-D (duration) is for bandwidth tests; use -n with --test lat".into(),
            ))
        }
    };
    let me = t.rank();
    let out: Vec<u8> = vec![0xA5; spec.bytes];
    let mut back = vec![0u8; spec.bytes];
    let mut samples = Vec::with_capacity(iters as usize);
    for i in 0..spec.warmup + iters {
        let deadline = Instant::now() + spec.op_timeout;
        if me < peer {
            let t0 = Instant::now();
            t.exchange(&mut [Op::send(peer, &out)], deadline)?;
            t.exchange(&mut [Op::recv(peer, &mut back)], deadline)?;
            if i >= spec.warmup {
                samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        } else {
            t.exchange(&mut [Op::recv(peer, &mut back)], deadline)?;
            t.exchange(&mut [Op::send(peer, &out)], deadline)?;
        }
    }
    Ok(LatencyStats::from_samples(&samples).map(|s| (iters, s)))
}

/// One-sided bandwidth (RDMA write or read, or SEND into the peer's posted receives): the
/// initiator posts `iterations` operations of `bytes` into (or from) the target's window, `window`
/// at a time, and times them from its first post to each completion, as perftest's ib_write_bw /
/// ib_read_bw / ib_send_bw do. A timed run (`-D`, as perftest's) first posts a probe
/// of four windows and runs as many operations as fill the duration at the probe's rate, the
/// count sent to the target. Returns the initiator's result.
pub fn bw_one_sided(
    t: &mut dyn Transport,
    peer: usize,
    spec: &MeasureSpec,
    op: OneSidedOp,
    initiator: bool,
) -> Result<Option<(BwResult, Vec<f64>)>, TransportError> {
    let deadline = || Instant::now() + spec.op_timeout;
    if !initiator {
        // A SEND's peer posts the receives, so it must know how many; a write's or read's only
        // exposes its window.
        let target = |count| match op {
            OneSidedOp::Send => OneSidedRole::Receiver {
                count,
                window: spec.window,
            },
            _ => OneSidedRole::Target,
        };
        if spec.warmup > 0 {
            one_sided(t)?.one_sided(peer, spec.bytes, target(spec.warmup), deadline())?;
        }
        let iters = match spec.amount {
            Amount::Iterations(n) => n,
            Amount::Duration(_) => {
                one_sided(t)?.one_sided(peer, spec.bytes, target(probe_len(spec)), deadline())?;
                let mut n = [0u8; 8];
                t.exchange(&mut [Op::recv(peer, &mut n)], deadline())?;
                u64::from_le_bytes(n)
            }
        };
        one_sided(t)?.one_sided(peer, spec.bytes, target(iters), run_deadline(spec))?;
        return Ok(None);
    }
    let initiate = |count| OneSidedRole::Initiator {
        op,
        count,
        window: spec.window,
    };
    if spec.warmup > 0 {
        one_sided(t)?.one_sided(peer, spec.bytes, initiate(spec.warmup), deadline())?;
    }
    let iters = match spec.amount {
        Amount::Iterations(n) => n,
        Amount::Duration(secs) => {
            let probe = probe_len(spec);
            let r = one_sided(t)?.one_sided(peer, spec.bytes, initiate(probe), deadline())?;
            let took = r.completions.last().copied().unwrap_or(0.0);
            let n = count_for(secs, took / probe as f64, spec.window);
            t.exchange(&mut [Op::send(peer, &n.to_le_bytes())], deadline())?;
            n
        }
    };
    let r = one_sided(t)?.one_sided(peer, spec.bytes, initiate(iters), run_deadline(spec))?;
    Ok(Some(initiator_result(spec, iters, &r)))
}

/// An initiator's bandwidth from its completions: with several queue pairs, all their bytes over
/// the time until the last is done, and each one's own rate ([`per_qp_gbps`]).
fn initiator_result(spec: &MeasureSpec, iters: u64, r: &ranks::OneSidedResult) -> (BwResult, Vec<f64>) {
    let secs = r.completions.last().copied().unwrap_or(0.0);
    let qps = r.per_qp.len().max(1);
    let (avg, paths) = if r.per_qp.len() > 1 {
        let last: Vec<f64> = r.per_qp.iter().map(|c| c.last().copied().unwrap_or(0.0)).collect();
        per_qp_gbps(spec.bytes as u64, iters, &last)
    } else {
        (gbps(spec.bytes as f64 * iters as f64, secs), Vec::new())
    };
    let (peak, low) = peak_and_low(&r.completions, spec.bytes, spec.window * qps, Some(secs));
    let (peak, low) = (peak.unwrap_or(avg), low.filter(|l| *l <= avg));
    (
        BwResult {
            bytes: spec.bytes as u64,
            iterations: iters,
            peak_gbps: peak.max(avg),
            avg_gbps: avg,
            msg_rate_mpps: mpps(iters as f64 * qps as f64, secs),
            low_gbps: low,
        },
        paths,
    )
}

/// With one operation in flight at a time, the gaps between completion times (seconds since the
/// first post) are the operations' round trips, in microseconds.
pub fn gaps_us(completions: &[f64]) -> Vec<f64> {
    let mut prev = 0.0;
    completions
        .iter()
        .map(|&c| {
            let d = (c - prev) * 1e6;
            prev = c;
            d
        })
        .collect()
}

/// One-sided latency. `write`: ping-pong of RDMA writes (ib_write_lat; half the round trip).
/// `send`: ping-pong of SENDs on a queue pair of their own (ib_send_lat; half the round trip).
/// `read`: the lower rank reads from the higher one's window, one read at a time, and each
/// sample is one read's round trip (ib_read_lat). The lower rank returns the statistics.
pub fn latency_one_sided(
    t: &mut dyn Transport,
    peer: usize,
    spec: &MeasureSpec,
    op: OneSidedOp,
) -> Result<Option<(u64, LatencyStats)>, TransportError> {
    let Amount::Iterations(iters) = spec.amount else {
        return Err(TransportError::Setup(
            "-D (duration) is for bandwidth tests; use -n with --test lat".into(),
        ));
    };
    let leader = t.rank() < peer;
    let deadline = || Instant::now() + spec.op_timeout;
    let samples: Vec<f64> = match op {
        OneSidedOp::Send => {
            let mut last = Vec::new();
            for count in [spec.warmup, iters] {
                if count > 0 {
                    let role = OneSidedRole::SendPingPong { count, leader };
                    last = one_sided(t)?.one_sided(peer, spec.bytes, role, deadline())?.round_trips;
                }
            }
            last.iter().map(|s| s * 1e6 / 2.0).collect()
        }
        OneSidedOp::Write => {
            if spec.warmup > 0 {
                one_sided(t)?.one_sided(
                    peer,
                    spec.bytes,
                    OneSidedRole::PingPong {
                        count: spec.warmup,
                        leader,
                    },
                    deadline(),
                )?;
            }
            let r = one_sided(t)?.one_sided(
                peer,
                spec.bytes,
                OneSidedRole::PingPong { count: iters, leader },
                deadline(),
            )?;
            r.round_trips.iter().map(|s| s * 1e6 / 2.0).collect()
        }
        OneSidedOp::Read => {
            let mut last = Vec::new();
            for count in [spec.warmup, iters] {
                if count == 0 {
                    continue;
                }
                let role = if leader {
                    OneSidedRole::Initiator { op, count, window: 1 }
                } else {
                    OneSidedRole::Target
                };
                last = one_sided(t)?.one_sided(peer, spec.bytes, role, deadline())?.completions;
            }
            gaps_us(&last)
        }
    };
    if !leader {
        return Ok(None);
    }
    Ok(LatencyStats::from_samples(&samples).map(|s| (iters, s)))
}

/// One-sided bandwidth both ways at once (`-b` with write or read): each side exposes a window
/// and posts into the other's. As for send, the lower rank's result counts both directions, over
/// the slower side's time. A timed run (`-D`) probes both ways and runs the smaller of the two
/// sides' counts.
pub fn bw_one_sided_bidir(
    t: &mut dyn Transport,
    peer: usize,
    spec: &MeasureSpec,
    op: OneSidedOp,
) -> Result<Option<(BwResult, Vec<f64>)>, TransportError> {
    let deadline = || Instant::now() + spec.op_timeout;
    let both = |count| OneSidedRole::Both {
        op,
        count,
        window: spec.window,
    };
    if spec.warmup > 0 {
        one_sided(t)?.one_sided(peer, spec.bytes, both(spec.warmup), deadline())?;
    }
    let iters = match spec.amount {
        Amount::Iterations(n) => n,
        Amount::Duration(secs) => {
            let probe = probe_len(spec);
            let r = one_sided(t)?.one_sided(peer, spec.bytes, both(probe), deadline())?;
            let took = r.completions.last().copied().unwrap_or(0.0);
            let mine = count_for(secs, took / probe as f64, spec.window);
            let mut theirs = [0u8; 8];
            crate::swap(t, peer, &mine.to_le_bytes(), &mut theirs, deadline())?;
            mine.min(u64::from_le_bytes(theirs))
        }
    };
    let r = one_sided(t)?.one_sided(peer, spec.bytes, both(iters), run_deadline(spec))?;
    // Each side's last completion, then each queue pair's (with several), swapped.
    let mut mine = vec![r.completions.last().copied().unwrap_or(0.0)];
    mine.extend(r.per_qp.iter().map(|c| c.last().copied().unwrap_or(0.0)));
    let send: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut got = vec![0u8; send.len()];
    crate::swap(t, peer, &send, &mut got, deadline())?;
    if t.rank() > peer {
        return Ok(None);
    }
    let theirs: Vec<f64> = got
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    let slower: Vec<f64> = mine.iter().zip(&theirs).map(|(a, b)| a.max(*b)).collect();
    let qps = r.per_qp.len().max(1) as u64;
    let mut all = duplex(spec.bytes, iters * qps, slower[0]);
    // perftest's iterations column counts each queue pair's.
    all.iterations = iters;
    // Queue pair k both ways: its two directions' bytes over the slower side's time.
    let paths = slower[1..]
        .iter()
        .map(|&s| duplex(spec.bytes, iters, s).avg_gbps)
        .collect();
    Ok(Some((all, paths)))
}

/// The transport's one-sided operations (RDMA only).
fn one_sided(t: &mut dyn Transport) -> Result<&mut dyn ranks::Rdma, TransportError> {
    t.require_rdma("has no one-sided operations")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_latency_is_the_gap_between_completions() {
        // Reads completing at 2.5, 4.0 and 7.0 us after the first post took 2.5, 1.5 and 3.0 us.
        let g = gaps_us(&[2.5e-6, 4.0e-6, 7.0e-6]);
        let want = [2.5, 1.5, 3.0];
        assert_eq!(g.len(), 3);
        for (a, b) in g.iter().zip(want) {
            assert!((a - b).abs() < 1e-9, "{g:?}");
        }
        assert!(gaps_us(&[]).is_empty());
    }

    #[test]
    fn duplex_counts_both_directions_by_hand() {
        // 64 KiB x 1000 each way in 0.5 s: 2 x 65536 x 1000 x 8 bit / 0.5 s = 2.097152 Gb/s,
        // 2000 messages / 0.5 s = 0.004 Mpps.
        let r = duplex(65536, 1000, 0.5);
        assert!((r.avg_gbps - 2.097152).abs() < 1e-12, "{}", r.avg_gbps);
        assert_eq!(r.peak_gbps, r.avg_gbps);
        assert!((r.msg_rate_mpps - 0.004).abs() < 1e-15);
        assert_eq!((r.bytes, r.iterations), (65536, 1000));
        assert_eq!(duplex(8, 10, 0.0).avg_gbps, 0.0);
    }
}
