//! The files a rank command writes on rank 0: checked before any traffic moves, written through
//! their format's exporter after the run.

use std::path::Path;

use analysis::export::Exporter;
use collectives::output;

use crate::exit::Status;

/// Whether every path of `paths` may be written (`force`: over an existing file); the first
/// problem, as one line.
pub fn check_all_writable<'a>(paths: impl IntoIterator<Item = &'a Path>, force: bool) -> Result<(), String> {
    for p in paths {
        output::check_writable(p, force).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Write `run` in `exporter`'s format to `path` (atomically, never over a file without `force`;
/// `-`: stdout, between the marker lines). A failure is said (`meshrun: ...`) and gives false.
pub fn write<R: ?Sized>(path: &Path, exporter: &dyn Exporter<R>, run: &R, force: bool) -> bool {
    let written = exporter
        .render(run)
        .map_err(|e| e.to_string())
        .and_then(|bytes| output::write_json(path, &bytes, force).map_err(|e| e.to_string()));
    if let Err(e) = &written {
        ranks::eline!("meshrun: {e}");
    }
    written.is_ok()
}

/// Write `run` in `exporter`'s format to `path`, as [`write()`] does, for a command whose only
/// output file is this one: a failure is said as `{who}: ...` and is a usage error (2).
pub fn write_or_status<R: ?Sized>(
    path: &Path,
    exporter: &dyn Exporter<R>,
    run: &R,
    force: bool,
    who: &str,
) -> Result<(), Status> {
    exporter
        .render(run)
        .map_err(|e| e.to_string())
        .and_then(|bytes| output::write_json(path, &bytes, force).map_err(|e| e.to_string()))
        .map_err(|e| {
            ranks::eline!("{who}: {e}");
            Status::Usage
        })
}
