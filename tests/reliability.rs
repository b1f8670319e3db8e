//! Root-only: a full target, a target that goes read-only, and a run
//! killed with SIGKILL. The run never panics, the other target goes on, the
//! summary is printed, and the next start cleans what SIGKILL left.

mod common;

use common::{bin, have, need_root, skip};
use serde_json::Value;
use stallscope::cmd::lab::guards::LoopFs;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

fn lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn ready(name: &str) -> bool {
    if !need_root(name) {
        return false;
    }
    if !have("mkfs.ext4") {
        skip(name, "mkfs.ext4 missing (apt-get install e2fsprogs)");
        return false;
    }
    true
}

#[test]
fn a_full_target_backs_off_while_the_other_goes_on() {
    if !ready("a_full_target_backs_off_while_the_other_goes_on") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for mode in ["buffered", "mmap"] {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let fs = LoopFs::create(dir.path(), "ext4", 64 << 20).expect("64 MiB ext4");
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        let out = bin()
            .args([
                "run",
                "--mode",
                mode,
                "--duration",
                "6s",
                "--format",
                "jsonl",
                "--sync",
                "none",
            ])
            .args(["--segment-size", "8MiB", "--target"])
            .arg(&fs.mount)
            .arg("--target")
            .arg(shm.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{mode}: {:?} {err}", out.status);
        let ls = lines(&out);
        assert!(
            ls.iter()
                .any(|l| l["type"] == "event" && l["kind"] == "target_full"),
            "{mode}: a target_full event"
        );
        let shm_path = shm.path().display().to_string();
        let other: Vec<&Value> = ls
            .iter()
            .filter(|l| l["type"] == "interval" && l["target"] == shm_path.as_str())
            .collect();
        assert!(other.len() >= 5);
        assert!(
            other.iter().take(6).all(|l| l["ops"].as_u64().unwrap() > 0),
            "{mode}: the other target went on"
        );
        assert!(
            ls.iter().any(|l| l["type"] == "summary"),
            "{mode}: summary printed"
        );
    }
}

#[test]
fn a_target_removed_mid_run_fails_alone() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let gone = tempfile::tempdir_in("/dev/shm").unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let child = bin()
        .args([
            "run",
            "--mode",
            "buffered",
            "--duration",
            "6s",
            "--format",
            "jsonl",
            "--sync",
            "none",
        ])
        .args(["--segment-size", "4MiB", "--target"])
        .arg(gone.path())
        .arg("--target")
        .arg(shm.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    // Someone deletes the folder under the writers.
    // (writers may create a file between listing and removing: retry)
    for e in std::fs::read_dir(gone.path()).unwrap().flatten() {
        let t0 = Instant::now();
        while e.path().exists() && t0.elapsed() < Duration::from_secs(2) {
            let _ = std::fs::remove_dir_all(e.path());
        }
        assert!(!e.path().exists(), "removed {}", e.path().display());
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ls = lines(&out);
    assert!(
        ls.iter().any(|l| l["type"] == "event"
            && l["kind"] == "writer_error"
            && l["message"].as_str().unwrap_or("").contains("No such file")),
        "an event names the vanished target"
    );
    let shm_path = shm.path().display().to_string();
    let late: Vec<&Value> = ls
        .iter()
        .filter(|l| {
            l["type"] == "interval"
                && l["target"] == shm_path.as_str()
                && l["t_s"].as_f64().unwrap() > 3.0
                && l["t_s"].as_f64().unwrap() <= 6.0
        })
        .collect();
    assert!(
        !late.is_empty() && late.iter().all(|l| l["ops"].as_u64().unwrap() > 0),
        "the other target went on"
    );
    assert!(late.iter().all(|l| l.get("failed").is_none()), "not failed");
    let gone_path = gone.path().display().to_string();
    assert!(
        ls.iter().any(|l| l["type"] == "interval"
            && l["target"] == gone_path.as_str()
            && l["failed"] == true),
        "the vanished target is marked failed"
    );
    assert!(ls.iter().any(|l| l["type"] == "summary"));
}

#[test]
fn after_sigkill_the_next_start_cleans_scratch_and_tracefs() {
    if !need_root("after_sigkill_the_next_start_cleans_scratch_and_tracefs") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut child = bin()
        .args(["run", "--mode", "buffered", "--target"])
        .arg(t.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let instance = format!("/sys/kernel/tracing/instances/stallscope-{pid}");
    let t0 = Instant::now();
    while !std::path::Path::new(&instance).exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        std::path::Path::new(&instance).exists(),
        "tracing instance made"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let scratch = t.path().join(format!(".stallscope-{pid}"));
    assert!(scratch.exists(), "SIGKILL leaves the scratch");
    let out = bin()
        .args(["run", "--mode", "buffered", "--duration", "1s", "--target"])
        .arg(t.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("removed stale scratch"), "{err}");
    assert!(
        err.contains(&format!("stallscope-{pid}")),
        "names the stale tracefs instance: {err}"
    );
    assert!(!scratch.exists());
    assert!(
        !std::path::Path::new(&instance).exists(),
        "stale instance removed"
    );
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .contains(" - tracefs ");
    assert!(!mounted || std::path::Path::new("/sys/kernel/tracing/instances").exists());
}
