//! The phrases a root-cause line is made of: ranks by name or number, who waited on the blamed
//! ranks, and a waiter's own words.

use super::graph::WaitGraph;
use super::StalledJob;
use crate::wire::StallReport;

/// `; ranks 0, 2 waited on it (rank 2: ...)`, or that no rank waited on them.
pub(super) fn waited_by(g: &WaitGraph<'_>, blamed: &[usize]) -> String {
    let mut w: Vec<usize> = blamed.iter().flat_map(|&b| g.waiters(b)).collect();
    w.sort_unstable();
    w.dedup();
    let it = if blamed.len() == 1 { "it" } else { "them" };
    match w.first() {
        None => {
            let (mpi, step) = g.in_mpi_step();
            match (mpi.is_empty(), step) {
                (false, Some(step)) => format!(
                    "; {} {} timed out in MPI step `{step}`, which {it} never reached",
                    if mpi.len() == 1 { "rank" } else { "ranks" },
                    list(&mpi)
                ),
                _ => format!("; no rank reported waiting on {it}"),
            }
        }
        Some(&first) => format!(
            "; {} waited on {it}{}",
            if w.len() == 1 {
                format!("rank {first}")
            } else {
                format!("ranks {}", list(&w))
            },
            detail_of(g.report(first))
        ),
    }
}

/// ` (rank 2 in all_reduce 1 MiB: timed out after ...)`: a waiter's own words, its prefix cut.
pub(super) fn detail_of(rep: Option<&StallReport>) -> String {
    let Some(rep) = rep else {
        return String::new();
    };
    let prefix = format!("rank {} (", rep.rank);
    let detail = match rep.detail.strip_prefix(&prefix).and_then(|d| d.split_once("): ")) {
        Some((_, rest)) => rest,
        None => rep.detail.as_str(),
    };
    let phase = super::in_phase(&rep.phase);
    if detail.is_empty() {
        format!(" (rank {}{phase})", rep.rank)
    } else {
        format!(" (rank {}{phase}: {detail})", rep.rank)
    }
}

/// `rank 1 (a, pid 5)` or `ranks 1 (a, pid 5), 3 (b, pid 7)`; more than 8 are counted.
pub(super) fn names(job: &StalledJob<'_>, ranks: &[usize]) -> String {
    let shown: Vec<String> = ranks
        .iter()
        .take(8)
        .map(|&r| job.name(r).trim_start_matches("rank ").to_string())
        .collect();
    let more = ranks.len().saturating_sub(8);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    if ranks.len() == 1 {
        format!("rank {}{tail}", shown[0])
    } else {
        format!("ranks {}{tail}", shown.join(", "))
    }
}

/// `0, 2, 3` (more than 16 counted).
pub(super) fn list(ranks: &[usize]) -> String {
    let shown: Vec<String> = ranks.iter().take(16).map(|r| r.to_string()).collect();
    let more = ranks.len().saturating_sub(16);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}
