//! The wait-for graph of a stalled job, read from every rank's outcome: who waits on whom, who
//! is waited on, and the MPI step ranks timed out in.

use super::RankOutcome;
use crate::wire::{StallReport, WaitState};

/// Every rank's outcome, by rank, and the questions the root cause asks of them.
pub(super) struct WaitGraph<'o> {
    outcomes: &'o [RankOutcome],
}

impl<'o> WaitGraph<'o> {
    pub(super) fn new(outcomes: &'o [RankOutcome]) -> Self {
        WaitGraph { outcomes }
    }

    /// How many ranks.
    pub(super) fn len(&self) -> usize {
        self.outcomes.len()
    }

    /// The peer rank `r` reported waiting on (or whose connection closed), if any.
    pub(super) fn waits_on(&self, r: usize) -> Option<usize> {
        let n = self.len();
        match &self.outcomes[r] {
            RankOutcome::Reported(rep) if matches!(rep.state, WaitState::WaitingOnPeer | WaitState::PeerClosed) => {
                rep.peer.map(|p| p as usize).filter(|&p| p < n && p != r)
            }
            _ => None,
        }
    }

    /// The ranks waiting on `x`.
    pub(super) fn waiters(&self, x: usize) -> Vec<usize> {
        (0..self.len()).filter(|&r| self.waits_on(r) == Some(x)).collect()
    }

    /// The ranks whose outcome `pred` accepts.
    pub(super) fn of(&self, pred: impl Fn(&RankOutcome) -> bool) -> Vec<usize> {
        (0..self.len()).filter(|&r| pred(&self.outcomes[r])).collect()
    }

    /// Every wait-for edge (waiter, waited on), by waiter.
    pub(super) fn edges(&self) -> Vec<(usize, usize)> {
        (0..self.len())
            .filter_map(|r| self.waits_on(r).map(|p| (r, p)))
            .collect()
    }

    /// What rank `r` reported, if it did.
    pub(super) fn report(&self, r: usize) -> Option<&'o StallReport> {
        match self.outcomes.get(r) {
            Some(RankOutcome::Reported(rep)) => Some(rep),
            _ => None,
        }
    }

    /// Ranks that timed out in an MPI step, and the step the first of them names.
    pub(super) fn in_mpi_step(&self) -> (Vec<usize>, Option<&'o str>) {
        let ranks = self.of(|o| matches!(o, RankOutcome::Reported(rep) if rep.state == WaitState::WaitingInMpi));
        let step = ranks.first().and_then(|&r| self.report(r)).and_then(mpi_step);
        (ranks, step)
    }
}

/// The MPI step a rank timed out in (from the watchdog's words: MPI step `name`).
fn mpi_step(rep: &StallReport) -> Option<&str> {
    let rest = rep.detail.split_once("MPI step `")?.1;
    Some(rest.split_once('`')?.0)
}
