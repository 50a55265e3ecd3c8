//! `meshrun pairwise` end to end: modes on one machine, outputs, bad input.

use e2e::*;

/// Data rows of the perftest-style section: lines starting with a byte count.
fn perftest_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .take_while(|l| !l.starts_with("# "))
        .filter(|l| l.split_whitespace().next().is_some_and(|w| w.parse::<u64>().is_ok()))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn bandwidth_rows_matrix_and_files() {
    let d = fresh_dir("pairwise-test");
    let (json, csv, png, svg) = (d.join("r.json"), d.join("m.csv"), d.join("h.png"), d.join("h.svg"));
    let (prom, html) = (d.join("m.prom"), d.join("r.html"));
    let r = mpirun(
        3,
        &[
            "pairwise",
            "-s",
            "64K",
            "-n",
            "100",
            "--threshold",
            VERDICT_NOT_THE_SUBJECT,
            "--json",
            json.to_str().unwrap(),
            "--csv",
            csv.to_str().unwrap(),
            "--heatmap",
            png.to_str().unwrap(),
            "--metrics",
            prom.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
        &[],
        limits::PAIRWISE_JOB,
    );
    r.expect_code(0);
    // The metrics file passes Prometheus' own check, one bandwidth sample per direction.
    let check = promtool_check(&prom);
    assert_eq!(check.code, Some(0), "promtool: {}", check.all());
    let text = std::fs::read_to_string(&prom).unwrap();
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("meshrun_pairwise_bandwidth_bytes_per_second{"))
            .count(),
        6,
        "{text}"
    );
    assert!(text.contains("\nmeshrun_pairwise_pass 1\n"), "{text}");
    let rows = perftest_rows(&r.stdout);
    assert_eq!(rows.len(), 6, "3 ranks: 6 directions\n{}", r.stdout);
    for row in &rows {
        assert_eq!(row[0], "65536");
        assert_eq!(row[1], "100");
        let (peak, avg, rate): (f64, f64, f64) = (
            row[2].parse().unwrap(),
            row[3].parse().unwrap(),
            row[4].parse().unwrap(),
        );
        assert!(avg > 0.0 && peak >= avg, "{row:?}");
        // MsgRate[Mpps] = BW / (8 * bytes) / 1e6, as perftest's columns relate; BW is printed
        // to 0.01 Gb/s and the rate to 1e-6 Mpps, so the two agree within those roundings (a
        // busy machine's 0.08 Gb/s is 0.0771 rounded: 4% apart, and still right).
        let bw_of_rate = rate * 1e6 * 8.0 * 65536.0 / 1e9;
        let rounding = 0.005 + 1e-6 * 1e6 * 8.0 * 65536.0 / 1e9;
        assert!(
            (bw_of_rate - avg).abs() <= rounding + 1e-9,
            "MsgRate {rate} Mpps is {bw_of_rate} Gb/s, BW average {avg}"
        );
    }
    assert!(r.stdout.contains("# PASS: no slow pairs"), "{}", r.stdout);
    // JSON has every figure and the verdict.
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["results"].as_array().unwrap().len(), 6);
    // A direction's slowest slice, where its receiver timed one: a rate above nought and not
    // above its average. Over loopback a receiver that was not running while its 100 messages
    // arrived finds them all complete at once, and there is no slice: quiet_fabric.rs checks it
    // where the shaper paces the messages.
    for m in doc["results"].as_array().unwrap() {
        let (low, avg) = (m["bw"]["low_gbps"].as_f64(), m["bw"]["avg_gbps"].as_f64().unwrap());
        assert!(low.is_none_or(|l| l > 0.0 && l <= avg), "{m}");
    }
    assert_eq!(doc["verdict"]["pass"], true);
    assert_eq!(doc["config"]["window"], 128);
    // What the run cost, measured: 3 rounds of 3 ranks (one idle each), their wall time at
    // least their wire time, the peak RSS read from /proc (a rank of this binary: 1-500 MiB).
    let t = &doc["timings"];
    assert_eq!(t["rounds"], 3, "{t}");
    let (setup, sweep, wire) = (
        t["setup_s"].as_f64().unwrap(),
        t["sweep_s"].as_f64().unwrap(),
        t["wire_s"].as_f64().unwrap(),
    );
    assert!(setup > 0.0 && wire > 0.0 && sweep >= wire * 0.9, "{t}");
    let rss = t["peak_rss"].as_u64().unwrap();
    assert!((1 << 20..500 << 20).contains(&rss), "{t}");
    let time_line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("# Time: mesh setup "))
        .unwrap_or_default();
    assert!(
        time_line.contains(" 3 rounds in ") && time_line.contains("peak RSS of a rank"),
        "{}",
        r.stdout
    );
    // CSV: header and one row per rank, diagonal empty.
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "rank,host,0,1,2");
    assert_eq!(lines.len(), 4);
    assert!(lines[1].split(',').nth(2).unwrap().is_empty());
    // PNG signature.
    assert_eq!(&std::fs::read(&png).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
    // The HTML page: the PASS banner, the header's facts, the picture inlined.
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(page.contains("<div class=\"banner pass\" id=\"status\">PASS"), "{page}");
    assert!(
        page.contains("<th>Ranks</th><td>3 on ") && page.contains("<svg"),
        "{page}"
    );
    // An existing file is not overwritten without --force, and nothing runs.
    let r = mpirun(
        2,
        &["pairwise", "-n", "10", "--json", json.to_str().unwrap()],
        &[],
        limits::PAIRWISE_JOB,
    );
    r.expect_code(2);
    assert!(r.stderr.contains("already exists; pass --force"), "{}", r.stderr);
    assert!(r.stdout.is_empty());
    let r = mpirun(
        2,
        &[
            "pairwise",
            "-n",
            "10",
            "--threshold",
            VERDICT_NOT_THE_SUBJECT,
            "--heatmap",
            svg.to_str().unwrap(),
        ],
        &[],
        limits::PAIRWISE_JOB,
    );
    r.expect_code(0);
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn latency_sweep_bidirectional_and_duration() {
    let r = mpirun(
        2,
        &["pairwise", "--test", "lat", "-n", "200"],
        &[],
        limits::PAIRWISE_JOB,
    );
    r.expect_code(0);
    let rows = perftest_rows(&r.stdout);
    assert_eq!(rows.len(), 1, "{}", r.stdout);
    let v: Vec<f64> = rows[0][2..9].iter().map(|x| x.parse().unwrap()).collect();
    // t_min <= t_typical <= t_max, t_min <= t_avg, 99% <= 99.9%.
    assert!(v[0] <= v[2] && v[2] <= v[1] && v[0] <= v[3] && v[5] <= v[6], "{v:?}");
    assert!(r.stdout.contains("t_typical[usec]"));

    let r = pairwise_unjudged(2, &["-a", "-n", "20"], &[], limits::PAIRWISE_JOB);
    r.expect_code(0);
    let sizes: Vec<u64> = perftest_rows(&r.stdout)
        .iter()
        .map(|row| row[0].parse().unwrap())
        .collect();
    assert_eq!(sizes.len(), 46, "23 sizes x 2 directions");
    assert_eq!((sizes[0], sizes[45]), (2, 8 << 20));

    let r = pairwise_unjudged(2, &["-b", "-s", "256K", "-n", "50"], &[], limits::PAIRWISE_JOB);
    r.expect_code(0);
    assert!(r.stdout.contains("bidirectional"));
    assert_eq!(perftest_rows(&r.stdout).len(), 1);

    let r = pairwise_unjudged(2, &["-D", "0.3", "-s", "64K"], &[], limits::PAIRWISE_JOB);
    r.expect_code(0);
    let rows = perftest_rows(&r.stdout);
    assert_eq!(rows.len(), 2);
    assert!(
        rows.iter().all(|row| row[1].parse::<u64>().unwrap() >= 128),
        "calibrated count: {rows:?}"
    );
}

#[test]
fn pair_selection() {
    let r = pairwise_unjudged(4, &["--pair", "1,3", "-n", "50"], &[], limits::PAIRWISE_JOB);
    r.expect_code(0);
    let rows = perftest_rows(&r.stdout);
    let ends: Vec<(String, String)> = rows.iter().map(|row| (row[5].clone(), row[6].clone())).collect();
    assert_eq!(ends, vec![("1".into(), "3".into()), ("3".into(), "1".into())]);
    // Inter-node on one machine: nothing to test is bad input.
    let r = mpirun(2, &["pairwise", "--inter-node"], &[], limits::PAIRWISE_JOB);
    r.expect_code(2);
    assert!(r.stderr.contains("no pairs to test"), "{}", r.stderr);
}

/// The quick patterns measure each rank's partners only: a ring of 5 ranks is 5 pairs (10
/// directions) in 3 rounds instead of 10 pairs in 5.
#[test]
fn quick_ring_pattern() {
    let r = pairwise_unjudged(5, &["--pairs", "ring", "-n", "50"], &[], limits::PAIRWISE_JOB);
    r.expect_code(0);
    let mut ends: Vec<(usize, usize)> = perftest_rows(&r.stdout)
        .iter()
        .map(|row| (row[5].parse().unwrap(), row[6].parse().unwrap()))
        .collect();
    ends.sort_unstable();
    let mut want: Vec<(usize, usize)> = (0..5).flat_map(|i| [(i, (i + 1) % 5), ((i + 1) % 5, i)]).collect();
    want.sort_unstable();
    assert_eq!(ends, want, "{}", r.stdout);
    assert!(
        r.stdout
            .contains(" Pairs           : ring            Rounds         : 3"),
        "{}",
        r.stdout
    );
    let r = mpirun(2, &["pairwise", "--pairs", "shift:0"], &[], limits::PAIRWISE_JOB);
    r.expect_code(2);
    assert!(r.stderr.contains("--pairs shift:0"), "{}", r.stderr);
}

/// Configuration findings before any traffic: on a copy of the two-socket fixture without the
/// socket-1 NIC, the GPU on socket 1 has no RDMA NIC on its own NUMA node, and the first line says so.
#[test]
fn a_gpu_far_from_every_nic_is_named_before_any_traffic() {
    let src = root().join("ranks/tests/fixtures/sysfs/gpu-2socket");
    let dir = std::env::temp_dir().join(format!("meshrun-findings-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(&dir)
        .status()
        .unwrap();
    assert!(cp.success());
    std::fs::remove_dir_all(dir.join("class/infiniband/mlx5_1")).unwrap();
    let root = dir.display().to_string();
    let r = pairwise_unjudged(
        2,
        &["--transport", "tcp", "--sysfs-root", &root, "-n", "20"],
        &[],
        limits::PAIRWISE_JOB,
    );
    let _ = std::fs::remove_dir_all(&dir);
    r.expect_code(0);
    let first = r.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("# Config: GPU far from its NICs on ")
            && first.ends_with(
                ": GPU 0000:9a:00.0 has no RDMA NIC on its own NUMA node (closest: mlx5_0, SYS); GPUDirect traffic \
                 will cross the socket interconnect"
            ),
        "{}",
        r.stdout
    );
    assert_eq!(
        r.stdout.matches("# Config: GPU far").count(),
        1,
        "once per host:\n{}",
        r.stdout
    );
    // Beside it, what preflight names on this node and the GPU line does not already say.
    assert!(
        r.stdout.contains("\n# Config: warning ")
            && r.stdout.contains(": GPUDirect RDMA: nvidia_peermem is not loaded"),
        "{}",
        r.stdout
    );
}

#[test]
fn bad_input_is_rejected_with_status_2() {
    for (args, want) in [
        (vec!["pairwise", "-s", "0"], "size 0 is not a message"),
        (vec!["pairwise", "-a", "-s", "64K"], "cannot be used with"),
        (vec!["pairwise", "--threshold", "1.5"], "out of range"),
        (vec!["pairwise", "--threshold", "0"], "out of range"),
        (vec!["pairwise", "--pair", "2,2"], "two different ranks"),
        (vec!["pairwise", "--heatmap", "/tmp/x.bmp"], "expected a .png or .svg"),
        (
            vec!["pairwise", "--repeat", "0"],
            "expected 1 (a single run, the default) to 100000",
        ),
        (
            vec!["pairwise", "--repeat-for", "10x"],
            "expected a number with s, m or h, e.g. 90s, 10m, 1h30m",
        ),
        (
            vec!["pairwise", "--repeat-for", "0s"],
            "expected more than 0 and at most a week",
        ),
    ] {
        // Arguments are checked before MPI starts: a plain process is enough.
        let r = if want.contains(".png") {
            mpirun(2, &args, &[], limits::PAIRWISE_JOB)
        } else {
            meshrun(&args, limits::PAIRWISE_JOB)
        };
        r.expect_code(2);
        assert!(r.stderr.contains(want), "{args:?}: want `{want}` in {}", r.stderr);
        assert!(!r.stderr.contains("panicked"));
        if args.iter().any(|a| a.starts_with("--repeat")) {
            assert_eq!(r.stderr.lines().count(), 1, "one line: {}", r.stderr);
        }
    }
    let r = mpirun(2, &["pairwise", "--pair", "0,7"], &[], limits::PAIRWISE_JOB);
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains("--pair 0,7: this job has ranks 0 to 1"),
        "{}",
        r.stderr
    );
    let r = mpirun(2, &["pairwise", "--op", "write"], &[], limits::PAIRWISE_JOB);
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr
            .contains("the tcp transport cannot do RDMA write (one-sided); use --op send"),
        "{}",
        r.stderr
    );
}

/// `--repeat 3`: three whole passes, a progress line before each, every pass kept in the JSON,
/// judged over time; `meshrun verdict` reads the passes back and judges them to the same verdict.
#[test]
fn repeated_passes_are_kept_and_judged_over_time() {
    let d = fresh_dir("pairwise-repeat");
    let json = d.join("r.json");
    let r = mpirun(
        3,
        &[
            "pairwise",
            "-s",
            "64K",
            "-n",
            "50",
            "--threshold",
            VERDICT_NOT_THE_SUBJECT,
            "--repeat",
            "3",
            "--json",
            json.to_str().unwrap(),
        ],
        &[],
        limits::PAIRWISE_JOB,
    );
    r.expect_code(0);
    for k in 1..=3 {
        assert!(r.stderr.contains(&format!("meshrun: repeat {k}/3")), "{}", r.stderr);
    }
    assert!(
        r.stderr.contains("meshrun: repeat 3/3, ~"),
        "an estimate of what is left: {}",
        r.stderr
    );
    assert!(r.stdout.contains("# Over time: 3 passes, from "), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("\n# PASS over 3 passes: nothing slow or unstable in any pass\n"),
        "{}",
        r.stdout
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let passes = doc["repeats"].as_array().expect("repeats");
    assert_eq!(passes.len(), 3);
    for (i, p) in passes.iter().enumerate() {
        assert_eq!(p["pass"], i + 1);
        assert_eq!(p["results"].as_array().map(Vec::len), Some(6), "3 ranks: 6 directions");
        assert!(p["verdict"]["pass"].is_boolean() && p["started_at"].as_f64().is_some());
        assert!(p.get("hosts").is_none(), "shared keys are kept once, at the top");
    }
    assert!(passes[1]["start_s"].as_f64() > passes[0]["start_s"].as_f64());
    assert_eq!(doc["over_time"]["pass"], true);
    assert_eq!(doc["over_time"]["passes"], 3);
    let v = meshrun(&["verdict", json.to_str().unwrap()], limits::PAIRWISE_JOB);
    v.expect_code(0);
    assert!(
        v.stdout
            .contains("# The run's own verdict over 3 passes, with its retests: PASS"),
        "{}",
        v.stdout
    );
    assert!(v.stdout.contains("# Pass 3 judged again offline: "), "{}", v.stdout);
    assert!(
        v.stdout
            .contains("\n# PASS over 3 passes: nothing slow or unstable in any pass\n"),
        "{}",
        v.stdout
    );
}
