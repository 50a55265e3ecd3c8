//! `meshrun devices` on fixture sysfs trees of real machines, and on this machine.

use std::time::Duration;

use e2e::*;

fn fixture(name: &str) -> String {
    root()
        .join("ranks/tests/fixtures/sysfs")
        .join(name)
        .display()
        .to_string()
}

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn roce_host_table_and_choice() {
    let r = meshrun(&["devices", "--sysfs-root", &fixture("mlx5-roce")], LIMIT);
    r.expect_code(0);
    assert!(r.stdout.contains("n_gids_found=4"), "{}", r.stdout);
    assert!(r.stdout.contains("# mlx5_0 port 2: DOWN (3: Disabled)"), "{}", r.stdout);
    assert!(
        r.stdout
            .trim_end()
            .ends_with("# selected: mlx5_0 port 1 GID 3 (RoCE v2, 10.0.1.5)"),
        "{}",
        r.stdout
    );
    let r = meshrun(&["devices", "--sysfs-root", &fixture("mlx5-roce"), "-x", "9"], LIMIT);
    r.expect_code(2);
    assert!(
        r.stderr.contains("has no GID index 9; valid indexes: 0, 1, 2, 3"),
        "{}",
        r.stderr
    );
}

#[test]
fn infiniband_and_iwarp_hosts() {
    let r = meshrun(&["devices", "--sysfs-root", &fixture("mlx5-ib"), "-d", "mlx5_1"], LIMIT);
    r.expect_code(0);
    assert!(
        r.stdout.contains("# selected: mlx5_1 port 1 GID 0 (IB, "),
        "{}",
        r.stdout
    );
    let r = meshrun(&["devices", "--sysfs-root", &fixture("siw"), "-d", "siw0"], LIMIT);
    r.expect_code(2);
    assert!(r.stderr.contains("iWARP"), "{}", r.stderr);
}

#[test]
fn machine_without_rdma_gets_advice_not_a_panic() {
    let r = meshrun(&["devices", "--sysfs-root", &fixture("no-rdma")], LIMIT);
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
    let r = meshrun(&["devices", "--sysfs-root", &fixture("gpu-2socket")], LIMIT);
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
