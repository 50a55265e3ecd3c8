//! `meshrun compare`'s readers on real outputs: nccl-tests' published all_reduce_perf log
//! (whitespace collapsed), perftest's ib_write_bw/ib_write_lat, meshrun's own golden reports,
//! nccl-tests JSON with the early misspelled keys, several collectives in one log, the
//! per-iteration layout, and malformed files.

use std::path::{Path, PathBuf};

use analysis::compare::table::{compare, Input};
use analysis::compare::{parse, Better, Parsed};

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
