//! Shared by the integration tests: the binary, and the skip policy for
//! tests that need root (a skip fails when STALLSCOPE_REQUIRE_ROOT_TESTS=1).
#![allow(dead_code)]

pub mod etcd;
pub mod log_load;
pub mod machine;
pub mod observer;
pub mod pg;
pub mod rocks;
pub mod sched_truth;
pub mod syscall_truth;
pub mod temp_lab;
pub mod tracefs;
pub mod trial;
pub mod wb_truth;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_stallscope"))
}

/// Runs `cmd` to its end; panics with its stderr unless it succeeded.
pub fn run_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Records a skip (shown at once and summed up by `zz_skipped`), or
/// panics when skips are forbidden (CI).
pub fn skip(test: &str, why: &str) {
    stallscope::base::skips::skip(test, why);
}

/// True if the test can go on as root; otherwise records the skip.
pub fn need_root(test: &str) -> bool {
    if is_root() {
        return true;
    }
    skip(test, "needs root");
    false
}

/// True if the test can go on as root with these programs installed;
/// otherwise records the skip (the first thing missing).
pub fn need_root_with(test: &str, programs: &[&str]) -> bool {
    if !need_root(test) {
        return false;
    }
    match programs.iter().find(|p| !have(p)) {
        Some(p) => {
            skip(test, &format!("needs {p}"));
            false
        }
        None => true,
    }
}

/// Spawns `cmd` and returns once the child runs the new program: spawn
/// returns when the kernel lets go of the parent, before exec names the
/// child, so until then its comm is the test thread's (`an_observed_pro`).
pub fn spawn_execd(cmd: &mut Command, comm: &str) -> Child {
    let child = cmd.spawn().unwrap();
    let path = format!("/proc/{}/comm", child.id());
    let t0 = Instant::now();
    while std::fs::read_to_string(&path)
        .unwrap_or_default()
        .trim_end()
        != comm
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "child {} never became {comm}",
            child.id()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    child
}

pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// DESIGN.md's slow disk: a 4 GiB loop filesystem with a write cap, dirty
/// limits 256M/64M, made by `stallscope lab up` (the cap on cgroup v1's
/// root blkio group, or on v2 in the lab's group, which this test process
/// joins for as long as it lasts: see [`temp_lab::TempLab::join`]).
/// Dropping it puts everything back (fields drop in order: the process
/// back in its cgroup, then `lab down`).
pub struct CappedFs {
    pub in_group: Option<stallscope::source::cgroup::CgroupJoin>,
    pub fs: temp_lab::LabFs,
    pub lab: temp_lab::TempLab,
}

/// A loop xfs capped at 50 MiB/s for a root test, or None after recording
/// the skip.
pub fn capped_xfs(test: &str) -> Option<CappedFs> {
    if !have("mkfs.xfs") {
        if need_root(test) {
            skip(test, "mkfs.xfs missing (apt-get install xfsprogs)");
        }
        return None;
    }
    capped(test, "xfs", 50)
}

/// A loop `fstype` capped at `cap_mib` MiB/s for a root test, or None
/// after recording the skip.
pub fn capped(test: &str, fstype: &str, cap_mib: u64) -> Option<CappedFs> {
    if !need_root(test) {
        return None;
    }
    let cap = format!("{cap_mib}MiB");
    let lab = temp_lab::TempLab::up(&[
        "--fs",
        fstype,
        "--size",
        "4GiB",
        "--cap",
        &cap,
        "--dirty-bytes",
        "256M",
        "--dirty-background-bytes",
        "64M",
    ]);
    let fs = lab.fs(fstype);
    Some(CappedFs {
        in_group: lab.join(&fs),
        fs,
        lab,
    })
}
