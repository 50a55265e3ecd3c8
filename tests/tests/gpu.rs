//! GPU buffers (`-g --gpu-staging`) end to end with real mpirun, on a machine without a GPU:
//! the staged algorithms run over the host stand-in (`MESHRUN_GPU_STANDIN=host`: device buffers
//! reached only by upload, download and device-side reductions), verified bit for bit; all ranks
//! share this host, so their hops go by IPC (`--p2p`, the stand-in's shared memory) unless a test
//! asks for the network (`--p2p net`, `MESHRUN_P2P=net`); the real
//! CUDA path's gating and errors; flag checks. The same algorithms over GPUDirect RDMA (device
//! buffers registered with the NIC, no --gpu-staging) run on real Soft-RoCE verbs in the VM stage
//! (scripts/softroce-vm). The CUDA kernels themselves are checked on a GPU machine by
//! scripts/gpu-check.sh.

use e2e::*;

#[path = "gpu/pairwise.rs"]
mod pairwise;

const STANDIN: (&str, &str) = ("MESHRUN_GPU_STANDIN", "host");

/// On device buffers staged through the host ([`on_gpus`]), a sweep of three sizes, every type
/// and every op.
const EVERY_SIZE: (&str, &str) = ("96", "6144");
const EVERY_TYPE_AND_OP: &[&str] = &["-f", "8", "-d", "all", "-o", "all"];

/// `mpirun -np N meshrun NAME -g --gpu-staging -b MIN -e MAX EXTRA...` with `env` (the
/// stand-in where the caller lists it), within the long job's limit: the run every collective
/// test here makes.
fn on_gpus(n: usize, name: &str, (min, max): (&str, &str), extra: &[&str], env: &[(&str, &str)]) -> Run {
    let args = [&[name, "-g", "--gpu-staging", "-b", min, "-e", max][..], extra].concat();
    mpirun(n, &args, env, limits::LONG_JOB)
}

/// `what` passed, and every one of its `want_rows` rows was verified.
fn check_verified(what: &str, r: &Run, want_rows: usize) {
    expect_verified(what, r, want_rows, &[NCCL_ROW]);
}

/// all_reduce, reduce_scatter (rings) and reduce (chain) reduce on the device: every type and op,
/// 2 and 3 ranks (uneven chunks), both placements, sizes across the 1 MiB slice.
#[test]
fn staged_reductions_run_on_the_device_for_every_type_and_op() {
    for name in ["all_reduce", "reduce_scatter", "reduce"] {
        for n in [2, 3] {
            let r = on_gpus(
                n,
                name,
                EVERY_SIZE,
                &[EVERY_TYPE_AND_OP, &["-n", "2"]].concat(),
                &[STANDIN],
            );
            check_verified(&format!("{name} at {n} ranks"), &r, 10 * 5 * 3);
            // One device line per rank, naming the GPU, its ordinal and the data path.
            let dev_lines: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("#  Rank")).collect();
            assert_eq!(dev_lines.len(), n, "{}", r.stdout);
            for (i, l) in dev_lines.iter().enumerate() {
                assert!(l.contains(&format!("device {i:2} [host] host stand-in")), "{l}");
                assert!(
                    l.contains("staged through pinned host memory (--gpu-staging) over tcp"),
                    "{l}"
                );
            }
        }
    }
    // Several slices per chunk (ring) and per chain step (reduce), with a root other than 0.
    three_mib(&["all_reduce_perf", "reduce_perf"]);
    // The ring without its overlap of transfer and reduction, as a comparison runs it.
    let no_overlap = ("MESHRUN_GPU_RING_OVERLAP", "0");
    let r = on_gpus(
        3,
        "all_reduce",
        ("3M", "3M"),
        &["-n", "1", "-w", "0"],
        &[STANDIN, no_overlap],
    );
    check_verified("all_reduce 3 MiB, not overlapped", &r, 1);
}

/// One 3 MiB run of each collective at 3 ranks (three slices per transfer), root 2, verified.
fn three_mib(names: &[&str]) {
    for name in names {
        let args = [
            name,
            "-g",
            "1",
            "--gpu-staging",
            "-b",
            "3M",
            "-e",
            "3M",
            "-n",
            "1",
            "-w",
            "0",
            "-r",
            "2",
        ];
        let r = mpirun(3, &args, &[STANDIN], limits::LONG_JOB);
        check_verified(&format!("{name} 3 MiB"), &r, 1);
    }
}

/// Collectives that move data, on device buffers slice by slice; results are verified the same
/// way. The reduce chain again, with root 1; then several slices per transfer (3 MiB).
#[test]
fn staged_data_movers_and_reduce_root() {
    for name in ["all_gather", "broadcast", "reduce", "alltoall", "sendrecv"] {
        let extra = ["-f", "8", "-d", "all", "-n", "2", "-r", "1"];
        let r = on_gpus(3, name, ("64", "4096"), &extra, &[STANDIN]);
        check_verified(name, &r, 10 * 3);
    }
    three_mib(&["all_gather", "broadcast", "alltoall", "sendrecv"]);
}

/// Pinned staging is allocated once per run, at the largest size of the sweep, before anything is
/// uploaded: not per size, type, op or placement. The stand-in's journal of its calls says so
/// (`MESHRUN_GPU_STANDIN_LOG=DIR`: one summary file per rank as it ends, so the count does not
/// depend on how mpirun interleaves several ranks' stderr), over a sweep of three
/// sizes, every type and every op, and for a data mover at 3 ranks.
#[test]
fn staging_is_pinned_once_per_run_at_the_largest_size() {
    for (n, name, largest) in [(2, "all_reduce", 6144), (3, "alltoall", 6144)] {
        let dir = fresh_dir(&format!("standin-{name}"));
        let r = on_gpus(
            n,
            name,
            EVERY_SIZE,
            &[EVERY_TYPE_AND_OP, &["-n", "1", "-w", "0"]].concat(),
            &[
                STANDIN,
                ("MESHRUN_GPU_STANDIN_LOG", dir.to_str().expect("a UTF-8 temp dir")),
                // The staged path's rule, so every hop stages (on one node they would go by IPC).
                ("MESHRUN_P2P", "net"),
            ],
        );
        r.expect_code(0);
        let mut journals = Vec::new();
        for e in std::fs::read_dir(&dir).expect("the journal directory") {
            let p = e.expect("a journal entry").path();
            assert!(
                p.extension().is_some_and(|x| x == "log"),
                "{name}: a stray file {}",
                p.display()
            );
            journals.push(std::fs::read_to_string(&p).expect("a journal file"));
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(journals.len(), n, "{name}: {journals:?}\n{}", r.all());
        for j in journals.iter().map(|j| j.trim_end()) {
            assert!(j.starts_with("meshrun stand-in GPU "), "{name}: {j}");
            assert!(
                j.contains(&format!(": host_staging=2 staging_bytes={largest},{largest} ")),
                "{name}: {j}"
            );
            assert!(j.ends_with(" rules=kept"), "{name}: {j}");
            assert!(!j.contains(" upload=0 "), "{name}: {j}");
        }
    }
}

#[test]
fn corrupted_element_on_the_gpu_path_fails_the_run() {
    let corrupt = ("MESHRUN_FAULT", "corrupt:rank=1");
    let r = on_gpus(2, "all_reduce", ("1K", "1K"), &["-n", "1"], &[STANDIN, corrupt]);
    r.expect_code(1);
    let rs = nccl_rows(&r.stdout, &[NCCL_ROW]);
    assert_eq!((rs[0][8].as_str(), rs[0][12].as_str()), ("2", "2"), "{:?}", rs[0]);
    assert!(r.stdout.contains("# Out of bounds values : 4 FAILED"), "{}", r.stdout);
}

/// A GPU that fails a device call mid-run is this rank's own fault: exit 4 (not 3, "a peer
/// died"), with the rank, host, GPU and call named, and the job ends instead of waiting for it.
#[test]
fn a_failed_gpu_call_is_a_local_fault_not_a_dead_peer() {
    let fault = ("MESHRUN_FAULT", "gpu:rank=1");
    let r = on_gpus(
        2,
        "all_reduce",
        ("1K", "1K"),
        &["-n", "1", "-T", "20"],
        &[STANDIN, fault],
    );
    r.expect_code(4);
    assert!(
        r.stderr.contains("rank 1 (") && r.stderr.contains("cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS"),
        "{}",
        r.all()
    );
    assert!(!r.stderr.contains("did that rank die"), "{}", r.all());
}

/// Without the NVIDIA driver, -g is a clear error on every rank (exit 2), not a panic or a hang.
/// On a machine with the driver the same command must either run or fail with a named CUDA call.
#[test]
fn no_driver_is_a_clear_error() {
    let r = on_gpus(2, "all_reduce", ("8", "8"), &["-n", "1"], &[]);
    assert!(!r.all().contains("panicked"), "{}", r.all());
    if libcuda_installed() {
        assert!(
            r.code == Some(0) || r.stderr.contains("failed: CUDA_ERROR"),
            "{}",
            r.all()
        );
        return;
    }
    r.expect_code(2);
    for rank in 0..2 {
        assert!(
            r.stderr.lines().any(|l| l.contains(&format!("rank {rank} ("))
                && l.contains(
                    "a GPU buffer (-g/--gpu, --use-cuda) needs the NVIDIA driver, but libcuda.so could not be loaded"
                )),
            "{}",
            r.stderr
        );
    }
    assert!(r.stderr.contains("or run without -g"), "{}", r.stderr);
}

#[test]
fn gpu_flag_errors() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (&["-g"], &[STANDIN], "-g over the TCP transport needs --gpu-staging"),
        (&["-g", "2"], &[], "-g 2: meshrun drives one GPU per rank"),
        (&["-g", "0"], &[], "-g 0: meshrun drives one GPU per rank"),
        (
            &["--gpu-staging"],
            &[],
            "--gpu-ids and --gpu-staging apply to GPU buffers: add -g",
        ),
        (
            &["--p2p", "ipc"],
            &[],
            "--p2p chooses how GPU buffers move between ranks of a node: add -g",
        ),
        // The variables may be set for every run of a job: without -g they change nothing.
        (&[], &[("MESHRUN_P2P", "ipc"), ("NCCL_P2P_DISABLE", "1")], ""),
        (
            &["-g", "--gpu-staging", "--gpu-ids", "0,x"],
            &[],
            "\"x\" is not a GPU ordinal",
        ),
        (
            &["-g", "--gpu-staging", "--gpu-ids", "9"],
            &[STANDIN],
            "GPU 9 does not exist: 8 GPU(s) visible",
        ),
        (&["-g", "--gpu-staging", "--gpu-ids", "0,1,2"], &[STANDIN], ""),
        (
            &["-g", "--gpu-staging", "--baseline", "mpi"],
            &[],
            "--baseline mpi runs the MPI library on host buffers",
        ),
        (
            &["-g", "--gpu-staging"],
            &[("MESHRUN_GPU_STANDIN", "fpga")],
            "MESHRUN_GPU_STANDIN=\"fpga\" is not known",
        ),
    ];
    for (flags, env, want) in cases {
        let mut args = vec!["all_reduce", "-b", "8", "-e", "8", "-n", "1"];
        args.extend_from_slice(flags);
        let r = mpirun(2, &args, env, limits::LONG_JOB);
        if want.is_empty() {
            // A list with one id per local rank (and more) is fine; so are the P2P variables.
            r.expect_code(0);
            continue;
        }
        r.expect_code(2);
        assert!(r.stderr.contains(want), "{flags:?}: want {want:?} in\n{}", r.stderr);
        assert!(!r.all().contains("panicked"), "{}", r.all());
    }
}

/// The journals a job's stand-ins left in `dir` (one per rank), read and removed.
fn journals(dir: &std::path::Path, n: usize, r: &Run) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).expect("the journal directory") {
        v.push(std::fs::read_to_string(e.expect("a journal entry").path()).expect("a journal file"));
    }
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(v.len(), n, "{v:?}\n{}", r.all());
    v
}

/// A number a journal summary gives: `peer_copy=12` -> 12.
fn journal_count(j: &str, key: &str) -> u64 {
    let field = j.split_whitespace().find_map(|f| f.strip_prefix(&format!("{key}=")));
    field
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {j}"))
}

/// Collectives at 3 ranks on one node, their hops by CUDA IPC (the stand-in's shared memory
/// between the rank processes) and then over the network (staged): both verified bit for bit
/// against the same expected bytes, at sizes from 96 B to 3 MiB (several slices a transfer), root
/// 2. The header says which path the hops took, and the stand-ins' journals that the IPC run
/// copied into its peers' buffers and the network run did not. The ring (reduce-scatter and
/// all-gather), the chain whose root sends all its slices in one transfer while the others take
/// one each, and the exchanges of alltoall and sendrecv; the other collectives take IPC in the
/// tests above (the default on one node).
#[test]
fn collectives_give_the_same_verified_bytes_over_ipc_and_over_the_network() {
    for name in ["all_reduce", "broadcast", "alltoall", "sendrecv"] {
        for p2p in ["ipc", "net"] {
            let dir = fresh_dir(&format!("p2p-{name}-{p2p}"));
            let log = dir.to_str().expect("a UTF-8 temp dir");
            let extra = ["-f", "32", "-n", "1", "-w", "0", "-r", "2", "--p2p", p2p];
            let env = [STANDIN, ("MESHRUN_GPU_STANDIN_LOG", log)];
            let r = on_gpus(3, name, ("96", "3M"), &extra, &env);
            check_verified(&format!("{name} --p2p {p2p}"), &r, 4);
            let want = match p2p {
                "ipc" => "#  P2P: ipc within the node (ranks 0-2 on ".to_string(),
                _ => "#  P2P: net within the node (--p2p net)\n".to_string(),
            };
            assert!(r.stdout.contains(&want), "{name}: want {want:?} in\n{}", r.stdout);
            let mut total = 0;
            for j in journals(&dir, 3, &r) {
                assert!(j.trim_end().ends_with(" rules=kept"), "{name} --p2p {p2p}: {j}");
                let copies = journal_count(&j, "peer_copy");
                match p2p {
                    // Each rank opened the probe's buffers; a rank that only receives (the root
                    // of reduce) copies into no peer, so the job's count is checked below.
                    "ipc" => assert!(journal_count(&j, "ipc_open") >= 2, "{name}: {j}"),
                    _ => assert_eq!(copies, 0, "{name} over the network copied into a peer: {j}"),
                }
                total += copies;
            }
            if p2p == "ipc" {
                // At least one copy per rank for each size and placement (two runs each: timed
                // and verified).
                assert!(total >= 3 * 4 * 2 * 2, "{name}: {total} copies into peers over IPC");
            }
        }
    }
}

/// Where a rank's GPU cannot share its memory (the stand-in told to refuse, as a container
/// without a shared IPC namespace would), the default goes over the network and the header says
/// why, once; `--p2p ipc` is then an error naming the rank, its host and the way out; and NCCL's
/// `NCCL_P2P_DISABLE=1` chooses the network, the header saying so.
#[test]
fn ipc_refused_falls_back_to_the_network_or_fails_as_asked() {
    let one = |extra: &[&str], env: &[(&str, &str)]| {
        on_gpus(
            2,
            "all_reduce",
            ("1K", "1K"),
            &[&["-n", "1", "-w", "0"][..], extra].concat(),
            env,
        )
    };
    let refuse = ("MESHRUN_GPU_STANDIN_IPC", "0");
    let r = one(&[], &[STANDIN, refuse]);
    check_verified("IPC refused, the default", &r, 1);
    let line = r.stdout.lines().find(|l| l.starts_with("#  P2P: ")).unwrap_or_default();
    assert!(
        line.starts_with("#  P2P: net within the node (IPC refused: rank 0 (")
            && line.contains(") cannot share its GPU memory: GPU 0 (host stand-in")
            && line.contains("cuIpcGetMemHandle failed: CUDA_ERROR_NOT_SUPPORTED"),
        "{}",
        r.stdout
    );
    let r = one(&["--p2p", "ipc"], &[STANDIN, refuse]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("cannot share its GPU memory") && r.stderr.contains("; run with --p2p net"),
        "{}",
        r.all()
    );
    let dir = fresh_dir("p2p-json");
    let json = dir.join("run.json");
    let r = one(
        &["-J", json.to_str().expect("a UTF-8 temp dir")],
        &[STANDIN, ("NCCL_P2P_DISABLE", "1")],
    );
    check_verified("NCCL_P2P_DISABLE=1", &r, 1);
    assert!(
        r.stdout.contains("#  P2P: net within the node (NCCL_P2P_DISABLE=1)\n"),
        "{}",
        r.stdout
    );
    // The -J document says it too, as fields and as the header's line.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the -J file")).expect("JSON");
    let p2p = &doc["config"]["p2p"];
    assert_eq!(p2p["within_nodes"], "net", "{p2p}");
    assert_eq!(p2p["between_nodes"], "net", "{p2p}");
    assert_eq!(p2p["why"], "NCCL_P2P_DISABLE=1", "{p2p}");
    assert_eq!(p2p["line"], "net within the node (NCCL_P2P_DISABLE=1)", "{p2p}");
    let _ = std::fs::remove_dir_all(&dir);
}
