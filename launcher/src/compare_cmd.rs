//! `meshrun compare A B [C ...]`: read each file, or `mpirun --output-filename` directory
//! (analysis/src/compare), print the side-by-side tables with what the readers warned of; exit 2
//! on a file that cannot be read, 1 when a ratio is below `--min-ratio`.

use analysis::compare::{self, table};

use crate::cli::CompareArgs;
use crate::exit::Status;

pub fn run(a: &CompareArgs) -> i32 {
    if let Some(p) = &a.json {
        if let Err(e) = collectives::output::check_writable(p, a.force) {
            ranks::eline!("meshrun compare: {e}");
            return Status::Usage.code();
        }
    }
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
    if let Some(p) = &a.json {
        let exporter = table::CompareJson {
            inputs: &inputs,
            from: a.from,
            min_ratio: a.min_ratio,
        };
        if let Err(s) = crate::report_files::write_or_status(p, &exporter, &out, a.force, "meshrun compare") {
            return s.code();
        }
    }
    if out.below.is_empty() {
        0
    } else {
        Status::FoundProblem.code()
    }
}
