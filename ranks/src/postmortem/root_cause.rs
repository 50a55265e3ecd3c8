//! The root cause of a stall, decided from what every rank said (or did not say) in a post-mortem:
//! a pure function over the wait-for graph, so it is tested on synthetic jobs.
//!
//! In order: a rank that died (its control port refuses connections) or stopped answering (it
//! accepts but says nothing) is the root, preferring those others waited on; else ranks that
//! cannot be reached at all, by host (a host whose link is down); else, when every rank answered,
//! the wait-for edges: two ranks waiting on each other are a link that stopped passing data, and
//! a rank others wait on that itself waits on nobody is alive but stuck. The graph's queries are
//! in `graph.rs`, the phrases the lines are made of in `wording.rs`.

mod graph;
mod wording;

use std::time::Duration;

use crate::wire::{StallReport, WaitState};
use graph::WaitGraph;
use wording::{detail_of, list, names, waited_by};

/// What a collector learnt about one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankOutcome {
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

/// Who the ranks of the stalled job are: host and pid by rank.
pub struct StalledJob<'a> {
    pub hosts: &'a [String],
    pub pids: &'a [u32],
}

impl StalledJob<'_> {
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
pub struct RootCause {
    pub line: String,
    pub roots: Vec<usize>,
}

fn found(line: String, roots: Vec<usize>) -> RootCause {
    RootCause { line, roots }
}

/// ` in PHASE`, or nothing when there is no phase.
fn in_phase(phase: &str) -> String {
    if phase.is_empty() {
        String::new()
    } else {
        format!(" in {phase}")
    }
}

/// The one line naming the root cause, as collector `me` sees it. `answer` is how long a
/// query waited for an answer.
pub fn root_cause(job: &StalledJob<'_>, me: usize, outcomes: &[RankOutcome], answer: Duration) -> RootCause {
    let g = WaitGraph::new(outcomes);
    dead_or_silent(job, &g, answer)
        .or_else(|| unreachable(job, &g, me, answer))
        .unwrap_or_else(|| from_waits(job, &g))
}

/// 1. Ranks that died or stopped answering.
fn dead_or_silent(job: &StalledJob<'_>, g: &WaitGraph<'_>, answer: Duration) -> Option<RootCause> {
    let gone = g.of(|o| *o == RankOutcome::Refused);
    let silent = g.of(|o| *o == RankOutcome::Silent);
    if gone.is_empty() && silent.is_empty() {
        return None;
    }
    let all: Vec<usize> = gone.iter().chain(&silent).copied().collect();
    let waited_on: Vec<usize> = all.iter().copied().filter(|&r| !g.waiters(r).is_empty()).collect();
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
    line.push_str(&waited_by(g, &blamed));
    Some(found(line, blamed))
}

/// 2. Ranks that cannot be reached: name whole hosts where every rank of a host is out.
fn unreachable(job: &StalledJob<'_>, g: &WaitGraph<'_>, me: usize, answer: Duration) -> Option<RootCause> {
    let n = g.len();
    let unreachable = g.of(|o| *o == RankOutcome::Unreachable);
    if unreachable.is_empty() {
        return None;
    }
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
        .filter(|&r| g.waits_on(r).is_some_and(|p| unreachable.contains(&p)))
        .count();
    if other_hosts.len() >= 2 && whole.len() == other_hosts.len() {
        return Some(found(
            format!(
                "host {my_host} (of rank {me}) reaches none of the other {} hosts: its network link is down \
                 (connections to the control ports of ranks {} timed out after {:.1} s)",
                other_hosts.len(),
                list(&unreachable),
                answer.as_secs_f64()
            ),
            (0..n).filter(|&r| job.host(r) == my_host).collect(),
        ));
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
    Some(found(
        format!(
            "{what} (connecting to their control ports timed out after {:.1} s); {waiting} rank{} waited on them",
            answer.as_secs_f64(),
            if waiting == 1 { "" } else { "s" }
        ),
        unreachable,
    ))
}

/// 3. Everyone answered: read the wait-for edges.
fn from_waits(job: &StalledJob<'_>, g: &WaitGraph<'_>) -> RootCause {
    let edges = g.edges();
    mutual_wait(job, g, &edges)
        .or_else(|| stuck(job, g, &edges))
        .or_else(|| never_reached_mpi_step(job, g))
        .or_else(|| cycle(job, g, &edges))
        .unwrap_or_else(|| none_named(job, g))
}

/// Two ranks waiting on each other: the link between them.
fn mutual_wait(job: &StalledJob<'_>, g: &WaitGraph<'_>, edges: &[(usize, usize)]) -> Option<RootCause> {
    let &(a, b) = edges.iter().find(|&&(a, b)| a < b && g.waits_on(b) == Some(a))?;
    let (ra, rb) = (g.report(a), g.report(b));
    let phase = ra.or(rb).map(|r| r.phase.as_str()).unwrap_or("");
    Some(found(format!(
        "the link between rank {a} ({}) and rank {b} ({}): both ranks are alive and answer, yet each waited on the other{}: data between them stopped{}",
        job.host(a),
        job.host(b),
        in_phase(phase),
        detail_of(ra)
    ), vec![a, b]))
}

/// A rank waited on by others that itself waits on nobody: alive but stuck.
fn stuck(job: &StalledJob<'_>, g: &WaitGraph<'_>, edges: &[(usize, usize)]) -> Option<RootCause> {
    let mut stuck: Vec<usize> = edges
        .iter()
        .map(|&(_, p)| p)
        .filter(|&p| g.waits_on(p).is_none())
        .collect();
    stuck.sort_unstable();
    stuck.dedup();
    stuck.sort_by_key(|&p| std::cmp::Reverse(g.waiters(p).len()));
    let &p = stuck.first()?;
    let phase = g.report(p).map(|r| r.phase.as_str()).unwrap_or("");
    Some(found(
        format!(
            "{} is alive and answers but made no progress{}, waiting on no peer{}",
            job.name(p),
            in_phase(phase),
            waited_by(g, &[p])
        ),
        vec![p],
    ))
}

/// Ranks waiting in an MPI step while others, alive, never reached it.
fn never_reached_mpi_step(job: &StalledJob<'_>, g: &WaitGraph<'_>) -> Option<RootCause> {
    let (mpi, step) = g.in_mpi_step();
    let laggards = g.of(|o| matches!(o, RankOutcome::Reported(rep) if rep.state == WaitState::Busy));
    let (false, false, Some(step)) = (mpi.is_empty(), laggards.is_empty(), step) else {
        return None;
    };
    let phase = g.report(laggards[0]).map(|r| r.phase.as_str()).unwrap_or("");
    Some(found(
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
    ))
}

/// Every edge leads on: a cycle of waits longer than a pair.
fn cycle(job: &StalledJob<'_>, g: &WaitGraph<'_>, edges: &[(usize, usize)]) -> Option<RootCause> {
    let &(start, _) = edges.first()?;
    let mut cycle = vec![start];
    let mut at = start;
    while let Some(p) = g.waits_on(at) {
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
    Some(found(
        format!(
            "ranks {} wait on each other in a cycle, all alive: a link on it stopped passing data{}{}",
            path.join(" -> "),
            if crossing.is_empty() {
                String::new()
            } else {
                format!(" (links between hosts on it: {})", crossing.join(", "))
            },
            detail_of(g.report(start))
        ),
        cycle,
    ))
}

/// No wait names a root: say what is known (an MPI step that timed out, ranks without a control
/// port, or nothing).
fn none_named(job: &StalledJob<'_>, g: &WaitGraph<'_>) -> RootCause {
    let (in_mpi, _) = g.in_mpi_step();
    if let Some(&r) = in_mpi.first() {
        return found(
            format!(
                "every rank answered and none waits on a peer, but {} {} timed out in an MPI step{}",
                if in_mpi.len() == 1 { "rank" } else { "ranks" },
                list(&in_mpi),
                detail_of(g.report(r))
            ),
            Vec::new(),
        );
    }
    let unknown = g.of(|o| *o == RankOutcome::Unknown);
    if unknown.is_empty() {
        found(
            "every rank answered and none is waiting on a peer: no root cause could be named".to_string(),
            Vec::new(),
        )
    } else {
        found(
            format!(
                "no root cause could be named: {} opened no control port, so nothing is known about them",
                names(job, &unknown)
            ),
            Vec::new(),
        )
    }
}

#[cfg(test)]
mod tests;
