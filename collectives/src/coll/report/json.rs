//! `-J FILE`: the run in nccl-tests' JSON shape (version 1 fields), plus meshrun's baseline.

use serde_json::{json, Value};

use super::{avg_busbw, total_wrong, CollConfig, CollRun, Exporter, Placement, Row, Step};

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

fn rows_json(rows: &[Row], name: &str, iters: u64) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                json!({
                    "size": r.size,
                    "count": r.count,
                    "type": r.dtype.name(),
                    "redop": r.redop,
                    "root": format!("{:6}", r.root),
                    "out_of_place": placement_json(&r.out_of_place),
                    "in_place": r.in_place.as_ref().map(placement_json),
                    "actual_iterations": iters,
                    "experiment_name": name,
                })
            })
            .collect(),
    )
}

/// Time as nccl-tests writes it (`%Y-%m-%d %H:%M:%S`), in UTC.
pub fn now_string() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The `-J` document, in nccl-tests' shape; `baseline` rows are a meshrun addition.
pub fn json_report(
    cfg: &CollConfig,
    name: &str,
    args: &[String],
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
        "parallel_init": "false",
        "devices": devices.iter().map(|d| json!({
            "rank": d.rank, "group": 0, "pid": d.pid, "hostname": d.host, "device": d.device,
            "device_hex": d.bus_id, "device_info": d.name,
        })).collect::<Vec<_>>(),
    });
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
        "version": 1,
        "start_time": start_time,
        "args": args,
        "env": [],
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
pub struct Json;

impl Exporter for Json {
    fn render(&self, run: &CollRun<'_>) -> Vec<u8> {
        json_report(
            run.cfg,
            run.name,
            run.args,
            run.devices,
            run.rows,
            run.baseline.as_ref().map(|b| (b.implementation, b.rows)),
            run.start_time,
        )
    }
}
