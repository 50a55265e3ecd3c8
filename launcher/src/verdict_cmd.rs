//! `meshrun verdict RUN.json`: a saved pairwise run judged again offline (analysis's
//! `pairwise::saved`), under the run's own rule or another, and against an earlier good run of
//! the same hosts (`--baseline`, `pairwise::baseline`). Exit 2 on a file that cannot be used,
//! 1 when the new verdict or the baseline names anything, else 0.

use std::path::Path;

use analysis::pairwise::report::text;
use analysis::pairwise::topology::Topology;
use analysis::pairwise::{baseline, saved, PairwiseOutcome};

use crate::cli::VerdictArgs;
use crate::exit::Status;

/// The baseline run, read and checked against `now` before anything is judged or measured.
pub fn read_baseline(path: &Path, now: Option<&PairwiseOutcome>) -> Result<PairwiseOutcome, String> {
    let then = saved::read(path).map_err(|e| format!("--baseline {e}"))?;
    if let Some(now) = now {
        baseline::comparable(now, &then).map_err(|e| format!("--baseline {}: {e}", path.display()))?;
    }
    Ok(then)
}

pub fn run(a: &VerdictArgs) -> i32 {
    match judge(a) {
        Ok(code) => code,
        Err(e) => {
            ranks::eline!("meshrun verdict: {e}");
            Status::Usage.code()
        }
    }
}

fn judge(a: &VerdictArgs) -> Result<i32, String> {
    let run = saved::read(&a.run).map_err(|e| e.to_string())?;
    let topology = match &a.topology {
        Some(p) => Some(Topology::read(p).map_err(|e| format!("--topology {e}"))?),
        None => None,
    };
    let then = match &a.baseline {
        Some(p) => Some(read_baseline(p, Some(&run))?),
        None => None,
    };
    let mut cfg = run.config.clone();
    if a.threshold.is_some() {
        cfg.threshold = a.threshold;
    }
    if a.expect_gbps.is_some() {
        cfg.expect_gbps = a.expect_gbps;
    }
    let again = saved::rejudge(&run, &cfg, topology.as_ref());
    let own = if run.pass() {
        "PASS".to_string()
    } else if run.verdict.pass {
        "FAIL, a slow path (one queue pair of a pair)".to_string()
    } else {
        format!("FAIL, {} slow rank pair(s)", run.verdict.confirmed.len())
    };
    println!(
        "# meshrun verdict: {} judged again offline ({} ranks, {} directions measured); no retests here: a suspect \
         cannot run alone again, so every suspect counts as confirmed",
        a.run.display(),
        run.hosts.len(),
        run.measurements.len()
    );
    println!("# The run's own verdict, with its retests: {own}");
    print!("{}", text::render_judged(&again));
    let mut code = if again.pass() { 0 } else { Status::FoundProblem.code() };
    if let (Some(then), Some(p)) = (then, &a.baseline) {
        let c = baseline::comparison(&run, &then, topology.as_ref());
        print!(
            "{}",
            analysis::pairwise::report::baseline::render(&c, &p.display().to_string())
        );
        if !c.pass() {
            code = Status::FoundProblem.code();
        }
    }
    Ok(code)
}
