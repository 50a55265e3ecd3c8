//! The values flags and variables take: sizes, seconds, fractions, bars, rank pairs, pair
//! patterns, data types and ops, and the test-only fault spec.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::flags(data));
