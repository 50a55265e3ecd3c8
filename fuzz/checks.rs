//! What each fuzz target checks, shared by the libFuzzer targets (`fuzz_targets/`) and by the
//! replay test of the corpora and regressions in the main workspace (`tests/tests/fuzz_corpus.rs`),
//! so every input ever kept runs in every `cargo test`.

#![allow(dead_code)] // each fuzz target uses one of these

use analysis::units;
use ranks::wire::{
    self, ClearToSend, ConnectRecord, ControlEndpoint, ControlFrame, Hello, Record, StallReport, WindowKey,
};

/// Host files in every format (Open MPI, MPICH, Slurm hostlists, the MPIJob file) and hostlist
/// expressions: any text gives hosts or an error, never a panic.
pub fn hostfile(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(hosts) = hostfiles::parse_hostfile_str(text, std::path::Path::new("fuzz")) {
        let _ = hostfiles::total_slots(&hosts);
    }
    let _ = hostfiles::expand_hostlist(text);
    let _ = hostfiles::valid_hostname(text);
}

/// The values flags and variables take: sizes, seconds, fractions, bars, rank pairs, pair
/// patterns, data types and ops, and the test-only fault spec.
pub fn flags(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(n) = units::parse_size(s) {
        // A size that parses is at least its digits: no wrap-around.
        let digits: String = s.trim().chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(d) = digits.parse::<u64>() {
            assert!(n >= d, "{s:?} parsed to {n}");
        }
    }
    let _ = units::parse_nonzero_size(s);
    for f in [
        units::parse_timeout,
        units::parse_duration,
        units::parse_fraction,
        units::parse_bar,
        units::parse_positive,
    ] {
        if let Ok(v) = f(s) {
            assert!(v.is_finite() && v >= 0.0, "{s:?} parsed to {v}");
        }
    }
    if let Ok((a, b)) = units::parse_pair(s) {
        assert_ne!(a, b);
    }
    let _ = analysis::schedule::Pattern::parse(s);
    let _ = analysis::dtype::DataType::parse(s);
    let _ = analysis::dtype::RedOp::parse(s);
    let _ = collectives::fault::Fault::parse(s);
}

/// `--topology` files (host to leaf switch): any text gives a topology or an error.
pub fn topology(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = analysis::pairwise::topology::Topology::parse(text, "fuzz");
}

/// Files `meshrun compare` reads (nccl-tests text and -J JSON, perftest text, meshrun's text and
/// JSON): any text gives series or a one-line format error.
pub fn compare(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = analysis::compare::parse("fuzz.txt", text);
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
    again::<ranks::verbs::Endpoint>(data);
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
