//! Doc drift: every `stallscope …` command in a fenced block of README.md
//! and docs/*.md parses with today's command line, so a flag renamed or
//! removed, or a value of the wrong form, fails here instead of in a
//! reader's shell. Parsing only: running them needs root, labs and
//! minutes (the scripts and tests named beside each figure run those).
//! A command with a shell substitution (`$(pgrep postgres)`, `$PID`) has
//! no value to parse; those are listed, not checked.

use clap::error::ErrorKind;
use clap::Parser;
use stallscope::cli::Cli;
use std::path::{Path, PathBuf};

/// The pages a reader runs commands from.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

/// The command lines of the fenced blocks of `text` (continuations
/// joined), with the line each starts on. A block that shows a session
/// (`$ ` before each command) gives only its `$ ` lines; one without
/// prompts counts only if it is marked `sh` (an unmarked block without
/// prompts is a screen or a printout, whose first word may well be
/// "stallscope").
fn fenced_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut block: Vec<(usize, String)> = Vec::new();
    let (mut lang, mut inside, mut cur, mut from) = (String::new(), false, String::new(), 0);
    for (i, line) in text.lines().enumerate() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            if inside {
                let prompts = block.iter().any(|(_, l)| l.trim_start().starts_with("$ "));
                out.extend(block.drain(..).filter(|(_, l)| {
                    if prompts {
                        l.trim_start().starts_with("$ ")
                    } else {
                        lang == "sh"
                    }
                }));
            }
            lang = info.trim().to_string();
            inside = !inside;
            continue;
        }
        if !inside {
            continue;
        }
        if cur.is_empty() {
            from = i + 1;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(line);
                block.push((from, std::mem::take(&mut cur)));
            }
        }
    }
    out
}

/// A synopsis (`run [--target DIR]... [--mode mmap|buffered]`) rather
/// than a command: its optional parts are checked with their brackets
/// taken off, unless they show alternatives or repetition.
fn unbracket(args: Vec<String>) -> Option<Vec<String>> {
    let synopsis = args
        .iter()
        .any(|a| a.contains("...") || a.contains('|') || a.contains('…'));
    if synopsis {
        return None;
    }
    Some(
        args.into_iter()
            .map(|a| a.trim_start_matches('[').trim_end_matches(']').to_string())
            .filter(|a| !a.is_empty())
            .collect(),
    )
}

/// The tokens a shell would hand to stallscope on `line`, if it runs
/// stallscope: after `sudo`, environment assignments and `cargo run …
/// --`, up to a comment, pipe, list or redirection.
fn stallscope_args(line: &str) -> Option<Vec<String>> {
    let line = line.trim_start().trim_start_matches("$ ");
    // A comment starts at a `#` that begins a word.
    let code = match line.find(" #") {
        Some(at) => &line[..at],
        None if line.starts_with('#') => return None,
        None => line,
    };
    let words = shlex::split(code)?;
    let mut w = words.iter().peekable();
    while let Some(t) = w.peek() {
        let assignment = t.contains('=') && !t.starts_with('-');
        if *t == "sudo" || t.starts_with('-') || assignment {
            w.next();
        } else {
            break;
        }
    }
    let first = w.next()?;
    if first == "cargo" {
        // cargo run --release -- ARGS
        w.by_ref().find(|t| *t == "--")?;
    } else if first != "stallscope" && !first.ends_with("/stallscope") {
        return None;
    }
    let stops = ["|", "||", "&&", ";", "&", "<"];
    let args: Vec<String> = w
        .take_while(|t| !stops.contains(&t.as_str()) && !t.starts_with('>') && !t.starts_with("2>"))
        .cloned()
        .collect();
    Some(args)
}

#[test]
fn every_command_in_the_docs_parses() {
    let (mut checked, mut unchecked, mut bad) = (0, Vec::new(), Vec::new());
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        for (line, cmd) in fenced_lines(&text) {
            let Some(args) = stallscope_args(&cmd) else {
                continue;
            };
            let at = format!("{name}:{line}");
            let args = match unbracket(args) {
                Some(a) if !a.iter().any(|a| a.contains('$')) => a,
                _ => {
                    unchecked.push(format!("{at}: {}", cmd.trim()));
                    continue;
                }
            };
            checked += 1;
            let parsed = Cli::try_parse_from(std::iter::once("stallscope".to_string()).chain(args));
            match parsed {
                Ok(cli) => {
                    if let Err(e) = cli.check_placement() {
                        bad.push(format!("{at}: {}\n    {e}", cmd.trim()));
                    }
                }
                Err(e)
                    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {}
                Err(e) => bad.push(format!("{at}: {}\n    {}", cmd.trim(), e.kind())),
            }
        }
    }
    eprintln!(
        "{checked} commands parsed; not checked (shell substitutions, synopses): {}",
        unchecked.len()
    );
    for u in &unchecked {
        eprintln!("  {u}");
    }
    assert!(
        bad.is_empty(),
        "commands in the docs that no longer parse:\n{}",
        bad.join("\n")
    );
    // The extraction itself must find the docs' commands: the README
    // alone shows a dozen.
    assert!(
        checked >= 30,
        "only {checked} commands found: is the extraction broken?"
    );
}

#[test]
fn the_extraction_reads_commands_as_a_shell_would() {
    let one = |l: &str| stallscope_args(l).map(|v| v.join(" "));
    assert_eq!(
        one("sudo stallscope lab up --fs ext4 --cap 20MiB   # a comment").as_deref(),
        Some("lab up --fs ext4 --cap 20MiB")
    );
    assert_eq!(
        one("STALLSCOPE_X=1 stallscope report a.jsonl --svg 'a b.svg' | head").as_deref(),
        Some("report a.jsonl --svg a b.svg")
    );
    assert_eq!(
        one("cargo run --release -- run --duration 30s").as_deref(),
        Some("run --duration 30s")
    );
    assert_eq!(one("stallscope man > x.1").as_deref(), Some("man"));
    assert_eq!(one("#   stallscope run"), None);
    assert_eq!(one("mkdir -p x"), None);
    let lines =
        fenced_lines("text\n```sh\nstallscope run \\\n  --duration 1s\n```\nstallscope no\n");
    assert_eq!(
        lines,
        vec![(3, "stallscope run    --duration 1s".to_string())]
    );
}

#[test]
fn screens_and_printouts_are_not_commands() {
    let page = "```\nstallscope  target 1/2 /mnt/ext4\n```\n\
                ```\n$ stallscope report a.jsonl\nstallscope report — a.jsonl\n```\n\
                ```sh\nstallscope lab up \\\n  --fs xfs\n```\n";
    let lines: Vec<String> = fenced_lines(page).into_iter().map(|(_, l)| l).collect();
    assert_eq!(
        lines,
        [
            "$ stallscope report a.jsonl",
            "stallscope lab up    --fs xfs"
        ]
    );
    assert_eq!(
        unbracket(vec!["replay".into(), "[--speed".into(), "8]".into()]).unwrap(),
        ["replay", "--speed", "8"]
    );
    assert!(unbracket(vec!["--mode".into(), "mmap|direct".into()]).is_none());
}
