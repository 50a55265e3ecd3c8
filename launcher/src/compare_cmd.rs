//! `meshrun compare A B [C ...]`: read each file, or `mpirun --output-filename` directory
//! (analysis/src/compare), print the side-by-side tables with what the readers warned of; exit 2
//! on a file that cannot be read, 1 when a ratio is below `--min-ratio`.

use analysis::compare::{self, table};

use crate::cli::CompareArgs;
use crate::exit::Status;

pub fn run(a: &CompareArgs) -> i32 {
    let mut inputs = Vec::with_capacity(a.files.len());
    for f in &a.files {
        let path = f.display().to_string();
        match compare::read(f) {
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
