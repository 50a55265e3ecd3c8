//! The fault suite: a rank killed or frozen in each phase of a job, a rank that hangs while
//! alive, stray connections to the ranks' ports, an output directory that turns read-only.
//! Each job must end within its deadline plus a small bound, name the right rank, exit with the
//! documented status, and leave no process and no shared-memory segment behind.
//!
//! Statuses: 3 when a deadline expired (the post-mortem's root-cause line); a rank killed by a
//! signal ends the job through mpirun, which exits 128 + the signal (137) and names the rank
//! itself ("process rank N ... exited on signal 9").

use std::process::Command;
use std::time::Duration;

use e2e::mpirun_command;

#[path = "faults/common.rs"]
mod common;
use common::*;

#[test]
fn frozen_rank_in_setup_phases_is_named() {
    frozen(1, "endpoints", &coll_args("all_reduce"));
    frozen(2, "connect", &coll_args("all_reduce"));
}

/// A short pairwise run over TCP with the fault jobs' per-wait deadline.
/// (`--timeout`, not `-T`: on pairwise `-T` is perftest's type of service.)
const PAIRWISE: &[&str] = &[
    "pairwise",
    "-s",
    "64K",
    "-n",
    "20",
    "--timeout",
    "3",
    "--transport",
    "tcp",
];

#[test]
fn frozen_rank_in_a_pairwise_round_is_named() {
    frozen(2, "pairwise", PAIRWISE);
}

/// A pairwise run that always reaches its retests, whatever this machine's speed: a floor no
/// loopback pair can reach (`--expect-gbps`, 1 Pb/s) makes every pair a suspect, retested alone
/// after the rounds. (A pair slowed by a pause was not enough: on a busy machine the paused pair
/// stayed within the noisy bulk's bar, nothing was retested, and the fault never struck.)
const RETESTED: &[&str] = &[
    "pairwise",
    "-s",
    "64K",
    "-D",
    "0.5",
    "--timeout",
    "4",
    "--expect-gbps",
    "1000000",
    "--transport",
    "tcp",
];

#[test]
fn frozen_rank_in_a_retest_is_named() {
    frozen(1, "retest", RETESTED);
}

#[test]
fn frozen_rank_in_each_collective_is_named() {
    for (i, name) in collectives::coll::ALL.into_iter().enumerate() {
        frozen(i % 4, name, &coll_args(name));
    }
}

#[test]
fn frozen_rank_in_the_mpi_baseline_is_named() {
    let mut args = coll_args("all_reduce");
    args.extend_from_slice(&["--baseline", "mpi"]);
    frozen(3, "baseline", &args);
}

#[test]
fn frozen_rank_in_the_middle_of_a_ring_is_the_root_not_its_neighbours() {
    // The case: one rank of a 4-rank all_reduce frozen while data moves; every rank
    // waits on a neighbour, one line names the frozen one.
    frozen(
        1,
        "all_reduce:delay=300",
        &[
            "all_reduce",
            "-b",
            "1M",
            "-e",
            "1M",
            "-n",
            "400",
            "-w",
            "1",
            "-T",
            "3",
            "--transport",
            "tcp",
        ],
    );
}

#[test]
fn frozen_rank_before_mpi_init_ends_the_job_in_time() {
    // No channel exists before MPI_Init: the ranks waiting in it say so and leave with 3.
    let o = fault_job(4, "stop:rank=1:phase=bootstrap", &coll_args("all_reduce"));
    let after = struck(&o, "stop:rank=1:phase=bootstrap");
    assert_eq!(o.status(), Some(3), "{}", o.run.all());
    assert!(after < T as f64 + AFTER_DEADLINE, "ended {after:.1} s after the fault");
    assert!(
        o.run.stderr.contains("MPI initialisation did not finish within 3s"),
        "{}",
        o.run.all()
    );
    clean(&o);
}

/// [`job_status`] on the real output of a run whose mpirun crashed in its teardown
/// (tests/fixtures/mpirun-teardown-segv.stderr): it reads as the exit code mpirun had reported,
/// and only that crash after that report does; [`FaultOutcome::status`] on one whose mpirun hung
/// there (tests/fixtures/mpirun-teardown-hang.stderr) likewise.
#[test]
fn mpiruns_teardown_crash_reads_as_the_status_it_reported() {
    let text = std::fs::read_to_string(e2e::root().join("tests/fixtures/mpirun-teardown-segv.stderr"))
        .expect("tests/fixtures/mpirun-teardown-segv.stderr");
    let run = |code: Option<i32>, stderr: &str| e2e::Run {
        code,
        stdout: String::new(),
        stderr: stderr.to_string(),
        elapsed: Duration::ZERO,
        ended: std::time::SystemTime::now(),
    };
    assert_eq!(job_status(&run(None, &text)), Some(3));
    // An exit status is taken as it is.
    assert_eq!(job_status(&run(Some(1), &text)), Some(1));
    // Killed by a signal without the job's end reported first, or crashed elsewhere: no status.
    let unreported = text.replace("Exit code:    3", "");
    assert_eq!(job_status(&run(None, &unreported)), None);
    let elsewhere = text.replace("PMIx_server_finalize", "pmix_ptl_base_send");
    assert_eq!(job_status(&run(None, &elsewhere)), None);
    // The same teardown deadlocked instead, every rank gone (fault_job killed mpirun): the
    // status it had reported; none where it had reported none.
    let hung = |stderr: &str| common::FaultOutcome {
        run: run(None, stderr),
        leftovers: Vec::new(),
        shm: Vec::new(),
        after_fault: None,
        teardown_hung: true,
    };
    let hang = std::fs::read_to_string(e2e::root().join("tests/fixtures/mpirun-teardown-hang.stderr"))
        .expect("tests/fixtures/mpirun-teardown-hang.stderr");
    assert_eq!(hung(&hang).status(), Some(3));
    assert_eq!(hung(&hang.replace("Exit code:    3", "")).status(), None);
    // Without the watch's verdict, a killed mpirun without a crash is no status.
    assert_eq!(job_status(&run(None, &hang)), None);
}

#[test]
fn killed_rank_before_mpi_init_ends_the_job_at_once() {
    killed(2, "bootstrap", &coll_args("all_reduce"));
}

#[test]
fn a_live_rank_that_hangs_is_named_alive() {
    // The main thread sleeps: the rank answers the post-mortem, so it is alive but stuck.
    let o = fault_job(3, "stall:rank=1:phase=all_gather", &coll_args("all_gather"));
    assert_eq!(o.status(), Some(3), "{}", o.run.all());
    let line = root_line(&o);
    assert!(
        line.contains("rank 1 (") && line.contains("is alive and answers"),
        "{line}"
    );
    clean(&o);
}

#[test]
fn killed_rank_in_each_phase_ends_the_job_at_once() {
    killed(1, "endpoints", &coll_args("all_reduce"));
    killed(2, "connect", &coll_args("all_reduce"));
    killed(3, "pairwise", PAIRWISE);
    killed(1, "retest", RETESTED);
    for (i, name) in collectives::coll::ALL.into_iter().enumerate() {
        killed((i + 1) % 4, name, &coll_args(name));
    }
    let mut args = coll_args("all_reduce");
    args.extend_from_slice(&["--baseline", "mpi"]);
    killed(0, "baseline", &args);
}

#[test]
fn verbose_keeps_every_ranks_own_line() {
    let mut args = coll_args("all_reduce");
    args.push("--verbose");
    let o = fault_job(4, "stop:rank=1:phase=all_reduce", &args);
    assert_eq!(o.status(), Some(3), "{}", o.run.all());
    root_line(&o);
    assert!(
        o.run
            .stderr
            .contains("post-mortem: rank 1 (vm): no answer (stopped or hung)"),
        "{}",
        o.run.all()
    );
    assert!(
        o.run.stderr.contains("MPI step `"),
        "a waiting rank's own line: {}",
        o.run.all()
    );
    clean(&o);
}

/// Every TCP port the processes `pids` listen on (from `ss`).
fn listening_ports(pids: &[i32]) -> Vec<String> {
    let out = Command::new("ss").args(["-ltnpH"]).output().expect("ss");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| pids.iter().any(|p| l.contains(&format!("pid={p},"))))
        .filter_map(|l| l.split_whitespace().nth(3).map(str::to_string))
        .collect()
}

/// `mount ARGS`, panicking with the reason when it fails (the fault suite runs as root, as the
/// namespace tests do).
fn mount(args: &[&str]) {
    let out = Command::new("mount").args(args).output().expect("mount");
    assert!(
        out.status.success(),
        "mount {args:?} failed (the fault suite needs root): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_output_directory_that_turns_read_only_fails_cleanly() {
    let dir = scratch("readonly");
    mount(&[
        "-t",
        "tmpfs",
        "-o",
        "size=4m",
        "meshrun-fault",
        dir.to_str().unwrap_or_default(),
    ]);
    let out_file = dir.join("all_reduce.json");
    let out_arg = out_file.display().to_string();
    let args = [
        "all_reduce",
        "-b",
        "1M",
        "-e",
        "1M",
        "-n",
        "300",
        "--transport",
        "tcp",
        "-J",
        &out_arg,
    ];
    let (mut child, _) = spawn_job("MESHRUN_READONLY_JOB", 2, &[], &args);
    let pgid = child.id() as i32;
    // The ranks check the directory at start (writable then): once the table's header is out,
    // the run is under way; make the directory read-only then.
    let (tx, rx) = std::sync::mpsc::channel();
    let mut pipe = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        let mut lines = std::io::BufReader::new(&mut pipe).lines();
        for line in lines.by_ref().map_while(Result::ok) {
            if line.contains("redop") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let started = rx.recv_timeout(Duration::from_secs(60)).is_ok();
    mount(&["-o", "remount,ro", dir.to_str().unwrap_or_default()]);
    let out = child.wait_with_output().expect("wait");
    let stdout_text = reader.join().unwrap_or_default();
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
    let left = entries(&dir);
    let _ = Command::new("umount").arg(&dir).status();
    assert!(started, "the run never printed its table header");
    let stdout = stdout_text;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("# Out of bounds values : 0 OK"),
        "the results are still printed: {stdout}"
    );
    assert!(
        stderr.contains(&format!(
            "meshrun: cannot write {}: directory {} is not writable (Read-only file system",
            out_file.display(),
            dir.display()
        )),
        "{stderr}"
    );
    assert!(left.is_empty(), "nothing partial is left: {left:?}");
    // Read-only from the start: refused before the run, in one line.
    let dir2 = scratch("readonly-start");
    mount(&[
        "-t",
        "tmpfs",
        "-o",
        "size=1m,ro",
        "meshrun-fault",
        dir2.to_str().unwrap_or_default(),
    ]);
    let r = e2e::mpirun(
        2,
        &[
            "all_reduce",
            "-b",
            "8",
            "-e",
            "8",
            "--transport",
            "tcp",
            "-J",
            &dir2.join("x.json").display().to_string(),
        ],
        &[],
        LIMIT,
    );
    let _ = Command::new("umount").arg(&dir2).status();
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("is not writable (Read-only file system"),
        "{}",
        r.all()
    );
    assert!(
        !r.stdout.contains("# Out of bounds"),
        "refused before the run: {}",
        r.stdout
    );
}

/// A job of `np` ranks of `meshrun ARGS` under mpirun, output piped, its processes tagged with
/// `name`=this test process's pid so their ports can be found.
fn spawn_job(name: &str, np: usize, env: &[(&str, &str)], args: &[&str]) -> (std::process::Child, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = mpirun_command(np, args, env);
    cmd.env(name, std::process::id().to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    let child = cmd.spawn().expect("mpirun");
    (child, format!("{name}={}", std::process::id()))
}

/// The ports the ranks tagged `tag` listen on themselves (MPI's own listen on the wildcard
/// address), polled until there are `want` of them or `limit` passes.
fn rank_ports(tag: &str, want: usize, limit: Duration) -> Vec<String> {
    let until = std::time::Instant::now() + limit;
    loop {
        let mut ports = listening_ports(&e2e::tagged_pids(tag, "meshrun"));
        ports.retain(|p| !p.starts_with("0.0.0.0:") && !p.starts_with("[::]:") && !p.starts_with("*:"));
        if ports.len() >= want || std::time::Instant::now() > until {
            return ports;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// To each port: a half-open connection (first, so it is ahead of real peers in a backlog; held
/// until the returned sockets are dropped), garbage, a control frame of another job (right magic
/// and version, wrong token) and a hello of another job.
fn send_strays(ports: &[String], silent_per_port: usize) -> Vec<std::net::TcpStream> {
    use std::io::Write;
    use std::net::TcpStream;
    let mut half_open = Vec::new();
    for port in ports {
        for _ in 0..silent_per_port {
            if let Ok(s) = TcpStream::connect(port) {
                half_open.push(s);
            }
        }
        let mut control = b"MSHC".to_vec();
        control.extend_from_slice(&1u32.to_le_bytes());
        control.extend_from_slice(&[0xab; 16]);
        control.push(2);
        control.resize(1200, 0);
        let mut hello = b"MSHR".to_vec();
        hello.extend_from_slice(&2u32.to_le_bytes());
        hello.extend_from_slice(&[0xcd; 16]);
        hello.resize(64, 0);
        for bytes in [vec![0x5a; 3000], control, hello] {
            if let Ok(mut s) = TcpStream::connect(port) {
                let _ = s.write_all(&bytes);
            }
        }
    }
    half_open
}

/// Wait for the job and kill whatever of its process group is left: (status, stdout, stderr).
fn finish(child: std::process::Child) -> (Option<i32>, String, String) {
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    let out = child.wait_with_output().expect("wait");
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn stray_connections_do_not_disturb_a_run() {
    let args = [
        "all_reduce",
        "-b",
        "8",
        "-e",
        "4M",
        "-n",
        "60",
        "-T",
        "10",
        "--transport",
        "tcp",
        "--verbose",
    ];
    let (child, tag) = spawn_job("MESHRUN_STRAY_JOB", 3, &[], &args);
    // The three control ports (and a mesh port, while it connects).
    let ports = rank_ports(&tag, 3, Duration::from_secs(6));
    let held = send_strays(&ports, 1);
    let (code, stdout, stderr) = finish(child);
    drop(held);
    assert!(ports.len() >= 3, "the ranks' ports were not found: {ports:?}\n{stderr}");
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    // The strays reached the control ports, which said so (--verbose) and went on.
    assert!(
        stderr.contains("ignored a connection to its control port from"),
        "{ports:?}\n{stderr}"
    );
}

#[test]
fn stray_connections_while_the_mesh_connects_do_not_eat_the_deadline() {
    // Rank 1 freezes for 2 s as the mesh connects, so every rank's mesh port is open then; the
    // strays (one half-open, silent for longer than a hello may take) must not stop the mesh.
    // The deadline is long (20 s) and the run after the mesh is one small size, so the two
    // outcomes sit far apart whatever the load: hellos read at once end the job about 2 s after
    // the pause began (5.2 s on a heavily loaded machine); silent strays read one at a time
    // hold the mesh for 5 s each, four of them up to the deadline.
    let args = [
        "all_reduce",
        "-b",
        "8",
        "-e",
        "8",
        "-n",
        "5",
        "-T",
        "20",
        "--transport",
        "tcp",
    ];
    let fault = [("MESHRUN_FAULT", "pause:rank=1:phase=connect:for=2000")];
    let (child, tag) = spawn_job("MESHRUN_STRAY_CONNECT_JOB", 4, &fault, &args);
    // Four control ports and four mesh ports.
    let ports = rank_ports(&tag, 8, Duration::from_secs(6));
    // Four silent strays a port: read one at a time, they would hold the mesh for four 5 s
    // hello waits, up to the 20 s deadline; read at once, they cost nothing.
    let held = send_strays(&ports, 4);
    let (code, stdout, stderr) = finish(child);
    drop(held);
    assert!(
        ports.len() >= 8,
        "the ranks' ports were not all found: {ports:?}\n{stderr}"
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    assert!(
        stderr.contains("refused a connection from") && stderr.contains("no valid hello with this job's token"),
        "the mesh ports refused the strays and said so: {stderr}"
    );
    // The half-open stray costs nothing: hellos are read from every pending connection at once,
    // so the job ends soon after rank 1 wakes (reading them one at a time, rank 0 sat on the
    // stray until its own deadline, 3 s more here).
    let paused = stderr
        .lines()
        .find(|l| l.contains(" freezes for "))
        .and_then(|l| l.split_once("(epoch ")?.1.split(')').next()?.parse::<f64>().ok())
        .expect("the pause struck");
    let ended = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    eprintln!(
        "stray connections while connecting: the job ended {:.1} s after the 2 s pause began",
        ended - paused
    );
    assert!(
        ended - paused < 12.0,
        "the job ended {:.1} s after the 2 s pause began: a stray held up the mesh (hellos read at \
         once: 2.1 s measured, 5.2 s loaded; one at a time, four silent strays cost 20 s)",
        ended - paused
    );
}

/// A job asked for a JSON report that a stall ends first: the rank that names the root cause
/// writes the stall there instead (the same line, the rank it names, every rank's state).
#[test]
fn a_stall_is_kept_in_the_json_report_asked_for() {
    let dir = scratch("stall-json");
    let json = dir.join("report.json");
    let json_arg = json.display().to_string();
    let fault = "stop:rank=2:phase=pairwise";
    let o = fault_job(4, fault, &[PAIRWISE, &["--json", &json_arg]].concat());
    struck(&o, fault);
    assert_eq!(o.status(), Some(3), "{}", o.run.all());
    let line = root_line(&o);
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{}: {e}\n{}", json.display(), o.run.all()));
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (doc["test"].as_str(), doc["exit_status"].as_i64()),
        (Some("stall"), Some(3))
    );
    let cause = doc["root_cause"].as_str().unwrap_or_default();
    assert!(
        !cause.is_empty() && line.ends_with(cause),
        "JSON {cause:?} is not the line {line:?}"
    );
    assert_eq!(doc["roots"], serde_json::json!([2]), "{text}");
    let states: Vec<&str> = doc["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states.len(), 4, "{text}");
    assert_eq!(states[2], "silent", "the stopped rank answers nothing: {text}");
    clean(&o);
    let _ = std::fs::remove_dir_all(&dir);
}
