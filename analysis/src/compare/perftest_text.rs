//! perftest's text output (`ib_write_bw -a`, `ib_write_lat -a`, ...) and meshrun pairwise's
//! (the same columns plus src, dst and hosts, one row per pair: the median over pairs per size).
//! The title line (`RDMA_Write BW Test`) names the test; bandwidth is BW average, in Gb/sec
//! (`--report_gbits`) or MB/sec (perftest's default: 2^20 bytes per second, converted here);
//! latency is t_typical in usec. A table without the rule perftest prints under its last row
//! (a run killed mid-table) is read, with a warning.

use std::collections::BTreeMap;

use super::{error, medians, Better, FormatError, Parsed, Series};

/// Whether the text has perftest's result header.
pub fn looks_like(text: &str) -> bool {
    text.lines().any(is_header)
}

/// Whether a line is perftest's result header.
pub fn is_header(line: &str) -> bool {
    line.trim_start().starts_with("#bytes")
}

#[derive(Clone, Copy, PartialEq)]
enum PerftestKind {
    /// Bandwidth, and the factor from its unit to Gb/s.
    Bw(f64),
    Lat,
}

impl PerftestKind {
    /// What a `#bytes` header's table holds; None for a bandwidth in no unit known.
    fn of_header(t: &str) -> Option<PerftestKind> {
        if t.contains("t_typical") {
            Some(PerftestKind::Lat)
        } else if t.contains("[MB/sec]") {
            Some(PerftestKind::Bw(1048576.0 * 8.0 / 1e9))
        } else if t.contains("[Gb/sec]") {
            Some(PerftestKind::Bw(1.0))
        } else {
            None
        }
    }
}

pub fn parse(path: &str, text: &str) -> Result<Parsed, FormatError> {
    let mut title: Option<String> = None;
    let mut kind: Option<PerftestKind> = None;
    let mut ranks: Option<usize> = None;
    let mut by_size: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    let mut pairwise = false;
    let mut last_kind: Option<PerftestKind> = None;
    // The line of the last result row while its table is still open (no rule under it yet).
    let mut open_table: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if title.is_none() {
            if let Some((head, by_meshrun)) = title_of(t) {
                pairwise = by_meshrun;
                title = Some(head);
                continue;
            }
        }
        if let Some(p) = t.find("Ranks ") {
            // meshrun pairwise: `Transport : tcp   Ranks          : 4 on 2 host(s)`.
            let rest = t[p + 5..].trim_start().trim_start_matches(':');
            ranks = rest.split_whitespace().next().and_then(|n| n.parse().ok()).or(ranks);
        }
        if t.starts_with("#bytes") {
            kind = Some(PerftestKind::of_header(t).ok_or_else(|| {
                error(
                    path,
                    i + 1,
                    "a #bytes header with neither t_typical nor a BW unit ([Gb/sec] or [MB/sec])",
                )
            })?);
            last_kind = kind;
            continue;
        }
        let Some(k) = kind else { continue };
        if t.starts_with("---") && !by_size.is_empty() {
            // The rule under the results: what follows (meshrun's matrix) is not a result row.
            kind = None;
            open_table = None;
            continue;
        }
        let words: Vec<&str> = t.split_whitespace().collect();
        let Some(size) = words.first().and_then(|w| w.parse::<u64>().ok()) else {
            continue;
        };
        let at = match k {
            PerftestKind::Bw(_) => 3,
            PerftestKind::Lat => 4,
        };
        let Some(v) = words.get(at).and_then(|w| w.parse::<f64>().ok()) else {
            return Err(error(
                path,
                i + 1,
                format!("a result row without a number in column {}", at + 1),
            ));
        };
        let v = match k {
            PerftestKind::Bw(f) => v * f,
            PerftestKind::Lat => v,
        };
        by_size.entry(size).or_default().push(v);
        open_table = Some(i + 1);
    }
    let Some(k) = last_kind else {
        return Err(error(path, 1, "no #bytes header"));
    };
    if by_size.is_empty() {
        return Err(error(path, 1, "a #bytes header but no result rows"));
    }
    Ok(parsed(k, pairwise, title, ranks, by_size, open_table))
}

/// The title line's test (`RDMA_Write BW`, `RDMA_Write Lat`), and whether meshrun pairwise
/// printed it; None for another line.
fn title_of(t: &str) -> Option<(String, bool)> {
    let head = &t[..t.find(" Test")?];
    (head.ends_with(" BW") || head.ends_with(" Latency") || head.ends_with(" Lat"))
        .then(|| (head.replace(" Latency", " Lat"), t.contains("(meshrun pairwise)")))
}

/// The one series read: its figure per size (`by_size`, the median over pairs of a pairwise
/// run), named by the title, with a warning where the table was left open (`open_table`: its
/// last row's line).
fn parsed(
    k: PerftestKind,
    pairwise: bool,
    title: Option<String>,
    ranks: Option<usize>,
    by_size: BTreeMap<u64, Vec<f64>>,
    open_table: Option<usize>,
) -> Parsed {
    let (figure, better) = match (k, pairwise) {
        (PerftestKind::Bw(_), false) => ("BW average (Gb/s)", Better::Higher),
        (PerftestKind::Bw(_), true) => ("BW average (Gb/s), median over pairs", Better::Higher),
        (PerftestKind::Lat, false) => ("t_typical (usec)", Better::Lower),
        (PerftestKind::Lat, true) => ("t_typical (usec), median over pairs", Better::Lower),
    };
    let warnings = open_table
        .map(|line| {
            format!(
                "{}: no rule under the results (last row: line {line}): the run may have stopped early",
                title.as_deref().unwrap_or("perftest")
            )
        })
        .into_iter()
        .collect();
    Parsed {
        format: if pairwise {
            "meshrun pairwise text"
        } else {
            "perftest text"
        },
        ranks: if pairwise { ranks } else { Some(2) },
        series: vec![Series {
            name: title,
            figure: figure.into(),
            better,
            points: medians(by_size),
        }],
        warnings,
    }
}
