//! How many messages a retest sends: cut to about a tenth of a second a direction where the
//! first pass's count takes longer, kept otherwise.

use super::*;

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
