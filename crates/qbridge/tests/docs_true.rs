//! The repository's words stay true to its files: every path the docs, the README, the scripts
//! and the code's comments cite exists, and the crate graph drawn in `docs/architecture.md` is
//! the one the `Cargo.toml` files declare. A move or a rename that forgets a sentence fails
//! here, with the sentence's file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Files whose text is read: the README, `docs/`, `scripts/`, and every `.rs`/`.toml`/`.md`
/// under `crates/` (tests included), `target/` never.
fn texts(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("README.md")];
    let mut stack = vec![root.join("docs"), root.join("scripts"), root.join("crates")];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    stack.push(p);
                }
            } else if [".rs", ".md", ".toml", ".sh", ".batch"]
                .iter()
                .any(|s| name.ends_with(s))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// Repository paths cited in `line`: words starting `crates/`, `docs/`, `scripts/` or `fuzz/`
/// that are not part of a longer path (`target/release/examples/…`, `/usr/share/docs/…`), with
/// trailing punctuation and `:LINE` suffixes dropped. Words with a glob or a placeholder
/// (`crates/*/`, `crates/NAME`) are not paths.
fn cited(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["crates/", "docs/", "scripts/", "fuzz/"]
            .iter()
            .find(|p| line_at(&bytes, i, p));
        let prev_ok = i == 0 || !(is_path_char(bytes[i - 1]) || bytes[i - 1] == '$');
        if let (Some(_), true) = (starts, prev_ok) {
            let mut j = i;
            while j < bytes.len() && is_path_char(bytes[j]) {
                j += 1;
            }
            let word: String = bytes[i..j].iter().collect();
            let next = bytes.get(j).copied();
            let word = word.trim_end_matches(['.', '/', '-']).to_string();
            let placeholder = word.chars().any(|c| c.is_ascii_uppercase())
                && word.rsplit('/').next().is_some_and(|l| {
                    l.chars()
                        .all(|c| c.is_ascii_uppercase() || c == '_' || c == '.')
                });
            if !matches!(next, Some('*' | '{' | '<' | '$'))
                && !placeholder
                && word.matches('/').count() >= 1
                && word.len() > word.find('/').unwrap() + 1
            {
                out.push(word);
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

fn line_at(chars: &[char], i: usize, pat: &str) -> bool {
    pat.chars()
        .enumerate()
        .all(|(k, c)| chars.get(i + k) == Some(&c))
}

#[test]
fn every_cited_path_exists() {
    let root = root();
    let mut missing = Vec::new();
    let mut seen = 0;
    for file in texts(&root) {
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let is_code = rel.ends_with(".rs") || rel.ends_with(".toml") || rel.ends_with(".sh");
        for (n, line) in text.lines().enumerate() {
            // In code, only comments cite (a string literal may name a path a test creates).
            let said = if is_code {
                match line.find("//").or_else(|| line.find("# ")) {
                    Some(at) => &line[at..],
                    None => continue,
                }
            } else {
                line
            };
            for p in cited(said) {
                seen += 1;
                if !root.join(&p).exists() {
                    missing.push(format!("{rel}:{}: {p}", n + 1));
                }
            }
        }
    }
    assert!(
        seen > 100,
        "the scan found only {seen} citations: is the root right?"
    );
    assert!(
        missing.is_empty(),
        "{} cited path(s) do not exist:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// `crate: deps…` lines between the `crate-graph` markers of docs/architecture.md.
fn drawn_graph(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let begin = doc
        .find("<!-- crate-graph:begin")
        .expect("docs/architecture.md has no <!-- crate-graph:begin --> marker");
    let end = doc[begin..]
        .find("<!-- crate-graph:end")
        .expect("no <!-- crate-graph:end --> marker")
        + begin;
    let mut g = BTreeMap::new();
    for line in doc[begin..end].lines().skip(1) {
        let line = line.trim();
        let Some((name, deps)) = line.split_once(':') else {
            continue;
        };
        if line.starts_with("```") || name.contains(' ') {
            continue;
        }
        g.insert(
            name.trim().to_string(),
            deps.split_whitespace().map(str::to_string).collect(),
        );
    }
    g
}

/// Each workspace crate's normal `qbridge-*` dependencies, read from its `[dependencies]`.
fn declared_graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut g = BTreeMap::new();
    for e in fs::read_dir(root.join("crates")).unwrap().flatten() {
        let Ok(toml) = fs::read_to_string(e.path().join("Cargo.toml")) else {
            continue;
        };
        let mut deps = BTreeSet::new();
        let mut section = String::new();
        for line in toml.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = line.to_string();
            } else if section == "[dependencies]" {
                if let Some(rest) = line.strip_prefix("qbridge-") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                        .collect();
                    deps.insert(name);
                }
            }
        }
        g.insert(e.file_name().to_string_lossy().into_owned(), deps);
    }
    g
}

#[test]
fn the_drawn_crate_graph_is_the_declared_one() {
    let root = root();
    let doc = fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let drawn = drawn_graph(&doc);
    let declared = declared_graph(&root);
    assert_eq!(
        drawn, declared,
        "docs/architecture.md's crate graph (left) differs from the Cargo.toml files (right)"
    );
}

#[test]
fn citations_are_read_as_meant() {
    assert_eq!(
        cited("see `crates/bridge/src/fdb.rs:12`."),
        ["crates/bridge/src/fdb.rs"]
    );
    assert_eq!(cited("(docs/daemon.md, \"x\")"), ["docs/daemon.md"]);
    assert!(cited("target/release/examples/x crates/*/src").is_empty());
    assert!(cited("/usr/share/docs/x $crates/y crates/NAME").is_empty());
    assert_eq!(
        cited("scripts/test.sh and fuzz/x"),
        ["scripts/test.sh", "fuzz/x"]
    );
}
