//! Two passes settle few suspects retested at once and alike; anything else runs the
//! confirmation passes.

use super::*;

/// Two passes settle a slow link where the retests ran at once on a quiet first pass and held,
/// at most FEW_SUSPECTS pairs were suspect and each direction of the slow pairs read alike in
/// both passes; anything else (more suspects, passes apart, one pair at a time, retests at once
/// that varied, a queue-pair path to retest) still runs the confirmation passes.
#[test]
fn two_passes_settle_few_suspects_retested_at_once_and_alike() {
    let (robust, h, first, plan) = one_slow_pair(8.0);
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
