//! `meshrun mesh-check`: can every rank reach every other? Each pair swaps a verifiable payload
//! both ways, then ping-pongs to measure the round-trip time. Rank 0 prints an N x N table.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use ranks::{Op, Transport, TransportError, World};
use serde::{Deserialize, Serialize};

use crate::fault::Fault;
use crate::schedule::{circle_rounds, peer_in};
use crate::stats::median;

/// What to check.
#[derive(Debug, Clone)]
pub struct MeshCheckConfig {
    /// Payload bytes swapped each way.
    pub bytes: usize,
    /// Round trips timed per pair.
    pub iters: usize,
    /// Deadline of each communication step.
    pub op_timeout: Duration,
}

/// What one rank saw of one peer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PeerCheck {
    pub peer: usize,
    /// Bytes of the peer's payload that arrived wrong.
    pub wrong_bytes: usize,
    /// Round-trip times in microseconds: min, median, max (measured by the lower rank of the pair only).
    pub rtt_us: Option<[f64; 3]>,
}

/// The pattern rank `src` sends to rank `dst`: differs per byte, per direction and per pair.
pub fn payload(src: usize, dst: usize, len: usize) -> Vec<u8> {
    let seed = (src as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (dst as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (0..len as u64)
        .map(|i| (seed.wrapping_add(i.wrapping_mul(0x2545_F491_4F6C_DD1D)) >> 56) as u8)
        .collect()
}

/// Run this rank's part of the check.
pub fn run(
    t: &mut dyn Transport,
    cfg: &MeshCheckConfig,
    fault: Option<Fault>,
) -> Result<Vec<PeerCheck>, TransportError> {
    let (rank, n) = (t.rank(), t.size());
    let mut out = Vec::new();
    for (round_no, round) in circle_rounds(n).iter().enumerate() {
        ranks::postmortem::enter(&format!("mesh-check round {}", round_no + 1));
        Fault::maybe_die(fault, rank, round_no);
        let Some(peer) = peer_in(round, rank) else { continue };
        let mut send = payload(rank, peer, cfg.bytes);
        if Fault::corrupts(fault, rank, round_no) && !send.is_empty() {
            send[0] ^= 0xFF;
        }
        let mut recv = vec![0u8; cfg.bytes];
        crate::swap(t, peer, &send, &mut recv, Instant::now() + cfg.op_timeout)?;
        let want = payload(peer, rank, cfg.bytes);
        let wrong_bytes = recv.iter().zip(&want).filter(|(a, b)| a != b).count();

        let mut ping = [0u8; 8];
        let mut samples = Vec::with_capacity(cfg.iters);
        for i in 0..cfg.iters + 1 {
            let deadline = Instant::now() + cfg.op_timeout;
            if rank < peer {
                let t0 = Instant::now();
                t.exchange(&mut [Op::send(peer, &(i as u64).to_le_bytes())], deadline)?;
                t.exchange(&mut [Op::recv(peer, &mut ping)], deadline)?;
                if i > 0 {
                    // The first round trip is a warm-up.
                    samples.push(t0.elapsed().as_secs_f64() * 1e6);
                }
            } else {
                t.exchange(&mut [Op::recv(peer, &mut ping)], deadline)?;
                t.exchange(&mut [Op::send(peer, &ping)], deadline)?;
            }
        }
        let rtt_us = (rank < peer && !samples.is_empty()).then(|| {
            let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
            let max = samples.iter().copied().fold(0.0, f64::max);
            [min, median(&mut samples), max]
        });
        out.push(PeerCheck {
            peer,
            wrong_bytes,
            rtt_us,
        });
    }
    Ok(out)
}

/// Gather every rank's results at rank 0. Returns, on rank 0, the results indexed by rank.
pub fn gather(world: &World, mine: &[PeerCheck]) -> Result<Option<Vec<Vec<PeerCheck>>>, ranks::wire::WireError> {
    crate::gather_json(world, mine, "gathering mesh-check results")
}

/// The report rank 0 prints, and whether every pair passed.
pub fn report(hosts: &[String], transport: &str, cfg: &MeshCheckConfig, all: &[Vec<PeerCheck>]) -> (String, bool) {
    let n = hosts.len();
    let mut rtt = vec![vec![None::<f64>; n]; n];
    let mut failures = Vec::new();
    let mut missing = Vec::new();
    for (r, checks) in all.iter().enumerate() {
        for c in checks {
            if let Some([_, med, _]) = c.rtt_us {
                rtt[r][c.peer] = Some(med);
                rtt[c.peer][r] = Some(med);
            }
            if c.wrong_bytes > 0 {
                failures.push(format!(
                    "rank {r} ({}) received {} of {} bytes wrong from rank {} ({})",
                    hosts[r], c.wrong_bytes, cfg.bytes, c.peer, hosts[c.peer]
                ));
            }
        }
    }
    let mut bad = vec![vec![false; n]; n];
    for (r, checks) in all.iter().enumerate() {
        for c in checks.iter().filter(|c| c.wrong_bytes > 0) {
            bad[r][c.peer] = true;
            bad[c.peer][r] = true;
        }
    }
    for i in 0..n {
        for j in i + 1..n {
            if rtt[i][j].is_none() {
                missing.push(format!("{i} ({}) <-> {j} ({})", hosts[i], hosts[j]));
            }
        }
    }
    let mut nodes: Vec<&String> = hosts.iter().collect();
    nodes.sort();
    nodes.dedup();
    let hw = hosts.iter().map(|h| h.len()).max().unwrap_or(4).max(4);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# meshrun mesh-check: {n} ranks on {} host(s) over {transport}, {}-byte payload each way, {} round trips per pair",
        nodes.len(),
        cfg.bytes,
        cfg.iters
    );
    let _ = writeln!(
        s,
        "# round-trip time in microseconds (median); `-` the rank itself; `FAIL` a pair whose payload arrived wrong"
    );
    let _ = write!(s, "{:>6}  {:<hw$}", "rank", "host");
    for j in 0..n {
        let _ = write!(s, " {j:>8}");
    }
    s.push('\n');
    for i in 0..n {
        let _ = write!(s, "{i:>6}  {:<hw$}", hosts[i]);
        for j in 0..n {
            let cell = if i == j {
                "-".to_string()
            } else if bad[i][j] {
                "FAIL".to_string()
            } else {
                rtt[i][j].map_or("?".to_string(), |v| format!("{v:.1}"))
            };
            let _ = write!(s, " {cell:>8}");
        }
        s.push('\n');
    }
    let mut all_rtts: Vec<f64> = (0..n)
        .flat_map(|i| {
            (i + 1..n).filter_map({
                let rtt = &rtt;
                move |j| rtt[i][j]
            })
        })
        .collect();
    let pairs = n * (n - 1) / 2;
    let ok = failures.is_empty() && missing.is_empty();
    if ok {
        let min = all_rtts.iter().copied().fold(f64::INFINITY, f64::min);
        let max = all_rtts.iter().copied().fold(0.0, f64::max);
        let med = median(&mut all_rtts);
        let _ = writeln!(
            s,
            "# OK: all {pairs} pairs reachable, payloads verified both ways; RTT min {min:.1} us, median {med:.1} us, max {max:.1} us"
        );
    } else {
        for f in &failures {
            let _ = writeln!(s, "# FAILED: {f}");
        }
        for m in &missing {
            let _ = writeln!(s, "# FAILED: no result for pair {m}");
        }
    }
    (s, ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_differs_by_direction_and_is_deterministic() {
        assert_eq!(payload(0, 1, 64), payload(0, 1, 64));
        assert_ne!(payload(0, 1, 64), payload(1, 0, 64));
        assert_ne!(payload(0, 1, 64), payload(0, 2, 64));
        let p = payload(3, 5, 4096);
        assert!(p.iter().collect::<std::collections::HashSet<_>>().len() > 200);
    }

    #[test]
    fn report_marks_failures_and_fills_both_cells() {
        let hosts: Vec<String> = vec!["a".into(), "a".into(), "b".into()];
        let cfg = MeshCheckConfig {
            bytes: 16,
            iters: 3,
            op_timeout: Duration::from_secs(1),
        };
        let pc = |peer, wrong, rtt: Option<f64>| PeerCheck {
            peer,
            wrong_bytes: wrong,
            rtt_us: rtt.map(|v| [v, v, v]),
        };
        let all = vec![
            vec![pc(1, 0, Some(10.0)), pc(2, 0, Some(30.0))],
            vec![pc(0, 0, None), pc(2, 0, Some(20.0))],
            vec![pc(0, 0, None), pc(1, 3, None)],
        ];
        let (text, ok) = report(&hosts, "tcp", &cfg, &all);
        assert!(!ok);
        assert!(
            text.contains("# FAILED: rank 2 (b) received 3 of 16 bytes wrong from rank 1 (a)"),
            "{text}"
        );
        let row0 = text.lines().find(|l| l.trim_start().starts_with("0  a")).unwrap();
        assert_eq!(
            row0.split_whitespace().collect::<Vec<_>>(),
            vec!["0", "a", "-", "10.0", "30.0"]
        );
        let row2 = text.lines().find(|l| l.trim_start().starts_with("2  b")).unwrap();
        assert_eq!(
            row2.split_whitespace().collect::<Vec<_>>(),
            vec!["2", "b", "30.0", "FAIL", "-"]
        );
    }
}
