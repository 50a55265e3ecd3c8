//! `meshrun compare`'s readers on real outputs: nccl-tests' published all_reduce_perf log
//! (whitespace collapsed), perftest's ib_write_bw/ib_write_lat, meshrun's own golden reports,
//! nccl-tests JSON with the early misspelled keys, several collectives in one log, the
//! per-iteration layout, and malformed files; and job logs as jobs leave them (sources in
//! tests/data/README.md): Open MPI --tag-output with stderr and X11 warnings, MPI Operator
//! launcher logs with ssh warnings and NCCL INFO between the rows, the old `error` column,
//! srun -l labels padded and not; then cases derived from those (CRLF, a killed run, two tests
//! in one log, an mpirun --output-filename directory, a bad row deep in a tagged log).

use std::path::{Path, PathBuf};

use analysis::compare::table::{compare, Input};
use analysis::compare::{parse, read as read_path, Better, Parsed, ReadError};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn read(name: &str) -> Parsed {
    let text = std::fs::read_to_string(data(name)).expect("test data");
    parse(name, &text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn nccl_tests_published_log() {
    let p = read("nccl-tests-all_reduce_perf-2.18-2x4xA40.txt");
    assert_eq!(p.format, "nccl-tests text");
    assert_eq!(p.ranks, Some(8));
    assert_eq!(p.series.len(), 1);
    let s = &p.series[0];
    assert_eq!(s.name, None);
    assert_eq!(s.points.len(), 25);
    assert_eq!(s.points[&8], 0.00);
    assert_eq!(s.points[&64], 0.01);
    assert_eq!(s.points[&134217728], 11.94);
    assert_eq!(s.better, Better::Higher);
}

#[test]
fn perftest_bandwidth_and_latency() {
    let bw = read("perftest-ib_write_bw-a-mlx4-IB.txt");
    assert_eq!(bw.format, "perftest text");
    let s = &bw.series[0];
    assert_eq!(s.name.as_deref(), Some("RDMA_Write BW"));
    assert_eq!(s.points[&2], 0.058591);
    assert_eq!(s.points[&2097152], 27.17);
    let lat = read("perftest-ib_write_lat-a-mlx4-IB.txt");
    let s = &lat.series[0];
    assert_eq!(s.name.as_deref(), Some("RDMA_Write Lat"));
    assert_eq!(s.better, Better::Lower);
    assert_eq!(s.points[&2], 1.50);
    assert_eq!(s.points[&4194304], 1240.87);
    assert_eq!(s.points.len(), 23);
}

#[test]
fn perftest_megabytes_are_converted() {
    let text = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 65536      1000           3000.00            2500.00              0.040000\n";
    let p = parse("mb.txt", text).unwrap();
    // 2500 x 2^20 bytes/s x 8 = 20.97152 Gb/s.
    assert!((p.series[0].points[&65536] - 20.97152).abs() < 1e-9);
}

#[test]
fn meshrun_own_reports_text_and_json_agree() {
    let text = read("golden/all_reduce-4ranks.txt");
    assert_eq!(text.ranks, Some(4));
    // The golden text holds meshrun's table and, after it, the baseline's (untitled there).
    assert_eq!(text.series.len(), 2);
    assert_eq!(text.series[1].name, None);
    // With the title meshrun prints (--baseline mpi), the baseline is named as such.
    let golden = std::fs::read_to_string(data("golden/all_reduce-4ranks.txt")).unwrap();
    let cols: Vec<&str> = golden.lines().filter(|l| l.starts_with("#       size")).collect();
    let first_table_end = golden.find("# Avg bus bandwidth").unwrap();
    let meshrun_part = &golden[..first_table_end];
    let with_base = format!(
        "{meshrun_part}# Baseline: the MPI library's own all_reduce (Open MPI v4.1.4) in the same harness\n{}\n           8             2     float     sum      -1    30.00    0.00    0.77      0\n",
        cols[0]
    );
    let both = parse("b.txt", &with_base).unwrap();
    assert_eq!(both.series.len(), 2);
    assert_eq!(both.series[1].name.as_deref(), Some("collective (MPI baseline)"));
    assert_eq!(both.series[1].points.len(), 1);
    assert_eq!(both.series[1].points[&8], 0.77);
    assert_eq!(both.series[0].points, text.series[0].points);
    let json = read("golden/all_reduce-4ranks.J.json");
    assert_eq!(json.format, "nccl-tests JSON");
    assert_eq!(json.ranks, Some(4));
    assert_eq!(json.series[0].name.as_deref(), Some("all_reduce"));
    let a = &text.series[0].points;
    let b = &json.series[0].points;
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (size, v) in a {
        // The text rounds to 2 decimals.
        assert!((v - b[size]).abs() <= 0.005 + 1e-9, "{size}: {v} vs {}", b[size]);
    }
    let pw = read("golden/send-bw-4ranks.txt");
    assert_eq!(pw.format, "meshrun pairwise text");
    assert_eq!(pw.ranks, Some(4));
    let pj = read("golden/send-bw-4ranks.json");
    assert_eq!(pj.format, "meshrun pairwise JSON");
    assert_eq!(pw.series[0].name, pj.series[0].name);
    assert_eq!(pw.series[0].name.as_deref(), Some("Send BW"));
    for (size, v) in &pw.series[0].points {
        assert!((v - pj.series[0].points[size]).abs() <= 0.005 + 1e-9);
    }
    let lat = read("golden/send-lat-sweep-3ranks.json");
    assert_eq!(lat.series[0].better, Better::Lower);
}

#[test]
fn nccl_tests_json_with_the_misspelled_keys() {
    // nccl-tests' first JSON writer spelled bandwidth "bandwidith".
    let doc = r#"{"version": 1, "args": ["./build/all_gather_perf", "-b", "8"],
        "config": {"devices": [{"rank": 0}, {"rank": 1}]},
        "results": [
          {"size": 8, "out_of_place": {"time": 10.0, "alg_bandwidith": 0.1, "bus_bandwidith": 0.05}},
          {"size": 1024, "out_of_place": {"time": 20.0, "alg_bandwidith": 2.0, "bus_bandwidith": "1.0"}}
        ],
        "average_bus_bandwidith": {"bandwidth": 0.5}}"#;
    let p = parse("old.json", doc).unwrap();
    assert_eq!(p.ranks, Some(2));
    assert_eq!(p.series[0].name.as_deref(), Some("all_gather"));
    assert_eq!(p.series[0].points[&1024], 1.0);
}

#[test]
fn several_collectives_in_one_log_and_the_per_iteration_layout() {
    let log = "\
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1 on a device  0 [0000:01:00] H100
#  Rank  1 Group  0 Pid   2 on b device  0 [0000:01:00] H100
#
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)
           8             2     float     sum      -1    10.00    0.00    0.50       0     9.00    11.00    11.00     5.00    10.00    0.00    0.40       0     9.00    11.00    11.00     5.00
          16             4     float     sum      -1    10.00    0.00    0.60       0     9.00    11.00    11.00     5.00    10.00    0.00    0.40       0     9.00    11.00    11.00     5.00
# Out of bounds values : 0 OK
# Collective test starting: all_gather_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
           8             1     float    none      -1    10.00    0.00    0.25       0    10.00    0.00    0.30       0
";
    let p = parse("two.log", log).unwrap();
    assert_eq!(p.series.len(), 2);
    assert_eq!(p.series[0].name.as_deref(), Some("all_reduce"));
    assert_eq!(p.series[0].points[&16], 0.60);
    assert_eq!(p.series[1].name.as_deref(), Some("all_gather"));
    assert_eq!(p.series[1].points[&8], 0.25);
    assert_eq!(p.ranks, Some(2));
}

#[test]
fn malformed_files_name_the_line() {
    let bad_row = "#       size         count      type   redop    root     time   algbw   busbw  #wrong\n           8             2     float     sum      -1    10.00    0.00\n";
    let e = parse("short.txt", bad_row).unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert!(e.to_string().contains("busbw in column 8"), "{e}");
    let e = parse(
        "nan.txt",
        "# size count type redop root time algbw busbw\n8 2 float sum -1 1.0 0.1 fast\n",
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with("nan.txt:2: busbw `fast` is not a number"),
        "{e}"
    );
    let e = parse("x.csv", "rank,host,0,1\n0,a,-,1.0\n").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("x.csv:1: `rank,host,0,1` is not from a known format"),
        "{e}"
    );
    let e = parse("j.json", r#"{"config": {}}"#).unwrap_err();
    assert!(e.to_string().contains("without a `results` list"), "{e}");
}

#[test]
fn reference_against_meshrun_golden_warns_about_rank_counts() {
    let inputs = vec![
        Input {
            path: "ref.txt".into(),
            parsed: read("nccl-tests-all_reduce_perf-2.18-2x4xA40.txt"),
        },
        Input {
            path: "ar.json".into(),
            parsed: read("golden/all_reduce-4ranks.J.json"),
        },
    ];
    let o = compare(&inputs, 1 << 20, Some(0.5));
    assert!(
        o.text.contains("# warning: [1] ran on 8 ranks and [2] on 4"),
        "{}",
        o.text
    );
    // Both hold one collective (one unnamed), so they are set side by side.
    assert!(
        o.text
            .contains("# [2]'s all_reduce set beside [1]'s (unnamed collective 1)"),
        "{}",
        o.text
    );
    assert!(o.text.contains("# only in [1], not in [2]: 16 32"), "{}", o.text);
    assert_eq!(o.summary.len(), 1);
}

fn text_of(name: &str) -> String {
    std::fs::read_to_string(data(name)).expect("test data")
}

/// The sizes a series holds, smallest first.
fn sizes(p: &Parsed, k: usize) -> Vec<u64> {
    p.series[k].points.keys().copied().collect()
}

/// 2^a, 2^(a+1), ..., 2^b.
fn powers(a: u32, b: u32) -> Vec<u64> {
    (a..=b).map(|e| 1u64 << e).collect()
}

#[test]
fn open_mpi_tag_output_with_stderr_and_x11_warnings() {
    // Rank 1 writes only to stderr; the X11 warnings come before the table, untagged too.
    let p = read("nccl-tests-all_reduce_perf_mpi-tag-output-2xRTX5090.txt");
    assert_eq!(p.format, "nccl-tests text");
    assert_eq!(p.ranks, Some(2));
    assert_eq!(p.series.len(), 1);
    assert_eq!(p.series[0].name.as_deref(), Some("all_reduce"));
    assert_eq!(sizes(&p, 0), powers(20, 27));
    assert_eq!(p.series[0].points[&1048576], 0.24);
    assert_eq!(p.series[0].points[&16777216], 2.17);
    assert_eq!(p.series[0].points[&134217728], 2.30);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    let g = read("nccl-tests-all_gather_perf_mpi-tag-output-2xRTX5090.txt");
    assert_eq!(g.series[0].name.as_deref(), Some("all_gather"));
    assert_eq!(g.series[0].points[&8388608], 1.68);
}

#[test]
fn mpi_operator_launcher_log_with_ssh_warnings_and_nccl_info_between_rows() {
    // Two `Warning: Permanently added` lines, NCCL INFO from both ranks, one between the column
    // header and the first row, and size 0 twice (-b 1 rounds down).
    let p = read("nccl-tests-all_reduce_perf-mpi-operator-2xT4-EFA.txt");
    assert_eq!(p.ranks, Some(2));
    assert_eq!(p.series.len(), 1);
    assert_eq!(p.series[0].name, None);
    let mut want = vec![0];
    want.extend(powers(2, 30));
    assert_eq!(sizes(&p, 0), want);
    assert_eq!(p.series[0].points[&1048576], 1.80);
    assert_eq!(p.series[0].points[&268435456], 3.15);
    assert_eq!(p.series[0].points[&1073741824], 3.11);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn the_old_error_column_in_a_16_rank_tagged_log() {
    // nccl-tests of NCCL 2.8: `error` (2e-07) where `#wrong` is now, no `root` column; the
    // launcher's `+ kubectl ...` trace, 16 ranks' NCCL INFO.
    let p = read("nccl-tests-all_reduce_perf-error-column-mpi-operator-16xA100-EFA.txt");
    assert_eq!(p.ranks, Some(16));
    assert_eq!(sizes(&p, 0), powers(3, 32));
    assert_eq!(p.series[0].points[&8], 0.00);
    assert_eq!(p.series[0].points[&8388608], 13.57);
    assert_eq!(p.series[0].points[&4294967296], 43.81);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn srun_labels_padded_and_not() {
    let p = read("nccl-tests-all_reduce_perf-srun-l-2x8xH100.txt");
    assert_eq!(p.ranks, Some(16));
    assert_eq!(sizes(&p, 0), powers(23, 33));
    // #wrong is N/A (-c 0): busbw is read all the same.
    assert_eq!(p.series[0].points[&8388608], 73.04);
    assert_eq!(p.series[0].points[&8589934592], 155.57);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    // Published from the header on, without the footer: read, with a warning.
    let p = read("nccl-tests-all_reduce_perf-srun-l-2xp4de.txt");
    assert_eq!(p.ranks, None);
    assert_eq!(sizes(&p, 0), powers(3, 31));
    assert_eq!(p.series[0].points[&1048576], 6.35);
    assert_eq!(p.series[0].points[&2147483648], 78.33);
    assert_eq!(p.warnings.len(), 1);
    assert!(
        p.warnings[0].contains("no `# Avg bus bandwidth` after the table (last row: line 31)"),
        "{:?}",
        p.warnings
    );
}

#[test]
fn derived_crlf_copy_reads_the_same() {
    // Derived from nccl-tests-all_reduce_perf_mpi-tag-output-2xRTX5090.txt.
    let name = "nccl-tests-all_reduce_perf_mpi-tag-output-2xRTX5090.txt";
    let crlf = text_of(name).replace('\n', "\r\n");
    assert_eq!(parse(name, &crlf).unwrap(), read(name));
}

#[test]
fn derived_killed_run_reads_the_whole_rows_and_warns() {
    // Derived from nccl-tests-all_reduce_perf-error-column-mpi-operator-16xA100-EFA.txt: cut
    // in the middle of the 268435456 row (line 589), as a job killed there leaves it.
    let name = "nccl-tests-all_reduce_perf-error-column-mpi-operator-16xA100-EFA.txt";
    let full = text_of(name);
    let cut_at = full
        .find("   268435456      67108864   float     sum    13233   20")
        .unwrap()
        + "   268435456      67108864   float     sum    13233   20".len();
    let p = parse("killed.txt", &full[..cut_at]).unwrap();
    assert_eq!(sizes(&p, 0), powers(3, 27));
    assert_eq!(p.series[0].points[&134217728], 28.82);
    assert_eq!(p.warnings.len(), 1);
    assert!(
        p.warnings[0].contains("line 589 is cut short (6 of 12 columns)")
            && p.warnings[0].contains("the 25 complete rows before it are read"),
        "{:?}",
        p.warnings
    );
    // Killed between two rows: every row whole, the footer missing.
    let between = &full[..full.find("[1,0]<stdout>:   268435456").unwrap()];
    let p = parse("killed.txt", between).unwrap();
    assert_eq!(sizes(&p, 0), powers(3, 27));
    assert!(p.warnings[0].contains("may have stopped early"), "{:?}", p.warnings);
}

#[test]
fn derived_two_tests_in_one_job_log() {
    // Derived: the all_reduce and all_gather logs of the same study, one after the other, as
    // a job script running both leaves them.
    let both = format!(
        "{}{}",
        text_of("nccl-tests-all_reduce_perf_mpi-tag-output-2xRTX5090.txt"),
        text_of("nccl-tests-all_gather_perf_mpi-tag-output-2xRTX5090.txt")
    );
    let p = parse("both.log", &both).unwrap();
    let names: Vec<Option<&str>> = p.series.iter().map(|s| s.name.as_deref()).collect();
    assert_eq!(names, vec![Some("all_reduce"), Some("all_gather")]);
    assert_eq!(p.series[0].points[&134217728], 2.30);
    assert_eq!(p.series[1].points[&134217728], 2.30);
    assert_eq!(p.series[1].points[&8388608], 1.68);
    // Unnamed tests (no `Collective test starting` line) are told apart by position.
    let two_old = format!("{0}{0}", text_of("nccl-tests-all_reduce_perf-srun-l-2x8xH100.txt"));
    let p = parse("two-old.log", &two_old).unwrap();
    assert_eq!(p.series.len(), 2);
    assert!(p.series.iter().all(|s| s.name.is_none()));
}

#[test]
fn derived_errors_in_a_tagged_log_name_the_files_line() {
    // Derived from the 16-rank tagged log: the 1024-byte row's busbw (line 571) made unreadable.
    let name = "nccl-tests-all_reduce_perf-error-column-mpi-operator-16xA100-EFA.txt";
    let bad = text_of(name).replace("195.4    0.01    0.01  5e-07", "195.4    0.01    0.0x  5e-07");
    let e = parse("bad.txt", &bad).unwrap_err();
    assert_eq!(e.line, 571, "{e}");
    assert!(
        e.to_string().starts_with("bad.txt:571: busbw `0.0x` is not a number"),
        "{e}"
    );
}

/// A scratch directory of one test's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("meshrun-compare-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("scratch dir");
        Scratch(p)
    }
    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("dirs");
        std::fs::write(&p, text).expect("write");
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One rank's lines of an Open MPI tagged log, untagged: what `--output-filename` writes to
/// that rank's file instead.
fn rank_stream(tagged: &str, rank: u32, stream: &str) -> String {
    let tag = format!("[1,{rank}]<{stream}>:");
    tagged
        .lines()
        .filter_map(|l| l.strip_prefix(tag.as_str()))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn derived_output_filename_directory() {
    // Derived from the 2-rank tagged log: each rank's stdout and stderr in the files
    // `mpirun --output-filename out` makes of them.
    let tagged = text_of("nccl-tests-all_reduce_perf_mpi-tag-output-2xRTX5090.txt");
    let s = Scratch::new("output-filename");
    for r in 0..2 {
        s.write(&format!("out/1/rank.{r}/stdout"), &rank_stream(&tagged, r, "stdout"));
        s.write(&format!("out/1/rank.{r}/stderr"), &rank_stream(&tagged, r, "stderr"));
    }
    let want = read("nccl-tests-all_reduce_perf_mpi-tag-output-2xRTX5090.txt");
    let p = read_path(&s.0.join("out")).unwrap();
    assert_eq!(p.series, want.series);
    assert_eq!(
        p.warnings,
        vec!["mpirun --output-filename directory: rank 0's stdout read"]
    );
    // The rank's stdout file itself is a plain log.
    let f = read_path(&s.0.join("out/1/rank.0/stdout")).unwrap();
    assert_eq!(f.series, want.series);
    assert!(f.warnings.is_empty());
    // perftest-like: two ranks print results; the first is read and the other named.
    let s2 = Scratch::new("output-filename-both");
    let one = rank_stream(&tagged, 0, "stdout");
    s2.write("out/rank.0/stdout", &one);
    s2.write("out/rank.1/stdout", &one);
    let p = read_path(&s2.0.join("out")).unwrap();
    assert_eq!(
        p.warnings[0],
        "mpirun --output-filename directory: rank 0's stdout read; rank(s) 1 printed results too, not read"
    );
    // A directory of something else is a one-line error naming it.
    s2.write("notes/readme.txt", "not a run\n");
    let e = read_path(&s2.0.join("notes")).unwrap_err();
    assert!(matches!(e, ReadError::Layout(_)), "{e}");
    let e = read_path(&s2.0.join("nothing-here.txt")).unwrap_err();
    assert!(matches!(e, ReadError::Io { .. }), "{e}");
}

#[test]
fn warnings_are_printed_with_the_file_they_belong_to() {
    let inputs = vec![
        Input {
            path: "full.txt".into(),
            parsed: read("nccl-tests-all_reduce_perf-srun-l-2x8xH100.txt"),
        },
        Input {
            path: "excerpt.txt".into(),
            parsed: read("nccl-tests-all_reduce_perf-srun-l-2xp4de.txt"),
        },
    ];
    let o = compare(&inputs, 0, None);
    assert!(
        o.text
            .contains("# [2] warning: a collective: no `# Avg bus bandwidth` after the table"),
        "{}",
        o.text
    );
    assert!(!o.text.contains("# [1] warning"), "{}", o.text);
}

#[test]
fn every_kept_fuzz_input_still_parses_or_fails_with_a_line() {
    // The fuzz corpus and regressions (fuzz/), replayed here too so a change to the readers is
    // checked against them with the analysis crate alone.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in [root.join("corpus/compare"), root.join("regressions/compare")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let bytes = std::fs::read(e.path()).expect("corpus file");
            let Ok(text) = std::str::from_utf8(&bytes) else {
                continue;
            };
            let lines = text.lines().count().max(1);
            if let Err(err) = parse("fuzz.txt", text) {
                assert!(err.line <= lines + 1, "{}: {err}", e.path().display());
            }
            n += 1;
        }
    }
    assert!(n > 0, "no fuzz corpus under {}", root.display());
}
