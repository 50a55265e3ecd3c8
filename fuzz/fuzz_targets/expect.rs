//! `--expect` files: any text gives expectations or a one-line error naming the file.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::expect(data));
