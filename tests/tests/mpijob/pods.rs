//! The pods of one MPIJob, as the operator would make them, without Kubernetes: podman
//! containers of the image in the namespace hosts, the operator's Secret and hostfile, the
//! workers' sshd, and the launcher's command run with the operator's environment.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::{built_image, run_bounded, NetnsCluster, Run};

use super::manifest::{fqdn, pod_name, unwrapped, Manifest, PodSecurity};

/// How long the launcher pod's command may run.
const LIMIT: Duration = Duration::from_secs(240);

/// The pods of one job: containers in the namespace hosts, the operator's Secret and hostfile.
pub struct Pods {
    cluster: NetnsCluster,
    /// The image every pod runs.
    image: String,
    /// Containers started (removed on drop).
    containers: std::sync::Mutex<Vec<String>>,
    dir: PathBuf,
    hostfile: PathBuf,
    secret: PathBuf,
    /// The directory that stands in for the workers' claim (results variant).
    pub results: PathBuf,
}

impl Drop for Pods {
    fn drop(&mut self) {
        let containers = self.containers.get_mut().map(std::mem::take).unwrap_or_default();
        if !containers.is_empty() {
            let mut rm = Command::new("podman");
            rm.args(["--runtime", "runc", "rm", "-f", "-t", "2"]).args(&containers);
            let _ = run_bounded(&mut rm, Duration::from_secs(60));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `ssh-keygen ARGS`, which must succeed.
fn ssh_keygen(args: &[&str]) {
    let r = run_bounded(Command::new("ssh-keygen").args(args), Duration::from_secs(30));
    assert_eq!(r.code, Some(0), "ssh-keygen {args:?}: {}", r.all());
}

/// The start of `podman run` for pod `hostname` (container `name`) in namespace host `ns`, with
/// the job's /etc/hosts, the operator's Secret at the manifest's `sshAuthMountPath`, its
/// `runAsUser` and what `sec` (the pod spec's) asks of the runtime; the caller adds its own
/// options, `pods.image` and the command.
fn pod(m: &Manifest, pods: &Pods, sec: &PodSecurity, ns: &str, hostname: &str, name: &str) -> Command {
    let mut k = Command::new("podman");
    k.args(["--runtime", "runc", "run", "--rm", "--name", name])
        .args(["--network", &format!("ns:/run/netns/{ns}"), "--hostname", hostname])
        .args([
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=32768:32768",
            "--shm-size",
            "1g",
        ])
        .args([
            "-v",
            &format!("{}:/etc/hosts", pods.cluster.dir.join("hosts").display()),
        ])
        .args(["-v", &format!("{}:{}:ro", pods.secret.display(), m.ssh_path)]);
    if let Some(uid) = m.run_as {
        // A UID the image's /etc/passwd lacks runs with group 0, and CRI-O adds an entry for it as
        // its GeneratePasswd writes one (cri-o utils/utils.go: the UID as name, HOME or / as
        // home, /sbin/nologin as shell); podman adds this entry only where the UID has none.
        k.args(["--user", &uid.to_string()])
            .arg(format!("--passwd-entry={uid}:x:{uid}:0:{uid} user:/:/sbin/nologin"));
    }
    if sec.read_only_root {
        // readOnlyRootFilesystem, and nothing writable but what the pod spec mounts (podman's
        // own tmpfs on /run, /tmp and /var/tmp would be more than a pod gets).
        k.args(["--read-only", "--read-only-tmpfs=false"]);
    }
    for dir in &sec.empty_dirs {
        k.args(["--tmpfs", dir]);
    }
    for c in &sec.cap_drop {
        k.args(["--cap-drop", c]);
    }
    for c in &sec.cap_add {
        k.args(["--cap-add", c]);
    }
    if sec.no_new_privileges {
        k.args(["--security-opt", "no-new-privileges"]);
    }
    k
}

/// Start the workers as the operator would: pods with the job's names running the manifest's
/// worker command (sshd) with the operator's Secret.
pub fn start_pods(m: &Manifest) -> Pods {
    let pods = prepare_pods(m, built_image());
    publish_names(m, &pods, 0..m.workers);
    for i in 0..m.workers {
        start_worker(m, &pods, i);
    }
    wait_for_sshd(m, &pods);
    pods
}

/// The pods' network and the operator's Secret and hostfile, before any worker is up: no worker
/// name resolves yet and no sshd runs.
pub fn prepare_pods(m: &Manifest, image: &str) -> Pods {
    let cluster = NetnsCluster::up(m.workers + 1);
    let dir = std::env::temp_dir().join(format!("meshrun-mpijob-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The operator's Secret as its volume shows it: id_rsa (an ECDSA P-521 key, PEM), id_rsa.pub,
    // and the public key again as authorized_keys; mode 0600 when mounted at /root/.ssh, else
    // the volume's default 0644 (setupSSHOnPod), owned by root.
    let secret = dir.join("ssh-auth");
    std::fs::create_dir_all(&secret).expect("dir");
    let key = secret.join("id_rsa");
    ssh_keygen(&[
        "-q",
        "-m",
        "PEM",
        "-t",
        "ecdsa",
        "-b",
        "521",
        "-N",
        "",
        "-f",
        key.to_str().expect("utf-8"),
    ]);
    std::fs::copy(secret.join("id_rsa.pub"), secret.join("authorized_keys")).expect("authorized_keys");
    for f in ["id_rsa", "id_rsa.pub", "authorized_keys"] {
        use std::os::unix::fs::PermissionsExt;
        let mode = if m.ssh_path == "/root/.ssh" { 0o600 } else { 0o644 };
        std::fs::set_permissions(secret.join(f), std::fs::Permissions::from_mode(mode)).expect("mode");
    }
    // The volume a claim would give the workers (results variant): one directory they share.
    let results = dir.join("results");
    std::fs::create_dir_all(&results).expect("results dir");
    // Pod DNS: the launcher's name now; the workers' when their pods are up (publish_names).
    let mut hosts = std::fs::read_to_string(cluster.dir.join("hosts")).expect("hosts");
    hosts.push_str(&format!("10.77.0.10 {}-launcher\n", m.job));
    std::fs::write(cluster.dir.join("hosts"), hosts).expect("hosts");
    // The hostfile as the operator writes it.
    let hostfile = dir.join("hostfile");
    let lines: String = (0..m.workers)
        .map(|i| format!("{} slots={}\n", fqdn(m, i), m.slots))
        .collect();
    std::fs::write(&hostfile, lines).expect("hostfile");
    assert_eq!(
        unwrapped(&m.worker_command)[..2],
        ["/usr/sbin/sshd", "-De"],
        "the workers' command"
    );
    // From here on, dropping `pods` (also on a failed assertion) removes every container started.
    Pods {
        cluster,
        image: image.to_string(),
        containers: std::sync::Mutex::new(Vec::new()),
        dir,
        hostfile,
        secret,
        results,
    }
}

/// Workers `which` get their DNS names (the headless service's FQDN and the pod name), as when
/// their pods start. The pods see the same hosts file (bound on /etc/hosts): it is rewritten in
/// place.
pub fn publish_names(m: &Manifest, pods: &Pods, which: std::ops::Range<usize>) {
    let path = pods.cluster.dir.join("hosts");
    let mut hosts = std::fs::read_to_string(&path).expect("hosts");
    for i in which {
        hosts.push_str(&format!("10.77.0.{} {} {}\n", 11 + i, fqdn(m, i), pod_name(m, i)));
    }
    std::fs::write(&path, hosts).expect("hosts");
}

/// Worker `i`'s pod: the manifest's worker command in the image, detached; its name is kept in
/// `pods.containers` so dropping `pods` removes it.
pub fn start_worker(m: &Manifest, pods: &Pods, i: usize) {
    let name = format!("meshrun-mpijob-{}-w{i}", std::process::id());
    pods.containers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(name.clone());
    // A hostNetwork pod has its node's host name.
    let node = format!("mr-h{}", i + 1);
    let hostname = if m.host_network { node.clone() } else { pod_name(m, i) };
    let mut k = pod(m, pods, &m.worker_pod, &node, &hostname, &name);
    if let Some((_, path)) = &m.worker_volume {
        k.args(["-v", &format!("{}:{path}", pods.results.display())]);
    }
    k.args(["-d", "-e", "K_MPI_JOB_ROLE=worker", &pods.image])
        .args(&m.worker_command);
    let r = run_bounded(&mut k, Duration::from_secs(120));
    assert_eq!(r.code, Some(0), "worker {i}'s pod:\n{}", r.all());
}

/// Until every worker's sshd answers on its port.
pub fn wait_for_sshd(m: &Manifest, pods: &Pods) {
    let until = Instant::now() + Duration::from_secs(30);
    for i in 0..m.workers {
        loop {
            let probe = run_bounded(
                Command::new("ip")
                    .args(["netns", "exec", "mr-h0", "bash", "-c"])
                    .arg(format!("exec 3<>/dev/tcp/10.77.0.{}/{}", 11 + i, m.ssh_port)),
                Duration::from_secs(5),
            );
            if probe.code == Some(0) {
                break;
            }
            if Instant::now() >= until {
                let names = pods.containers.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let logs = names
                    .iter()
                    .map(|c| run_bounded(Command::new("podman").args(["logs", c]), Duration::from_secs(20)).all())
                    .collect::<Vec<_>>()
                    .join("\n");
                panic!("sshd of worker {i} does not answer; the workers' logs:\n{logs}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The manifest's launcher command in the launcher pod, with the operator's hostfile and
/// environment (and the manifest's).
pub fn run_launcher(m: &Manifest, pods: &Pods, command: &[String]) -> Run {
    run_launcher_with(m, pods, command, &[])
}

/// [`run_launcher`] with `env` added.
pub fn run_launcher_with(m: &Manifest, pods: &Pods, command: &[String], env: &[(&str, &str)]) -> Run {
    assert_eq!(unwrapped(command).first().map(String::as_str), Some("meshrun"));
    let name = format!("meshrun-mpijob-{}-launcher", std::process::id());
    let hostname = if m.host_network {
        "mr-h0".to_string()
    } else {
        format!("{}-launcher", m.job)
    };
    let mut k = pod(m, pods, &m.launcher_pod, "mr-h0", &hostname, &name);
    k.args(["-v", &format!("{}:/etc/mpi/hostfile:ro", pods.hostfile.display())]);
    let slots = m.slots.to_string();
    let operator = [
        ("K_MPI_JOB_ROLE", "launcher"),
        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
        ("OMPI_MCA_orte_set_default_slots", slots.as_str()),
        ("NVIDIA_VISIBLE_DEVICES", ""),
        ("NVIDIA_DRIVER_CAPABILITIES", ""),
        // CI's own: 4 ranks on this machine's 2 cores, so Open MPI is told so, as its docs say.
        ("OMPI_MCA_rmaps_base_oversubscribe", "1"),
        ("OMPI_MCA_mpi_yield_when_idle", "1"),
    ];
    let manifest_env = m.launcher_env.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    for (k2, v) in operator.into_iter().chain(manifest_env).chain(env.iter().copied()) {
        k.args(["-e", &format!("{k2}={v}")]);
    }
    k.arg(&pods.image).args(command);
    let r = run_bounded(&mut k, LIMIT);
    let mut rm = Command::new("podman");
    rm.args(["--runtime", "runc", "rm", "-f", "-t", "2", &name]);
    let _ = run_bounded(&mut rm, Duration::from_secs(60));
    r
}
