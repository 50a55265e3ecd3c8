use std::path::PathBuf;

/// A problem in a hostlist expression, with the 1-based column where it starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {message}")]
pub struct HostlistError {
    /// 1-based column within the expression.
    pub column: usize,
    /// What was wrong and what would be right.
    pub message: String,
}

/// A problem in a host file: which file, where, what was found and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum HostfileError {
    #[error("cannot read host file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: no hosts found (every line is blank or a comment); expected lines like `node01 slots=8`, `node01:8` or `node[01-04]`")]
    Empty { path: PathBuf },
}
