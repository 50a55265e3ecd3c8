//! A pairwise run read back from its `--json` file, judged again offline (`meshrun verdict`):
//! under another rule (`--threshold`, `--expect-gbps`, `--topology`), or against an earlier good
//! run of the same hosts (`--baseline`).
//!
//! Offline there are no retests: a suspect cannot be run alone again, so every suspect of the new
//! rule counts as confirmed and its line says `not retested`. The run's own verdict, decided with
//! its retests, is in the file and printed beside the new one.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use serde_json::Value;

use super::over_time::Pass;
use super::rails::{self, Fabric};
use super::topology::Topology;
use super::verdict::RetestPlan;
use super::{Measurement, PairwiseConfig, PairwiseOutcome};

/// A file that is not a readable meshrun pairwise `--json` report.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedError {
    pub path: String,
    pub what: String,
}

impl fmt::Display for SavedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.what)
    }
}

impl std::error::Error for SavedError {}

/// Read a `meshrun pairwise --json` file back into the outcome it was written from (the
/// transport's header facts as far as the file keeps them; timings left out).
pub fn read(path: &Path) -> Result<PairwiseOutcome, SavedError> {
    let name = path.display().to_string();
    let err = |what: String| SavedError {
        path: name.clone(),
        what,
    };
    let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read it: {e}")))?;
    // A launcher's log with the report on stdout (`--json -`): the block between its markers.
    if let Some(json) = std::str::from_utf8(&bytes).ok().and_then(crate::export::embedded_json) {
        return parse(json.as_bytes()).map_err(err);
    }
    parse(&bytes).map_err(err)
}

/// [`read`] on the file's bytes; the error says what is wrong, without the path.
pub fn parse(bytes: &[u8]) -> Result<PairwiseOutcome, String> {
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| {
        format!("not JSON ({e}); expected a `meshrun pairwise --json` file, or a log with `--json -`'s report")
    })?;
    match (
        doc.get("tool").and_then(Value::as_str),
        doc.get("test").and_then(Value::as_str),
    ) {
        (Some("meshrun"), Some("pairwise")) => {}
        _ => {
            return Err(
                "not a `meshrun pairwise --json` file (no \"tool\": \"meshrun\", \"test\": \"pairwise\")".into(),
            )
        }
    }
    let mut o = outcome(&doc)?;
    if let Some(list) = doc.get("repeats") {
        let list = list.as_array().ok_or("its `repeats` is not a list of passes")?;
        o.repeats = list
            .iter()
            .enumerate()
            .map(|(i, p)| pass(&doc, p).map_err(|e| format!("its pass {} (`repeats`): {e}", i + 1)))
            .collect::<Result<_, _>>()?;
        o.over_time = match doc.get("over_time") {
            Some(v) => Some(
                serde_json::from_value(v.clone())
                    .map_err(|e| format!("its `over_time` is not a judgement over passes: {e}"))?,
            ),
            None => None,
        };
    }
    Ok(o)
}

/// One pass of `repeats`: its own keys, with those every pass shares from the top of the file.
fn pass(doc: &Value, p: &Value) -> Result<Pass, String> {
    let mut whole = p.as_object().cloned().ok_or("not an object")?;
    for k in ["transport", "test_info", "hosts", "config"] {
        if let (false, Some(v)) = (whole.contains_key(k), doc.get(k)) {
            whole.insert(k.into(), v.clone());
        }
    }
    let number = |k: &str| {
        p.get(k)
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("its `{k}` is missing"))
    };
    Ok(Pass {
        index: number("pass")? as usize,
        start_s: number("start_s")?,
        started_at: number("started_at")?,
        seconds: number("seconds")?,
        outcome: outcome(&Value::Object(whole))?,
    })
}

/// The outcome a report's keys describe (one pass's, for a repeated run).
fn outcome(doc: &Value) -> Result<PairwiseOutcome, String> {
    let field = |k: &str| doc.get(k).cloned().ok_or_else(|| format!("its `{k}` is missing"));
    let config: PairwiseConfig = serde_json::from_value(field("config")?)
        .map_err(|e| format!("its `config` is not a pairwise configuration: {e}"))?;
    let hosts: Vec<String> =
        serde_json::from_value(field("hosts")?).map_err(|e| format!("its `hosts` is not a list of names: {e}"))?;
    let measurements: Vec<Measurement> = serde_json::from_value(field("results")?)
        .map_err(|e| format!("its `results` are not pairwise measurements: {e}"))?;
    let retests: Vec<Measurement> = match doc.get("retests") {
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| format!("its `retests` are not pairwise measurements: {e}"))?,
        None => Vec::new(),
    };
    if let Some(m) = measurements
        .iter()
        .chain(&retests)
        .find(|m| m.src >= hosts.len() || m.dst >= hosts.len())
    {
        return Err(format!(
            "a measurement names rank {} -> {}, but the file lists {} hosts (one per rank)",
            m.src,
            m.dst,
            hosts.len()
        ));
    }
    let verdict = serde_json::from_value(field("verdict")?)
        .map_err(|e| format!("its `verdict` is not a pairwise verdict: {e}"))?;
    let rails = match doc.get("rails") {
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| format!("its `rails` are not rail outcomes: {e}"))?,
        None => Vec::new(),
    };
    // The header facts as `test_info` keeps them (`Link_type` for `Link type`).
    let transport_details = doc
        .get("test_info")
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .filter(|(k, _)| *k != "test" && *k != "TX_depth")
                .map(|(k, v)| {
                    (
                        k.replace('_', " "),
                        v.as_str().map_or_else(|| v.to_string(), str::to_string),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(PairwiseOutcome {
        cables: doc
            .get("cables")
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default(),
        config,
        transport: doc
            .get("transport")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string(),
        transport_details,
        hosts,
        rounds: doc.get("rounds").and_then(Value::as_u64).unwrap_or(0) as usize,
        measurements,
        retests,
        verdict,
        config_findings: Vec::new(),
        rails,
        follow_up: Vec::new(),
        counters: doc
            .get("counters")
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default(),
        timings: None,
        paths: doc.get("paths").and_then(|p| serde_json::from_value(p.clone()).ok()),
        router_names: doc
            .get("router_names")
            .and_then(|n| serde_json::from_value(n.clone()).ok())
            .unwrap_or_default(),
        repeats: Vec::new(),
        over_time: None,
    })
}

/// Each rank's NIC as the run's rails recorded it (None where unknown or without `--rails`).
fn nics_of(o: &PairwiseOutcome) -> Vec<Option<String>> {
    let mut nics = vec![None; o.hosts.len()];
    for r in &o.rails {
        for (rank, nic) in r.ranks.iter().zip(&r.nics) {
            if let Some(slot) = nics.get_mut(*rank) {
                slot.clone_from(nic);
            }
        }
    }
    nics
}

/// The saved run judged again under `cfg` (its rule, floor and selection), without retests.
pub fn rejudge(o: &PairwiseOutcome, cfg: &PairwiseConfig, topology: Option<&Topology>) -> PairwiseOutcome {
    let nics = nics_of(o);
    let fabric = Fabric { topology, nics: &nics };
    let (verdict, rails) = rails::judge_rails(&o.measurements, &[], cfg, &o.hosts, &RetestPlan::default(), fabric);
    let cables = verdict.links.clone();
    // Queue pairs slower than their others, from the first pass alone as the pairs are.
    let from_pass = PairwiseConfig {
        retest: false,
        ..cfg.clone()
    };
    PairwiseOutcome {
        config: cfg.clone(),
        retests: Vec::new(),
        verdict,
        rails,
        paths: super::paths::judge_paths(&o.measurements, &[], &from_pass),
        cables,
        repeats: Vec::new(),
        over_time: None,
        ..o.clone()
    }
}

/// A repeated run judged again: each pass offline under `cfg` as [`rejudge`] judges one, and the
/// judgement over time. Under the run's own rule (`cfg`'s bar and floor the run's, no
/// `topology`) that is from the passes as the run judged them, with their retests, which a file
/// keeps and offline cannot redo: so the run's own judgement over time, recomputed. Under another
/// rule, from the passes judged again. The outcome's own figures are the last pass's, judged again.
pub fn rejudge_repeated(o: &PairwiseOutcome, cfg: &PairwiseConfig, topology: Option<&Topology>) -> PairwiseOutcome {
    let again: Vec<Pass> = o
        .repeats
        .iter()
        .map(|p| Pass {
            outcome: rejudge(&p.outcome, cfg, topology),
            ..p.clone()
        })
        .collect();
    let own_rule = cfg.threshold == o.config.threshold && cfg.expect_gbps == o.config.expect_gbps && topology.is_none();
    let repeats = if own_rule { o.repeats.clone() } else { again };
    PairwiseOutcome {
        over_time: Some(super::over_time::judge(&repeats, cfg.unstable_warns)),
        repeats,
        ..rejudge(o, cfg, topology)
    }
}

/// Each direction's best score in a run at its matrix size: the first pass or any retest alone.
pub fn best_scores(o: &PairwiseOutcome) -> HashMap<(usize, usize), f64> {
    let size = o.config.matrix_size() as u64;
    let mut best: HashMap<(usize, usize), f64> = HashMap::new();
    for m in o.measurements.iter().chain(&o.retests).filter(|m| m.bytes == size) {
        let b = best.entry((m.src, m.dst)).or_insert(f64::NEG_INFINITY);
        *b = b.max(m.score());
    }
    best
}
