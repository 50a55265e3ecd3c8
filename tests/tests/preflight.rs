//! `meshrun preflight`: on a four-host namespace cluster where every host reads its own sysfs
//! tree (a GPU node with RoCE NICs, from the fixtures) and runs under its own limits, each
//! planted defect is named alone and a clean cluster has no finding; `--local` checks one node
//! against an expectation file without MPI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use e2e::*;

fn fixture(name: &str) -> PathBuf {
    root().join("ranks/tests/fixtures/sysfs").join(name)
}

fn cp(from: &Path, to: &Path) {
    let ok = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cp -a {} {}", from.display(), to.display());
}

fn write(p: &Path, text: &str) {
    std::fs::write(p, text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
}

/// A healthy GPU node: the two-socket GPU fixture with mlx5_0 port 1 on RoCE (the mlx5 RoCE
/// fixture's port), mlx5_1's PCIe link trained at its maximum, and nvidia_peermem loaded.
fn healthy_node(dir: &Path) -> PathBuf {
    let t = dir.join("healthy");
    cp(&fixture("gpu-2socket"), &t);
    let port = t.join("class/infiniband/mlx5_0/ports/1");
    std::fs::remove_dir_all(&port).unwrap();
    cp(&fixture("mlx5-roce/class/infiniband/mlx5_0/ports/1"), &port);
    let nic1 = t.join("devices/pci0000:97/0000:97:02.0/0000:98:00.0");
    write(&nic1.join("current_link_speed"), "16.0 GT/s PCIe\n");
    write(&nic1.join("current_link_width"), "16\n");
    std::fs::create_dir_all(t.join("module/nvidia_peermem")).unwrap();
    t
}

/// A copy of the healthy node named `name`, changed by `plant`.
fn planted(dir: &Path, healthy: &Path, name: &str, plant: impl FnOnce(&Path)) -> PathBuf {
    let t = dir.join(name);
    cp(healthy, &t);
    plant(&t);
    t
}

/// The lines of a preflight report that name something (`ERROR`/`WARNING`).
fn findings(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with("ERROR") || l.starts_with("WARNING"))
        .collect()
}

#[test]
fn preflight_names_each_planted_defect_alone_and_passes_a_clean_cluster() {
    let c = NetnsCluster::up_with_slots(4, 2);
    let dir = c.dir.join("trees");
    std::fs::create_dir_all(&dir).unwrap();
    let healthy = healthy_node(&dir);
    let view = c.dir.join("sys/this").display().to_string();
    let args = [
        "preflight",
        "--sysfs-root",
        view.as_str(),
        "--timeout",
        "60",
        "--max-bytes",
        "1M",
    ];
    for h in 0..4 {
        c.script(&["sysfs", &format!("mr-h{h}"), &healthy.display().to_string()])
            .expect_code(0);
    }
    // The locked memory a verbs rank of this job would register: staging within a 1 MiB budget
    // (MESHRUN_STAGING_BUDGET, forwarded to every rank by launch) for 7 peers (2 slots of 36 KiB
    // each way) and two 1 MiB buffers: 3,129,344 bytes, 3056 KiB. Healthy hosts keep this
    // machine's limit (raising it needs CAP_SYS_RESOURCE, which a container may lack); the
    // planted host gets 2 MiB, below the need.
    let need_kib: u64 = (2 * 2 * 36864 * 7 + 2 * (1 << 20)) / 1024;
    let (soft, _) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK).unwrap();
    let healthy_kib = if soft == nix::sys::resource::RLIM_INFINITY {
        "unlimited".to_string()
    } else {
        (soft / 1024).to_string()
    };
    assert!(
        soft == nix::sys::resource::RLIM_INFINITY || soft / 1024 >= need_kib,
        "precondition: this machine's memlock limit ({} KiB) must hold the {need_kib} KiB the healthy hosts need",
        soft / 1024
    );
    let run = |limit: Duration| {
        let mut cmd = c.launch_command(&[], &args);
        cmd.env("MESHRUN_STAGING_BUDGET", "1048576");
        run_bounded(&mut cmd, limit)
    };

    let clean = run(Duration::from_secs(120));
    clean.expect_code(0);
    assert_eq!(findings(&clean.stdout), Vec::<&str>::new(), "{}", clean.stdout);
    assert!(
        clean
            .stdout
            .contains("# Preflight: 4 nodes, 8 ranks: each against the others\n# PASS: no finding\n"),
        "{}",
        clean.stdout
    );

    // mr-h1: a port that trained at a lower rate.
    let h1 = planted(&dir, &healthy, "h1", |t| {
        write(&t.join("class/infiniband/mlx5_0/ports/1/rate"), "50 Gb/sec (2X HDR)\n")
    });
    // mr-h2: other firmware on mlx5_1, and ACS redirecting at the switch above GPU 0 and mlx5_0
    // (ReqRedir+ CmpltRedir+ in the ACS capability of the bridge's PCI configuration space).
    let h2 = planted(&dir, &healthy, "h2", |t| {
        write(&t.join("class/infiniband/mlx5_1/fw_ver"), "28.41.1000\n");
        let mut config = vec![0u8; 4096];
        config[0x100..0x104].copy_from_slice(&0x0001_000du32.to_le_bytes());
        config[0x106..0x108].copy_from_slice(&0x001du16.to_le_bytes());
        std::fs::write(t.join("devices/pci0000:16/0000:16:02.0/0000:17:00.0/config"), config).unwrap();
    });
    // mr-h3: the RoCE v2 IPv4 GID at index 5 instead of 3 (another order of address setup).
    let h3 = planted(&dir, &healthy, "h3", |t| {
        let p = t.join("class/infiniband/mlx5_0/ports/1");
        let gid = std::fs::read_to_string(p.join("gids/3")).unwrap();
        write(&p.join("gids/5"), &gid);
        write(&p.join("gids/3"), "0000:0000:0000:0000:0000:0000:0000:0000\n");
        std::fs::rename(p.join("gid_attrs/types/3"), p.join("gid_attrs/types/5")).unwrap();
        std::fs::rename(p.join("gid_attrs/ndevs/3"), p.join("gid_attrs/ndevs/5")).unwrap();
    });
    for (host, tree) in [("mr-h1", &h1), ("mr-h2", &h2), ("mr-h3", &h3)] {
        c.script(&["sysfs", host, &tree.display().to_string()]).expect_code(0);
    }
    // mr-h3's ranks start with memlock at 2 MiB, as under a daemon with a lower LimitMEMLOCK.
    c.script(&["limit", "mr-h3", "memlock", "2097152"]).expect_code(0);

    let r = run(Duration::from_secs(120));
    r.expect_code(1);
    assert_eq!(
        findings(&r.stdout),
        vec![
            format!(
                "ERROR   mr-h3 rank 6, mr-h3 rank 7: process: memlock_kib 2048, below the {need_kib} KiB a verbs run of 8 \
                 ranks registers per rank (ulimit -l unlimited; LimitMEMLOCK=infinity for slurmd or sshd; memlock in \
                 /etc/security/limits.conf)"
            )
            .as_str(),
            "WARNING mr-h2: PCIe ACS redirects peer-to-peer traffic at 0000:17:00.0 (GPU 0000:18:00.0 to mlx5_0, GPU \
             0000:1c:00.0 to mlx5_0): GPUDirect RDMA goes through the root complex (disable ACS there: setpci -s BRIDGE \
             ECAP_ACS+0x6.w=0000, or in the BIOS)",
            "WARNING mr-h1: mlx5_0 port 1: rate 50 Gb/sec (2X HDR), 3 others 100 Gb/sec (4X EDR)",
            "WARNING mr-h3: mlx5_0 port 1: roce_v2_ipv4_index 5, 3 others 3",
            "WARNING mr-h2: mlx5_1: fw_ver 28.41.1000, 3 others 28.39.1002",
        ],
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.ends_with(
            "# FAIL: 1 error, 4 warnings (an error breaks or misleads a run: fix it before testing the fabric)\n"
        ),
        "{}",
        r.stdout
    );

    // pairwise and a collective print the same findings at the head of their report, less what
    // their own `# Config:` lines judge from the NIC they use (port rates, MTUs, PCIe links) and
    // less the memlock bar (their mesh has registered its memory already). Over TCP here: the
    // trees' RDMA devices are only read.
    let tcp = ["--transport", "tcp", "--sysfs-root", view.as_str(), "--timeout", "60"];
    for test in [
        &["pairwise", "-n", "20"][..],
        &["all_reduce", "-b", "8", "-e", "64", "-n", "2"][..],
    ] {
        let mut a: Vec<&str> = test.to_vec();
        a.extend(tcp);
        let out = c.launch(&[], &a, Duration::from_secs(180));
        let head: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("# Config: ")).collect();
        let memlock =
            format!("# Config: warning mr-h3 rank 6, mr-h3 rank 7: process: memlock_kib 2048, 6 others {healthy_kib}");
        assert_eq!(
            head,
            vec![
                "# Config: warning mr-h2: PCIe ACS redirects peer-to-peer traffic at 0000:17:00.0 (GPU 0000:18:00.0 to \
                 mlx5_0, GPU 0000:1c:00.0 to mlx5_0): GPUDirect RDMA goes through the root complex (disable ACS there: \
                 setpci -s BRIDGE ECAP_ACS+0x6.w=0000, or in the BIOS)",
                "# Config: warning mr-h3: mlx5_0 port 1: roce_v2_ipv4_index 5, 3 others 3",
                "# Config: warning mr-h2: mlx5_1: fw_ver 28.41.1000, 3 others 28.39.1002",
                // Not held to a bar here, but it still differs from every other rank's.
                memlock.as_str(),
            ],
            "{}:\n{}",
            test[0],
            out.stdout
        );
    }
}

/// An expectation file for the healthy node above.
const EXPECT: &str = r#"
[type]
name = "test GPU node"
source = "tests/tests/preflight.rs"

[[part]]
scope = "mlx5_? port 1"
count = 2
state = "4: ACTIVE"

[[part]]
scope = "mlx5_0 port 1"
rate = "100 Gb/sec*"
gid = "RoCE v2 IPv4"

[[part]]
scope = "node"
gpus = 3
nvidia_peermem = "loaded"
"#;

/// A fresh directory `meshrun-preflight-NAME-PID` with a healthy node in it and the
/// expectation file it meets: (the directory, the node, the file).
fn healthy_node_and_expectation(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = fresh_dir(&format!("preflight-{name}"));
    let healthy = healthy_node(&dir);
    let expect = dir.join("node.toml");
    write(&expect, EXPECT);
    (dir, healthy, expect)
}

/// `meshrun preflight --local` on the sysfs tree `tree` against the expectation file `expect`.
fn local(tree: &Path, expect: &Path) -> Run {
    // Started directly, with no MPI launcher's variables and no mpirun on PATH: --local never
    // initialises MPI.
    let mut cmd = Command::new(meshrun_bin());
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .args(["preflight", "--local", "--transport", "tcp", "--sysfs-root"])
        .arg(tree)
        .arg("--expect")
        .arg(expect);
    run_bounded(&mut cmd, limits::ONE_PROCESS)
}

#[test]
fn local_checks_one_node_against_an_expectation_file_without_mpi() {
    let (dir, healthy, expect) = healthy_node_and_expectation("local");

    let ok = local(&healthy, &expect);
    ok.expect_code(0);
    assert!(
        ok.stdout.starts_with(&format!(
            "# Preflight: this node against test GPU node ({})\n",
            expect.display()
        )),
        "{}",
        ok.stdout
    );
    assert!(ok.stdout.ends_with("# PASS: no finding\n"), "{}", ok.stdout);
    // --json: every fact of the node, the findings and the outcome; never over an existing file.
    let json = dir.join("node.json");
    let mut cmd = Command::new(meshrun_bin());
    cmd.args(["preflight", "--local", "--transport", "tcp", "--sysfs-root"])
        .arg(&healthy)
        .arg("--json")
        .arg(&json);
    run_bounded(&mut cmd, limits::ONE_PROCESS).expect_code(0);
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        (doc["test"].as_str(), doc["pass"].as_bool()),
        (Some("preflight"), Some(true))
    );
    let facts = doc["inventory"][0]["node"].as_array().unwrap();
    assert!(
        facts
            .iter()
            .any(|f| f["scope"] == "mlx5_0 port 1" && f["name"] == "gid" && f["value"] == "RoCE v2 IPv4"),
        "{doc}"
    );
    run_bounded(&mut cmd, limits::ONE_PROCESS).expect_code(2);

    let slow = planted(&dir, &healthy, "slow", |t| {
        write(&t.join("class/infiniband/mlx5_0/ports/1/rate"), "50 Gb/sec (2X HDR)\n");
        write(&t.join("class/infiniband/mlx5_1/ports/1/state"), "1: DOWN\n");
        std::fs::remove_dir_all(t.join("module/nvidia_peermem")).unwrap();
    });
    let bad = local(&slow, &expect);
    bad.expect_code(1);
    let lines = findings(&bad.stdout);
    for want in [
        "ERROR   ",
        ": mlx5_1 port 1: state 1: DOWN, expected 4: ACTIVE (test GPU node)",
        ": mlx5_0 port 1: rate 50 Gb/sec (2X HDR), expected 100 Gb/sec* (test GPU node)",
        ": node: nvidia_peermem not loaded, expected loaded (test GPU node)",
    ] {
        assert!(lines.iter().any(|l| l.contains(want)), "{want}\n{}", bad.stdout);
    }

    // Bad input: one line, status 2.
    write(&dir.join("bad.toml"), "[[part]]\nrate = 1\n");
    let r = local(&healthy, &dir.join("bad.toml"));
    r.expect_code(2);
    assert_eq!(
        r.stderr.trim(),
        format!(
            "meshrun: --expect {}: part 1 ([[part]] number 1): has no `scope` (the scope preflight prints, e.g. \"mlx5_* port 1\")",
            dir.join("bad.toml").display()
        )
    );
    let r = local(&healthy, &dir.join("missing.toml"));
    r.expect_code(2);
    assert!(r.stderr.trim().starts_with("meshrun: --expect "), "{}", r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Slurm health-check recipe, run by Slurm itself: slurmd runs deploy/slurm/meshrun-healthcheck
/// as its HealthCheckProgram on every node, each node reading its own sysfs tree. A defect
/// planted on mr-h1 drains mr-h1 alone, with the finding as the reason; fixed, the node is resumed.
#[test]
fn slurm_s_health_check_drains_a_node_that_fails_preflight_and_resumes_it_when_fixed() {
    let (dir, healthy, expect) = healthy_node_and_expectation("slurm");
    let slurm = SlurmCluster::dir_of_this_process();
    // The settings file the recipe reads (an operator's /etc/default/meshrun-healthcheck), and a
    // HealthCheckProgram that points the recipe at it.
    let conf = dir.join("healthcheck.conf");
    write(
        &conf,
        &format!(
            "MESHRUN={}\nEXPECT={}\nPREFLIGHT_ARGS=\"--transport tcp --sysfs-root {}\"\nexport SLURM_CONF={}\n",
            meshrun_bin().display(),
            expect.display(),
            slurm.join("net/sys/this").display(),
            slurm.join("slurm.conf").display()
        ),
    );
    let program = dir.join("healthcheck");
    write(
        &program,
        &format!(
            "#!/bin/sh\nMESHRUN_HEALTHCHECK_CONF={} exec {}\n",
            conf.display(),
            root().join("deploy/slurm/meshrun-healthcheck").display()
        ),
    );
    assert!(Command::new("chmod")
        .arg("755")
        .arg(&program)
        .status()
        .is_ok_and(|s| s.success()));
    let c = SlurmCluster::up_with_env(
        2,
        2,
        &[
            ("MR_SLURM_SYSFS", healthy.to_str().unwrap()),
            ("MR_SLURM_HEALTHCHECK", program.to_str().unwrap()),
        ],
    );
    let node = |n: &str| {
        run_bounded(
            c.command("scontrol", &dir).args(["show", "node", n]),
            Duration::from_secs(30),
        )
        .stdout
    };
    let wait = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        while !ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "{what} within 90 s (HealthCheckInterval=5):\nmr-h0: {}\nmr-h1: {}",
                node("mr-h0"),
                node("mr-h1")
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    let rate = c.dir.join("net/sys/mr-h1/class/infiniband/mlx5_0/ports/1/rate");
    let good = std::fs::read_to_string(&rate).unwrap();
    write(&rate, "50 Gb/sec (2X HDR)\n");
    wait("mr-h1 drained by the health check", &|| node("mr-h1").contains("DRAIN"));
    let h1 = node("mr-h1");
    assert!(
        h1.contains(
            "Reason=meshrun preflight: mr-h1: mlx5_0 port 1: rate 50 Gb/sec (2X HDR), expected 100 Gb/sec* (test GPU node)"
        ),
        "{h1}"
    );
    let h0 = node("mr-h0");
    assert!(
        !h0.contains("DRAIN") && !h0.contains("Reason="),
        "mr-h0 was touched: {h0}"
    );
    write(&rate, &good);
    wait("mr-h1 resumed once it passes", &|| !node("mr-h1").contains("DRAIN"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Kubernetes recipe, deploy/preflight-daemonset.yaml, as the kubelet would run it: its
/// container's command, environment and mounts under podman (the node's /sys a fixture tree, the
/// ConfigMap a directory holding node.toml), and its readiness probe run in the container. Ready
/// on a healthy node; a defect planted in the node's tree makes it not Ready, and the log says why.
#[test]
fn the_daemonset_s_pod_is_ready_only_while_its_node_passes() {
    let doc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(root().join("deploy/preflight-daemonset.yaml")).unwrap())
            .unwrap();
    let spec = &doc["spec"]["template"]["spec"];
    let c = &spec["containers"][0];
    let strings = |v: &serde_yaml::Value| -> Vec<String> {
        v.as_sequence()
            .unwrap_or_else(|| panic!("not a list: {v:?}"))
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    let command = strings(&c["command"]);
    let manifest_env: Vec<(String, String)> = c["env"]
        .as_sequence()
        .map(|e| {
            e.iter()
                .map(|x| {
                    (
                        x["name"].as_str().unwrap().to_string(),
                        x["value"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let probe = strings(&c["readinessProbe"]["exec"]["command"]);
    assert_eq!(c["image"].as_str(), Some(IMAGE));
    // Each mount's volume: the node's /sys (hostPath) and the expectation ConfigMap.
    let mount_of = |volume: &str| -> String {
        let m = c["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|m| m["name"].as_str() == Some(volume));
        m.and_then(|m| m["mountPath"].as_str()).unwrap().to_string()
    };
    let volumes = spec["volumes"].as_sequence().unwrap();
    let sys = volumes
        .iter()
        .find(|v| v["hostPath"]["path"].as_str() == Some("/sys"))
        .expect("a hostPath /sys volume");
    let cm = volumes
        .iter()
        .find(|v| v["configMap"]["name"].is_string())
        .expect("a ConfigMap volume");
    let sys_at = mount_of(sys["name"].as_str().unwrap());
    let cm_at = mount_of(cm["name"].as_str().unwrap());

    let image = built_image();
    let dir = fresh_dir("preflight-ds");
    std::fs::create_dir_all(dir.join("configmap")).unwrap();
    let node = healthy_node(&dir);
    write(&dir.join("configmap/node.toml"), EXPECT);
    let name = format!("meshrun-preflight-ds-{}", std::process::id());
    /// Removes the pod's container however the test ends (a failed assertion included).
    struct Removed(String);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = Command::new("podman").args(["rm", "-f", "-t", "0", &self.0]).output();
        }
    }
    let _removed = Removed(name.clone());
    let podman = |args: &[&str]| run_bounded(Command::new("podman").args(args), Duration::from_secs(60));
    // The pod as the kubelet starts it, with `env` added to the manifest's environment.
    let start = |env: &[(&str, &str)]| {
        let _ = podman(&["rm", "-f", "-t", "0", &name]);
        let mut run = Command::new("podman");
        // runc and limits within this machine's, as the MPIJob tests run pods (root here lacks
        // CAP_SYS_RESOURCE to raise a container's limits above the host's hard ones).
        run.args(["--runtime", "runc", "run", "-d", "--name", &name, "--network", "none"])
            .args(["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]);
        // The manifest's environment, the interval shortened so the test sees several checks,
        // and the caller's.
        let mut all: Vec<(String, String)> = manifest_env.clone();
        all.push(("PREFLIGHT_INTERVAL".into(), "1".into()));
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        for (k, v) in &all {
            run.arg("-e").arg(format!("{k}={v}"));
        }
        run.arg("-v")
            .arg(format!("{}:{sys_at}:ro", node.display()))
            .arg("-v")
            .arg(format!("{}:{cm_at}:ro", dir.join("configmap").display()))
            .arg(image)
            .args(&command);
        let started = run_bounded(&mut run, Duration::from_secs(60));
        assert_eq!(started.code, Some(0), "podman run:\n{}", started.all());
    };
    let ready = || {
        let mut args = vec!["exec".to_string(), name.clone()];
        args.extend(probe.iter().cloned());
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        podman(&a).code == Some(0)
    };
    // Ready (or not) as the probe says after the first check has run.
    let wait = |want: bool, what: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let checked = podman(&["exec", &name, "test", "-s", "/tmp/status"]).code == Some(0);
            if checked && ready() == want {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what} within 60 s; log:\n{}",
                podman(&["logs", &name]).all()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };

    // As shipped: a pod gets the container runtime's locked-memory limit, here this machine's.
    // A verbs rank of the default run registers 136 MiB (8 MiB of staging for one peer, two
    // 64 MiB buffers); below that, the node is not ready for RDMA, and the pod says so.
    let need_kib = 139_264;
    let (memlock, _) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK).unwrap();
    start(&[]);
    if memlock != nix::sys::resource::RLIM_INFINITY && memlock / 1024 < need_kib {
        wait(false, "not Ready with memlock below a verbs run's need");
        let log = podman(&["logs", &name]).all();
        let want = format!(
            "process: memlock_kib {}, below the {need_kib} KiB a verbs run of 2 ranks registers",
            memlock / 1024
        );
        assert!(log.contains(&want), "{want}\n{log}");
    } else {
        wait(true, "Ready with memlock enough for a verbs run");
    }

    // A run whose need fits this machine's limit (the largest message, MESHRUN_MAX_BYTES as
    // --max-bytes, and the staging budget shrunk): Ready while the node is healthy, not Ready once
    // a port trains lower, with the finding in the log.
    start(&[("MESHRUN_MAX_BYTES", "1M"), ("MESHRUN_STAGING_BUDGET", "1048576")]);
    wait(true, "Ready on a healthy node");
    write(
        &node.join("class/infiniband/mlx5_0/ports/1/rate"),
        "50 Gb/sec (2X HDR)\n",
    );
    wait(false, "not Ready once the node's port trained at 50 Gb/s");
    let log = podman(&["logs", &name]).all();
    assert!(
        log.contains(": mlx5_0 port 1: rate 50 Gb/sec (2X HDR), expected 100 Gb/sec* (test GPU node)"),
        "{log}"
    );
    let _ = podman(&["rm", "-f", "-t", "0", &name]);
    let _ = std::fs::remove_dir_all(&dir);
}
