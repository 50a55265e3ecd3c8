//! The verdict's accuracy target, checked at the CI size on synthetic fabrics (the full table:
//! `bench/verdict-accuracy`): at least 99% of faults named alone where the drop is at least
//! max(10%, 4 spreads), at most 1% of clean fabrics with any finding. The noise is seeded, so
//! the outcome is the same on every machine and every run.

#[allow(dead_code)]
#[path = "../examples/verdict_accuracy.rs"]
mod sim;

#[test]
fn the_verdict_meets_its_accuracy_target_on_synthetic_fabrics() {
    let missed = sim::run(true, 10, 1);
    assert!(missed.is_empty(), "target missed:\n{}", missed.join("\n"));
}
