//! The rules ARCHITECTURE.md says the code keeps, checked on the tree: no `.rs` file over 600
//! lines, and no import circle inside a crate: not between its top-level modules (a module `a`
//! that names `crate::b` while `b`, directly or through others, names `crate::a`; a module's own
//! children count as the module), nor between the modules of any one folder (`verdict/judging.rs`
//! naming `super::unstable` while `unstable.rs` names `super::judging`), at every depth. Test
//! modules (`#[cfg(test)]` to the end of a file, `tests.rs`, `tests/` folders) are left out:
//! tests sit above what they test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use e2e::root;

/// The most lines a source file may have.
const MAX_LINES: usize = 600;

/// The crates whose modules are checked for circles.
const CRATES: &[&str] = &["hostfiles", "analysis", "ranks", "collectives", "launcher"];

/// Every `.rs` file under `dir`, build outputs and .git left out.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    out.extend(
        e2e::project_tree(dir)
            .into_iter()
            .filter(|(p, is_dir)| !is_dir && p.extension().is_some_and(|x| x == "rs"))
            .map(|(p, _)| dir.join(p)),
    );
}

#[test]
fn no_source_file_is_over_600_lines() {
    let root = root();
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(
        files.len() > 100,
        "found only {} .rs files under {}",
        files.len(),
        root.display()
    );
    let long: Vec<String> = files
        .iter()
        .filter_map(|p| {
            let n = std::fs::read_to_string(p).ok()?.lines().count();
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", p.strip_prefix(&root).unwrap_or(p).display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines; split by what each part holds: {long:?}"
    );
}

/// The top-level module a file of `src` belongs to (`main`/`lib` for the crate root).
fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let first = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    first.unwrap_or_default().trim_end_matches(".rs").to_string()
}

/// The modules `text` names as `crate::m` (also inside `use crate::{a, b::c}`), comments left out.
fn named_modules(text: &str) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    let ident = |s: &str| {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<String>()
    };
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            out.extend(group.split(',').map(|item| ident(item.trim())));
        } else {
            out.insert(ident(rest));
        }
    }
    out.retain(|m| !m.is_empty() && m != "self");
    out
}

/// A circle in `edges`, as the modules along it, if there is one.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut c = path[at..].to_vec();
            c.push(m.to_string());
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for next in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|m| visit(m, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let root = root();
    for krate in CRATES {
        let src = root.join(krate).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut modules = BTreeSet::new();
        for f in &files {
            modules.insert(top_module(&src, f));
        }
        for f in &files {
            let from = top_module(&src, f);
            let text = std::fs::read_to_string(f).unwrap_or_default();
            for to in named_modules(&text) {
                if to != from && modules.contains(&to) {
                    edges.entry(from.clone()).or_default().insert(to);
                }
            }
        }
        assert!(
            edges.values().map(BTreeSet::len).sum::<usize>() > 0 || modules.len() < 3,
            "{krate}: no edges read"
        );
        if let Some(c) = circle(&edges) {
            panic!("{krate}: an import circle between its modules: {}", c.join(" -> "));
        }
    }
}

#[test]
fn a_circle_is_found_where_there_is_one() {
    let text = "use crate::{b, c::d};\n// crate::z in a comment\nfn f() { crate::e::g(); }";
    let named: Vec<String> = named_modules(text).into_iter().collect();
    assert_eq!(named, ["b", "c", "e"]);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "d")] {
        edges.entry(a.into()).or_default().insert(b.into());
    }
    assert_eq!(circle(&edges), None);
    edges.entry("d".into()).or_default().insert("b".into());
    assert_eq!(
        circle(&edges).map(|c| c.join(" -> ")).as_deref(),
        Some("b -> c -> d -> b")
    );
}

/// A file's module path inside its crate: `pairwise/verdict/judging.rs` is
/// `["pairwise", "verdict", "judging"]`; `verdict.rs` and `verdict/mod.rs` are the folder's own
/// module; `lib.rs` and `main.rs` the crate root (empty).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts
        .last()
        .is_some_and(|l| l == "mod" || (parts.len() == 1 && (l == "lib" || l == "main")))
    {
        parts.pop();
    }
    parts
}

/// A test module's file: `tests.rs`, or anything under a `tests/` folder of the crate's source.
fn is_test_file(src: &Path, file: &Path) -> bool {
    let rel = file.strip_prefix(src).unwrap_or(file);
    rel.components()
        .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "tests.rs")
}

/// The code of a file without its comments and its test module (from `#[cfg(test)]` on).
fn code_of(text: &str) -> String {
    let body = text.split("#[cfg(test)]").next().unwrap_or("");
    body.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a `use` tree or path expression spells from `rest` on (after `crate::`, `super::`
/// or `self::`), groups expanded: `{a, b::{c, d}}` gives `a`, `b::c`, `b::d`. Identifiers only;
/// `*` and `self` end a path.
fn spelled(rest: &str) -> Vec<Vec<String>> {
    fn tree(s: &str) -> (Vec<Vec<String>>, usize) {
        let mut path = Vec::new();
        let mut i = 0;
        let b = s.as_bytes();
        loop {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            if i > start {
                let id = &s[start..i];
                if id != "self" {
                    path.push(id.to_string());
                }
            }
            let group = if s[i..].starts_with("::{") {
                Some(3)
            } else if i == 0 && s.starts_with('{') {
                Some(1)
            } else {
                None
            };
            if let Some(skip) = group {
                i += skip;
                let mut out = Vec::new();
                loop {
                    while i < b.len() && (b[i] == b' ' || b[i] == b'\n' || b[i] == b',') {
                        i += 1;
                    }
                    if i >= b.len() || b[i] == b'}' {
                        return (
                            out.into_iter()
                                .map(|p: Vec<String>| path.iter().cloned().chain(p).collect())
                                .chain(std::iter::once(path.clone()))
                                .collect(),
                            i + 1,
                        );
                    }
                    let (sub, used) = tree(&s[i..]);
                    out.extend(sub);
                    i += used.max(1);
                }
            }
            if s[i..].starts_with("::") && i > start {
                i += 2;
                continue;
            }
            return (vec![path], i);
        }
    }
    tree(rest).0
}

/// Every module path (absolute, from the crate root) the file of module `me` names, whole or as
/// the start of an item's path.
fn named_paths(code: &str, me: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (at, _) in code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
        .chain(code.match_indices("self::"))
    {
        // A word that only ends in one of these (`my_crate::`) is not one.
        if code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            continue;
        }
        let (mut base, mut rest) = (Vec::new(), &code[at..]);
        if let Some(r) = rest.strip_prefix("crate::") {
            rest = r;
        } else {
            base = me.to_vec();
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            if let Some(r) = rest.strip_prefix("self::") {
                rest = r;
            }
        }
        for p in spelled(rest) {
            out.push(base.iter().cloned().chain(p).collect());
        }
    }
    out
}

#[test]
fn no_folder_has_an_import_circle_between_its_modules() {
    let root = root();
    let mut levels_read = 0;
    for krate in CRATES {
        let src = root.join(krate).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        files.retain(|f| !is_test_file(&src, f));
        let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(&src, f)).collect();
        // Per folder (a module path), its children and which of them names which.
        let mut levels: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for f in &files {
            let me = module_path(&src, f);
            let code = code_of(&std::fs::read_to_string(f).unwrap_or_default());
            for p in named_paths(&code, &me) {
                // The longest start of the path that is a module of the crate.
                let Some(to) = (1..=p.len())
                    .rev()
                    .map(|n| p[..n].to_vec())
                    .find(|m| modules.contains(m))
                else {
                    continue;
                };
                let common = me.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if let (Some(a), Some(b)) = (me.get(common), to.get(common)) {
                    levels
                        .entry(me[..common].to_vec())
                        .or_default()
                        .entry(a.clone())
                        .or_default()
                        .insert(b.clone());
                }
            }
        }
        levels_read += levels.len();
        for (folder, edges) in &levels {
            if let Some(c) = circle(edges) {
                panic!(
                    "{krate}/src/{}: an import circle between its modules: {}",
                    folder.join("/"),
                    c.join(" -> ")
                );
            }
        }
    }
    assert!(levels_read > 20, "only {levels_read} folders with imports read");
}

#[test]
fn a_folder_circle_is_found_where_there_is_one() {
    let me: Vec<String> = ["pairwise", "verdict", "judging"].map(String::from).to_vec();
    let code = code_of(
        "use super::{bars::{rule, suspect_pairs}, unstable::holds};\nuse crate::pairwise::blame::Part;\n\
         // super::noise in a comment\nfn f() { self::inner::g(); my_crate::x::y(); }\n#[cfg(test)]\nmod tests { use super::super::tests_only; }",
    );
    let got: Vec<String> = named_paths(&code, &me).iter().map(|p| p.join("::")).collect();
    for want in [
        "pairwise::verdict::bars::rule",
        "pairwise::verdict::bars::suspect_pairs",
        "pairwise::verdict::unstable::holds",
        "pairwise::blame::Part",
        "pairwise::verdict::judging::inner::g",
    ] {
        assert!(got.iter().any(|g| g == want), "{want} not in {got:?}");
    }
    assert!(
        !got.iter()
            .any(|g| g.contains("noise") || g.contains("tests_only") || g.contains("x::y")),
        "{got:?}"
    );
    assert_eq!(
        module_path(Path::new("s"), Path::new("s/pairwise/verdict/mod.rs")),
        ["pairwise", "verdict"]
    );
    assert_eq!(module_path(Path::new("s"), Path::new("s/lib.rs")), Vec::<String>::new());
}

/// The judging's files: the verdict and what it blames with, not the run's model or the reports.
const JUDGING: &[&str] = &[
    "analysis/src/pairwise/verdict.rs",
    "analysis/src/pairwise/verdict/",
    "analysis/src/pairwise/blame.rs",
    "analysis/src/pairwise/bulk.rs",
    "analysis/src/pairwise/cables.rs",
    "analysis/src/pairwise/path_share.rs",
    "analysis/src/pairwise/paths.rs",
    "analysis/src/pairwise/rails.rs",
    "analysis/src/pairwise/over_time/",
];

/// The most parameters a function of the judging takes: more, and what travels together goes in
/// one struct (`verdict::Evidence`).
const MAX_PARAMS: usize = 6;

/// Each function of `code` with its parameter count (`self` counted).
fn param_counts(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        if code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = &code[at + 3..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let Some(open) = rest.find('(') else { continue };
        // The list to its closing paren; `->` inside it (a closure type's) opens nothing.
        let (mut depth, mut count, mut last, mut prev) = (0i32, 0usize, ' ', ' ');
        for c in rest[open..].chars() {
            match c {
                '>' if prev == '-' => {}
                '(' | '<' | '[' | '{' => depth += 1,
                ')' | '>' | ']' | '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ',' if depth == 1 => count += 1,
                _ => {}
            }
            if depth >= 1 && !c.is_whitespace() && !(depth == 1 && c == '(' && last == ' ') {
                last = c;
            }
            prev = c;
        }
        // No parameter: nothing but the opening paren; a trailing comma adds none.
        let n = match last {
            ' ' | '(' => 0,
            ',' => count,
            _ => count + 1,
        };
        out.push((name, n));
    }
    out
}

#[test]
fn no_function_of_the_judging_takes_over_6_parameters() {
    let root = root();
    let mut files = Vec::new();
    sources(&root.join("analysis/src/pairwise"), &mut files);
    let src = root.join("analysis/src");
    let judging: Vec<&PathBuf> = files
        .iter()
        .filter(|f| !is_test_file(&src, f))
        .filter(|f| {
            let rel = f.strip_prefix(&root).unwrap_or(f).to_string_lossy().into_owned();
            JUDGING
                .iter()
                .any(|j| rel == *j || (j.ends_with('/') && rel.starts_with(j)))
        })
        .collect();
    assert!(judging.len() > 15, "only {} files of the judging found", judging.len());
    let wide: Vec<String> = judging
        .iter()
        .flat_map(|f| {
            let code = code_of(&std::fs::read_to_string(f).unwrap_or_default());
            let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
            param_counts(&code)
                .into_iter()
                .filter(|(_, n)| *n > MAX_PARAMS)
                .map(move |(name, n)| format!("{rel}: {name} ({n})"))
        })
        .collect();
    assert!(wide.is_empty(), "over {MAX_PARAMS} parameters: {wide:?}");
}

#[test]
fn parameters_are_counted_as_written() {
    let code = "fn a() {}\nfn b(x: u8) {}\nfn c<T: Into<String>>(x: T, y: Vec<(u8, u8)>,\n) -> u8 { 0 }\n\
                pub(super) fn d(&self, f: impl Fn(u8, u8) -> u8, g: [u8; 2]) {}\n";
    assert_eq!(
        param_counts(code),
        [("a".to_string(), 0), ("b".into(), 1), ("c".into(), 2), ("d".into(), 3)]
    );
}
