//! `meshrun devices` on fixture sysfs trees of real machines, and on this machine.

use std::time::Duration;

use e2e::*;

/// The sysfs tree of fixture machine `name`.
fn fixture(name: &str) -> String {
    root()
        .join("ranks/tests/fixtures/sysfs")
        .join(name)
        .display()
        .to_string()
}

/// `meshrun devices --sysfs-root FIXTURE ARGS...` on the fixture machine `name`.
fn devices_on(name: &str, args: &[&str]) -> Run {
    let sysfs = fixture(name);
    let mut all = vec!["devices", "--sysfs-root", &sysfs];
    all.extend_from_slice(args);
    meshrun(&all, limits::ONE_PROCESS)
}

#[test]
fn roce_host_table_and_choice() {
    let r = devices_on("mlx5-roce", &[]);
    r.expect_code(0);
    assert!(r.stdout.contains("n_gids_found=4"), "{}", r.stdout);
    assert!(r.stdout.contains("# mlx5_0 port 2: DOWN (3: Disabled)"), "{}", r.stdout);
    // A fixture's device is not this machine's to query: its interface's MTU only (the active
    // and largest MTU come from ibv_query_port, on a real /sys; the Soft-RoCE VM checks them).
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("# mlx5_0 port 1: ACTIVE") && l.contains(", interface MTU 9000, LID ")),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .trim_end()
            .ends_with("# selected: mlx5_0 port 1 GID 3 (RoCE v2, 10.0.1.5)"),
        "{}",
        r.stdout
    );
    let r = devices_on("mlx5-roce", &["-x", "9"]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("has no GID index 9; valid indexes: 0, 1, 2, 3"),
        "{}",
        r.stderr
    );
}

/// `--json`: the same devices, ports, GIDs and choice as the lines, with a schema version.
#[test]
fn roce_host_as_json() {
    let r = devices_on("mlx5-roce", &["--json"]);
    r.expect_code(0);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(
        (doc["test"].as_str(), doc["schema_version"].as_u64()),
        (Some("devices"), Some(1))
    );
    assert_eq!(doc["selected"], "mlx5_0 port 1 GID 3 (RoCE v2, 10.0.1.5)");
    let port1 = &doc["devices"][0]["ports"][0];
    assert_eq!(
        (port1["port"].as_u64(), port1["state"].as_str()),
        (Some(1), Some("ACTIVE"))
    );
    let gids = port1["gids"].as_array().expect("gids");
    assert_eq!(gids.len(), 4, "n_gids_found=4 as the lines say: {port1}");
    assert_eq!(
        (gids[3]["type"].as_str(), gids[3]["ipv4"].as_str()),
        (Some("RoCE v2"), Some("10.0.1.5"))
    );
    let r = devices_on("no-rdma", &["--json"]);
    r.expect_code(2);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON even without RDMA");
    assert!(
        doc["error"]
            .as_str()
            .is_some_and(|e| e.contains("no RDMA support loaded")),
        "{doc}"
    );
}

#[test]
fn infiniband_and_iwarp_hosts() {
    let r = devices_on("mlx5-ib", &["-d", "mlx5_1"]);
    r.expect_code(0);
    assert!(
        r.stdout.contains("# selected: mlx5_1 port 1 GID 0 (IB, "),
        "{}",
        r.stdout
    );
    let r = devices_on("siw", &["-d", "siw0"]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("iWARP") && r.stderr.contains("add -R (--rdma-cm)"),
        "{}",
        r.stderr
    );
    assert!(
        r.stdout
            .contains("# siw0 port 1: ACTIVE (5: LinkUp), Ethernet (iWARP: connects through rdma_cm, -R)"),
        "{}",
        r.stdout
    );
}

/// `--rdma-cm` asks for RDMA connections: on a machine without RDMA every rank says why in one
/// line and the job ends with status 2, with no quiet fall-back to TCP (as `--transport auto`
/// alone would make).
#[test]
fn rdma_cm_without_rdma_is_an_error_not_tcp() {
    let r = mpirun(
        2,
        &[
            "mesh-check",
            "--rdma-cm",
            "--sysfs-root",
            &fixture("no-rdma"),
            "--timeout",
            "20",
        ],
        &[],
        Duration::from_secs(60),
    );
    r.expect_code(2);
    for rank in 0..2 {
        assert!(
            r.stderr.contains(&format!("meshrun: rank {rank} (")) && r.stderr.contains("no RDMA support loaded"),
            "{}",
            r.all()
        );
    }
    assert!(
        !r.stderr.contains("using TCP") && !r.stdout.contains("mesh-check:"),
        "{}",
        r.all()
    );
}

#[test]
fn machine_without_rdma_gets_advice_not_a_panic() {
    let r = devices_on("no-rdma", &[]);
    r.expect_code(2);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("no RDMA support loaded") && r.stderr.contains("--transport tcp"),
        "{}",
        r.stderr
    );
}

#[test]
fn gpu_node_reports_gpu_nic_affinity() {
    let r = devices_on("gpu-2socket", &[]);
    r.expect_code(0);
    assert!(
        r.stdout.contains("# GPU 0000:18:00.0 (NUMA 0): mlx5_0 PIX, mlx5_1 SYS"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("# GPU 0000:1c:00.0 (NUMA 0): mlx5_0 PHB, mlx5_1 SYS"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("# GPU 0000:9a:00.0 (NUMA 1): mlx5_1 PHB, mlx5_0 SYS"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("warning"), "{}", r.stdout);
    // The BMC VGA device (vendor 0x1a03) is not an NVIDIA GPU.
    assert!(!r.stdout.contains("0000:03:00.0"), "{}", r.stdout);
}

/// `meshrun devices` with `env` set.
fn devices_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = meshrun_command(&["devices"]);
    cmd.args(args).envs(env.iter().copied());
    run_bounded(&mut cmd, limits::ONE_PROCESS)
}

/// `devices --gpu`, the GPUDirect probe the GPU bundle's check calls, on the host stand-in: one
/// line per GPU with the verdict first, then the device attributes, the probe buffer's
/// capability and its dma-buf export at the host page's alignment; the exit status says whether
/// every GPU can do GPUDirect RDMA; `--json` carries the same facts.
#[test]
fn gpu_probe_lines_and_status() {
    let standin = ("MESHRUN_GPU_STANDIN", "host");
    let r = devices_with(&["--gpu"], &[standin]);
    r.expect_code(0);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 8, "{}", r.stdout);
    for (i, l) in lines.iter().enumerate() {
        assert!(
            l.starts_with(&format!("# CUDA GPU {i} host stand-in for a GPU"))
                && l.contains("]: GPUDirect RDMA usable; "),
            "{l}"
        );
        assert!(l.contains(" buffer_capable=yes "), "{l}");
        assert!(l.contains(" dmabuf_export=ok(2097152 B at 4096-B alignment) "), "{l}");
        assert!(
            l.ends_with(" flush_options=host writes_ordering=none(0) flush=before-reads"),
            "{l}"
        );
    }
    // A device that orders RDMA writes for its kernels needs no flush.
    let r = devices_with(&["--gpu"], &[standin, ("MESHRUN_GPU_STANDIN_RDMA_ORDERING", "100")]);
    r.expect_code(0);
    assert!(
        r.stdout.contains("writes_ordering=owner(100) flush=not-needed"),
        "{}",
        r.stdout
    );
    // One that neither orders nor flushes them: found, said, exit 1.
    let r = devices_with(&["--gpu"], &[standin, ("MESHRUN_GPU_STANDIN_FLUSH_OPTIONS", "0")]);
    r.expect_code(1);
    assert!(
        r.stdout.contains(
            "GPUDirect RDMA NOT usable: RDMA writes are not ordered for this GPU's kernels and it cannot flush them"
        ),
        "{}",
        r.stdout
    );
    let r = devices_with(&["--gpu", "--json"], &[standin]);
    r.expect_code(0);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    let all = v.as_array().expect("an array, one per GPU");
    assert_eq!(all.len(), 8);
    assert_eq!(all[3]["gpu"]["ordinal"], 3);
    assert_eq!(all[3]["dmabuf_export"]["Ok"], 2097152);
    assert_eq!(all[3]["flush"], "Flush");
    // Without --gpu, --json is the whole listing, the GPUs' probe inside it.
    let r = devices_with(&["--json"], &[standin]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(v["gpudirect"].as_array().map(Vec::len), Some(8), "{v}");
}

/// Without the NVIDIA driver the probe says so in one line and exits 2; the RDMA listing carries
/// the same line before its choice, and a machine with neither still gets both reasons.
#[test]
fn gpu_probe_without_a_driver() {
    if libcuda_installed() {
        eprintln!("skipped: libcuda is installed here, so the no-driver line cannot show");
        return;
    }
    let r = devices_with(&["--gpu"], &[]);
    r.expect_code(2);
    assert_eq!(
        r.stdout.trim_end(),
        "# CUDA: libcuda.so not found here: no GPU to probe for GPUDirect RDMA (GPU buffers, -g and --use-cuda, need the NVIDIA driver)"
    );
    let r = devices_on("mlx5-roce", &[]);
    r.expect_code(0);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines[lines.len() - 2].starts_with("# CUDA: libcuda.so not found here"),
        "{}",
        r.stdout
    );
    let r = devices_on("no-rdma", &[]);
    r.expect_code(2);
    assert!(
        r.stdout.starts_with("# CUDA: libcuda.so not found here"),
        "{}",
        r.stdout
    );
    assert!(r.stderr.contains("no RDMA support loaded"), "{}", r.stderr);
}
