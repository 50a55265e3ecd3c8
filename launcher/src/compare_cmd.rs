//! `meshrun compare A B [C ...]`: read each file (analysis/src/compare), print the side-by-side
//! tables; exit 2 on a file that cannot be read, 1 when a ratio is below `--min-ratio`.

use analysis::compare::{self, table};

use crate::cli::CompareArgs;
use crate::exit::Status;

pub fn run(a: &CompareArgs) -> i32 {
    let mut inputs = Vec::with_capacity(a.files.len());
    for f in &a.files {
        let path = f.display().to_string();
        let text = match std::fs::read(f) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => {
                ranks::eline!("meshrun compare: {path}: {e}");
                return Status::Usage.code();
            }
        };
        match compare::parse(&path, &text) {
            Ok(parsed) => inputs.push(table::Input { path, parsed }),
            Err(e) => {
                ranks::eline!("meshrun compare: {e}");
                return Status::Usage.code();
            }
        }
    }
    let out = table::compare(&inputs, a.from, a.min_ratio);
    print!("{}", out.text);
    if out.below.is_empty() {
        0
    } else {
        Status::FoundProblem.code()
    }
}
