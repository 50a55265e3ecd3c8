//! Collectives end to end with real mpirun: every collective at 2, 3 and 4 ranks, every type and
//! op, both placements, verified bit for bit; fault injection; bad input.

use e2e::*;

/// The data rows of this file's tables: ours, and a baseline's (out of place only).
const ROWS: &[usize] = &[NCCL_ROW, BASELINE_ROW];

/// `name` at `n` ranks passed, and every one of its `want_rows` rows was verified.
fn check_all_verified(name: &str, n: usize, r: &Run, want_rows: usize) {
    expect_verified(&format!("{name} at {n} ranks"), r, want_rows, ROWS);
}

fn every_type_and_op(name: &str, reduces: bool) {
    for n in [2, 3, 4] {
        // 64, 4096 and 262144 bytes: uneven chunks at 3 ranks, several elements per rank; the
        // all_reduce's small-message path (recursive doubling, up to 32 KiB) and its ring.
        let r = mpirun(
            n,
            &[
                name,
                "-b",
                "64",
                "-e",
                "256K",
                "-f",
                "64",
                "-d",
                "all",
                "-o",
                "all",
                "-n",
                "2",
                "-w",
                "1",
                "-r",
                &(n - 1).to_string(),
            ],
            &[],
            limits::LONG_JOB,
        );
        let ops = if reduces { 5 } else { 1 };
        check_all_verified(name, n, &r, 10 * ops * 3);
    }
}

#[test]
fn all_reduce_every_type_and_op() {
    every_type_and_op("all_reduce", true);
}
#[test]
fn all_gather_every_type() {
    every_type_and_op("all_gather", false);
}
#[test]
fn reduce_scatter_every_type_and_op() {
    every_type_and_op("reduce_scatter", true);
}
#[test]
fn broadcast_every_type() {
    every_type_and_op("broadcast", false);
}
#[test]
fn reduce_every_type_and_op() {
    every_type_and_op("reduce", true);
}
#[test]
fn alltoall_every_type() {
    every_type_and_op("alltoall", false);
}
#[test]
fn sendrecv_every_type() {
    every_type_and_op("sendrecv", false);
}

/// Sizes above the 1 MiB slice exercise the pipelined steps; nccl-tests' program names work too.
#[test]
fn large_sizes_in_slices_and_perf_names() {
    for name in [
        "all_reduce_perf",
        "broadcast_perf",
        "reduce_perf",
        "reduce_scatter_perf",
        "all_gather_perf",
    ] {
        let r = mpirun(
            3,
            &[name, "-b", "3M", "-e", "3M", "-d", "float", "-n", "1", "-w", "0"],
            &[],
            limits::LONG_JOB,
        );
        check_all_verified(name, 3, &r, 1);
    }
}

/// The host ring reduces slice k while slice k+1 moves (128 KiB slices, two scratch halves, for
/// chunks of 4 slices or more): at 2, 3 and 4 ranks, for elements of 1, 2 and 8 bytes, a size
/// whose chunks are several slices and a ragged last one (uneven across ranks at 3), and one whose
/// chunks are sent whole, where each step's send waits for the last reduction.
#[test]
fn ring_pipeline_in_slices() {
    for n in [2, 3, 4] {
        for name in ["all_reduce", "reduce_scatter"] {
            for dtype in ["int8", "half", "double"] {
                let args = [
                    name, "-b", "294920", "-e", "2359360", "-f", "8", "-d", dtype, "-n", "2", "-w", "0",
                ];
                let r = mpirun(n, &args, &[], limits::LONG_JOB);
                check_all_verified(name, n, &r, 2);
            }
        }
    }
}

/// Halving-doubling (4 ranks, 32 KiB .. 2 MiB): element counts that do not halve evenly, every
/// type width, sums, means and maxima, out of place and in place, verified bit for bit; just
/// above 2 MiB the ring takes over. 2097144 bytes: halves of 1 MiB and 512 KiB go in 128 KiB
/// slices (the last one ragged), each reduced while the next moves.
#[test]
fn halving_doubling_at_four_ranks() {
    for (dtype, op) in [("int8", "sum"), ("half", "avg"), ("float", "max"), ("double", "sum")] {
        for (b, e, rows) in [("32776", "2100000", 4), ("2097144", "2097144", 1)] {
            let args = [
                "all_reduce",
                "-b",
                b,
                "-e",
                e,
                "-f",
                "4",
                "-d",
                dtype,
                "-o",
                op,
                "-n",
                "2",
                "-w",
                "0",
            ];
            let r = mpirun(4, &args, &[], limits::LONG_JOB);
            check_all_verified("all_reduce", 4, &r, rows);
        }
    }
}

#[test]
fn expected_bus_bandwidth_gates_the_exit_status() {
    let dir = fresh_dir("busbw");
    let json = dir.join("ar.json");
    let json_s = json.to_str().expect("utf-8");
    let base = [
        "all_reduce",
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "8",
        "-n",
        "2",
        "-w",
        "0",
        "--force",
        "-J",
        json_s,
    ];
    /// `mpirun -np 2 meshrun ARGS` with `env`, which must end with `code`.
    fn all_reduce(args: &[&str], env: &[(&str, &str)], code: i32) -> Run {
        let r = mpirun(2, args, env, limits::LONG_JOB);
        r.expect_code(code);
        r
    }
    let low_bar = ("NCCL_TESTS_MIN_BW", "0.000001");
    let okay = || -> String {
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("parse");
        doc["average_bus_bandwidth"]["okay"].as_str().unwrap_or("?").to_string()
    };
    // No bar: nccl-tests' footer, unchanged, and "unchecked".
    let r = all_reduce(&base, &[], 0);
    assert!(!r.stdout.contains("Expected busbw"), "{}", r.stdout);
    assert_eq!(okay(), "unchecked");
    // A bar no TCP loopback reaches: FAILED, exit 1.
    let args: Vec<&str> = base.iter().copied().chain(["--expect-busbw", "100000"]).collect();
    let r = all_reduce(&args, &[], 1);
    let avg_line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("# Avg bus bandwidth"))
        .unwrap_or_default();
    assert!(avg_line.ends_with(" FAILED"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("# Expected busbw       : 100000 GB/s from --expect-busbw; the average fails below 90000"),
        "{}",
        r.stdout
    );
    assert_eq!(okay(), "false");
    // NCCL_TESTS_MIN_BW, low: OK, exit 0; the flag wins over it.
    let r = all_reduce(&base, &[low_bar], 0);
    assert!(
        r.stdout
            .contains(" OK\n# Expected busbw       : 1e-06 GB/s from NCCL_TESTS_MIN_BW"),
        "{}",
        r.stdout
    );
    assert_eq!(okay(), "true");
    all_reduce(&args, &[low_bar], 1);
    // Not a number: a one-line error before any rank starts work.
    let r = all_reduce(&base, &[("NCCL_TESTS_MIN_BW", "fast")], 2);
    assert!(
        r.stderr
            .contains("NCCL_TESTS_MIN_BW=fast: `fast` is not a number of GB/s"),
        "{}",
        r.all()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn keys(v: &serde_json::Value) -> std::collections::BTreeSet<String> {
    v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}

fn fixture_keys(fixture: &serde_json::Value, what: &str) -> std::collections::BTreeSet<String> {
    fixture[what]
        .as_array()
        .unwrap_or_else(|| panic!("fixture has no {what}"))
        .iter()
        .filter_map(|k| k.as_str().map(String::from))
        .collect()
}

/// `-I 1 -K 2`: nccl-tests' per-iteration columns and JSON objects; the `-J` file's keys are
/// exactly those nccl-tests' version-3 writer emits (the fixture, read from its source) plus
/// meshrun's version; the environment is recorded without secrets.
#[test]
fn json_version_3_and_per_iteration_timing() {
    let dir = fresh_dir("jv3");
    let json = dir.join("ar.json");
    let prom = dir.join("ar.prom");
    let args = [
        "all_reduce",
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "8",
        "-n",
        "6",
        "-w",
        "1",
        "-I",
        "1",
        "-K",
        "2",
        "-J",
        json.to_str().expect("utf-8"),
        "--metrics",
        prom.to_str().expect("utf-8"),
    ];
    let r = mpirun(
        2,
        &args,
        &[("MESHRUN_TEST_API_TOKEN", "do-not-record")],
        limits::LONG_JOB,
    );
    r.expect_code(0);
    // --metrics: Prometheus' own check passes, a busbw sample per row and placement (5 x 2).
    let check = promtool_check(&prom);
    assert_eq!(check.code, Some(0), "promtool: {}", check.all());
    let text = std::fs::read_to_string(&prom).expect("metrics");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("meshrun_coll_busbw_bytes_per_second{collective=\"all_reduce\""))
            .count(),
        10,
        "{text}"
    );
    assert!(
        r.stdout.contains("# Per-Iteration Report: wall-clock timing on every rank; i_* uses max over ranks; summary skips first 2 iterations \n"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("out-of-place (+ per-iteration)"), "{}", r.stdout);
    let header = r.stdout.lines().find(|l| l.contains("i_min")).expect("column header");
    assert_eq!(
        header.split_whitespace().filter(|w| w.starts_with("i_")).count(),
        8,
        "{header}"
    );
    let rs: Vec<Vec<&str>> = r
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#') && l.split_whitespace().next().is_some_and(|w| w.parse::<u64>().is_ok()))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rs.len(), 5, "{}", r.stdout);
    for row in &rs {
        // 13 columns and 4 per-iteration columns per placement; min <= p99 <= max.
        assert_eq!(row.len(), 21, "{row:?}");
        assert_eq!((row[8], row[16]), ("0", "0"), "{row:?}");
        let f = |i: usize| -> f64 { row[i].parse().unwrap_or_else(|_| panic!("{row:?}")) };
        assert!(f(9) <= f(11) && f(11) <= f(10), "{row:?}");
    }

    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("parse");
    let fixture_path = root().join("analysis/tests/data/nccl-tests-json-v3-keys.json");
    let fixture: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture_path).expect("fixture")).expect("fixture parses");
    let mut top = fixture_keys(&fixture, "top");
    top.insert("meshrun_version".into());
    assert_eq!(keys(&doc), top);
    assert_eq!(doc["version"], 3);
    assert_eq!(keys(&doc["config"]), fixture_keys(&fixture, "config"));
    assert_eq!(doc["config"]["per_iter_timing"], "true");
    assert_eq!(doc["config"]["per_iter_skip"], 2);
    for d in doc["config"]["devices"].as_array().expect("devices") {
        assert_eq!(keys(d), fixture_keys(&fixture, "device"));
    }
    assert_eq!(keys(&doc["out_of_bounds"]), fixture_keys(&fixture, "out_of_bounds"));
    assert_eq!(
        keys(&doc["average_bus_bandwidth"]),
        fixture_keys(&fixture, "average_bus_bandwidth")
    );
    let results = doc["results"].as_array().expect("results");
    assert_eq!(results.len(), 5);
    for res in results {
        assert_eq!(keys(res), fixture_keys(&fixture, "result"));
        for place in ["out_of_place", "in_place"] {
            assert_eq!(keys(&res[place]), fixture_keys(&fixture, "placement"));
            let it = &res[format!("{place}_per_iter")];
            assert_eq!(keys(it), fixture_keys(&fixture, "per_iter"));
            assert_eq!(it["skipped_iterations"], 2);
            let times: Vec<f64> = serde_json::from_value(it["times_us"].clone()).expect("times");
            let per_rank: Vec<Vec<f64>> =
                serde_json::from_value(it["per_process_max_times_us"].clone()).expect("per rank");
            assert_eq!((times.len(), per_rank.len()), (6, 2));
            // Each iteration's time is the slower rank's; the statistics skip the first two.
            for (i, t) in times.iter().enumerate() {
                assert_eq!(*t, per_rank[0][i].max(per_rank[1][i]));
            }
            let mut kept = times[2..].to_vec();
            kept.sort_by(f64::total_cmp);
            assert_eq!(it["min_us"].as_f64(), Some(kept[0]));
            assert_eq!(it["max_us"].as_f64(), Some(kept[3]));
            assert_eq!(it["p50_us"].as_f64(), Some(kept[2]));
        }
    }
    let env: Vec<String> = serde_json::from_value(doc["env"].clone()).expect("env");
    assert!(env.iter().any(|e| e == "OMPI_MCA_pml=ob1"), "{env:?}");
    assert!(!env.iter().any(|e| e.contains("do-not-record")), "{env:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corrupted_element_is_counted_and_fails_the_run() {
    let r = mpirun(
        3,
        &["all_reduce", "-b", "1K", "-e", "1K", "-n", "1"],
        &[("MESHRUN_FAULT", "corrupt:rank=1")],
        limits::LONG_JOB,
    );
    assert_ne!(r.code, Some(0), "{}", r.all());
    let rs = nccl_rows(&r.stdout, ROWS);
    assert_eq!(rs.len(), 1);
    // Element 0 of rank 1's input is wrong: element 0 of the result is wrong on all 3 ranks.
    assert_eq!(rs[0][8], "3", "{:?}", rs[0]);
    assert_eq!(rs[0][12], "3", "{:?}", rs[0]);
    assert!(r.stdout.contains("# Out of bounds values : 6 FAILED"), "{}", r.stdout);
}

#[test]
fn baseline_mpi_rows_and_json() {
    let dir = fresh_dir("coll-test");
    let json = dir.join("ar.json");
    let r = mpirun(
        2,
        &[
            "all_reduce",
            "-b",
            "8",
            "-e",
            "64K",
            "-f",
            "4",
            "-n",
            "2",
            "--baseline",
            "mpi",
            "-J",
            json.to_str().unwrap(),
        ],
        &[],
        limits::LONG_JOB,
    );
    r.expect_code(0);
    let rs = nccl_rows(&r.stdout, ROWS);
    let (ours, mpi): (Vec<_>, Vec<_>) = rs.iter().partition(|f| f.len() == 13);
    // 8, 32, ..., 32768: 7 sizes.
    assert_eq!(ours.len(), 7);
    assert_eq!(mpi.len(), 7, "{}", r.stdout);
    assert!(mpi.iter().all(|f| f[8] == "0"));
    assert!(
        r.stdout.contains("# Baseline: the MPI library's own all_reduce"),
        "{}",
        r.stdout
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["results"].as_array().unwrap().len(), 7);
    assert_eq!(doc["results"][0]["size"], 8);
    assert_eq!(doc["results"][0]["redop"], "sum");
    assert!(doc["results"][0]["out_of_place"]["bus_bw"].is_number());
    assert!(doc["results"][0]["in_place"]["nwrong"].is_number());
    assert_eq!(doc["out_of_bounds"]["okay"], "true");
    assert!(doc["average_bus_bandwidth"]["bandwidth"].is_number());
    assert_eq!(doc["config"]["step_factor"], 4);
    assert_eq!(doc["config"]["devices"].as_array().unwrap().len(), 2);
    assert_eq!(doc["baseline"]["results"].as_array().unwrap().len(), 7);
    // The average printed is the mean of the printed busbw values (both placements).
    let busbw: Vec<f64> = ours
        .iter()
        .flat_map(|f| [f[7].parse::<f64>().unwrap(), f[11].parse().unwrap()])
        .collect();
    let mean = busbw.iter().sum::<f64>() / busbw.len() as f64;
    let reported: f64 = doc["average_bus_bandwidth"]["bandwidth"].as_f64().unwrap();
    assert!(
        (mean - reported).abs() <= 0.005 + reported * 0.01,
        "{mean} vs {reported}"
    );
    // No clobbering without --force.
    let r = mpirun(
        2,
        &["all_reduce", "-b", "8", "-e", "8", "-J", json.to_str().unwrap()],
        &[],
        limits::LONG_JOB,
    );
    r.expect_code(2);
    assert!(r.stderr.contains("already exists"), "{}", r.stderr);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_exits_2_with_one_line() {
    for (args, want) in [
        (
            vec!["all_reduce", "-b", "1024", "-e", "8"],
            "-b 1024 is larger than -e 8",
        ),
        (vec!["all_reduce", "-d", "float128"], "unknown data type `float128`"),
        (vec!["all_reduce", "-o", "xor"], "unknown reduction `xor`"),
        (
            vec!["all_reduce", "-b", "8", "-e", "64", "-f", "1"],
            "-f 1 would never grow the size",
        ),
        (
            vec!["all_reduce", "-b", "6", "-e", "64"],
            "-b 6 is not a positive multiple of the 4-byte float element",
        ),
        (
            vec!["all_reduce", "-b", "8", "-e", "64", "-d", "double", "-i", "4"],
            "-i 4 is not a multiple of the 8-byte double element",
        ),
        (vec!["all_reduce", "-c", "2"], "2 is not in 0..=1"),
    ] {
        let r = meshrun(&args, limits::LONG_JOB);
        r.expect_code(2);
        assert!(r.stderr.contains(want), "{args:?}: want `{want}` in {}", r.stderr);
        assert!(!r.stderr.contains("panicked"));
    }
    let r = mpirun(
        2,
        &["broadcast", "-b", "8", "-e", "8", "-r", "5"],
        &[],
        limits::LONG_JOB,
    );
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains("-r 5: this job has ranks 0 to 1"), "{}", r.stderr);
}

/// `meshrun compare` on two real runs of this machine (text and -J), a bar nothing meets, and a
/// file of no known format.
#[test]
fn compare_two_runs_of_this_machine() {
    let dir = fresh_dir("compare");
    let json = dir.join("a.json");
    let args = [
        "all_reduce",
        "-b",
        "8",
        "-e",
        "1M",
        "-f",
        "4",
        "-n",
        "5",
        "-J",
        json.to_str().expect("utf-8"),
    ];
    mpirun(2, &args, &[], limits::LONG_JOB).expect_code(0);
    let r = mpirun(
        2,
        &["all_reduce", "-b", "32", "-e", "4M", "-f", "4", "-n", "5"],
        &[],
        limits::LONG_JOB,
    );
    r.expect_code(0);
    let text = dir.join("b.txt");
    std::fs::write(&text, &r.stdout).expect("write");
    let (j, t) = (json.to_str().expect("utf-8"), text.to_str().expect("utf-8"));
    let c = meshrun(&["compare", j, t, "--from", "64K"], limits::LONG_JOB);
    c.expect_code(0);
    assert!(
        c.stdout
            .contains(&format!("# [1] {j}: nccl-tests JSON, 2 ranks; all_reduce")),
        "{}",
        c.stdout
    );
    assert!(
        c.stdout
            .contains(&format!("# [2] {t}: nccl-tests text, 2 ranks; (unnamed collective 1)")),
        "{}",
        c.stdout
    );
    assert!(c.stdout.contains("# only in [1], not in [2]: 8"), "{}", c.stdout);
    assert!(c.stdout.contains("# only in [2]: 2097152"), "{}", c.stdout);
    // 128 KiB and 512 KiB are in both, from 64 KiB up.
    assert!(
        c.stdout
            .contains("# summary [2]/[1] over sizes >= 65536: geometric mean "),
        "{}",
        c.stdout
    );
    assert!(c.stdout.contains("(2 sizes)"), "{}", c.stdout);
    let c = meshrun(
        &["compare", j, t, "--min-ratio", "1000", "--json", "-"],
        limits::LONG_JOB,
    );
    c.expect_code(1);
    assert!(
        c.stdout.contains("# FAILED: below --min-ratio 1000: [2] "),
        "{}",
        c.stdout
    );
    // --json -: the same comparison as JSON after the table, between the marker lines.
    let doc: serde_json::Value = serde_json::from_str(
        &analysis::export::embedded_json(&c.stdout).unwrap_or_else(|| panic!("no JSON block: {}", c.stdout)),
    )
    .expect("JSON");
    assert_eq!(
        (doc["test"].as_str(), doc["schema_version"].as_u64()),
        (Some("compare"), Some(1))
    );
    assert_eq!(doc["files"].as_array().map(Vec::len), Some(2));
    assert_eq!(doc["files"][0]["series"][0]["name"], "all_reduce");
    assert!(
        doc["files"][1]["series"][0]["points"]["2097152"].as_f64().is_some(),
        "{doc}"
    );
    let below = doc["below_min_ratio"].as_array().expect("below_min_ratio");
    assert!(!below.is_empty(), "{doc}");
    for b in below {
        assert!(b["file"] == 2 && b["ratio"].as_f64().is_some_and(|r| r < 1000.0), "{b}");
        let size = b["bytes"].as_u64().expect("bytes").to_string();
        assert!(
            c.stdout.lines().any(|l| l.starts_with("# FAILED") && l.contains(&size)),
            "{size} not in the text: {}",
            c.stdout
        );
    }
    let junk = dir.join("junk.txt");
    std::fs::write(&junk, "hello\n").expect("write");
    let c = meshrun(&["compare", j, junk.to_str().expect("utf-8")], limits::LONG_JOB);
    c.expect_code(2);
    assert_eq!(c.stderr.lines().count(), 1, "{}", c.stderr);
    assert!(
        c.stderr.contains("junk.txt:1: `hello` is not from a known format"),
        "{}",
        c.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}
