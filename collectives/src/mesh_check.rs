//! `meshrun mesh-check`: can every rank reach every other? Each pair swaps a verifiable payload
//! both ways, then ping-pongs to measure the round-trip time. Rank 0 prints an N x N table
//! (`analysis::mesh_check::MeshCheckText`).

use std::time::Instant;

use analysis::mesh_check::{MeshCheckConfig, PeerCheck};
use analysis::schedule::{circle_rounds, peer_in};
use analysis::stats::median;
use ranks::{Op, Transport, TransportError, World};

/// The pattern rank `src` sends to rank `dst`: differs per byte, per direction and per pair.
pub fn payload(src: usize, dst: usize, len: usize) -> Vec<u8> {
    let seed = (src as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (dst as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (0..len as u64)
        .map(|i| (seed.wrapping_add(i.wrapping_mul(0x2545_F491_4F6C_DD1D)) >> 56) as u8)
        .collect()
}

/// Run this rank's part of the check.
pub fn run(t: &mut dyn Transport, cfg: &MeshCheckConfig) -> Result<Vec<PeerCheck>, TransportError> {
    let (rank, n) = (t.rank(), t.size());
    let mut out = Vec::new();
    for (round_no, round) in circle_rounds(n).iter().enumerate() {
        ranks::postmortem::enter(&format!("mesh-check round {}", round_no + 1));
        crate::fault::at_round(rank, round_no);
        let Some(peer) = peer_in(round, rank) else { continue };
        let mut send = payload(rank, peer, cfg.bytes);
        if crate::fault::corrupts(rank, round_no) && !send.is_empty() {
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
}
