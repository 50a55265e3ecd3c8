//! Records the git revision the binary was built from, for `meshrun --version`.

fn main() {
    println!("cargo:rerun-if-env-changed=MESHRUN_GIT_REV");
    // A build without the checkout (a container build, which copies no .git) is told the
    // revision: `--build-arg MESHRUN_GIT_REV=$(git rev-parse --short=12 HEAD)`.
    if let Some(rev) = std::env::var("MESHRUN_GIT_REV").ok().filter(|r| !r.trim().is_empty()) {
        println!("cargo:rustc-env=MESHRUN_GIT_REV={}", rev.trim());
        return;
    }
    let rev = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown (not built from a git checkout)".into());
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| o.status.success() && !o.stdout.is_empty());
    println!(
        "cargo:rustc-env=MESHRUN_GIT_REV={rev}{}",
        if dirty { " (with local changes)" } else { "" }
    );
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/index");
}
