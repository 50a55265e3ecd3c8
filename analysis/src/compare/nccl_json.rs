//! nccl-tests' `-J` JSON, versions 1 to 3 (and meshrun's, the same shape): `results[]` rows with
//! `size` and `out_of_place.bus_bw`. Early writers misspelled bandwidth (`bandwidith`); those
//! keys are read too. The collective's name is the rows' `experiment_name` (`all_reduce_perf`),
//! else the program in `args[0]`; the ranks are `config.devices`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{error, Better, FormatError, Parsed, Series};

/// The bus bandwidth of one placement object, under any key nccl-tests has used.
fn bus_bw(p: &Value) -> Option<f64> {
    ["bus_bw", "busbw", "bus_bandwidth", "bus_bandwidith"]
        .iter()
        .find_map(|k| p.get(*k))
        .and_then(number)
}

/// A number, or a number written as a string (nccl-tests writes NaN as "nan").
fn number(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

fn short_name(s: &str) -> String {
    let base = s.rsplit('/').next().unwrap_or(s);
    base.trim_end_matches("_perf").to_string()
}

pub fn parse(path: &str, doc: &Value) -> Result<Parsed, FormatError> {
    let Some(results) = doc.get("results").and_then(Value::as_array) else {
        return Err(error(
            path,
            1,
            "JSON without a `results` list; expected nccl-tests -J output (or meshrun's --json)",
        ));
    };
    let mut by_name: Vec<(Option<String>, BTreeMap<u64, f64>)> = Vec::new();
    let program = doc
        .get("args")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .map(short_name)
        // meshrun's own -J: `meshrun all_reduce ...`.
        .map(|p| {
            if p == "meshrun" {
                doc.get("args")
                    .and_then(Value::as_array)
                    .and_then(|a| a.get(1))
                    .and_then(Value::as_str)
                    .map_or(p.clone(), short_name)
            } else {
                p
            }
        });
    for (i, r) in results.iter().enumerate() {
        let size = r
            .get("size")
            .and_then(Value::as_u64)
            .ok_or_else(|| error(path, 1, format!("results[{i}] has no `size`")))?;
        let Some(bw) = r
            .get("out_of_place")
            .and_then(bus_bw)
            .or_else(|| r.get("in_place").and_then(bus_bw))
        else {
            return Err(error(
                path,
                1,
                format!("results[{i}] has no out_of_place bus_bw (nor bus_bandwidith)"),
            ));
        };
        let name = r
            .get("experiment_name")
            .and_then(Value::as_str)
            .map(short_name)
            .or_else(|| program.clone());
        match by_name.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => {
                pts.insert(size, bw);
            }
            None => by_name.push((name, BTreeMap::from([(size, bw)]))),
        }
    }
    if by_name.is_empty() {
        return Err(error(path, 1, "an empty `results` list"));
    }
    let ranks = doc
        .get("config")
        .and_then(|c| c.get("devices"))
        .and_then(Value::as_array)
        .map(Vec::len)
        .filter(|&n| n > 0);
    Ok(Parsed {
        format: "nccl-tests JSON",
        ranks,
        series: by_name
            .into_iter()
            .map(|(name, points)| Series {
                name,
                figure: "out-of-place busbw (GB/s)".into(),
                better: Better::Higher,
                points,
            })
            .collect(),
        warnings: Vec::new(),
    })
}
