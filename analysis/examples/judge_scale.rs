//! How long rank 0 takes to judge an all-pairs matrix of N ranks (`bench/judge-scale`): a
//! synthetic first pass of every direction (H hosts of P ranks, healthy cells at 100 Gb/s
//! between hosts and 200 within, 1% log-normal-ish noise, one host link 30% slow), the retest
//! plan, retests drawn the same way, and the verdict, each stage timed, as
//! `collectives::pairwise` runs them on rank 0 once every rank's results are gathered.
//!
//!   judge_scale [HOSTSxRANKS ...] [--runs N]     (default 512x8, 3 runs)

use std::time::{Duration, Instant};

use analysis::pairwise::rails::{self, Fabric};
use analysis::pairwise::verdict;
use analysis::pairwise::{Measurement, OpName, PairwiseConfig};

/// A small xorshift, so a run is repeatable.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    /// About 1% spread around 1.
    fn noise(&mut self) -> f64 {
        1.0 + 0.01 * (self.unit() + self.unit() + self.unit() - 1.5) * 2.0
    }
}

fn cell(src: usize, dst: usize, gbps: f64, retest: bool) -> Measurement {
    Measurement::bandwidth(src, dst, 1 << 20, 100, gbps, retest)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .map_or(3, |v| v.parse().expect("--runs N"));
    let shapes: Vec<(usize, usize)> = args
        .iter()
        .filter_map(|a| a.split_once('x'))
        .map(|(h, p)| (h.parse().expect("HOSTS"), p.parse().expect("RANKS")))
        .collect();
    let shapes = if shapes.is_empty() { vec![(512, 8)] } else { shapes };
    println!("# judging an all-pairs matrix on rank 0: seconds per stage, median (min-max) of {runs} runs");
    println!(
        "{:>6} {:>10} {:>18} {:>18} {:>18} {:>18}",
        "ranks", "cells", "make s", "plan s", "judge s", "blamed"
    );
    for (h, p) in shapes {
        let n = h * p;
        let host = |r: usize| r / p;
        let hosts: Vec<String> = (0..n).map(|r| format!("node{:04}", host(r))).collect();
        let rate = |a: usize, b: usize, rng: &mut Rng| {
            let base = if host(a) == host(b) { 200.0 } else { 100.0 };
            // The link between hosts 0 and 1 is 30% slow.
            let hit = (host(a), host(b)) == (0, 1) || (host(a), host(b)) == (1, 0);
            base * if hit { 0.7 } else { 1.0 } * rng.noise()
        };
        let cfg = PairwiseConfig {
            window: 128,
            warmup: 8,
            op_timeout: Duration::from_secs(60),
            ..PairwiseConfig::synthetic(OpName::Write, 1 << 20, 100)
        };
        let (mut make, mut plan_s, mut judge_s) = (Vec::new(), Vec::new(), Vec::new());
        let mut blamed = String::new();
        for run in 0..runs {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ run as u64);
            let t0 = Instant::now();
            let mut first = Vec::with_capacity(n * (n - 1));
            for a in 0..n {
                for b in 0..n {
                    if a != b {
                        first.push(cell(a, b, rate(a, b, &mut rng), false));
                    }
                }
            }
            make.push(t0.elapsed().as_secs_f64());
            let t1 = Instant::now();
            let plan = rails::plan_rail_retests(&first, &cfg, &hosts, None);
            plan_s.push(t1.elapsed().as_secs_f64());
            let mut retests = Vec::new();
            for _ in 0..analysis::pairwise::defaults::RETEST_PASSES {
                for (a, b) in plan.pairs() {
                    retests.push(cell(a, b, rate(a, b, &mut rng), true));
                    retests.push(cell(b, a, rate(b, a, &mut rng), true));
                }
            }
            let t2 = Instant::now();
            let fabric = Fabric {
                topology: None,
                nics: &[],
            };
            let v = rails::judge_rails(&first, &retests, &cfg, &hosts, &plan, fabric).0;
            let _ = verdict::to_confirm(&v);
            judge_s.push(t2.elapsed().as_secs_f64());
            blamed = format!("{:?}", v.blamed.first().map(|b| format!("{b:?}")).unwrap_or_default());
        }
        let cellf = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            format!("{:.3} ({:.3}-{:.3})", v[v.len() / 2], v[0], v[v.len() - 1])
        };
        println!(
            "{:>6} {:>10} {:>18} {:>18} {:>18} {:>18.60}",
            n,
            n * (n - 1),
            cellf(&mut make),
            cellf(&mut plan_s),
            cellf(&mut judge_s),
            blamed
        );
    }
}
