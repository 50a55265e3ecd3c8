//! Every MPIJob manifest under `deploy/` validated against the schema the MPI Operator v0.8.2
//! installs for `kubeflow.org/v2beta1` (its CRD's openAPIV3Schema, core pod fields included:
//! `tests/fixtures/mpijob-crd-v0.8.2.json`), as the Kubernetes API server would on `kubectl
//! apply`: a field the schema does not know (a typo, a field in the wrong place) or a value of
//! the wrong type fails here, not on the cluster. The OpenShift manifests' pods are also checked
//! against the SCCs they are granted (`scc.rs`: the rules of OpenShift's documentation).

#[path = "manifests/scc.rs"]
mod scc;

use e2e::root;
use serde_json::Value;

/// The structural-schema rules the API server applies to a custom resource: types (with
/// `x-kubernetes-int-or-string`), known fields (`properties`, or `additionalProperties`, unless
/// `x-kubernetes-preserve-unknown-fields`), `required`, `enum`, `items`. Problems as
/// `path: what`.
fn validate(schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    if schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
        if !(v.is_i64() || v.is_u64() || v.is_string()) {
            out.push(format!("{path}: {v} is neither an integer nor a string"));
        }
        return;
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        let fits = any.iter().any(|s| {
            let mut e = Vec::new();
            validate(s, v, path, &mut e);
            e.is_empty()
        });
        if !fits {
            out.push(format!("{path}: {v} matches none of anyOf"));
        }
    }
    let ty = schema.get("type").and_then(Value::as_str);
    let ok = match ty {
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        _ => true,
    };
    if !ok {
        out.push(format!("{path}: {v} is not of type {}", ty.unwrap_or("?")));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            out.push(format!("{path}: {v} is not one of {allowed:?}"));
        }
    }
    if let Some(items) = schema.get("items") {
        for (i, e) in v.as_array().into_iter().flatten().enumerate() {
            validate(items, e, &format!("{path}[{i}]"), out);
        }
    }
    let Some(obj) = v.as_object() else { return };
    for r in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
        if let Some(k) = r.as_str() {
            if !obj.contains_key(k) {
                out.push(format!("{path}: required field `{k}` is missing"));
            }
        }
    }
    let preserve = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    for (k, val) in obj {
        let p = format!("{path}.{k}");
        match (props.and_then(|m| m.get(k)), additional) {
            (Some(s), _) => validate(s, val, &p, out),
            (None, Some(s)) if s.is_object() => validate(s, val, &p, out),
            (None, _) if preserve || (props.is_none() && additional.is_none()) => {}
            (None, _) => out.push(format!("{p}: unknown field")),
        }
    }
}

fn schema() -> Value {
    let text = std::fs::read_to_string(root().join("tests/fixtures/mpijob-crd-v0.8.2.json")).expect("fixture");
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    doc["openAPIV3Schema"].clone()
}

fn manifest(file: &str) -> Value {
    let text = std::fs::read_to_string(root().join("deploy").join(file)).expect("manifest");
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn problems(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    validate(&schema(), doc, "", &mut out);
    out
}

/// The MPIJob manifests in `deploy/DIR` (`""`: deploy/ itself), as paths under deploy/.
fn mpijobs(dir: &str) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(root().join("deploy").join(dir))
        .expect("deploy/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("mpijob") && n.ends_with(".yaml"))
        .map(|n| if dir.is_empty() { n } else { format!("{dir}/{n}") })
        .collect();
    files.sort();
    files
}

#[test]
fn every_mpijob_manifest_fits_the_operators_schema() {
    let files: Vec<String> = [mpijobs(""), mpijobs("openshift")].concat();
    assert!(
        files.len() >= 4 && files.iter().any(|f| f.starts_with("openshift/")),
        "{files:?}"
    );
    for f in &files {
        let doc = manifest(f);
        assert_eq!(doc["apiVersion"], "kubeflow.org/v2beta1", "{f}");
        assert_eq!(doc["kind"], "MPIJob", "{f}");
        let p = problems(&doc);
        assert!(
            p.is_empty(),
            "{f} does not fit the MPIJob schema of mpi-operator v0.8.2:\n{}",
            p.join("\n")
        );
    }
}

/// The check has teeth: a typo, a field in the wrong place, a wrong type and a value outside
/// an enum are each refused, naming where.
#[test]
fn a_typo_a_misplaced_field_and_a_wrong_type_are_refused() {
    let good = manifest("mpijob.yaml");
    let mut typo = good.clone();
    let spec = typo["spec"].as_object_mut().expect("spec");
    let slots = spec.remove("slotsPerWorker").expect("slotsPerWorker");
    spec.insert("slotPerWorker".into(), slots);
    assert_eq!(problems(&typo), [".spec.slotPerWorker: unknown field"]);

    let mut misplaced = good.clone();
    misplaced["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["imagePullPolicy"] = "IfNotPresent".into();
    assert_eq!(
        problems(&misplaced),
        [".spec.mpiReplicaSpecs.Worker.template.spec.imagePullPolicy: unknown field"]
    );

    let mut wrong_type = good.clone();
    wrong_type["spec"]["slotsPerWorker"] = "two".into();
    assert_eq!(
        problems(&wrong_type),
        [".spec.slotsPerWorker: \"two\" is not of type integer"]
    );

    let mut not_in_enum = good;
    not_in_enum["spec"]["mpiImplementation"] = "OpenMPI5".into();
    let p = problems(&not_in_enum);
    assert!(
        p.len() == 1 && p[0].starts_with(".spec.mpiImplementation: \"OpenMPI5\" is not one of"),
        "{p:?}"
    );
}

/// Every document of the YAML file `deploy/FILE`.
fn documents(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("deploy").join(file)).expect("manifest");
    text.split("\n---\n")
        .map(|d| serde_yaml::from_str(d).unwrap_or_else(|e| panic!("{file}: {e}")))
        .collect()
}

/// The document of `kind` in `deploy/FILE`.
fn document(file: &str, kind: &str) -> Value {
    documents(file)
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {file}"))
}

/// The pods of MPIJob `doc` as the MPI Operator v0.8.2 makes them (pkg/controller/
/// mpi_job_controller.go): each role's template with the operator's volumes added, the Secret
/// (`ssh-auth`) on both and the hostfile's ConfigMap on the launcher.
fn pods(doc: &Value) -> Vec<(&'static str, Value)> {
    ["Launcher", "Worker"]
        .into_iter()
        .map(|role| {
            let mut spec = doc["spec"]["mpiReplicaSpecs"][role]["template"]["spec"].clone();
            let mut volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
            volumes.push(serde_json::json!({"name": "ssh-auth", "secret": {"secretName": "job-ssh"}}));
            if role == "Launcher" {
                volumes.push(serde_json::json!({"name": "mpi-job-config", "configMap": {"name": "job-config"}}));
            }
            spec["volumes"] = Value::Array(volumes);
            (role, spec)
        })
        .collect()
}

/// The built-in `privileged` SCC as [about] lists what it allows: privileged pods, host
/// directories, any user, any MCS label, host IPC and PID, any FSGroup and supplemental group,
/// any seccomp profile, any capability.
fn privileged_scc() -> Value {
    serde_json::json!({
        "metadata": {"name": "privileged"},
        "allowPrivilegedContainer": true, "allowHostDirVolumePlugin": true, "allowHostIPC": true,
        "allowHostPID": true, "allowHostNetwork": true, "allowHostPorts": true,
        "allowPrivilegeEscalation": true, "allowedCapabilities": ["*"], "volumes": ["*"],
        "runAsUser": {"type": "RunAsAny"}, "seLinuxContext": {"type": "RunAsAny"},
        "fsGroup": {"type": "RunAsAny"}, "supplementalGroups": {"type": "RunAsAny"},
        "seccompProfiles": ["*"],
    })
}

/// restricted-v2, the SCC every authenticated user may use (OpenShift 4.11 and later), as the
/// cluster-kube-apiserver-operator installs it (`bindata/bootkube/scc-manifests/
/// 0000_20_kube-apiserver-operator_00_scc-restricted-v2.yaml`).
fn restricted_v2() -> Value {
    serde_json::json!({
        "metadata": {"name": "restricted-v2"},
        "allowHostDirVolumePlugin": false, "allowHostIPC": false, "allowHostNetwork": false,
        "allowHostPID": false, "allowHostPorts": false, "allowPrivilegeEscalation": false,
        "allowPrivilegedContainer": false, "allowedCapabilities": ["NET_BIND_SERVICE"],
        "defaultAddCapabilities": null, "fsGroup": {"type": "MustRunAs"},
        "readOnlyRootFilesystem": false, "requiredDropCapabilities": ["ALL"],
        "runAsUser": {"type": "MustRunAsRange"}, "seLinuxContext": {"type": "MustRunAs"},
        "seccompProfiles": ["runtime/default"], "supplementalGroups": {"type": "RunAsAny"},
        "volumes": ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
                    "persistentVolumeClaim", "projected", "secret"],
    })
}

/// Each OpenShift MPIJob's pods are admitted by the SCC its files grant the ServiceAccount they
/// name: the Role's `use` of that SCC, bound to the ServiceAccount serviceaccount.yaml makes.
#[test]
fn the_openshift_manifests_pods_are_admitted_by_the_scc_they_are_granted() {
    let sa = document("openshift/serviceaccount.yaml", "ServiceAccount");
    let sa_name = sa["metadata"]["name"].as_str().expect("name");
    for (job, grant, scc) in [
        (
            "openshift/mpijob.yaml",
            "openshift/scc-ipc-lock.yaml",
            document("openshift/scc-ipc-lock.yaml", "SecurityContextConstraints"),
        ),
        (
            "openshift/mpijob-privileged.yaml",
            "openshift/rbac-privileged.yaml",
            privileged_scc(),
        ),
    ] {
        let role = document(grant, "Role");
        let rule = &role["rules"][0];
        assert_eq!(
            (
                &rule["apiGroups"][0],
                &rule["resources"][0],
                &rule["verbs"][0],
                &rule["resourceNames"][0]
            ),
            (
                &"security.openshift.io".into(),
                &"securitycontextconstraints".into(),
                &"use".into(),
                &scc["metadata"]["name"]
            ),
            "{grant}: the Role uses the SCC"
        );
        let binding = document(grant, "RoleBinding");
        assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"], "{grant}");
        assert_eq!(
            (
                binding["subjects"][0]["kind"].as_str(),
                binding["subjects"][0]["name"].as_str()
            ),
            (Some("ServiceAccount"), Some(sa_name)),
            "{grant}"
        );
        for (role, spec) in pods(&manifest(job)) {
            assert_eq!(spec["serviceAccountName"].as_str(), Some(sa_name), "{job} {role}");
            let p = scc::problems(&scc, &spec, &scc::PROJECT);
            assert!(p.is_empty(), "{job} {role} is refused:\n{}", p.join("\n"));
        }
    }
    // Which SCC each pod gets: every authenticated user may use restricted-v2, and [about]
    // "SCC prioritization" tries the most restrictive first (no priorities here), so a pod it
    // admits runs under it. The IPC_LOCK job's launcher does (as a project UID all the same),
    // its workers need IPC_LOCK; every pod of the privileged job must run as root, so
    // restricted-v2 must refuse it.
    let v2 = restricted_v2();
    let admitted = |job: &str| -> Vec<bool> {
        pods(&manifest(job))
            .iter()
            .map(|(_, spec)| scc::problems(&v2, spec, &scc::PROJECT).is_empty())
            .collect()
    };
    assert_eq!(admitted("openshift/mpijob.yaml"), [true, false]);
    assert_eq!(admitted("openshift/mpijob-privileged.yaml"), [false, false]);
    let worker = pods(&manifest("openshift/mpijob.yaml")).remove(1).1;
    assert_eq!(
        scc::problems(&v2, &worker, &scc::PROJECT),
        ["restricted-v2: worker: capability IPC_LOCK may not be added"]
    );
    let ipc_lock = document("openshift/scc-ipc-lock.yaml", "SecurityContextConstraints");
    let worker = pods(&manifest("openshift/mpijob-privileged.yaml")).remove(1).1;
    let p = scc::problems(&ipc_lock, &worker, &scc::PROJECT);
    assert!(p.iter().any(|l| l.ends_with("worker: privileged")), "{p:?}");
}

/// A change made to a pod spec.
type Change = dyn Fn(&mut Value);

/// The SCC check has teeth: each thing the IPC_LOCK SCC forbids, asked by the workers, is
/// refused, naming it.
#[test]
fn the_scc_check_refuses_what_the_scc_forbids() {
    let scc = document("openshift/scc-ipc-lock.yaml", "SecurityContextConstraints");
    let good = pods(&manifest("openshift/mpijob.yaml")).remove(1).1;
    let refused = |change: &Change| {
        let mut pod = good.clone();
        change(&mut pod);
        scc::problems(&scc, &pod, &scc::PROJECT)
    };
    let c = "/containers/0/securityContext";
    let cases: [(&Change, &str); 7] = [
        (
            &|p| p.pointer_mut(c).expect("sc")["privileged"] = true.into(),
            "worker: privileged",
        ),
        (
            &|p| p.pointer_mut(c).expect("sc")["capabilities"]["add"] = serde_json::json!(["IPC_LOCK", "SYS_ADMIN"]),
            "worker: capability SYS_ADMIN may not be added",
        ),
        (
            &|p| p.pointer_mut(c).expect("sc")["runAsUser"] = 0.into(),
            "worker: runAsUser Some(0) under \"MustRunAsRange\"",
        ),
        (
            &|p| p.pointer_mut(c).expect("sc")["readOnlyRootFilesystem"] = false.into(),
            "worker: a writable root filesystem",
        ),
        (
            &|p| p.pointer_mut(c).expect("sc")["allowPrivilegeEscalation"] = true.into(),
            "worker: privilege escalation",
        ),
        (
            &|p| p["hostNetwork"] = true.into(),
            "hostNetwork without allowHostNetwork",
        ),
        (
            &|p| {
                p["volumes"]
                    .as_array_mut()
                    .expect("volumes")
                    .push(serde_json::json!({"name": "sys", "hostPath": {"path": "/sys"}}))
            },
            "volume \"sys\" of type hostPath",
        ),
    ];
    assert!(scc::problems(&scc, &good, &scc::PROJECT).is_empty());
    for (change, why) in cases {
        assert_eq!(refused(change), [format!("meshrun-ipc-lock: {why}")]);
    }
}
