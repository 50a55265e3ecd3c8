//! Files `meshrun compare` reads (nccl-tests text and -J JSON, perftest text, meshrun's text and
//! JSON): any text gives series or a one-line format error.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::compare(data));
