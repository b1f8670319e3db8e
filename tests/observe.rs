//! Observe mode against a separate process: another stallscope process is
//! the workload (mmap writers), and `run --observe PID` watches it with no
//! writers of its own. As root on a capped lab filesystem its threads'
//! dirty throttling must show as stalls attributed `dirty_throttle`; as an
//! ordinary user D-state counts, faults and write_bytes must still show, and
//! stallscope must say that throttle attribution needs root.

mod common;

use common::{bin, have, skip, spawn_execd};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The workload: a separate process writing through mmap, killed on drop.
struct Workload(Child);

impl Workload {
    fn start(mut cmd: Command, target: &Path, mode: &str, extra: &[&str]) -> Workload {
        cmd.args(["run", "--mode", mode, "--threads", "4", "--sync", "none"])
            .args(["--duration", "60s", "--format", "jsonl"])
            .args(extra)
            .arg("--target")
            .arg(target)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let w = Workload(cmd.spawn().expect("start the workload"));
        // Let it create its segments and start dirtying pages.
        std::thread::sleep(Duration::from_millis(1500));
        w
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        // SIGTERM: it removes its scratch folder on the way out.
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

fn observe(mut cmd: Command, pid: u32, secs: u32) -> (Vec<Value>, String) {
    let out = cmd
        .args([
            "run",
            "--format",
            "jsonl",
            "--duration",
            &format!("{secs}s"),
        ])
        .args(["--observe", &pid.to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "observe failed: {err}");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (lines, err)
}

fn of_type<'a>(lines: &'a [Value], ty: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == ty).collect()
}

#[test]
fn an_observed_mmap_writer_on_a_capped_fs_is_dirty_throttled() {
    let Some(lab) = common::capped_xfs("an_observed_mmap_writer_on_a_capped_fs_is_dirty_throttled")
    else {
        return;
    };
    let fs = &lab.fs;
    let work = Workload::start(bin(), &fs.mount, "mmap", &["--disk-budget", "3GiB"]);
    let (lines, err) = observe(bin(), work.pid(), 12);
    drop(work);
    eprintln!("observer stderr: {err}");

    assert!(
        of_type(&lines, "interval").is_empty(),
        "no writers of our own"
    );
    let summary = of_type(&lines, "summary")[0];
    assert_eq!(summary["ops"], 0, "{summary}");
    assert_eq!(summary["targets"].as_array().unwrap().len(), 0);

    let obs = of_type(&lines, "observed");
    assert!(
        obs.len() >= 10,
        "one observed line per interval: {}",
        obs.len()
    );
    assert!(obs.iter().all(|o| o["pid"] == work_pid(&lines)));
    let bdp: u64 = obs
        .iter()
        .map(|o| o["bdp"]["events"].as_u64().unwrap())
        .sum();
    let d_max = obs
        .iter()
        .map(|o| o["d_threads_max"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(bdp > 0, "throttle events of the observed threads");
    assert!(d_max > 0, "threads seen in D");

    let stalls = of_type(&lines, "stall");
    let throttled: Vec<&&Value> = stalls
        .iter()
        .filter(|s| s["cause"] == "dirty_throttle" && s["confidence"] == "high")
        .collect();
    eprintln!(
        "{} stalls, {} dirty_throttle (high); by cause {}",
        stalls.len(),
        throttled.len(),
        summary["observed"][0]["by_cause"]
    );
    assert!(!throttled.is_empty(), "no dirty_throttle stall: {stalls:?}");
    for s in &throttled {
        assert_eq!(s["pid"], obs[0]["pid"]);
        assert!(s["tid"].as_u64().unwrap() > 0);
        if s["op"] == "wait" {
            // A thread of the workload that waited for a throttled writer
            // (wake-up chains): the root of its chain is the throttling.
            let via = s["via"].as_array().expect("a waiting stall has a chain");
            assert_eq!(via.last().unwrap()["cause"], "dirty_throttle", "{s}");
            continue;
        }
        assert_eq!(s["op"], "blocked", "{s}");
        assert!(s["duration_ms"].as_f64().unwrap() >= 100.0, "{s}");
        // The tid is one of the workload's writer threads, named by the kernel.
        assert!(s["thread_comm"].as_str().unwrap().starts_with("ss-"), "{s}");
    }
    assert!(
        throttled.iter().any(|s| s["op"] == "blocked"),
        "the writers' own throttling: {throttled:?}"
    );
    let total = &summary["observed"][0];
    assert!(
        total["by_cause"]["dirty_throttle"]["count"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(total["write_bytes"].as_u64().unwrap() > 0, "{total}");
}

fn work_pid(lines: &[Value]) -> Value {
    of_type(lines, "observed")[0]["pid"].clone()
}

/// Both processes as user nobody when we are root (as ourselves otherwise).
fn unprivileged() -> Command {
    if common::is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_stallscope"));
        c
    } else {
        bin()
    }
}

#[test]
fn without_root_observe_shows_d_state_faults_and_writes_and_says_what_needs_root() {
    let name = "without_root_observe_shows_d_state_faults_and_writes_and_says_what_needs_root";
    if common::is_root() && !have("setpriv") {
        skip(name, "setpriv missing (util-linux) to drop root");
        return;
    }
    // On disk, not tmpfs: write_bytes counts pages dirtied for storage.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let work = Workload::start(
        unprivileged(),
        dir.path(),
        "mmap",
        &[
            "--rate",
            "20000",
            "--segment-size",
            "8MiB",
            "--disk-budget",
            "64MiB",
        ],
    );
    let (lines, err) = observe(unprivileged(), work.pid(), 4);
    drop(work);
    assert!(
        err.contains("needs root"),
        "says that throttle attribution needs root: {err}"
    );
    assert!(
        err.contains("wake-up chains need tracing (not root)"),
        "says that wake-up chains need root: {err}"
    );
    let obs = of_type(&lines, "observed");
    assert!(obs.len() >= 3, "{lines:?}");
    for o in &obs {
        assert!(o["d_threads_max"].is_u64(), "D-state count: {o}");
        assert!(o["bdp"].is_null(), "throttle unknown without root: {o}");
        assert!(o["threads"].as_u64().unwrap() >= 4, "{o}");
    }
    let minflt: u64 = obs.iter().map(|o| o["minflt"].as_u64().unwrap()).sum();
    let written: u64 = obs.iter().map(|o| o["write_bytes"].as_u64().unwrap()).sum();
    assert!(minflt > 0, "mmap writes fault pages in");
    assert!(written > 0, "write_bytes of the observed process");
}

#[test]
fn observing_nothing_that_exists_is_a_usage_error() {
    let out = bin()
        .args(["run", "--observe", "4000000000", "--duration", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no such process"), "{err}");
    let out = bin()
        .args([
            "run",
            "--observe-name",
            "no-such-process-xyz",
            "--duration",
            "1s",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no running process"));
}

#[test]
fn an_observed_process_that_exits_is_an_event_not_a_crash() {
    let mut child = spawn_execd(Command::new("sleep").arg("1"), "sleep");
    let (lines, _) = observe(bin(), child.id(), 3);
    let _ = child.wait();
    let exits: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "event" && l["kind"] == "process_exited")
        .collect();
    assert_eq!(exits.len(), 1, "{lines:?}");
    let summary = of_type(&lines, "summary")[0];
    assert_eq!(summary["observed"][0]["exited"], true);
    assert_eq!(summary["observed"][0]["comm"], "sleep");
}

#[test]
fn an_observe_recording_reads_back_into_report() {
    let mut child = spawn_execd(Command::new("sleep").arg("30"), "sleep");
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("obs.jsonl");
    let out = bin()
        .args([
            "run",
            "--duration",
            "3s",
            "--observe",
            &child.id().to_string(),
        ])
        .arg("--record")
        .arg(&rec)
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&rec).unwrap();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["observed"][0]["comm"], "sleep");
    assert_eq!(
        text.lines()
            .filter(|l| l.contains(r#""type":"observed""#))
            .count(),
        3,
        "one observed line per interval"
    );
    let rep = bin().arg("report").arg(&rec).output().unwrap();
    let rep = String::from_utf8_lossy(&rep.stdout);
    assert!(rep.contains("observing sleep"), "{rep}");
    assert!(
        rep.contains(&format!("observed sleep (pid {}): 0 stalls", child.id())),
        "{rep}"
    );
}
