//! `--json FILE`: every raw figure (config, per pair and size, retests, verdicts), the matrix,
//! and what perftest users read: each measurement's figures under perftest's `--out_json` key
//! names (`BW_peak`, `BW_average`, `MsgRate`; `t_min` .. `percentile_99.9`) and the header facts
//! as its `test_info` (`Device`, `Mtu`, `Link_type`, `GID_index`, ...).

use serde_json::{json, Map, Value};

use super::{matrix, unit};
use crate::export::{ExportError, Exporter};
use crate::pairwise::over_time::Pass;
use crate::pairwise::{Measurement, PairwiseOutcome, TestKind};

/// One measurement with a `perftest` object holding its figures under perftest's key names.
fn measurement_json(m: &Measurement) -> Value {
    let mut v = serde_json::to_value(m).unwrap_or(Value::Null);
    let perftest = match (&m.bw, &m.lat) {
        (Some(b), _) => json!({
            "MsgSize": m.bytes,
            "n_iterations": b.iterations,
            "BW_peak": b.peak_gbps,
            "BW_average": b.avg_gbps,
            "MsgRate": b.msg_rate_mpps,
        }),
        (None, Some(l)) => json!({
            "MsgSize": m.bytes,
            "n_iterations": m.iterations,
            "t_min": l.t_min,
            "t_max": l.t_max,
            "t_typical": l.t_typical,
            "t_avg": l.t_avg,
            "t_stdev": l.t_stdev,
            "percentile_99": l.p99,
            "percentile_99.9": l.p99_9,
        }),
        (None, None) => Value::Null,
    };
    v["perftest"] = perftest;
    v
}

/// perftest's `test_info`: the test's name as perftest spells it (`RDMA_Write_BW`), the TX depth,
/// and the transport's header facts with perftest's key spelling (`Link type` -> `Link_type`),
/// whole numbers as numbers (`Mtu: 4096[B]` -> 4096), the rest as the header prints them.
pub fn test_info(o: &PairwiseOutcome) -> Value {
    let c = &o.config;
    let kind = match c.test {
        TestKind::Bw => "BW",
        TestKind::Lat => "Lat",
    };
    let mut info = Map::new();
    info.insert("test".into(), json!(format!("{}_{kind}", c.op.title())));
    info.insert("TX_depth".into(), json!(c.window));
    for (k, v) in &o.transport_details {
        let key = k.replace(' ', "_");
        let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
        let rest = &v[digits.len()..];
        let value = match digits.parse::<u64>() {
            Ok(n) if rest.is_empty() || rest == "[B]" => json!(n),
            _ => json!(v),
        };
        info.insert(key, value);
    }
    Value::Object(info)
}

pub fn render(o: &PairwiseOutcome) -> Vec<u8> {
    let mut doc = document(o);
    // `--repeat`: every pass (the keys above are the last pass's) and the judgement across them
    // (absent from a single run).
    if !o.repeats.is_empty() {
        doc["repeats"] = Value::Array(o.repeats.iter().map(pass_document).collect());
    }
    if let Some(t) = &o.over_time {
        doc["over_time"] = json!(t);
    }
    let mut v = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    v.push(b'\n');
    v
}

/// The keys a pass has of its own: everything but what every pass of a run shares (the tool,
/// the test, the transport, the hosts and the configuration, kept once at the top).
const SHARED: &[&str] = &["tool", "version", "test", "transport", "test_info", "hosts", "config"];

/// One pass of a repeated run: when it ran (`pass`, 1 first; `start_s`, seconds after the first
/// pass started; `started_at`, Unix seconds; `seconds`, how long it took) and its own keys as a
/// single run writes them (`results`, `retests`, `matrix`, `verdict`, `counters`, ...).
fn pass_document(p: &Pass) -> Value {
    let mut doc = document(&p.outcome);
    if let Some(m) = doc.as_object_mut() {
        for k in SHARED {
            m.remove(*k);
        }
        m.insert("pass".into(), json!(p.index));
        m.insert("start_s".into(), json!(p.start_s));
        m.insert("started_at".into(), json!(p.started_at));
        m.insert("seconds".into(), json!(p.seconds));
    }
    doc
}

/// The keys of a single run's report, without the repeats.
fn document(o: &PairwiseOutcome) -> Value {
    let mut doc = json!({
        "tool": "meshrun",
        "version": env!("CARGO_PKG_VERSION"),
        "test": "pairwise",
        "transport": o.transport,
        "test_info": test_info(o),
        "hosts": o.hosts,
        "rounds": o.rounds,
        "config": o.config,
        "results": o.measurements.iter().map(measurement_json).collect::<Vec<_>>(),
        "retests": o.retests.iter().map(measurement_json).collect::<Vec<_>>(),
        "matrix": {
            "bytes": o.config.matrix_size(),
            "unit": unit(o.config.test),
            "cells": matrix(o),
        },
        "verdict": o.verdict,
        "config_findings": o.config_findings,
    });
    // A GPU run: the P2P line beside its fields, as the collectives' -J has it.
    if let Some(p) = &o.config.p2p {
        doc["config"]["p2p"]["line"] = json!(p.line());
    }
    // `--rails`: each rail's ranks, NICs and verdict (absent otherwise).
    if !o.rails.is_empty() {
        doc["rails"] = json!(o.rails);
    }
    // After a quick pattern: the ranks tested all-pairs around the slow pairs (absent otherwise).
    if !o.counters.is_empty() {
        // Every counter that moved on every host's NIC (and its TCP), traffic included.
        doc["counters"] = json!(o.counters);
    }
    if !o.follow_up.is_empty() {
        doc["follow_up"] = json!(o.follow_up);
    }
    // `-q`: whether one of a pair's queue pairs was slower than its others (absent otherwise).
    if let Some(p) = &o.paths {
        doc["paths"] = json!(p);
    }
    // `-q` over TCP, traced: the fabric links the slow connections share (absent where none).
    if !o.cables.is_empty() {
        doc["cables"] = json!(o.cables);
    }
    // The traced routers' names from the resolver (absent where none was named or asked).
    if !o.router_names.is_empty() {
        doc["router_names"] = json!(o.router_names);
    }
    // Where the time and memory went (absent from outcomes built without a run).
    if let Some(t) = &o.timings {
        doc["timings"] = json!(t);
    }
    doc
}

/// `--json FILE`.
pub struct PairwiseJson;

impl Exporter<PairwiseOutcome> for PairwiseJson {
    fn render(&self, o: &PairwiseOutcome) -> Result<Vec<u8>, ExportError> {
        Ok(render(o))
    }
}
