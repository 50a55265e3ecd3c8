//! Where things are: the workspace, the `meshrun` binary under test, the files of a directory,
//! and a fresh scratch directory of a test's own.

use std::path::{Path, PathBuf};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The `meshrun` binary under test: `$MESHRUN_BIN`, or the workspace's debug build.
pub fn meshrun_bin() -> PathBuf {
    if let Ok(p) = std::env::var("MESHRUN_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join("target"));
    let p = target.join("debug").join("meshrun");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --bins` first (scripts/test does)",
        p.display()
    );
    p
}

/// Every file and folder under `root` (build outputs, `target*`, and `.git` left out), relative
/// to it, folders before what they hold, each with whether it is a folder.
pub fn project_tree(root: &Path) -> Vec<(PathBuf, bool)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, bool)>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name == ".git" || name.starts_with("target") {
                continue;
            }
            let rel = p.strip_prefix(root).map(Path::to_path_buf).unwrap_or_default();
            let is_dir = p.is_dir();
            out.push((rel, is_dir));
            if is_dir {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

/// The names of the files in directory `d` (none when it cannot be read).
pub fn entries(d: &Path) -> Vec<String> {
    std::fs::read_dir(d)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `meshrun-NAME-PID` in the temp dir, empty: whatever an earlier run left there is removed
/// first. `name` is the test's own (tests run side by side).
pub fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("meshrun-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    d
}
