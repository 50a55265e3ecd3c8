//! Every decoder of bytes another rank sends: the fixed records of `ranks::wire` (TCP hello and
//! endpoints, verbs endpoints and connect records, window keys, clear-to-sends, the post-mortem's
//! control frames), gathered arrays of them, and the JSON records gathered at rank 0. A record
//! that decodes encodes back to bytes that decode to the same value.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::wire(data));
