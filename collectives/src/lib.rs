//! What runs over the meshrun mesh: the mesh check, the pairwise tests and the collectives
//! (measured over a transport); what is made of the results is the `analysis` crate.

pub mod buffers;
pub mod coll;
pub mod fault;
pub mod gpu;
pub mod mesh_check;
pub mod output;
pub mod pairwise;
pub mod progress;
pub mod reduce;
pub mod threads;

/// Re-exported: the element types and reduction operations, which the GPU code and the host
/// reductions name as `crate::dtype`.
pub use analysis::dtype;

use std::time::Instant;

use ranks::wire::WireError;
use ranks::{Op, Transport, TransportError};

/// Exit status for "the test ran and found a problem" (wrong data, slow or failed links).
pub const EXIT_FOUND_PROBLEM: i32 = 1;

/// Gather every rank's records at rank 0 (as JSON), indexed by rank; None on other ranks. A
/// record that does not decode is an error naming the rank that sent it.
pub fn gather_json<T: serde::Serialize + serde::de::DeserializeOwned>(
    world: &ranks::World,
    mine: &[T],
    step: &str,
) -> Result<Option<Vec<Vec<T>>>, WireError> {
    let bytes = serde_json::to_vec(mine).unwrap_or_default();
    let Some(all) = world.gather_bytes(&bytes, step) else {
        return Ok(None);
    };
    all.iter()
        .enumerate()
        .map(|(rank, b)| {
            serde_json::from_slice(b).map_err(|_| WireError {
                rank,
                what: step.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Send `send` to `peer` while receiving `recv` from it, bounded by `deadline`.
pub fn swap(
    t: &mut dyn Transport,
    peer: usize,
    send: &[u8],
    recv: &mut [u8],
    deadline: Instant,
) -> Result<(), TransportError> {
    let mut ops = [Op::send(peer, send), Op::recv(peer, recv)];
    t.exchange(&mut ops, deadline)
}
