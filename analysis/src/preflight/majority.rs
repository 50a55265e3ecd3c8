//! Each node against the job's others: for every fact, the value most of them have is taken as
//! intended and the nodes with another one are named with both values
//! (`mr-h3: mlx5_0: fw_ver 28.39.1002, 3 others 28.41.1000`). A part some nodes lack
//! (a device, a GPU) is named once, not through each of its facts. Where no value has a strict
//! majority, every group is named with its value, since which one is wrong cannot be told.

use std::collections::BTreeMap;

use super::{Fact, Finding, Severity};

/// The findings of one kind of subject (nodes, or ranks) against each other.
pub fn odd_ones(subjects: &[(String, &[Fact])]) -> Vec<Finding> {
    let mut out = Vec::new();
    if subjects.len() < 2 {
        return out;
    }
    // Which scopes each subject has, in the order first seen.
    let mut scopes: Vec<&str> = Vec::new();
    for (_, facts) in subjects {
        for f in facts.iter() {
            if !scopes.contains(&f.scope.as_str()) {
                scopes.push(&f.scope);
            }
        }
    }
    // Scopes found absent somewhere, with who lacks them: a port of a missing device is not
    // named again.
    let mut absent: Vec<(&str, Vec<&str>)> = Vec::new();
    for scope in scopes {
        let has = |facts: &[Fact]| facts.iter().any(|f| f.scope == scope);
        let lacking: Vec<&str> = subjects
            .iter()
            .filter(|(_, f)| !has(f))
            .map(|(s, _)| s.as_str())
            .collect();
        // Variables: one not set on a rank is `unset` there, compared as a value.
        if !lacking.is_empty() && scope != "env" {
            let inside = |outer: &str| scope.strip_prefix(outer).is_some_and(|rest| rest.starts_with(' '));
            if absent.iter().any(|(outer, who)| inside(outer) && *who == lacking) {
                continue;
            }
            absent.push((scope, lacking));
            // Some subjects lack the part: name the minority side (those without it, or those
            // with it when most lack it).
            let values: Vec<(String, String)> = subjects
                .iter()
                .map(|(s, f)| (s.clone(), if has(f) { "present" } else { "absent" }.to_string()))
                .collect();
            // A part that only some nodes have breaks runs that expect it everywhere.
            out.extend(differences(scope, "", &values, Severity::Error, "part"));
            continue;
        }
        // Compare each fact of the scope.
        let mut names: Vec<(&str, Severity)> = Vec::new();
        for (_, facts) in subjects {
            for f in facts.iter().filter(|f| f.scope == scope) {
                if !names.iter().any(|(n, _)| *n == f.name) {
                    names.push((&f.name, f.severity));
                }
            }
        }
        for (name, severity) in names {
            let values: Vec<(String, String)> = subjects
                .iter()
                .map(|(s, facts)| {
                    let v = facts.iter().find(|f| f.scope == scope && f.name == name).map_or_else(
                        || if scope == "env" { "unset" } else { "unknown" }.to_string(),
                        |f| f.value.clone(),
                    );
                    (s.clone(), v)
                })
                .collect();
            out.extend(differences(scope, name, &values, severity, name));
        }
    }
    out
}

/// `scope: name value` as a line says it (`mlx5_0 port 1: rate 200 Gb/sec`, `env: NCCL_IB_HCA
/// mlx5_0`, `gpu 0000:18:00.0: present`).
fn what(scope: &str, name: &str, value: &str) -> String {
    match (scope.is_empty(), name.is_empty()) {
        (true, _) => format!("{name} {value}"),
        (false, true) => format!("{scope}: {value}"),
        (false, false) => format!("{scope}: {name} {value}"),
    }
}

/// The subjects whose value is not the majority's, grouped by value; nothing when all agree.
fn differences(scope: &str, name: &str, values: &[(String, String)], severity: Severity, about: &str) -> Vec<Finding> {
    let mut groups: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (s, v) in values {
        groups.entry(v.as_str()).or_default().push(s.clone());
    }
    if groups.len() < 2 {
        return Vec::new();
    }
    let n = values.len();
    let top = groups.iter().max_by_key(|(v, s)| (s.len(), std::cmp::Reverse(*v)));
    match top {
        Some((majority, holders)) if holders.len() * 2 > n => {
            let others = holders.len();
            let noun = if others == 1 { "other" } else { "others" };
            groups
                .iter()
                .filter(|(v, _)| *v != majority)
                .map(|(v, subjects)| Finding {
                    severity,
                    subjects: subjects.clone(),
                    text: format!("{}, {others} {noun} {majority}", what(scope, name, v)),
                    about: about.to_string(),
                })
                .collect()
        }
        _ => {
            // No strict majority: every side named, in one finding.
            let sides: Vec<String> = groups
                .iter()
                .map(|(v, s)| format!("{} on {}", v, s.join(", ")))
                .collect();
            let subjects = values.iter().map(|(s, _)| s.clone()).collect();
            let label = if name.is_empty() {
                scope.to_string()
            } else {
                what(scope, name, "").trim_end().to_string()
            };
            vec![Finding {
                severity,
                subjects,
                text: format!("{label} differs with no majority: {}", sides.join("; ")),
                about: about.to_string(),
            }]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(fw: &str, rate: &str) -> Vec<Fact> {
        vec![
            Fact::new("mlx5_0", "fw_ver", fw, Severity::Warning),
            Fact::new("mlx5_0 port 1", "state", "4: ACTIVE", Severity::Error),
            Fact::new("mlx5_0 port 1", "rate", rate, Severity::Warning),
        ]
    }

    fn run(nodes: &[Vec<Fact>]) -> Vec<String> {
        let subjects: Vec<(String, &[Fact])> = nodes
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("h{i}"), f.as_slice()))
            .collect();
        odd_ones(&subjects)
            .iter()
            .map(|f| format!("{} {}: {}", f.severity.as_str(), f.subjects.join(", "), f.text))
            .collect()
    }

    #[test]
    fn agreeing_nodes_have_no_finding() {
        let n = node("28.41.1000", "400 Gb/sec (4X NDR)");
        assert!(run(&[n.clone(), n.clone(), n.clone(), n]).is_empty());
        assert!(run(&[node("1", "2")]).is_empty(), "one node has nobody to differ from");
    }

    #[test]
    fn the_odd_node_is_named_with_both_values() {
        let good = node("28.41.1000", "400 Gb/sec (4X NDR)");
        let mut nodes = vec![good.clone(), good.clone(), good.clone(), good];
        nodes[3] = node("28.39.1002", "400 Gb/sec (4X NDR)");
        nodes[1] = node("28.41.1000", "200 Gb/sec (4X HDR)");
        assert_eq!(
            run(&nodes),
            vec![
                "warning h3: mlx5_0: fw_ver 28.39.1002, 3 others 28.41.1000",
                "warning h1: mlx5_0 port 1: rate 200 Gb/sec (4X HDR), 3 others 400 Gb/sec (4X NDR)",
            ]
        );
    }

    #[test]
    fn a_missing_part_is_named_once_and_a_tie_names_both_sides() {
        let good = node("1", "r");
        let nodes = vec![good.clone(), good.clone(), vec![], good.clone()];
        assert_eq!(run(&nodes), vec!["error h2: mlx5_0: absent, 3 others present"]);
        assert_eq!(
            run(&[node("1", "r"), node("2", "r")]),
            vec!["warning h0, h1: mlx5_0: fw_ver differs with no majority: 1 on h0; 2 on h1"]
        );
    }
}
