//! What `meshrun mesh-check` found: every rank's view of every peer (payload verified, round-trip
//! times), and its two reports, each an [`Exporter`] of a [`MeshCheckRun`]: the N x N table rank 0
//! prints ([`MeshCheckText`]) and `--json` ([`MeshCheckJson`]). The check itself runs in
//! `collectives::mesh_check`.

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::export::{ExportError, Exporter};
use crate::stats::median;

/// What to check.
#[derive(Debug, Clone)]
pub struct MeshCheckConfig {
    /// Payload bytes swapped each way.
    pub bytes: usize,
    /// Round trips timed per pair.
    pub iters: usize,
    /// Deadline of each communication step.
    pub op_timeout: Duration,
}

/// What one rank saw of one peer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PeerCheck {
    pub peer: usize,
    /// Bytes of the peer's payload that arrived wrong.
    pub wrong_bytes: usize,
    /// Round-trip times in microseconds: min, median, max (measured by the lower rank of the pair only).
    pub rtt_us: Option<[f64; 3]>,
}

/// A finished check as rank 0 reports it: the job's hosts (one a rank), the transport, what was
/// checked, and every rank's view of every peer.
#[derive(Debug, Clone, Copy)]
pub struct MeshCheckRun<'a> {
    pub hosts: &'a [String],
    pub transport: &'a str,
    pub cfg: &'a MeshCheckConfig,
    pub all: &'a [Vec<PeerCheck>],
}

impl MeshCheckRun<'_> {
    /// Some pair, and every pair timed with its payload right both ways (the text report's rule).
    pub fn pass(&self) -> bool {
        Grid::of(self).pass()
    }
}

/// The text table rank 0 prints ([`text`]).
pub struct MeshCheckText;

impl Exporter<MeshCheckRun<'_>> for MeshCheckText {
    fn render(&self, run: &MeshCheckRun<'_>) -> Result<Vec<u8>, ExportError> {
        Ok(text(run).into_bytes())
    }
}

/// `--json` ([`json`]).
pub struct MeshCheckJson;

impl Exporter<MeshCheckRun<'_>> for MeshCheckJson {
    fn render(&self, run: &MeshCheckRun<'_>) -> Result<Vec<u8>, ExportError> {
        Ok(serde_json::to_vec_pretty(&json(run)).unwrap_or_default())
    }
}

/// What the table shows: each pair's median round trip (both cells), the pairs whose payload
/// arrived wrong either way, and a line for each wrong payload and each pair without a result.
struct Grid {
    /// Pairs of ranks.
    pairs: usize,
    rtt: Vec<Vec<Option<f64>>>,
    bad: Vec<Vec<bool>>,
    failures: Vec<String>,
    missing: Vec<String>,
}

impl Grid {
    fn of(run: &MeshCheckRun<'_>) -> Grid {
        let hosts = run.hosts;
        let n = hosts.len();
        let mut rtt = vec![vec![None::<f64>; n]; n];
        let mut bad = vec![vec![false; n]; n];
        let mut failures = Vec::new();
        let mut missing = Vec::new();
        for (r, checks) in run.all.iter().enumerate() {
            for c in checks {
                if let Some([_, med, _]) = c.rtt_us {
                    rtt[r][c.peer] = Some(med);
                    rtt[c.peer][r] = Some(med);
                }
                if c.wrong_bytes > 0 {
                    failures.push(format!(
                        "rank {r} ({}) received {} of {} bytes wrong from rank {} ({})",
                        hosts[r], c.wrong_bytes, run.cfg.bytes, c.peer, hosts[c.peer]
                    ));
                    bad[r][c.peer] = true;
                    bad[c.peer][r] = true;
                }
            }
        }
        for i in 0..n {
            for j in i + 1..n {
                if rtt[i][j].is_none() {
                    missing.push(format!("{i} ({}) <-> {j} ({})", hosts[i], hosts[j]));
                }
            }
        }
        Grid {
            pairs: n * (n - 1) / 2,
            rtt,
            bad,
            failures,
            missing,
        }
    }

    /// Some pair, every pair timed, no payload wrong.
    fn pass(&self) -> bool {
        self.failures.is_empty() && self.missing.is_empty() && self.pairs > 0
    }
}

/// The report rank 0 prints: the N x N table of round trips and the closing OK line, or a FAILED line for each fault.
pub fn text(run: &MeshCheckRun<'_>) -> String {
    let MeshCheckRun {
        hosts, transport, cfg, ..
    } = *run;
    let n = hosts.len();
    let grid = Grid::of(run);
    let ok = grid.pass();
    let Grid {
        pairs,
        rtt,
        bad,
        failures,
        missing,
    } = grid;
    let mut nodes: Vec<&String> = hosts.iter().collect();
    nodes.sort();
    nodes.dedup();
    let hw = hosts.iter().map(|h| h.len()).max().unwrap_or(4).max(4);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# meshrun mesh-check: {n} ranks on {} host(s) over {transport}, {}-byte payload each way, {} round trips per pair",
        nodes.len(),
        cfg.bytes,
        cfg.iters
    );
    let _ = writeln!(
        s,
        "# round-trip time in microseconds (median); `-` the rank itself; `FAIL` a pair whose payload arrived wrong"
    );
    let _ = write!(s, "{:>6}  {:<hw$}", "rank", "host");
    for j in 0..n {
        let _ = write!(s, " {j:>8}");
    }
    s.push('\n');
    for i in 0..n {
        let _ = write!(s, "{i:>6}  {:<hw$}", hosts[i]);
        for j in 0..n {
            let cell = if i == j {
                "-".to_string()
            } else if bad[i][j] {
                "FAIL".to_string()
            } else {
                rtt[i][j].map_or("?".to_string(), |v| format!("{v:.1}"))
            };
            let _ = write!(s, " {cell:>8}");
        }
        s.push('\n');
    }
    let mut all_rtts: Vec<f64> = (0..n)
        .flat_map(|i| {
            (i + 1..n).filter_map({
                let rtt = &rtt;
                move |j| rtt[i][j]
            })
        })
        .collect();
    if pairs == 0 {
        // The rank commands refuse a job of one rank; a report of no pair never passes.
        let _ = writeln!(s, "# FAILED: {n} rank(s): no pair to check");
    } else if ok {
        let min = all_rtts.iter().copied().fold(f64::INFINITY, f64::min);
        let max = all_rtts.iter().copied().fold(0.0, f64::max);
        let med = median(&mut all_rtts);
        let _ = writeln!(
            s,
            "# OK: all {pairs} pairs reachable, payloads verified both ways; RTT min {min:.1} us, median {med:.1} us, max {max:.1} us"
        );
    } else {
        for f in &failures {
            let _ = writeln!(s, "# FAILED: {f}");
        }
        for m in &missing {
            let _ = writeln!(s, "# FAILED: no result for pair {m}");
        }
    }
    s
}

/// The version of [`json`]'s layout: raised when a key changes meaning or goes away.
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// `mesh-check --json`: the run's facts, every pair (payload verified both ways, round-trip
/// minimum, median and maximum in microseconds from the lower rank) and whether all passed.
pub fn json(run: &MeshCheckRun<'_>) -> serde_json::Value {
    let MeshCheckRun {
        hosts,
        transport,
        cfg,
        all,
    } = *run;
    let n = hosts.len();
    let mut pairs = Vec::new();
    for i in 0..n {
        for j in i + 1..n {
            let seen = |a: usize, b: usize| all.get(a).and_then(|v| v.iter().find(|c| c.peer == b));
            let (ij, ji) = (seen(i, j), seen(j, i));
            let rtt = ij.and_then(|c| c.rtt_us).or(ji.and_then(|c| c.rtt_us));
            let wrong = [ij, ji].iter().flatten().map(|c| c.wrong_bytes).sum::<usize>();
            let state = if ij.is_none() && ji.is_none() {
                "missing"
            } else if wrong > 0 {
                "wrong_payload"
            } else {
                "ok"
            };
            pairs.push(serde_json::json!({
                "a": i, "b": j, "host_a": hosts[i], "host_b": hosts[j],
                "state": state,
                "wrong_bytes": wrong,
                "rtt_us": rtt.map(|[lo, med, hi]| serde_json::json!({"min": lo, "median": med, "max": hi})),
            }));
        }
    }
    // The text report's rule, without rendering it: some pair, and every pair timed and right.
    let pass = !pairs.is_empty() && pairs.iter().all(|p| p["wrong_bytes"] == 0 && !p["rtt_us"].is_null());
    serde_json::json!({
        "tool": "meshrun",
        "test": "mesh-check",
        "schema_version": JSON_SCHEMA_VERSION,
        "version": env!("CARGO_PKG_VERSION"),
        "transport": transport,
        "hosts": hosts,
        "bytes": cfg.bytes,
        "iters": cfg.iters,
        "pairs": pairs,
        "pass": pass,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(bytes: usize, iters: usize) -> MeshCheckConfig {
        MeshCheckConfig {
            bytes,
            iters,
            op_timeout: Duration::from_secs(1),
        }
    }

    fn check(peer: usize, wrong_bytes: usize, rtt_us: Option<[f64; 3]>) -> PeerCheck {
        PeerCheck {
            peer,
            wrong_bytes,
            rtt_us,
        }
    }

    /// The text report of a tcp check, and whether it passed.
    fn report(hosts: &[String], cfg: &MeshCheckConfig, all: &[Vec<PeerCheck>]) -> (String, bool) {
        let run = MeshCheckRun {
            hosts,
            transport: "tcp",
            cfg,
            all,
        };
        (text(&run), run.pass())
    }

    #[test]
    fn json_has_every_pair_with_its_state() {
        let hosts: Vec<String> = ["a", "a", "b"].map(String::from).to_vec();
        let all = vec![
            vec![check(1, 0, Some([1.0, 2.0, 3.0])), check(2, 0, Some([4.0, 5.0, 6.0]))],
            vec![check(0, 0, None), check(2, 3, Some([7.0, 8.0, 9.0]))],
            vec![check(0, 0, None), check(1, 0, None)],
        ];
        let j = json(&MeshCheckRun {
            hosts: &hosts,
            transport: "tcp",
            cfg: &cfg(8, 1),
            all: &all,
        });
        assert_eq!(j["schema_version"], 1);
        assert_eq!(j["pass"], false);
        let p = j["pairs"].as_array().unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(
            (p[0]["state"].as_str(), p[0]["rtt_us"]["median"].as_f64()),
            (Some("ok"), Some(2.0))
        );
        assert_eq!(
            (p[2]["a"].as_u64(), p[2]["b"].as_u64(), p[2]["state"].as_str()),
            (Some(1), Some(2), Some("wrong_payload"))
        );
        assert_eq!(p[2]["wrong_bytes"], 3);
    }

    #[test]
    fn no_pair_is_not_a_pass() {
        let (text, ok) = report(&["a".to_string()], &cfg(8, 1), &[vec![]]);
        assert!(!ok, "{text}");
        assert!(
            text.contains("# FAILED: 1 rank(s): no pair to check") && !text.contains("inf"),
            "{text}"
        );
    }

    #[test]
    fn report_marks_failures_and_fills_both_cells() {
        let hosts: Vec<String> = vec!["a".into(), "a".into(), "b".into()];
        let pc = |peer, wrong, rtt: Option<f64>| check(peer, wrong, rtt.map(|v| [v, v, v]));
        let all = vec![
            vec![pc(1, 0, Some(10.0)), pc(2, 0, Some(30.0))],
            vec![pc(0, 0, None), pc(2, 0, Some(20.0))],
            vec![pc(0, 0, None), pc(1, 3, None)],
        ];
        let (text, ok) = report(&hosts, &cfg(16, 3), &all);
        assert!(!ok);
        assert!(
            text.contains("# FAILED: rank 2 (b) received 3 of 16 bytes wrong from rank 1 (a)"),
            "{text}"
        );
        let row0 = text.lines().find(|l| l.trim_start().starts_with("0  a")).unwrap();
        assert_eq!(
            row0.split_whitespace().collect::<Vec<_>>(),
            vec!["0", "a", "-", "10.0", "30.0"]
        );
        let row2 = text.lines().find(|l| l.trim_start().starts_with("2  b")).unwrap();
        assert_eq!(
            row2.split_whitespace().collect::<Vec<_>>(),
            vec!["2", "b", "30.0", "FAIL", "-"]
        );
    }
}
