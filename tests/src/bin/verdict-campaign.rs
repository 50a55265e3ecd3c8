//! `verdict-campaign DRAWS SEED`: draws DRAWS fabrics (seeds SEED, SEED + 1, ...), builds each on
//! the namespace beds, runs `meshrun pairwise` on it with default verdict options, and scores the
//! verdict against the truth; prints each draw as it ends and the tables at the end. Run it
//! through `bench/verdict-campaign`, which builds the release binary and checks for root.
//! `verdict-campaign --list DRAWS SEED` prints the fabrics those seeds draw and runs nothing.

use std::io::Write;

use e2e::campaign::{bed, draw, run_seed, table};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let list = args.first().is_some_and(|a| a == "--list");
    if list {
        args.remove(0);
    }
    let usage = "usage: verdict-campaign [--list] DRAWS SEED (DRAWS fabrics, seeds SEED, SEED + 1, ...)";
    let (Some(draws), Some(seed)) = (
        args.first().and_then(|a| a.parse::<u64>().ok()).filter(|d| *d > 0),
        args.get(1).and_then(|a| a.parse::<u64>().ok()),
    ) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    if list {
        for s in seed..seed + draws {
            println!("{}", draw::draw(s).describe());
        }
        return;
    }
    let out = bed::out_dir();
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("verdict-campaign: {}: {e}", out.display());
        std::process::exit(2);
    }
    let record_path = out.join(format!("draws-{seed}-{draws}.jsonl"));
    let mut record = match std::fs::File::create(&record_path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("verdict-campaign: {}: {e}", record_path.display());
            std::process::exit(2);
        }
    };
    println!(
        "# verdict-campaign: {draws} draws from seed {seed}; runs in {}, the record in {}",
        out.display(),
        record_path.display()
    );
    let mut rows = Vec::new();
    for s in seed..seed + draws {
        let scored = run_seed(s, &out);
        print!("{}", scored.describe());
        let _ = std::io::stdout().flush();
        let _ = writeln!(record, "{}", scored.record());
        rows.push(scored.row);
    }
    println!(
        "\n## Per fault kind, timing, family and shaping\n{}",
        table::by_kind(&rows)
    );
    println!("## Against the targets (issue 67)\n{}", table::against_targets(&rows));
}
