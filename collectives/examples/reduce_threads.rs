//! Host reduction throughput against the number of threads (`bench/reduce-threads`), beside a
//! plain copy of the same bytes (the memory's own limit).
//!
//! For each size (64 KiB to 256 MiB, x4) and kind (float sum and bfloat16 sum, in place
//! `acc op= src` as the rings reduce; `copy`, `dst = src`, split the same way), on 1, 2, ...
//! threads of a rayon pool of that many: RUNS runs (default 7), each timing CALLS calls of one
//! reduction with a pause between calls (`--gap-us`, default 100), as a ring reduces once per
//! received slice while the pool's threads have gone idle; the pause is not timed. GB/s are one
//! buffer's bytes per second (a reduction reads two buffers and writes one, a copy reads one
//! and writes one). Prints median and min-max of the runs, the speed-up over one thread, and the
//! smallest size from which every larger size's float sum gains 10% or more on 2 threads.
//!
//!   reduce_threads [--runs N] [--threads 1,2,..] [--sizes 64K,256K,..] [--gap-us G]

use std::time::{Duration, Instant};

use collectives::dtype::{DataType, RedOp};
use collectives::reduce;
use collectives::threads;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Reduce(DataType, RedOp),
    Copy,
}

impl Kind {
    fn name(self) -> String {
        match self {
            Kind::Reduce(dt, op) => format!("{} {}", dt.name(), op.name()),
            Kind::Copy => "copy".into(),
        }
    }
}

fn size_arg(s: &str) -> usize {
    let (num, mul) = match s.as_bytes().last() {
        Some(b'K') => (&s[..s.len() - 1], 1 << 10),
        Some(b'M') => (&s[..s.len() - 1], 1 << 20),
        Some(b'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().unwrap_or_else(|_| panic!("not a size: {s}")) * mul
}

fn human(b: usize) -> String {
    match b {
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b => format!("{}K", b >> 10),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One run: GB/s over `calls` calls of `kind` on `n` threads of `pool`.
fn run(pool: &rayon::ThreadPool, n: usize, kind: Kind, acc: &mut [u8], src: &[u8], calls: usize, gap: Duration) -> f64 {
    let mut busy = Duration::ZERO;
    for _ in 0..calls {
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
        let t0 = Instant::now();
        pool.install(|| match kind {
            Kind::Reduce(dt, op) => reduce::reduce_into_on(n, dt, op, acc, src).expect("aligned buffers"),
            Kind::Copy => threads::split2(n, acc, src, |d, s| d.copy_from_slice(s)),
        });
        busy += t0.elapsed();
    }
    (acc.len() * calls) as f64 / busy.as_secs_f64() / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let runs: usize = arg("--runs").map_or(7, |v| v.parse().expect("--runs N"));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let counts: Vec<usize> = arg("--threads").map_or((1..=cores).collect(), |v| {
        v.split(',').map(|x| x.parse().expect("--threads 1,2,..")).collect()
    });
    let sizes: Vec<usize> = arg("--sizes").map_or((0..7).map(|i| (64 << 10) << (2 * i)).collect(), |v| {
        v.split(',').map(size_arg).collect()
    });
    let gap = Duration::from_micros(arg("--gap-us").map_or(100, |v| v.parse().expect("--gap-us G")));
    let kinds = [
        Kind::Reduce(DataType::Float, RedOp::Sum),
        Kind::Reduce(DataType::Bfloat16, RedOp::Sum),
        Kind::Copy,
    ];
    let pools: Vec<rayon::ThreadPool> = counts
        .iter()
        .map(|&n| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .expect("a thread pool")
        })
        .collect();
    println!(
        "# host reduce throughput, {cores} cores allowed, {runs} runs each, a {} us pause between calls (not timed)",
        gap.as_micros()
    );
    println!("# GB/s = one buffer's bytes per second; median (min-max) of the runs; x = median over 1 thread's");
    println!(
        "{:>16} {:>6} {:>7} {:>22} {:>6}",
        "kind", "size", "threads", "GB/s", "x"
    );
    // Per size, float sum's median speed-up on 2 threads.
    let mut gains: Vec<(usize, f64)> = Vec::new();
    for &size in &sizes {
        let mut acc = vec![1u8; size];
        let src = vec![2u8; size];
        // About 50 ms of calls a run, at least 3 calls.
        let calls = ((50 << 20) / size).clamp(3, 2000);
        for kind in kinds {
            let mut one = 0.0;
            for (&n, pool) in counts.iter().zip(&pools) {
                run(pool, n, kind, &mut acc, &src, 1, Duration::ZERO); // warm the pages and the pool
                let mut v: Vec<f64> = (0..runs)
                    .map(|_| run(pool, n, kind, &mut acc, &src, calls, gap))
                    .collect();
                let (lo, hi) = (
                    v.iter().copied().fold(f64::INFINITY, f64::min),
                    v.iter().copied().fold(0.0, f64::max),
                );
                let m = median(&mut v);
                if n == 1 {
                    one = m;
                }
                let x = if one > 0.0 { m / one } else { f64::NAN };
                if n == 2 && kind == kinds[0] {
                    gains.push((size, x));
                }
                println!(
                    "{:>16} {:>6} {:>7} {:>22} {:>6.2}",
                    kind.name(),
                    human(size),
                    n,
                    format!("{m:.2} ({lo:.2}-{hi:.2})"),
                    x
                );
            }
        }
    }
    let from = gains
        .iter()
        .enumerate()
        .find(|(i, _)| gains[*i..].iter().all(|&(_, x)| x >= 1.10))
        .map(|(_, &(s, _))| s);
    match from {
        Some(s) => println!(
            "# float sum gains >= 10% on 2 threads from {} on (every larger size too)",
            human(s)
        ),
        None => println!("# float sum never gains 10% on 2 threads at every larger size"),
    }
}
