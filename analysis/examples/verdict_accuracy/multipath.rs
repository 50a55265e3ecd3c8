//! Multipath fabrics (issue 57): L leaves x H hosts (one rank each) x S spines, every test on
//! [`Q`] TCP connections, each hashed onto a spine at random (so some pairs' connections all
//! land on one spine: the hash collisions of ECMP) and traced as `pairwise -q` traces them
//! (`analysis/src/pairwise/cables/tests.rs` has the same addressing): the source leaf 10.80.L.1,
//! the arrival at spine s from leaf L 10.(100+s).L.2, the arrival at the destination leaf L'
//! from spine s 10.(100+s).L'.1. One leaf-spine cable may be slow both ways: a connection
//! crossing it runs at `keep` of its rate.
//!
//! A test's figure is [`Q`] times its slowest connection's: a test deals its bytes evenly over
//! its connections and lasts until the last one ends, which is what the leaf-spine bed's JSONs
//! show (each cell is exactly four times its slowest connection; the others, done earlier, read
//! faster). Each trial runs the verdict as rank 0 does: `plan_retests`, the retests alone (the
//! pair's connections hashed anew, no traces), the confirmation passes unless settled in two,
//! then `judge_pairs`. A trial names the cable *alone* when `Verdict.links` is not empty, every
//! link it holds arrives on one of the cable's two ends, and nothing is blamed or unstable.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use analysis::pairwise::cables::End;
use analysis::pairwise::connections::{Connection, Path};
use analysis::pairwise::defaults::{CONFIRM_PASSES, RETEST_PASSES};
use analysis::pairwise::verdict::{self, RetestPlan, Verdict};
use analysis::pairwise::{Measurement, OpName, PairwiseConfig};

use super::noise::Rng;
use super::shift_slots;

/// Connections a test (`pairwise -q 4`, as on the bed).
pub const Q: usize = 4;
/// A connection's healthy rate, Gb/s (a quarter of the bed's 100 Mbit/s host link).
const FAIR: f64 = 0.025;

/// Leaves, hosts a leaf, spines.
#[derive(Clone, Copy)]
pub struct Fabric {
    pub leaves: usize,
    pub hosts: usize,
    pub spines: usize,
}

impl Fabric {
    fn ranks(&self) -> usize {
        self.leaves * self.hosts
    }
    fn leaf(&self, r: usize) -> usize {
        r / self.hosts
    }
    fn label(&self) -> String {
        format!("{}x{}x{}", self.leaves, self.hosts, self.spines)
    }
}

/// A connection's figure around its fair share: a log-normal core, and a share of connections
/// in a tail above it (those that finished before the test's last, with the host link to
/// fewer).
#[derive(Clone, Copy)]
pub struct ConnNoise {
    pub name: &'static str,
    /// The spread the target is judged at (robust, log units).
    pub spread: f64,
    core: f64,
    tail: f64,
}

/// `quiet`: 1.5% per connection, no tail. `bed`: the leaf-spine bed's clean runs
/// (docs/evidence/leafspine-paths-2026-12-06 and leafspine-cables-2026-12-06, 96 connections
/// between leaves each): relative to the median, a core at 0.92-1.0 (log sd 0.04 below 1.1) and
/// a third of connections at 1.1-1.6; the robust spread of all of them (1.4826 MAD of the logs)
/// 0.065 and 0.083, so 8%.
pub const CONN_NOISES: [ConnNoise; 2] = [
    ConnNoise {
        name: "quiet",
        spread: 0.015,
        core: 0.015,
        tail: 0.0,
    },
    ConnNoise {
        name: "bed",
        spread: 0.08,
        core: 0.04,
        tail: 1.0 / 3.0,
    },
];

impl ConnNoise {
    /// Each of a test's connections' factors, `keep` applied where it crosses the slow cable:
    /// the core for every one, and the tail for those that finished before the test's slowest
    /// (the last to finish reads its share; on the bed every cell is [`Q`] times its slowest
    /// connection, and the tail, a third of all connections, is among the other three).
    fn factors(&self, keep: &[f64], rng: &mut Rng) -> Vec<f64> {
        let mut f: Vec<f64> = keep.iter().map(|k| k * (self.core * rng.normal()).exp()).collect();
        let slowest = (0..f.len()).min_by(|&a, &b| f[a].total_cmp(&f[b])).unwrap_or(0);
        let share = self.tail * f.len() as f64 / (f.len() as f64 - 1.0).max(1.0);
        for (i, x) in f.iter_mut().enumerate() {
            if i != slowest && rng.unit() < share {
                *x *= 1.1 + 0.5 * rng.unit();
            }
        }
        f
    }
}

/// The slow cable: leaf, spine, and the share of its rate it keeps.
#[derive(Clone, Copy)]
struct Cable {
    leaf: usize,
    spine: usize,
    keep: f64,
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}
fn at_spine(leaf: usize, s: usize) -> IpAddr {
    v4(10, 100 + s as u8, leaf as u8, 2)
}
fn at_leaf(leaf: usize, s: usize) -> IpAddr {
    v4(10, 100 + s as u8, leaf as u8, 1)
}

/// One test `src -> dst`: its connections (traced in the first pass) and its figure.
fn test(
    f: &Fabric,
    noise: ConnNoise,
    cable: Option<Cable>,
    src: usize,
    dst: usize,
    retest: bool,
    rng: &mut Rng,
) -> Measurement {
    let (ls, ld) = (f.leaf(src), f.leaf(dst));
    let host = |r: usize, port: u16| SocketAddr::new(v4(10, 80, f.leaf(r) as u8, 10 + r as u8), port);
    let spines: Vec<usize> = (0..Q).map(|_| rng.below(f.spines)).collect();
    let keep: Vec<f64> = spines
        .iter()
        .map(|&s| match cable {
            Some(c) if ls != ld && c.spine == s && (c.leaf == ls || c.leaf == ld) => c.keep,
            _ => 1.0,
        })
        .collect();
    let factors = noise.factors(&keep, rng);
    let conns: Vec<Connection> = spines
        .iter()
        .zip(&factors)
        .enumerate()
        .map(|(k, (&s, &x))| {
            let hops = if ls == ld {
                Vec::new()
            } else {
                vec![
                    Some(v4(10, 80, ls as u8, 1)),
                    Some(at_spine(ls, s)),
                    Some(at_leaf(ld, s)),
                ]
            };
            Connection {
                from: host(src, 40000 + k as u16),
                to: host(dst, 5000),
                bytes: 1 << 21,
                gbps: FAIR * x,
                path: Some(Path::Traced { hops, reached: true }),
            }
        })
        .collect();
    let slowest = conns.iter().map(|c| c.gbps).fold(f64::INFINITY, f64::min);
    let mut m = Measurement::bandwidth(src, dst, 1 << 20, 100, Q as f64 * slowest, retest);
    if !retest {
        m.connections = conns;
    }
    m
}

fn config() -> PairwiseConfig {
    PairwiseConfig {
        window: 128,
        warmup: 8,
        op_timeout: Duration::from_secs(60),
        qps: Q,
        ..PairwiseConfig::synthetic(OpName::Write, 1 << 20, 100)
    }
}

/// One run over the fabric as rank 0 judges it: the first pass, the retests, the verdict.
fn trial(f: &Fabric, noise: ConnNoise, cable: Option<Cable>, rng: &mut Rng) -> (Verdict, Vec<Measurement>) {
    let n = f.ranks();
    let hosts: Vec<String> = (0..n).map(|r| format!("n{r:04}")).collect();
    let cfg = config();
    let (slot_of, _) = shift_slots(n);
    let mut first = Vec::with_capacity(n * (n - 1));
    for src in 0..n {
        for dst in (0..n).filter(|&d| d != src) {
            first.push(test(f, noise, cable, src, dst, false, rng).in_slot(slot_of[src * n + dst]));
        }
    }
    let plan = verdict::plan_retests(&first, &cfg, &hosts);
    let mut retests = Vec::new();
    let again = |pairs: &[(usize, usize)], retests: &mut Vec<Measurement>, rng: &mut Rng| {
        for &(a, b) in pairs {
            retests.push(test(f, noise, cable, a, b, true, rng));
            retests.push(test(f, noise, cable, b, a, true, rng));
        }
    };
    for _ in 0..RETEST_PASSES {
        again(&plan.pairs(), &mut retests, rng);
    }
    let still = verdict::to_confirm(&verdict::judge_pairs(&first, &retests, &cfg, &hosts, &plan, None));
    let settled = verdict::settled_in_two(&plan, &retests, &still);
    let plan = RetestPlan { settled, ..plan };
    if !settled {
        for _ in 0..CONFIRM_PASSES {
            again(&still, &mut retests, rng);
        }
    }
    (verdict::judge_pairs(&first, &retests, &cfg, &hosts, &plan, None), first)
}

/// `VERDICT_ACCURACY_DEBUG`: the links a missed or extra trial named, and the first-pass
/// connections (spine, Gb/s) of each pair blamed on a host link.
fn explain(v: &Verdict, first: &[Measurement]) {
    let to: Vec<String> = v.links.iter().map(|l| l.link.to.to_string()).collect();
    eprintln!("  links into {to:?}; {} pair(s) set aside for them", v.fabric.len());
    for p in &v.confirmed {
        for m in first.iter().filter(|m| m.pair() == (p.a, p.b)) {
            let c: Vec<String> = m
                .connections
                .iter()
                .map(|c| match &c.path {
                    Some(Path::Traced { hops, .. }) => format!("{:?} {:.4}", hops.get(1), c.gbps),
                    _ => format!("{:.4}", c.gbps),
                })
                .collect();
            eprintln!(
                "  confirmed {}->{} {:.4} (retest {:?}): {}",
                m.src,
                m.dst,
                m.score(),
                p.retest,
                c.join(", ")
            );
        }
    }
}

/// A cell's counts: trials, cable named alone, named with something more, links named and
/// those of them that were the cable.
#[derive(Default)]
struct Tally {
    trials: usize,
    alone: usize,
    extra: usize,
    /// Trials with a host part blamed or unstable (named alone or not).
    hosts: usize,
    links: usize,
    right: usize,
}

const DROPS: [f64; 6] = [0.10, 0.15, 0.20, 0.30, 0.45, 0.60];

/// The fabrics: the bed's shape, then wider ones with more spines.
fn fabrics(small: bool) -> Vec<Fabric> {
    let f = |leaves, hosts, spines| Fabric { leaves, hosts, spines };
    if small {
        vec![f(3, 2, 2), f(4, 4, 8)]
    } else {
        vec![f(3, 2, 2), f(4, 2, 4), f(3, 4, 4), f(4, 4, 8)]
    }
}

/// `VERDICT_ACCURACY_TRIAL=NOISE,LxHxS,LEAF,SPINE,DROP,RNG` (a line the debug output printed,
/// RNG its `rng` state): that one trial again, with what the cable search alone found.
fn one_trial(spec: &str) -> Option<()> {
    let v: Vec<&str> = spec.split(',').collect();
    let noise = CONN_NOISES.into_iter().find(|n| Some(&n.name) == v.first())?;
    let dims: Vec<usize> = v.get(1)?.split('x').filter_map(|d| d.parse().ok()).collect();
    let f = Fabric {
        leaves: *dims.first()?,
        hosts: *dims.get(1)?,
        spines: *dims.get(2)?,
    };
    let drop: f64 = v.get(4)?.parse().ok()?;
    let cable = Cable {
        leaf: v.get(2)?.parse().ok()?,
        spine: v.get(3)?.parse().ok()?,
        keep: 1.0 - drop / 100.0,
    };
    let state = u64::from_str_radix(v.get(5)?.trim_start_matches("0x"), 16).ok()?;
    let (verdict, first) = trial(&f, noise, Some(cable), &mut Rng(state));
    let links = analysis::pairwise::cables::slow_links(&first);
    let on = analysis::pairwise::cables::explained_pairs(&first, &links);
    eprintln!("  explained pairs {on:?}");
    let across = analysis::pairwise::cables::pairs_across(&first, &links);
    for (l, pairs) in links.iter().zip(&across) {
        eprintln!("  pairs across {} (not across a link before it): {pairs:?}", l.link.to);
    }
    for l in links {
        eprintln!(
            "  search: into {} from {:?}: {} at {:.4} vs {} at {:.4}, z {:.1}, fine {:.2}",
            l.link.to, l.link.from, l.connections, l.median, l.others, l.others_median, l.z, l.fine_share
        );
    }
    eprintln!("  blamed {:?}", verdict.blamed);
    explain(&verdict, &first);
    Some(())
}

/// Print the multipath rows, `trials` a cell; the cells that miss the target, in words.
pub fn run(small: bool, trials: usize, seed: u64) -> Vec<String> {
    if let Ok(spec) = std::env::var("VERDICT_ACCURACY_TRIAL") {
        if one_trial(&spec).is_none() {
            eprintln!("verdict_accuracy: VERDICT_ACCURACY_TRIAL wants NOISE,LxHxS,LEAF,SPINE,DROP%,RNG");
        }
        return Vec::new();
    }
    let mut missed = Vec::new();
    let mut rng = Rng(seed ^ STREAM);
    let fabs = fabrics(small);
    let labels: Vec<String> = fabs.iter().map(Fabric::label).collect();
    println!();
    println!(
        "# multipath fabrics (leaves x hosts x spines) {}: -q {Q}, connections hashed onto spines at random, one leaf-spine cable slow both ways; {trials} trials per cell",
        labels.join(", ")
    );
    println!("# named = the cable alone (every link named is one of its two ends, nothing blamed or unstable); extra = it and more");
    let debug = std::env::var_os("VERDICT_ACCURACY_DEBUG").is_some();
    for noise in CONN_NOISES {
        let mut clean = (0usize, 0usize);
        let mut by: BTreeMap<(usize, u32), Tally> = BTreeMap::new();
        for (i, f) in fabs.iter().enumerate() {
            for t in 0..trials {
                let before = rng.0;
                let (v, _) = trial(f, noise, None, &mut rng);
                clean.0 += 1;
                if !v.links.is_empty() || !v.blamed.is_empty() || !v.unstable.is_empty() {
                    clean.1 += 1;
                    if debug {
                        eprintln!(
                            "clean {} trial {t} (rng {before:#x}): {} link(s), blamed {:?}",
                            f.label(),
                            v.links.len(),
                            v.blamed
                        );
                    }
                }
            }
            for &d in &DROPS {
                let tally = by.entry((i, (d * 100.0).round() as u32)).or_default();
                for t in 0..trials {
                    let cable = Cable {
                        leaf: rng.below(f.leaves),
                        spine: rng.below(f.spines),
                        keep: 1.0 - d,
                    };
                    let before = rng.0;
                    let (v, first) = trial(f, noise, Some(cable), &mut rng);
                    let ends = [at_spine(cable.leaf, cable.spine), at_leaf(cable.leaf, cable.spine)];
                    let right = v
                        .links
                        .iter()
                        .filter(|l| ends.iter().any(|e| l.link.to == End::Ip(*e)))
                        .count();
                    let quiet = v.blamed.is_empty() && v.unstable.is_empty();
                    tally.trials += 1;
                    tally.links += v.links.len();
                    tally.hosts += usize::from(!quiet);
                    tally.right += right;
                    if right > 0 && right == v.links.len() && quiet {
                        tally.alone += 1;
                    } else {
                        if right > 0 {
                            tally.extra += 1;
                        }
                        if debug {
                            eprintln!(
                                "{} {} at {:.0}% trial {t} (rng {before:#x}): cable leaf{} spine{}: {right} of {} link(s) right, blamed {:?}",
                                if right > 0 { "extra" } else { "missed" },
                                f.label(),
                                d * 100.0,
                                cable.leaf,
                                cable.spine,
                                v.links.len(),
                                v.blamed
                            );
                            explain(&v, &first);
                        }
                    }
                }
            }
        }
        report(noise, &fabs, clean, &by, &mut missed);
    }
    println!();
    if missed.is_empty() {
        println!("# multipath target met: >= 99% of cables named alone where the drop >= max(10%, 4 spreads); <= 1% of clean fabrics with a finding");
    }
    for m in &missed {
        println!("# target missed: {m}");
    }
    missed
}

/// The multipath rows' own random stream (from the seed), so the other rows keep their draws.
const STREAM: u64 = 0x3a17_9a7e_5eed;

fn report(
    noise: ConnNoise,
    fabs: &[Fabric],
    clean: (usize, usize),
    by: &BTreeMap<(usize, u32), Tally>,
    missed: &mut Vec<String>,
) {
    println!();
    println!(
        "## multipath noise {} (per connection, spread {:.1}%): clean fabrics with a finding: {} of {} ({:.1}%)",
        noise.name,
        noise.spread * 100.0,
        clean.1,
        clean.0,
        100.0 * clean.1 as f64 / clean.0.max(1) as f64
    );
    if clean.1 * 100 > clean.0 {
        missed.push(format!(
            "multipath noise {}: {} of {} clean fabrics had a finding",
            noise.name, clean.1, clean.0
        ));
    }
    print!("#  fabric     ");
    for d in DROPS {
        print!("  drop {:>2.0}%", d * 100.0);
    }
    println!("   (cable named alone %; trials named with extras, and with a host part blamed or unstable, per drop)");
    let (mut links, mut right) = (0, 0);
    for (i, f) in fabs.iter().enumerate() {
        print!("  {:<11}", f.label());
        let mut extras = Vec::new();
        let mut hosts = Vec::new();
        let mut n = 0;
        for d in DROPS {
            let t = &by[&(i, (d * 100.0).round() as u32)];
            n = t.trials;
            links += t.links;
            right += t.right;
            let recall = t.alone as f64 / t.trials.max(1) as f64;
            print!("  {:>8.1}", 100.0 * recall);
            extras.push(t.extra.to_string());
            hosts.push(t.hosts.to_string());
            let held = -(1.0 - d).ln() >= (4.0 * noise.spread).max(-(0.9f64).ln()) - 1e-12;
            if held && recall < 0.99 {
                missed.push(format!(
                    "multipath noise {}: {} cable at {:.0}% named alone in {:.1}% of {} trials",
                    noise.name,
                    f.label(),
                    d * 100.0,
                    recall * 100.0,
                    t.trials
                ));
            }
        }
        println!(
            "   (with extras {}; a host part blamed {}; {n} each)",
            extras.join("/"),
            hosts.join("/")
        );
    }
    for d in DROPS {
        let (l, r) = fabs.iter().enumerate().fold((0, 0), |(l, r), (i, _)| {
            let t = &by[&(i, (d * 100.0).round() as u32)];
            (l + t.links, r + t.right)
        });
        print!("{}", if d == DROPS[0] { "#  precision  " } else { "" });
        if l == 0 {
            print!("  {:>8}", "-");
        } else {
            print!("  {:>8.1}", 100.0 * r as f64 / l as f64);
        }
    }
    println!("   (links named that were the cable %, all fabrics; {right} of {links} overall)");
}
