//! Every path the documentation names exists: README.md, ARCHITECTURE.md and docs/*.md are the
//! map of the project, and a map that names a moved or deleted file sends a newcomer nowhere.
//!
//! Checked: every relative Markdown link target (`[text](docs/usage.md#exit-status)`, resolved
//! from the file's own folder, anchor dropped), and every inline code span that is a path: one
//! whose first component is a top-level entry of the repository must exist as written from the
//! root; one that starts elsewhere (`transport/mod.rs` under a `ranks/src/` item of the layout
//! list) and ends in a source or document extension, or in `/`, must be the tail of some path in
//! the tree. Indented and fenced blocks (outputs, commands) are not read.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use e2e::root;

/// Extensions whose spans are taken for paths even when they do not start at the root.
const EXTS: &[&str] = &[
    "rs", "md", "sh", "toml", "yaml", "cu", "ptx", "c", "txt", "json", "sbatch", "py",
];
/// Extensions of a bare file name (`world.rs`, no folder) that must name a file of the tree:
/// sources and documents only, as `summary.json` or `r.json` name files a run writes.
const SOURCE_EXTS: &[&str] = &["rs", "md", "sh", "toml", "yaml", "cu", "ptx", "c", "sbatch"];

/// Every file and folder under the root, relative, as `a/b/c` (build outputs and .git left out).
fn tree(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (p, is_dir) in e2e::project_tree(root) {
        let rel = p.to_string_lossy().into_owned();
        if is_dir {
            out.insert(format!("{rel}/"));
        }
        out.insert(rel);
    }
    out
}

fn documents(root: &Path) -> Vec<PathBuf> {
    let mut v = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("a docs/ folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

/// The prose lines of a Markdown text, with line numbers: fenced blocks and indented code blocks
/// (4 spaces after a blank line) left out; an indented line after text continues a list item.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let (mut fenced, mut code, mut prev_blank) = (false, false, true);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let blank = line.trim().is_empty();
        code = !blank && line.starts_with("    ") && (prev_blank || code);
        prev_blank = blank;
        if !fenced && !code && !blank {
            out.push((i + 1, line));
        }
    }
    out
}

fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

fn link_targets(line: &str) -> Vec<&str> {
    line.match_indices("](")
        .filter_map(|(i, _)| line[i + 2..].split_once(')').map(|(t, _)| t))
        .collect()
}

fn looks_like_a_path(s: &str) -> bool {
    // Outputs, not sources: build products, and places a run writes (`DIR/check.sh`, `RUN/`).
    let first = s.split('/').next().unwrap_or_default();
    if s.contains('/') && (first == "target" || first.chars().all(|c| c.is_ascii_uppercase())) {
        return false;
    }
    let ext = s.rsplit_once('.').map(|(_, e)| e).unwrap_or_default();
    (s.contains('/') || SOURCE_EXTS.contains(&ext))
        && !s.starts_with(['/', '$', '~', '.', '-', '<'])
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "_-./*".contains(c))
}

/// What is wrong with the path named in `span`, if anything.
fn check_span(span: &str, tops: &BTreeSet<String>, all: &BTreeSet<String>) -> Option<String> {
    if !looks_like_a_path(span) || span.contains('*') {
        return None;
    }
    let first = span.split('/').next().unwrap_or_default();
    if tops.contains(first) {
        let exists = all.contains(span) || all.contains(span.trim_end_matches('/'));
        return (!exists).then(|| format!("`{span}` does not exist"));
    }
    let ext = span.rsplit_once('.').map(|(_, e)| e).unwrap_or_default();
    if span.ends_with('/') || EXTS.contains(&ext) {
        let tail = format!("/{span}");
        let found = all.iter().any(|p| p.ends_with(&tail) || p == span);
        return (!found).then(|| format!("`{span}` is the tail of no path in the tree"));
    }
    if SOURCE_EXTS.contains(&ext) {
        let tail = format!("/{span}");
        let found = all.iter().any(|p| p.ends_with(&tail) || p == span);
        return (!found).then(|| format!("`{span}` is the tail of no path in the tree"));
    }
    None
}

#[test]
fn every_path_the_documentation_names_exists() {
    let root = root();
    let all = tree(&root);
    let tops: BTreeSet<String> = all
        .iter()
        .filter(|p| !p.contains('/') || p.ends_with('/') && p.matches('/').count() == 1)
        .map(|p| p.trim_end_matches('/').to_string())
        .collect();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for doc in documents(&root) {
        let text = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        let name = doc.strip_prefix(&root).unwrap_or(&doc).display().to_string();
        let dir = doc.parent().unwrap_or(&root).to_path_buf();
        for (n, line) in prose(&text) {
            for t in link_targets(line) {
                if t.starts_with("http") || t.starts_with('#') {
                    continue;
                }
                checked += 1;
                let path = t.split('#').next().unwrap_or_default();
                if !dir.join(path).exists() {
                    wrong.push(format!("{name}:{n}: link to {t}, which does not exist"));
                }
            }
            for s in code_spans(line) {
                checked += usize::from(looks_like_a_path(s));
                if let Some(w) = check_span(s, &tops, &all) {
                    wrong.push(format!("{name}:{n}: {w}"));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} paths found: is the parser still reading the documents?"
    );
    assert!(wrong.is_empty(), "{} stale path(s):\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn the_checker_finds_stale_paths() {
    let all: BTreeSet<String> = [
        "ranks/",
        "ranks/src/",
        "ranks/src/world.rs",
        "ranks/src/transport/mod.rs",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let tops: BTreeSet<String> = ["ranks".to_string()].into();
    assert_eq!(check_span("ranks/src/world.rs", &tops, &all), None);
    assert_eq!(check_span("ranks/src/", &tops, &all), None);
    assert_eq!(check_span("transport/mod.rs", &tops, &all), None);
    assert!(check_span("ranks/src/gone.rs", &tops, &all).is_some());
    assert!(check_span("transport/gone.rs", &tops, &all).is_some());
    assert_eq!(check_span("world.rs", &tops, &all), None);
    assert!(check_span("gone.rs", &tops, &all).is_some());
    assert_eq!(check_span("summary.json", &tops, &all), None, "a file a run writes");
    // Not paths: flags, hosts, absolute paths, outputs.
    for s in [
        "--tcp-if",
        "node[01-04]",
        "/etc/mpi/hostfile",
        "$OUT/check.log",
        "a b/c",
    ] {
        assert_eq!(check_span(s, &tops, &all), None, "{s}");
    }
    assert_eq!(
        link_targets("see [x](docs/a.md#b) and [y](https://e)"),
        vec!["docs/a.md#b", "https://e"]
    );
    assert_eq!(code_spans("a `b/c` d `e`"), vec!["b/c", "e"]);
}
