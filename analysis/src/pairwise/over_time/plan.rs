//! How many passes a repeated run makes: `--repeat N` passes, or as many as fit in
//! `--repeat-for DURATION`, or with both whichever ends first. A pure function of the passes'
//! times, which rank 0 evaluates and every rank then learns.

use crate::units::format_span;

/// When a repeated run stops starting passes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Repeats {
    /// `--repeat N`: at most N passes.
    pub count: Option<usize>,
    /// `--repeat-for`: seconds within which every pass must be expected to finish.
    pub within_s: Option<f64>,
}

impl Repeats {
    /// One pass: a run as without repeats.
    pub const ONCE: Repeats = Repeats {
        count: Some(1),
        within_s: None,
    };

    /// Whether this is more than a single pass (the run then keeps each pass and judges them
    /// over time); `--repeat 1` alone is today's single run.
    pub fn repeated(&self) -> bool {
        self.within_s.is_some() || self.count.is_some_and(|n| n > 1)
    }

    /// Whether another pass starts, after passes that took `took` seconds each and `elapsed`
    /// seconds since the first started: always the first; then while fewer than `count` ran and
    /// the next, expected to take as long as the longest so far, would end within `within_s`.
    pub fn another(&self, took: &[f64], elapsed: f64) -> bool {
        if took.is_empty() {
            return true;
        }
        if self.count.is_some_and(|n| took.len() >= n) {
            return false;
        }
        match self.within_s {
            Some(limit) => elapsed + longest(took) <= limit,
            None => self.count.is_some(),
        }
    }

    /// The progress line before pass `next` (1 first), after passes that took `took` seconds and
    /// `elapsed` since the first started: `repeat 3/10, ~2m10s left` (the passes left at the
    /// mean pass so far), `repeat 3, 4m10s of 10m left`, or both.
    pub fn progress(&self, next: usize, took: &[f64], elapsed: f64) -> String {
        let mean = if took.is_empty() {
            None
        } else {
            Some(took.iter().sum::<f64>() / took.len() as f64)
        };
        let mut line = match self.count {
            Some(n) => format!("repeat {next}/{n}"),
            None => format!("repeat {next}"),
        };
        if let (Some(n), Some(m)) = (self.count, mean) {
            let passes_left = (n + 1).saturating_sub(next) as f64;
            let mut left = m * passes_left;
            if let Some(limit) = self.within_s {
                left = left.min((limit - elapsed).max(0.0));
            }
            line.push_str(&format!(", ~{} left", format_span(left)));
        }
        if let Some(limit) = self.within_s {
            line.push_str(&format!(
                ", {} of {} left",
                format_span((limit - elapsed).max(0.0)),
                format_span(limit)
            ));
        }
        line
    }
}

fn longest(took: &[f64]) -> f64 {
    took.iter().copied().fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_runs_that_many_passes() {
        let r = Repeats {
            count: Some(3),
            within_s: None,
        };
        assert!(r.another(&[], 0.0));
        assert!(r.another(&[10.0], 10.0));
        assert!(r.another(&[10.0, 10.0], 20.0));
        assert!(!r.another(&[10.0, 10.0, 10.0], 30.0));
        assert!(r.repeated());
        assert!(!Repeats::ONCE.repeated());
        assert!(Repeats::ONCE.another(&[], 0.0));
        assert!(!Repeats::ONCE.another(&[1.0], 1.0));
    }

    #[test]
    fn a_duration_starts_passes_expected_to_end_within_it() {
        let r = Repeats {
            count: None,
            within_s: Some(60.0),
        };
        // The first pass always runs, even one longer than the duration.
        assert!(r.another(&[], 0.0));
        assert!(!r.another(&[70.0], 70.0));
        // 20 s passes: the next at 40 s ends at 60 s (in), at 41 s it would not.
        assert!(r.another(&[20.0, 20.0], 40.0));
        assert!(!r.another(&[20.0, 21.0], 41.0));
        // The longest pass so far is what the next is expected to take.
        assert!(!r.another(&[5.0, 30.0], 35.0));
        assert!(r.another(&[5.0, 5.0, 5.0], 15.0));
        assert!(r.repeated());
    }

    #[test]
    fn with_both_whichever_ends_first() {
        let r = Repeats {
            count: Some(2),
            within_s: Some(600.0),
        };
        assert!(r.another(&[10.0], 10.0));
        assert!(!r.another(&[10.0, 10.0], 20.0), "the count ends it");
        let r = Repeats {
            count: Some(100),
            within_s: Some(25.0),
        };
        assert!(r.another(&[10.0], 10.0));
        assert!(!r.another(&[10.0, 10.0], 20.0), "the duration ends it");
    }

    #[test]
    fn progress_lines() {
        let count = Repeats {
            count: Some(10),
            within_s: None,
        };
        assert_eq!(count.progress(1, &[], 0.0), "repeat 1/10");
        // 8 passes left (3 to 10) at 16.25 s each.
        assert_eq!(count.progress(3, &[15.0, 17.5], 32.5), "repeat 3/10, ~2m10s left");
        let timed = Repeats {
            count: None,
            within_s: Some(600.0),
        };
        assert_eq!(timed.progress(3, &[55.0, 55.0], 110.0), "repeat 3, 8m10s of 10m left");
        let both = Repeats {
            count: Some(100),
            within_s: Some(600.0),
        };
        assert_eq!(
            both.progress(3, &[55.0, 55.0], 110.0),
            "repeat 3/100, ~8m10s left, 8m10s of 10m left"
        );
    }
}
