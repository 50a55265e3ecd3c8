//! A stall in JSON: when a deadline ends a job whose command was asked for a JSON report
//! (`--json`, `-J`), the rank that names the root cause writes it there instead of the report
//! the job never finished: the one line, the ranks it names and every rank's state. On a job of
//! several hosts the file is on that rank's host (rank 0's, unless rank 0 is what stalled).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use analysis::export::{ExportError, Exporter};
use ranks::postmortem::Conclusion;
use serde_json::json;

/// The JSON report's path and `--force`.
static OUT: OnceLock<(PathBuf, bool)> = OnceLock::new();

/// The version of the stall document's layout.
pub const SCHEMA_VERSION: u32 = 1;

/// Keep a stall's conclusion at `path` (`-`: stdout, between the marker lines).
pub fn keep_in(path: &Path, force: bool) {
    if OUT.set((path.to_path_buf(), force)).is_ok() {
        ranks::postmortem::on_conclusion(write);
    }
}

/// The document: what `--json` holds after a stall.
pub fn document(c: &Conclusion) -> serde_json::Value {
    let ranks: Vec<serde_json::Value> = c
        .ranks
        .iter()
        .map(|r| {
            json!({
                "rank": r.rank,
                "host": r.host,
                "state": r.state,
                "phase": r.phase,
                "peer": r.peer,
                "waited_ms": r.waited_ms,
                "detail": r.detail,
            })
        })
        .collect();
    json!({
        "tool": "meshrun",
        "test": "stall",
        "schema_version": SCHEMA_VERSION,
        "exit_status": crate::exit::Status::PeerOrDeadline.code(),
        "root_cause": c.line,
        "roots": c.roots,
        "ranks": ranks,
    })
}

/// The stall's JSON as an output format: [`document`], pretty-printed.
pub struct StallJson;

impl Exporter<Conclusion> for StallJson {
    fn render(&self, c: &Conclusion) -> Result<Vec<u8>, ExportError> {
        Ok(serde_json::to_vec_pretty(&document(c)).unwrap_or_default())
    }
}

fn write(c: &Conclusion) {
    let Some((path, force)) = OUT.get() else { return };
    // The job ends with status 3 whatever the write did; a failed write has been said.
    let _ = crate::report_files::write_or_status(path, &StallJson, c, *force, "meshrun: the stall's JSON");
}

#[cfg(test)]
mod tests {
    use super::*;
    use ranks::postmortem::RankState;

    #[test]
    fn the_document_names_the_root_and_every_rank() {
        let rank = |r: usize, state: &'static str, peer: Option<usize>| RankState {
            rank: r,
            host: format!("h{r}"),
            state,
            phase: if state == "silent" {
                String::new()
            } else {
                "all_reduce 1048576 B".into()
            },
            peer,
            waited_ms: if peer.is_some() { 3000 } else { 0 },
            detail: String::new(),
        };
        let c = Conclusion {
            line: "rank 1 (h1) stopped answering in all_reduce".into(),
            roots: vec![1],
            ranks: vec![rank(0, "waiting_on_peer", Some(1)), rank(1, "silent", None)],
        };
        let d = document(&c);
        assert_eq!(
            (d["test"].as_str(), d["schema_version"].as_u64()),
            (Some("stall"), Some(1))
        );
        assert_eq!(d["exit_status"], 3);
        assert_eq!(d["roots"], json!([1]));
        assert_eq!(d["ranks"][0]["peer"], 1);
        assert_eq!(d["ranks"][1]["state"], "silent");
        assert_eq!(d["root_cause"], "rank 1 (h1) stopped answering in all_reduce");
    }
}
