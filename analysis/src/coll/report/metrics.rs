//! `--metrics FILE` of a collective sweep: Prometheus text for node exporter's textfile
//! collector, per size and placement the time, algorithm and bus bandwidth (bytes per second),
//! the wrong elements, the average bus bandwidth and whether it met its bar, and when the run
//! ended.

use super::CollRun;
use crate::coll::{avg_busbw, total_wrong, Placement};
use crate::export::{ExportError, Exporter};
use crate::metrics::{render as text, Family};

/// `--metrics FILE`; `now` is the run's end (Unix seconds).
pub struct CollMetrics {
    pub now: f64,
}

pub fn render(run: &CollRun<'_>, now: f64) -> String {
    let mut time = Family::gauge(
        "meshrun_coll_time_seconds",
        "Time of one collective call, per size and placement.",
    );
    let mut algbw = Family::gauge(
        "meshrun_coll_algbw_bytes_per_second",
        "Algorithm bandwidth (size over time), per size and placement.",
    );
    let mut busbw = Family::gauge(
        "meshrun_coll_busbw_bytes_per_second",
        "Bus bandwidth (nccl-tests' busbw), per size and placement.",
    );
    let mut wrong = Family::gauge(
        "meshrun_coll_wrong_elements",
        "Wrong elements over all ranks (validation).",
    );
    for r in run.rows {
        let places: [(&str, Option<&Placement>); 2] = [("out", Some(&r.out_of_place)), ("in", r.in_place.as_ref())];
        for (place, p) in places {
            let Some(p) = p else { continue };
            let labels = vec![
                ("collective", run.name.to_string()),
                ("bytes", r.size.to_string()),
                ("type", r.dtype.name().to_string()),
                ("redop", r.redop.clone()),
                ("place", place.to_string()),
            ];
            time.sample(labels.clone(), p.time_us * 1e-6);
            algbw.sample(labels.clone(), p.algbw * 1e9);
            busbw.sample(labels.clone(), p.busbw * 1e9);
            if let Some(w) = p.wrong {
                wrong.sample(labels, w as f64);
            }
        }
    }
    let name = vec![("collective", run.name.to_string())];
    let avg = avg_busbw(run.rows);
    let mut average = Family::gauge(
        "meshrun_coll_avg_busbw_bytes_per_second",
        "Average bus bandwidth over every row (nccl-tests' Avg bus bandwidth).",
    );
    average.sample(name.clone(), avg * 1e9);
    let mut pass = Family::gauge(
        "meshrun_coll_pass",
        "1 when no element was wrong and the average bus bandwidth met its bar (if one was set).",
    );
    let met = run.cfg.busbw_bar.as_ref().is_none_or(|b| b.passes(avg));
    pass.sample(name.clone(), if met && total_wrong(run.rows) == 0 { 1.0 } else { 0.0 });
    let mut bar = Family::gauge(
        "meshrun_coll_expected_busbw_bytes_per_second",
        "The bar the average was held to.",
    );
    if let Some(b) = &run.cfg.busbw_bar {
        bar.sample(name.clone(), b.gbps * 1e9);
    }
    let mut when = Family::gauge("meshrun_coll_timestamp_seconds", "When the run ended (Unix time).");
    when.sample(name, now);
    text(&[time, algbw, busbw, wrong, average, pass, bar, when])
}

impl Exporter<CollRun<'_>> for CollMetrics {
    fn render(&self, run: &CollRun<'_>) -> Result<Vec<u8>, ExportError> {
        Ok(render(run, self.now).into_bytes())
    }
}
