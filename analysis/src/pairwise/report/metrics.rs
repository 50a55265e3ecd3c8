//! `--metrics FILE`: the run as Prometheus text (node exporter's textfile collector): every
//! direction's bandwidth or latency at the matrix size, the verdict and each blamed part, the
//! sensitivity per population, what each NIC's counters counted, and when and how long the run
//! took. Units are Prometheus' base units (bytes per second, seconds).

use crate::export::{ExportError, Exporter};
use crate::metrics::{render as text, Family};
use crate::pairwise::{PairwiseOutcome, TestKind};

/// `--metrics FILE`; `now` is the run's end (Unix seconds), for `meshrun_pairwise_timestamp_seconds`.
pub struct PairwiseMetrics {
    pub now: f64,
}

/// A rank's NIC as the run's rails recorded it, or the transport's device.
fn device(o: &PairwiseOutcome, rank: usize) -> String {
    o.rails
        .iter()
        .flat_map(|r| r.ranks.iter().zip(&r.nics))
        .find(|(r, _)| **r == rank)
        .and_then(|(_, n)| n.clone())
        .or_else(|| {
            o.transport_details
                .iter()
                .find(|(k, _)| k == "Device")
                .map(|(_, v)| v.clone())
        })
        .unwrap_or_default()
}

pub fn render(o: &PairwiseOutcome, now: f64) -> String {
    let [bw, lat] = rate_families(o);
    let [pass, slow, sens, bulk] = verdict_families(o);
    let mut when = Family::gauge("meshrun_pairwise_timestamp_seconds", "When the run ended (Unix time).");
    when.sample(vec![], now);
    text(&[
        bw,
        lat,
        pass,
        slow,
        sens,
        bulk,
        stat_family(o),
        duration_family(o),
        when,
    ])
}

/// Each direction's bandwidth or latency at the matrix size in the first pass.
fn rate_families(o: &PairwiseOutcome) -> [Family; 2] {
    let op = o.config.op.as_str().to_string();
    let size = o.config.matrix_size() as u64;
    let mut bw = Family::gauge(
        "meshrun_pairwise_bandwidth_bytes_per_second",
        "Average bandwidth of one direction between two ranks at the matrix size (first pass).",
    );
    let mut lat = Family::gauge(
        "meshrun_pairwise_latency_seconds",
        "Typical (median) one-way latency between two ranks at the matrix size (first pass).",
    );
    for m in o.measurements.iter().filter(|m| m.bytes == size && !m.retest) {
        let labels = vec![
            ("src_host", o.hosts.get(m.src).cloned().unwrap_or_default()),
            ("src_rank", m.src.to_string()),
            ("dst_host", o.hosts.get(m.dst).cloned().unwrap_or_default()),
            ("dst_rank", m.dst.to_string()),
            ("src_device", device(o, m.src)),
            ("bytes", m.bytes.to_string()),
            ("op", op.clone()),
            ("transport", o.transport.clone()),
        ];
        match (&m.bw, &m.lat) {
            (Some(b), _) => bw.sample(labels, b.avg_gbps * 1e9 / 8.0),
            (None, Some(l)) => lat.sample(labels, l.t_typical * 1e-6),
            (None, None) => {}
        }
    }
    [bw, lat]
}

/// The verdict: pass, each slow part, and per population the sensitivity and the healthy
/// bulk's median.
fn verdict_families(o: &PairwiseOutcome) -> [Family; 4] {
    let mut pass = Family::gauge(
        "meshrun_pairwise_pass",
        "1 when the verdict named no slow part, else 0.",
    );
    pass.sample(vec![], if o.pass() { 1.0 } else { 0.0 });
    let mut slow = Family::gauge(
        "meshrun_pairwise_slow_part",
        "A part of the fabric the verdict named slow (always 1; its labels say which).",
    );
    for p in o
        .verdict
        .blamed
        .iter()
        .chain(o.rails.iter().flat_map(|r| &r.verdict.blamed))
    {
        slow.sample(vec![("level", p.level().to_string()), ("part", p.name())], 1.0);
    }
    let mut sens = Family::gauge(
        "meshrun_pairwise_sensitivity_ratio",
        "The smallest drop below the healthy bulk (fraction) the run would have named, per population.",
    );
    let mut bulk = Family::gauge(
        "meshrun_pairwise_healthy_median_bytes_per_second",
        "Median bandwidth of the healthy bulk, per population (bandwidth tests).",
    );
    for j in &o.verdict.judged {
        // between_hosts, within_host: as the JSON spells them.
        let name = serde_json::to_value(j.population)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let population = vec![("population", name)];
        sens.sample(population.clone(), j.sensitivity);
        if o.config.test == TestKind::Bw {
            bulk.sample(population, j.bulk.median * 1e9 / 8.0);
        }
    }
    [pass, slow, sens, bulk]
}

/// How much each NIC or TCP statistic rose during the run.
fn stat_family(o: &PairwiseOutcome) -> Family {
    let mut counters = Family::gauge(
        // (promtool refuses "counter" in a metric's name.)
        "meshrun_pairwise_stat_increase",
        "How much a NIC or TCP statistic (sysfs or /proc counter) rose during the run.",
    );
    for m in &o.counters {
        for (k, v) in &m.deltas {
            counters.sample(
                vec![
                    ("host", m.host.clone()),
                    ("source", m.source.clone()),
                    ("stat", k.clone()),
                ],
                *v as f64,
            );
        }
    }
    counters
}

/// Where rank 0's time went.
fn duration_family(o: &PairwiseOutcome) -> Family {
    let mut duration = Family::gauge(
        "meshrun_pairwise_duration_seconds",
        "Wall time of the run's parts at rank 0: setup, rounds, retests.",
    );
    if let Some(t) = &o.timings {
        duration.sample(vec![("phase", "setup".into())], t.setup_s);
        duration.sample(vec![("phase", "rounds".into())], t.sweep_s);
        duration.sample(vec![("phase", "retests".into())], t.retest_s);
    }
    duration
}

impl Exporter<PairwiseOutcome> for PairwiseMetrics {
    fn render(&self, o: &PairwiseOutcome) -> Result<Vec<u8>, ExportError> {
        Ok(render(o, self.now).into_bytes())
    }
}
