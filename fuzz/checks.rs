//! What each fuzz target checks, shared by the libFuzzer targets (`fuzz_targets/`) and by the
//! replay test of the corpora and regressions in the main workspace (`tests/tests/fuzz_corpus.rs`),
//! so every input ever kept runs in every `cargo test`. These need only `hostfiles` and
//! `analysis` (no MPI, no rdma-core); what ranks decode from each other is in `rank_checks.rs`.

#![allow(dead_code)] // each fuzz target uses one of these

use analysis::units;

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
/// patterns, data types and ops (the test-only fault spec: `rank_checks::fault_spec`).
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
        units::parse_span,
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
}

/// `--topology` files (host to leaf switch): any text gives a topology or an error.
pub fn topology(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = analysis::pairwise::topology::Topology::parse(text, "fuzz");
}

/// `--expect` files (what a node type must have): any text gives expectations or a one-line
/// error naming the file; expectations check any facts without panicking.
pub fn expect(data: &[u8]) {
    use analysis::preflight::{expect::Expectations, Fact, Severity};
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Expectations::parse(text, "fuzz.toml") {
        Ok(e) => {
            let node = [
                Fact::new("mlx5_0 port 1", "rate", "400 Gb/sec (4X NDR)", Severity::Warning),
                Fact::new("node", "gpus", "8", Severity::Warning),
            ];
            let process = [Fact::new("process", "memlock_kib", "unlimited", Severity::Warning)];
            let _ = e.check("h0", &node);
            let _ = e.check("h0 rank 0", &process);
        }
        Err(e) => {
            let m = e.to_string();
            assert!(m.starts_with("fuzz.toml: ") && !m.contains('\n'), "{m:?}");
        }
    }
}

/// Files `meshrun compare` reads (nccl-tests text and -J JSON, perftest text, meshrun's text and
/// JSON): any text gives series or a one-line format error.
pub fn compare(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = analysis::compare::parse("fuzz.txt", text);
}
