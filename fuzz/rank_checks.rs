//! What the rank-side fuzz checks hold: every decoder of bytes another rank sends (`ranks::wire`),
//! and the test-only fault spec (`collectives::fault`). Shared like `checks.rs`, but these link
//! libmpi and rdma-core: the fuzz crate builds them with its `rank-side` feature.

#![allow(dead_code)] // each fuzz target uses one of these

use ranks::wire::{
    self, ClearToSend, ConnectRecord, ControlEndpoint, ControlFrame, Hello, Record, StallReport, WindowKey,
};

/// `MESHRUN_FAULT` values: any text gives faults or an error.
pub fn fault_spec(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = collectives::fault::Fault::parse(s);
}

fn again<T: Record + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Some(v) = T::from_bytes(data) {
        let b = v.to_bytes();
        assert_eq!(b.len(), T::LEN);
        assert_eq!(T::from_bytes(&b).as_ref(), Some(&v));
    }
    let _ = wire::decode_all::<T>(data, "fuzz");
}

/// Every decoder of bytes another rank sends: the fixed records of `ranks::wire` (TCP hello and
/// endpoints, verbs endpoints and connect records, window keys, clear-to-sends, the post-mortem's
/// control frames), gathered arrays of them, and the JSON records gathered at rank 0. A record
/// that decodes encodes back to bytes that decode to the same value.
pub fn wire(data: &[u8]) {
    again::<Hello>(data);
    again::<std::net::SocketAddr>(data);
    again::<ranks::verbs::QpEndpoint>(data);
    again::<WindowKey>(data);
    again::<ClearToSend>(data);
    again::<StallReport>(data);
    again::<ControlFrame>(data);
    again::<ControlEndpoint>(data);
    again::<u64>(data);
    let _ = ConnectRecord::from_bytes(data);
    let _ = Hello::check(data, &[0; 16], 4);
    let _ = ControlFrame::check(data, &[0; 16]);
    let _ = serde_json::from_slice::<Vec<analysis::pairwise::Measurement>>(data);
    let _ = serde_json::from_slice::<Vec<analysis::mesh_check::PeerCheck>>(data);
}
