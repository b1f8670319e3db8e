//! The layer rule of ARCHITECTURE.md, enforced: every `crate::` path in
//! `src/` points to its own layer or one below, `source` and `fold` never
//! import each other, and no modules import each other in a circle.
//! Unit-test modules (`#[cfg(test)] mod tests`, `tests.rs`) may reach
//! across to build fixtures; shipped code may not.

use std::path::{Path, PathBuf};

/// Bottom to top. Folders on one line are side by side.
const LAYERS: &[&[&str]] = &[
    &["base"],
    &["config"],
    &["model"],
    &["knob"],
    &["source", "fold"],
    &["sink"],
    &["session"],
    &["analysis"],
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

/// The modules a line names, as `folder::module` (or a folder's or a
/// top-level file's name): `crate::a::b::…` is `a::b` when `src/a/b.rs` or
/// `src/a/b/mod.rs` exists, else `a`; `super::b` in folder `a` is `a::b`.
fn module_refs(src: &Path, line: &str, folder: Option<&str>) -> Vec<String> {
    let is_module = |a: &str, b: &str| {
        src.join(a).join(format!("{b}.rs")).exists() || src.join(a).join(b).join("mod.rs").exists()
    };
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut v = Vec::new();
    for (prefix, parent) in [("crate::", None), ("super::", folder)] {
        let mut rest = line;
        while let Some(i) = rest.find(prefix) {
            let word_start = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric();
            let after = &rest[i + prefix.len()..];
            rest = after;
            if !word_start {
                continue;
            }
            let a = ident(after);
            if a.is_empty() {
                continue;
            }
            let b = after[a.len()..]
                .strip_prefix("::")
                .map(ident)
                .unwrap_or_default();
            match parent {
                Some(p) if is_module(p, &a) => v.push(format!("{p}::{a}")),
                Some(_) => {}
                None if !b.is_empty() && is_module(&a, &b) => v.push(format!("{a}::{b}")),
                None => v.push(a),
            }
        }
    }
    v
}

/// Module `folder::module` (or a top-level file's name) of a source file.
fn module_of(rel: &Path) -> String {
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .filter(|p| p != "mod")
        .collect();
    parts.iter().take(2).cloned().collect::<Vec<_>>().join("::")
}

/// The shipped files an import graph is made of, with their paths under
/// `src` (unit-test files, lib.rs and main.rs are not in it).
fn graph_files(src: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(src).unwrap().to_path_buf();
            (f, rel)
        })
        .filter(|(_, rel)| {
            !rel.file_name()
                .is_some_and(|n| n == "tests.rs" || n == "lib.rs" || n == "main.rs")
        })
        .collect()
}

/// Circles of modules that import each other, each as "a -> b -> a".
fn circles(src: &Path) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (f, rel) in graph_files(src) {
        let rel = rel.as_path();
        let from = module_of(rel);
        let folder = (rel.iter().count() > 1)
            .then(|| rel.iter().next().unwrap().to_string_lossy().to_string());
        let text = std::fs::read_to_string(&f).unwrap();
        for (_, line) in shipped(&text) {
            for to in module_refs(src, line, folder.as_deref()) {
                // A module's own items, or its parent folder's `mod.rs`.
                if to != from && !from.starts_with(&format!("{to}::")) {
                    graph.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    cycles_of(&graph)
}

/// The circles of a graph, each as "a -> b -> a".
fn cycles_of(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    // Depth-first search; a back edge closes a circle.
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        out: &mut Vec<String>,
    ) {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            out.push(c.join(" -> "));
            return;
        }
        if !done.insert(n.to_string()) {
            return;
        }
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            visit(m, g, path, done, out);
        }
        path.pop();
    }
    let mut out = Vec::new();
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        visit(n, graph, &mut Vec::new(), &mut done, &mut out);
    }
    out
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
        // A unit-test module in a file of its own (`metrics/tests.rs`) may
        // reach up, as an inline `#[cfg(test)] mod tests` may.
        if from == "lib" || from == "main" || rel.file_name().is_some_and(|n| n == "tests.rs") {
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
fn no_modules_import_each_other_in_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let c = circles(&src);
    assert!(c.is_empty(), "import circles:\n{}", c.join("\n"));
}

/// A source file's module path (`cmd/advise/trial/mod.rs`: cmd, advise,
/// trial).
fn file_module(rel: &Path) -> Vec<String> {
    rel.iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .filter(|p| p != "mod")
        .collect()
}

/// The deepest file a module path names (`cmd::advise::trial::verdict::
/// Verdict` → cmd::advise::trial::verdict).
fn resolve(src: &Path, parts: &[String]) -> Option<String> {
    (1..=parts.len()).rev().find_map(|k| {
        let dir: PathBuf = parts[..k].iter().collect();
        let file = src.join(&dir).with_extension("rs");
        (file.exists() || src.join(&dir).join("mod.rs").exists()).then(|| parts[..k].join("::"))
    })
}

/// The files one line refers to by `crate::` or `super::` paths (a bare
/// `use child::X` in a mod.rs is a descendant: never part of a circle), from
/// the file at module path `own`.
fn file_refs(src: &Path, line: &str, own: &[String]) -> Vec<String> {
    let ident_path = |s: &str| -> Vec<String> {
        s.split("::")
            .map(|p| {
                p.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .take_while(|p: &String| !p.is_empty())
            .collect()
    };
    let mut v = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find(['c', 's']) {
        let at = &rest[i..];
        let word_start = i == 0
            || !rest.as_bytes()[i - 1].is_ascii_alphanumeric() && rest.as_bytes()[i - 1] != b':';
        rest = &rest[i + 1..];
        if !word_start {
            continue;
        }
        let (mut base, tail) = if let Some(t) = at.strip_prefix("crate::") {
            (Vec::new(), t)
        } else if at.starts_with("super::") {
            // A mod.rs is its folder's module: `super` is the folder's
            // parent, as it is a sibling file's.
            let mut b = own.to_vec();
            let mut t = at;
            while let Some(x) = t.strip_prefix("super::") {
                b.pop();
                t = x;
            }
            (b, t)
        } else {
            continue;
        };
        base.extend(ident_path(tail));
        if let Some(m) = resolve(src, &base) {
            v.push(m);
        }
    }
    v
}

/// Circles of files that import each other, each as "a -> b -> a": one
/// level finer than `circles` (`cmd::advise::trial::verdict`, not
/// `cmd::advise`). A file's references to its own ancestors (a child
/// using its folder's mod.rs) are not edges.
fn file_circles(src: &Path) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (f, rel) in graph_files(src) {
        let rel = rel.as_path();
        let own = file_module(rel);
        let from = own.join("::");
        let text = std::fs::read_to_string(&f).unwrap();
        for (_, line) in shipped(&text) {
            for to in file_refs(src, line, &own) {
                let ancestor = from.starts_with(&format!("{to}::"));
                let descendant = to.starts_with(&format!("{from}::"));
                if to != from && !ancestor && !descendant {
                    graph.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    cycles_of(&graph)
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let c = file_circles(&src);
    assert!(
        c.is_empty(),
        "import circles between files:\n{}",
        c.join("\n")
    );
}

#[test]
fn the_checker_catches_a_circle_between_files_of_one_folder() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("cmd/advise/trial");
    std::fs::create_dir_all(&t).unwrap();
    std::fs::write(t.join("mod.rs"), "pub mod show;\npub mod verdict;\n").unwrap();
    std::fs::write(t.join("show.rs"), "use super::verdict::Verdict;\n").unwrap();
    std::fs::write(
        t.join("verdict.rs"),
        "use crate::cmd::advise::trial::show::line;\nuse super::Trial;\n",
    )
    .unwrap();
    let c = file_circles(dir.path());
    assert_eq!(
        c,
        ["cmd::advise::trial::show -> cmd::advise::trial::verdict -> cmd::advise::trial::show"]
    );
    // Module-level, one folder holds both: no circle at that grain.
    assert!(circles(dir.path()).is_empty());
}

#[test]
fn the_checker_catches_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("sink");
    std::fs::create_dir(&sink).unwrap();
    std::fs::write(
        sink.join("printer.rs"),
        "use crate::sink::recording::Marker;\n",
    )
    .unwrap();
    std::fs::write(sink.join("recording.rs"), "use super::printer::line;\n").unwrap();
    std::fs::write(sink.join("schema.rs"), "use crate::model::ops::OpKind;\n").unwrap();
    let c = circles(dir.path());
    assert_eq!(c, ["sink::printer -> sink::recording -> sink::printer"]);
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
