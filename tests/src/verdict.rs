//! The pairwise verdict in a test: runs whose verdict is not the subject, and the lines a report
//! blames.

use std::time::Duration;

use crate::{mpirun, Run};

/// `--threshold` for a test whose subject is not the verdict (rows, files, headers, flags): only a
/// direction below a millionth of the median, a link that moved nothing, is slow. A bar such as
/// 0.1 or 0.2 still fails such a test whenever a busy 2-core machine runs one loopback direction
/// ten times slower than another, which CI has seen; the verdict's own tests force their paths.
pub const VERDICT_NOT_THE_SUBJECT: &str = "0.000001";

/// `mpirun -np N meshrun pairwise ARGS... --threshold` [`VERDICT_NOT_THE_SUBJECT`] with
/// `extra_env`: a pairwise run whose verdict is not the test's subject.
pub fn pairwise_unjudged(np: usize, args: &[&str], extra_env: &[(&str, &str)], limit: Duration) -> Run {
    let mut all = vec!["pairwise"];
    all.extend_from_slice(args);
    all.extend(["--threshold", VERDICT_NOT_THE_SUBJECT]);
    mpirun(np, &all, extra_env, limit)
}

/// The verdict's findings in a pairwise report: `# SLOW ...` and `# UNSTABLE ...` lines.
pub fn blamed(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with("# SLOW ") || l.starts_with("# UNSTABLE "))
        .collect()
}
