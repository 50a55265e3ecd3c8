//! Waiting for a job's hosts before mpirun starts. In a Kubeflow MPIJob the launcher pod may start
//! before the workers' DNS names resolve (the default `launcherCreationPolicy: AtStartup`) and
//! before their sshd accepts; mpirun would then fail at once and `backoffLimit: 0` ends the job.
//! `meshrun launch` waits, bounded by `--wait-hosts`, saying which hosts it still waits for.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long an MPIJob launcher waits for its workers by default, seconds.
pub const MPIJOB_WAIT_S: f64 = 300.0;
/// How often the launcher says what it still waits for.
const REPORT_EVERY: Duration = Duration::from_secs(10);
/// How long one connection attempt to a worker's sshd may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the hosts came from an MPIJob's hostfile (the operator's launcher environment).
pub fn is_mpijob(from: &str, env: &dyn Fn(&str) -> Option<String>) -> bool {
    env("K_MPI_JOB_ROLE").as_deref() == Some("launcher")
        || env("OMPI_MCA_orte_default_hostfile").is_some_and(|f| f == from)
}

/// The port mpirun's ssh reaches `host` on: what `ssh -G` says with Open MPI's `plm_rsh_args`
/// (so the image's ssh_config counts, as the MPI Operator's base image sets `Port 2222`), or,
/// where ssh cannot say, `-p N` / `-o Port=N` in those arguments, else 22.
pub fn ssh_port_for(host: &str, rsh_args: Option<&str>) -> u16 {
    ssh_says_port(host, rsh_args).unwrap_or_else(|| ssh_port(rsh_args))
}

/// `ssh -G [ARGS] HOST`'s `port` line (ssh prints its configuration and connects to nothing),
/// within two seconds.
fn ssh_says_port(host: &str, rsh_args: Option<&str>) -> Option<u16> {
    let mut ssh = std::process::Command::new("ssh");
    ssh.arg("-G")
        .args(rsh_args.unwrap_or_default().split_whitespace())
        .arg(host);
    let out = crate::bounded::output(&mut ssh, Duration::from_secs(2)).ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("port ")?.trim().parse().ok())
}

/// `-p N` or `-o Port=N` in Open MPI's `plm_rsh_args`, else 22.
pub fn ssh_port(rsh_args: Option<&str>) -> u16 {
    let words: Vec<&str> = rsh_args.unwrap_or_default().split_whitespace().collect();
    let mut port = 22;
    for (i, w) in words.iter().enumerate() {
        let value = match *w {
            "-p" => words.get(i + 1).copied(),
            "-o" => words.get(i + 1).and_then(|o| o.strip_prefix("Port=")),
            w if w.starts_with("-p") => Some(&w[2..]),
            w if w.starts_with("-oPort=") => Some(&w[7..]),
            _ => None,
        };
        if let Some(p) = value.and_then(|v| v.parse().ok()) {
            port = p;
        }
    }
    port
}

/// Why a host is not ready yet, or None when it is.
fn not_ready(host: &str, port: Option<u16>) -> Option<String> {
    let addrs: Vec<SocketAddr> = match (host, port.unwrap_or(0)).to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => return Some(format!("does not resolve ({e})")),
    };
    let port = port?;
    let mut why = String::from("resolves to no address");
    for a in &addrs {
        match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
            Ok(_) => return None,
            Err(e) => why = format!("{a} does not accept on port {port} ({e})"),
        }
    }
    Some(why)
}

/// Hosts to wait for, and how.
pub struct Wait<'a> {
    pub hosts: Vec<&'a str>,
    /// Where the host names came from, for messages.
    pub from: &'a str,
    /// Also wait until each host accepts on this port (its sshd): a host's own port. None:
    /// resolving is enough.
    pub port: Option<&'a dyn Fn(&str) -> u16>,
    /// How long to wait at most; zero: look once.
    pub limit: Duration,
}

/// Wait until every host resolves (and accepts on the port), saying every ten seconds which are
/// still missing; at the limit, the error names each with why.
pub fn wait(w: &Wait, say: &mut dyn FnMut(&str)) -> Result<(), String> {
    let start = Instant::now();
    let mut next_report = start + REPORT_EVERY;
    // Each host's port asked once (ssh -G is a process per host).
    let mut pending: Vec<(&str, Option<u16>, String)> = w
        .hosts
        .iter()
        .map(|h| (*h, w.port.map(|p| p(h)), String::new()))
        .collect();
    loop {
        pending = pending
            .into_iter()
            .filter_map(|(h, port, _)| not_ready(h, port).map(|why| (h, port, why)))
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        let list = || {
            pending
                .iter()
                .map(|(h, _, why)| format!("{h} {why}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let waited = start.elapsed();
        if waited >= w.limit {
            let n = pending.len();
            return Err(if w.limit.is_zero() {
                format!("{n} host(s) from {} not ready: {}", w.from, list())
            } else {
                format!(
                    "{n} of {} host(s) from {} not ready after {:.0} s (--wait-hosts): {}",
                    w.hosts.len(),
                    w.from,
                    waited.as_secs_f64(),
                    list()
                )
            });
        }
        if Instant::now() >= next_report {
            say(&format!(
                "waiting for {} of {} host(s) ({:.0} s of {:.0} s): {}",
                pending.len(),
                w.hosts.len(),
                waited.as_secs_f64(),
                w.limit.as_secs_f64(),
                list()
            ));
            next_report += REPORT_EVERY;
        }
        std::thread::sleep(Duration::from_millis(500).min(w.limit.saturating_sub(waited)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ssh_port_comes_from_the_rsh_arguments() {
        assert_eq!(ssh_port(None), 22);
        // The operator's own setting.
        assert_eq!(ssh_port(Some("-o ConnectionAttempts=10")), 22);
        assert_eq!(ssh_port(Some("-o ConnectionAttempts=10 -p 2222")), 2222);
        assert_eq!(ssh_port(Some("-p2222")), 2222);
        assert_eq!(ssh_port(Some("-o Port=2022 -o StrictHostKeyChecking=no")), 2022);
        assert_eq!(ssh_port(Some("-oPort=2023")), 2023);
        assert_eq!(ssh_port(Some("-p notaport")), 22);
        // ssh itself, where it is installed: its configuration's port, the arguments' first.
        if std::process::Command::new("ssh").arg("-V").output().is_ok() {
            assert_eq!(ssh_port_for("w-0", Some("-o ConnectionAttempts=10 -p 2200")), 2200);
            assert_eq!(ssh_port_for("w-0", Some("-o Port=2201")), 2201);
        } else {
            println!("skipped: ssh -G (no ssh client here)");
        }
    }

    #[test]
    fn mpijob_launchers_are_known_by_their_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert!(is_mpijob("/etc/mpi/hostfile", &env(&[("K_MPI_JOB_ROLE", "launcher")])));
        assert!(is_mpijob("/x/h", &env(&[("OMPI_MCA_orte_default_hostfile", "/x/h")])));
        assert!(!is_mpijob(
            "hosts.txt",
            &env(&[("OMPI_MCA_orte_default_hostfile", "/x/h")])
        ));
        assert!(!is_mpijob("SLURM_JOB_NODELIST", &env(&[])));
    }

    #[test]
    fn a_host_that_never_comes_is_named_with_why_at_the_limit() {
        let mut said = Vec::new();
        let w = Wait {
            hosts: vec!["localhost", "no-such-host.invalid"],
            from: "test.hosts",
            port: None,
            limit: Duration::from_millis(300),
        };
        let e = wait(&w, &mut |l| said.push(l.to_string())).unwrap_err();
        assert!(e.starts_with("1 of 2 host(s) from test.hosts not ready after "), "{e}");
        assert!(
            e.contains(" s (--wait-hosts): no-such-host.invalid does not resolve"),
            "{e}"
        );
        // A port nobody listens on: named with its address.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let free = listener.local_addr().unwrap().port();
        drop(listener);
        let closed = move |_: &str| free;
        let w = Wait {
            hosts: vec!["127.0.0.1"],
            from: "test.hosts",
            port: Some(&closed),
            limit: Duration::ZERO,
        };
        let e = wait(&w, &mut |_| {}).unwrap_err();
        assert!(
            e.contains(&format!("127.0.0.1:{free} does not accept on port {free}")),
            "{e}"
        );
        // One that accepts: ready at once.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open_port = listener.local_addr().unwrap().port();
        let open = move |_: &str| open_port;
        let w = Wait { port: Some(&open), ..w };
        assert_eq!(wait(&w, &mut |_| {}), Ok(()));
    }
}
