//! `-J FILE`: the run in nccl-tests' current JSON shape (its version 3: `per_iter_timing`,
//! `per_iter_skip`, per-iteration objects with `-I`), plus meshrun's version and baseline. The
//! keys nccl-tests writes are pinned by `tests/data/nccl-tests-json-v3-keys.json`.

use serde_json::{json, Value};

use super::{avg_busbw, total_wrong, CollConfig, CollRun, Placement, Row, Step};
use crate::coll::per_iter::PerIter;
use crate::export::{ExportError, Exporter};

/// A device record of the JSON `config.devices` list.
pub struct DeviceInfo {
    pub rank: usize,
    pub pid: u32,
    pub host: String,
    pub device: i32,
    pub bus_id: String,
    pub name: String,
}

fn placement_json(p: &Placement) -> Value {
    json!({"time": p.time_us, "alg_bw": p.algbw, "bus_bw": p.busbw, "nwrong": p.wrong.map(|w| w as f64)})
}

/// nccl-tests' `out_of_place_per_iter` / `in_place_per_iter` object; the per-rank lists only
/// when there is more than one rank, as nccl-tests writes its per-process ones.
fn per_iter_json(it: &PerIter) -> Value {
    let mut v = json!({
        "skipped_iterations": it.skipped,
        "min_us": it.min_us,
        "max_us": it.max_us,
        "avg_us": it.avg_us,
        "p50_us": it.p50_us,
        "p95_us": it.p95_us,
        "p99_us": it.p99_us,
        "stdev_us": it.stdev_us,
        "cv_pct": it.cv_pct,
        "times_us": it.times_us,
    });
    if it.per_rank_us.len() > 1 {
        v["per_process_max_times_us"] = json!(it.per_rank_us);
    }
    v
}

/// The environment as nccl-tests records it (`NAME=value`, in the process's order), less any
/// variable whose name says it holds a secret: KEY, TOKEN, SECRET or PASSWORD, in any case.
pub fn env_block(vars: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
    vars.into_iter()
        .filter(|(k, _)| {
            let up = k.to_ascii_uppercase();
            !["KEY", "TOKEN", "SECRET", "PASSWORD"].iter().any(|w| up.contains(w))
        })
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

fn rows_json(rows: &[Row], name: &str, iters: u64) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                let mut row = json!({
                    "size": r.size,
                    "count": r.count,
                    "type": r.dtype.name(),
                    "redop": r.redop,
                    "root": format!("{:6}", r.root),
                    "out_of_place": placement_json(&r.out_of_place),
                    "in_place": r.in_place.as_ref().map(placement_json),
                    "actual_iterations": iters,
                    "experiment_name": name,
                });
                if let Some(it) = &r.out_of_place.per_iter {
                    row["out_of_place_per_iter"] = per_iter_json(it);
                }
                if let Some(it) = r.in_place.as_ref().and_then(|p| p.per_iter.as_ref()) {
                    row["in_place_per_iter"] = per_iter_json(it);
                }
                row
            })
            .collect(),
    )
}

/// Time as nccl-tests writes it: local time, `%Y-%m-%d %H:%M:%S`.
pub fn now_string() -> String {
    chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string()
}

/// The `-J` document, in nccl-tests' shape; `baseline` rows are a meshrun addition.
#[allow(clippy::too_many_arguments)]
pub fn json_report(
    cfg: &CollConfig,
    name: &str,
    args: &[String],
    env: &[String],
    devices: &[DeviceInfo],
    rows: &[Row],
    baseline: Option<(&str, &[Row])>,
    start_time: &str,
) -> Vec<u8> {
    let mut config = json!({
        "nthreads": 1,
        "ngpus": 1,
        "minimum_bytes": cfg.min_bytes,
        "maximum_bytes": cfg.max_bytes,
        "warmup_iters": cfg.warmup,
        "iterations": cfg.iters,
        "aggregated_iterations": cfg.agg,
        "validation": u8::from(cfg.check),
        "graph": 0,
        "blocking_collectives": "false",
        "per_iter_timing": if cfg.per_iter { "true" } else { "false" },
        "per_iter_skip": cfg.per_iter_skip,
        "parallel_init": "false",
        "devices": devices.iter().map(|d| json!({
            "rank": d.rank, "group": 0, "pid": d.pid, "hostname": d.host, "device": d.device,
            "device_hex": d.bus_id, "device_info": d.name,
        })).collect::<Vec<_>>(),
    });
    if let Some(p) = &cfg.p2p {
        config["p2p"] = json!(p);
        config["p2p"]["line"] = json!(p.line());
    }
    match cfg.step {
        Step::Factor(f) => config["step_factor"] = json!(f),
        Step::Bytes(b) => config["step_bytes"] = json!(b),
    }
    let wrong = total_wrong(rows);
    let avg = avg_busbw(rows);
    // As nccl-tests: "unchecked" without a bar, else "true" or "false" (strings, as it writes them).
    let okay = match &cfg.busbw_bar {
        None => "unchecked",
        Some(b) if b.passes(avg) => "true",
        Some(_) => "false",
    };
    let mut doc = json!({
        "version": 3,
        "start_time": start_time,
        "args": args,
        "env": env,
        // No NCCL here: 0, with meshrun's own version beside it.
        "nccl_version": 0,
        "meshrun_version": env!("CARGO_PKG_VERSION"),
        "config": config,
        "results": rows_json(rows, name, cfg.iters),
        "out_of_bounds": {"count": wrong, "okay": if wrong == 0 { "true" } else { "false" }},
        "average_bus_bandwidth": {"bandwidth": avg, "okay": okay},
        "errors": [],
        "end_time": now_string(),
    });
    if let Some((what, b)) = baseline {
        doc["baseline"] = json!({"implementation": what, "results": rows_json(b, name, cfg.iters), "average_bus_bandwidth": avg_busbw(b)});
    }
    let mut v = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    v.push(b'\n');
    v
}

/// `-J FILE`.
pub struct CollJson;

impl Exporter<CollRun<'_>> for CollJson {
    fn render(&self, run: &CollRun<'_>) -> Result<Vec<u8>, ExportError> {
        Ok(json_report(
            run.cfg,
            run.name,
            run.args,
            run.env,
            run.devices,
            run.rows,
            run.baseline.as_ref().map(|b| (b.implementation, b.rows)),
            run.start_time,
        ))
    }
}
