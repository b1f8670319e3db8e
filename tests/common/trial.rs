//! A short `stallscope trial` of the root tests: six pairs of 2 s runs of
//! a buffered writer with a periodic sync, on a lab.

use std::path::Path;
use std::process::Command;

pub const WORKLOAD: [&str; 10] = [
    "--mode",
    "buffered",
    "--threads",
    "2",
    "--record-size",
    "4KiB",
    "--rate",
    "3000",
    "--sync",
    "every:2000",
];

/// `trial` on the lab at `dir` with `settings`, short runs, JSON out.
pub fn trial(dir: &Path, settings: &[&str]) -> Command {
    let mut c = super::bin();
    c.arg("trial").arg("--lab-dir").arg(dir);
    for s in settings {
        c.args(["--setting", s]);
    }
    c.args(["--pairs", "6", "--run-secs", "2", "--format", "json", "--"])
        .args(WORKLOAD);
    c
}

/// Returns once the trial `child` on the lab at `dir` is in a B run: its
/// steps in the lab's state and `in_force()` (its change read back from
/// the kernel). Panics when it ends first or after 2 minutes.
pub fn wait_for_b_run(child: &mut std::process::Child, dir: &Path, in_force: impl Fn() -> bool) {
    let state = dir.join("state.json");
    let t0 = std::time::Instant::now();
    loop {
        let s = std::fs::read_to_string(&state).unwrap_or_default();
        if s.contains("\"trial\"") && in_force() {
            return;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the trial ended ({st}) before a B run");
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(120),
            "no B run within 2 minutes"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
