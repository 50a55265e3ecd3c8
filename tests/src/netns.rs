//! A cluster of namespace hosts on this machine (`scripts/netns-cluster`): bringing it up, running
//! `meshrun launch` from its first host, the check that a pairwise run on it names one part, and
//! flaps (a part of a shaped fabric between two rates in turn, in the background, until stopped).

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::{blamed, limits, meshrun_bin, mpi_env, root, run_bounded, Run};

/// A namespace cluster of N hosts for the duration of a test (one at a time on this machine).
pub struct NetnsCluster {
    pub dir: PathBuf,
    _lock: MachineLock,
}

/// Held by each namespace or Slurm cluster while it is up: one at a time per test binary.
static NETNS_LOCK: Mutex<()> = Mutex::new(());

/// The namespace hosts' names (mr-h*) and the Slurm cluster's ports are the machine's, not one
/// test process's: a second `cargo test` (another checkout, a flake sweep) waits here until the
/// first one's cluster is down, rather than tearing it down under it.
const MACHINE_LOCK: &str = "/run/lock/meshrun-netns.lock";

/// How long a cluster waits for another process's: longer than any one test holds it.
const MACHINE_LOCK_WAIT: Duration = Duration::from_secs(1800);

/// This process's turn with the namespace hosts: the test binary's mutex, then the machine's file
/// lock (released when the file closes, also when the process dies).
pub(crate) struct MachineLock {
    _file: std::fs::File,
    _mutex: MutexGuard<'static, ()>,
}

impl MachineLock {
    pub(crate) fn take() -> MachineLock {
        let mutex = NETNS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(MACHINE_LOCK)
            .unwrap_or_else(|e| panic!("{MACHINE_LOCK}: {e}"));
        let deadline = std::time::Instant::now() + MACHINE_LOCK_WAIT;
        let mut said = false;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    if !said {
                        let holder = std::fs::read_to_string(MACHINE_LOCK).unwrap_or_default();
                        eprintln!(
                            "waiting for the namespace hosts: another test process holds {MACHINE_LOCK} ({})",
                            holder.trim()
                        );
                        said = true;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => panic!(
                    "{MACHINE_LOCK}: not free after {} s ({e}); the process named in it holds the namespace hosts",
                    MACHINE_LOCK_WAIT.as_secs()
                ),
            }
        }
        let _ = std::fs::write(MACHINE_LOCK, format!("pid {}", std::process::id()));
        MachineLock {
            _file: file,
            _mutex: mutex,
        }
    }
}

impl NetnsCluster {
    pub fn up(n: usize) -> NetnsCluster {
        NetnsCluster::up_with_slots(n, 1)
    }

    /// `n` hosts with `slots` ranks each in the hostfile.
    pub fn up_with_slots(n: usize, slots: usize) -> NetnsCluster {
        NetnsCluster::up_with(n, slots, 1)
    }

    /// `n` hosts with `slots` ranks each, under `leaves` (1 or 2) leaf bridges joined by an
    /// uplink (`dir/topology` says which host is under which).
    pub fn up_with(n: usize, slots: usize, leaves: usize) -> NetnsCluster {
        NetnsCluster::up_full(n, slots, leaves, 1)
    }

    /// `n` hosts with `slots` ranks each and two rails: every host has eth0 on one bridge and
    /// eth1 on another (`shape-rail HOST 1 RATE` slows one host's eth1).
    pub fn up_with_rails(n: usize, slots: usize) -> NetnsCluster {
        NetnsCluster::up_full(n, slots, 1, 2)
    }

    fn up_full(n: usize, slots: usize, leaves: usize, rails: usize) -> NetnsCluster {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the namespace cluster needs root (ip netns, unshare); run the tests as root, as CI does"
        );
        let dir = std::env::temp_dir().join(format!("meshrun-netns-{}", std::process::id()));
        // Made before it is up, so a failed `up` is taken down again (by Drop) when it panics.
        let cluster = NetnsCluster {
            dir,
            _lock: MachineLock::take(),
        };
        let r = run_bounded(
            Command::new(root().join("scripts/netns-cluster"))
                .args([
                    "up",
                    &n.to_string(),
                    &slots.to_string(),
                    &leaves.to_string(),
                    &rails.to_string(),
                ])
                .env("MR_NETNS_DIR", &cluster.dir),
            Duration::from_secs(60),
        );
        assert_eq!(r.code, Some(0), "netns-cluster up failed:\n{}", r.all());
        cluster
    }

    pub fn script(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(root().join("scripts/netns-cluster"));
        cmd.args(args).env("MR_NETNS_DIR", &self.dir);
        run_bounded(&mut cmd, Duration::from_secs(60))
    }

    /// Run `meshrun launch --hostfile ... --rsh-agent ... ARGS` from host mr-h0.
    pub fn launch(&self, launch_args: &[&str], rank_args: &[&str], limit: Duration) -> Run {
        run_bounded(&mut self.launch_command(launch_args, rank_args), limit)
    }

    /// Run pairwise with `args` on the cluster: it fails (status 1) naming exactly one part,
    /// whose line starts with `want`.
    pub fn names_only(&self, args: &[&str], want: &str) -> Run {
        let r = self.launch(&[], args, limits::LONG_JOB);
        r.expect_code(1);
        let b = blamed(&r.stdout);
        assert_eq!(b.len(), 1, "{}", r.stdout);
        assert!(b[0].starts_with(want), "want {want}:\n{}", r.stdout);
        r
    }

    /// Flap the link `a` <-> `b` (after `shape-fabric`): both ways at `rate_a` for `period`, then
    /// `rate_b`, and so on, for `bound` at most, then the fabric's rate. Returns the part's name
    /// (`link:A:B`), for [`NetnsCluster::unflap`] and [`NetnsCluster::flapper`].
    pub fn flap_link(&self, a: &str, b: &str, rate_a: &str, rate_b: &str, period: Duration, bound: Duration) -> String {
        self.flap(&["flap-link", a, b], rate_a, rate_b, period, bound)
    }

    /// Flap every link of `host`, both ways, as [`NetnsCluster::flap_link`] does one (`node:HOST`).
    pub fn flap_node(&self, host: &str, rate_a: &str, rate_b: &str, period: Duration, bound: Duration) -> String {
        self.flap(&["flap-node", host], rate_a, rate_b, period, bound)
    }

    /// Flap `host`'s links on `rail` (0: eth0, 1: eth1 of a two-rail cluster) (`nic:HOST:RAIL`).
    pub fn flap_nic(
        &self,
        host: &str,
        rail: usize,
        rate_a: &str,
        rate_b: &str,
        period: Duration,
        bound: Duration,
    ) -> String {
        self.flap(&["flap-nic", host, &rail.to_string()], rate_a, rate_b, period, bound)
    }

    fn flap(&self, part: &[&str], rate_a: &str, rate_b: &str, period: Duration, bound: Duration) -> String {
        let (period, bound) = (seconds(period), seconds(bound));
        let mut args = part.to_vec();
        args.extend([rate_a, rate_b, &period, &bound]);
        let r = self.script(&args);
        r.expect_code(0);
        // "flapping PART (what): ..."
        let name = r
            .stdout
            .strip_prefix("flapping ")
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_else(|| panic!("no part named:\n{}", r.all()));
        name.to_string()
    }

    /// Stop the flaps of `parts` (every flap when empty); their parts are back at the fabric's rate
    /// when it returns.
    pub fn unflap(&self, parts: &[&str]) {
        let mut args = vec!["unflap"];
        args.extend(parts);
        self.script(&args).expect_code(0);
    }

    /// The pid of `part`'s flapper while it runs (it leads a session of its own: its sleep and tc
    /// are in it too).
    pub fn flapper(&self, part: &str) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(self.dir.join("flap").join(format!("{part}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let alive = session_members(pid).contains(&pid);
        let ours = String::from_utf8_lossy(&cmdline)
            .replace('\0', " ")
            .contains(&format!("flap-run {part} "));
        (alive && ours).then_some(pid)
    }

    /// The command [`NetnsCluster::launch`] runs, for a test that acts on the cluster while it runs.
    pub fn launch_command(&self, launch_args: &[&str], rank_args: &[&str]) -> Command {
        let line = launch_line(&self.dir, launch_args, rank_args);
        let mut cmd = Command::new(root().join("scripts/netns-cluster"));
        mpi_env(&mut cmd)
            .env("MR_NETNS_DIR", &self.dir)
            .args(["exec", "mr-h0"])
            .args(&line);
        cmd
    }
}

/// `meshrun launch --hostfile DIR/hostfile --rsh-agent DIR/rsh-agent LAUNCH_ARGS -- RANK_ARGS`, as
/// a namespace cluster's first host runs it (`dir`: the cluster's files).
pub(crate) fn launch_line(dir: &std::path::Path, launch_args: &[&str], rank_args: &[&str]) -> Vec<String> {
    let mut line = vec![
        meshrun_bin().display().to_string(),
        "launch".into(),
        "--hostfile".into(),
        dir.join("hostfile").display().to_string(),
        "--rsh-agent".into(),
        dir.join("rsh-agent").display().to_string(),
    ];
    line.extend(launch_args.iter().map(|s| s.to_string()));
    line.push("--".into());
    line.extend(rank_args.iter().map(|s| s.to_string()));
    line
}

/// `d` as `scripts/netns-cluster` takes seconds: `1`, `0.5`, `0.25`.
fn seconds(d: Duration) -> String {
    let s = format!("{}.{:06}", d.as_secs(), d.subsec_micros());
    match s.trim_end_matches('0').trim_end_matches('.') {
        "" => "0".to_string(),
        t => t.to_string(),
    }
}

/// The live processes (not zombies) of session `sid`.
pub fn session_members(sid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command's ")": state, ppid, pgrp, session.
            let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().take(4).collect();
            (f.len() == 4 && f[0] != "Z" && f[3] == sid.to_string()).then_some(pid)
        })
        .collect()
}

impl Drop for NetnsCluster {
    /// `down` stops every flapper first, then takes the hosts away.
    fn drop(&mut self) {
        let _ = Command::new(root().join("scripts/netns-cluster"))
            .arg("down")
            .env("MR_NETNS_DIR", &self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
