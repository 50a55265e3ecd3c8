//! `verdict-campaign DRAWS SEED`: draws DRAWS fabrics (seeds SEED, SEED + 1, ...), builds each on
//! the namespace beds, runs `meshrun pairwise` on it with default verdict options, and scores the
//! verdict against the truth; prints each draw as it ends and the tables at the end. Run it
//! through `bench/verdict-campaign`, which builds the release binary and checks for root.
//! `verdict-campaign --list DRAWS SEED` prints the fabrics those seeds draw and runs nothing;
//! `verdict-campaign --table RECORD...` prints the tables of campaigns' records (their draws
//! together), as a campaign stopped early or several run apart are read.

use std::io::Write;

use e2e::campaign::{bed, draw, run_seed, table};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "--table") {
        tables_of(&args[1..]);
        return;
    }
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
        // The beds' machine lock is free between draws: a test or bench waiting for it (it
        // polls twice a second) gets its turn rather than waiting out the whole campaign.
        std::thread::sleep(std::time::Duration::from_millis(1500));
    }
    print_tables(&rows);
}

/// The tables of the records at `paths`.
fn tables_of(paths: &[String]) {
    let mut rows = Vec::new();
    for p in paths {
        let text = match std::fs::read_to_string(p) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("verdict-campaign: {p}: {e}");
                std::process::exit(2);
            }
        };
        for (i, line) in text.lines().enumerate() {
            let row = serde_json::from_str(line)
                .ok()
                .and_then(|v| table::Row::from_record(&v));
            match row {
                Some(r) => rows.push(r),
                None => {
                    eprintln!("verdict-campaign: {p}:{}: not a draw's record", i + 1);
                    std::process::exit(2);
                }
            }
        }
    }
    println!("# {} draws", rows.len());
    print_tables(&rows);
}

/// The two tables of `rows`: per fault kind, timing, family and shaping; against the targets.
fn print_tables(rows: &[table::Row]) {
    println!(
        "\n## Per fault kind, timing, family and shaping\n{}",
        table::by_kind(rows)
    );
    println!("## Against the targets (issue 67)\n{}", table::against_targets(rows));
}
