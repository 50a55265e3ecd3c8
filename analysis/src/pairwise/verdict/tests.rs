//! The verdict's unit tests: bars, suspects, references and what a retest confirms.

use super::*;
use crate::pairwise::defaults::MIN_DROP;
use crate::pairwise::formulas::BwResult;
use crate::pairwise::OpName;

fn cfg() -> PairwiseConfig {
    PairwiseConfig {
        window: 4,
        threshold: Some(0.9),
        ..PairwiseConfig::synthetic(OpName::Send, 65536, 10)
    }
}

/// [`cfg`] under the default rule (the bar from the distribution, no threshold).
fn robust_cfg() -> PairwiseConfig {
    PairwiseConfig {
        threshold: None,
        ..cfg()
    }
}

fn m(src: usize, dst: usize, gbps: f64) -> Measurement {
    let bw = BwResult {
        bytes: 65536,
        iterations: 10,
        peak_gbps: gbps,
        avg_gbps: gbps,
        msg_rate_mpps: 0.0,
    };
    Measurement {
        src,
        dst,
        bytes: 65536,
        bw: Some(bw),
        lat: None,
        iterations: 10,
        retest: false,
        paths: Vec::new(),
    }
}

/// Every ordered pair of `n` ranks at `fast`, except those listed.
fn matrix(n: usize, fast: f64, slow: &[(usize, usize, f64)]) -> Vec<Measurement> {
    let mut v = Vec::new();
    for s in 0..n {
        for d in 0..n {
            if s != d {
                let g = slow.iter().find(|x| x.0 == s && x.1 == d).map_or(fast, |x| x.2);
                v.push(m(s, d, g));
            }
        }
    }
    v
}

fn hosts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("h{i}")).collect()
}

fn decide_with(first: &[Measurement], retests: &[Measurement], c: &PairwiseConfig, h: &[String]) -> Verdict {
    let plan = plan_retests(first, c, h);
    judge_pairs(first, retests, c, h, &plan, None)
}

fn levels(v: &Verdict) -> Vec<String> {
    v.blamed.iter().map(Part::label).collect()
}

#[test]
fn one_slow_link_is_blamed_on_the_link() {
    let first = matrix(4, 10.0, &[(0, 1, 0.1)]);
    assert_eq!(plan_retests(&first, &cfg(), &hosts(4)).suspects, vec![(0, 1)]);
    let retests = vec![m(0, 1, 0.1), m(1, 0, 10.0)];
    let v = decide_with(&first, &retests, &cfg(), &hosts(4));
    assert!(!v.pass);
    assert_eq!(levels(&v), vec!["link h0-h1"]);
    let l = &v.confirmed[0];
    assert_eq!((l.a, l.b, l.directions.clone()), (0, 1, vec![(0, 1)]));
    assert_eq!(l.retest, Some(0.1));
    assert_eq!(v.judged[0].bulk.median, 10.0);
    assert!((v.judged[0].bulk.bar - 9.0).abs() < 1e-12);
}

#[test]
fn a_direction_counts_at_its_best_retest() {
    let first = matrix(4, 10.0, &[(0, 1, 0.1)]);
    // One hiccup in one pass of the slow-looking direction: the other pass ran at speed.
    let hiccup = vec![m(0, 1, 0.1), m(1, 0, 10.0), m(0, 1, 9.8), m(1, 0, 10.0)];
    let v = decide_with(&first, &hiccup, &cfg(), &hosts(4));
    assert!(v.pass, "{v:?}");
    assert_eq!(v.cleared, vec![(0, 1)]);
    // Slow in both passes: confirmed, reported at its best pass.
    let slow = vec![m(0, 1, 0.1), m(1, 0, 10.0), m(0, 1, 0.3), m(1, 0, 10.0)];
    let v = decide_with(&first, &slow, &cfg(), &hosts(4));
    assert_eq!(levels(&v), vec!["link h0-h1"]);
    assert_eq!(v.confirmed[0].retest, Some(0.3));
    // Each direction at its best, then the worst of the directions.
    let both = vec![m(0, 1, 9.9), m(1, 0, 0.2), m(0, 1, 0.1), m(1, 0, 0.4)];
    assert_eq!(
        decide_with(&first, &both, &cfg(), &hosts(4)).confirmed[0].retest,
        Some(0.4)
    );
}

#[test]
fn all_pairs_of_one_host_slow_blames_the_node() {
    // Traffic into rank 1 is slow from everyone (3 hosts).
    let first = matrix(3, 10.0, &[(0, 1, 0.1), (2, 1, 0.1)]);
    let retests = vec![m(0, 1, 0.1), m(1, 0, 10.0), m(1, 2, 10.0), m(2, 1, 0.1)];
    let v = decide_with(&first, &retests, &cfg(), &hosts(3));
    assert_eq!(levels(&v), vec!["node h1"]);
    let Part::Node { counts, .. } = &v.blamed[0] else {
        unreachable!()
    };
    assert_eq!((counts.slow, counts.of, counts.slow_pairs), (2, 2, 2));
    assert_eq!(v.confirmed.len(), 2);
}

#[test]
fn fine_when_retested_alone_is_cleared() {
    let first = matrix(4, 10.0, &[(2, 3, 5.0)]);
    let v = decide_with(&first, &[m(2, 3, 9.5), m(3, 2, 10.0)], &cfg(), &hosts(4));
    assert!(v.pass);
    assert_eq!(v.cleared, vec![(2, 3)]);
}

#[test]
fn absolute_floor_and_no_retest() {
    let first = matrix(2, 10.0, &[]);
    let mut c = cfg();
    c.expect_gbps = Some(25.0);
    c.retest = false;
    let v = decide_with(&first, &[], &c, &hosts(2));
    assert!(!v.pass);
    // Two ranks: one pair, so no host has two links to blame; the link is named.
    assert_eq!(levels(&v), vec!["link h0-h1"]);
    assert_eq!(v.judged[0].bulk.bar, 25.0);
}

#[test]
fn uniform_matrix_passes() {
    let v = decide_with(&matrix(5, 10.0, &[]), &[], &cfg(), &hosts(5));
    assert!(v.pass && v.confirmed.is_empty() && v.cleared.is_empty());
}

// The default (robust) rule on synthetic fabrics.

/// What is broken in a synthetic fabric.
#[derive(Debug, Clone, Copy)]
enum Broken {
    Link(usize, usize),
    Node(usize),
    Nic(usize),
}

struct Fabric {
    hosts: Vec<String>,
    host_of: Vec<usize>,
    broken: Vec<Broken>,
}

impl Fabric {
    fn new(h: usize, ppn: usize, broken: &[Broken]) -> Fabric {
        Fabric {
            hosts: (0..h * ppn).map(|r| format!("n{:02}", r / ppn)).collect(),
            host_of: (0..h * ppn).map(|r| r / ppn).collect(),
            broken: broken.to_vec(),
        }
    }
    /// Whether the direction a->b crosses something broken.
    fn is_broken(&self, a: usize, b: usize) -> bool {
        let (x, y) = (self.host_of[a], self.host_of[b]);
        x != y
            && self.broken.iter().any(|k| match *k {
                Broken::Link(p, q) => (x, y) == (p, q) || (x, y) == (q, p),
                Broken::Node(h) => x == h || y == h,
                Broken::Nic(r) => a == r || b == r,
            })
    }
    /// Gb/s of a->b: 10 between hosts, 40 within, 1/20 of that when broken; noise of
    /// +-`spread` (log-uniform) unless `alone`, which runs at the nominal speed.
    fn speed(&self, a: usize, b: usize, spread: f64, noise: &mut u64, alone: bool) -> f64 {
        let base = if self.host_of[a] == self.host_of[b] { 40.0 } else { 10.0 };
        let base = if self.is_broken(a, b) { base / 20.0 } else { base };
        *noise = noise
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let u = (*noise >> 11) as f64 / (1u64 << 53) as f64;
        if alone {
            base * (1.0 + spread / 4.0).powf(2.0 * u - 1.0)
        } else {
            base * (1.0 + spread).powf(2.0 * u - 1.0)
        }
    }
    fn run(&self, spread: f64, seed: u64) -> Verdict {
        let n = self.hosts.len();
        let mut noise = seed;
        let mut first = Vec::new();
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    first.push(m(a, b, self.speed(a, b, spread, &mut noise, false)));
                }
            }
        }
        let mut c = cfg();
        c.threshold = None;
        let plan = plan_retests(&first, &c, &self.hosts);
        let retests: Vec<Measurement> = plan
            .pairs()
            .iter()
            .flat_map(|&(a, b)| [(a, b), (b, a)])
            .map(|(a, b)| m(a, b, self.speed(a, b, spread, &mut noise, true)))
            .collect();
        judge_pairs(&first, &retests, &c, &self.hosts, &plan, None)
    }
    fn expected(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .broken
            .iter()
            .map(|k| match *k {
                Broken::Link(p, q) => format!("link n{:02}-n{:02}", p.min(q), p.max(q)),
                Broken::Node(h) => format!("node n{h:02}"),
                Broken::Nic(r) => format!("nic {r}"),
            })
            .collect();
        v.sort();
        v
    }
}

fn sorted_levels(v: &Verdict) -> Vec<String> {
    let mut l = levels(v);
    l.sort();
    l
}

#[test]
fn healthy_fabrics_pass_at_every_noise_level() {
    for spread in [0.05, 0.2, 0.4, 0.6] {
        for (h, ppn) in [(2, 1), (3, 1), (2, 2), (4, 2), (5, 3), (7, 1), (8, 8), (16, 4), (64, 1)] {
            for seed in 0..3 {
                let v = Fabric::new(h, ppn, &[]).run(spread, seed);
                assert!(
                    v.pass,
                    "{h}x{ppn} +-{spread} seed {seed}: {:?} {:?}",
                    v.confirmed, v.judged
                );
            }
        }
    }
}

#[test]
fn exactly_the_broken_parts_are_named() {
    let cases: Vec<(usize, usize, Vec<Broken>)> = vec![
        (3, 1, vec![Broken::Link(0, 1)]),
        (3, 1, vec![Broken::Node(2)]),
        (4, 2, vec![Broken::Link(1, 2)]),
        (4, 2, vec![Broken::Node(1)]),
        (4, 2, vec![Broken::Nic(3)]),
        (5, 1, vec![Broken::Node(4)]),
        (6, 2, vec![Broken::Link(0, 1), Broken::Link(2, 3)]),
        (8, 8, vec![Broken::Nic(13)]),
        (8, 4, vec![Broken::Node(0), Broken::Link(3, 5)]),
        (9, 2, vec![Broken::Node(1), Broken::Nic(10), Broken::Link(6, 7)]),
        (16, 4, vec![Broken::Link(2, 9), Broken::Nic(40), Broken::Node(15)]),
        (64, 1, vec![Broken::Node(33)]),
        (
            64,
            1,
            vec![Broken::Link(0, 63), Broken::Link(10, 20), Broken::Link(30, 40)],
        ),
    ];
    for spread in [0.05, 0.3, 0.6] {
        for (h, ppn, broken) in &cases {
            for seed in 0..2 {
                let f = Fabric::new(*h, *ppn, broken);
                let v = f.run(spread, seed);
                assert_eq!(
                    sorted_levels(&v),
                    f.expected(),
                    "{h}x{ppn} +-{spread} seed {seed}, broken {broken:?}: judged {:?}",
                    v.judged
                );
            }
        }
    }
}

#[test]
fn references_are_retested_and_set_the_bar_alone() {
    let f = Fabric::new(4, 2, &[Broken::Link(0, 1)]);
    let v = f.run(0.3, 7);
    let j = &v.judged[0];
    assert_eq!(j.population, Population::BetweenHosts);
    assert_eq!(j.references.len(), REFERENCES);
    let alone = j.reference_alone.expect("references ran alone");
    assert!((alone - 10.0).abs() < 1.0, "{j:?}");
    assert!((j.bar_alone / alone - j.bulk.bar / j.bulk.median).abs() < 1e-9, "{j:?}");
}

/// A whole 512-rank fabric (64 hosts x 8, 130,816 pairs, 261,632 directions) with a slow node
/// and a bad NIC: decided and blamed in about a second even unoptimised, since the verdict's
/// work grows with the pairs measured, not with their square.
#[test]
fn a_512_rank_fabric_is_decided_quickly() {
    let f = Fabric::new(64, 8, &[Broken::Node(7), Broken::Nic(300)]);
    let t0 = std::time::Instant::now();
    let v = f.run(0.3, 11);
    assert_eq!(sorted_levels(&v), f.expected());
    assert!(t0.elapsed() < std::time::Duration::from_secs(60), "{:?}", t0.elapsed());
}

/// CI's failing run (4 namespace hosts of 2 ranks, unshaped, a loaded 2-core machine): the 48
/// directions between hosts spread +-29%, the 8 within hosts happened to agree within 7%, and
/// direction 1->0 at 5.91 Gb/s fell below that population's own bar (6.06). Eight cells cannot
/// show the run's noise: the within-host bar takes the between-host spread, and nothing in
/// this matrix is suspect.
#[test]
fn a_small_population_is_judged_with_the_runs_noise() {
    #[rustfmt::skip]
    let rows: [[f64; 8]; 8] = [
        [0.0, 8.16, 4.77, 6.55, 5.96, 11.07, 4.66, 5.32],
        [5.91, 0.0, 12.72, 5.19, 6.43, 5.94, 5.92, 5.75],
        [2.66, 10.17, 0.0, 7.93, 5.80, 7.62, 6.72, 5.49],
        [2.52, 2.55, 8.79, 0.0, 6.77, 11.58, 9.50, 5.03],
        [5.21, 3.35, 4.72, 4.50, 0.0, 7.46, 6.22, 7.04],
        [9.41, 3.34, 4.87, 6.10, 8.03, 0.0, 8.50, 7.07],
        [5.11, 4.91, 4.50, 5.18, 4.81, 5.05, 0.0, 6.20],
        [8.53, 5.93, 5.38, 6.86, 4.98, 7.08, 7.86, 0.0],
    ];
    let first: Vec<Measurement> = (0..8)
        .flat_map(|s| (0..8).filter(move |&d| d != s).map(move |d| m(s, d, rows[s][d])))
        .collect();
    let h: Vec<String> = (0..8).map(|r| format!("mr-h{}", r / 2)).collect();
    let c = robust_cfg();
    let b = bars(&first, &c, &h);
    let within = b.iter().find(|(p, _)| *p == Population::WithinHost).expect("within").1;
    let between = b
        .iter()
        .find(|(p, _)| *p == Population::BetweenHosts)
        .expect("between")
        .1;
    assert!(
        within.spread >= between.spread,
        "within {within:?}, between {between:?}"
    );
    assert!(within.bar < 5.91, "{within:?}");
    assert!(
        suspect_pairs(&first, &c, &h, &b).is_empty(),
        "{:?}",
        suspect_pairs(&first, &c, &h, &b)
    );
    // With a quiet between-host population the within-host bar keeps its own, tight spread.
    let quiet: Vec<Measurement> = first
        .iter()
        .map(|x| {
            if h[x.src] == h[x.dst] {
                x.clone()
            } else {
                m(x.src, x.dst, 10.0)
            }
        })
        .collect();
    let qb = bars(&quiet, &c, &h);
    let qwithin = qb.iter().find(|(p, _)| *p == Population::WithinHost).expect("within").1;
    assert_eq!(
        Some(qwithin),
        Bulk::of(&[8.16, 5.91, 7.93, 8.79, 7.46, 8.03, 6.20, 7.86])
    );
}

/// Retests of the suspect (0, 1) and of the references: both directions, [`RETEST_PASSES`]
/// passes, the passes apart by the factor `jitter`; the suspect runs at `suspect` (its better
/// pass), the references at 10.
fn retests_with_jitter(plan: &RetestPlan, suspect: f64, jitter: f64) -> Vec<Measurement> {
    retests_of(plan, (0, 1), suspect, jitter)
}

/// [`retests_with_jitter`] with the suspect pair `slow`.
fn retests_of(plan: &RetestPlan, slow: Pair, suspect: f64, jitter: f64) -> Vec<Measurement> {
    let mut v = Vec::new();
    for pass in 0..RETEST_PASSES {
        let f = if pass % 2 == 0 { 1.0 } else { 1.0 / jitter };
        for &(a, b) in &plan.pairs() {
            let at = if (a, b) == slow { suspect } else { 10.0 };
            for (s, d) in [(a, b), (b, a)] {
                let mut x = m(s, d, at * f);
                x.retest = true;
                v.push(x);
            }
        }
    }
    v
}

/// On a busy machine a pair alone varies by a quarter from one pass to the next, and a suspect
/// 20% below the references alone is within that noise: the bar alone widens to four of the
/// retests' own deviations, and says so. On a quiet fabric (passes within 1%) the same drop is
/// confirmed against the first pass's 7%, and that pair is the one retested once more.
#[test]
fn the_retests_own_noise_sets_the_least_drop_alone() {
    let c = robust_cfg();
    let h = hosts(4);
    let first = matrix(4, 10.0, &[(0, 1, 8.0)]);
    let plan = plan_retests(&first, &c, &h);
    assert_eq!(plan.suspects, vec![(0, 1)]);
    assert_eq!(plan.references.len(), REFERENCES);

    let noisy = judge_pairs(&first, &retests_with_jitter(&plan, 8.0, 1.3), &c, &h, &plan, None);
    let j = &noisy.judged[0];
    let sd = j.alone_spread.expect("the retests' noise widened the bar");
    // Every difference (six: three pairs, two directions) is ln 1.3: one retest's deviation is
    // that over the half-normal's quantile at the third of six, probit(0.71) = 0.5534, / sqrt 2.
    assert!(
        (sd - 1.3f64.ln() / crate::stats::probit(0.71) / 2f64.sqrt()).abs() < 1e-9,
        "{j:?}"
    );
    assert!(j.bar_alone < 8.0 && j.sensitivity > 0.6, "{j:?}");
    assert!(noisy.pass, "{noisy:?}");
    assert_eq!(noisy.cleared, vec![(0, 1)]);
    assert!(to_confirm(&noisy).is_empty());

    let quiet = judge_pairs(&first, &retests_with_jitter(&plan, 8.0, 1.01), &c, &h, &plan, None);
    let j = &quiet.judged[0];
    assert_eq!(j.alone_spread, None, "{j:?}");
    assert!((j.sensitivity - (1.0 - (-MIN_DROP).exp())).abs() < 1e-9, "{j:?}");
    assert!(!quiet.pass, "{quiet:?}");
    assert_eq!(to_confirm(&quiet), vec![(0, 1)]);
}

/// A busy machine's first pass (every pair at once, ranks competing for the cores) spreads its
/// healthy cells over a factor of 25, so its bar sits near the middle of the gap below them, 97%
/// under the bulk. Alone, one pair at a time, the retests agree within 2% from pass to pass:
/// the bar alone comes from that noise, so a link at a twentieth of the references alone is
/// named, and the healthy pair slowed only by the first pass's contention is cleared. With one
/// retest pass (no noise to measure) the first pass's relative drop still sets the bar alone,
/// and it clears both: the case a noisy namespace run showed, a node at a fiftieth cleared.
#[test]
fn steady_retests_narrow_the_bar_a_noisy_first_pass_set() {
    let c = robust_cfg();
    let h = hosts(6);
    // 28 healthy directions, log-evenly from 2 to 50 Gb/sec; (0,1) and (2,3) at 0.05.
    let mut healthy = (0..28).map(|i| 10.0 * 5f64.powf(2.0 * f64::from(i) / 27.0 - 1.0));
    let mut first = Vec::new();
    for s in 0..6 {
        for d in (0..6).filter(|&d| d != s) {
            let g = if [(0, 1), (2, 3)].contains(&(s, d)) {
                0.05
            } else {
                healthy.next().expect("28 healthy cells")
            };
            first.push(m(s, d, g));
        }
    }
    let plan = plan_retests(&first, &c, &h);
    assert_eq!(plan.suspects, vec![(0, 1), (2, 3)]);
    assert_eq!(plan.references.len(), REFERENCES);

    let v = judge_pairs(&first, &retests_with_jitter(&plan, 0.5, 1.02), &c, &h, &plan, None);
    let j = &v.judged[0];
    let first_keep = j.bulk.bar / j.bulk.median;
    assert!(first_keep < 0.05, "the first pass's bar is far below its bulk: {j:?}");
    let sd = j.alone_spread.expect("the retests' noise set the bar alone");
    // Eight differences (four pairs), each ln 1.02: the fourth of eight, at its expected rank
    // (4 - 0.375) / 8.25, over the half-normal's quantile there.
    let q = crate::stats::probit((1.0 + 3.625 / 8.25) / 2.0);
    assert!((sd - 1.02f64.ln() / q / 2f64.sqrt()).abs() < 1e-9, "{j:?}");
    let keep = (-(4.0 * sd).max(MIN_DROP)).exp();
    let alone = j.reference_alone.expect("references ran alone");
    assert!((j.bar_alone - alone * keep).abs() < 1e-9, "{j:?}");
    // What the run could detect is still the first pass's: a pair must be a suspect there.
    assert!((j.sensitivity - j.bulk.drop_fraction()).abs() < 1e-12, "{j:?}");
    assert_eq!(levels(&v), vec!["link h0-h1"], "{v:?}");
    assert_eq!(v.cleared, vec![(2, 3)]);
    assert_eq!(to_confirm(&v), vec![(0, 1)]);

    // One pass alone: no noise measured; the first pass's relative drop clears the link too.
    let one_pass: Vec<Measurement> = retests_with_jitter(&plan, 0.5, 1.02)
        .into_iter()
        .take(plan.pairs().len() * 2)
        .collect();
    let v = judge_pairs(&first, &one_pass, &c, &h, &plan, None);
    let j = &v.judged[0];
    assert_eq!(j.alone_spread, None, "{j:?}");
    let alone = j.reference_alone.expect("references ran alone");
    assert!((j.bar_alone - alone * first_keep).abs() < 1e-9, "{j:?}");
    assert!(v.pass, "{v:?}");
    assert_eq!(v.cleared, vec![(0, 1), (2, 3)]);
}

/// A quiet first pass (cells within 1%, as the shaped cluster and real InfiniBand) retests
/// host-disjoint pairs at once, with references picked to run beside the suspect; a noisy one
/// (cells over +-20%) retests one pair at a time, as do latency tests and `--threshold`.
#[test]
fn a_quiet_first_pass_retests_side_by_side() {
    let robust = robust_cfg();
    let h = hosts(6);
    // Six hosts at 10 Gb/s, the healthy cells spread over +-`amp`, the link 1 <-> 4 at `slow`.
    let fabric = |amp: f64, slow: f64| {
        let mut v = matrix(6, 10.0, &[(1, 4, slow), (4, 1, slow)]);
        for x in v.iter_mut().filter(|x| (x.src.min(x.dst), x.src.max(x.dst)) != (1, 4)) {
            let g = 10.0 * (1.0 + amp * (((x.src * 7 + x.dst * 3) % 5) as f64 - 2.0) / 2.0);
            x.bw = x.bw.map(|b| BwResult {
                avg_gbps: g,
                peak_gbps: g,
                ..b
            });
        }
        v
    };
    // Within +-1%, the link at 8.
    let quiet = fabric(0.01, 8.0);
    let plan = plan_retests(&quiet, &robust, &h);
    assert_eq!(plan.suspects, vec![(1, 4)]);
    assert!(plan.at_once, "{plan:?}");
    assert_eq!(plan.references.len(), REFERENCES);
    // The suspect and both references share no host: one group, one pair's time a pass.
    let node_of: Vec<usize> = (0..6).collect();
    assert_eq!(
        crate::schedule::host_disjoint_groups(&plan.pairs(), &node_of).len(),
        1,
        "{plan:?}"
    );
    let v = judge_pairs(&quiet, &retests_of(&plan, (1, 4), 8.0, 1.0), &robust, &h, &plan, None);
    assert!(v.judged[0].retested_at_once);
    assert_eq!(levels(&v), vec!["link h1-h4".to_string()]);

    // The same fabric with the healthy cells spread over +-20%, the link at a third: one at a time.
    let noisy = fabric(0.2, 3.0);
    let plan = plan_retests(&noisy, &robust, &h);
    assert!(!plan.suspects.is_empty());
    assert!(!plan.at_once, "{plan:?}");
    // A fixed threshold never measures the spread: one at a time.
    assert!(!plan_retests(&quiet, &cfg(), &h).at_once);

    // The fastest 8 of 30 cells within 1%, the other 22 spread from 0.7 to 0.85 of them (every
    // core busy, the ranks starved): the bulk is tight but a minority, so one at a time.
    let mut starved = fabric(0.0, 8.0);
    for (i, x) in starved.iter_mut().enumerate().filter(|(i, _)| i % 15 >= 4) {
        let g = 10.0 * (0.7 + 0.15 * (i % 11) as f64 / 10.0);
        x.bw = x.bw.map(|b| BwResult {
            avg_gbps: g,
            peak_gbps: g,
            ..b
        });
    }
    let plan = plan_retests(&starved, &robust, &h);
    let bulk = bars(&starved, &robust, &h)[0].1;
    assert!(
        bulk.spread <= QUIET_SPREAD && 2 * bulk.healthy <= bulk.cells,
        "{bulk:?}"
    );
    assert!(!plan.suspects.is_empty());
    assert!(!plan.at_once, "{plan:?}");
}

/// Retests at once are kept where they varied from pass to pass as little as the quiet first
/// pass promised (1%), and run again alone where they did not (10%, as a 2-core runner once
/// made them, when the bar alone widened to 40% and cleared a node at 85%). The gate uses
/// any difference it has, so a single pair retested twice is judged too.
#[test]
fn retests_at_once_that_vary_are_run_again_alone() {
    let robust = robust_cfg();
    let h = hosts(6);
    let first = matrix(6, 10.0, &[(1, 4, 8.0), (4, 1, 8.0)]);
    let plan = plan_retests(&first, &robust, &h);
    assert!(plan.at_once, "{plan:?}");
    assert_eq!(unsteady_at_once(&retests_of(&plan, (1, 4), 8.0, 1.01), &h), None);
    let sd = unsteady_at_once(&retests_of(&plan, (1, 4), 8.0, 1.10), &h).expect("10% is unsteady");
    assert!((sd - 1.10f64.ln() * 1.4826 / 2f64.sqrt()).abs() < 1e-9, "{sd}");
    assert!(sd > QUIET_SPREAD);
    // Just above the gate and just below it (one retest's deviation is the difference / sqrt 2).
    let jitter = |sd: f64| (sd * 2f64.sqrt() / 1.4826).exp();
    assert!(unsteady_at_once(&retests_of(&plan, (1, 4), 8.0, jitter(QUIET_SPREAD * 1.01)), &h).is_some());
    assert!(unsteady_at_once(&retests_of(&plan, (1, 4), 8.0, jitter(QUIET_SPREAD * 0.99)), &h).is_none());
    // One pair, twice: two differences are enough for the gate.
    let one = RetestPlan {
        suspects: vec![(1, 4)],
        ..RetestPlan::default()
    };
    assert!(unsteady_at_once(&retests_of(&one, (1, 4), 8.0, 1.10), &h).is_some());
    // A single pass has no difference: nothing to judge.
    let single: Vec<Measurement> = retests_of(&one, (1, 4), 8.0, 1.10).into_iter().take(2).collect();
    assert_eq!(unsteady_at_once(&single, &h), None);

    // The report says what happened: run again alone, and how much the retests at once varied.
    let mut plan = plan;
    plan.at_once = false;
    plan.at_once_noise = Some(sd);
    let v = judge_pairs(&first, &retests_of(&plan, (1, 4), 8.0, 1.0), &robust, &h, &plan, None);
    assert!(!v.judged[0].retested_at_once);
    assert_eq!(v.judged[0].at_once_noise, Some(sd));
    assert_eq!(levels(&v), vec!["link h1-h4".to_string()]);
}

/// The first pass of `n` ranks on `hosts`, every direction at `gbps` with messages of `bytes`.
fn pass_at(n: usize, bytes: u64, gbps: impl Fn(usize, usize) -> f64) -> Vec<Measurement> {
    let mut v = matrix(n, 0.0, &[]);
    for x in &mut v {
        let g = gbps(x.src, x.dst);
        x.bytes = bytes;
        if let Some(b) = x.bw.as_mut() {
            b.bytes = bytes;
            b.avg_gbps = g;
            b.peak_gbps = g;
        }
    }
    v
}

#[test]
fn retests_are_cut_to_a_tenth_of_a_second_where_the_first_pass_took_longer() {
    // The shaped namespace cluster: 6 hosts at 0.38 Gb/s, -s 1M -n 60 and the default warm-up
    // of 8 messages. One message takes 8 Mib / 0.38 Gb/s = 22.08 ms; a tenth of a second is 4.53
    // of them, so 5, and the warm-up cut by the same 5/60: 0.67, so 1, and at least 2.
    let mib = 1 << 20;
    let c = PairwiseConfig {
        warmup: 8,
        ..PairwiseConfig::synthetic(OpName::Send, mib, 60)
    };
    let first = pass_at(6, mib as u64, |s, d| if (s, d) == (1, 4) { 0.31 } else { 0.38 });
    let a = retest_amount(&first, &c, &hosts(6));
    assert_eq!(
        a,
        Some(RetestAmount {
            iterations: 5,
            warmup: 2
        })
    );
    let applied = a.map(|a| a.applied(&c));
    assert_eq!(applied.as_ref().map(|r| r.amount), Some(Amount::Iterations(5)));
    assert_eq!(
        applied.as_ref().map(|r| (r.warmup, r.sizes.clone())),
        Some((2, vec![mib]))
    );
    // No warm-up stays none; a warm-up of one message stays one; the default of two (2 MiB at
    // 1 MiB) stays two, not 2 x 5/60 rounded up to one; 60 is cut to 5.
    for (first_warmup, retest_warmup) in [(0, 0), (1, 1), (2, 2), (3, 2), (20, 2), (60, 5)] {
        let a = retest_amount(
            &first,
            &PairwiseConfig {
                warmup: first_warmup,
                ..c.clone()
            },
            &hosts(6),
        );
        assert_eq!(
            a.map(|a| a.warmup),
            Some(retest_warmup),
            "first pass's warm-up {first_warmup}"
        );
    }

    // Two ranks per host: the faster pairs within a host (8 Gb/s) do not shorten the retests of
    // the slower pairs between hosts, which set the count.
    let two_per_host: Vec<String> = (0..6).map(|r| format!("h{}", r / 2)).collect();
    let mixed = pass_at(6, mib as u64, |s, d| if s / 2 == d / 2 { 8.0 } else { 0.38 });
    assert_eq!(retest_amount(&mixed, &c, &two_per_host).map(|a| a.iterations), Some(5));

    // Never below the floor: at 0.1 Gb/s a message of 1 MiB takes 84 ms, a tenth of a second
    // fits 2 of them, so MIN_RETEST_ITERATIONS; at 40 Gb/s it fits 477 of the 5,000.
    let many = PairwiseConfig::synthetic(OpName::Send, mib, 5000);
    let slow = pass_at(6, mib as u64, |_, _| 0.1);
    assert_eq!(
        retest_amount(&slow, &many, &hosts(6)).map(|a| a.iterations),
        Some(MIN_RETEST_ITERATIONS)
    );
    let fast = pass_at(6, mib as u64, |_, _| 40.0);
    assert_eq!(retest_amount(&fast, &many, &hosts(6)).map(|a| a.iterations), Some(477));
}

#[test]
fn retests_keep_the_count_where_it_is_short_or_not_a_bandwidth_count() {
    let kib64 = 65536;
    // RDMA at line rate: perftest's 5,000 messages of 64 KiB take 27 ms at 97 Gb/s.
    let rdma = pass_at(6, kib64 as u64, |_, _| 97.0);
    let c = PairwiseConfig::synthetic(OpName::Write, kib64, 5000);
    assert_eq!(retest_amount(&rdma, &c, &hosts(6)), None);
    // Slow enough to take long, but a latency test, a duration (-D), or already few messages.
    let slow = pass_at(6, kib64 as u64, |_, _| 0.001);
    assert!(retest_amount(&slow, &c, &hosts(6)).is_some());
    let lat = PairwiseConfig {
        test: TestKind::Lat,
        ..c.clone()
    };
    assert_eq!(retest_amount(&slow, &lat, &hosts(6)), None);
    let timed = PairwiseConfig {
        amount: Amount::Duration(5.0),
        ..c.clone()
    };
    assert_eq!(retest_amount(&slow, &timed, &hosts(6)), None);
    let few = PairwiseConfig::synthetic(OpName::Write, kib64, MIN_RETEST_ITERATIONS);
    assert_eq!(retest_amount(&slow, &few, &hosts(6)), None);
    // Nothing measured: nothing to fit.
    assert_eq!(retest_amount(&[], &c, &hosts(6)), None);
}

/// Two passes settle a slow link where the retests ran at once on a quiet first pass and held,
/// at most FEW_SUSPECTS pairs were suspect and each direction of the slow pairs read alike in
/// both passes; anything else (more suspects, passes apart, one pair at a time, retests at once
/// that varied, a queue-pair path to retest) still runs the confirmation passes.
#[test]
fn two_passes_settle_few_suspects_retested_at_once_and_alike() {
    let robust = robust_cfg();
    let h = hosts(6);
    let first = matrix(6, 10.0, &[(1, 4, 8.0), (4, 1, 8.0)]);
    let plan = plan_retests(&first, &robust, &h);
    assert!(plan.at_once, "{plan:?}");
    assert_eq!(plan.suspects, vec![(1, 4)]);
    let alike = retests_of(&plan, (1, 4), 8.0, 1.02);
    let still = to_confirm(&judge_pairs(&first, &alike, &robust, &h, &plan, None));
    assert_eq!(still, vec![(1, 4)]);
    assert!(settled_in_two(&plan, &alike, &still));
    // The report carries it.
    let settled = RetestPlan {
        settled: true,
        ..plan.clone()
    };
    let v = judge_pairs(&first, &alike, &robust, &h, &settled, None);
    assert!(v.judged[0].settled_in_two_passes);
    assert_eq!(levels(&v), vec!["link h1-h4".to_string()]);

    // Passes 3% apart (the gate is QUIET_SPREAD, 2.5% in log units): confirm.
    let apart = retests_of(&plan, (1, 4), 8.0, 1.03);
    assert!(!settled_in_two(&plan, &apart, &still));
    // Nothing still slow: nothing to settle.
    assert!(!settled_in_two(&plan, &alike, &[]));
    // One pair at a time, or at once but unsteady: confirm.
    let alone = RetestPlan {
        at_once: false,
        ..plan.clone()
    };
    assert!(!settled_in_two(&alone, &alike, &still));
    let unsteady = RetestPlan {
        at_once_noise: Some(0.05),
        ..plan.clone()
    };
    assert!(!settled_in_two(&unsteady, &alike, &still));
    // More suspects than FEW_SUSPECTS: chance has more directions to hit twice.
    let many = RetestPlan {
        suspects: (0..=FEW_SUSPECTS).map(|i| (i, i + 1)).collect(),
        ..plan.clone()
    };
    assert!(!settled_in_two(&many, &alike, &still));
    let with_paths = RetestPlan {
        paths: vec![(2, 3)],
        ..plan.clone()
    };
    assert!(!settled_in_two(&with_paths, &alike, &still));
    // A direction retested once only (no second pass to compare): confirm.
    let once: Vec<Measurement> = alike
        .iter()
        .filter(|m| (m.src, m.dst) != (4, 1))
        .cloned()
        .chain(alike.iter().filter(|m| (m.src, m.dst) == (4, 1)).take(1).cloned())
        .collect();
    assert!(!settled_in_two(&plan, &once, &still));
}

/// One suspect and two references give six pass-to-pass differences. A stall that slowed one
/// pass of three different directions (a quarter of the speed) took the plain median of the
/// six with it, and the bar alone widened past a link at 60%, cleared; the lower median reads
/// the three steady directions, the bar alone stays at the floor, and the link is named. (The
/// synthetic quiet fabric with stalls missed a link this way in about 1% of its 8-host trials.)
#[test]
fn three_stalled_retests_of_six_directions_do_not_widen_the_bar_alone() {
    let c = robust_cfg();
    let h = hosts(6);
    let first = matrix(6, 10.0, &[(1, 4, 6.0), (4, 1, 6.0)]);
    let plan = plan_retests(&first, &c, &h);
    assert_eq!(plan.suspects, vec![(1, 4)]);
    assert_eq!(plan.pairs().len(), 3);
    let (r1, r2) = (plan.references[0], plan.references[1]);
    let mut retests = Vec::new();
    for pass in 0..RETEST_PASSES {
        for &(a, b) in &plan.pairs() {
            for (s, d) in [(a, b), (b, a)] {
                let at = if (a, b) == (1, 4) { 6.0 } else { 10.0 };
                // Pass 0: the link's 1 -> 4 and one direction of each reference stalled.
                let stalled = pass == 0 && [(1, 4), r1, (r2.1, r2.0)].contains(&(s, d));
                let mut x = m(
                    s,
                    d,
                    if stalled {
                        at / 4.0
                    } else {
                        at * (1.0 + 0.003 * pass as f64)
                    },
                );
                x.retest = true;
                retests.push(x);
            }
        }
    }
    let mut diffs: Vec<f64> = retests
        .chunks(6)
        .collect::<Vec<_>>()
        .windows(2)
        .flat_map(|w| {
            w[0].iter()
                .zip(w[1])
                .map(|(a, b)| (b.score().ln() - a.score().ln()).abs())
        })
        .collect();
    assert!(median(&mut diffs) > 0.5, "the plain median is the stalls': {diffs:?}");
    let v = judge_pairs(&first, &retests, &c, &h, &plan, None);
    let j = &v.judged[0];
    assert_eq!(j.alone_spread, None, "the bar alone stays at the floor: {j:?}");
    assert!(
        (j.bar_alone / j.reference_alone.unwrap_or(0.0) - (-MIN_DROP).exp()).abs() < 1e-9,
        "{j:?}"
    );
    assert_eq!(levels(&v), vec!["link h1-h4".to_string()], "{v:?}");
}
