//! The schedule's unit tests: circle and listed rounds, quick patterns, rails, shift rounds and
//! retest groups.

use super::*;

#[test]
fn shifts_measure_every_direction_once_and_never_both_of_a_pair_at_once() {
    for n in 2usize..=130 {
        let sh = Shifts::new(n);
        // n - 1 slots but for powers of two (and 2 and 4, no n - 1 such slots for 4): n.
        let want = if n % 2 == 0 && n.is_power_of_two() { n } else { n - 1 };
        assert_eq!(sh.len(), want, "n = {n}");
        let mut seen = std::collections::HashSet::new();
        for s in 0..sh.len() {
            let mut dirs = Vec::new();
            let mut receivers = std::collections::HashSet::new();
            for r in 0..n {
                if let Some(to) = sh.to(s, r) {
                    assert_ne!(to, r);
                    assert_eq!(sh.from(s, to), Some(r), "n {n} slot {s}: {r} -> {to}");
                    assert!(receivers.insert(to), "n {n} slot {s}: {to} receives twice");
                    dirs.push((r, to));
                }
                if let Some(from) = sh.from(s, r) {
                    assert_eq!(sh.to(s, from), Some(r));
                }
            }
            assert_eq!(dirs.len(), sh.directions_in(s));
            for &(a, b) in &dirs {
                assert!(!dirs.contains(&(b, a)), "n {n} slot {s}: {a} <-> {b} both ways");
                assert!(seen.insert((a, b)), "n {n}: {a} -> {b} twice");
            }
        }
        assert_eq!(seen.len(), n * (n - 1), "n = {n}");
        assert_eq!(sh.to(0, n), None);
        assert_eq!(sh.from(0, n), None);
    }
    // Six ranks: d = 2, k = 5, X the even ranks. Slot 1 (B, at shift 5's opposite, 1): evens
    // to i - 5 = i + 1, odds to i + 3; shifts 2 and 4; slot 3 (C, at 3's place): evens to
    // i + 3, odds to i - 5; shift 5 (A).
    let six = Shifts::new(6);
    assert_eq!(
        (0..5).map(|s| six.to(s, 0)).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(3), Some(4), Some(5)]
    );
    assert_eq!(
        (0..5).map(|s| six.to(s, 1)).collect::<Vec<_>>(),
        [Some(4), Some(3), Some(2), Some(5), Some(0)]
    );
    // Eight: a power of two keeps the halves: shifts 1, 2, 3, the halves of 4, then 5, 6, 7.
    let eight = Shifts::new(8);
    assert_eq!(
        (0..8).map(|s| eight.to(s, 0)).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(3), Some(4), None, Some(5), Some(6), Some(7)]
    );
    assert_eq!(eight.to(3, 5), None);
    assert_eq!(eight.to(4, 5), Some(1));
    assert_eq!(eight.to(5, 5), Some(2));
    assert!(Shifts::new(1).is_empty());
}

#[test]
fn host_disjoint_groups_never_share_a_host() {
    // Six hosts of one rank: the suspect and two references that share no host run at once.
    let one = [0, 1, 2, 3, 4, 5];
    assert_eq!(
        host_disjoint_groups(&[(1, 4), (0, 2), (3, 5)], &one),
        vec![vec![(1, 4), (0, 2), (3, 5)]]
    );
    // A reference sharing host 1 with the suspect waits for the next group.
    assert_eq!(
        host_disjoint_groups(&[(1, 4), (1, 2), (0, 3), (2, 5)], &one),
        vec![vec![(1, 4), (0, 3), (2, 5)], vec![(1, 2)]]
    );
    // Two ranks per host: ranks 0,1 on host 0, 2,3 on host 1, 4,5 on host 2. Pairs (0,2) and
    // (1,3) are rank-disjoint but share both hosts, so they never run together; (4,5), within
    // host 2, runs beside the first.
    let two = [0, 0, 1, 1, 2, 2];
    assert_eq!(
        host_disjoint_groups(&[(0, 2), (1, 3), (4, 5)], &two),
        vec![vec![(0, 2), (4, 5)], vec![(1, 3)]]
    );
    assert!(host_disjoint_groups(&[], &one).is_empty());
}

fn check_disjoint(rounds: &[Vec<Pair>]) {
    for r in rounds {
        let mut ranks: Vec<usize> = r.iter().flat_map(|&(a, b)| [a, b]).collect();
        let len = ranks.len();
        ranks.sort_unstable();
        ranks.dedup();
        assert_eq!(ranks.len(), len, "a rank twice in one round: {r:?}");
    }
}

#[test]
fn quick_patterns_give_each_rank_its_partners_in_few_rounds() {
    for n in [2, 3, 4, 7, 8, 64, 1000] {
        let ring = Pattern::Ring.rounds(n);
        check_disjoint(&ring);
        assert!(ring.len() <= 3, "{n}: {}", ring.len());
        let pairs: usize = ring.iter().map(Vec::len).sum();
        assert_eq!(pairs, if n == 2 { 1 } else { n }, "ring of {n}");
        let shift = Pattern::Shift(3).rounds(n);
        check_disjoint(&shift);
        assert!(shift.len() <= 11, "{n}: {}", shift.len());
        let random = Pattern::Random(4).rounds(n);
        check_disjoint(&random);
        assert!(random.len() <= 4);
        assert_eq!(random, Pattern::Random(4).rounds(n), "the same on every rank");
        for r in &random {
            assert!(r.len() <= n / 2);
        }
    }
    // Shift 1 is the ring; shift 2 adds i+2.
    let s2: usize = Pattern::Shift(2).rounds(10).iter().map(Vec::len).sum();
    assert_eq!(s2, 20);
    assert_eq!(Pattern::All.rounds(5), circle_rounds(5));
}

#[test]
fn patterns_parse() {
    assert_eq!(Pattern::parse("ring"), Ok(Pattern::Ring));
    assert_eq!(Pattern::parse("shift:4"), Ok(Pattern::Shift(4)));
    assert_eq!(Pattern::parse("random:16"), Ok(Pattern::Random(16)));
    assert_eq!(Pattern::parse("all"), Ok(Pattern::All));
    for bad in ["shift", "shift:0", "random:x", "star"] {
        assert!(Pattern::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn every_pair_once_and_no_rank_twice_per_round() {
    for n in 2..=257usize {
        let rounds = circle_rounds(n);
        assert_eq!(rounds.len(), if n % 2 == 0 { n - 1 } else { n }, "n={n}");
        let mut seen = vec![false; n * n];
        for round in &rounds {
            assert_eq!(round.len(), n / 2, "n={n}");
            let mut busy = vec![false; n];
            for &(a, b) in round {
                assert!(a < b && b < n);
                assert!(!busy[a] && !busy[b], "n={n}: rank in two pairs of a round");
                busy[a] = true;
                busy[b] = true;
                assert!(!seen[a * n + b], "n={n}: pair ({a},{b}) twice");
                seen[a * n + b] = true;
            }
        }
        let count = seen.iter().filter(|&&s| s).count();
        assert_eq!(count, n * (n - 1) / 2, "n={n}");
    }
}

#[test]
fn rails_pair_the_same_local_rank_across_nodes() {
    // 3 nodes x 2 ranks, rank order node by node; a fourth node with one rank.
    let node_of = [0, 0, 1, 1, 2, 2, 3];
    assert_eq!(local_rank_of(&node_of), vec![0, 1, 0, 1, 0, 1, 0]);
    assert_eq!(rail_members(&node_of), vec![vec![0, 2, 4, 6], vec![1, 3, 5]]);
    let rounds = rail_rounds(&node_of, Pattern::All, false);
    check_disjoint(&rounds);
    let mut pairs: Vec<Pair> = rounds.concat();
    pairs.sort_unstable();
    assert_eq!(
        pairs,
        vec![(0, 2), (0, 4), (0, 6), (1, 3), (1, 5), (2, 4), (2, 6), (3, 5), (4, 6)]
    );
    // Rails run side by side: as many rounds as the largest rail needs.
    assert_eq!(rounds.len(), 3);
    let with_intra = rail_rounds(&node_of, Pattern::All, true);
    check_disjoint(&with_intra);
    assert_eq!(with_intra.len(), 4);
    assert_eq!(with_intra[3], vec![(0, 1), (2, 3), (4, 5)]);
    // Ranks placed round-robin (node of rank = rank mod 2).
    let rr = [0, 1, 0, 1];
    assert_eq!(rail_rounds(&rr, Pattern::All, false).concat(), vec![(0, 1), (2, 3)]);
    // A quick pattern applies within each rail.
    let big: Vec<usize> = (0..64).map(|r| r / 8).collect();
    let ring = rail_rounds(&big, Pattern::Ring, false);
    check_disjoint(&ring);
    assert_eq!(ring.concat().len(), 8 * 8);
    assert!(ring.len() <= 3);
}

#[test]
fn the_computed_circle_is_the_listed_one() {
    for n in 1..=65usize {
        let listed = circle_rounds(n);
        let s = Schedule::circle(n, Keep::All);
        assert_eq!(s.len(), listed.len(), "n={n}");
        for (k, round) in listed.iter().enumerate() {
            assert_eq!(s.pairs_in(k), round.len());
            for x in 0..n {
                assert_eq!(s.peer(k, x), peer_in(round, x), "n={n} round {k} rank {x}");
            }
        }
        let mut a: Vec<Pair> = s.pairs().collect();
        let mut b: Vec<Pair> = listed.concat();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
    }
    // Filters drop pairs, and rounds left empty.
    let node_of: Vec<usize> = (0..8).map(|r| r / 4).collect();
    let within = Schedule::circle(8, Keep::Within(node_of.clone()));
    let want = filter_rounds(circle_rounds(8), |(a, b)| node_of[a] == node_of[b]);
    assert_eq!(within.len(), want.len());
    assert_eq!(within.pairs().count(), 12);
    let only = Schedule::circle(8, Keep::Only((2, 5)));
    assert_eq!((only.len(), only.pairs_in(0)), (1, 1));
    assert_eq!((only.peer(0, 5), only.peer(0, 1)), (Some(2), None));
    // Listed rounds follow the circle's.
    let mut s = Schedule::circle(4, Keep::All);
    s.extend(vec![vec![(0, 1)], vec![]]);
    assert_eq!(s.len(), 4);
    assert_eq!(s.peer(3, 1), Some(0));
    assert!(Schedule::circle(1, Keep::All).is_empty());
}

#[test]
fn tiny_and_filtered() {
    assert!(circle_rounds(1).is_empty());
    assert_eq!(circle_rounds(2), vec![vec![(0, 1)]]);
    let only = filter_rounds(circle_rounds(4), |p| p == (1, 3));
    assert_eq!(only, vec![vec![(1, 3)]]);
    assert_eq!(peer_in(&[(0, 3), (1, 2)], 2), Some(1));
    assert_eq!(peer_in(&[(0, 3)], 2), None);
}
