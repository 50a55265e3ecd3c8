//! The pre-pass over a job log, before the format parsers: launchers mark each line with the
//! rank (and stream) that wrote it, and interleave their own chatter. Recognised marks:
//!
//! - Open MPI `--tag-output`: `[1,0]<stdout>:`, `[1,0]<stderr>:` (a space after the colon,
//!   where a version prints one, stays on the line: the parsers skip leading whitespace); with
//!   `--timestamp-output` the date comes before it (`Mon Jun  3 10:00:00 2024[1,0]<stdout>:`),
//!   and `<stdout>:` alone when only timestamps were asked for. Whatever precedes the tag is
//!   dropped with it (a wrapper's own prefix too, as SkyPilot's `(head, rank=0, pid=1)`).
//! - Slurm `srun -l` / `--label`: `0: `, right-aligned to the widest rank (`  0: `).
//! - MPICH/Hydra `-prepend-rank` (`-l`), Intel MPI `-l`: `[0] `.
//!
//! A mark counts only when some line carrying it holds a table header (nccl-tests' `# size
//! ... busbw`, perftest's `#bytes`), so a plain log whose lines happen to start with `0: ` is
//! left alone. Once a mark is found: stderr lines are dropped, as are lines without the mark
//! (mpirun banners, ssh's `Warning: Permanently added ...`, X11 warnings); of the ranks, the
//! lowest that printed a table is read (nccl-tests prints from rank 0 only; perftest's client
//! and server both print), and the others are dropped, with a note when more than one printed
//! one or rank 0 printed none. Marks nested in marks (`srun -l` around `mpirun --tag-output`)
//! are peeled one after the other.
//!
//! A dropped line becomes an empty one, so the text the parsers see has the file's line numbers
//! and their errors name the file's lines. CRLF line ends read as LF.

use std::collections::{BTreeMap, BTreeSet};

/// How a launcher marked the lines of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Open MPI `--tag-output` (or `--timestamp-output`): `[1,0]<stdout>:`.
    OpenMpi,
    /// Slurm `srun -l`: `0: `.
    Slurm,
    /// MPICH/Hydra `-prepend-rank`, Intel MPI `-l`: `[0] `.
    Hydra,
}

impl Mark {
    fn describe(self) -> &'static str {
        match self {
            Mark::OpenMpi => "Open MPI --tag-output",
            Mark::Slurm => "srun -l",
            Mark::Hydra => "MPICH -prepend-rank",
        }
    }
}

/// A log, ready for the format parsers.
#[derive(Debug, Clone, PartialEq)]
pub struct JobLog {
    /// One line per line of the file, each without its mark or emptied.
    pub text: String,
    /// The marks peeled, outermost first.
    pub marks: Vec<Mark>,
    /// The rank read, where the marks name ranks.
    pub rank: Option<u32>,
    /// What the caller should say about the choice of rank.
    pub notes: Vec<String>,
}

/// One marked line.
struct Tagged<'a> {
    /// None where the mark names no rank (Open MPI's timestamps alone).
    rank: Option<u32>,
    stderr: bool,
    content: &'a str,
}

/// Whether a line is a table header one of the parsers reads, once any marks nested in it
/// (up to `depth` of them) are peeled.
fn holds_header(content: &str, depth: usize) -> bool {
    super::nccl_text::is_header(content)
        || super::perftest_text::is_header(content)
        || (depth > 0
            && [Mark::OpenMpi, Mark::Hydra, Mark::Slurm]
                .into_iter()
                .any(|m| tag(m, content).is_some_and(|t| !t.stderr && holds_header(t.content, depth - 1))))
}

/// How deep marks nest at most: not a launcher's doing beyond this.
const MAX_NESTING: usize = 3;

fn is_table_header(content: &str) -> bool {
    holds_header(content, MAX_NESTING - 1)
}

fn open_mpi(line: &str) -> Option<Tagged<'_>> {
    let (at, stream) = ["<stdout>:", "<stderr>:", "<stddiag>:"]
        .iter()
        .filter_map(|s| line.find(s).map(|at| (at, *s)))
        .min_by_key(|(at, _)| *at)?;
    let before = &line[..at];
    let content = &line[at + stream.len()..];
    let rank = before
        .strip_suffix(']')
        .and_then(|b| b.rfind('[').map(|open| &b[open + 1..]))
        .and_then(|inner| inner.split_once(','))
        .and_then(|(_, rank)| rank.trim().parse().ok());
    Some(Tagged {
        rank,
        stderr: stream != "<stdout>:",
        content,
    })
}

fn slurm(line: &str) -> Option<Tagged<'_>> {
    let rest = line.trim_start_matches(' ');
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let after = rest[digits..].strip_prefix(':')?;
    let content = match after.strip_prefix(' ') {
        Some(c) => c,
        None if after.is_empty() => after,
        None => return None,
    };
    Some(Tagged {
        rank: rest[..digits].parse().ok(),
        stderr: false,
        content,
    })
}

fn hydra(line: &str) -> Option<Tagged<'_>> {
    let inner = line.strip_prefix('[')?;
    let close = inner.find(']')?;
    let rank: u32 = inner[..close].parse().ok()?;
    let after = &inner[close + 1..];
    let content = match after.strip_prefix(' ') {
        Some(c) => c,
        None if after.is_empty() => after,
        None => return None,
    };
    Some(Tagged {
        rank: Some(rank),
        stderr: false,
        content,
    })
}

fn tag(mark: Mark, line: &str) -> Option<Tagged<'_>> {
    match mark {
        Mark::OpenMpi => open_mpi(line),
        Mark::Slurm => slurm(line),
        Mark::Hydra => hydra(line),
    }
}

/// The mark whose marked stdout lines hold a table header, if any (Open MPI's first: its tag is
/// the least likely to occur by chance).
fn find_mark(lines: &[&str]) -> Option<Mark> {
    [Mark::OpenMpi, Mark::Hydra, Mark::Slurm].into_iter().find(|&m| {
        lines
            .iter()
            .any(|l| tag(m, l).is_some_and(|t| !t.stderr && is_table_header(t.content)))
    })
}

fn rank_name(rank: Option<u32>) -> String {
    rank.map_or_else(|| "the untagged output".to_string(), |r| format!("rank {r}"))
}

/// One mark peeled off every line.
struct Peeled {
    mark: Mark,
    rank: Option<u32>,
    /// The lines again, the chosen rank's unmarked, all others empty.
    lines: Vec<String>,
    note: Option<String>,
}

/// Peel one mark off `lines`, or None when they carry none.
fn peel(lines: &[&str]) -> Option<Peeled> {
    let mark = find_mark(lines)?;
    let tagged: Vec<Option<Tagged<'_>>> = lines.iter().map(|l| tag(mark, l).filter(|t| !t.stderr)).collect();
    let mut seen: BTreeSet<Option<u32>> = BTreeSet::new();
    let mut with_table: BTreeMap<Option<u32>, usize> = BTreeMap::new();
    for t in tagged.iter().flatten() {
        seen.insert(t.rank);
        if is_table_header(t.content) {
            *with_table.entry(t.rank).or_default() += 1;
        }
    }
    // find_mark saw a header, so some rank has one.
    let chosen = *with_table.keys().next()?;
    let mut note = None;
    let others: Vec<String> = with_table
        .keys()
        .filter(|r| **r != chosen)
        .map(|r| rank_name(*r))
        .collect();
    if !others.is_empty() {
        note = Some(format!(
            "{} marks: {} printed results too; {}'s read",
            mark.describe(),
            others.join(", "),
            rank_name(chosen)
        ));
    } else if let Some(first) = seen.iter().next().filter(|r| **r != chosen) {
        note = Some(format!(
            "{} marks: {} printed no table; {}'s read",
            mark.describe(),
            rank_name(*first),
            rank_name(chosen)
        ));
    }
    let kept = tagged
        .into_iter()
        .map(|t| match t {
            Some(t) if t.rank == chosen => t.content.to_string(),
            _ => String::new(),
        })
        .collect();
    Some(Peeled {
        mark,
        rank: chosen,
        lines: kept,
        note,
    })
}

/// Normalise a job log for the format parsers (see the module's documentation).
pub fn normalise(text: &str) -> JobLog {
    let mut lines: Vec<String> = text.lines().map(|l| l.trim_end_matches('\r').to_string()).collect();
    let mut out = JobLog {
        text: String::new(),
        marks: Vec::new(),
        rank: None,
        notes: Vec::new(),
    };
    // Each pass peels one mark.
    for _ in 0..MAX_NESTING {
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let Some(p) = peel(&refs) else {
            break;
        };
        out.marks.push(p.mark);
        if out.rank.is_none() {
            out.rank = p.rank;
        }
        out.notes.extend(p.note);
        lines = p.lines;
    }
    out.text = lines.join("\n");
    if text.ends_with('\n') {
        out.text.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "#       size         count      type   redop    root     time   algbw   busbw #wrong";
    const ROW: &str = "           8             2     float     sum      -1    10.00    0.00    0.50      0";

    #[test]
    fn open_mpi_tags_are_peeled_and_stderr_and_banners_dropped() {
        let log = format!(
            "Warning: Permanently added 'worker-1' (ED25519) to the list of known hosts.\n\
             [1,1]<stderr>:Authorization required, but no authorization protocol specified\n\
             [1,0]<stdout>:{HEADER}\n\
             [1,1]<stdout>:worker-1:21:21 [0] NCCL INFO Bootstrap : Using eth0\n\
             [1,0]<stdout>:{ROW}\n"
        );
        let n = normalise(&log);
        assert_eq!(n.marks, vec![Mark::OpenMpi]);
        assert_eq!(n.rank, Some(0));
        assert!(n.notes.is_empty(), "{:?}", n.notes);
        let lines: Vec<&str> = n.text.lines().collect();
        assert_eq!(lines, vec!["", "", HEADER, "", ROW]);
    }

    #[test]
    fn open_mpi_5_space_timestamps_and_wrapper_prefixes() {
        // A space after the tag; --timestamp-output: ctime's date before it; a wrapper's own
        // prefix (SkyPilot) before that.
        let log = format!(
            "[1,0]<stdout>: {HEADER}\nMon Jun  3 10:00:00 2024[1,0]<stdout>:{ROW}\n(head, rank=0, pid=3808) [1,0]<stdout>:{ROW}\n"
        );
        let n = normalise(&log);
        assert_eq!(n.text, format!(" {HEADER}\n{ROW}\n{ROW}\n"));
        // Timestamps alone name no rank.
        let n = normalise(&format!("Mon Jun  3 10:00:00 2024<stdout>:{HEADER}\n"));
        assert_eq!(n.rank, None);
        assert_eq!(n.text, format!("{HEADER}\n"));
    }

    #[test]
    fn slurm_labels_padded_or_not_and_an_empty_labelled_line() {
        let log = format!("  0: {HEADER}\n  0: {ROW}\n 12: something else\n  0:\n");
        let n = normalise(&log);
        assert_eq!(n.marks, vec![Mark::Slurm]);
        assert_eq!(n.text, format!("{HEADER}\n{ROW}\n\n\n"));
        let n = normalise(&format!("0: {HEADER}\n0: {ROW}"));
        assert_eq!(n.text, format!("{HEADER}\n{ROW}"));
    }

    #[test]
    fn hydra_rank_prefix() {
        let log = format!("[0] {HEADER}\n[1] {HEADER}\n[0] {ROW}\n[1] {ROW}\n");
        let n = normalise(&log);
        assert_eq!(n.marks, vec![Mark::Hydra]);
        assert_eq!(n.text, format!("{HEADER}\n\n{ROW}\n\n"));
        assert_eq!(
            n.notes,
            vec!["MPICH -prepend-rank marks: rank 1 printed results too; rank 0's read"]
        );
    }

    #[test]
    fn the_first_rank_with_a_table_is_read_and_that_is_said() {
        let log = format!("1: starting\n0: starting\n2: {HEADER}\n2: {ROW}\n3: {HEADER}\n");
        let n = normalise(&log);
        assert_eq!(n.rank, Some(2));
        assert_eq!(n.text, format!("\n\n{HEADER}\n{ROW}\n\n"));
        assert_eq!(
            n.notes,
            vec!["srun -l marks: rank 3 printed results too; rank 2's read"]
        );
        let n = normalise(&format!("0: starting\n1: {HEADER}\n"));
        assert_eq!(n.notes, vec!["srun -l marks: rank 0 printed no table; rank 1's read"]);
    }

    #[test]
    fn nested_marks_are_peeled_in_turn() {
        // srun -l around mpiexec -l: the label, then the rank prefix.
        let log = format!("0: [0] {HEADER}\n0: [1] {ROW}\n0: [0] {ROW}\n1: [0] {HEADER}\n");
        let n = normalise(&log);
        assert_eq!(n.marks, vec![Mark::Slurm, Mark::Hydra]);
        assert_eq!(n.text, format!("{HEADER}\n\n{ROW}\n\n"));
        // Open MPI's tag is found anywhere in the line, so it goes first, and the srun label
        // before it with it.
        let log = format!("0: [1,0]<stdout>:{HEADER}\n0: [1,0]<stdout>:{ROW}\n");
        let n = normalise(&log);
        assert_eq!(n.marks, vec![Mark::OpenMpi]);
        assert_eq!(n.text, format!("{HEADER}\n{ROW}\n"));
    }

    #[test]
    fn unmarked_logs_and_look_alikes_are_left_alone_but_crlf_is_read() {
        let plain = format!("NCCL version 2.18.3+cuda12.2\n{HEADER}\n{ROW}\n");
        assert_eq!(normalise(&plain).text, plain);
        assert!(normalise(&plain).marks.is_empty());
        // `0: ` lines, but no table behind the label: not srun's.
        let lookalike = format!("0: ready\n{HEADER}\n{ROW}\n");
        assert_eq!(normalise(&lookalike).text, lookalike);
        let crlf = format!("{HEADER}\r\n{ROW}\r\n");
        assert_eq!(normalise(&crlf).text, format!("{HEADER}\n{ROW}\n"));
        let crlf_tagged = format!("[1,0]<stdout>:{HEADER}\r\n[1,0]<stdout>:{ROW}\r");
        assert_eq!(normalise(&crlf_tagged).text, format!("{HEADER}\n{ROW}"));
    }

    #[test]
    fn prefix_readers_refuse_what_is_not_theirs() {
        assert!(slurm("           8             2     float").is_none());
        assert!(slurm("12:34:56 started").is_none());
        assert!(hydra("[proxy:0:0@host] launching").is_none());
        assert!(hydra("[0]x").is_none());
        assert!(open_mpi("no tag here").is_none());
        let t = open_mpi("[1,12]<stderr>:oops").expect("a tag");
        assert_eq!((t.rank, t.stderr, t.content), (Some(12), true, "oops"));
    }
}
