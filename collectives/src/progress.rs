//! Progress on stderr: a bar redrawn in place when stderr is a terminal, plain lines every few
//! seconds otherwise. Results go to stdout only.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    enabled: bool,
    tty: bool,
    started: Instant,
    last_line: Instant,
    rounds: usize,
    pairs_total: usize,
    pairs_done: usize,
}

impl Progress {
    /// Progress shown only when `enabled` (rank 0).
    pub fn new(enabled: bool) -> Self {
        Progress {
            enabled,
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
            last_line: Instant::now(),
            rounds: 0,
            pairs_total: 0,
            pairs_done: 0,
        }
    }

    pub fn start(&mut self, rounds: usize, pairs: usize) {
        self.started = Instant::now();
        self.last_line = Instant::now();
        self.rounds = rounds;
        self.pairs_total = pairs;
        self.pairs_done = 0;
    }

    /// Text of the status line after `round` of the rounds is done.
    pub fn line(&self, round: usize) -> String {
        let el = self.started.elapsed().as_secs_f64();
        let left = if self.pairs_done > 0 {
            el / self.pairs_done as f64 * (self.pairs_total - self.pairs_done) as f64
        } else {
            0.0
        };
        let width = 30usize;
        let filled = (width * self.pairs_done).checked_div(self.pairs_total).unwrap_or(width);
        format!(
            "[{}{}] round {round}/{}, pairs {}/{}, {el:.0}s elapsed, ~{left:.0}s left",
            "#".repeat(filled),
            "-".repeat(width - filled),
            self.rounds,
            self.pairs_done,
            self.pairs_total
        )
    }

    pub fn round_done(&mut self, round: usize, pairs: usize) {
        self.pairs_done += pairs;
        if !self.enabled {
            return;
        }
        let mut err = std::io::stderr();
        if self.tty {
            let _ = write!(err, "\r{}", self.line(round));
            let _ = err.flush();
        } else if self.last_line.elapsed() >= Duration::from_secs(5) || round == self.rounds {
            self.last_line = Instant::now();
            let _ = writeln!(err, "meshrun: {}", self.line(round));
        }
    }

    pub fn finish(&mut self) {
        if self.enabled && self.tty {
            let _ = writeln!(std::io::stderr());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_counts_pairs_and_rounds() {
        let mut p = Progress::new(false);
        p.start(3, 6);
        p.round_done(1, 2);
        let l = p.line(1);
        assert!(
            l.starts_with("[##########--------------------] round 1/3, pairs 2/6"),
            "{l}"
        );
    }
}
