//! Under `--threshold`: a fixed fraction of the median, the `--expect-gbps` floor, best-of-passes
//! retests, clearing and blame.

use super::*;

#[test]
fn one_slow_link_is_blamed_on_the_link() {
    let first = matrix(4, 10.0, &[(0, 1, 0.1)]);
    assert_eq!(plan_retests(&first, &cfg(), &hosts(4)).suspects, vec![(0, 1)]);
    let retests = vec![m(0, 1, 0.1), m(1, 0, 10.0)];
    let v = judge_with(&first, &retests, &cfg(), &hosts(4));
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
    let v = judge_with(&first, &hiccup, &cfg(), &hosts(4));
    assert!(v.pass, "{v:?}");
    assert_eq!(v.cleared, vec![(0, 1)]);
    // Slow in both passes: confirmed, reported at its best pass.
    let slow = vec![m(0, 1, 0.1), m(1, 0, 10.0), m(0, 1, 0.3), m(1, 0, 10.0)];
    let v = judge_with(&first, &slow, &cfg(), &hosts(4));
    assert_eq!(levels(&v), vec!["link h0-h1"]);
    assert_eq!(v.confirmed[0].retest, Some(0.3));
    // Each direction at its best, then the worst of the directions.
    let both = vec![m(0, 1, 9.9), m(1, 0, 0.2), m(0, 1, 0.1), m(1, 0, 0.4)];
    assert_eq!(
        judge_with(&first, &both, &cfg(), &hosts(4)).confirmed[0].retest,
        Some(0.4)
    );
}

#[test]
fn all_pairs_of_one_host_slow_blames_the_node() {
    // Traffic into rank 1 is slow from everyone (3 hosts).
    let first = matrix(3, 10.0, &[(0, 1, 0.1), (2, 1, 0.1)]);
    let retests = vec![m(0, 1, 0.1), m(1, 0, 10.0), m(1, 2, 10.0), m(2, 1, 0.1)];
    let v = judge_with(&first, &retests, &cfg(), &hosts(3));
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
    let v = judge_with(&first, &[m(2, 3, 9.5), m(3, 2, 10.0)], &cfg(), &hosts(4));
    assert!(v.pass);
    assert_eq!(v.cleared, vec![(2, 3)]);
}

#[test]
fn absolute_floor_and_no_retest() {
    let first = matrix(2, 10.0, &[]);
    let mut c = cfg();
    c.expect_gbps = Some(25.0);
    c.retest = false;
    let v = judge_with(&first, &[], &c, &hosts(2));
    assert!(!v.pass);
    // Two ranks: one pair, so no host has two links to blame; the link is named.
    assert_eq!(levels(&v), vec!["link h0-h1"]);
    assert_eq!(v.judged[0].bulk.bar, 25.0);
}

#[test]
fn uniform_matrix_passes() {
    let v = judge_with(&matrix(5, 10.0, &[]), &[], &cfg(), &hosts(5));
    assert!(v.pass && v.confirmed.is_empty() && v.cleared.is_empty());
}
