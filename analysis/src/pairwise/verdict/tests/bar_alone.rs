//! The bar alone: set from the retests' own pass-to-pass noise, widened on a busy machine,
//! narrowed below a noisy first pass, and not widened by a few stalled retests.

use super::*;

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
    // Six differences, each ln 1.02 (the references and (2, 3); the link's two directions,
    // certainly slow at a twentieth of the references, are left out): the third of six, at its
    // expected rank (3 - 0.375) / 6.25, over the half-normal's quantile there.
    let q = crate::stats::probit((1.0 + 2.625 / 6.25) / 2.0);
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

/// One suspect and two references give six pass-to-pass differences. A stall that slowed one
/// pass of three different directions (a quarter of the speed) took the plain median of the
/// six with it, and the bar alone widened past a link at 60%, cleared; the lower median reads
/// the three steady directions, the bar alone stays at the floor, and the link is named. (The
/// synthetic quiet fabric with stalls missed a link this way in about 1% of its 8-host trials.)
#[test]
fn three_stalled_retests_of_six_directions_do_not_widen_the_bar_alone() {
    let (c, h, first, plan) = one_slow_pair(6.0);
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

/// A dead node's directions alone sit at the same floor every pass: read as noise, their ten
/// differences of nought took the lower median with them and held a healthy pair (slowed by
/// chance in the first pass, varying by a fifth alone, as the references did) to the 7% floor.
/// They are certainly slow, so the noise is read from the others; the node is named alone.
#[test]
fn a_dead_node_steady_alone_does_not_narrow_the_bar_alone() {
    let c = robust_cfg();
    let h = hosts(6);
    let mut slow: Vec<(usize, usize, f64)> = (0..5).flat_map(|r| [(r, 5, 0.1), (5, r, 0.1)]).collect();
    slow.extend([(0, 1, 6.0), (1, 0, 6.0)]);
    let first = matrix(6, 10.0, &slow);
    let plan = plan_retests(&first, &c, &h);
    assert!(plan.suspects.contains(&(0, 1)), "{plan:?}");
    assert_eq!(plan.references.len(), REFERENCES);
    let mut retests = Vec::new();
    for pass in 0..RETEST_PASSES {
        for &(a, b) in &plan.pairs() {
            let at = if b == 5 {
                0.1
            } else if (a, b) == (0, 1) {
                [8.0, 7.0][pass % 2]
            } else {
                [10.0, 8.0][pass % 2]
            };
            for (s, d) in [(a, b), (b, a)] {
                let mut x = m(s, d, at);
                x.retest = true;
                retests.push(x);
            }
        }
    }
    let v = judge_pairs(&first, &retests, &c, &h, &plan, None);
    let j = &v.judged[0];
    assert!(j.alone_spread.is_some_and(|sd| sd > 0.2), "{j:?}");
    assert_eq!(levels(&v), vec!["node h5".to_string()], "{v:?}");
    assert!(v.cleared.contains(&(0, 1)), "{v:?}");
}
