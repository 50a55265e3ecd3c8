//! One output format of a run, for every kind of run: the whole run rendered as the bytes of
//! stdout or of an output file. The pairwise formats are in `pairwise::report`, the collective
//! ones in `coll::report`; preflight's in `preflight::report`, mesh-check's in `mesh_check`,
//! compare's in `compare::table`.

/// Why a report could not be rendered: only a picture can fail, being drawn or encoded.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Png(#[from] png::EncodingError),
    /// plotters could not draw the heatmap (its font unreadable, a backend's error).
    #[error("drawing the heatmap: {0}")]
    Draw(String),
}

/// One output format of a run `R`: a `PairwiseOutcome` (or a baseline `Comparison`), a
/// `CollRun`, a `PreflightRun`, a `MeshCheckRun`, or a `FileComparison`.
pub trait Exporter<R: ?Sized> {
    fn render(&self, run: &R) -> Result<Vec<u8>, ExportError>;
}

/// The line before a JSON report written on stdout (`--json -`), after the text report, so a
/// launcher's log (`kubectl logs`, a Slurm output file) carries the whole report out of the pods.
pub const STDOUT_JSON_BEGIN: &str = "# ---- meshrun JSON report (--json -): from the next line to the END line ----";
/// The line after it.
pub const STDOUT_JSON_END: &str = "# ---- END meshrun JSON report ----";

/// `json` as it goes on stdout: between the two marker lines.
pub fn stdout_block(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 128);
    out.extend_from_slice(STDOUT_JSON_BEGIN.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(json);
    if !json.ends_with(b"\n") {
        out.push(b'\n');
    }
    out.extend_from_slice(STDOUT_JSON_END.as_bytes());
    out.push(b'\n');
    out
}

/// The JSON report a log holds between the marker lines (the first one), if any. Whatever stands
/// before the BEGIN marker on its line (a launcher's prefix: `[1,0]<stdout>:`, `0: `) is taken
/// off every line of the block that starts with it; CRLF line ends are read as LF.
pub fn embedded_json(log: &str) -> Option<String> {
    let mut lines = log.lines().map(|l| l.strip_suffix('\r').unwrap_or(l));
    let prefix = lines
        .by_ref()
        .find_map(|l| l.find(STDOUT_JSON_BEGIN).map(|at| l[..at].to_string()))?;
    let mut json = String::new();
    for l in lines {
        let l = l.strip_prefix(prefix.as_str()).unwrap_or(l);
        if l == STDOUT_JSON_END {
            return Some(json);
        }
        json.push_str(l);
        json.push('\n');
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stdout_block_is_found_again_in_a_log_with_prefixes_and_crlf() {
        let json = b"{\n  \"tool\": \"meshrun\"\n}";
        let block = String::from_utf8(stdout_block(json)).unwrap();
        let log = format!("# PASS: no slow pairs\n{block}trailing line\n");
        assert_eq!(embedded_json(&log).as_deref(), Some("{\n  \"tool\": \"meshrun\"\n}\n"));
        // As Open MPI's --tag-output and Windows collectors return it.
        let tagged: String = block.lines().map(|l| format!("[1,0]<stdout>:{l}\r\n")).collect();
        let log = format!("ssh: Permanently added 'w0' to the list of known hosts.\r\n{tagged}");
        assert_eq!(embedded_json(&log).as_deref(), Some("{\n  \"tool\": \"meshrun\"\n}\n"));
        // No block, or a block cut off before its END line (a job killed while writing it).
        assert_eq!(embedded_json("# PASS\n"), None);
        assert_eq!(embedded_json(&block[..block.len() - 10]), None);
    }
}
