//! Where a `--topology` comes from: one file, or a directory whose files are read one by one
//! (each by its content) and put together, so an operator can gather one `lldpctl -f json` per
//! host, or one `ibtracert` per pair, into a directory and give that.

use std::path::Path;

use super::{Topology, TopologyError};

/// The topology of a file, or of every file in a directory (in name order, hidden ones
/// skipped); a host two files place under different switches is an error naming the second.
pub fn read(path: &Path) -> Result<Topology, TopologyError> {
    let whole = |why: String| TopologyError {
        file: path.display().to_string(),
        line: 0,
        why,
    };
    if !path.is_dir() {
        let text = std::fs::read_to_string(path).map_err(|e| whole(format!("cannot read it: {e}")))?;
        return Topology::parse(&text, &path.display().to_string());
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| whole(format!("cannot list it: {e}")))? {
        let entry = entry.map_err(|e| whole(format!("cannot list it: {e}")))?;
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if !hidden && entry.path().is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(whole(
            "an empty directory; expected one `lldpctl -f json` output per host (HOST.json), or \
             ibtracert or topology files"
                .into(),
        ));
    }
    let mut all = Topology::default();
    for f in files {
        let one = read(&f)?;
        all.merge(one).map_err(|why| TopologyError {
            file: f.display().to_string(),
            line: 0,
            why,
        })?;
    }
    Ok(all)
}

/// The host an LLDP file is of: its name without the extension (`lldp/gpu01.json`: gpu01).
pub fn host_of_file(file: &str) -> Result<String, String> {
    let stem = Path::new(file)
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace));
    stem.ok_or_else(|| {
        "an lldpctl file is named by its host; expected `HOST.json` (`lldpctl -f json > HOST.json` \
         on each host)"
            .to_string()
    })
}
