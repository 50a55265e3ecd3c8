//! meshrun pairwise's `--json`: per size, the median over the first-pass measurements of BW
//! average (Gb/s) or t_typical (usec); named as the text report's title (`RDMA_Write BW`).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{error, medians, Better, FormatError, Parsed, Series};

pub fn parse(path: &str, doc: &Value) -> Result<Parsed, FormatError> {
    let results = doc
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| error(path, 1, "meshrun pairwise JSON without `results`"))?;
    let mut by_size: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    let mut lat = false;
    for (i, m) in results.iter().enumerate() {
        let size = m
            .get("bytes")
            .and_then(Value::as_u64)
            .ok_or_else(|| error(path, 1, format!("results[{i}] has no `bytes`")))?;
        let v = if let Some(b) = m.get("bw").filter(|b| !b.is_null()) {
            b.get("avg_gbps").and_then(Value::as_f64)
        } else {
            lat = true;
            m.get("lat").and_then(|l| l.get("t_typical")).and_then(Value::as_f64)
        };
        let v = v.ok_or_else(|| {
            error(
                path,
                1,
                format!("results[{i}] has neither bw.avg_gbps nor lat.t_typical"),
            )
        })?;
        by_size.entry(size).or_default().push(v);
    }
    if by_size.is_empty() {
        return Err(error(path, 1, "an empty `results` list"));
    }
    let name = doc
        .get("test_info")
        .and_then(|t| t.get("test"))
        .and_then(Value::as_str)
        .map(|t| t.replace("_BW", " BW").replace("_Lat", " Lat"));
    let ranks = doc.get("hosts").and_then(Value::as_array).map(Vec::len);
    Ok(Parsed {
        format: "meshrun pairwise JSON",
        ranks,
        series: vec![Series {
            name,
            figure: if lat {
                "t_typical (usec), median over pairs".into()
            } else {
                "BW average (Gb/s), median over pairs".into()
            },
            better: if lat { Better::Lower } else { Better::Higher },
            points: medians(by_size),
        }],
        warnings: Vec::new(),
    })
}
