//! Tests that cannot run here (no root, a missing tool) say so where a
//! person sees it. The test harness captures `eprintln!`, so a skip is
//! written straight to the stderr handle, and kept in a ledger for this
//! `cargo test` run (keyed by cargo's pid, the parent of every test
//! binary) that `tests/zz_skipped.rs`, the last test binary, prints as a
//! summary. With `STALLSCOPE_REQUIRE_ROOT_TESTS=1` (CI) a skip is a failure.

use std::io::Write;
use std::path::{Path, PathBuf};

pub const REQUIRE_VAR: &str = "STALLSCOPE_REQUIRE_ROOT_TESTS";

/// Records a skip of `test` because of `why` (or panics when skips are
/// forbidden); returns false so a test can `return` on it.
pub fn skip(test: &str, why: &str) -> bool {
    if std::env::var(REQUIRE_VAR).is_ok_and(|v| v == "1") {
        panic!("{test}: cannot run ({why}) but {REQUIRE_VAR}=1 forbids skipping");
    }
    let line = format!("SKIPPED {test}: {why}");
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
    record(&ledger_dir(), parent_pid(), &line);
    false
}

/// The skips of this `cargo test` run, taken out of the ledger (which is
/// removed, with the ledgers of earlier runs).
pub fn take_this_run() -> Vec<String> {
    take(&ledger_dir(), parent_pid())
}

/// Where the ledgers are: `test-skips/` in cargo's target folder.
fn ledger_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("test-skips")
}

/// Appends `line` in one write: tests skip from parallel threads, and
/// `writeln!` writes the text and its newline separately, so two lines
/// could run together (`needs rootSKIPPED …`).
fn record(dir: &Path, run: u32, line: &str) {
    let _ = std::fs::create_dir_all(dir);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(run.to_string()))
    {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

fn take(dir: &Path, run: u32) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join(run.to_string())).unwrap_or_default();
    let _ = std::fs::remove_dir_all(dir);
    text.lines().map(str::to_string).collect()
}

fn parent_pid() -> u32 {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_sees_its_own_skips_once_and_the_ledger_is_gone() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("test-skips");
        record(&dir, 41, "SKIPPED old: needs root");
        record(&dir, 42, "SKIPPED a: needs root");
        record(&dir, 42, "SKIPPED b: promtool not installed");
        assert_eq!(
            take(&dir, 42),
            ["SKIPPED a: needs root", "SKIPPED b: promtool not installed"]
        );
        assert!(!dir.exists(), "ledgers removed, an earlier run's too");
        assert!(take(&dir, 42).is_empty());
    }

    #[test]
    fn skips_recorded_from_parallel_threads_stay_one_per_line() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("test-skips");
        std::thread::scope(|s| {
            for th in 0..8 {
                let dir = &dir;
                s.spawn(move || {
                    for i in 0..200 {
                        record(dir, 7, &format!("SKIPPED t{th}_{i}: needs root"));
                    }
                });
            }
        });
        let lines = take(&dir, 7);
        assert_eq!(lines.len(), 8 * 200);
        for l in &lines {
            assert!(
                l.starts_with("SKIPPED t")
                    && l.ends_with(": needs root")
                    && l.matches("SKIPPED").count() == 1,
                "a line ran into another: {l:?}"
            );
        }
    }
}
