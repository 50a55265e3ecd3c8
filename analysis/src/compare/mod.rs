//! `meshrun compare`: read the outputs operators keep (nccl-tests and meshrun collective tables,
//! nccl-tests `-J` JSON, perftest's `ib_*_bw`/`ib_*_lat` text, meshrun's pairwise text and JSON)
//! into series of one figure per message size, and set them side by side.
//!
//! Logs are read as jobs leave them: [`log`] first peels the rank marks launchers add (Open MPI
//! `--tag-output`, `srun -l`, MPICH `-prepend-rank`), drops stderr and launcher chatter and
//! keeps one rank's output; [`read`] also takes the directory `mpirun --output-filename` writes
//! ([`output_dir`]). Then one parser per format, each in its own file; [`parse`] picks by
//! content. What a reader had to guess (a run cut short, which rank was read) comes back as
//! [`Parsed::warnings`]. The compared figure: a collective's out-of-place bus bandwidth
//! (GB/s), perftest's BW average (Gb/s) or t_typical (usec); meshrun's pairwise reports give
//! one figure per size, the median over the pairs measured.

pub mod log;
mod nccl_json;
mod nccl_text;
pub mod output_dir;
mod pairwise_json;
mod perftest_text;
pub mod table;

use std::collections::BTreeMap;
use std::path::Path;

/// Whether a larger figure is better (bandwidth) or a smaller one (latency).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Higher,
    Lower,
}

/// One figure per message size, for one collective or test.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Series {
    /// `all_reduce`, `RDMA_Write BW`, ...; None where the file does not say (old nccl-tests text).
    pub name: Option<String>,
    /// What the figure is, with its unit: `busbw (GB/s)`.
    pub figure: String,
    pub better: Better,
    /// Size in bytes -> figure.
    pub points: BTreeMap<u64, f64>,
}

/// What one file held.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The format, in words: `nccl-tests text`.
    pub format: &'static str,
    /// Ranks (GPUs or processes) of the run, where the file says.
    pub ranks: Option<usize>,
    pub series: Vec<Series>,
    /// What the reader had to decide or could not vouch for (a table without its footer, the
    /// rank read of several), for the caller to print.
    pub warnings: Vec<String>,
}

/// Why a file could not be read as one of the known formats.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}:{line}: {message}")]
pub struct FormatError {
    pub path: String,
    pub line: usize,
    pub message: String,
}

fn error(path: &str, line: usize, message: impl Into<String>) -> FormatError {
    FormatError {
        path: path.into(),
        line,
        message: message.into(),
    }
}

/// Why a path could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error(transparent)]
    Layout(#[from] output_dir::OutputDirError),
    #[error(transparent)]
    Format(#[from] FormatError),
}

fn read_file(path: &Path) -> Result<String, ReadError> {
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.display().to_string(),
        source,
    })?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Read a file, or the directory `mpirun --output-filename` wrote (see [`output_dir`]: the
/// first rank's stdout that holds results, in rank order, with a warning naming it).
pub fn read(path: &Path) -> Result<Parsed, ReadError> {
    if !path.is_dir() {
        let text = read_file(path)?;
        return Ok(parse(&path.display().to_string(), &text)?);
    }
    let files = output_dir::rank_files(path)?;
    let mut first_error = None;
    let mut found: Option<(u32, Parsed)> = None;
    let mut also = Vec::new();
    for f in &files {
        let shown = f.path.display().to_string();
        match parse(&shown, &read_file(&f.path)?) {
            Ok(p) if found.is_none() => found = Some((f.rank, p)),
            Ok(_) => also.push(f.rank.to_string()),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let Some((rank, mut parsed)) = found else {
        // rank_files gives at least one file, so one of them failed to parse.
        return Err(match first_error {
            Some(e) => e.into(),
            None => output_dir::OutputDirError {
                path: path.display().to_string(),
                message: "no rank's stdout file".into(),
            }
            .into(),
        });
    };
    let mut note = format!("mpirun --output-filename directory: rank {rank}'s stdout read");
    if !also.is_empty() {
        note.push_str(&format!("; rank(s) {} printed results too, not read", also.join(", ")));
    }
    parsed.warnings.insert(0, note);
    Ok(parsed)
}

/// Read `text` (from `path`, for messages) as whichever known format it is, after the job-log
/// pre-pass ([`log::normalise`]); the pre-pass keeps line numbers, so errors name the file's.
pub fn parse(path: &str, text: &str) -> Result<Parsed, FormatError> {
    let job = log::normalise(text);
    let mut parsed = parse_normalised(path, &job.text)?;
    let mut warnings = job.notes;
    warnings.append(&mut parsed.warnings);
    parsed.warnings = warnings;
    Ok(parsed)
}

fn parse_normalised(path: &str, text: &str) -> Result<Parsed, FormatError> {
    let first = text
        .lines()
        .enumerate()
        .find(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.trim()));
    let Some((first_line, first_text)) = first else {
        return Err(error(
            path,
            1,
            "empty file; expected nccl-tests, meshrun or perftest output",
        ));
    };
    if first_text.starts_with('{') {
        let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            error(
                path,
                e.line(),
                format!("not valid JSON ({e}); expected nccl-tests -J or meshrun --json output"),
            )
        })?;
        if doc.get("tool").and_then(|t| t.as_str()) == Some("meshrun")
            && doc.get("test").and_then(|t| t.as_str()) == Some("pairwise")
        {
            return pairwise_json::parse(path, &doc);
        }
        return nccl_json::parse(path, &doc);
    }
    if nccl_text::looks_like(text) {
        return nccl_text::parse(path, text);
    }
    if perftest_text::looks_like(text) {
        return perftest_text::parse(path, text);
    }
    Err(error(
        path,
        first_line,
        format!(
            "`{}` is not from a known format; expected nccl-tests or meshrun collective output (a `# size count type redop root time algbw busbw` header), perftest or meshrun pairwise output (a `#bytes` header), or their JSON",
            first_text.chars().take(60).collect::<String>()
        ),
    ))
}

/// Per size, the median of the figures given for it (pairwise reports: one per pair).
fn medians(by_size: BTreeMap<u64, Vec<f64>>) -> BTreeMap<u64, f64> {
    by_size
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(s, mut v)| (s, crate::stats::median(&mut v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_empty_files_say_which_line() {
        let e = parse("x.txt", "\n\nhello world\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(
            e.to_string()
                .starts_with("x.txt:3: `hello world` is not from a known format"),
            "{e}"
        );
        assert_eq!(parse("e.txt", "  \n").unwrap_err().line, 1);
        let e = parse("j.json", "{\"results\": [1,\n").unwrap_err();
        assert!(e.to_string().contains("not valid JSON"), "{e}");
    }

    #[test]
    fn medians_per_size() {
        let mut m = BTreeMap::new();
        m.insert(8, vec![3.0, 1.0, 2.0]);
        m.insert(16, vec![4.0, 1.0]);
        let got = medians(m);
        assert_eq!(got[&8], 2.0);
        assert_eq!(got[&16], 2.5);
    }
}
