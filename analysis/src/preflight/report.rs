//! What preflight prints, each report an [`Exporter`] of a [`PreflightRun`]: one line per finding,
//! errors first, and a closing line ([`PreflightText`]); `--show`, every fact of the first rank
//! ([`PreflightFacts`]); `--json`, every fact of every node and rank (the fleet's inventory) with
//! the findings ([`PreflightJson`]).

use serde_json::json;

use super::{Finding, Inventory, Severity};
use crate::export::{ExportError, Exporter};

/// What the run covered, for the header.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub hosts: usize,
    pub ranks: usize,
    /// The expectation file's path and its `[type] name`.
    pub expect: Option<(&'a str, Option<&'a str>)>,
    /// One node checked alone (`--local`): nothing to compare with.
    pub local: bool,
}

/// A judged preflight, as its reports render it.
#[derive(Debug, Clone, Copy)]
pub struct PreflightRun<'a> {
    pub scope: Scope<'a>,
    /// Every rank's facts, in rank order.
    pub inventory: &'a [Inventory],
    pub findings: &'a [Finding],
}

impl PreflightRun<'_> {
    /// No error among the findings (warnings pass).
    pub fn pass(&self) -> bool {
        errors(self.findings) == 0
    }
}

/// The text report ([`text`]).
pub struct PreflightText;

impl Exporter<PreflightRun<'_>> for PreflightText {
    fn render(&self, run: &PreflightRun<'_>) -> Result<Vec<u8>, ExportError> {
        Ok(text(run).into_bytes())
    }
}

/// `--show` ([`facts`]).
pub struct PreflightFacts;

impl Exporter<PreflightRun<'_>> for PreflightFacts {
    fn render(&self, run: &PreflightRun<'_>) -> Result<Vec<u8>, ExportError> {
        Ok(facts(run).into_bytes())
    }
}

/// `--json` ([`json()`]).
pub struct PreflightJson;

impl Exporter<PreflightRun<'_>> for PreflightJson {
    fn render(&self, run: &PreflightRun<'_>) -> Result<Vec<u8>, ExportError> {
        Ok(serde_json::to_vec_pretty(&json(run)).unwrap_or_default())
    }
}

/// How many findings are errors.
fn errors(findings: &[Finding]) -> usize {
    findings.iter().filter(|f| f.severity == Severity::Error).count()
}

/// `mr-h1, mr-h2` or `mr-h1 rank 2`: the subjects of one finding.
fn subjects(f: &Finding) -> String {
    f.subjects.join(", ")
}

/// The report's text: what was compared, each finding, and PASS or FAIL.
pub fn text(run: &PreflightRun<'_>) -> String {
    let (scope, findings) = (&run.scope, run.findings);
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
    let errors = errors(findings);
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
    out
}

/// Every fact of every rank and the findings, as `--json` writes them.
pub fn json(run: &PreflightRun<'_>) -> serde_json::Value {
    let scope = &run.scope;
    json!({
        "tool": "meshrun",
        "test": "preflight",
        "schema_version": 1,
        "hosts": scope.hosts,
        "ranks": scope.ranks,
        "local": scope.local,
        "expect": scope.expect.map(|(p, n)| json!({"file": p, "name": n})),
        "pass": run.pass(),
        "findings": run.findings,
        "inventory": run.inventory,
    })
}

/// `--show`: every fact of the first rank's node and of that rank under a `# Facts of HOST:`
/// line, one per line as the expectation file names them (`mlx5_0 port 1: rate 400 Gb/sec (4X
/// NDR)`); nothing without a rank.
pub fn facts(run: &PreflightRun<'_>) -> String {
    let Some(inv) = run.inventory.first() else {
        return String::new();
    };
    let mut s = format!("# Facts of {}:\n", inv.host);
    for f in inv.node.iter().chain(&inv.process) {
        s.push_str(&format!("{}: {} {}\n", f.scope, f.name, f.value));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text report of `findings` (no inventory), and whether it passed.
    fn text_of(scope: &Scope, findings: &[Finding]) -> (String, bool) {
        let run = PreflightRun {
            scope: *scope,
            inventory: &[],
            findings,
        };
        (text(&run), run.pass())
    }

    #[test]
    fn pass_warn_and_fail_lines() {
        let s = Scope {
            hosts: 4,
            ranks: 8,
            expect: None,
            local: false,
        };
        let (t, ok) = text_of(&s, &[]);
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
        let (t, ok) = text_of(&s, &[e, w]);
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
        assert!(text_of(&local, &[])
            .0
            .starts_with("# Preflight: this node against DGX H100 (dgx.toml)\n"));
    }
}
