//! nccl-tests' text output (as meshrun prints it too): sections that start at `# nThread` (or
//! at the `# nccl-tests version` banner, or 2.19's `# Collective test starting: NAME`, which
//! names the section), one `#  Rank` line per rank, the column header, then rows, then the
//! footer (`# Out of bounds values`, `# Avg bus bandwidth`, `# Collective test concluded`).
//! Columns are found by name in the header (`busbw`, the first one: out of place), so extra
//! columns (`-I`, `#bitdiff`, timestamps), the `error` column of nccl-tests before 2.13 (a
//! float, `2e-07`, where `#wrong` now counts), layouts without `root` or `redop`, and
//! whitespace collapsed by a publisher read the same. meshrun's `# Baseline:` table (the MPI
//! library's, `--baseline mpi`) is a section of its own.
//!
//! A run killed mid-table leaves no footer and, often, a last row cut mid-line: the complete
//! rows are read, and a warning says so.

use std::collections::BTreeMap;

use super::{error, Better, FormatError, Parsed, Series};

/// Whether the text has an nccl-tests column header.
pub fn looks_like(text: &str) -> bool {
    text.lines().any(is_header)
}

/// Whether a line is nccl-tests' column header.
pub fn is_header(line: &str) -> bool {
    header_columns(line).is_some()
}

/// For a column header line (`# size count type redop root time algbw busbw ...`): the data
/// row index of the first `busbw`, and how many columns the header names.
fn header_columns(line: &str) -> Option<(usize, usize)> {
    let t = line.trim_start();
    let rest = t.strip_prefix('#')?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    if words.first() != Some(&"size") {
        return None;
    }
    words.iter().position(|w| *w == "busbw").map(|at| (at, words.len()))
}

/// A result row as found: its line number (1-based) and its words.
struct ParsedRow<'a> {
    line: usize,
    words: Vec<&'a str>,
}

struct Section<'a> {
    name: Option<String>,
    ranks: usize,
    /// The busbw column and the header's width.
    columns: Option<(usize, usize)>,
    rows: Vec<ParsedRow<'a>>,
    started_by_name: bool,
    /// A footer line came after the rows: the run finished this table.
    finished: bool,
}

impl Section<'_> {
    fn new(name: Option<String>) -> Self {
        Section {
            started_by_name: name.is_some(),
            name,
            ranks: 0,
            columns: None,
            rows: Vec::new(),
            finished: false,
        }
    }
    fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.columns.is_none() && self.ranks == 0
    }
}

/// `all_reduce_perf`, `all_reduce_perf_mpi` (the MPI build's name) -> `all_reduce`.
fn test_name(s: &str) -> String {
    let s = s.trim();
    let s = s.strip_suffix("_mpi").unwrap_or(s);
    s.strip_suffix("_perf").unwrap_or(s).to_string()
}

/// The busbw figure of one row, or why there is none.
fn busbw(row: &ParsedRow<'_>, at: usize) -> Result<f64, String> {
    let Some(cell) = row.words.get(at) else {
        return Err(format!(
            "a row of {} columns; the header puts busbw in column {}",
            row.words.len(),
            at + 1
        ));
    };
    cell.parse().map_err(|_| format!("busbw `{cell}` is not a number"))
}

/// What one finished section gives: its series, or None when it has no rows.
struct Read {
    series: Option<Series>,
    ranks: usize,
    warning: Option<String>,
}

fn read_section(path: &str, s: Section<'_>) -> Result<Read, FormatError> {
    let label = s.name.clone().unwrap_or_else(|| "a collective".into());
    let (Some((at, width)), Some(last)) = (s.columns, s.rows.last()) else {
        return Ok(Read {
            series: None,
            ranks: s.ranks,
            warning: None,
        });
    };
    let mut warning = None;
    let mut rows = &s.rows[..];
    if !s.finished {
        // No footer: the run stopped in this table, and its last row may be cut mid-line. Its
        // out-of-place busbw counts only when a column follows it: "0.7" at the end of a line
        // may be the start of "0.77".
        let busbw_whole = busbw(last, at).is_ok() && last.words.len() > at + 1;
        let cut = if last.words.len() < width {
            format!(
                " line {} is cut short ({} of {} columns)",
                last.line,
                last.words.len(),
                width
            )
        } else {
            String::new()
        };
        if busbw_whole {
            let partly = if cut.is_empty() {
                String::new()
            } else {
                format!(";{cut} but its busbw is whole")
            };
            warning = Some(format!(
                "{label}: no `# Avg bus bandwidth` after the table (last row: line {}): the run may have stopped early; {} sizes read{partly}",
                last.line,
                rows.len()
            ));
        } else {
            if rows.len() == 1 {
                // Nothing complete to read: say what is wrong with the one row there is.
                let message = busbw(last, at).err().unwrap_or_else(|| {
                    format!(
                        "the table's only row ends at its busbw ({} of {} columns): cut short?",
                        last.words.len(),
                        width
                    )
                });
                return Err(error(path, last.line, message));
            }
            rows = &rows[..rows.len() - 1];
            let cut = if cut.is_empty() {
                format!(" line {} has no readable busbw", last.line)
            } else {
                cut
            };
            warning = Some(format!(
                "{label}:{cut} and no `# Avg bus bandwidth` follows: the job stopped mid-table; the {} complete rows before it are read",
                rows.len()
            ));
        }
    }
    let mut points = BTreeMap::new();
    for row in rows {
        let v = busbw(row, at).map_err(|m| error(path, row.line, m))?;
        let size = row.words.first().and_then(|w| w.parse::<u64>().ok());
        if let Some(size) = size {
            points.insert(size, v);
        }
    }
    Ok(Read {
        series: Some(Series {
            name: s.name,
            figure: "out-of-place busbw (GB/s)".into(),
            better: Better::Higher,
            points,
        }),
        ranks: s.ranks,
        warning,
    })
}

pub fn parse(path: &str, text: &str) -> Result<Parsed, FormatError> {
    let mut sections: Vec<Section<'_>> = Vec::new();
    let mut cur = Section::new(None);
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("# Collective test starting:") {
            if !cur.is_empty() {
                sections.push(std::mem::replace(&mut cur, Section::new(None)));
            }
            cur = Section::new(Some(test_name(name)));
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
        if t.starts_with("# nThread") || t.starts_with("# nccl-tests version") {
            // A new run, unless this is the header of the run a name line just opened.
            let opened_by_name = cur.started_by_name && cur.ranks == 0 && cur.rows.is_empty();
            if !opened_by_name && !cur.is_empty() {
                sections.push(std::mem::replace(&mut cur, Section::new(None)));
            }
            continue;
        }
        if let Some(rest) = t.strip_prefix('#') {
            let rest = rest.trim_start();
            if rest.starts_with("Rank ") {
                cur.ranks += 1;
            } else if let Some(cols) = header_columns(t) {
                // A second table after rows: another run (or a baseline) of the same ranks.
                if !cur.rows.is_empty() {
                    let ranks = cur.ranks;
                    sections.push(std::mem::replace(&mut cur, Section::new(None)));
                    cur.ranks = ranks;
                }
                cur.columns = Some(cols);
            } else if !cur.rows.is_empty()
                && (rest.starts_with("Out of bounds values")
                    || rest.starts_with("Avg bus bandwidth")
                    || rest.starts_with("Collective test concluded"))
            {
                cur.finished = true;
            }
            continue;
        }
        let words: Vec<&str> = t.split_whitespace().collect();
        if words.first().and_then(|w| w.parse::<u64>().ok()).is_none() {
            continue; // "NCCL version ...", mpirun's chatter, NCCL INFO lines
        }
        if cur.columns.is_none() {
            continue;
        }
        cur.rows.push(ParsedRow { line: i + 1, words });
    }
    if !cur.is_empty() {
        sections.push(cur);
    }
    let mut series = Vec::new();
    let mut warnings = Vec::new();
    let mut ranks = 0;
    for s in sections {
        let read = read_section(path, s)?;
        ranks = ranks.max(read.ranks);
        warnings.extend(read.warning);
        series.extend(read.series);
    }
    if series.is_empty() {
        return Err(error(path, 1, "an nccl-tests header but no result rows"));
    }
    Ok(Parsed {
        format: "nccl-tests text",
        ranks: Some(ranks).filter(|&r| r > 0),
        series,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "# nThread 1 nGpus 1 minBytes 8 maxBytes 32 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#  Rank  0 Group  0 Pid   1 on a device  0 [0x01] H100
#  Rank  1 Group  0 Pid   2 on b device  0 [0x01] H100
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
           8             2     float     sum      -1    10.00    0.00    0.50      0    10.00    0.00    0.40      0
          16             4     float     sum      -1    10.00    0.00    0.60      0    10.00    0.00    0.40      0
";

    #[test]
    fn a_finished_table_gives_no_warning() {
        let text = format!("{HEAD}# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.55\n");
        let p = parse("ok.txt", &text).unwrap();
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        assert_eq!(p.series[0].points.len(), 2);
    }

    #[test]
    fn a_killed_run_keeps_its_whole_rows_and_warns() {
        // The last row cut after its busbw: 25.8 could be 25.86, so it is not read.
        let cut = format!("{HEAD}          32             8     float     sum      -1    10.00    0.00    0.7");
        let p = parse("cut.txt", &cut).unwrap();
        assert_eq!(p.series[0].points.keys().copied().collect::<Vec<_>>(), vec![8, 16]);
        assert_eq!(p.warnings.len(), 1);
        assert!(
            p.warnings[0].contains("line 7 is cut short (8 of 13 columns)")
                && p.warnings[0].contains("the 2 complete rows before it are read"),
            "{:?}",
            p.warnings
        );
        // Killed between rows: every row whole, but no footer.
        let p = parse("stopped.txt", HEAD).unwrap();
        assert_eq!(p.series[0].points.len(), 2);
        assert!(
            p.warnings[0].contains("no `# Avg bus bandwidth` after the table (last row: line 6)"),
            "{:?}",
            p.warnings
        );
        // Output of another writer run into the cut line.
        let run_in = format!("{HEAD}          32             8     float     sum      -1    10.00    0.00    0.7slurmstepd: error: *** STEP 12.0 CANCELLED AT 2024-05-01T10:00:00 ***");
        let p = parse("run-in.txt", &run_in).unwrap();
        assert_eq!(p.series[0].points.len(), 2);
        assert!(
            p.warnings[0].contains("line 7 has no readable busbw"),
            "{:?}",
            p.warnings
        );
        // Cut after its out-of-place columns: that busbw is whole and read.
        let half = format!(
            "{HEAD}          32             8     float     sum      -1    10.00    0.00    0.70      0    10."
        );
        let p = parse("half.txt", &half).unwrap();
        assert_eq!(p.series[0].points[&32], 0.70);
        assert!(
            p.warnings[0].contains("line 7 is cut short (10 of 13 columns) but its busbw is whole"),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn a_bad_row_before_the_end_is_still_an_error() {
        let text = format!(
            "{HEAD}          32             8     float     sum      -1    10.00\n          64            16     float     sum      -1    10.00    0.00    0.70      0    10.00    0.00    0.40      0\n"
        );
        let e = parse("mid.txt", &text).unwrap_err();
        assert_eq!(e.line, 7, "{e}");
        assert!(e.to_string().contains("busbw in column 8"), "{e}");
    }

    #[test]
    fn the_old_error_column_and_layouts_without_root() {
        // nccl-tests before 2.13: `error` (a float) where `#wrong` is now, and no `root`.
        let text =
            "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2   float     sum    179.1    0.00    0.00  2e-07    176.3    0.00    0.00  1e-07
     8388608       2097152   float     sum   1159.1    7.24   13.57  5e-07   1146.5    7.32   13.72  5e-07
# Out of bounds values : 0 OK
";
        let p = parse("old.txt", text).unwrap();
        assert_eq!(p.series[0].points[&8388608], 13.57);
        assert!(p.warnings.is_empty());
        // Older still: no redop either (broadcast_perf, 2019).
        let text = "#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
       65536          8192   float    16.57    1.98    1.98  0e+00    13.83    2.37    2.37  0e+00
# Avg bus bandwidth    : 6.6972
";
        let p = parse("older.txt", text).unwrap();
        assert_eq!(p.series[0].points[&65536], 1.98);
    }

    #[test]
    fn test_names_lose_perf_and_mpi() {
        assert_eq!(test_name(" all_reduce_perf_mpi"), "all_reduce");
        assert_eq!(test_name("all_gather_perf"), "all_gather");
        assert_eq!(test_name("sendrecv"), "sendrecv");
    }
}
