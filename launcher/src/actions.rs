//! `--on-fail drain|label|taint`: what to do to the nodes a pairwise verdict blamed, as the
//! scheduler's own commands. A dry run by default: the commands are printed, one `# On fail:`
//! line each; `--apply` runs them (each bounded) and says how each ended.
//!
//! Which nodes: a slow node and a slow NIC's node; both ends of a slow host link (a cable or a
//! port at either end; the reason says which link). An uplink is a switch's and a rank pair is
//! no node's: named, never drained.

use std::time::Duration;

use analysis::pairwise::verdict::Part;
use analysis::pairwise::PairwiseOutcome;

use crate::cli::OnFail;

/// One node to act on and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blamed {
    pub host: String,
    pub reason: String,
}

/// The nodes `o`'s verdict blamed, each once, with the first reason found for it.
pub fn blamed_nodes(o: &PairwiseOutcome) -> (Vec<Blamed>, Vec<String>) {
    let mut nodes: Vec<Blamed> = Vec::new();
    let mut not_nodes = Vec::new();
    let parts = o
        .verdict
        .blamed
        .iter()
        .chain(o.rails.iter().flat_map(|r| &r.verdict.blamed));
    for p in parts {
        let (hosts, reason): (Vec<&str>, String) = match p {
            Part::Node { host, .. } => (vec![host], format!("meshrun: slow node {host}")),
            Part::Nic { host, rank, .. } => (vec![host], format!("meshrun: slow NIC of rank {rank} on {host}")),
            Part::RailNic { host, rail, nic, .. } => (
                vec![host],
                format!(
                    "meshrun: slow NIC on rail {rail}{} on {host}",
                    nic.as_ref().map_or(String::new(), |n| format!(" ({n})"))
                ),
            ),
            Part::HostLink { host_a, host_b, .. } => (
                vec![host_a, host_b],
                format!("meshrun: slow link {host_a} <-> {host_b}"),
            ),
            Part::Uplink { .. } | Part::RankPair { .. } => {
                not_nodes.push(format!("{} {} (not a node: left to the operator)", p.level(), p.name()));
                continue;
            }
        };
        for h in hosts {
            if !nodes.iter().any(|n| n.host == h) {
                nodes.push(Blamed {
                    host: h.to_string(),
                    reason: reason.clone(),
                });
            }
        }
    }
    (nodes, not_nodes)
}

/// The short host name a scheduler knows a node by (`n01.cluster.local` -> `n01`).
fn short(host: &str) -> &str {
    host.split('.').next().unwrap_or(host)
}

/// The commands for one node: argv lists run in order (for Kubernetes, a pod's host name is
/// first resolved to its node by the caller, see [`run`]).
pub fn commands(action: OnFail, node: &str, reason: &str) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let annotate = s(&[
        "kubectl",
        "annotate",
        "node",
        node,
        "--overwrite",
        &format!("meshrun.io/fabric-reason={reason}"),
    ]);
    match action {
        OnFail::Drain => vec![s(&[
            "scontrol",
            "update",
            &format!("NodeName={}", short(node)),
            "State=DRAIN",
            &format!("Reason={reason}"),
        ])],
        OnFail::Label => vec![
            s(&[
                "kubectl",
                "label",
                "node",
                node,
                "--overwrite",
                "meshrun.io/fabric=slow",
            ]),
            annotate,
        ],
        OnFail::Taint => vec![
            s(&[
                "kubectl",
                "taint",
                "node",
                node,
                "--overwrite",
                "meshrun.io/fabric=slow:NoSchedule",
            ]),
            annotate,
        ],
    }
}

/// A command line as a shell would take it (for the dry run's lines).
fn shown(argv: &[String]) -> String {
    argv.iter()
        .map(|a| crate::shell::shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Run `argv` with a bound; Ok(stdout) or Err(why).
fn run_one(argv: &[String], limit: Duration) -> Result<String, String> {
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    let out = crate::bounded::output(&mut cmd, limit)?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().replace('\n', "; ");
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(format!("{} ({})", text(&out.stderr), out.status))
    }
}

/// Print (and with `apply`, run) the action on every node `o` blamed; false when a command
/// that was run failed.
pub fn run(o: &PairwiseOutcome, action: OnFail, apply: bool) -> bool {
    const LIMIT: Duration = Duration::from_secs(30);
    let (nodes, not_nodes) = blamed_nodes(o);
    for n in &not_nodes {
        println!("# On fail: {n}");
    }
    if nodes.is_empty() {
        if !o.pass() {
            println!("# On fail: no node to act on");
        }
        return true;
    }
    let mut ok = true;
    for b in &nodes {
        let mut node = b.host.clone();
        if action != OnFail::Drain {
            // In an MPIJob the ranks' host names are pods' names: act on the pod's node. A
            // hostNetwork pod's host name is its node's, which kubectl does not know as a pod.
            let ask = ["kubectl", "get", "pod", &b.host, "-o", "jsonpath={.spec.nodeName}"].map(String::from);
            if apply {
                if let Ok(n) = run_one(&ask, LIMIT).map(|n| n.trim().to_string()) {
                    if !n.is_empty() {
                        node = n;
                    }
                }
            } else {
                println!(
                    "# On fail (dry run): the node of {}: {} (else {} itself)",
                    b.host,
                    shown(&ask),
                    b.host
                );
            }
        }
        for argv in commands(action, &node, &b.reason) {
            if !apply {
                println!("# On fail (dry run, --apply runs it): {}", shown(&argv));
                continue;
            }
            match run_one(&argv, LIMIT) {
                Ok(_) => println!("# On fail: ran {}", shown(&argv)),
                Err(e) => {
                    println!("# On fail: FAILED {}: {e}", shown(&argv));
                    ok = false;
                }
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kubernetes' rules for what these commands set, as the API server applies them
    /// (k8s.io/apimachinery/pkg/util/validation: IsQualifiedName, IsValidLabelValue,
    /// IsDNS1123Subdomain; a taint's effect is NoSchedule, PreferNoSchedule or NoExecute).
    mod k8s {
        /// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters.
        fn name_part(s: &str) -> bool {
            let b = s.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
        }
        /// Lower-case DNS-1123 labels joined by dots, at most 253 characters.
        pub fn dns_subdomain(s: &str) -> bool {
            s.len() <= 253
                && s.split('.').all(|l| {
                    let b = l.as_bytes();
                    !b.is_empty()
                        && b.len() <= 63
                        && b[0].is_ascii_alphanumeric()
                        && b[b.len() - 1].is_ascii_alphanumeric()
                        && b.iter()
                            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase() || *c == b'-')
                })
        }
        /// `prefix/name` or `name`.
        pub fn qualified_name(s: &str) -> bool {
            match s.split_once('/') {
                Some((prefix, name)) => dns_subdomain(prefix) && name_part(name),
                None => name_part(s),
            }
        }
        pub fn label_value(s: &str) -> bool {
            s.is_empty() || name_part(s)
        }
        pub fn taint_effect(s: &str) -> bool {
            ["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&s)
        }
    }

    /// The label, taint and annotation each command sets would pass the API server's validation,
    /// for node names as Kubernetes gives them and a reason with every kind of character.
    #[test]
    fn label_taint_and_annotation_are_valid_kubernetes_objects() {
        let reason = "meshrun: slow link gpu-3.rack1 <-> gpu-4.rack1 (61.2 Gb/sec; 'quoted' \"and\" $x)";
        for node in ["gpu-3", "ip-10-0-3-17.ec2.internal", "n07"] {
            assert!(k8s::dns_subdomain(node), "{node}");
            for action in [OnFail::Label, OnFail::Taint] {
                let cmds = commands(action, node, reason);
                for c in &cmds {
                    assert_eq!(&c[..4], ["kubectl", c[1].as_str(), "node", node]);
                    let (key, rest) = c[5].split_once('=').expect("key=value");
                    assert!(k8s::qualified_name(key), "{key}");
                    match c[1].as_str() {
                        "label" => assert!(k8s::label_value(rest), "{rest}"),
                        "taint" => {
                            let (value, effect) = rest.split_once(':').expect("value:effect");
                            assert!(k8s::label_value(value) && k8s::taint_effect(effect), "{rest}");
                        }
                        // An annotation's value is any string (the whole object's annotations
                        // under 256 KiB): the reason as it is.
                        "annotate" => assert_eq!(rest, reason),
                        other => panic!("unexpected kubectl {other}"),
                    }
                }
            }
        }
        assert!(!k8s::qualified_name("meshrun.io/-bad") && !k8s::label_value("slow link"));
    }

    #[test]
    fn drain_is_scontrol_with_the_short_name_and_the_reason() {
        assert_eq!(
            commands(
                OnFail::Drain,
                "n07.cluster.local",
                "meshrun: slow node n07.cluster.local"
            ),
            [[
                "scontrol",
                "update",
                "NodeName=n07",
                "State=DRAIN",
                "Reason=meshrun: slow node n07.cluster.local"
            ]
            .map(String::from)
            .to_vec()]
        );
        let t = commands(OnFail::Taint, "gpu-3", "meshrun: slow link gpu-3 <-> gpu-4");
        assert_eq!(t[0][..4], ["kubectl", "taint", "node", "gpu-3"]);
        assert_eq!(t[0][5], "meshrun.io/fabric=slow:NoSchedule");
        assert_eq!(t[1][5], "meshrun.io/fabric-reason=meshrun: slow link gpu-3 <-> gpu-4");
        assert_eq!(
            shown(&t[1]),
            "kubectl annotate node gpu-3 --overwrite 'meshrun.io/fabric-reason=meshrun: slow link gpu-3 <-> gpu-4'"
        );
    }
}
