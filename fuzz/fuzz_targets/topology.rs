//! `--topology` files (host to leaf switch): any text gives a topology or an error.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::topology(data));
