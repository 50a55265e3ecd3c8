//! A pod spec checked against an OpenShift SecurityContextConstraints object, by the rules
//! OpenShift's documentation gives and nothing more. The sources, named on each rule:
//! - [about]: "About security context constraints" (OpenShift Container Platform 4,
//!   "Managing security context constraints"; openshift/openshift-docs
//!   `modules/security-context-constraints-about.adoc`): what an SCC controls, the defaults of
//!   boolean fields, the strategies, volume types, and admission ("Generate field values for
//!   security context settings that were not specified on the request. Validate the final
//!   settings against the available constraints").
//! - [creating]: "Creating security context constraints" (`...-creating.adoc`): required drop
//!   capabilities are dropped from the container, `ALL` drops every one.
//! - [api]: the SecurityContextConstraints API reference (security.openshift.io/v1):
//!   `allowPrivilegeEscalation` "If unspecified, defaults to true"; `readOnlyRootFilesystem`
//!   "when set to true will force containers to run with a read only root file system";
//!   `seccompProfiles` values (`runtime/default`, `unconfined`, `localhost/<name>`, `*`).
//!
//! The project's pre-allocated values stand in as [`Project`]: its UID range and group range
//! (`openshift.io/sa.scc.uid-range`, `openshift.io/sa.scc.supplemental-groups`).

use serde_json::Value;

/// A project's pre-allocated ranges, inclusive.
pub struct Project {
    pub uids: (i64, i64),
    pub groups: (i64, i64),
}

/// An OpenShift project as `oc new-project` makes one: 10000 UIDs and groups from 1000680000.
pub const PROJECT: Project = Project {
    uids: (1_000_680_000, 1_000_689_999),
    groups: (1_000_680_000, 1_000_689_999),
};

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

/// An SCC boolean: [about] "Fields of this type default to the most restrictive value";
/// `allowPrivilegeEscalation` defaults to true [api].
fn allows(scc: &Value, field: &str) -> bool {
    scc[field].as_bool().unwrap_or(field == "allowPrivilegeEscalation")
}

/// Why pod spec `pod` is refused by `scc` in `project`: one line a problem, empty if admitted.
pub fn problems(scc: &Value, pod: &Value, project: &Project) -> Vec<String> {
    let mut out = Vec::new();
    let name = scc["metadata"]["name"].as_str().unwrap_or("?");
    let mut refuse = |what: String| out.push(format!("{name}: {what}"));
    // [about] "The use of host namespaces and networking."
    for (field, allowed) in [
        ("hostNetwork", "allowHostNetwork"),
        ("hostPID", "allowHostPID"),
        ("hostIPC", "allowHostIPC"),
    ] {
        if pod[field].as_bool() == Some(true) && !allows(scc, allowed) {
            refuse(format!("{field} without {allowed}"));
        }
    }
    // [about] "Controlling volumes": each volume's type must be in `volumes` (`*`: all), and
    // `allowHostDirVolumePlugin` overrides a `hostPath` there.
    let types = strings(&scc["volumes"]);
    for v in pod["volumes"].as_array().into_iter().flatten() {
        let kind = v
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "name"))
            .map_or("?", String::as_str);
        let listed = types.contains(&"*") || types.contains(&kind);
        if !listed || (kind == "hostPath" && !allows(scc, "allowHostDirVolumePlugin")) {
            refuse(format!("volume {} of type {kind}", v["name"]));
        }
    }
    let psc = &pod["securityContext"];
    // [about] FSGroup and SupplementalGroups strategies: MustRunAs validates against the ranges
    // (pre-allocated: the project's); RunAsAny allows any; a value not given is generated.
    for (field, strategy) in [("fsGroup", "fsGroup"), ("supplementalGroups", "supplementalGroups")] {
        let given: Vec<i64> = match &psc[field] {
            Value::Array(a) => a.iter().filter_map(Value::as_i64).collect(),
            v => v.as_i64().into_iter().collect(),
        };
        if scc[strategy]["type"] == "MustRunAs" {
            for g in given
                .into_iter()
                .filter(|g| !(project.groups.0..=project.groups.1).contains(g))
            {
                refuse(format!("{field} {g} outside the project's range"));
            }
        }
    }
    for c in pod["containers"].as_array().into_iter().flatten() {
        let cname = c["name"].as_str().unwrap_or("?");
        let sc = &c["securityContext"];
        // A container's own setting wins over the pod's (the Kubernetes pod API).
        let setting = |f: &str| if sc[f].is_null() { psc[f].clone() } else { sc[f].clone() };
        // [about] host networking: a container port bound on the node (`allowHostPorts`).
        let host_port = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["hostPort"].as_i64().is_some());
        if host_port && !allows(scc, "allowHostPorts") {
            refuse(format!("{cname}: hostPort without allowHostPorts"));
        }
        // [about] "Whether a pod can run privileged containers" (`allowPrivilegedContainer`).
        if sc["privileged"].as_bool() == Some(true) && !allows(scc, "allowPrivilegedContainer") {
            refuse(format!("{cname}: privileged"));
        }
        // [about] "Use the allowedCapabilities, defaultAddCapabilities, and
        // requiredDropCapabilities parameters to control ... which capabilities can be
        // requested, which ones must be added to each container, and which ones must be
        // forbidden"; [creating] required drops are dropped by admission, ALL drops every one.
        let allowed = strings(&scc["allowedCapabilities"]);
        let default_add = strings(&scc["defaultAddCapabilities"]);
        let forbidden = strings(&scc["requiredDropCapabilities"]);
        for cap in strings(&sc["capabilities"]["add"]) {
            let requestable = allowed.contains(&"*") || allowed.contains(&cap) || default_add.contains(&cap);
            if !requestable || forbidden.contains(&cap) {
                refuse(format!("{cname}: capability {cap} may not be added"));
            }
        }
        // [about] MustRunAs: the configured UID; MustRunAsRange: the range (pre-allocated: the
        // project's; its minimum is generated where none is given); MustRunAsNonRoot: a non-zero
        // runAsUser or an image USER (this image has none: root); RunAsAny: any.
        let uid = setting("runAsUser").as_i64();
        let rule = &scc["runAsUser"];
        let fits = match rule["type"].as_str() {
            Some("MustRunAs") => uid.is_none() || uid == rule["uid"].as_i64(),
            Some("MustRunAsRange") => {
                let (lo, hi) = match (rule["uidRangeMin"].as_i64(), rule["uidRangeMax"].as_i64()) {
                    (Some(lo), Some(hi)) => (lo, hi),
                    _ => project.uids,
                };
                uid.is_none_or(|u| (lo..=hi).contains(&u))
            }
            Some("MustRunAsNonRoot") => uid.is_some_and(|u| u != 0),
            _ => true,
        };
        if !fits {
            refuse(format!("{cname}: runAsUser {uid:?} under {}", rule["type"]));
        }
        // [about] "Whether a container requires the use of a read only root file system"; [api]
        // forced where the SCC sets it (a value not given is generated: true).
        if allows(scc, "readOnlyRootFilesystem") && sc["readOnlyRootFilesystem"].as_bool() == Some(false) {
            refuse(format!("{cname}: a writable root filesystem"));
        }
        // [api] allowPrivilegeEscalation: false refuses a container that asks for it.
        if !allows(scc, "allowPrivilegeEscalation") && sc["allowPrivilegeEscalation"].as_bool() == Some(true) {
            refuse(format!("{cname}: privilege escalation"));
        }
        // [about] "The configuration of allowable seccomp profiles"; [api] the profile names.
        let profiles = strings(&scc["seccompProfiles"]);
        let seccomp = setting("seccompProfile");
        if let (false, Some(kind)) = (profiles.is_empty() || profiles.contains(&"*"), seccomp["type"].as_str()) {
            let wanted = match kind {
                "RuntimeDefault" => "runtime/default".to_string(),
                "Localhost" => format!("localhost/{}", seccomp["localhostProfile"].as_str().unwrap_or("")),
                _ => "unconfined".to_string(),
            };
            if !profiles.contains(&wanted.as_str()) {
                refuse(format!("{cname}: seccomp profile {wanted}"));
            }
        }
    }
    out
}
