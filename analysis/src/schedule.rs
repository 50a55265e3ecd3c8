//! Which pairs run when: rounds of disjoint pairs, so all pairs of a round can run at the same
//! time. Every pair by the circle method (each pair of `n` ranks once in `n - 1` rounds, `n`
//! rounds when `n` is odd, one rank idle in each), a quick pattern's few partners, the rails side
//! by side, directed shift rounds, and the groups of pairs a retest runs at once.
//!
//! The parts: `circle` (the circle method), `rounds` (a run's rounds, computed or listed),
//! `patterns` (`--pairs`), `rails` (`--rails`), `shifts` (directed shift rounds) and
//! `retest_groups` (pairs that can be retested at once).

mod circle;
mod patterns;
mod rails;
mod retest_groups;
mod rounds;
mod shifts;

pub use circle::{circle_peer, circle_rounds};
pub use patterns::Pattern;
pub use rails::{local_rank_of, rail_members, rail_rounds};
pub use retest_groups::host_disjoint_groups;
pub use rounds::{filter_rounds, peer_in, Keep, Schedule};
pub use shifts::Shifts;

/// One pair, lower rank first.
pub type Pair = (usize, usize);

#[cfg(test)]
mod tests;
