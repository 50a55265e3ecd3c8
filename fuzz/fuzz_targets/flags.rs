//! The values flags and variables take: sizes, seconds, fractions, bars, rank pairs, pair
//! patterns, data types and ops, and (with the `rank-side` feature) the test-only fault spec.
#![no_main]

#[path = "../checks.rs"]
mod checks;
#[cfg(feature = "rank-side")]
#[path = "../rank_checks.rs"]
mod rank_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::flags(data);
    #[cfg(feature = "rank-side")]
    rank_checks::fault_spec(data);
});
