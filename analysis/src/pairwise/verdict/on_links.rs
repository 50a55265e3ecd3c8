//! Pairs slow through a slow fabric link, taken out of the first pass before it is judged.
//!
//! A cable slow on one of several equal-cost paths slows every pair a connection of which
//! hashed onto it, a scatter of host pairs across two leaves. Left in, those cells were judged
//! as host pairs: eight host links named for one cable (the leaf-spine bed, issue 57), two
//! nodes named beside it, or, with a slow node as well on a fabric of six hosts, a population so
//! spread by the two faults that its bar named nothing at all. So the slow links are found first
//! from the traced connections ([`slow_links`]); the pairs they explain ([`explained_pairs`])
//! are the links', set aside before the bars and the retest plan are drawn; and those of them
//! below the bar the rest drew are reported with the links, not blamed on their hosts.

use std::borrow::Cow;
use std::collections::BTreeSet;

use crate::pairwise::cables::{explained_pairs, slow_links};
use crate::pairwise::Measurement;
use crate::schedule::Pair;

/// The first pass without the pairs a slow fabric link explains, and those pairs (none, and the
/// pass as it is, where no connection was traced or no link is slow).
pub(super) fn off_links(first: &[Measurement]) -> (Cow<'_, [Measurement]>, BTreeSet<Pair>) {
    let on = explained_pairs(first, &slow_links(first));
    if on.is_empty() {
        return (Cow::Borrowed(first), on);
    }
    let rest = first.iter().filter(|m| !on.contains(&m.pair())).cloned().collect();
    (Cow::Owned(rest), on)
}
