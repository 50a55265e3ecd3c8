//! What preflight prints: one line per finding, errors first, and a closing line; `--json`,
//! every fact of every node and rank (the fleet's inventory) with the findings.

use serde_json::json;

use super::{Finding, Inventory, Severity};

/// What the run covered, for the header.
pub struct Scope<'a> {
    pub hosts: usize,
    pub ranks: usize,
    /// The expectation file's path and its `[type] name`.
    pub expect: Option<(&'a str, Option<&'a str>)>,
    /// One node checked alone (`--local`): nothing to compare with.
    pub local: bool,
}

/// `mr-h1, mr-h2` or `mr-h1 rank 2`: the subjects of one finding.
fn subjects(f: &Finding) -> String {
    f.subjects.join(", ")
}

/// The report's text and whether it passed (no error).
pub fn text(scope: &Scope, findings: &[Finding]) -> (String, bool) {
    let mut out = String::new();
    let against = match (scope.local, scope.expect) {
        (true, Some((path, name))) => format!(
            "this node against {}",
            name.map_or(path.to_string(), |n| format!("{n} ({path})"))
        ),
        (true, None) => "this node on its own (no --expect file)".to_string(),
        (false, e) => {
            let mut s = format!(
                "{} {}, {} {}: each against the others",
                scope.hosts,
                if scope.hosts == 1 { "node" } else { "nodes" },
                scope.ranks,
                if scope.ranks == 1 { "rank" } else { "ranks" }
            );
            if let Some((path, name)) = e {
                s.push_str(&format!(
                    " and {}",
                    name.map_or(path.to_string(), |n| format!("{n} ({path})"))
                ));
            }
            s
        }
    };
    out.push_str(&format!("# Preflight: {against}\n"));
    for f in findings {
        let tag = match f.severity {
            Severity::Error => "ERROR  ",
            Severity::Warning => "WARNING",
        };
        out.push_str(&format!("{tag} {}: {}\n", subjects(f), f.text));
    }
    let errors = findings.iter().filter(|f| f.severity == Severity::Error).count();
    let warnings = findings.len() - errors;
    let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
    if errors > 0 {
        out.push_str(&format!(
            "# FAIL: {}, {} (an error breaks or misleads a run: fix it before testing the fabric)\n",
            plural(errors, "error"),
            plural(warnings, "warning")
        ));
    } else if warnings > 0 {
        out.push_str(&format!("# PASS with {}\n", plural(warnings, "warning")));
    } else {
        out.push_str("# PASS: no finding\n");
    }
    (out, errors == 0)
}

/// Every fact of every rank and the findings, as `--json` writes them.
pub fn json(scope: &Scope, all: &[Inventory], findings: &[Finding]) -> serde_json::Value {
    let errors = findings.iter().filter(|f| f.severity == Severity::Error).count();
    json!({
        "tool": "meshrun",
        "test": "preflight",
        "schema_version": 1,
        "hosts": scope.hosts,
        "ranks": scope.ranks,
        "local": scope.local,
        "expect": scope.expect.map(|(p, n)| json!({"file": p, "name": n})),
        "pass": errors == 0,
        "findings": findings,
        "inventory": all,
    })
}

/// Every fact of one node and one of its ranks, one per line as the expectation file names them
/// (`--show`): `mlx5_0 port 1: rate 400 Gb/sec (4X NDR)`.
pub fn facts(inv: &Inventory) -> String {
    inv.node
        .iter()
        .chain(&inv.process)
        .map(|f| format!("{}: {} {}\n", f.scope, f.name, f.value))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_warn_and_fail_lines() {
        let s = Scope {
            hosts: 4,
            ranks: 8,
            expect: None,
            local: false,
        };
        let (t, ok) = text(&s, &[]);
        assert!(ok);
        assert_eq!(
            t,
            "# Preflight: 4 nodes, 8 ranks: each against the others\n# PASS: no finding\n"
        );
        let w = Finding {
            severity: Severity::Warning,
            subjects: vec!["h3".into()],
            text: "mlx5_0: fw_ver 1, 3 others 2".into(),
            about: "fw_ver".into(),
        };
        let e = Finding {
            severity: Severity::Error,
            subjects: vec!["h1 rank 2".into(), "h1 rank 3".into()],
            text: "process: memlock_kib 64, below the 131072 KiB this run registers".into(),
            about: "memlock".into(),
        };
        let (t, ok) = text(&s, &[e, w]);
        assert!(!ok);
        assert_eq!(
            t,
            "# Preflight: 4 nodes, 8 ranks: each against the others\n\
             ERROR   h1 rank 2, h1 rank 3: process: memlock_kib 64, below the 131072 KiB this run registers\n\
             WARNING h3: mlx5_0: fw_ver 1, 3 others 2\n\
             # FAIL: 1 error, 1 warning (an error breaks or misleads a run: fix it before testing the fabric)\n"
        );
        let local = Scope {
            hosts: 1,
            ranks: 1,
            expect: Some(("dgx.toml", Some("DGX H100"))),
            local: true,
        };
        assert!(text(&local, &[])
            .0
            .starts_with("# Preflight: this node against DGX H100 (dgx.toml)\n"));
    }
}
