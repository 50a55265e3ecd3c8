//! Every decoder of bytes another rank sends: the fixed records of `ranks::wire` (TCP hello and
//! endpoints, verbs endpoints and connect records, window keys, clear-to-sends, the post-mortem's
//! control frames), gathered arrays of them, and the JSON records gathered at rank 0. A record
//! that decodes encodes back to bytes that decode to the same value. Needs the `rank-side`
//! feature (it links libmpi and rdma-core).
#![no_main]

#[path = "../rank_checks.rs"]
mod rank_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| rank_checks::wire(data));
