//! Root-only: a live trial (`trial --observe`) on a running server on a
//! capped lab, observed by pid. PostgreSQL under a rate-limited pgbench
//! whose client count doubles in the middle gives `inconclusive`, not a
//! verdict; on a rate-limited `stallscope run` of our own, SIGTERM in a B
//! window, and SIGKILL followed by the next stallscope run, leave the
//! knob as it was, read from the kernel's own file. The knob is the lab
//! device's bdi `strict_limit`, so nothing outside the lab changes. One
//! at a time: they flip a knob.

mod common;

use common::pg::{have_postgres, PgLab};
use common::{bin, capped};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// A writer of our own at 10 MiB/s (160 × 64 KiB buffered writes a
/// second, a sync every 2 s) on `mount`, under the lab's 20 MiB/s cap.
const WRITER: &str = "run --mode buffered --threads 1 --record-size 64KiB --rate 160 --sync periodic:2s --duration 10m --format jsonl";

fn writer_cmd(mount: &Path) -> String {
    format!(
        "{} {WRITER} --target {}",
        env!("CARGO_BIN_EXE_stallscope"),
        mount.display()
    )
}

/// Kills (and reaps) a child on drop: a failed assertion leaves nothing running.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sh -c SCRIPT` in `dir`, quiet, as the observed server.
fn server(script: &str, dir: &Path) -> Reaped {
    Reaped(
        Command::new("sh")
            .args(["-c", script])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// A capped lab ext4 and its device's bdi `strict_limit` file, or None
/// after recording the skip.
fn lab_and_knob(test: &str) -> Option<(common::CappedFs, String)> {
    let lab = capped(test, "ext4", 20)?;
    let knob = format!(
        "/sys/class/bdi/{}:{}/strict_limit",
        lab.fs.major, lab.fs.minor
    );
    Some((lab, knob))
}

/// `trial --observe PID` flipping `knob` to `value`, 10 s windows, 6 pairs.
fn live_trial(pid: u32, knob: &str, value: &str, format: &str) -> Command {
    let mut c = bin();
    c.args(["trial", "--observe", &pid.to_string()])
        .args(["--setting", &format!("{knob}={value}")])
        .args(["--window", "10s", "--pairs", "6", "--format", format])
        .args(["--", "--stall-threshold", "50ms"]);
    c
}

fn read(p: &str) -> String {
    std::fs::read_to_string(p).unwrap().trim().to_string()
}

/// Waits until `path` reads `want` (at most `secs`).
fn wait_for(path: &str, want: &str, secs: u64) {
    let t0 = Instant::now();
    while read(path) != want {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "{path} never became {want} (is {})",
            read(path)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn pgbench_clients_doubled_mid_trial_is_inconclusive() {
    let test = "pgbench_clients_doubled_mid_trial_is_inconclusive";
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !common::need_root(test) {
        return;
    }
    if !have_postgres() {
        common::skip(
            test,
            "PostgreSQL or pgbench missing (apt-get install postgresql)",
        );
        return;
    }
    let pg = PgLab::start(20, 1);
    // A steady server: no checkpoint or autovacuum burst inside the
    // trial, so its write rate follows its clients alone.
    for sql in [
        "ALTER SYSTEM SET checkpoint_timeout = '1h'",
        "ALTER SYSTEM SET autovacuum = off",
        "SELECT pg_reload_conf()",
    ] {
        pg.server.psql(sql);
    }
    let knob = format!(
        "/sys/class/bdi/{}:{}/strict_limit",
        pg.lab.fs.major, pg.lab.fs.minor
    );
    let before = read(&knob);
    // Two clients at 100 transactions a second, and from 75 s (window 7
    // or 8 of 14) two more: pgbench's client count and load doubled.
    let clients = ["-c", "2", "-j", "1", "-R", "100", "-T"];
    let quiet = |mut c: Command| {
        c.stdout(Stdio::null()).stderr(Stdio::null());
        Reaped(c.spawn().unwrap())
    };
    let _first = quiet(pg.server.pgbench_cmd(&[&clients[..], &["220"]].concat()));
    std::thread::sleep(Duration::from_secs(2));
    let trial = live_trial(pg.server.pid(), &knob, "1", "json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(75));
    let _second = quiet(pg.server.pgbench_cmd(&[&clients[..], &["150"]].concat()));
    let out = trial.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "trial: {err}");
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rates: Vec<f64> = j["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["write_mib_s"].as_f64().unwrap())
        .collect();
    eprintln!("write MiB/s per window: {rates:.2?}\n{}", j["load"]);
    assert_eq!(j["verdict"], "inconclusive", "{}", j["load"]);
    assert!(j["load"].as_str().unwrap().starts_with("load changed"));
    // The windows line up with the wall clock: 14 of 10 s, back to back.
    let ws = j["windows"].as_array().unwrap();
    assert_eq!(ws.len(), 14);
    assert_eq!(
        (ws[0]["side"].as_str(), ws[3]["side"].as_str()),
        (Some("A"), Some("B"))
    );
    for p in ws.windows(2) {
        let gap = p[1]["start_unix"].as_f64().unwrap() - p[0]["end_unix"].as_f64().unwrap();
        assert!(gap.abs() < 0.01, "windows back to back: {gap}");
    }
    let len = ws[0]["end_unix"].as_f64().unwrap() - ws[0]["start_unix"].as_f64().unwrap();
    assert!((len - 10.0).abs() < 0.01, "{len}");
    assert_eq!(read(&knob), before, "the knob is back");
}

#[test]
fn sigterm_in_a_b_window_and_sigkill_then_the_next_run_put_the_knob_back() {
    let test = "sigterm_in_a_b_window_and_sigkill_then_the_next_run_put_the_knob_back";
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some((lab, knob)) = lab_and_knob(test) else {
        return;
    };
    let before = read(&knob);
    assert_eq!(before, "0", "the lab's device starts without strict_limit");
    let srv = server(
        &format!("exec {}", writer_cmd(&lab.fs.mount)),
        &lab.fs.mount,
    );
    for (sig, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGKILL, "SIGKILL")] {
        let mut t = Reaped(
            live_trial(srv.0.id(), &knob, "1", "text")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        // Windows 1-3 are A (the A/A pair, then A of pair 1): B from 30 s.
        wait_for(&knob, "1", 60);
        std::thread::sleep(Duration::from_secs(2));
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        assert_eq!(unsafe { libc::kill(t.0.id() as i32, sig) }, 0);
        let st = t.0.wait().unwrap();
        assert!(!st.success(), "{name}: the trial reports it did not finish");
        if sig == libc::SIGTERM {
            let mut err = String::new();
            use std::io::Read as _;
            t.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            assert!(err.contains("interrupted"), "{err}");
            assert_eq!(read(&knob), before, "SIGTERM: the knob is back at once");
        } else {
            assert_eq!(read(&knob), "1", "SIGKILL: nothing ran to put it back");
            // The next stallscope run as root finds the dead trial's hold.
            let out = bin().arg("probe").output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(read(&knob), before, "the next run put it back: {err}");
            assert!(err.contains("strict_limit"), "it says so: {err}");
        }
    }
    drop(srv);
}

#[test]
fn only_runtime_knobs_on_a_live_server() {
    let test = "only_runtime_knobs_on_a_live_server";
    if !common::need_root(test) {
        return;
    }
    let out = bin()
        .args(["trial", "--observe", "1", "--setting", "vm.swappiness=10"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("only the dirty sysctls"), "{err}");
    let out = bin()
        .args(["trial", "--observe", "1", "--setting", "vm.dirty_bytes=1"])
        .args(["--mount-option", "commit=1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("for the lab"), "{err}");
}
