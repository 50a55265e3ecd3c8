//! `--expect FILE`: what a node of one type must have, in the words preflight prints its facts,
//! so an operator writes the file from one good node's output. Every difference is a finding.
//!
//! ```toml
//! [type]
//! name = "NVIDIA DGX H100"            # said in the report
//! source = "https://..."              # where the values come from
//!
//! [[part]]
//! scope = "mlx5_* port 1"             # which facts: their scope, `*` and `?` as in a shell
//! count = 8                           # optional: exactly this many scopes match
//! state = "4: ACTIVE"                 # a fact's value: a pattern with `*` and `?`
//! rate = "400 Gb/sec*"
//!
//! [[part]]
//! scope = "node"
//! gpus = 8                            # numbers are compared as text, or
//! memlock_kib = ">= 1048576"          # with >=, <=, >, < against the value's leading number
//! ```
//!
//! A part's findings are errors unless it says `severity = "warning"`; a fact the node was asked
//! and would not give (`unknown`: pause or PFC on a driver without them) is a warning.

use super::{Fact, Finding, Severity};

/// One `[[part]]`: a scope pattern and what every matching scope must have.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedPart {
    pub scope: String,
    pub count: Option<usize>,
    pub severity: Severity,
    /// (fact name, pattern) in file order.
    pub facts: Vec<(String, String)>,
}

/// A parsed expectation file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Expectations {
    /// `[type] name`, said in the report.
    pub name: Option<String>,
    pub source: Option<String>,
    pub parts: Vec<ExpectedPart>,
}

/// What was wrong with an expectation file, and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ExpectError(pub String);

/// A value as the file gives it: text, or a number or boolean written as text.
fn as_text(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A comparison (`>= 16`) split into its operator and number; None for a plain pattern.
fn comparison(p: &str) -> Option<Result<(&'static str, f64), String>> {
    let p = p.trim();
    let op = [">=", "<=", ">", "<"].into_iter().find(|op| p.starts_with(op))?;
    let n = p[op.len()..].trim();
    Some(
        n.parse::<f64>()
            .map(|x| (op, x))
            .map_err(|_| format!("`{p}` compares with `{n}`, which is not a number (write e.g. `>= 16`)")),
    )
}

impl Expectations {
    /// Parse the text of an expectation file; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Expectations, ExpectError> {
        let err = |m: String| ExpectError(format!("{origin}: {m}"));
        let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            err(format!("not valid TOML: {}", e.message().lines().next().unwrap_or("")))
        })?;
        let mut out = Expectations::default();
        for (key, value) in &doc {
            match (key.as_str(), value) {
                ("type", toml::Value::Table(t)) => {
                    for (k, v) in t {
                        let s = v.as_str().map(str::to_string);
                        match (k.as_str(), s) {
                            ("name", Some(s)) => out.name = Some(s),
                            ("source", Some(s)) => out.source = Some(s),
                            _ => return Err(err(format!("[type] takes `name` and `source` as text, not `{k}`"))),
                        }
                    }
                }
                ("part", toml::Value::Array(parts)) => {
                    for (i, p) in parts.iter().enumerate() {
                        let at = |m: String| err(format!("part {} ([[part]] number {}): {m}", i + 1, i + 1));
                        let Some(t) = p.as_table() else {
                            return Err(at("is not a table; write [[part]] and its keys".into()));
                        };
                        let scope = t.get("scope").and_then(|v| v.as_str()).ok_or_else(|| {
                            at("has no `scope` (the scope preflight prints, e.g. \"mlx5_* port 1\")".into())
                        })?;
                        let mut part = ExpectedPart {
                            scope: scope.to_string(),
                            count: None,
                            severity: Severity::Error,
                            facts: Vec::new(),
                        };
                        for (k, v) in t {
                            match k.as_str() {
                                "scope" => {}
                                "count" => {
                                    let n = v.as_integer().filter(|n| *n >= 0);
                                    part.count = Some(
                                        n.ok_or_else(|| at("`count` must be a whole number >= 0".into()))? as usize,
                                    );
                                }
                                "severity" => {
                                    part.severity = match v.as_str() {
                                        Some("error") => Severity::Error,
                                        Some("warning") => Severity::Warning,
                                        _ => return Err(at("`severity` is \"error\" or \"warning\"".into())),
                                    }
                                }
                                name => {
                                    let p =
                                        as_text(v).ok_or_else(|| at(format!("`{name}` must be text or a number")))?;
                                    if let Some(Err(m)) = comparison(&p) {
                                        return Err(at(format!("`{name}`: {m}")));
                                    }
                                    part.facts.push((name.to_string(), p));
                                }
                            }
                        }
                        out.parts.push(part);
                    }
                }
                _ => {
                    return Err(err(format!(
                        "unknown key `{key}`: the file has a [type] table and [[part]] tables"
                    )))
                }
            }
        }
        if out.parts.is_empty() {
            return Err(err("no [[part]]: nothing is expected".into()));
        }
        Ok(out)
    }

    /// Every difference between `facts` (of `subject`: a host's node facts, or `host rank N`'s
    /// process facts) and the parts of that kind (`process` and `env` parts are about a rank,
    /// the others about a node).
    pub fn check(&self, subject: &str, facts: &[Fact]) -> Vec<Finding> {
        let mut out = Vec::new();
        let kind_of = |scope: &str| {
            if scope == "process" || scope == "env" {
                "process"
            } else {
                "node"
            }
        };
        let facts_kind = facts.first().map_or("node", |f| kind_of(&f.scope));
        for part in &self.parts {
            if kind_of(&part.scope) != facts_kind {
                continue;
            }
            let mut scopes: Vec<&str> = Vec::new();
            for f in facts.iter().filter(|f| glob(&part.scope, &f.scope)) {
                if !scopes.contains(&f.scope.as_str()) {
                    scopes.push(&f.scope);
                }
            }
            let finding = |text: String, about: &str| Finding {
                severity: part.severity,
                subjects: vec![subject.to_string()],
                text,
                about: about.to_string(),
            };
            let label = self.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
            match part.count {
                Some(c) if c != scopes.len() => out.push(finding(
                    format!("{}: {} found, {c} expected{label}", part.scope, scopes.len()),
                    "count",
                )),
                None if scopes.is_empty() => {
                    out.push(finding(format!("{}: none found, expected{label}", part.scope), "count"))
                }
                _ => {}
            }
            for scope in &scopes {
                for (name, pattern) in &part.facts {
                    let value = facts
                        .iter()
                        .find(|f| f.scope == *scope && f.name == *name)
                        .map(|f| f.value.as_str());
                    match value {
                        Some(v) if matches(pattern, v) => {}
                        // Read and not answered (a driver without it): the check could not be made.
                        Some(UNKNOWN) => out.push(Finding {
                            severity: Severity::Warning,
                            ..finding(
                                format!("{scope}: {name} unknown (this node would not say), expected {pattern}{label}"),
                                name,
                            )
                        }),
                        Some(v) => out.push(finding(
                            format!("{scope}: {name} {v}, expected {pattern}{label}{}", hint(name)),
                            name,
                        )),
                        None => out.push(finding(
                            format!("{scope}: {name} not known, expected {pattern}{label}"),
                            name,
                        )),
                    }
                }
            }
        }
        out
    }
}

/// The value of a fact that was asked for and that the node would not give (`pause` and `pfc` on a
/// driver without them): never an error against an expectation.
pub const UNKNOWN: &str = "unknown";

/// How to reach the expected value, where one line can say it.
fn hint(name: &str) -> &'static str {
    match name {
        "active_mtu" => " (a RoCE port gets 4096 from an interface MTU of 4200 or more)",
        _ => "",
    }
}

/// Does `value` satisfy `pattern` (a comparison, or a glob)?
pub fn matches(pattern: &str, value: &str) -> bool {
    match comparison(pattern) {
        Some(Ok((op, bar))) => {
            let lead: String = value
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-')
                .collect();
            let Ok(x) = lead.parse::<f64>() else {
                // `unlimited` satisfies any lower bound on a limit.
                return value.trim() == "unlimited" && op.starts_with('>');
            };
            match op {
                ">=" => x >= bar,
                "<=" => x <= bar,
                ">" => x > bar,
                _ => x < bar,
            }
        }
        Some(Err(_)) => false,
        None => glob(pattern, value),
    }
}

/// Shell-style match: `*` any run of characters, `?` one character.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Iterative matching with one backtrack point for the last `*`.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    while i < p.len() && p[i] == '*' {
        i += 1;
    }
    i == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[type]
name = "test node"
source = "made here"

[[part]]
scope = "mlx5_* port 1"
count = 2
state = "4: ACTIVE"
rate = "400 Gb/sec*"

[[part]]
scope = "node"
gpus = 8

[[part]]
scope = "process"
memlock_kib = ">= 1048576"
severity = "warning"
"#;

    fn node(rate1: &str, ports: usize, gpus: &str) -> Vec<Fact> {
        let mut v = vec![Fact::new("node", "gpus", gpus, Severity::Warning)];
        for d in 0..ports {
            v.push(Fact::new(
                &format!("mlx5_{d} port 1"),
                "state",
                "4: ACTIVE",
                Severity::Error,
            ));
            let r = if d == 1 { rate1 } else { "400 Gb/sec (4X NDR)" };
            v.push(Fact::new(&format!("mlx5_{d} port 1"), "rate", r, Severity::Warning));
        }
        v
    }

    fn lines(f: &[Finding]) -> Vec<String> {
        f.iter()
            .map(|f| format!("{} {}: {}", f.severity.as_str(), f.subjects.join(", "), f.text))
            .collect()
    }

    #[test]
    fn a_node_as_expected_has_no_finding_and_each_difference_is_named() {
        let e = Expectations::parse(FILE, "t.toml").unwrap();
        assert_eq!(e.name.as_deref(), Some("test node"));
        assert!(e.check("h0", &node("400 Gb/sec (4X NDR)", 2, "8")).is_empty());
        assert_eq!(
            lines(&e.check("h1", &node("200 Gb/sec (4X HDR)", 2, "7"))),
            vec![
                "error h1: mlx5_1 port 1: rate 200 Gb/sec (4X HDR), expected 400 Gb/sec* (test node)",
                "error h1: node: gpus 7, expected 8 (test node)",
            ]
        );
        assert_eq!(
            lines(&e.check("h2", &node("x", 1, "8"))),
            vec!["error h2: mlx5_* port 1: 1 found, 2 expected (test node)"]
        );
        let process = vec![Fact::new("process", "memlock_kib", "64", Severity::Error)];
        assert_eq!(
            lines(&e.check("h2 rank 3", &process)),
            vec!["warning h2 rank 3: process: memlock_kib 64, expected >= 1048576 (test node)"]
        );
        let unlimited = vec![Fact::new("process", "memlock_kib", "unlimited", Severity::Error)];
        assert!(e.check("h2 rank 3", &unlimited).is_empty());
        let e = Expectations::parse(
            "[[part]]\nscope = \"mlx5_* port 1\"\nactive_mtu = \">= 4096\"\npfc = \"3\"\n",
            "t.toml",
        )
        .unwrap();
        let port = |mtu: &str, pfc: &str| {
            vec![
                Fact::new("mlx5_0 port 1", "active_mtu", mtu, Severity::Error),
                Fact::new("mlx5_0 port 1", "pfc", pfc, Severity::Warning),
            ]
        };
        assert!(e.check("h0", &port("4096", "3")).is_empty());
        assert_eq!(
            lines(&e.check("h1", &port("1024", "unknown"))),
            vec![
                "error h1: mlx5_0 port 1: active_mtu 1024, expected >= 4096 (a RoCE port gets 4096 from an interface \
                 MTU of 4200 or more)",
                "warning h1: mlx5_0 port 1: pfc unknown (this node would not say), expected 3",
            ]
        );
    }

    #[test]
    fn bad_files_say_what_and_where() {
        let e = |t: &str| Expectations::parse(t, "x.toml").unwrap_err().to_string();
        assert_eq!(
            e("[[part]]\nrate = 1"),
            "x.toml: part 1 ([[part]] number 1): has no `scope` (the scope preflight prints, e.g. \"mlx5_* port 1\")"
        );
        assert_eq!(e("[type]\nname = \"a\""), "x.toml: no [[part]]: nothing is expected");
        assert_eq!(
            e("parts = 1"),
            "x.toml: unknown key `parts`: the file has a [type] table and [[part]] tables"
        );
        assert_eq!(
            e("[[part]]\nscope = \"node\"\ngpus = \">= eight\""),
            "x.toml: part 1 ([[part]] number 1): `gpus`: `>= eight` compares with `eight`, which is not a number (write e.g. `>= 16`)"
        );
        assert!(e("[[part]\n").starts_with("x.toml: not valid TOML"));
    }

    #[test]
    fn globs_and_comparisons() {
        assert!(glob("mlx5_*", "mlx5_10"));
        assert!(glob("mlx5_? port 1", "mlx5_3 port 1"));
        assert!(!glob("mlx5_? port 1", "mlx5_10 port 1"));
        assert!(glob("*", ""));
        assert!(!glob("a*b", "acbd"));
        assert!(matches(">= 16", "16"));
        assert!(matches(">= 16", "32.0 GT/s"));
        assert!(!matches("> 16", "16"));
        assert!(matches("< 2", "1.5"));
        assert!(!matches(">= 1", "none"));
    }
}

#[cfg(test)]
mod shipped {
    use super::*;

    /// Every example under deploy/expect parses, names its type and source, and expects something.
    #[test]
    fn the_shipped_examples_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/expect");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let text = std::fs::read_to_string(&p).unwrap();
            let x = Expectations::parse(&text, &p.display().to_string()).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                x.name.as_deref().is_some_and(|n| n.ends_with("(example)")),
                "{}",
                p.display()
            );
            assert!(x.source.is_some(), "{}", p.display());
            assert!(
                text.starts_with("# EXAMPLE"),
                "{}: say it is an example first",
                p.display()
            );
            n += 1;
        }
        assert!(n >= 3, "{n} examples");
    }
}
