//! `meshrun verdict RUN.json` (a saved pairwise run judged again offline) and `--baseline
//! GOOD.json` (on the verdict and on a live pairwise run), end to end: a real 3-rank run writes
//! the file, the binary reads it back. Outcomes are forced, not left to this machine's noise: the
//! rule a run is re-judged under is one no loopback pair can pass (`--threshold 1`, every
//! direction below the median is suspect), and the slower baseline is the run's own file with
//! one direction's figure doubled, so every other ratio is exactly 1.

use std::path::{Path, PathBuf};

use e2e::*;

/// A folder of this test's own (tests run side by side).
fn dir(test: &str) -> PathBuf {
    fresh_dir(&format!("verdict-{test}"))
}

/// A pairwise run of `np` ranks at `size`, 20 iterations, with `extra` flags (its verdict is not
/// the subject).
fn pairwise_run(np: usize, size: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "pairwise",
        "-s",
        size,
        "-n",
        "20",
        "--threshold",
        VERDICT_NOT_THE_SUBJECT,
    ];
    args.extend_from_slice(extra);
    mpirun(np, &args, &[], limits::PAIRWISE_JOB)
}

/// A pairwise run of `np` ranks at `size`, saved as `path` (its verdict is not the subject).
fn saved_run_of(np: usize, path: &Path, size: &str) {
    pairwise_run(np, size, &["--json", path.to_str().expect("utf-8")]).expect_code(0);
}

/// A 3-rank run.
fn saved_run(path: &Path, size: &str) {
    saved_run_of(3, path, size);
}

/// `run` with the first direction's figures (first pass and retests) doubled: a baseline in which
/// that direction was twice as fast as now.
fn faster_baseline(run: &Path, out: &Path) -> (u64, u64) {
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run).expect("the run")).expect("JSON");
    let first = &doc["results"][0];
    let (src, dst) = (first["src"].as_u64().expect("src"), first["dst"].as_u64().expect("dst"));
    for list in ["results", "retests"] {
        for m in doc[list].as_array_mut().expect("a list") {
            if (m["src"].as_u64(), m["dst"].as_u64()) == (Some(src), Some(dst)) {
                let avg = m["bw"]["avg_gbps"].as_f64().expect("a figure");
                m["bw"]["avg_gbps"] = serde_json::json!(avg * 2.0);
            }
        }
    }
    std::fs::write(out, serde_json::to_vec(&doc).expect("JSON")).expect("write");
    (src, dst)
}

#[test]
fn a_saved_run_is_judged_again_under_another_rule() {
    let d = dir("a_saved_run_is_judged_again_under_another_rule");
    let run = d.join("run.json");
    saved_run(&run, "64K");
    let f = run.to_str().expect("utf-8");
    // Its own rule (the one it ran with): the same PASS, said to be offline.
    let r = meshrun(&["verdict", f], limits::PAIRWISE_JOB);
    r.expect_code(0);
    assert!(
        r.stdout.starts_with(&format!(
            "# meshrun verdict: {f} judged again offline (3 ranks, 6 directions measured)"
        )),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("# The run's own verdict, with its retests: PASS\n"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("# Sensitivity: a pair "), "{}", r.stdout);
    assert!(r.stdout.contains("# PASS: no slow pairs"), "{}", r.stdout);
    // A rule no loopback run passes: every direction below the median is suspect, and without
    // retests every suspect is confirmed, said so on its line.
    let r = meshrun(&["verdict", f, "--threshold", "1"], limits::PAIRWISE_JOB);
    r.expect_code(1);
    assert!(r.stdout.contains("# FAIL: "), "{}", r.stdout);
    assert!(r.stdout.contains("not retested"), "{}", r.stdout);
    // Against itself: every ratio 1, nothing slower.
    let r = meshrun(&["verdict", f, "--baseline", f], limits::PAIRWISE_JOB);
    r.expect_code(0);
    assert!(r.stdout.contains("# Baseline: "), "{}", r.stdout);
    assert!(
        r.stdout
            .contains(&format!("# BASELINE PASS: nothing slower than in {f}")),
        "{}",
        r.stdout
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_direction_slower_than_in_the_baseline_is_named() {
    let d = dir("a_direction_slower_than_in_the_baseline_is_named");
    let (run, good) = (d.join("run.json"), d.join("good.json"));
    // 4 ranks: 12 directions, enough to estimate the ratios' spread (fewer get an assumed one).
    saved_run_of(4, &run, "64K");
    let (src, dst) = faster_baseline(&run, &good);
    let (f, g) = (run.to_str().expect("utf-8"), good.to_str().expect("utf-8"));
    let r = meshrun(&["verdict", f, "--baseline", g], limits::PAIRWISE_JOB);
    r.expect_code(1);
    let (a, b) = (src.min(dst), src.max(dst));
    let slower: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("# SLOWER THAN BASELINE: "))
        .collect();
    assert_eq!(slower.len(), 1, "{}", r.stdout);
    assert!(
        slower[0].starts_with(&format!(
            "# SLOWER THAN BASELINE: RANK PAIR rank {a} (vm) <-> rank {b} ("
        )),
        "{}",
        r.stdout
    );
    assert!(slower[0].ends_with(": 50% of the baseline"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains(&format!("# BASELINE FAIL: 1 rank pair(s) slower than in {g}")),
        "{}",
        r.stdout
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn unusable_files_are_one_line_errors_before_any_traffic() {
    let d = dir("unusable_files_are_one_line_errors_before_any_traffic");
    let (run, other) = (d.join("run.json"), d.join("other.json"));
    saved_run(&run, "64K");
    saved_run(&other, "4K");
    let (f, o) = (run.to_str().expect("utf-8"), other.to_str().expect("utf-8"));
    let junk = d.join("junk.json");
    std::fs::write(&junk, "{\"tool\": \"meshrun\", \"test\": \"all_reduce\"}").expect("write");
    let j = junk.to_str().expect("utf-8");
    for (args, want) in [
        (
            vec!["verdict", j],
            format!("meshrun verdict: {j}: not a `meshrun pairwise --json` file"),
        ),
        (
            vec!["verdict", f, "--baseline", o],
            format!(
                "meshrun verdict: --baseline {o}: the baseline measured bw at 4096 bytes, this run bw at 65536 bytes"
            ),
        ),
        (
            vec!["verdict", "/nonexistent/run.json"],
            "meshrun verdict: /nonexistent/run.json: cannot read it: ".to_string(),
        ),
    ] {
        let r = meshrun(&args, limits::PAIRWISE_JOB);
        r.expect_code(2);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
        assert!(r.stderr.starts_with(&want), "want {want}\n{}", r.stderr);
        assert!(r.stdout.is_empty(), "{}", r.stdout);
    }
    // On a live run: refused before any traffic (no table printed), status 2.
    let r = mpirun(
        3,
        &["pairwise", "-s", "64K", "-n", "20", "--baseline", o],
        &[],
        limits::PAIRWISE_JOB,
    );
    r.expect_code(2);
    assert!(
        r.stderr.contains(&format!(
            "--baseline {o}: the baseline measured bw at 4096 bytes, this run bw at 65536 bytes"
        )),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("#bytes"), "{}", r.stdout);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_live_run_against_its_own_earlier_run_names_what_got_slower() {
    let d = dir("a_live_run_against_its_own_earlier_run_names_what_got_slower");
    let (run, good) = (d.join("run.json"), d.join("good.json"));
    saved_run(&run, "64K");
    // A baseline a million times as fast everywhere: the new run is far below it in every
    // direction, beyond any run-to-run spread, so the whole fabric is slower than it was.
    let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&run).expect("run")).expect("JSON");
    for list in ["results", "retests"] {
        for m in doc[list].as_array_mut().expect("a list") {
            let avg = m["bw"]["avg_gbps"].as_f64().expect("a figure");
            m["bw"]["avg_gbps"] = serde_json::json!(avg * 1e6);
        }
    }
    std::fs::write(&good, serde_json::to_vec(&doc).expect("JSON")).expect("write");
    let g = good.to_str().expect("utf-8");
    let r = pairwise_run(3, "64K", &["--baseline", g]);
    // Today's verdict passes; the baseline fails the run.
    r.expect_code(1);
    assert!(r.stdout.contains("# PASS: no slow pairs"), "{}", r.stdout);
    // The whole fabric is at a millionth of the baseline; which pairs the live run's own noise
    // also sets apart from the rest is this machine's business, so only the whole is asserted.
    assert!(
        r.stdout.contains(
            "# SLOWER THAN BASELINE: the fabric as a whole: its directions run at a median 0% of the baseline"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("# BASELINE FAIL: the fabric as a whole and "),
        "{}",
        r.stdout
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `--json -`: the report goes on stdout after the text one, between marker lines, so a
/// launcher's log (kubectl logs, a Slurm output file) carries it out of the pods; `meshrun
/// verdict LOG` reads it back from that log, as Open MPI's --tag-output prints it too. The same
/// for a collective's `-J -`.
#[test]
fn a_json_report_on_stdout_travels_in_the_log_and_is_read_back() {
    let d = dir("a_json_report_on_stdout_travels_in_the_log_and_is_read_back");
    let r = pairwise_run(3, "64K", &["--json", "-"]);
    r.expect_code(0);
    let begin = "# ---- meshrun JSON report (--json -): from the next line to the END line ----\n";
    let at = r
        .stdout
        .find(begin)
        .unwrap_or_else(|| panic!("no JSON block:\n{}", r.stdout));
    assert!(
        r.stdout[..at].contains("# PASS: no slow pairs"),
        "the text report comes first:\n{}",
        r.stdout
    );
    assert!(
        r.stdout.ends_with("# ---- END meshrun JSON report ----\n"),
        "{}",
        r.stdout
    );
    assert!(!Path::new("-").exists(), "no file named `-` written");
    // The log as a launcher keeps it, with an ssh warning before and Open MPI's tags on every line.
    let tagged: String = r.stdout.lines().map(|l| format!("[1,0]<stdout>:{l}\n")).collect();
    let log = d.join("launcher.log");
    std::fs::write(
        &log,
        format!("Warning: Permanently added 'w-0' (ED25519) to the list of known hosts.\n{tagged}"),
    )
    .expect("log");
    let r = meshrun(&["verdict", log.to_str().expect("utf-8")], limits::PAIRWISE_JOB);
    r.expect_code(0);
    assert!(r.stdout.contains("(3 ranks, 6 directions measured)"), "{}", r.stdout);
    // --csv, --heatmap and --html cannot share stdout with the text report.
    let r = mpirun(2, &["pairwise", "-n", "5", "--csv", "-"], &[], limits::PAIRWISE_JOB);
    r.expect_code(2);
    assert!(
        r.stderr.contains("--csv -: only --json writes to stdout"),
        "{}",
        r.all()
    );
    let r = mpirun(2, &["pairwise", "-n", "5", "--html", "-"], &[], limits::PAIRWISE_JOB);
    r.expect_code(2);
    assert!(
        r.stderr.contains("--html -: only --json writes to stdout"),
        "{}",
        r.all()
    );
    // A collective's nccl-tests JSON (-J -) the same way.
    let r = mpirun(
        2,
        &["all_reduce", "-b", "8", "-e", "1K", "-f", "4", "-n", "2", "-J", "-"],
        &[],
        limits::PAIRWISE_JOB,
    );
    r.expect_code(0);
    let json = r
        .stdout
        .split_once(begin)
        .map(|(_, j)| j)
        .unwrap_or_else(|| panic!("{}", r.stdout));
    let json = json
        .trim_end()
        .strip_suffix("# ---- END meshrun JSON report ----")
        .expect("END line");
    let doc: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}:\n{json}"));
    assert!(doc.is_object(), "{doc}");
    let _ = std::fs::remove_dir_all(&d);
}
