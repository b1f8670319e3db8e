//! The layer rule of ARCHITECTURE.md, enforced: every `crate::` path in
//! `src/` points to its own layer or one below, and `source` and `fold`
//! never import each other. Unit-test modules (`#[cfg(test)] mod tests`)
//! may reach across to build fixtures; shipped code may not.

use std::path::{Path, PathBuf};

/// Bottom to top. Folders on one line are side by side.
const LAYERS: &[&[&str]] = &[
    &["base"],
    &["config"],
    &["model"],
    &["source", "fold"],
    &["sink"],
    &["session"],
    &["tui", "cmd"],
    &["cli"],
];

/// Side by side but still apart: neither may import the other.
const APART: &[(&str, &str)] = &[("source", "fold"), ("fold", "source")];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The shipped part of a file: up to its unit-test module, comments out.
fn shipped(text: &str) -> Vec<(usize, &str)> {
    let mut lines = Vec::new();
    let mut it = text.lines().enumerate().peekable();
    while let Some((i, l)) = it.next() {
        let t = l.trim_start();
        if t.starts_with("#[cfg(test)]") {
            if let Some((_, next)) = it.peek() {
                if next.trim_start().starts_with("mod tests") {
                    break;
                }
            }
        }
        if t.starts_with("//") {
            continue;
        }
        lines.push((i + 1, l));
    }
    lines
}

/// Every (line, module) a line imports with `crate::module`.
fn imports(line: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + 7..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let word_start = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric();
        if word_start && !name.is_empty() {
            v.push(name);
        }
        rest = after;
    }
    v
}

/// Violations in `src/`: "file:line: from -> to".
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    files.sort();
    let mut bad = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let first = rel.iter().next().unwrap().to_string_lossy();
        let from = first.trim_end_matches(".rs").to_string();
        if from == "lib" || from == "main" {
            continue;
        }
        let Some(lf) = layer_of(&from) else {
            bad.push(format!(
                "{}: `{from}` is in no layer of ARCHITECTURE.md",
                rel.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in shipped(&text) {
            for to in imports(line) {
                let Some(lt) = layer_of(&to) else { continue };
                let apart = APART.contains(&(from.as_str(), to.as_str()));
                if lt > lf || apart {
                    bad.push(format!(
                        "{}:{n}: {from} -> {to}: {}",
                        rel.display(),
                        line.trim()
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn every_import_points_down_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&src);
    assert!(
        bad.is_empty(),
        "imports that go up a layer or between source and fold:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_checker_catches_an_upward_import() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    std::fs::write(model.join("ops.rs"), "use crate::session::Session;\n").unwrap();
    let fold = dir.path().join("fold");
    std::fs::create_dir(&fold).unwrap();
    std::fs::write(
        fold.join("a.rs"),
        "use crate::model::ops::OpKind;\nfn f() { crate::source::proc::read(); }\n#[cfg(test)]\nmod tests { use crate::source::x; }\n",
    )
    .unwrap();
    let bad = violations(dir.path());
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad[0].starts_with("fold/a.rs:2: fold -> source"), "{bad:?}");
    assert!(
        bad[1].starts_with("model/ops.rs:1: model -> session"),
        "{bad:?}"
    );
}
