//! Directed shift rounds, as mpiGraph's: every rank streams to one peer while it receives from
//! another, and no slot carries both directions of a pair.

/// Directed shift rounds over `n` ranks, as mpiGraph's: in shift k every rank i sends to
/// i + k while it receives from i - k (mod n), so each rank carries one outgoing and one incoming
/// stream and every direction of every pair is measured once in n - 1 shifts. For even n the
/// shift h = n/2 would pair each rank with one partner both ways, and over TCP a direction's
/// acknowledgements travel back on the reverse link, which must then be idle, not queued behind
/// the reverse direction's data; so no slot ever carries both directions of a pair.
///
/// Odd n: the n - 1 shifts. Even n not a power of two: n - 1 slots as well, the shifts but for
/// k, -k and h, whose directions go into three mixed slots instead (`Mix`, below). Powers of two (and
/// n = 4, where no n - 1 such slots exist): shift h runs as two halves (the lower half sending,
/// then the upper), n slots.
#[derive(Debug, Clone, Copy)]
pub struct Shifts {
    n: usize,
    mix: Option<Mix>,
}

/// Three slots that carry the directions of shifts k, -k and h = n/2 with no pair both ways,
/// for even n with an odd factor. Let d be the largest power of two dividing n (d < n, and d
/// does not divide h), k = h + d, and X the ranks i with i mod d < d/2, Y the others. Both +k
/// and +h move a rank by d/2 modulo d (as h + k = 2h + d is a multiple of d), so each takes X
/// onto Y and Y onto X. Slot A: every rank sends to i + k (a shift, 2k not a multiple of n).
/// Slot B: X sends to i - k (into Y), Y to i + h (into X). Slot C: X to i + h (into Y), Y to
/// i - k (into X). In B and C every rank sends once and receives once, and a direction's
/// reverse would need h = k: none both ways. Every direction of shifts k, -k and h appears in
/// exactly one of the three (k: A; -k and h: X's in B and C, Y's in C and B).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mix {
    k: usize,
    d: usize,
}

/// What a slot runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Every rank sends to i + k.
    Shift(usize),
    /// Shift n/2, half 0 (ranks below n/2 send) or 1 (the others).
    Half(usize),
    /// Slot B (false) or C (true) of [`Mix`].
    Mixed(bool),
}

impl Shifts {
    pub fn new(n: usize) -> Shifts {
        let mix = if n.is_multiple_of(2) && n > 4 && !n.is_power_of_two() {
            // The largest power of two dividing n.
            let d = 1usize << n.trailing_zeros();
            Some(Mix { k: n / 2 + d, d })
        } else {
            None
        };
        Shifts { n, mix }
    }

    /// Slot `s`: shifts 1, 2, ... in order; where the mixed slots replace shifts k, -k and h,
    /// they run at k, -k and h's places (A, B, C); halves run at h's place.
    fn slot(&self, s: usize) -> Slot {
        let (n, h) = (self.n, self.n / 2);
        if n % 2 == 1 {
            return Slot::Shift(s + 1);
        }
        match self.mix {
            Some(Mix { k, .. }) => {
                // n - 1 slots, slot s at shift s + 1's place.
                let c = s + 1;
                if c == n - k {
                    Slot::Mixed(false)
                } else if c == h {
                    Slot::Mixed(true)
                } else {
                    Slot::Shift(c)
                }
            }
            None => {
                if s + 1 < h {
                    return Slot::Shift(s + 1);
                }
                match s + 1 - h {
                    0 => Slot::Half(0),
                    1 => Slot::Half(1),
                    e => Slot::Shift(h + e - 1),
                }
            }
        }
    }

    /// Slots (rounds) in all.
    pub fn len(&self) -> usize {
        match self.n {
            0 | 1 => 0,
            n if n % 2 == 0 && self.mix.is_none() => n,
            n => n - 1,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `rank` is in X of [`Mix`].
    fn in_x(&self, rank: usize) -> bool {
        self.mix.is_some_and(|m| rank % m.d < m.d / 2)
    }

    /// Whom `rank` sends to in slot `s`, if anyone.
    pub fn to(&self, s: usize, rank: usize) -> Option<usize> {
        let (n, h) = (self.n, self.n / 2);
        if rank >= n {
            return None;
        }
        let k = self.mix.map_or(0, |m| m.k);
        let step = match self.slot(s) {
            Slot::Shift(c) => c,
            Slot::Half(half) => {
                if (rank >= h) != (half == 1) {
                    return None;
                }
                h
            }
            // B: X to i - k, Y to i + h; C: X to i + h, Y to i - k.
            Slot::Mixed(c) => {
                if self.in_x(rank) != c {
                    n - k
                } else {
                    h
                }
            }
        };
        Some((rank + step) % n)
    }

    /// Whom `rank` receives from in slot `s`, if anyone.
    pub fn from(&self, s: usize, rank: usize) -> Option<usize> {
        let (n, h) = (self.n, self.n / 2);
        if rank >= n {
            return None;
        }
        let k = self.mix.map_or(0, |m| m.k);
        let src = match self.slot(s) {
            Slot::Shift(c) => (rank + n - c % n) % n,
            Slot::Half(half) => {
                let src = (rank + h) % n;
                if (src >= h) != (half == 1) {
                    return None;
                }
                src
            }
            // A sender in X lands in Y and one in Y lands in X: in B, a rank in Y heard from
            // X's i - k (so from i + k), a rank in X from Y's i + h; in C the other way round.
            Slot::Mixed(c) => {
                if self.in_x(rank) == c {
                    (rank + k) % n
                } else {
                    (rank + h) % n
                }
            }
        };
        Some(src)
    }

    /// Directions measured in slot `s`.
    pub fn directions_in(&self, s: usize) -> usize {
        match self.slot(s) {
            Slot::Half(_) => self.n / 2,
            _ => self.n,
        }
    }
}
