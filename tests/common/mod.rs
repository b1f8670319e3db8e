//! Shared by the integration tests: the binary, and the skip policy for
//! tests that need root (a skip fails when STALLSCOPE_REQUIRE_ROOT_TESTS=1).
#![allow(dead_code)]

use std::process::Command;

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_stallscope"))
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Prints a skip, or panics when skips are forbidden (CI).
pub fn skip(test: &str, why: &str) {
    if std::env::var("STALLSCOPE_REQUIRE_ROOT_TESTS").is_ok_and(|v| v == "1") {
        panic!("{test}: cannot run ({why}) but STALLSCOPE_REQUIRE_ROOT_TESTS=1 forbids skipping");
    }
    eprintln!("SKIPPED {test}: {why}");
}

/// True if the test can go on as root; otherwise records the skip.
pub fn need_root(test: &str) -> bool {
    if is_root() {
        return true;
    }
    skip(test, "needs root");
    false
}

pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}
