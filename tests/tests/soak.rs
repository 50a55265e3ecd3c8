//! Soak: many jobs of mixed subcommands back to back (50, or MESHRUN_SOAK_JOBS). Every job's exit
//! status must be what its own output says (OK, FAILED, an error line); the open files and
//! threads of the launcher and of every rank at exit (MESHRUN_SELF_REPORT=1) must be the same in
//! the last job of a kind as in the first, and its peak memory must not grow by more than a
//! quarter; no process and no shared-memory segment may be left after the last job.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::{limits, meshrun_command, mpirun_command, run_bounded_leftovers, Run};

/// One kind of job: how to run it, the status it must end with, and the words its output must
/// hold for that status.
struct JobKind {
    name: &'static str,
    np: usize,
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    status: i32,
    says: &'static str,
}

const KINDS: &[JobKind] = &[
    JobKind {
        name: "launch all_reduce",
        np: 0,
        args: &[
            "launch",
            "--np",
            "3",
            "--",
            "all_reduce",
            "-b",
            "8",
            "-e",
            "64K",
            "-n",
            "5",
            "--transport",
            "tcp",
        ],
        env: &[],
        status: 0,
        says: "# Out of bounds values : 0 OK",
    },
    JobKind {
        name: "mesh-check",
        np: 3,
        args: &["mesh-check", "--iters", "5", "--transport", "tcp"],
        env: &[],
        status: 0,
        says: "# OK: all 3 pairs reachable",
    },
    JobKind {
        name: "pairwise",
        np: 3,
        args: &[
            "pairwise",
            "-s",
            "64K",
            "-n",
            "20",
            "--threshold",
            e2e::VERDICT_NOT_THE_SUBJECT,
            "--transport",
            "tcp",
        ],
        env: &[],
        status: 0,
        says: "# PASS: no slow pairs",
    },
    JobKind {
        name: "all_gather",
        np: 2,
        args: &["all_gather", "-b", "8", "-e", "8K", "-n", "5", "--transport", "tcp"],
        env: &[],
        status: 0,
        says: "# Out of bounds values : 0 OK",
    },
    JobKind {
        name: "alltoall",
        np: 3,
        args: &["alltoall", "-b", "8", "-e", "8K", "-n", "5", "--transport", "tcp"],
        env: &[],
        status: 0,
        says: "# Out of bounds values : 0 OK",
    },
    JobKind {
        name: "all_reduce below its bar",
        np: 2,
        args: &[
            "all_reduce",
            "-b",
            "64K",
            "-e",
            "64K",
            "-n",
            "5",
            "--expect-busbw",
            "10000",
            "--transport",
            "tcp",
        ],
        env: &[],
        status: 1,
        says: "FAILED",
    },
    JobKind {
        name: "mesh-check corrupted",
        np: 3,
        args: &["mesh-check", "--iters", "5", "--transport", "tcp"],
        env: &[("MESHRUN_FAULT", "corrupt:rank=1:round=0")],
        status: 1,
        says: "bytes wrong from rank 1",
    },
    JobKind {
        name: "compare",
        np: 0,
        args: &[
            "compare",
            "analysis/tests/data/nccl-tests-all_reduce_perf-2.18-2x4xA40.txt",
            "analysis/tests/data/golden/all_reduce-4ranks.txt",
        ],
        env: &[],
        status: 0,
        says: "geometric mean",
    },
    JobKind {
        name: "bad root",
        np: 2,
        args: &["all_reduce", "-r", "5", "-b", "8", "-e", "8", "--transport", "tcp"],
        env: &[],
        status: 2,
        says: "meshrun: -r 5: this job has ranks 0 to 1",
    },
    JobKind {
        name: "reduce_scatter",
        np: 2,
        args: &["reduce_scatter", "-b", "8", "-e", "8K", "-n", "5", "--transport", "tcp"],
        env: &[],
        status: 0,
        says: "# Out of bounds values : 0 OK",
    },
];

/// What one process said of itself at exit.
#[derive(Debug, Clone, PartialEq)]
struct SelfReport {
    who: String,
    fds: u64,
    threads: u64,
    hwm_kib: u64,
}

/// Every process's self-report in `stderr`, in the order of who made it.
fn self_reports(stderr: &str) -> Vec<SelfReport> {
    let mut v: Vec<SelfReport> = stderr
        .lines()
        .filter_map(|l| {
            let rest = l.split_once("self-report: ")?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let get = |k: &str| -> Option<&str> { f.iter().position(|w| *w == k).and_then(|i| f.get(i + 1)).copied() };
            Some(SelfReport {
                who: format!("rank {}", get("rank")?),
                fds: get("fds")?.parse().ok()?,
                threads: get("threads")?.parse().ok()?,
                hwm_kib: get("hwm_kib")?.parse().ok()?,
            })
        })
        .collect();
    v.sort_by(|a, b| a.who.cmp(&b.who));
    v
}

/// One job of `kind`, its processes tagged `tag` and its shared-memory segments in `shm`: what it
/// left, and the processes still there 5 s after it ended.
fn run(kind: &JobKind, tag: &str, shm: &std::path::Path) -> (Run, Vec<String>) {
    let self_report = ("MESHRUN_SELF_REPORT", "1");
    let mut cmd = if kind.np == 0 {
        meshrun_command(kind.args)
    } else {
        let env: Vec<(&str, &str)> = std::iter::once(self_report).chain(kind.env.iter().copied()).collect();
        mpirun_command(kind.np, kind.args, &env)
    };
    cmd.current_dir(e2e::root())
        .env(self_report.0, self_report.1)
        .env("OMPI_MCA_btl_vader_backing_directory", shm);
    run_bounded_leftovers(&mut cmd, limits::SMALL_JOB, tag, Duration::from_secs(5))
}

#[test]
fn fifty_mixed_jobs_back_to_back_do_not_grow_or_lie() {
    let jobs: usize = std::env::var("MESHRUN_SOAK_JOBS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let shm = e2e::root()
        .join("target")
        .join(format!("soak-shm-{}", std::process::id()));
    std::fs::create_dir_all(&shm).expect("shm dir");
    let tag = format!("MESHRUN_SOAK_JOB={}", std::process::id());
    // Per kind and process (launcher, rank N): its first report and its last.
    let mut first: BTreeMap<(&str, String), SelfReport> = BTreeMap::new();
    let mut last: BTreeMap<(&str, String), SelfReport> = BTreeMap::new();
    let mut table = String::from("| job | kind | status | seconds | processes | fds | threads | peak RSS MiB (max) |\n|---|---|---|---|---|---|---|---|\n");
    for j in 0..jobs {
        let kind = &KINDS[j % KINDS.len()];
        let (r, leftovers) = run(kind, &tag, &shm);
        let all = r.all();
        assert_eq!(r.code, Some(kind.status), "job {j} ({}): status\n{all}", kind.name);
        assert!(
            all.contains(kind.says),
            "job {j} ({}): the output does not say `{}`:\n{all}",
            kind.name,
            kind.says
        );
        // What the output claims matches the status: no OK on a failing job, no FAILED on a passing one.
        if kind.status == 0 {
            assert!(
                !r.stdout.contains("FAILED") && !r.stdout.contains("# FAIL"),
                "job {j}: {all}"
            );
        } else {
            assert!(!r.stdout.contains("# PASS"), "job {j}: {all}");
        }
        assert!(
            leftovers.is_empty(),
            "job {j} ({}): processes left: {leftovers:?}",
            kind.name
        );
        let reps = self_reports(&r.stderr);
        // Every process of a passing job reports (the launcher too, when meshrun is the command);
        // in a failing one mpirun may end the other ranks before they do (a race it decides), so
        // at least one: the rank that saw the failure and ended the job.
        let procs = match (kind.np, kind.name.starts_with("launch")) {
            (0, true) => 4,
            (0, false) => 1,
            (np, _) => np,
        };
        if kind.status == 0 {
            assert_eq!(reps.len(), procs, "job {j} ({}): self-reports {reps:?}", kind.name);
        } else {
            assert!(!reps.is_empty(), "job {j} ({}): no self-report", kind.name);
        }
        let fds = reps.iter().map(|s| s.fds).max().unwrap_or(0);
        let threads = reps.iter().map(|s| s.threads).max().unwrap_or(0);
        let hwm = reps.iter().map(|s| s.hwm_kib).max().unwrap_or(0);
        table.push_str(&format!(
            "| {j} | {} | {} | {:.1} | {} | {fds} | {threads} | {:.1} |\n",
            kind.name,
            kind.status,
            r.elapsed.as_secs_f64(),
            reps.len(),
            hwm as f64 / 1024.0
        ));
        for rep in reps {
            first.entry((kind.name, rep.who.clone())).or_insert_with(|| rep.clone());
            last.insert((kind.name, rep.who.clone()), rep);
        }
    }
    eprintln!("{table}");
    // Each process compared with itself in the first job of its kind where it reported. In a
    // failing job a rank that mpirun ended after its peer's failure never reports: that says
    // nothing of a leak, so only the processes that reported are compared.
    for ((name, who), a) in &first {
        let b = &last[&(*name, who.clone())];
        assert_eq!(
            (a.fds, a.threads),
            (b.fds, b.threads),
            "{name} {who}: open files and threads, first vs last job"
        );
        assert!(
            b.hwm_kib <= a.hwm_kib + a.hwm_kib / 4,
            "{name} {who}: peak RSS grew from {} to {} KiB",
            a.hwm_kib,
            b.hwm_kib
        );
    }
    let left = std::fs::read_dir(&shm).map(|d| d.count()).unwrap_or(0);
    let _ = std::fs::remove_dir_all(&shm);
    assert_eq!(left, 0, "shared-memory segments left after the soak");
}
