//! Root-only: a trial (`stallscope trial`) puts back everything it
//! changed — when it ends by itself, when it gets SIGTERM in the middle of
//! a B run, and (through `lab down`) when it is killed with SIGKILL there,
//! tracefs included; a placebo trial (a knob set to the value it has)
//! says no_change; and `advise --try` stopped by SIGTERM in a card's B run
//! puts it back too. These change global state, so they run one at a time.
//! Without root each says it skipped (and fails under
//! STALLSCOPE_REQUIRE_ROOT_TESTS=1, as in CI).

mod common;

use common::machine::{device_of, instances_of, Machine};
use common::temp_lab::TempLab;
use common::{bin, have, need_root, skip};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// The lab (taken down on drop), and the machine before it.
struct Lab {
    _lab: TempLab,
    dir: PathBuf,
    before: Machine,
    _serial: std::sync::MutexGuard<'static, ()>,
}

/// A small ext4 lab under /var/tmp, capped, with dirty limits of its own;
/// None when it cannot run here (skip recorded).
fn lab(test: &str) -> Option<Lab> {
    if !need_root(test) {
        return None;
    }
    if !have("mkfs.ext4") {
        skip(test, "mkfs.ext4 missing (apt-get install e2fsprogs)");
        return None;
    }
    let has_strict = std::fs::read_dir("/sys/class/bdi")
        .map(|mut d| d.any(|e| e.unwrap().path().join("strict_limit").exists()))
        .unwrap_or(false);
    if !has_strict {
        skip(test, "this kernel has no per-device strict_limit");
        return None;
    }
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = Machine::now();
    let lab = TempLab::up(&[
        "--fs",
        "ext4",
        "--size",
        "512MiB",
        "--cap",
        "20MiB",
        "--dirty-bytes",
        "128MiB",
        "--dirty-background-bytes",
        "32MiB",
    ]);
    Some(Lab {
        dir: lab.dir.clone(),
        _lab: lab,
        before,
        _serial: serial,
    })
}

/// `trial` on the lab with `settings`, short runs.
fn trial(lab: &Lab, settings: &[&str]) -> Command {
    common::trial::trial(&lab.dir, settings)
}

/// The changes a B run makes: a device limit (max_bytes, kept as
/// max_ratio_fine, and strict_limit) and a lower background limit.
const CHANGE: [&str; 3] = [
    "/sys/class/bdi/{bdi}/max_bytes=33554432",
    "/sys/class/bdi/{bdi}/strict_limit=1",
    "vm.dirty_background_bytes=16777216",
];

/// The lab device's `major:minor`.
fn lab_dev(lab: &Lab) -> String {
    device_of(&lab.dir.join("mnt/ext4"))
}

fn strict_limit(lab: &Lab) -> String {
    std::fs::read_to_string(format!("/sys/class/bdi/{}/strict_limit", lab_dev(lab)))
        .unwrap()
        .trim()
        .to_string()
}

fn background() -> String {
    std::fs::read_to_string("/proc/sys/vm/dirty_background_bytes")
        .unwrap()
        .trim()
        .to_string()
}

/// Starts the trial and returns once a B run has the change in force.
fn in_a_b_run(lab: &Lab) -> Child {
    let mut child = trial(lab, &CHANGE)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::trial::wait_for_b_run(&mut child, &lab.dir, || {
        strict_limit(lab) == "1" && background() == "16777216"
    });
    child
}

/// `lab down`, and the machine is as it was before `lab up`; returns
/// what `down` said.
fn down_and_as_before(lab: &Lab) -> String {
    let dev = lab_dev(lab);
    let out: Output = bin()
        .args(["lab", "down", "--dir"])
        .arg(&lab.dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    Machine::now().assert_as(&lab.before, &lab.dir, &dev);
    err
}

/// SIGKILL in a B run: nothing in the trial can put anything back. `lab
/// down` must: the trial's settings (recorded in the lab's state before
/// they were made), the lab, and what the killed run left in tracefs (its
/// instances, named for its pid, and a tracefs mount it made).
#[test]
fn a_trial_killed_mid_run_is_put_back_by_lab_down() {
    let Some(lab) = lab("a_trial_killed_mid_run_is_put_back_by_lab_down") else {
        return;
    };
    let lab_bg = background();
    let mut child = in_a_b_run(&lab);
    let pid = child.id();
    // The B settings are made before the B run starts tracing: on a busy
    // machine its instance comes a moment later (CI saw none at once).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while instances_of(pid).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        strict_limit(&lab),
        "1",
        "SIGKILL: nothing could put it back"
    );
    assert_ne!(lab_bg, "16777216", "the trial's value is not the lab's");
    let left = instances_of(pid);
    assert!(
        !left.is_empty(),
        "the killed trial's runs traced in an instance of their own (else this test shows nothing about tracefs)"
    );
    let said = down_and_as_before(&lab);
    for name in &left {
        assert!(
            said.contains(&format!(
                "removed tracefs instance {name} left by a dead run"
            )),
            "{said}"
        );
    }
    assert_eq!(instances_of(pid), Vec::<String>::new(), "in the kernel too");
}

#[test]
fn a_terminated_trial_puts_back_what_it_changed_itself() {
    let Some(lab) = lab("a_terminated_trial_puts_back_what_it_changed_itself") else {
        return;
    };
    let lab_bg = background();
    let child = in_a_b_run(&lab);
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(strict_limit(&lab), "0", "{err}");
    assert_eq!(background(), lab_bg, "the lab's own limit, not the trial's");
    let st = std::fs::read_to_string(lab.dir.join("state.json")).unwrap();
    assert!(!st.contains("\"trial\""), "no trial step left: {st}");
    down_and_as_before(&lab);
}

/// The placebo: a knob set to the value it has. One trial here (the
/// script `scripts/placebo.sh` runs ten); its verdict must be no_change
/// and the figures must come from real runs.
#[test]
fn a_placebo_trial_says_no_change_and_leaves_the_machine_as_it_was() {
    let Some(lab) = lab("a_placebo_trial_says_no_change_and_leaves_the_machine_as_it_was") else {
        return;
    };
    let same = format!("vm.dirty_background_bytes={}", background());
    let out = common::run_ok(&mut trial(&lab, &[same.as_str()]));
    let o: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(o["verdict"], "no_change", "{o:#}");
    assert_eq!(o["before"]["runs"], 8, "A/A and six A runs: {o:#}");
    assert_eq!(o["after"]["runs"], 6, "{o:#}");
    assert!(o["before"]["mib_per_s"].as_f64().unwrap() > 1.0, "{o:#}");
    assert_eq!(o["before"]["open_loop"], true);
    let recipe = o["recipe"].as_str().unwrap();
    assert!(recipe.contains(&format!("sysctl -w {same}")), "{recipe}");
    down_and_as_before(&lab);
}

/// `advise --try` on a recording made on the lab: the device-limit card is
/// tried by the trial engine, and SIGTERM in the middle of its B run puts
/// everything back (the cards are still printed, the error says it was
/// interrupted).
#[test]
fn advise_try_terminated_mid_card_puts_back_what_it_changed() {
    let Some(lab) = lab("advise_try_terminated_mid_card_puts_back_what_it_changed") else {
        return;
    };
    let lab_bg = background();
    let (rec, n) = record_on_lab(&lab);
    let mut child = bin()
        .arg("advise")
        .arg(&rec)
        .args([
            "--try",
            "--card",
            &n.to_string(),
            "--pairs",
            "6",
            "--run-secs",
            "2",
        ])
        .arg("--lab-dir")
        .arg(&lab.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let state = lab.dir.join("state.json");
    let t0 = Instant::now();
    loop {
        let s = std::fs::read_to_string(&state).unwrap_or_default();
        if s.contains("\"trial\"") && strict_limit(&lab) == "1" {
            break;
        }
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "advise --try ended before a B run: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(180),
            "no B run within 3 minutes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(err.contains("interrupted"), "{err}");
    assert!(text.contains("--try: interrupted"), "{text}");
    assert!(
        !text.contains("verified"),
        "no card verified without its numbers: {text}"
    );
    assert_eq!(strict_limit(&lab), "0", "{err}");
    assert_eq!(background(), lab_bg);
    let st = std::fs::read_to_string(&state).unwrap();
    assert!(!st.contains("\"trial\""), "no trial step left: {st}");
    std::fs::remove_file(&rec).unwrap();
    down_and_as_before(&lab);
}

/// A recording made on the lab, and the number of its device-limit card.
/// Unthrottled buffered writers fill the 128 MiB dirty limit at once and
/// throttle at the cap for the rest: dirty_throttle stalls, and the device
/// writes back at the cap, as the recording must show for `--try`. The
/// threshold is 20 ms: on 6.18 the kernel often paces them in pauses of
/// 15-30 ms, none reaching the default 100 ms (no stall, no card).
fn record_on_lab(lab: &Lab) -> (PathBuf, usize) {
    let rec = lab.dir.join("rec.jsonl");
    let out = bin()
        .args([
            "run",
            "--mode",
            "buffered",
            "--threads",
            "2",
            "--duration",
            "8s",
            "--stall-threshold",
            "20ms",
        ])
        .arg("--target")
        .arg(lab.dir.join("mnt/ext4"))
        .arg("--record")
        .arg(&rec)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = bin()
        .arg("advise")
        .arg(&rec)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let n = v["proposals"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c["knob"].as_str().unwrap().ends_with("/max_bytes") && c["gate"].is_null())
        .unwrap_or_else(|| panic!("no device-limit card: {v:#}"))
        + 1;
    (rec, n)
}
