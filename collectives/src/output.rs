//! Output files: checked before a run starts, written atomically (a temporary file in the same
//! directory, then renamed), and never overwritten without `--force`.

use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{path} already exists; pass --force to overwrite it")]
    Exists { path: PathBuf },
    #[error("cannot write {path}: directory {dir} does not exist")]
    NoDir { path: PathBuf, dir: PathBuf },
    #[error("cannot write {path}: directory {dir} is not writable ({source}); choose another path")]
    NotWritable {
        path: PathBuf,
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The path that names stdout (`--json -`).
pub const STDOUT: &str = "-";

/// Now, in seconds since the Unix epoch: when a run ended, for the reports that record it
/// (`--metrics`).
pub fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Whether `path` is stdout (`-`).
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == STDOUT
}

/// Write a JSON report to `path` atomically, or with `-` on stdout after the text report,
/// between [`analysis::export::STDOUT_JSON_BEGIN`] and its END line.
pub fn write_json(path: &Path, json: &[u8], force: bool) -> Result<(), OutputError> {
    if !is_stdout(path) {
        return write_atomic(path, json, force);
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&analysis::export::stdout_block(json))
        .and_then(|()| out.flush())
        .map_err(|source| OutputError::Io {
            path: path.to_owned(),
            source,
        })
}

/// Check, before any work, that `path` can be written.
pub fn check_writable(path: &Path, force: bool) -> Result<(), OutputError> {
    if is_stdout(path) {
        return Ok(());
    }
    if path.exists() && !force {
        return Err(OutputError::Exists { path: path.to_owned() });
    }
    let dir = parent(path);
    if !dir.is_dir() {
        return Err(OutputError::NoDir {
            path: path.to_owned(),
            dir,
        });
    }
    // Create and remove a probe file, so a directory that cannot be written is found now and
    // not after the run (the permission bits alone do not say: root, read-only mounts, quotas).
    let probe = dir.join(format!(".meshrun-probe.{}", std::process::id()));
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(source) => Err(OutputError::NotWritable {
            path: path.to_owned(),
            dir,
            source,
        }),
    }
}

/// Write `data` to `path` atomically; an existing file is replaced only with `force`.
pub fn write_atomic(path: &Path, data: &[u8], force: bool) -> Result<(), OutputError> {
    check_writable(path, force)?;
    let io = |source| OutputError::Io {
        path: path.to_owned(),
        source,
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let tmp = parent(path).join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        if force {
            std::fs::rename(&tmp, path)
        } else {
            // A hard link fails if the name exists: no silent clobbering even in a race.
            std::fs::hard_link(&tmp, path).and_then(|_| std::fs::remove_file(&tmp))
        }
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            return Err(OutputError::Exists { path: path.to_owned() });
        }
        return Err(io(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_clobber_without_force_and_no_temp_left() {
        let dir = std::env::temp_dir().join(format!("meshrun-output-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("r.json");
        write_atomic(&p, b"one", false).unwrap();
        let e = write_atomic(&p, b"two", false).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{} already exists; pass --force to overwrite it", p.display())
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        write_atomic(&p, b"three", true).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"three");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .collect();
        assert!(leftovers.is_empty());
        assert!(matches!(
            check_writable(&dir.join("nodir/x.json"), false),
            Err(OutputError::NoDir { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
        // A directory nobody can create files in (procfs refuses even root).
        let e = check_writable(Path::new("/proc/meshrun-out.json"), false).unwrap_err();
        assert!(matches!(e, OutputError::NotWritable { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("cannot write /proc/meshrun-out.json: directory /proc is not writable ("),
            "{e}"
        );
    }
}
