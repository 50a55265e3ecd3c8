//! The root cause of a stall, decided from what every rank said (or did not say) in a post-mortem:
//! a pure function over the wait-for graph, so it is tested on synthetic jobs.
//!
//! In order: a rank that died (its control port refuses connections) or stopped answering (it
//! accepts but says nothing) is the root, preferring those others waited on; else ranks that
//! cannot be reached at all, by host (a host whose link is down); else, when every rank answered,
//! the wait-for edges: two ranks waiting on each other are a link that stopped passing data, and
//! a rank others wait on that itself waits on nobody is alive but stuck.

use std::time::Duration;

use crate::wire::{StallReport, WaitState};

/// What a collector learnt about one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It reported: an alarm when its deadline expired, or an answer to a query.
    Reported(StallReport),
    /// Its control port refused the connection: the process is gone.
    Refused,
    /// It accepted the connection but answered nothing in time: stopped (SIGSTOP) or hung hard.
    Silent,
    /// The connection could not be made in time: the host or its network is unreachable.
    Unreachable,
    /// It has no control port (it could not open one), so nothing is known.
    Unknown,
}

/// Who the ranks are: host and pid by rank.
pub struct Job<'a> {
    pub hosts: &'a [String],
    pub pids: &'a [u32],
}

impl Job<'_> {
    fn name(&self, r: usize) -> String {
        format!(
            "rank {r} ({}, pid {})",
            self.host(r),
            self.pids.get(r).copied().unwrap_or(0)
        )
    }
    fn host(&self, r: usize) -> &str {
        self.hosts.get(r).map_or("?", String::as_str)
    }
}

/// What a collector concluded: the line, and the ranks it names as the root (empty when it
/// names none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub line: String,
    pub roots: Vec<usize>,
}

fn verdict(line: String, roots: Vec<usize>) -> Verdict {
    Verdict { line, roots }
}

/// The one line naming the root cause, as collector `me` sees it. `answer` is how long a
/// query waited for an answer.
pub fn root_cause(job: &Job<'_>, me: usize, outcomes: &[Outcome], answer: Duration) -> Verdict {
    let n = outcomes.len();
    let waits_on = |r: usize| -> Option<usize> {
        match &outcomes[r] {
            Outcome::Reported(rep) if matches!(rep.state, WaitState::WaitingOnPeer | WaitState::PeerClosed) => {
                rep.peer.map(|p| p as usize).filter(|&p| p < n && p != r)
            }
            _ => None,
        }
    };
    let waiters = |x: usize| -> Vec<usize> { (0..n).filter(|&r| waits_on(r) == Some(x)).collect() };
    let of = |pred: &dyn Fn(&Outcome) -> bool| -> Vec<usize> { (0..n).filter(|&r| pred(&outcomes[r])).collect() };

    // 1. Ranks that died or stopped answering.
    let gone = of(&|o| *o == Outcome::Refused);
    let silent = of(&|o| *o == Outcome::Silent);
    if !gone.is_empty() || !silent.is_empty() {
        let all: Vec<usize> = gone.iter().chain(&silent).copied().collect();
        let waited_on: Vec<usize> = all.iter().copied().filter(|&r| !waiters(r).is_empty()).collect();
        let blamed = if waited_on.is_empty() { all } else { waited_on };
        let mut parts = Vec::new();
        let dead: Vec<usize> = blamed.iter().copied().filter(|r| gone.contains(r)).collect();
        let stopped: Vec<usize> = blamed.iter().copied().filter(|r| silent.contains(r)).collect();
        if !dead.is_empty() {
            parts.push(format!(
                "{} died (its control port refuses connections)",
                names(job, &dead)
            ));
        }
        if !stopped.is_empty() {
            parts.push(format!(
                "{} stopped responding (it accepts connections but answered nothing within {:.1} s: a stopped or hung process)",
                names(job, &stopped),
                answer.as_secs_f64()
            ));
        }
        let mut line = parts.join("; ");
        line.push_str(&waited_by(outcomes, &blamed, &waiters));
        return verdict(line, blamed);
    }

    // 2. Ranks that cannot be reached: name whole hosts where every rank of a host is out.
    let unreachable = of(&|o| *o == Outcome::Unreachable);
    if !unreachable.is_empty() {
        let my_host = job.host(me);
        let mut hosts: Vec<&str> = Vec::new();
        for &r in &unreachable {
            if !hosts.contains(&job.host(r)) {
                hosts.push(job.host(r));
            }
        }
        let whole: Vec<&str> = hosts
            .iter()
            .copied()
            .filter(|h| (0..n).filter(|&r| job.host(r) == *h).all(|r| unreachable.contains(&r)))
            .collect();
        let other_hosts: Vec<&str> = {
            let mut v: Vec<&str> = (0..n).map(|r| job.host(r)).filter(|h| *h != my_host).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let waiting = (0..n)
            .filter(|&r| waits_on(r).is_some_and(|p| unreachable.contains(&p)))
            .count();
        if other_hosts.len() >= 2 && whole.len() == other_hosts.len() {
            return verdict(
                format!(
                    "host {my_host} (of rank {me}) reaches none of the other {} hosts: its network link is down \
                 (connections to the control ports of ranks {} timed out after {:.1} s)",
                    other_hosts.len(),
                    list(&unreachable),
                    answer.as_secs_f64()
                ),
                (0..n).filter(|&r| job.host(r) == my_host).collect(),
            );
        }
        let what = if whole.is_empty() {
            format!("{} cannot be reached", names(job, &unreachable))
        } else {
            let ranks: Vec<usize> = unreachable
                .iter()
                .copied()
                .filter(|&r| whole.contains(&job.host(r)))
                .collect();
            format!(
                "host {} (ranks {}) cannot be reached from rank {me} ({my_host}): its network link is down or the host stopped",
                whole.join(", "),
                list(&ranks)
            )
        };
        return verdict(
            format!(
                "{what} (connecting to their control ports timed out after {:.1} s); {waiting} rank{} waited on them",
                answer.as_secs_f64(),
                if waiting == 1 { "" } else { "s" }
            ),
            unreachable,
        );
    }

    // 3. Everyone answered: read the wait-for edges.
    let edges: Vec<(usize, usize)> = (0..n).filter_map(|r| waits_on(r).map(|p| (r, p))).collect();
    if let Some(&(a, b)) = edges.iter().find(|&&(a, b)| a < b && waits_on(b) == Some(a)) {
        let (ra, rb) = (report(outcomes, a), report(outcomes, b));
        let phase = ra.or(rb).map(|r| r.phase.as_str()).unwrap_or("");
        return verdict(format!(
            "the link between rank {a} ({}) and rank {b} ({}): both ranks are alive and answer, yet each waited on the other{}: data between them stopped{}",
            job.host(a),
            job.host(b),
            if phase.is_empty() { String::new() } else { format!(" in {phase}") },
            detail_of(ra)
        ), vec![a, b]);
    }
    // A rank waited on by others that itself waits on nobody: alive but stuck.
    let mut stuck: Vec<usize> = edges
        .iter()
        .map(|&(_, p)| p)
        .filter(|&p| waits_on(p).is_none())
        .collect();
    stuck.sort_unstable();
    stuck.dedup();
    stuck.sort_by_key(|&p| std::cmp::Reverse(waiters(p).len()));
    if let Some(&p) = stuck.first() {
        let phase = report(outcomes, p).map(|r| r.phase.as_str()).unwrap_or("");
        return verdict(
            format!(
                "{} is alive and answers but made no progress{}, waiting on no peer{}",
                job.name(p),
                if phase.is_empty() {
                    String::new()
                } else {
                    format!(" in {phase}")
                },
                waited_by(outcomes, &[p], &waiters)
            ),
            vec![p],
        );
    }
    // Ranks waiting in an MPI step while others, alive, never reached it.
    let (mpi, step) = in_mpi_step(outcomes);
    let laggards: Vec<usize> = (0..n)
        .filter(|&r| matches!(&outcomes[r], Outcome::Reported(rep) if rep.state == WaitState::Busy))
        .collect();
    if let (false, false, Some(step)) = (mpi.is_empty(), laggards.is_empty(), step) {
        let phase = report(outcomes, laggards[0]).map(|r| r.phase.as_str()).unwrap_or("");
        return verdict(
            format!(
                "{} {} alive and {} but never reached MPI step `{step}`{}; {} {} waited in it",
                names(job, &laggards),
                if laggards.len() == 1 { "is" } else { "are" },
                if laggards.len() == 1 { "answers" } else { "answer" },
                if phase.is_empty() {
                    String::new()
                } else {
                    format!(" (still in {phase})")
                },
                if mpi.len() == 1 { "rank" } else { "ranks" },
                list(&mpi)
            ),
            laggards,
        );
    }
    if let Some(&(start, _)) = edges.first() {
        // Every edge leads on: a cycle of waits longer than a pair.
        let mut cycle = vec![start];
        let mut at = start;
        while let Some(p) = waits_on(at) {
            if cycle.contains(&p) {
                let from = cycle.iter().position(|&c| c == p).unwrap_or(0);
                cycle.drain(..from);
                break;
            }
            cycle.push(p);
            at = p;
        }
        let crossing: Vec<String> = cycle
            .iter()
            .zip(cycle.iter().cycle().skip(1))
            .filter(|(a, b)| job.host(**a) != job.host(**b))
            .map(|(a, b)| format!("{a}-{b} ({}-{})", job.host(*a), job.host(*b)))
            .collect();
        let path: Vec<String> = cycle.iter().chain(cycle.first()).map(|r| r.to_string()).collect();
        return verdict(
            format!(
                "ranks {} wait on each other in a cycle, all alive: a link on it stopped passing data{}{}",
                path.join(" -> "),
                if crossing.is_empty() {
                    String::new()
                } else {
                    format!(" (links between hosts on it: {})", crossing.join(", "))
                },
                detail_of(report(outcomes, start))
            ),
            cycle,
        );
    }
    let in_mpi: Vec<usize> = (0..n)
        .filter(|&r| matches!(&outcomes[r], Outcome::Reported(rep) if rep.state == WaitState::WaitingInMpi))
        .collect();
    if let Some(&r) = in_mpi.first() {
        return verdict(
            format!(
                "every rank answered and none waits on a peer, but {} {} timed out in an MPI step{}",
                if in_mpi.len() == 1 { "rank" } else { "ranks" },
                list(&in_mpi),
                detail_of(report(outcomes, r))
            ),
            Vec::new(),
        );
    }
    let unknown = of(&|o| *o == Outcome::Unknown);
    if unknown.is_empty() {
        verdict(
            "every rank answered and none is waiting on a peer: no root cause could be named".to_string(),
            Vec::new(),
        )
    } else {
        verdict(
            format!(
                "no root cause could be named: {} opened no control port, so nothing is known about them",
                names(job, &unknown)
            ),
            Vec::new(),
        )
    }
}

/// The MPI step a rank timed out in (from the watchdog's words: MPI step `name`).
fn mpi_step(rep: &StallReport) -> Option<&str> {
    let rest = rep.detail.split_once("MPI step `")?.1;
    Some(rest.split_once('`')?.0)
}

/// Ranks that timed out in an MPI step, and the step the first of them names.
fn in_mpi_step(outcomes: &[Outcome]) -> (Vec<usize>, Option<&str>) {
    let ranks: Vec<usize> = (0..outcomes.len())
        .filter(|&r| matches!(&outcomes[r], Outcome::Reported(rep) if rep.state == WaitState::WaitingInMpi))
        .collect();
    let step = ranks.first().and_then(|&r| report(outcomes, r)).and_then(mpi_step);
    (ranks, step)
}

fn report(outcomes: &[Outcome], r: usize) -> Option<&StallReport> {
    match outcomes.get(r) {
        Some(Outcome::Reported(rep)) => Some(rep),
        _ => None,
    }
}

/// `; ranks 0, 2 waited on it (rank 2: ...)`, or that no rank waited on them.
fn waited_by(outcomes: &[Outcome], blamed: &[usize], waiters: &dyn Fn(usize) -> Vec<usize>) -> String {
    let mut w: Vec<usize> = blamed.iter().flat_map(|&b| waiters(b)).collect();
    w.sort_unstable();
    w.dedup();
    let it = if blamed.len() == 1 { "it" } else { "them" };
    match w.first() {
        None => {
            let (mpi, step) = in_mpi_step(outcomes);
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
            detail_of(report(outcomes, first))
        ),
    }
}

/// ` (rank 2 in all_reduce 1 MiB: timed out after ...)`: a waiter's own words, its prefix cut.
fn detail_of(rep: Option<&StallReport>) -> String {
    let Some(rep) = rep else {
        return String::new();
    };
    let prefix = format!("rank {} (", rep.rank);
    let detail = match rep.detail.strip_prefix(&prefix).and_then(|d| d.split_once("): ")) {
        Some((_, rest)) => rest,
        None => rep.detail.as_str(),
    };
    let phase = if rep.phase.is_empty() {
        String::new()
    } else {
        format!(" in {}", rep.phase)
    };
    if detail.is_empty() {
        format!(" (rank {}{phase})", rep.rank)
    } else {
        format!(" (rank {}{phase}: {detail})", rep.rank)
    }
}

/// `rank 1 (a, pid 5)` or `ranks 1 (a, pid 5), 3 (b, pid 7)`; more than 8 are counted.
fn names(job: &Job<'_>, ranks: &[usize]) -> String {
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
fn list(ranks: &[usize]) -> String {
    let shown: Vec<String> = ranks.iter().take(16).map(|r| r.to_string()).collect();
    let more = ranks.len().saturating_sub(16);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

#[cfg(test)]
mod tests;
