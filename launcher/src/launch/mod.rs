//! `meshrun launch`: from a host list to the right `mpirun` command for the MPI installed
//! (here: host sources, placement, the command's argv, MPI flavours, open-file limits), and the
//! command itself ([`run()`]).

mod run;
mod teardown;
#[cfg(test)]
mod tests;

pub use run::run;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hostfiles::HostSlots;

use crate::cli::MpiFlavour;

/// Raise this process's soft open-file limit (mpirun and the local ranks inherit it) and check
/// that `np` ranks, `local` of them on this host, fit in it: each rank holds a socket per peer,
/// and mpirun pipes for each local rank. Checked before mpirun starts, which otherwise can hang
/// when it runs out of descriptors.
pub fn check_open_files(np: u64, local: u64) -> Result<(), ranks::limits::TooFewFiles> {
    use ranks::limits::{check, launcher_needs, raise_open_files, rank_needs, RANK_RESERVE};
    let limits = raise_open_files();
    if local == 0 {
        return Ok(());
    }
    let rank = rank_needs(np as usize);
    let launcher = launcher_needs(local as usize);
    if rank >= launcher {
        check(
            limits,
            rank,
            format!("each of the {np} ranks"),
            format!(
                "a socket to each of {} peers, {RANK_RESERVE} for MPI and the process",
                np - 1
            ),
        )
    } else {
        check(
            limits,
            launcher,
            "mpirun".into(),
            format!("pipes for its {local} local ranks"),
        )
    }
}

/// Ranks placed on this host: entries naming it (or localhost).
pub fn local_ranks(placement: &[(String, u64)], this_host: &str) -> u64 {
    let short = |h: &str| h.split('.').next().unwrap_or(h).to_string();
    placement
        .iter()
        .filter(|(h, _)| h == "localhost" || h == "127.0.0.1" || short(h) == short(this_host))
        .map(|(_, n)| n)
        .sum()
}

/// A launch failure; all are bad input or a missing tool (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{0}")]
    Hosts(#[from] hostfiles::HostfileError),
    #[error("--hosts `{expr}`: {source}")]
    HostList {
        expr: String,
        #[source]
        source: hostfiles::HostlistError,
    },
    #[error("{what} `{expr}`: {source}")]
    EnvHostList {
        what: String,
        expr: String,
        #[source]
        source: hostfiles::HostlistError,
    },
    #[error("--np {np} is more than the {slots} slots of the hosts from {from}; add hosts, raise their slots, or pass --oversubscribe")]
    TooManyRanks { np: u64, slots: u64, from: String },
    #[error("--np {np} is more than --ppn {ppn} x {hosts} hosts from {from}")]
    TooManyForPpn {
        np: u64,
        ppn: u32,
        hosts: usize,
        from: String,
    },
    #[error("no hosts given and --np missing: pass --hostfile FILE, --hosts 'node[01-04]', or --np N to run on this machine")]
    NothingToRun,
    #[error("`{mpirun}` was not found; install an MPI (Debian: apt-get install openmpi-bin) or pass --mpirun PATH")]
    MpirunMissing { mpirun: String },
    #[error("cannot tell which MPI `{mpirun}` belongs to from its --version output ({first_line}); pass --mpi openmpi|mpich|intel")]
    UnknownFlavour { mpirun: String, first_line: String },
    #[error("`{mpirun} --version` failed: {why}; pass --mpi openmpi|mpich|intel")]
    VersionFailed { mpirun: String, why: String },
    #[error("host `{host}` (from {from}) does not resolve to an address: {why}")]
    Unresolvable { host: String, from: String, why: String },
    #[error("{0}")]
    HostsNotReady(String),
    #[error("-x {0}: expected VAR or VAR=VALUE with VAR made of letters, digits and `_`")]
    BadEnv(String),
    #[error("nothing to run after `--`; expected e.g. `meshrun launch --np 4 -- mesh-check`")]
    NoCommand,
    #[error("--ssh-port: {flavour}'s mpiexec has no option for the ssh port; set `Port {port}` for the hosts in ~/.ssh/config (or use Open MPI)")]
    SshPortUnsupported { flavour: &'static str, port: u16 },
    #[error("--np 0 starts no rank; expected --np 2 or more (a test needs a pair)")]
    NoRanks,
    /// The rank command was refused before mpirun started (see precheck.rs).
    #[error("{0}")]
    RankCommand(String),
    #[error("cannot find this program's own path to start it on the ranks: {0}; pass --meshrun PATH")]
    SelfPath(std::io::Error),
    #[error(transparent)]
    OpenFiles(#[from] ranks::limits::TooFewFiles),
    #[error("cannot start `{mpirun}`: {source}")]
    Spawn {
        mpirun: String,
        #[source]
        source: std::io::Error,
    },
}

/// Where the hosts came from, for messages.
#[derive(Debug, Clone)]
pub struct HostSource {
    pub hosts: Vec<HostSlots>,
    pub from: String,
}

/// Default MPIJob hostfile path.
pub const MPIJOB_HOSTFILE: &str = "/etc/mpi/hostfile";

/// Hosts from, in order: `--hostfile`, `--hosts`, Slurm's `SLURM_JOB_NODELIST`, the MPIJob hostfile
/// (when the environment says this is an MPIJob launcher). None: run on this machine.
pub fn host_source(
    hostfile: Option<&Path>,
    hosts_expr: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<HostSource>, LaunchError> {
    if let Some(f) = hostfile {
        return Ok(Some(HostSource {
            hosts: hostfiles::parse_hostfile(f)?,
            from: f.display().to_string(),
        }));
    }
    if let Some(expr) = hosts_expr {
        let hosts = expand_with_slots(expr, None).map_err(|source| LaunchError::HostList {
            expr: expr.into(),
            source,
        })?;
        return Ok(Some(HostSource {
            hosts,
            from: "--hosts".into(),
        }));
    }
    if let Some(list) = env("SLURM_JOB_NODELIST").filter(|s| !s.is_empty()) {
        let per_node = env("SLURM_TASKS_PER_NODE").and_then(|s| slurm_tasks_per_node(&s));
        let hosts = expand_with_slots(&list, per_node.as_deref()).map_err(|source| LaunchError::EnvHostList {
            what: "SLURM_JOB_NODELIST".into(),
            expr: list.clone(),
            source,
        })?;
        return Ok(Some(HostSource {
            hosts,
            from: "SLURM_JOB_NODELIST".into(),
        }));
    }
    let mpijob_file = env("OMPI_MCA_orte_default_hostfile")
        .or_else(|| (env("K_MPI_JOB_ROLE").as_deref() == Some("launcher")).then(|| MPIJOB_HOSTFILE.to_string()));
    if let Some(f) = mpijob_file {
        let p = PathBuf::from(&f);
        return Ok(Some(HostSource {
            hosts: hostfiles::parse_hostfile(&p)?,
            from: f,
        }));
    }
    Ok(None)
}

fn expand_with_slots(expr: &str, per_node: Option<&[u32]>) -> Result<Vec<HostSlots>, hostfiles::HostlistError> {
    let names = hostfiles::expand_hostlist(expr)?;
    let mut out: Vec<HostSlots> = Vec::with_capacity(names.len());
    for (i, host) in names.into_iter().enumerate() {
        if let Err(m) = hostfiles::valid_hostname(&host) {
            return Err(hostfiles::HostlistError {
                column: 1,
                message: format!("host name `{host}` {m}"),
            });
        }
        let slots = per_node.and_then(|p| p.get(i).copied()).unwrap_or(1);
        out.push(HostSlots {
            host,
            slots,
            max_slots: None,
        });
    }
    Ok(out)
}

/// Slurm's `SLURM_TASKS_PER_NODE`, e.g. `2(x3),1` -> [2, 2, 2, 1].
pub fn slurm_tasks_per_node(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',') {
        match part.split_once("(x") {
            Some((n, rep)) => {
                let n: u32 = n.parse().ok()?;
                let rep: usize = rep.strip_suffix(')')?.parse().ok()?;
                if rep > hostfiles::MAX_EXPANDED_HOSTS as usize {
                    return None;
                }
                out.extend(std::iter::repeat_n(n, rep));
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// How many ranks go to each host, in host order (hosts with none are left out).
pub fn place(
    src: &HostSource,
    np: Option<u64>,
    ppn: Option<u32>,
    oversubscribe: bool,
) -> Result<Vec<(String, u64)>, LaunchError> {
    let hosts = &src.hosts;
    let caps: Vec<u64> = match ppn {
        Some(p) => hosts.iter().map(|_| u64::from(p)).collect(),
        None => hosts.iter().map(|h| u64::from(h.slots)).collect(),
    };
    let total: u64 = caps.iter().sum();
    let np = np.unwrap_or(total);
    if np > total {
        if let Some(p) = ppn {
            return Err(LaunchError::TooManyForPpn {
                np,
                ppn: p,
                hosts: hosts.len(),
                from: src.from.clone(),
            });
        }
        if !oversubscribe {
            return Err(LaunchError::TooManyRanks {
                np,
                slots: total,
                from: src.from.clone(),
            });
        }
    }
    let mut counts = vec![0u64; hosts.len()];
    let mut left = np;
    for (c, cap) in counts.iter_mut().zip(&caps) {
        let take = left.min(*cap);
        *c = take;
        left -= take;
    }
    // Oversubscribed: the rest round-robin.
    let mut i = 0;
    while left > 0 && !hosts.is_empty() {
        counts[i % hosts.len()] += 1;
        left -= 1;
        i += 1;
    }
    Ok(hosts
        .iter()
        .zip(counts)
        .filter(|(_, c)| *c > 0)
        .map(|(h, c)| (h.host.clone(), c))
        .collect())
}

/// Everything that decides the mpirun command line.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    pub mpirun: String,
    pub flavour: MpiFlavour,
    /// Ranks per host, in order.
    pub placement: Vec<(String, u64)>,
    pub as_root: bool,
    pub oversubscribe: bool,
    pub rsh_agent: Option<String>,
    /// Arguments for the remote shell (Open MPI's plm_rsh_args), where the launch sets them.
    pub rsh_args: Option<String>,
    /// Variables to pass to the ranks: (name, value given on the command line, if any).
    pub env: Vec<(String, Option<String>)>,
    pub extra_mpi_args: Vec<String>,
    pub program: String,
    pub program_args: Vec<String>,
}

/// The argv to execute (`argv[0]` is mpirun).
pub fn build_argv(p: &LaunchPlan) -> Vec<String> {
    let np: u64 = p.placement.iter().map(|(_, c)| c).sum();
    let host_arg = p
        .placement
        .iter()
        .map(|(h, c)| format!("{h}:{c}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut a = vec![p.mpirun.clone()];
    let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
    match p.flavour {
        MpiFlavour::Openmpi => {
            if p.as_root {
                push(&["--allow-run-as-root"]);
            }
            push(&["-np", &np.to_string(), "--host", &host_arg, "--bind-to", "none"]);
            if p.oversubscribe {
                push(&["--oversubscribe"]);
            }
            if let Some(agent) = &p.rsh_agent {
                push(&["--mca", "plm_rsh_agent", agent]);
            }
            if let Some(args) = &p.rsh_args {
                push(&["--mca", "plm_rsh_args", args]);
            }
            // When a rank exits non-zero (a FAIL verdict is status 1 on rank 0), mpirun aborts
            // the job and each daemon sends its ranks SIGCONT, sleeps this many seconds, sends
            // SIGTERM, sleeps again and sends SIGKILL, whether the ranks are still running or
            // not: 2-4 s of nothing after every FAIL (measured: 7-9 s for an MPI program that
            // exits 1 on six hosts, 5 s with 0, the same as one that exits 0). meshrun handles
            // no SIGTERM (a rank killed by either signal loses nothing), so the grace is waste.
            push(&["--mca", "odls_base_sigkill_timeout", "0"]);
            for (k, v) in &p.env {
                match v {
                    Some(v) => push(&["-x", &format!("{k}={v}")]),
                    None => push(&["-x", k]),
                }
            }
        }
        MpiFlavour::Mpich | MpiFlavour::Intel => {
            push(&["-n", &np.to_string(), "-hosts", &host_arg, "-bind-to", "none"]);
            if let Some(agent) = &p.rsh_agent {
                push(&["-launcher", "ssh", "-launcher-exec", agent]);
            }
            let mut names = Vec::new();
            for (k, v) in &p.env {
                match v {
                    Some(v) => push(&["-genv", k, v]),
                    None => names.push(k.clone()),
                }
            }
            if !names.is_empty() {
                push(&["-genvlist", &names.join(",")]);
            }
        }
    }
    a.extend(p.extra_mpi_args.iter().cloned());
    a.push(p.program.clone());
    a.extend(p.program_args.iter().cloned());
    a
}

/// Tell the MPI flavour from `mpirun --version` output.
pub fn flavour_from_version(out: &str) -> Option<MpiFlavour> {
    let lower = out.to_ascii_lowercase();
    if lower.contains("open mpi") || lower.contains("open-mpi") || lower.contains("openrte") || lower.contains("prte") {
        Some(MpiFlavour::Openmpi)
    } else if lower.contains("intel(r) mpi") || lower.contains("intel mpi") {
        Some(MpiFlavour::Intel)
    } else if lower.contains("hydra") || lower.contains("mpich") {
        Some(MpiFlavour::Mpich)
    } else {
        None
    }
}

/// Run `mpirun --version` (bounded to 20 s) and tell the flavour.
pub fn detect_flavour(mpirun: &str) -> Result<MpiFlavour, LaunchError> {
    let mut child = match Command::new(mpirun)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(LaunchError::MpirunMissing { mpirun: mpirun.into() })
        }
        Err(e) => {
            return Err(LaunchError::VersionFailed {
                mpirun: mpirun.into(),
                why: e.to_string(),
            })
        }
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LaunchError::VersionFailed {
                    mpirun: mpirun.into(),
                    why: "no answer within 20 s".into(),
                });
            }
            Err(e) => {
                return Err(LaunchError::VersionFailed {
                    mpirun: mpirun.into(),
                    why: e.to_string(),
                })
            }
        }
    }
    let out = child.wait_with_output().map_err(|e| LaunchError::VersionFailed {
        mpirun: mpirun.into(),
        why: e.to_string(),
    })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    flavour_from_version(&text).ok_or_else(|| LaunchError::UnknownFlavour {
        mpirun: mpirun.into(),
        first_line: text
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("empty")
            .trim()
            .to_string(),
    })
}

/// Check `-x` values.
pub fn parse_env(spec: &str) -> Result<(String, Option<String>), LaunchError> {
    let (k, v) = match spec.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (spec, None),
    };
    let ok =
        !k.is_empty() && !k.as_bytes()[0].is_ascii_digit() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !ok {
        return Err(LaunchError::BadEnv(spec.into()));
    }
    Ok((k.to_string(), v))
}
