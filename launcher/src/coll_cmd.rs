//! The collective subcommands (`meshrun all_reduce ...`) on each rank.

use std::io::Write;
use std::time::Duration;

use collectives::coll;
use collectives::coll::harness::{self, Baseline, CollConfig, Step, TimeAverage};
use collectives::coll::report::{self, DeviceInfo};
use collectives::dtype::{DataType, RedOp};
use collectives::output;
use ranks::World;

use crate::cli::{BaselineArg, CollArgs};
use crate::rank::{run_rank, RankFailure, EXIT_USAGE};

/// Build the configuration, or say what is wrong with the flags.
pub fn config(a: &CollArgs) -> Result<CollConfig, String> {
    let dtypes = if a.dtype == "all" {
        DataType::ALL.to_vec()
    } else {
        vec![DataType::parse(&a.dtype).map_err(|e| format!("-d: {e}"))?]
    };
    let ops = if a.op == "all" {
        RedOp::ALL.to_vec()
    } else {
        vec![RedOp::parse(&a.op).map_err(|e| format!("-o: {e}"))?]
    };
    if a.min_bytes > a.max_bytes {
        return Err(format!(
            "-b {} is larger than -e {}; expected -b <= -e",
            a.min_bytes, a.max_bytes
        ));
    }
    let step = match a.step_factor {
        Some(f) if f < 2 => {
            return Err(format!(
                "-f {f} would never grow the size; expected a factor of 2 or more (or -i BYTES)"
            ))
        }
        Some(f) => Step::Factor(f),
        None if a.step_bytes == 0 => {
            return Err("-i 0 would never grow the size; expected an increment of 1 element or more".into())
        }
        None => Step::Bytes(a.step_bytes),
    };
    for dt in &dtypes {
        let sz = dt.size() as u64;
        for (flag, v) in [("-b", a.min_bytes), ("-e", a.max_bytes)] {
            if v == 0 || v % sz != 0 {
                return Err(format!(
                    "{flag} {v} is not a positive multiple of the {sz}-byte {} element",
                    dt.name()
                ));
            }
        }
        if let Step::Bytes(b) = step {
            if b % sz != 0 {
                return Err(format!(
                    "-i {b} is not a multiple of the {sz}-byte {} element",
                    dt.name()
                ));
            }
        }
    }
    let average = match a.average {
        0 => TimeAverage::Rank0,
        2 => TimeAverage::Min,
        3 => TimeAverage::Max,
        _ => TimeAverage::Mean,
    };
    Ok(CollConfig {
        min_bytes: a.min_bytes,
        max_bytes: a.max_bytes,
        step,
        iters: a.iters,
        warmup: a.warmup,
        agg: a.agg,
        check: a.check == 1,
        ops,
        dtypes,
        root: a.root,
        average,
        step_timeout: Duration::from_secs_f64(a.rank.timeout),
        baseline: a.baseline.map(|BaselineArg::Mpi| Baseline::Mpi),
    })
}

fn devices(world: &World, transport: &str) -> Vec<DeviceInfo> {
    let mine = format!("{}\n{}", std::process::id(), world.host());
    let all = world
        .gather_bytes(mine.as_bytes(), "gathering device lines")
        .unwrap_or_default();
    all.iter()
        .enumerate()
        .map(|(rank, b)| {
            let s = String::from_utf8_lossy(b);
            let (pid, host) = s.split_once('\n').unwrap_or(("0", "?"));
            DeviceInfo {
                rank,
                pid: pid.parse().unwrap_or(0),
                host: host.to_string(),
                device: -1,
                bus_id: "host".into(),
                name: format!("host memory over {transport}"),
            }
        })
        .collect()
}

pub fn run(name: &str, a: CollArgs) -> i32 {
    let Some(coll) = coll::by_name(name) else {
        eprintln!("meshrun: unknown collective {name}");
        return EXIT_USAGE;
    };
    let cfg = match config(&a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("meshrun {name}: {e}");
            return EXIT_USAGE;
        }
    };
    let fault = crate::fault_or_exit();
    let args: Vec<String> = std::env::args().collect();
    run_rank(&a.rank, |world, t| {
        let mut problem = None;
        if cfg.root >= world.size() {
            problem = Some(format!("-r {}: this job has ranks 0 to {}", cfg.root, world.size() - 1));
        }
        if problem.is_none() && world.rank() == 0 {
            if let Some(p) = &a.json {
                problem = output::check_writable(p, a.force).err().map(|e| e.to_string());
            }
        }
        if !world.all_ok(problem.is_none(), "checking options") {
            return Err(RankFailure::Usage(problem.unwrap_or_default()));
        }
        let start = report::now_string();
        let devs = devices(world, t.name());
        let root = world.rank() == 0;
        let mut out = std::io::stdout();
        if root {
            let mut s = report::header(&cfg);
            for d in &devs {
                s.push_str(&report::device_line(
                    d.rank, d.pid, &d.host, d.device, &d.bus_id, &d.name,
                ));
            }
            s.push_str(&report::table_header());
            let _ = out.write_all(s.as_bytes());
            let _ = out.flush();
        }
        let print_row = |r: &harness::Row| {
            if root {
                let mut o = std::io::stdout();
                let _ = o.write_all(report::row_line(r).as_bytes());
                let _ = o.flush();
            }
        };
        let rows = harness::run(world, t, coll, &cfg, fault, print_row).map_err(coll_failure)?;
        if root {
            let _ = out.write_all(report::footer(&rows).as_bytes());
        }
        let mut baseline_rows = None;
        if cfg.baseline == Some(Baseline::Mpi) {
            if root {
                let lib = mpi::environment::library_version().unwrap_or_default();
                let lib = lib.replace('\0', "");
                let lib = lib.lines().next().unwrap_or("unknown MPI").trim().to_string();
                let _ = writeln!(
                    out,
                    "# Baseline: the MPI library's own {} ({lib}) in the same harness, out-of-place only",
                    coll.name()
                );
                let _ = out.write_all(report::table_header().as_bytes());
                let _ = out.flush();
            }
            let (b, notes) = harness::run_baseline(world, t, coll, &cfg, print_row).map_err(coll_failure)?;
            if root {
                for n in notes {
                    let _ = writeln!(out, "# {n}");
                }
                let _ = out.write_all(report::footer(&b).as_bytes());
            }
            baseline_rows = Some(b);
        }
        let mut code = if harness::total_wrong(&rows) > 0 {
            collectives::EXIT_FOUND_PROBLEM
        } else {
            0
        };
        if root {
            if let Some(p) = &a.json {
                let doc = report::json_report(
                    &cfg,
                    coll.name(),
                    &args,
                    &devs,
                    &rows,
                    baseline_rows.as_deref().map(|b| ("mpi", b)),
                    &start,
                );
                if let Err(e) = output::write_atomic(p, &doc, a.force) {
                    eprintln!("meshrun: {e}");
                    code = EXIT_USAGE;
                }
            }
        }
        let _ = out.flush();
        let shared = world.broadcast_vec(&[code as u8], "sharing the exit status");
        Ok(i32::from(shared.first().copied().unwrap_or(0)))
    })
}

fn coll_failure(e: coll::CollError) -> RankFailure {
    match e {
        coll::CollError::Transport(t) => RankFailure::Transport(t),
        coll::CollError::Layout(l) => RankFailure::Usage(l.to_string()),
    }
}
