//! Every input the fuzzers kept (`fuzz/corpus/<target>/`, minimised) and every crash kept as a
//! regression (`fuzz/regressions/<target>/`) runs through the same checks as the fuzz targets,
//! in plain `cargo test` (no libFuzzer needed), so a parser change that breaks one fails here.

#[path = "../../fuzz/checks.rs"]
mod checks;
#[path = "../../fuzz/rank_checks.rs"]
mod rank_checks;

use std::path::Path;

/// What a fuzz target checks of one input.
type Check = fn(&[u8]);

fn replay(target: &str, check: Check) -> usize {
    let root = e2e::root().join("fuzz");
    let mut n = 0;
    for dir in [root.join("corpus").join(target), root.join("regressions").join(target)] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.file_name().is_some_and(|f| f == ".keep") || !p.is_file() {
                continue;
            }
            let data = std::fs::read(&p).unwrap_or_else(|err| panic!("{}: {err}", p.display()));
            let at = p.display().to_string();
            if std::panic::catch_unwind(|| check(&data)).is_err() {
                panic!("fuzz input {at} fails its check");
            }
            n += 1;
        }
    }
    n
}

#[test]
fn every_kept_fuzz_input_still_passes() {
    let targets: [(&str, Check); 6] = [
        ("hostfile", checks::hostfile),
        ("flags", |d| {
            checks::flags(d);
            rank_checks::fault_spec(d);
        }),
        ("topology", checks::topology),
        ("expect", checks::expect),
        ("compare", checks::compare),
        ("wire", rank_checks::wire),
    ];
    for (t, check) in targets {
        let n = replay(t, check);
        assert!(
            n >= 5,
            "fuzz/corpus/{t} holds {n} inputs; it should hold the kept corpus"
        );
        eprintln!("fuzz corpus {t}: {n} inputs replayed");
    }
    assert!(Path::new(&e2e::root().join("fuzz/regressions")).is_dir());
}
