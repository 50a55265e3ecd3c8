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
    let mut code = if run.repeats.is_empty() {
        judge_one(a, &run, &cfg, topology.as_ref())
    } else {
        judge_repeated(a, &run, &cfg, topology.as_ref())
    };
    if let (Some(then), Some(p)) = (then, &a.baseline) {
        // With repeats, the last pass (the file's own figures) against the baseline.
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

/// A single run judged again, with its own verdict beside; the status of the new verdict.
fn judge_one(
    a: &VerdictArgs,
    run: &PairwiseOutcome,
    cfg: &analysis::pairwise::PairwiseConfig,
    topology: Option<&Topology>,
) -> i32 {
    let again = saved::rejudge(run, cfg, topology);
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
    if again.pass() {
        0
    } else {
        Status::FoundProblem.code()
    }
}

/// A `--repeat` run: each pass judged again offline, one line each, then the judgement over
/// time (`saved::rejudge_repeated`: the run's own, recomputed from its passes' verdicts, or under
/// a new rule from the passes judged again), which sets the status.
fn judge_repeated(
    a: &VerdictArgs,
    run: &PairwiseOutcome,
    cfg: &analysis::pairwise::PairwiseConfig,
    topology: Option<&Topology>,
) -> i32 {
    let again = saved::rejudge_repeated(run, cfg, topology);
    let passes = run.repeats.len();
    println!(
        "# meshrun verdict: {} judged again offline ({} ranks, {passes} passes); no retests here: a suspect cannot \
         run alone again, so in a pass judged again every suspect counts as confirmed",
        a.run.display(),
        run.hosts.len(),
    );
    let own = if run.pass() { "PASS" } else { "FAIL" };
    println!("# The run's own verdict over {passes} passes, with its retests: {own}");
    for p in &run.repeats {
        let one = saved::rejudge(&p.outcome, cfg, topology);
        let what = if one.pass() {
            "PASS".to_string()
        } else {
            format!("FAIL, {} slow rank pair(s)", one.verdict.confirmed.len())
        };
        println!("# Pass {} judged again offline: {what}", p.index);
    }
    print!("{}", text::render_judged(&again));
    if again.pass() {
        0
    } else {
        Status::FoundProblem.code()
    }
}
