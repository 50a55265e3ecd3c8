//! `--json FILE`: every raw figure (config, per pair and size, retests, verdicts).

use crate::pairwise::PairwiseOutcome;

pub fn render(o: &PairwiseOutcome) -> Vec<u8> {
    let mut doc = serde_json::json!({
        "tool": "meshrun",
        "version": env!("CARGO_PKG_VERSION"),
        "test": "pairwise",
        "transport": o.transport,
        "hosts": o.hosts,
        "rounds": o.rounds,
        "config": o.config,
        "results": o.measurements,
        "retests": o.retests,
        "verdict": o.verdict,
        "config_findings": o.config_findings,
    });
    // `--rails`: each rail's ranks, NICs and verdict (absent otherwise).
    if !o.rails.is_empty() {
        doc["rails"] = serde_json::json!(o.rails);
    }
    // After a quick pattern: the ranks tested all-pairs around the slow pairs (absent otherwise).
    if !o.follow_up.is_empty() {
        doc["follow_up"] = serde_json::json!(o.follow_up);
    }
    // Where the time and memory went (absent from outcomes built without a run).
    if let Some(t) = &o.timings {
        doc["timings"] = serde_json::json!(t);
    }
    let mut v = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    v.push(b'\n');
    v
}

/// `--json FILE`.
pub struct Json;

impl super::Exporter for Json {
    fn render(&self, o: &PairwiseOutcome) -> Result<Vec<u8>, String> {
        Ok(render(o))
    }
}
