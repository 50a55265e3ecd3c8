//! What this machine has and the outside tools the tests call: libcuda, RDMA devices,
//! Prometheus' promtool, and the podman image built from this checkout.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::{root, run_bounded, Run};

/// Whether the NVIDIA driver's libcuda is on this machine (the linker cache says so).
pub fn libcuda_installed() -> bool {
    Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("libcuda.so"))
        .unwrap_or(false)
}

/// Whether this machine has RDMA devices (anything under /sys/class/infiniband).
pub fn rdma_devices_here() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// `promtool check metrics` (Prometheus' own linter) on the file at `path`: its exit status and
/// what it said. promtool comes from Debian's prometheus package, taken out into target/tools by
/// scripts/install-deps.
pub fn promtool_check(path: &Path) -> Run {
    let tool = root().join("target/tools/promtool");
    assert!(
        tool.exists(),
        "{} missing: scripts/install-deps puts promtool there",
        tool.display()
    );
    // promtool reads the metrics on its stdin (run_bounded gives commands none).
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "\"$0\" check metrics < \"$1\""]).arg(tool).arg(path);
    run_bounded(&mut cmd, Duration::from_secs(30))
}

/// The image the manifests name, which CI builds.
pub const IMAGE: &str = "localhost/meshrun:latest";

/// `MESHRUN_IMAGE` where set, else [`IMAGE`]: the tag scripts/container-image builds and the
/// podman tests run, so two checkouts on one machine need not build over each other's image.
fn image_tag() -> String {
    std::env::var("MESHRUN_IMAGE")
        .ok()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| IMAGE.to_string())
}

/// The image built from this checkout (scripts/container-image: this tree's release binary on
/// the Containerfile's runtime stage), once per test process: [`IMAGE`], or `MESHRUN_IMAGE`.
pub fn built_image() -> &'static str {
    static BUILT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        assert!(
            Command::new("podman").arg("--version").output().is_ok(),
            "podman missing: scripts/install-deps installs it"
        );
        let tag = image_tag();
        let mut build = Command::new(root().join("scripts/container-image"));
        build.arg("build").env("MESHRUN_IMAGE", &tag).current_dir(root());
        let r = run_bounded(&mut build, Duration::from_secs(2400));
        assert_eq!(r.code, Some(0), "scripts/container-image build:\n{}", r.all());
        tag
    })
}
