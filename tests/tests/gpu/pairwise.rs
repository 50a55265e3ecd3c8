//! `pairwise --use-cuda` on one node over the stand-in: pairs GPU to GPU over IPC (each sender
//! copying into its peer's memfd mapping), the path in the header, every row and the JSON; the
//! network's path where `--p2p net` or `NCCL_P2P_DISABLE=1` asks; a slow GPU link
//! (`MESHRUN_GPU_STANDIN_SLOW_COPY`) named. Small runs: a few seconds each.

use e2e::*;

use super::STANDIN;

/// `mpirun -np N meshrun pairwise --use-cuda` over TCP at 1 MiB, 400 copies a direction (about
/// 20 ms on this machine: long enough that a loaded machine's preemptions do not set the
/// figures), on the stand-in with `env` beside it and `extra` flags after; the `--json` document
/// with the run.
fn pairwise_on_gpus(n: usize, extra: &[&str], env: &[(&str, &str)]) -> (Run, serde_json::Value) {
    // One of these runs at a time: each times copies, and two at once on a 2-core machine would
    // each set the other's figures.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // Tests run at once in this process: a directory each.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = fresh_dir(&format!("gpu-pairwise-{k}"));
    let json = dir.join("run.json");
    let path = json.to_str().expect("a UTF-8 temp dir");
    let mut args = vec!["pairwise", "--use-cuda", "--transport", "tcp", "-s", "1M", "-n", "400"];
    args.extend_from_slice(&["--json", path]);
    args.extend_from_slice(extra);
    let r = mpirun(n, &args, &[&[STANDIN][..], env].concat(), limits::PAIRWISE_JOB);
    let doc = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    let _ = std::fs::remove_dir_all(&dir);
    (r, doc)
}

/// Every direction of `doc` took `path`, at more than 0 Gb/s; `n` ranks make n(n-1) of them.
fn every_direction_took(doc: &serde_json::Value, n: usize, path: &str, r: &Run) {
    let ms = doc["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(ms.len(), n * (n - 1), "{}", r.all());
    for m in &ms {
        assert_eq!(m["path"], path, "{m}");
        assert!(m["bw"]["avg_gbps"].as_f64().unwrap_or(0.0) > 0.0, "{m}");
    }
    let rows: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with(" 1048576 ")).collect();
    assert_eq!(rows.len(), n * (n - 1), "{}", r.stdout);
    assert!(rows.iter().all(|l| l.ends_with(&format!("  {path}"))), "{}", r.stdout);
}

/// 2 and 4 ranks on one host: every pair GPU to GPU over IPC, the matrix printed, each figure
/// above 0, the node's pairs judged as a population of its own, and the run passes.
#[test]
fn pairs_of_one_node_go_gpu_to_gpu_over_ipc() {
    for n in [2, 4] {
        let (r, doc) = pairwise_on_gpus(n, &[], &[]);
        r.expect_code(0);
        let want = format!(" P2P             : ipc within the node (ranks 0-{} on ", n - 1);
        assert!(r.stdout.contains(&want), "{}", r.stdout);
        assert!(
            r.stdout.contains("# Average bandwidth [Gb/sec], row = source"),
            "{}",
            r.stdout
        );
        assert!(r.stdout.contains("# PASS"), "{}", r.stdout);
        every_direction_took(&doc, n, "ipc", &r);
        let judged = &doc["verdict"]["judged"][0];
        assert_eq!(judged["population"], "within_host", "{judged}");
        assert!(judged["host"].is_string(), "{judged}");
        let p2p = &doc["config"]["p2p"];
        assert_eq!(
            (&p2p["within_nodes"], &p2p["between_nodes"]),
            (&"ipc".into(), &"net".into())
        );
        assert!(p2p["line"]
            .as_str()
            .is_some_and(|l| l.starts_with("ipc within the node (ranks 0-")));
    }
}

/// `--p2p net` and NCCL's `NCCL_P2P_DISABLE=1` measure the same pairs over the network: host
/// memory over TCP, as the header says (TCP cannot reach GPU memory).
#[test]
fn p2p_net_measures_the_network_path() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 2] = [
        (&["--p2p", "net"], &[], "--p2p net"),
        (&[], &[("NCCL_P2P_DISABLE", "1")], "NCCL_P2P_DISABLE=1"),
    ];
    for (flags, env, why) in cases {
        let (r, doc) = pairwise_on_gpus(2, flags, env);
        r.expect_code(0);
        let want =
            format!(" P2P             : net within the node ({why}); the network's pairs move host memory over TCP");
        assert!(r.stdout.contains(&want), "{}", r.stdout);
        every_direction_took(&doc, 2, "net", &r);
    }
}

/// One slow GPU link (ranks 1 and 2 of 3, their copies either way 20 times as long: on a loaded
/// machine the healthy copies wait for a core too, which narrows the gap) is named as that pair,
/// the others fine, and the run fails. Three ranks run one pair a round: at four, two pairs
/// copying at once on this 2-core machine split the healthy cells in two far apart. The bar is
/// a quarter of the node's median (`--threshold`): on a machine this loaded the retests' own
/// noise, which sets the default bar alone, can spread over a factor of ten, and what is tested
/// here is that the node's pairs are judged and the slow one named, not the noise model.
#[test]
fn a_slow_gpu_link_is_named() {
    let slow = ("MESHRUN_GPU_STANDIN_SLOW_COPY", "1-2:20");
    let (r, doc) = pairwise_on_gpus(3, &["--threshold", "0.25"], &[slow]);
    r.expect_code(1);
    let line = r.stdout.lines().find(|l| l.starts_with("# SLOW")).unwrap_or_default();
    assert!(
        line.starts_with("# SLOW RANK PAIR: rank 1 (") && line.contains(") <-> rank 2 ("),
        "{}",
        r.stdout
    );
    let blamed = doc["verdict"]["blamed"].as_array().cloned().unwrap_or_default();
    assert_eq!(blamed.len(), 1, "{}", r.stdout);
}

/// `--p2p` without `--use-cuda`, and `--p2p ipc` with a latency test, are refused in one line.
#[test]
fn p2p_flag_errors() {
    for (args, want) in [
        (
            &["pairwise", "--p2p", "ipc", "-n", "10"][..],
            "--p2p ipc chooses how the GPU pairs of one node are measured: add --use-cuda",
        ),
        (
            &["pairwise", "--use-cuda", "--p2p", "ipc", "--test", "lat", "-n", "10"][..],
            "pairs over IPC measure GPU-to-GPU copy bandwidth, not latency",
        ),
    ] {
        let r = mpirun(2, args, &[STANDIN], limits::SMALL_JOB);
        r.expect_code(2);
        assert!(r.stderr.contains(want), "{args:?}: {}", r.all());
    }
}
