//! Nothing global between a compare's (or a trial's) runs unless asked:
//! no `sync()` of the whole machine, no `drop_caches`. Checked from
//! outside: the kernel's own count of page-cache drops (`drop_pagecache`
//! in /proc/vmstat) and the kernel's record of the system calls the run's
//! process tree made (its own tracefs instance, `common::syscall_truth`).

mod common;

use std::path::Path;

fn drops() -> u64 {
    let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap();
    vmstat
        .lines()
        .find_map(|l| l.strip_prefix("drop_pagecache "))
        .expect("drop_pagecache in /proc/vmstat")
        .trim()
        .parse()
        .unwrap()
}

/// `compare` of two short runs on `dir` (extra args added); the names of
/// the sync-family calls its process tree made, in order.
fn compare(dir: &Path, extra: &[&str]) -> Vec<&'static str> {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    // This thread's forks are followed: the compare and all its threads.
    let truth = common::syscall_truth::SyscallTruth::start(&[me], &["sync", "syncfs"]);
    common::run_ok(
        common::bin()
            .args(["compare", "--target"])
            .arg(dir)
            .args(["--mode", "buffered,direct", "--each", "2s"])
            .args(extra),
    );
    let calls = truth.stop();
    assert_eq!(calls.lost, 0, "the kernel dropped events: cannot tell");
    calls.calls.iter().map(|c| c.name).collect()
}

#[test]
fn compare_between_runs_flushes_its_target_only_unless_asked() {
    let test = "compare_between_runs_flushes_its_target_only_unless_asked";
    if !common::need_root(test) {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let before = drops();
    let calls = compare(dir.path(), &[]);
    assert_eq!(drops(), before, "a compare dropped the page cache unasked");
    assert!(!calls.contains(&"sync"), "a global sync(): {calls:?}");
    assert!(
        calls.contains(&"syncfs"),
        "the target's filesystem was not flushed between runs: {calls:?}"
    );
    // Asked for: the machine's way, which the same counters see.
    let calls = compare(dir.path(), &["--drop-caches"]);
    assert!(
        drops() > before,
        "--drop-caches did not drop the page cache"
    );
    assert!(
        calls.contains(&"sync"),
        "--drop-caches did not sync: {calls:?}"
    );
}
