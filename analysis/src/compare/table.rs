//! The comparison: per collective (or test) and size, each file's figure and its ratio to the
//! first file's, oriented so that below 1 is always worse than the first (bandwidth: this /
//! first; latency: first / this); a geometric-mean summary over the sizes from `--from`; and
//! `--min-ratio`: the sizes below it. Its two reports are [`Exporter`]s of the
//! [`FileComparison`]: [`CompareText`] and `--json` ([`CompareJson`]).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::{Better, Parsed, Series};
use crate::export::{ExportError, Exporter};

/// One file, read.
pub struct Input {
    /// As the user named it.
    pub path: String,
    pub parsed: Parsed,
}

/// What the comparison found, besides its text.
#[derive(Debug, Default, PartialEq)]
pub struct FileComparison {
    pub text: String,
    /// (file index, series name, size, ratio) below `--min-ratio`.
    pub below: Vec<(usize, String, u64, f64)>,
    /// Geometric-mean ratio per (file index >= 1, series name).
    pub summary: Vec<(usize, String, Option<f64>)>,
}

/// Oriented ratio of `v` to the first file's `base`: below 1 is worse. None where undefined.
pub fn ratio(better: Better, base: f64, v: f64) -> Option<f64> {
    let r = match better {
        Better::Higher => v / base,
        Better::Lower => base / v,
    };
    (r.is_finite() && r > 0.0).then_some(r)
}

/// Geometric mean of positive ratios; None for none.
pub fn geomean(rs: &[f64]) -> Option<f64> {
    (!rs.is_empty()).then(|| (rs.iter().map(|r| r.ln()).sum::<f64>() / rs.len() as f64).exp())
}

fn label(s: &Series, k: usize) -> String {
    s.name
        .clone()
        .unwrap_or_else(|| format!("(unnamed collective {})", k + 1))
}

/// The series of `other` to set beside `base` (series `k` of the first file): the same name,
/// else the one at the same position when neither is named, else the only one when both files
/// hold exactly one.
fn matching<'a>(base: &Series, k: usize, first: &Parsed, other: &'a Parsed) -> Option<&'a Series> {
    if let Some(n) = &base.name {
        if let Some(s) = other.series.iter().find(|s| s.name.as_ref() == Some(n)) {
            return Some(s);
        }
    }
    if base.name.is_none() {
        if let Some(s) = other.series.get(k).filter(|s| s.name.is_none()) {
            return Some(s);
        }
    }
    (first.series.len() == 1 && other.series.len() == 1).then(|| &other.series[0])
}

fn fmt_size(n: u64) -> String {
    n.to_string()
}

fn fmt_val(v: Option<f64>) -> String {
    match v {
        Some(x) if x.abs() >= 1000.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.3}"),
        None => "-".into(),
    }
}

/// The side-by-side tables, as printed ([`FileComparison::text`]).
pub struct CompareText;

impl Exporter<FileComparison> for CompareText {
    fn render(&self, c: &FileComparison) -> Result<Vec<u8>, ExportError> {
        Ok(c.text.clone().into_bytes())
    }
}

/// `--json` ([`json`]) of the files compared, with the flags they were compared under.
pub struct CompareJson<'a> {
    pub inputs: &'a [Input],
    pub from: u64,
    pub min_ratio: Option<f64>,
}

impl Exporter<FileComparison> for CompareJson<'_> {
    fn render(&self, c: &FileComparison) -> Result<Vec<u8>, ExportError> {
        Ok(serde_json::to_vec_pretty(&json(self.inputs, c, self.from, self.min_ratio)).unwrap_or_default())
    }
}

/// The version of [`json`]'s layout: raised when a key changes meaning or goes away.
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// `meshrun compare --json`: every file as read (format, ranks, warnings, each series' figure per
/// size), each later file's geometric-mean ratio per series, and the sizes below `--min-ratio`.
pub fn json(inputs: &[Input], out: &FileComparison, from: u64, min_ratio: Option<f64>) -> serde_json::Value {
    use serde_json::json;
    let files: Vec<serde_json::Value> = inputs
        .iter()
        .map(|i| {
            json!({
                "path": i.path,
                "format": i.parsed.format,
                "ranks": i.parsed.ranks,
                "warnings": i.parsed.warnings,
                "series": i.parsed.series,
            })
        })
        .collect();
    json!({
        "tool": "meshrun",
        "test": "compare",
        "schema_version": JSON_SCHEMA_VERSION,
        "version": env!("CARGO_PKG_VERSION"),
        "from_bytes": from,
        "min_ratio": min_ratio,
        "files": files,
        "summary": out.summary.iter().map(|(f, name, r)| json!({"file": f + 1, "series": name, "geomean_ratio": r})).collect::<Vec<_>>(),
        "below_min_ratio": out.below.iter().map(|(f, name, size, r)| json!({"file": f + 1, "series": name, "bytes": size, "ratio": r})).collect::<Vec<_>>(),
    })
}

/// Compare `inputs[1..]` with `inputs[0]`.
pub fn compare(inputs: &[Input], from: u64, min_ratio: Option<f64>) -> FileComparison {
    let mut out = FileComparison::default();
    file_lines(&mut out.text, inputs);
    let Some(first) = inputs.first() else {
        return out;
    };
    rank_warnings(&mut out.text, inputs, first);
    // Per later file, the positions of its series set beside one of the first file's.
    let mut matched_other: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); inputs.len()];
    for (k, base) in first.parsed.series.iter().enumerate() {
        let others: Vec<Option<&Series>> = inputs
            .iter()
            .skip(1)
            .map(|inp| matching(base, k, &first.parsed, &inp.parsed))
            .collect();
        for (j, o) in others.iter().enumerate() {
            if let Some(o) = o {
                if let Some(pos) = inputs[j + 1].parsed.series.iter().position(|x| std::ptr::eq(x, *o)) {
                    matched_other[j + 1].insert(pos);
                }
            }
        }
        let name = label(base, k);
        let ratios = size_rows(&mut out, base, &name, &others, from, min_ratio);
        file_notes(&mut out, base, &name, &others, &ratios, from);
    }
    unmatched(&mut out.text, inputs, &matched_other);
    min_ratio_line(&mut out, min_ratio);
    out
}

/// One line per file (its format, ranks and series) and the warnings its reader gave.
fn file_lines(s: &mut String, inputs: &[Input]) {
    let _ = writeln!(
        s,
        "# meshrun compare: each file's figure beside the first's; ratio = this / first for bandwidth, first / this for latency (below 1: worse than [1])"
    );
    for (i, inp) in inputs.iter().enumerate() {
        let names: Vec<String> = inp
            .parsed
            .series
            .iter()
            .enumerate()
            .map(|(k, se)| label(se, k))
            .collect();
        let ranks = inp
            .parsed
            .ranks
            .map_or("ranks not stated".to_string(), |r| format!("{r} ranks"));
        let _ = writeln!(
            s,
            "# [{}] {}: {}, {}; {}",
            i + 1,
            inp.path,
            inp.parsed.format,
            ranks,
            names.join(", ")
        );
        for w in &inp.parsed.warnings {
            let _ = writeln!(s, "# [{}] warning: {w}", i + 1);
        }
    }
}

/// A warning for each collective run on another rank count than the first.
fn rank_warnings(s: &mut String, inputs: &[Input], first: &Input) {
    for (i, inp) in inputs.iter().enumerate().skip(1) {
        // Pairwise and perftest figures are per pair, whatever the job's size.
        let collective = first.parsed.series.iter().any(|se| se.figure.contains("busbw"));
        if let (true, Some(a), Some(b)) = (collective, first.parsed.ranks, inp.parsed.ranks) {
            if a != b {
                let _ = writeln!(
                    s,
                    "# warning: [1] ran on {a} ranks and [{}] on {b}: bus bandwidth compares across rank counts, time per call does not",
                    i + 1
                );
            }
        }
    }
}

/// The table of series `name` of the first file (`base`) beside each later file's counterpart
/// (`others`): one row per size of `base`, each later file's figure and ratio. Records the
/// ratios below `min_ratio`; returns each later file's ratios from the size `from` on.
fn size_rows(
    out: &mut FileComparison,
    base: &Series,
    name: &str,
    others: &[Option<&Series>],
    from: u64,
    min_ratio: Option<f64>,
) -> Vec<Vec<f64>> {
    let s = &mut out.text;
    let _ = writeln!(s, "#\n## {name}: {}", base.figure);
    let mut head = format!("{:>12}  {:>10}", "size", "[1]");
    for j in 0..others.len() {
        let _ = write!(
            head,
            "  {:>10}  {:>8}",
            format!("[{}]", j + 2),
            format!("[{}]/[1]", j + 2)
        );
    }
    let _ = writeln!(s, "#{}", &head[1..]);
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); others.len()];
    for (&size, &b) in &base.points {
        let mut line = format!("{:>12}  {:>10}", fmt_size(size), fmt_val(Some(b)));
        for (j, o) in others.iter().enumerate() {
            let v = o.and_then(|o| o.points.get(&size).copied());
            let r = v.and_then(|v| ratio(base.better, b, v));
            let _ = write!(
                line,
                "  {:>10}  {:>8}",
                fmt_val(v),
                r.map_or("-".into(), |r| format!("{r:.3}"))
            );
            if let Some(r) = r {
                if size >= from {
                    ratios[j].push(r);
                }
                if min_ratio.is_some_and(|m| r < m) {
                    out.below.push((j + 1, name.to_string(), size, r));
                }
            }
        }
        let _ = writeln!(s, "{line}");
    }
    ratios
}

/// Under a series' table, for each later file: the sizes only one side has, a counterpart of
/// another name, and the geometric mean of its `ratios` (recorded in the summary).
fn file_notes(
    out: &mut FileComparison,
    base: &Series,
    name: &str,
    others: &[Option<&Series>],
    ratios: &[Vec<f64>],
    from: u64,
) {
    let s = &mut out.text;
    for (j, o) in others.iter().enumerate() {
        let Some(o) = o else {
            let _ = writeln!(s, "# [{}] has no {name}", j + 2);
            continue;
        };
        let only: Vec<String> = o
            .points
            .keys()
            .filter(|z| !base.points.contains_key(z))
            .map(|z| z.to_string())
            .collect();
        if !only.is_empty() {
            let _ = writeln!(s, "# only in [{}]: {}", j + 2, only.join(" "));
        }
        let missing: Vec<String> = base
            .points
            .keys()
            .filter(|z| !o.points.contains_key(z))
            .map(|z| z.to_string())
            .collect();
        if !missing.is_empty() {
            let _ = writeln!(s, "# only in [1], not in [{}]: {}", j + 2, missing.join(" "));
        }
        if o.name != base.name {
            let _ = writeln!(s, "# [{}]'s {} set beside [1]'s {name}", j + 2, label(o, 0));
        }
        let g = geomean(&ratios[j]);
        let _ = writeln!(
            s,
            "# summary [{}]/[1] over sizes >= {from}: geometric mean {} ({} sizes)",
            j + 2,
            g.map_or("-".into(), |g| format!("{g:.3}")),
            ratios[j].len()
        );
        out.summary.push((j + 1, name.to_string(), g));
    }
}

/// A line for each series of a later file that no series of the first was set beside.
fn unmatched(s: &mut String, inputs: &[Input], matched_other: &[BTreeSet<usize>]) {
    for (i, inp) in inputs.iter().enumerate().skip(1) {
        for (k, se) in inp.parsed.series.iter().enumerate() {
            if !matched_other[i].contains(&k) {
                let _ = writeln!(
                    s,
                    "# [{}]'s {} has no counterpart in [1]: not compared",
                    i + 1,
                    label(se, k)
                );
            }
        }
    }
}

/// `--min-ratio`: OK, or FAILED with every ratio below it.
fn min_ratio_line(out: &mut FileComparison, min_ratio: Option<f64>) {
    let Some(m) = min_ratio else {
        return;
    };
    if out.below.is_empty() {
        let _ = writeln!(out.text, "# OK: no ratio below {m}");
    } else {
        let list: Vec<String> = out
            .below
            .iter()
            .map(|(j, n, z, r)| format!("[{}] {n} {z} B ({r:.3})", j + 1))
            .collect();
        let _ = writeln!(out.text, "# FAILED: below --min-ratio {m}: {}", list.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn series(name: Option<&str>, better: Better, pts: &[(u64, f64)]) -> Series {
        Series {
            name: name.map(String::from),
            figure: "out-of-place busbw (GB/s)".into(),
            better,
            points: pts.iter().copied().collect::<BTreeMap<_, _>>(),
        }
    }

    fn input(path: &str, ranks: Option<usize>, s: Vec<Series>) -> Input {
        Input {
            path: path.into(),
            parsed: Parsed {
                format: "test",
                ranks,
                series: s,
                warnings: Vec::new(),
            },
        }
    }

    #[test]
    fn ratios_oriented_and_geomean_by_hand() {
        assert_eq!(ratio(Better::Higher, 10.0, 5.0), Some(0.5));
        assert_eq!(ratio(Better::Lower, 10.0, 5.0), Some(2.0));
        assert_eq!(ratio(Better::Higher, 0.0, 5.0), None);
        // sqrt(0.5 * 2) = 1; cube root of (2 * 4 * 8) = 4.
        assert!((geomean(&[0.5, 2.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((geomean(&[2.0, 4.0, 8.0]).unwrap() - 4.0).abs() < 1e-12);
        assert_eq!(geomean(&[]), None);
    }

    #[test]
    fn sizes_in_one_file_are_listed_and_min_ratio_names_sizes() {
        let a = input(
            "a",
            Some(8),
            vec![series(
                Some("all_reduce"),
                Better::Higher,
                &[(8, 1.0), (1024, 10.0), (4096, 20.0)],
            )],
        );
        let b = input(
            "b",
            Some(4),
            vec![series(
                Some("all_reduce"),
                Better::Higher,
                &[(1024, 8.0), (4096, 22.0), (8192, 30.0)],
            )],
        );
        let o = compare(&[a, b], 1024, Some(0.9));
        assert!(
            o.text.contains("# warning: [1] ran on 8 ranks and [2] on 4"),
            "{}",
            o.text
        );
        assert!(o.text.contains("# only in [2]: 8192"), "{}", o.text);
        assert!(o.text.contains("# only in [1], not in [2]: 8"), "{}", o.text);
        assert_eq!(o.below, vec![(1, "all_reduce".to_string(), 1024, 0.8)]);
        // sqrt(0.8 * 1.1)
        let g = o.summary[0].2.unwrap();
        assert!((g - (0.8f64 * 1.1).sqrt()).abs() < 1e-12, "{g}");
        assert!(
            o.text
                .contains("# FAILED: below --min-ratio 0.9: [2] all_reduce 1024 B (0.800)"),
            "{}",
            o.text
        );
    }

    #[test]
    fn unnamed_series_match_by_position_and_unmatched_ones_are_said() {
        let a = input("a", None, vec![series(None, Better::Lower, &[(2, 1.5)])]);
        let b = input(
            "b",
            None,
            vec![
                series(None, Better::Lower, &[(2, 3.0)]),
                series(Some("x"), Better::Lower, &[(2, 1.0)]),
            ],
        );
        let o = compare(&[a, b], 0, None);
        // Latency: first / this = 1.5 / 3 = 0.5.
        assert_eq!(o.summary[0].2, Some(0.5));
        assert!(
            o.text.contains("# [2]'s x has no counterpart in [1]: not compared"),
            "{}",
            o.text
        );
    }
}
