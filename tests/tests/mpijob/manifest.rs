//! What an MPIJob manifest of `deploy/` says, read with a YAML parser, and the DNS names the
//! operator gives its pods.

use e2e::root;

/// The namespace the jobs run in (the workers' DNS names carry it).
const NAMESPACE: &str = "default";

/// What a manifest says, read with a YAML parser.
pub struct Manifest {
    pub job: String,
    pub slots: usize,
    pub workers: usize,
    pub launcher_image: String,
    pub launcher_command: Vec<String>,
    pub launcher_env: Vec<(String, String)>,
    pub worker_image: String,
    pub worker_command: Vec<String>,
    /// Where the operator mounts its Secret (`sshAuthMountPath`).
    pub ssh_path: String,
    /// The pods' `securityContext.runAsUser`, where set.
    pub run_as: Option<u64>,
    /// The workers' sshd port (their readinessProbe's, else 22).
    pub ssh_port: u16,
    /// The pods run on their node's network (`hostNetwork`).
    pub host_network: bool,
    /// A volume the workers mount from a claim (name, mount path): the results volume.
    pub worker_volume: Option<(String, String)>,
    /// What the launcher's pod spec asks of its container's runtime.
    pub launcher_pod: PodSecurity,
    /// What the workers' pod spec asks of their container's runtime.
    pub worker_pod: PodSecurity,
}

/// What a pod spec asks of the container runtime beyond its user: the first container's
/// `securityContext` and the emptyDir volumes it mounts.
#[derive(Default)]
pub struct PodSecurity {
    /// `readOnlyRootFilesystem: true`.
    pub read_only_root: bool,
    /// `allowPrivilegeEscalation: false` (the runtime sets no_new_privs).
    pub no_new_privileges: bool,
    /// `capabilities.drop` and `capabilities.add`.
    pub cap_drop: Vec<String>,
    pub cap_add: Vec<String>,
    /// Where disk-backed emptyDir volumes are mounted (a memory-backed one at /dev/shm is the
    /// pods' `--shm-size`).
    pub empty_dirs: Vec<String>,
}

/// [`PodSecurity`] of pod spec `spec` (its first container).
fn pod_security(spec: &serde_yaml::Value) -> PodSecurity {
    let c = &spec["containers"][0];
    let sc = &c["securityContext"];
    let empty: Vec<&str> = spec["volumes"]
        .as_sequence()
        .map(|v| {
            v.iter()
                .filter(|vol| vol["emptyDir"].is_mapping())
                .filter_map(|vol| vol["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let empty_dirs = c["volumeMounts"]
        .as_sequence()
        .map(|ms| {
            ms.iter()
                .filter(|mnt| mnt["name"].as_str().is_some_and(|n| empty.contains(&n)))
                .filter_map(|mnt| mnt["mountPath"].as_str())
                .filter(|p| *p != "/dev/shm")
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    PodSecurity {
        read_only_root: sc["readOnlyRootFilesystem"].as_bool() == Some(true),
        no_new_privileges: sc["allowPrivilegeEscalation"].as_bool() == Some(false),
        cap_drop: strings(&sc["capabilities"]["drop"]),
        cap_add: strings(&sc["capabilities"]["add"]),
        empty_dirs,
    }
}

/// A YAML list of strings (numbers taken as their text).
fn strings(v: &serde_yaml::Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| {
            s.iter()
                .map(|x| match x {
                    serde_yaml::Value::String(s) => s.clone(),
                    serde_yaml::Value::Number(n) => n.to_string(),
                    other => panic!("not a string: {other:?}"),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The manifest `deploy/FILE`, checked to be an MPIJob the operator runs as the tests expect.
pub fn manifest(file: &str) -> Manifest {
    let text = std::fs::read_to_string(root().join("deploy").join(file)).expect("manifest");
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert_eq!(doc["apiVersion"].as_str(), Some("kubeflow.org/v2beta1"), "{file}");
    assert_eq!(doc["kind"].as_str(), Some("MPIJob"), "{file}");
    let spec = &doc["spec"];
    assert_eq!(spec["mpiImplementation"].as_str(), Some("OpenMPI"), "{file}");
    let ssh_path = spec["sshAuthMountPath"].as_str().expect("sshAuthMountPath").to_string();
    let pod_spec = |role: &str| spec["mpiReplicaSpecs"][role]["template"]["spec"].clone();
    let container = |role: &str| pod_spec(role)["containers"][0].clone();
    let l = container("Launcher");
    let w = container("Worker");
    let run_as = pod_spec("Worker")["securityContext"]["runAsUser"].as_u64();
    assert_eq!(
        pod_spec("Launcher")["securityContext"]["runAsUser"].as_u64(),
        run_as,
        "{file}: launcher and workers run as one user"
    );
    let host_network = pod_spec("Worker")["hostNetwork"].as_bool().unwrap_or(false);
    assert_eq!(
        pod_spec("Launcher")["hostNetwork"].as_bool().unwrap_or(false),
        host_network,
        "{file}"
    );
    if run_as.is_none() {
        assert_eq!(
            w["securityContext"]["capabilities"]["add"][0].as_str(),
            Some("IPC_LOCK"),
            "{file}: workers pin memory for the NIC"
        );
    }
    assert!(
        w["resources"]["limits"]["nvidia.com/gpu"].as_u64().is_some(),
        "{file}: GPU resource"
    );
    assert!(
        w["resources"]["limits"].as_mapping().is_some_and(|l| l
            .iter()
            .any(|(k, v)| k.as_str().is_some_and(|k| k.starts_with("rdma/")) && v.as_u64().is_some())),
        "{file}: RDMA resource"
    );
    let env = l["env"]
        .as_sequence()
        .map(|s| {
            s.iter()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap_or_default().to_string(),
                        e["value"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Manifest {
        job: doc["metadata"]["name"].as_str().expect("name").to_string(),
        slots: spec["slotsPerWorker"].as_u64().expect("slotsPerWorker") as usize,
        workers: spec["mpiReplicaSpecs"]["Worker"]["replicas"]
            .as_u64()
            .expect("replicas") as usize,
        launcher_image: l["image"].as_str().expect("image").to_string(),
        launcher_command: strings(&l["command"]),
        launcher_env: env,
        worker_image: w["image"].as_str().expect("image").to_string(),
        worker_command: strings(&w["command"]),
        ssh_path,
        run_as,
        ssh_port: w["readinessProbe"]["tcpSocket"]["port"]
            .as_u64()
            .map_or(22, |p| p as u16),
        host_network,
        worker_volume: {
            let claims: Vec<String> = pod_spec("Worker")["volumes"]
                .as_sequence()
                .map(|v| {
                    v.iter()
                        .filter(|vol| vol["persistentVolumeClaim"].is_mapping())
                        .filter_map(|vol| vol["name"].as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            w["volumeMounts"].as_sequence().and_then(|ms| {
                ms.iter().find_map(|mnt| {
                    let name = mnt["name"].as_str()?;
                    claims.iter().any(|c| c == name).then(|| {
                        (
                            name.to_string(),
                            mnt["mountPath"].as_str().unwrap_or_default().to_string(),
                        )
                    })
                })
            })
        },
        launcher_pod: pod_security(&pod_spec("Launcher")),
        worker_pod: pod_security(&pod_spec("Worker")),
    }
}

/// `command` without the image's `as-mpiuser` in front, where it has it: what it runs.
pub fn unwrapped(command: &[String]) -> &[String] {
    match command.first() {
        Some(c) if c == "as-mpiuser" => &command[1..],
        _ => command,
    }
}

/// Worker `i`'s pod name.
pub fn pod_name(m: &Manifest, i: usize) -> String {
    format!("{}-worker-{i}", m.job)
}

/// Worker `i`'s DNS name under the job's headless service, as the operator's hostfile has it.
pub fn fqdn(m: &Manifest, i: usize) -> String {
    format!("{}.{}.{NAMESPACE}.svc", pod_name(m, i), m.job)
}
