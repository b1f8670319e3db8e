//! Root-only: a trial (`stallscope trial`) puts back everything it
//! changed — when it ends by itself, when it gets SIGTERM in the middle of
//! a B run, and (through `lab down`) when it is killed with SIGKILL there;
//! and a placebo trial (a knob set to the value it has) says no_change;
//! `advise --try` stopped by SIGTERM in a card's B run puts it back too.
//! These change global state, so they run one at a time.

mod common;

use common::{bin, have, need_root, skip};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// Everything a trial on a lab may touch, as text: loop devices, mounts,
/// the vm dirty limits and every bdi's strict_limit and max_ratio_fine.
fn system_state() -> String {
    let losetup = Command::new("losetup").arg("-a").output().unwrap().stdout;
    let mounts: String = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .map(|l| l.split(' ').skip(2).collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    let mut knobs: Vec<PathBuf> = [
        "dirty_bytes",
        "dirty_ratio",
        "dirty_background_bytes",
        "dirty_background_ratio",
    ]
    .iter()
    .map(|k| Path::new("/proc/sys/vm").join(k))
    .collect();
    for e in std::fs::read_dir("/sys/class/bdi").unwrap() {
        let p = e.unwrap().path();
        knobs.extend(["strict_limit", "max_ratio_fine"].map(|k| p.join(k)));
    }
    let values: String = knobs
        .iter()
        .map(|k| {
            let v = std::fs::read_to_string(k).unwrap_or_default();
            format!("{}={}", k.display(), v.trim())
        })
        .collect::<Vec<_>>()
        .join("\n");
    format!("{}\n{mounts}\n{values}", String::from_utf8_lossy(&losetup))
}

struct Lab {
    _serial: std::sync::MutexGuard<'static, ()>,
    _base: tempfile::TempDir,
    dir: PathBuf,
    before: String,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = bin()
            .args(["lab", "down", "--force", "--dir"])
            .arg(&self.dir)
            .output();
    }
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
    let base = tempfile::tempdir_in("/var/tmp").unwrap();
    let dir = base.path().join("lab");
    let before = system_state();
    let out = bin()
        .args([
            "lab", "up", "--fs", "ext4", "--size", "512MiB", "--cap", "20MiB",
        ])
        .args([
            "--dirty-bytes",
            "128MiB",
            "--dirty-background-bytes",
            "32MiB",
        ])
        .arg("--dir")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(Lab {
        _serial: serial,
        _base: base,
        dir,
        before,
    })
}

const WORKLOAD: [&str; 10] = [
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

/// `trial` on the lab with `settings`, short runs.
fn trial(lab: &Lab, settings: &[&str]) -> Command {
    let mut c = bin();
    c.arg("trial").arg("--lab-dir").arg(&lab.dir);
    for s in settings {
        c.args(["--setting", s]);
    }
    c.args(["--pairs", "6", "--run-secs", "2", "--format", "json", "--"])
        .args(WORKLOAD);
    c
}

/// The changes a B run makes: strict_limit on and a lower background limit.
const CHANGE: [&str; 2] = [
    "/sys/class/bdi/{bdi}/strict_limit=1",
    "vm.dirty_background_bytes=16777216",
];

fn strict_limit(lab: &Lab) -> String {
    let mnt = lab.dir.join("mnt/ext4");
    let dev = Command::new("findmnt")
        .args(["-no", "MAJ:MIN"])
        .arg(&mnt)
        .output()
        .unwrap();
    let d = String::from_utf8_lossy(&dev.stdout).trim().to_string();
    std::fs::read_to_string(format!("/sys/class/bdi/{d}/strict_limit"))
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
    let state = lab.dir.join("state.json");
    let t0 = Instant::now();
    loop {
        let s = std::fs::read_to_string(&state).unwrap_or_default();
        if s.contains("\"trial\"") && strict_limit(lab) == "1" && background() == "16777216" {
            return child;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the trial ended ({st}) before a B run");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no B run within 2 minutes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `lab down`, and the machine is as it was before `lab up`.
fn down_and_as_before(lab: &Lab) {
    let out: Output = bin()
        .args(["lab", "down", "--dir"])
        .arg(&lab.dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(system_state(), lab.before, "the machine as it was");
}

#[test]
fn a_trial_killed_mid_run_is_put_back_by_lab_down() {
    let Some(lab) = lab("a_trial_killed_mid_run_is_put_back_by_lab_down") else {
        return;
    };
    let lab_bg = background();
    let mut child = in_a_b_run(&lab);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        strict_limit(&lab),
        "1",
        "SIGKILL: nothing could put it back"
    );
    assert_ne!(lab_bg, "16777216", "the trial's value is not the lab's");
    // KNOWN GAP: a run killed with SIGKILL leaves tracefs mounted (the
    // session mounted it) with its private instance tracing until the next
    // run removes it; `lab down` knows neither. Everything else must be as
    // it was, and the gap is named here rather than hidden.
    let tracefs = |s: &str| {
        s.lines()
            .filter(|l| !l.contains(" - tracefs "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let out: Output = bin()
        .args(["lab", "down", "--dir"])
        .arg(&lab.dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(tracefs(&system_state()), tracefs(&lab.before));
    // Clean the gap up by hand so the next test starts from the same machine.
    if !lab.before.contains(" - tracefs ") {
        let inst = Path::new("/sys/kernel/tracing/instances");
        for e in std::fs::read_dir(inst).into_iter().flatten().flatten() {
            let _ = std::fs::remove_dir(e.path());
        }
        let _ = Command::new("umount").arg("/sys/kernel/tracing").status();
    }
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
    let out = trial(&lab, &[same.as_str()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
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
/// writes back at the cap, as the recording must show for `--try`.
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
