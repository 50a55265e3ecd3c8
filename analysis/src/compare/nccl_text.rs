//! nccl-tests' text output (2.13 through 2.19 and later, as meshrun prints it too): sections
//! that start at `# nThread` (or at 2.19's `# Collective test starting: NAME` just before it),
//! one `#  Rank` line per rank, the column header, then rows. Columns are found by name in the
//! header (`busbw`, the first one: out of place), so extra columns (`-I`, `#bitdiff`,
//! timestamps) and whitespace collapsed by a publisher read the same. meshrun's `# Baseline:`
//! table (the MPI library's, `--baseline mpi`) is a section of its own.

use std::collections::BTreeMap;

use super::{error, Better, FormatError, Parsed, Series};

/// Whether the text has an nccl-tests column header.
pub fn looks_like(text: &str) -> bool {
    text.lines().any(|l| header_columns(l).is_some())
}

/// For a column header line (`# size count type redop root time algbw busbw ...`): the data
/// row index of the first `busbw`.
fn header_columns(line: &str) -> Option<usize> {
    let t = line.trim_start();
    let rest = t.strip_prefix('#')?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    if words.first() != Some(&"size") {
        return None;
    }
    words.iter().position(|w| *w == "busbw")
}

struct Section {
    name: Option<String>,
    ranks: usize,
    busbw_at: Option<usize>,
    points: BTreeMap<u64, f64>,
    started_by_name: bool,
}

impl Section {
    fn new(name: Option<String>) -> Section {
        Section {
            started_by_name: name.is_some(),
            name,
            ranks: 0,
            busbw_at: None,
            points: BTreeMap::new(),
        }
    }
    fn is_empty(&self) -> bool {
        self.points.is_empty() && self.busbw_at.is_none() && self.ranks == 0
    }
}

pub fn parse(path: &str, text: &str) -> Result<Parsed, FormatError> {
    let mut sections: Vec<Section> = Vec::new();
    let mut cur = Section::new(None);
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("# Collective test starting:") {
            if !cur.is_empty() {
                sections.push(std::mem::replace(&mut cur, Section::new(None)));
            }
            cur = Section::new(Some(name.trim().trim_end_matches("_perf").to_string()));
            continue;
        }
        if t.starts_with("# Baseline:") {
            // meshrun's --baseline mpi: the MPI library's table after meshrun's, same ranks.
            let name = format!("{} (MPI baseline)", cur.name.as_deref().unwrap_or("collective"));
            let ranks = cur.ranks;
            sections.push(std::mem::replace(&mut cur, Section::new(Some(name))));
            cur.ranks = ranks;
            continue;
        }
        if t.starts_with("# nThread") {
            // A new run, unless this is the header of the run a name line just opened.
            let opened_by_name = cur.started_by_name && cur.ranks == 0 && cur.points.is_empty();
            if !opened_by_name && !cur.is_empty() {
                sections.push(std::mem::replace(&mut cur, Section::new(None)));
            }
            continue;
        }
        if let Some(rest) = t.strip_prefix('#') {
            if rest.trim_start().starts_with("Rank ") {
                cur.ranks += 1;
            } else if let Some(at) = header_columns(t) {
                // A second table after rows: another run (or a baseline) of the same ranks.
                if !cur.points.is_empty() {
                    let ranks = cur.ranks;
                    sections.push(std::mem::replace(&mut cur, Section::new(None)));
                    cur.ranks = ranks;
                }
                cur.busbw_at = Some(at);
            }
            continue;
        }
        let words: Vec<&str> = t.split_whitespace().collect();
        let Some(size) = words.first().and_then(|w| w.parse::<u64>().ok()) else {
            continue; // "NCCL version ...", mpirun's chatter
        };
        let Some(at) = cur.busbw_at else {
            continue;
        };
        let Some(cell) = words.get(at) else {
            return Err(error(
                path,
                i + 1,
                format!(
                    "a row of {} columns; the header puts busbw in column {}",
                    words.len(),
                    at + 1
                ),
            ));
        };
        let busbw: f64 = cell
            .parse()
            .map_err(|_| error(path, i + 1, format!("busbw `{cell}` is not a number")))?;
        cur.points.insert(size, busbw);
    }
    if !cur.is_empty() {
        sections.push(cur);
    }
    let sections: Vec<Section> = sections.into_iter().filter(|s| !s.points.is_empty()).collect();
    if sections.is_empty() {
        return Err(error(path, 1, "an nccl-tests header but no result rows"));
    }
    let ranks = sections.iter().map(|s| s.ranks).max().filter(|&r| r > 0);
    Ok(Parsed {
        format: "nccl-tests text",
        ranks,
        series: sections
            .into_iter()
            .map(|s| Series {
                name: s.name,
                figure: "out-of-place busbw (GB/s)".into(),
                better: Better::Higher,
                points: s.points,
            })
            .collect(),
    })
}
