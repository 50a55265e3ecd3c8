//! The default rule on synthetic fabrics: healthy ones pass at every noise level, broken ones
//! name exactly what is broken, and a small population is judged with the run's noise.

use super::*;

/// What is broken in a synthetic fabric.
#[derive(Debug, Clone, Copy)]
enum Broken {
    Link(usize, usize),
    Node(usize),
    Nic(usize),
}

struct ShapedFabric {
    hosts: Vec<String>,
    host_of: Vec<usize>,
    broken: Vec<Broken>,
}

impl ShapedFabric {
    fn new(h: usize, ppn: usize, broken: &[Broken]) -> ShapedFabric {
        ShapedFabric {
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
                let v = ShapedFabric::new(h, ppn, &[]).run(spread, seed);
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
                let f = ShapedFabric::new(*h, *ppn, broken);
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
    let f = ShapedFabric::new(4, 2, &[Broken::Link(0, 1)]);
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
    let f = ShapedFabric::new(64, 8, &[Broken::Node(7), Broken::Nic(300)]);
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
