//! `# Over time`: a repeated run's passes (when each started, its median and slowest direction,
//! its verdict), how far the directions moved between passes, the parts slow in every pass or
//! unstable over them with their worst pass, the counters that moved and in which passes, and
//! the run's closing PASS or FAIL line.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::blamed::part_ranks;
use crate::pairwise::over_time::{CounterMoves, Named, OverTime, Pass};
use crate::pairwise::{PairwiseOutcome, TestKind};
use crate::units::format_span;

/// Wall-clock time of day (UTC) of Unix seconds `t`, with the date when `date`.
fn clock(t: f64, date: bool) -> String {
    let Some(at) = DateTime::<Utc>::from_timestamp(t.max(0.0) as i64, 0) else {
        return "?".into();
    };
    if date {
        at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
    } else {
        at.format("%H:%M:%S").to_string()
    }
}

/// `pass 5 (+4m10s, 14:06:15)`: which pass, when it started.
fn when(passes: &[Pass], index: usize) -> String {
    match passes.iter().find(|p| p.index == index) {
        Some(p) => format!(
            "pass {index} (+{}, {})",
            format_span(p.start_s),
            clock(p.started_at, false)
        ),
        None => format!("pass {index}"),
    }
}

fn list(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
}

/// What one pass's verdict named, in a few words: `PASS`, `FAIL: SLOW HOST LINK a <-> b`.
fn pass_verdict(o: &PairwiseOutcome) -> String {
    let v = &o.verdict;
    let mut named: Vec<String> = v
        .blamed
        .iter()
        .map(|p| format!("SLOW {} {}", p.level().to_uppercase(), p.name()))
        .chain(
            v.unstable
                .iter()
                .map(|u| format!("UNSTABLE {} {}", u.part.level().to_uppercase(), u.part.name())),
        )
        .collect();
    if o.paths.as_ref().is_some_and(|p| !p.pass()) {
        named.push("a slow path".into());
    }
    let word = if o.pass() { "PASS" } else { "FAIL" };
    if named.is_empty() {
        word.into()
    } else {
        format!("{word}: {}", named.join("; "))
    }
}

/// The whole section, after the last pass's matrix and summaries.
pub(super) fn section(s: &mut String, o: &PairwiseOutcome, t: &OverTime) {
    let passes = &o.repeats;
    let took: f64 = passes.last().map_or(0.0, |p| p.start_s + p.seconds);
    let started = passes
        .first()
        .map_or_else(String::new, |p| format!(", from {}", clock(p.started_at, true)));
    let _ = writeln!(
        s,
        "# Over time: {} passes{started}, {} in all; the rows and the matrix above are the last pass's",
        t.passes,
        format_span(took)
    );
    let _ = writeln!(
        s,
        "# {:>4}  {:>7}  {:>8}  {:>6}  {:>9}  {:>9}  verdict",
        "pass", "start", "at (UTC)", "took", "median", "worst"
    );
    for (i, p) in passes.iter().enumerate() {
        let med = t
            .medians
            .get(i)
            .copied()
            .flatten()
            .map_or("-".into(), |m| format!("{m:.2}"));
        let low = t
            .directions
            .iter()
            .filter_map(|d| pass_value(p, d.src, d.dst))
            .fold(None, |w: Option<f64>, v| Some(w.map_or(v, |w| worse(o, w, v))))
            .map_or("-".into(), |v| format!("{v:.2}"));
        let _ = writeln!(
            s,
            "# {:>4}  {:>7}  {:>8}  {:>6}  {med:>9}  {low:>9}  {}",
            p.index,
            format!("+{}", format_span(p.start_s)),
            clock(p.started_at, false),
            format_span(p.seconds),
            pass_verdict(&p.outcome)
        );
    }
    spread_line(s, passes, t);
    for x in &t.slow {
        named_line(s, o, t, x, true);
    }
    for x in &t.unstable {
        named_line(s, o, t, x, false);
    }
    unnamed_counters(s, o, t);
    pass_line(s, t);
}

/// The worse of two figures: the lower bandwidth, the higher latency.
fn worse(o: &PairwiseOutcome, a: f64, b: f64) -> f64 {
    if o.config.test == TestKind::Lat {
        a.max(b)
    } else {
        a.min(b)
    }
}

/// Direction `src -> dst`'s figure in pass `p`, in the report's unit.
fn pass_value(p: &Pass, src: usize, dst: usize) -> Option<f64> {
    let size = p.outcome.config.matrix_size() as u64;
    p.outcome
        .measurements
        .iter()
        .find(|m| m.bytes == size && m.src == src && m.dst == dst)
        .map(|m| crate::pairwise::report::value(p.outcome.config.test, m))
}

/// How much the directions moved between passes: the median direction's relative range, and
/// the direction that moved the most, with its worst pass.
fn spread_line(s: &mut String, passes: &[Pass], t: &OverTime) {
    let rel = |d: &crate::pairwise::over_time::DirectionSpread| {
        if d.spread.median > 0.0 {
            (d.spread.max - d.spread.min) / d.spread.median
        } else {
            0.0
        }
    };
    let mut r: Vec<f64> = t.directions.iter().map(rel).collect();
    let Some(widest) = t.directions.iter().max_by(|a, b| rel(a).total_cmp(&rel(b))) else {
        return;
    };
    let typical = crate::stats::median(&mut r);
    let _ = writeln!(
        s,
        "# Spread over the passes ({}, each direction's lowest / median / highest): a typical direction moved {:.1}%; most, {} -> {}: {:.2} / {:.2} / {:.2}, worst in {}",
        t.unit,
        typical * 100.0,
        widest.src,
        widest.dst,
        widest.spread.min,
        widest.spread.median,
        widest.spread.max,
        when(passes, widest.worst_pass)
    );
}

/// `# SLOW ...` or `# UNSTABLE ...` over time, with the counters of its NICs by pass.
fn named_line(s: &mut String, o: &PairwiseOutcome, t: &OverTime, x: &Named, slow: bool) {
    let u = &t.unit;
    let name = format!("{}: {}", x.part.level().to_uppercase(), x.part.name());
    let figures = x.spread.map_or(String::new(), |sp| {
        format!(
            "; its median direction {:.2}-{:.2} {u} over the passes (median {:.2}), worst {}",
            sp.min,
            sp.max,
            sp.median,
            when(&o.repeats, x.worst_pass)
        )
    });
    let written = if slow {
        writeln!(
            s,
            "# SLOW {name}: slow in every pass ({} of {}){figures}",
            t.passes, t.passes
        )
    } else {
        let named = x.named_in();
        let plural = if named.len() == 1 { "" } else { "es" };
        let within = if x.unstable_in.is_empty() {
            String::new()
        } else {
            format!(
                ", unstable within pass{} {}",
                if x.unstable_in.len() == 1 { "" } else { "es" },
                list(&x.unstable_in)
            )
        };
        writeln!(
            s,
            "# UNSTABLE {name}: named in {} of {} passes (pass{plural} {}){within}, fine in the others{figures}: its speed changed while the run lasted",
            named.len(),
            t.passes,
            list(&named)
        )
    };
    if written.is_ok() {
        let ranks = part_ranks(o, &x.part);
        for c in t.counters.iter().filter(|c| c.ranks.iter().any(|r| ranks.contains(r))) {
            if let Some(line) = counter_line(
                c,
                &[crate::counters::Meaning::Error, crate::counters::Meaning::Congestion],
            ) {
                let _ = writeln!(s, "#   counters: {line}");
            }
        }
    }
}

/// A source's counters over the passes: `h4 eth0: carrier_down_count +1 (the link went down), in pass 5`.
fn counter_line(c: &CounterMoves, which: &[crate::counters::Meaning]) -> Option<String> {
    let line = c.moved().line(which)?;
    let plural = if c.passes.len() == 1 { "" } else { "es" };
    Some(format!("{line}, in pass{plural} {}", list(&c.passes)))
}

/// Sources that counted errors in some pass though no part named over time involves them.
fn unnamed_counters(s: &mut String, o: &PairwiseOutcome, t: &OverTime) {
    let named: Vec<usize> = t
        .slow
        .iter()
        .chain(&t.unstable)
        .flat_map(|x| part_ranks(o, &x.part))
        .collect();
    for c in t
        .counters
        .iter()
        .filter(|c| c.counted_errors() && !c.ranks.iter().any(|r| named.contains(r)))
    {
        if let Some(line) = counter_line(c, &[crate::counters::Meaning::Error]) {
            let _ = writeln!(
                s,
                "# Counters: {line}: errors counted during the run, though no slow pair involves it"
            );
        }
    }
}

/// The run's PASS or FAIL over its passes.
fn pass_line(s: &mut String, t: &OverTime) {
    let n = t.passes;
    let (slow, unstable, paths) = (t.slow.len(), t.unstable.len(), t.slow_paths_in.len());
    if t.pass && unstable > 0 {
        let _ = writeln!(
            s,
            "# PASS over {n} passes: nothing slow in every pass; {unstable} unstable part(s), a warning (--on-unstable warn)"
        );
    } else if t.pass {
        let _ = writeln!(s, "# PASS over {n} passes: nothing slow or unstable in any pass");
    } else {
        let mut what = Vec::new();
        if slow > 0 {
            what.push(format!("{slow} part(s) slow in every pass"));
        }
        if unstable > 0 {
            what.push(format!(
                "{unstable} unstable part(s) (slow in some passes, fine in others)"
            ));
        }
        if paths > 0 {
            what.push(format!(
                "a slow path (one queue pair of a pair) in pass(es) {}",
                list(&t.slow_paths_in)
            ));
        }
        let _ = writeln!(s, "# FAIL over {n} passes: {}", what.join(", "));
    }
}
