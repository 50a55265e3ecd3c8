//! `meshrun launch` itself: the host list placed, the rank command checked, the hosts waited
//! for, the variables the ranks need gathered, then mpirun run (or, `--dry-run`, printed).

use std::net::ToSocketAddrs;
use std::time::Duration;

use super::{HostSource, LaunchError, LaunchPlan, MpiFlavour};
use crate::cli::LaunchArgs;
use crate::exit::Status;

/// A host the job places ranks on, and how many.
type RanksPerHost = Vec<(String, u64)>;

/// `meshrun launch`; the process exit status (mpirun's, or 2 with one line saying why not).
pub fn run(a: LaunchArgs) -> i32 {
    match launch(a) {
        Ok(code) => code,
        Err(e) => {
            ranks::eline!("meshrun launch: {e}");
            Status::Usage.code()
        }
    }
}

/// This process's environment.
fn env(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

fn launch(a: LaunchArgs) -> Result<i32, LaunchError> {
    if a.command.is_empty() {
        return Err(LaunchError::NoCommand);
    }
    if a.np == Some(0) {
        return Err(LaunchError::NoRanks);
    }
    let src = super::host_source(a.hostfile.as_deref(), a.hosts.as_deref(), &env)?;
    let placement = place(&a, src.as_ref())?;
    // The rank command is checked here, dry runs included, before any host is waited for or
    // any rank started.
    crate::precheck::rank_command(&a.command, &crate::precheck::Job { placement: &placement })
        .map_err(LaunchError::RankCommand)?;
    let flavour = match a.mpi {
        Some(f) => f,
        None => super::detect_flavour(&a.mpirun)?,
    };
    let rsh_args = rsh_args(&a, flavour)?;
    if let (Some(s), false) = (&src, a.no_resolve_check) {
        hosts_ready(&a, s, &placement, rsh_args.as_deref())?;
    }
    let plan = LaunchPlan {
        mpirun: a.mpirun.clone(),
        flavour,
        env: ranks_env(&a, placement.len())?,
        placement,
        as_root: nix::unistd::geteuid().is_root(),
        oversubscribe: a.oversubscribe || src.is_none(),
        rsh_agent: a.rsh_agent.clone(),
        rsh_args,
        extra_mpi_args: a.mpi_args.clone(),
        program: program(&a)?,
        program_args: a.command.clone(),
    };
    let argv = super::build_argv(&plan);
    if a.dry_run {
        println!(
            "{}",
            argv.iter()
                .map(|s| crate::shell::shell_quote(s))
                .collect::<Vec<_>>()
                .join(" ")
        );
        return Ok(0);
    }
    let np: u64 = plan.placement.iter().map(|(_, n)| n).sum();
    let me = nix::unistd::gethostname().map_or(String::new(), |h| h.to_string_lossy().into_owned());
    super::check_open_files(np, super::local_ranks(&plan.placement, &me))?;
    super::teardown::run(&argv, Duration::from_secs_f64(a.teardown_grace))
}

/// The ranks per host: from the host list, or all on this host without one.
fn place(a: &LaunchArgs, src: Option<&HostSource>) -> Result<RanksPerHost, LaunchError> {
    match src {
        Some(s) => super::place(s, a.np, a.ppn, a.oversubscribe),
        None => {
            let np = a.np.or(a.ppn.map(u64::from)).ok_or(LaunchError::NothingToRun)?;
            Ok(vec![("localhost".to_string(), np)])
        }
    }
}

/// `--ssh-port`: ssh's -p after what OMPI_MCA_plm_rsh_args holds (an MPIJob's operator sets it).
fn rsh_args(a: &LaunchArgs, flavour: MpiFlavour) -> Result<Option<String>, LaunchError> {
    match (a.ssh_port, flavour) {
        (None, _) => Ok(None),
        (Some(port), MpiFlavour::Openmpi) => {
            let given = env("OMPI_MCA_plm_rsh_args").unwrap_or_default();
            Ok(Some(format!("{given} -p {port}").trim_start().to_string()))
        }
        (Some(port), f) => Err(LaunchError::SshPortUnsupported {
            flavour: if f == MpiFlavour::Mpich { "MPICH" } else { "Intel MPI" },
            port,
        }),
    }
}

/// Every host of the placement resolves now, or (in an MPIJob, or with `--wait-hosts`) within
/// the wait, its sshd accepting too in an MPIJob.
fn hosts_ready(
    a: &LaunchArgs,
    s: &HostSource,
    placement: &RanksPerHost,
    rsh_args: Option<&str>,
) -> Result<(), LaunchError> {
    let mpijob = crate::workers::is_mpijob(&s.from, &env);
    let limit = a
        .wait_hosts
        .unwrap_or(if mpijob { crate::workers::MPIJOB_WAIT_S } else { 0.0 });
    if a.dry_run || limit == 0.0 {
        for (host, _) in placement {
            if let Err(e) = (host.as_str(), 0u16).to_socket_addrs() {
                let e = LaunchError::Unresolvable {
                    host: host.clone(),
                    from: s.from.clone(),
                    why: e.to_string(),
                };
                // A dry run may be made on a machine outside the cluster: say it, print the command.
                if !a.dry_run {
                    return Err(e);
                }
                ranks::eline!("meshrun launch: warning (--dry-run): {e}; the command may still work on the cluster");
            }
        }
        return Ok(());
    }
    let rsh_args = rsh_args.map(str::to_string).or_else(|| env("OMPI_MCA_plm_rsh_args"));
    let ssh_port = |h: &str| crate::workers::ssh_port_for(h, rsh_args.as_deref());
    let wait = crate::workers::Wait {
        hosts: placement.iter().map(|(h, _)| h.as_str()).collect(),
        from: &s.from,
        // In an MPIJob mpirun reaches the workers over ssh: their sshd must accept too.
        port: mpijob.then_some(&ssh_port as &dyn Fn(&str) -> u16),
        limit: Duration::from_secs_f64(limit),
    };
    crate::workers::wait(&wait, &mut |l| ranks::eline!("meshrun launch: {l}")).map_err(LaunchError::HostsNotReady)
}

/// The variables the ranks get: the job's node count, every `-x`, and `MESHRUN_<FLAG>` and
/// NCCL's NIC variables set here (they reach the ranks on every host).
fn ranks_env(a: &LaunchArgs, nodes: usize) -> Result<Vec<(String, Option<String>)>, LaunchError> {
    let mut env_pass = vec![(ranks::world::EXPECT_NODES_ENV.to_string(), Some(nodes.to_string()))];
    for spec in &a.env {
        env_pass.push(super::parse_env(spec)?);
    }
    let set_here = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
    for k in crate::settings::source::forwarded(set_here) {
        if k != ranks::world::EXPECT_NODES_ENV && !env_pass.iter().any(|(n, _)| *n == k) {
            env_pass.push((k, None));
        }
    }
    Ok(env_pass)
}

/// The meshrun binary the hosts run: `--meshrun`, or this one's path.
fn program(a: &LaunchArgs) -> Result<String, LaunchError> {
    Ok(match &a.meshrun {
        Some(p) => p.display().to_string(),
        None => std::env::current_exe()
            .map_err(LaunchError::SelfPath)?
            .display()
            .to_string(),
    })
}
