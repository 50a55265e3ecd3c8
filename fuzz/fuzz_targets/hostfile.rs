//! Host files in every format (Open MPI, MPICH, Slurm hostlists, the MPIJob file) and hostlist
//! expressions: any text gives hosts or an error, never a panic.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::hostfile(data));
