//! The rules ARCHITECTURE.md says the code keeps, checked on the tree: no `.rs` file over 600
//! lines, and no import circle between the top-level modules of a crate (a module `a` that names
//! `crate::b` while `b`, directly or through others, names `crate::a`). A module's own children
//! count as the module; `super::` paths stay inside it and are not read.

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
