//! `mpirun --output-filename DIR` writes no log: each rank's output goes to its own files,
//! `DIR/<job>/rank.<N>/stdout` and `.../stderr` (Open MPI 4: job `1`, N as is or zero-padded;
//! Open MPI 5/PRRTE: the job's namespace, N zero-padded to the widest rank, `rank.00`;
//! `DIR/rank.<N>/stdout` with PRRTE's `nojobid`). `meshrun compare` takes such a directory (`DIR`, `DIR/<job>` or one
//! rank's directory) as well as any one `stdout` file in it: it reads the ranks' stdout files
//! in rank order and uses the first that holds results (nccl-tests prints from rank 0 only;
//! perftest's client and server both print), saying which; stderr files are not read.

use std::path::{Path, PathBuf};

/// One rank's stdout file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankFile {
    pub rank: u32,
    pub path: PathBuf,
}

/// Why a directory is not one `--output-filename` wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct OutputDirError {
    pub path: String,
    pub message: String,
}

fn output_dir_error(dir: &Path, message: impl Into<String>) -> OutputDirError {
    OutputDirError {
        path: dir.display().to_string(),
        message: message.into(),
    }
}

/// `rank.7` -> 7 (also zero-padded: `rank.07`).
fn rank_of(name: &str) -> Option<u32> {
    name.strip_prefix("rank.")?.parse().ok()
}

fn entries(dir: &Path) -> Result<Vec<(String, PathBuf)>, OutputDirError> {
    let rd = std::fs::read_dir(dir).map_err(|e| output_dir_error(dir, e.to_string()))?;
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|e| output_dir_error(dir, e.to_string()))?;
        out.push((e.file_name().to_string_lossy().into_owned(), e.path()));
    }
    out.sort();
    Ok(out)
}

/// The `rank.N/stdout` files right under `dir`, in rank order.
fn ranks_in(dir: &Path) -> Result<Vec<RankFile>, OutputDirError> {
    let mut out: Vec<RankFile> = entries(dir)?
        .into_iter()
        .filter_map(|(name, p)| {
            let stdout = p.join("stdout");
            rank_of(&name)
                .filter(|_| stdout.is_file())
                .map(|rank| RankFile { rank, path: stdout })
        })
        .collect();
    out.sort_by_key(|f| f.rank);
    Ok(out)
}

/// The ranks' stdout files of the run `dir` holds, in rank order: `dir` is the directory given
/// to `--output-filename`, one job's directory in it, or one rank's.
pub fn rank_files(dir: &Path) -> Result<Vec<RankFile>, OutputDirError> {
    let own = dir.join("stdout");
    if own.is_file() {
        let rank = dir.file_name().and_then(|n| rank_of(&n.to_string_lossy())).unwrap_or(0);
        return Ok(vec![RankFile { rank, path: own }]);
    }
    let direct = ranks_in(dir)?;
    if !direct.is_empty() {
        return Ok(direct);
    }
    let mut jobs = Vec::new();
    for (name, p) in entries(dir)? {
        if p.is_dir() {
            let files = ranks_in(&p)?;
            if !files.is_empty() {
                jobs.push((name, files));
            }
        }
    }
    match jobs.len() {
        0 => Err(output_dir_error(
            dir,
            "a directory without rank.N/stdout files in it or in its job directories (mpirun --output-filename's layout: DIR/1/rank.0/stdout); name a log file or such a directory",
        )),
        1 => Ok(jobs.remove(0).1),
        _ => {
            let names: Vec<String> = jobs.into_iter().map(|(n, _)| n).collect();
            Err(output_dir_error(
                dir,
                format!(
                    "the output of several jobs ({}); name one of their directories",
                    names.join(", ")
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory of this test's own, removed when dropped.
    struct Scratch(PathBuf);
    impl Scratch {
        fn new(name: &str) -> Scratch {
            let p = std::env::temp_dir().join(format!("meshrun-output-dir-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).expect("scratch dir");
            Scratch(p)
        }
        fn file(&self, rel: &str) {
            let p = self.0.join(rel);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).expect("dirs");
            }
            std::fs::write(p, "x").expect("write");
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn ranks(files: &[RankFile]) -> Vec<u32> {
        files.iter().map(|f| f.rank).collect()
    }

    #[test]
    fn the_directory_its_job_and_a_rank_directory_all_lead_to_the_files() {
        let s = Scratch::new("layouts");
        for r in ["rank.00", "rank.01", "rank.10", "rank.02"] {
            s.file(&format!("out/1/{r}/stdout"));
            s.file(&format!("out/1/{r}/stderr"));
        }
        let files = rank_files(&s.0.join("out")).unwrap();
        assert_eq!(ranks(&files), vec![0, 1, 2, 10]);
        assert_eq!(files[0].path, s.0.join("out/1/rank.00/stdout"));
        assert_eq!(ranks(&rank_files(&s.0.join("out/1")).unwrap()), vec![0, 1, 2, 10]);
        let one = rank_files(&s.0.join("out/1/rank.02")).unwrap();
        assert_eq!(
            one,
            vec![RankFile {
                rank: 2,
                path: s.0.join("out/1/rank.02/stdout")
            }]
        );
    }

    #[test]
    fn several_jobs_or_none_are_refused_by_name() {
        let s = Scratch::new("refused");
        s.file("out/1/rank.0/stdout");
        s.file("out/2/rank.0/stdout");
        let e = rank_files(&s.0.join("out")).unwrap_err();
        assert!(e.message.contains("several jobs (1, 2)"), "{e}");
        s.file("empty/notes.txt");
        let e = rank_files(&s.0.join("empty")).unwrap_err();
        assert!(e.message.contains("without rank.N/stdout"), "{e}");
        assert!(rank_files(&s.0.join("missing")).is_err());
    }
}
