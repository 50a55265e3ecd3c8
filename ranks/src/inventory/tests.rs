use std::path::{Path, PathBuf};

use super::*;

pub(super) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

pub(super) fn needs() -> Needs {
    Needs {
        ranks: 4,
        memlock: 64 << 20,
        device: None,
    }
}

pub(super) fn value<'a>(facts: &'a [Fact], scope: &str, name: &str) -> Option<&'a str> {
    facts
        .iter()
        .find(|f| f.scope == scope && f.name == name)
        .map(|f| f.value.as_str())
}

/// A copy of a fixture tree to plant a defect in (symlinks kept: they are relative).
pub(super) fn copy(name: &str, to: &Path) -> PathBuf {
    let dst = to.join(name);
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture(name))
        .arg(&dst)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cp -a {name}");
    dst
}

#[test]
fn a_roce_node_s_ports_gids_and_firmware() {
    let (facts, local) = node(
        &fixture("mlx5-roce"),
        Path::new("/nonexistent"),
        &probe::TreeOnly,
        "h0",
        &needs(),
    );
    assert_eq!(value(&facts, "node", "rdma_devices"), Some("1"));
    assert_eq!(value(&facts, "mlx5_0 port 1", "state"), Some("4: ACTIVE"));
    assert_eq!(value(&facts, "mlx5_0 port 1", "link_layer"), Some("Ethernet"));
    assert_eq!(value(&facts, "mlx5_0 port 1", "gid"), Some("RoCE v2 IPv4"));
    assert_eq!(value(&facts, "mlx5_0 port 1", "roce_v2_ipv4_index"), Some("3"));
    assert!(value(&facts, "mlx5_0", "fw_ver").is_some());
    assert_eq!(value(&facts, "node", "gpus"), Some("0"));
    assert!(local.is_empty(), "{local:?}");
}

#[test]
fn a_gpu_node_without_defects_and_with_acs_and_counters_planted() {
    let root = fixture("gpu-2socket");
    let (facts, local) = node(&root, Path::new("/nonexistent"), &probe::TreeOnly, "h0", &needs());
    assert_eq!(value(&facts, "node", "gpus"), Some("3"));
    assert_eq!(value(&facts, "gpu 0000:18:00.0", "closest_nic"), Some("mlx5_0 PIX"));
    let texts: Vec<&str> = local.iter().map(|f| f.text.as_str()).collect();
    // The fixture's own defects: mlx5_1 trained at x8, no nvidia_peermem, GPU far from a NIC.
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("mlx5_1: PCIe link trained at 8.0 GT/s x8")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("GPUDirect RDMA: nvidia_peermem is not loaded")),
        "{texts:?}"
    );
    assert!(!texts.iter().any(|t| t.contains("ACS")), "{texts:?}");

    // Plant: ACS redirect on the switch port above GPU 0 and mlx5_0, an error counter, peermem.
    let tmp = tempdir();
    let root = copy("gpu-2socket", &tmp);
    let mut config = vec![0u8; 4096];
    config[0x100..0x104].copy_from_slice(&0x0001_000du32.to_le_bytes());
    config[0x106..0x108].copy_from_slice(&0x001du16.to_le_bytes());
    std::fs::write(
        root.join("devices/pci0000:16/0000:16:02.0/0000:17:00.0/config"),
        &config,
    )
    .unwrap();
    let counters = root.join("class/infiniband/mlx5_0/ports/1/counters");
    std::fs::create_dir_all(&counters).unwrap();
    std::fs::write(counters.join("symbol_error"), "1204\n").unwrap();
    std::fs::write(counters.join("port_xmit_data"), "99999\n").unwrap();
    std::fs::create_dir_all(root.join("module/nvidia_peermem")).unwrap();
    let (facts, local) = node(&root, Path::new("/nonexistent"), &probe::TreeOnly, "h0", &needs());
    let texts: Vec<&str> = local.iter().map(|f| f.text.as_str()).collect();
    assert_eq!(value(&facts, "node", "nvidia_peermem"), Some("loaded"));
    assert!(
        texts.contains(
            &"PCIe ACS redirects peer-to-peer traffic at 0000:17:00.0 (GPU 0000:18:00.0 to mlx5_0, GPU 0000:1c:00.0 to \
              mlx5_0): GPUDirect RDMA goes through the root complex (disable ACS there: setpci -s BRIDGE \
              ECAP_ACS+0x6.w=0000, or in the BIOS)"
        ),
        "{texts:?}"
    );
    assert!(
        texts.contains(
            &"mlx5_0 port 1: error counters already non-zero: symbol_error 1204 (since the last reset; clear them and \
              rerun to see if they grow)"
        ),
        "{texts:?}"
    );
    assert!(!texts.iter().any(|t| t.starts_with("GPUDirect RDMA")), "{texts:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn a_port_down_or_a_missing_device_breaks_the_run() {
    let tmp = tempdir();
    let root = copy("mlx5-roce", &tmp);
    std::fs::write(root.join("class/infiniband/mlx5_0/ports/1/state"), "1: DOWN\n").unwrap();
    let (_, local) = node(&root, Path::new("/nonexistent"), &probe::TreeOnly, "h0", &needs());
    assert!(
        local
            .iter()
            .any(|f| f.severity == Severity::Error && f.text.starts_with("no active RDMA port on mlx5_0")),
        "{local:?}"
    );
    let n = Needs {
        device: Some("mlx5_4".into()),
        ..needs()
    };
    let (_, local) = node(
        &fixture("mlx5-roce"),
        Path::new("/nonexistent"),
        &probe::TreeOnly,
        "h0",
        &n,
    );
    assert_eq!(local[0].text, "RDMA device mlx5_4 not found (this node has mlx5_0)");
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn acs_is_read_from_the_extended_capability_chain() {
    let mut c = vec![0u8; 4096];
    assert!(!acs_redirects(&c), "no capability");
    // AER (0x0001) at 0x100 pointing at ACS at 0x148, SV and UF only: no redirect.
    c[0x100..0x104].copy_from_slice(&(0x0001u32 | (1 << 16) | (0x148 << 20)).to_le_bytes());
    c[0x148..0x14c].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
    c[0x14e..0x150].copy_from_slice(&0x0011u16.to_le_bytes());
    assert!(!acs_redirects(&c));
    c[0x14e..0x150].copy_from_slice(&0x0015u16.to_le_bytes());
    assert!(acs_redirects(&c), "ReqRedir+");
    assert!(!acs_redirects(&c[..64]), "64 bytes: what an unprivileged read gets");
}

#[test]
fn versions_limits_and_variables() {
    let vars = job_variables(
        [
            ("NCCL_IB_HCA", "mlx5_0"),
            ("PATH", "/bin"),
            ("MESHRUN_FAULT", "x"),
            ("MESHRUN_TIMEOUT", "30"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string())),
    );
    assert_eq!(
        vars,
        vec![
            ("MESHRUN_TIMEOUT".to_string(), "30".to_string()),
            ("NCCL_IB_HCA".to_string(), "mlx5_0".to_string())
        ]
    );
    let n = Needs {
        memlock: u64::MAX - 1,
        ..needs()
    };
    let (facts, local) = process("h0 rank 0", "0.1.0 (abc)", &n, true, &vars);
    assert_eq!(value(&facts, "process", "meshrun"), Some("0.1.0 (abc)"));
    assert_eq!(value(&facts, "env", "NCCL_IB_HCA"), Some("mlx5_0"));
    let unlimited = value(&facts, "process", "memlock_kib") == Some("unlimited");
    // Below an impossible need unless memlock is unlimited; never without RDMA.
    assert_eq!(
        local.iter().any(|f| f.text.starts_with("process: memlock_kib")),
        !unlimited,
        "{local:?}"
    );
    assert!(process("h0 rank 0", "v", &n, false, &[])
        .1
        .iter()
        .all(|f| !f.text.contains("memlock")));
    assert_eq!(rdma_core_version(Path::new("/nonexistent")), None);
}

#[test]
fn rdma_core_from_the_mapped_library() {
    let tmp = tempdir();
    std::fs::create_dir_all(tmp.join("self")).unwrap();
    std::fs::write(
        tmp.join("self/maps"),
        "7f1c2a000000-7f1c2a010000 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0\n",
    )
    .unwrap();
    assert_eq!(rdma_core_version(&tmp).as_deref(), Some("44 (libibverbs.so.1.14.44.0)"));
    let _ = std::fs::remove_dir_all(&tmp);
}

pub(super) fn tempdir() -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("meshrun-inventory-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `/proc/driver/nvidia/version` as the two kinds of driver write it (the open kernel modules'
/// first line as NVIDIA's open-gpu-kernel-modules README shows it; the proprietary one's as in
/// public bug reports), and GPUDirect's readiness from it.
#[test]
fn the_nvidia_driver_and_dma_buf() {
    let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build  \
                (dvs-builder@U16-T02-35-3)  Sat Aug 19 01:13:34 UTC 2023\nGCC version:  gcc version 11.4.0\n";
    let proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.223.02  Sat Oct  7 15:39:11 UTC 2023\n";
    assert_eq!(nvidia_driver(open), Some(("535.104.05".to_string(), true)));
    assert_eq!(nvidia_driver(proprietary), Some(("470.223.02".to_string(), false)));
    assert_eq!(nvidia_driver("garbage"), None);
    assert_eq!(kernel_version("6.1.0-18-amd64"), Some((6, 1)));
    assert_eq!(kernel_version("5.4.0"), Some((5, 4)));

    // A GPU node with the open modules on a 6.1 kernel: dma-buf possible, no warning without peermem.
    let tmp = tempdir();
    std::fs::create_dir_all(tmp.join("driver/nvidia")).unwrap();
    std::fs::create_dir_all(tmp.join("sys/kernel")).unwrap();
    std::fs::write(tmp.join("driver/nvidia/version"), open).unwrap();
    std::fs::write(tmp.join("sys/kernel/osrelease"), "6.1.0-18-amd64\n").unwrap();
    let (facts, local) = node(&fixture("gpu-2socket"), &tmp, &probe::TreeOnly, "h0", &needs());
    assert_eq!(value(&facts, "node", "nvidia_driver"), Some("535.104.05"));
    assert_eq!(value(&facts, "node", "dma_buf"), Some("possible"));
    assert!(!local.iter().any(|f| f.about == "peermem"), "{local:?}");
    // The proprietary driver on the same kernel: warned, with the reason.
    std::fs::write(tmp.join("driver/nvidia/version"), proprietary).unwrap();
    let (_, local) = node(&fixture("gpu-2socket"), &tmp, &probe::TreeOnly, "h0", &needs());
    let w = local.iter().find(|f| f.about == "peermem").map(|f| f.text.as_str());
    assert_eq!(
        w,
        Some(
            "GPUDirect RDMA: nvidia_peermem is not loaded (modprobe nvidia_peermem) and the NVIDIA driver is the \
             proprietary one (dma-buf needs the open kernel modules): GPU buffers need --gpu-staging"
        )
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
