//! Root-only: one owner for every kernel knob (`stallscope::knob`). Two
//! labs brought up by two processes at once, each with dirty limits of its
//! own and a cap on its device; a trial on one of them, killed with
//! SIGKILL in its B run while a second trial is refused; the next
//! stallscope run puts the killed trial's changes back (the labs' values,
//! not the originals, where a lab still holds a knob); `lab down` of each
//! leaves the other's values; and at the end every knob, read from the
//! kernel's own files, is at its value from before the test. These change
//! global state, so they run one at a time. Without root the test says it
//! skipped (and fails under STALLSCOPE_REQUIRE_ROOT_TESTS=1, as in CI).

mod common;

use common::machine::{device_of, Machine};
use common::trial::trial;
use common::{bin, have, need_root, skip};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

const BLKIO: &str = "/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device";

/// The knobs `Machine` does not read: the v1 blkio caps and the v2
/// root's subtree_control (when there is one).
fn cgroup_knobs() -> (String, String) {
    let v2 = stallscope::source::cgroup::Cgroups::detect().v2_root;
    let sub = v2
        .map(|r| std::fs::read_to_string(r.join("cgroup.subtree_control")).unwrap_or_default())
        .unwrap_or_default();
    (std::fs::read_to_string(BLKIO).unwrap_or_default(), sub)
}

fn read(p: &str) -> String {
    std::fs::read_to_string(p).unwrap().trim().to_string()
}

/// vm.dirty_bytes and vm.dirty_background_bytes as they are now.
fn dirty() -> (String, String) {
    (
        read("/proc/sys/vm/dirty_bytes"),
        read("/proc/sys/vm/dirty_background_bytes"),
    )
}

fn mib(n: u64) -> String {
    (n << 20).to_string()
}

/// Takes a lab down on drop (a failed assertion must not leave it up).
struct Down(PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = lab(&["down", "--force"], &self.0).output();
    }
}

/// Kills a trial on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn lab(args: &[&str], dir: &Path) -> Command {
    let mut c = bin();
    c.arg("lab").args(args).arg("--dir").arg(dir);
    c
}

/// Its stderr, after checking it succeeded.
fn ok(out: Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{what}: {err}");
    err
}

/// `lab up` of a 1 GiB ext4 capped at 20 MiB/s with dirty limits
/// `dirty`/`dirty / 4` MiB, started (not waited for).
fn up(dir: &Path, dirty: u64) -> Child {
    lab(
        &[
            "up",
            "--fs",
            "ext4",
            "--size",
            "1GiB",
            "--cap",
            "20MiB",
            "--dirty-bytes",
            &format!("{dirty}MiB"),
            "--dirty-background-bytes",
            &format!("{}MiB", dirty / 4),
        ],
        dir,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

fn strict_limit(dev: &str) -> String {
    read(&format!("/sys/class/bdi/{dev}/strict_limit"))
}

/// Starts the trial and returns once its B run has the change in force.
fn in_a_b_run(dir: &Path, dev: &str) -> Killed {
    let change = [
        "/sys/class/bdi/{bdi}/strict_limit=1",
        "vm.dirty_background_bytes=16777216",
    ];
    let mut child = Killed(
        trial(dir, &change)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::trial::wait_for_b_run(&mut child.0, dir, || {
        strict_limit(dev) == "1" && dirty().1 == "16777216"
    });
    child
}

/// Whether the test can run here (else the skip is recorded).
fn ready(test: &str) -> bool {
    if !need_root(test) {
        return false;
    }
    if !have("mkfs.ext4") {
        skip(test, "mkfs.ext4 missing (apt-get install e2fsprogs)");
        return false;
    }
    if !Path::new(BLKIO).exists() {
        skip(test, "no cgroup v1 blkio throttle here");
        return false;
    }
    true
}

/// A second trial on the lab while trial `pid` runs there refuses, and
/// the first one's B settings stay.
fn a_second_trial_is_refused(dir: &Path, pid: u32, dev: &str) {
    let second = trial(dir, &["vm.dirty_background_bytes=1048576"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("a trial (pid {pid}) is running")),
        "{said}"
    );
    assert_eq!(strict_limit(dev), "1", "the first trial's, still");
    assert_eq!(dirty().1, "16777216", "the first trial's, still");
}

#[test]
fn two_labs_and_a_killed_trial_leave_every_knob_as_it_was() {
    if !ready("two_labs_and_a_killed_trial_leave_every_knob_as_it_was") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = Machine::now();
    let cgroups_before = cgroup_knobs();
    let base = tempfile::tempdir_in("/var/tmp").unwrap();
    let (a, b) = (base.path().join("a"), base.path().join("b"));
    let (_down_b, _down_a) = (Down(b.clone()), Down(a.clone()));
    // Two processes at once: the registry's lock orders their changes.
    let (up_a, up_b) = (up(&a, 256), up(&b, 128));
    ok(up_a.wait_with_output().unwrap(), "lab up a");
    ok(up_b.wait_with_output().unwrap(), "lab up b");
    let (dev_a, dev_b) = (
        device_of(&a.join("mnt/ext4")),
        device_of(&b.join("mnt/ext4")),
    );
    let labs = [(mib(256), mib(64)), (mib(128), mib(32))];
    assert!(labs.contains(&dirty()), "one lab's limits: {:?}", dirty());
    let blkio = cgroup_knobs().0;
    for dev in [&dev_a, &dev_b] {
        assert!(blkio.contains(&format!("{dev} {}", 20 << 20)), "{blkio}");
    }
    let out = lab(&["status"], &a).output().unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.contains("vm dirty limits") && status.contains("by this lab"),
        "{status}"
    );

    let mut killed = in_a_b_run(&a, &dev_a);
    let pid = killed.0.id();
    a_second_trial_is_refused(&a, pid, &dev_a);
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    assert_eq!(strict_limit(&dev_a), "1", "SIGKILL: nothing put it back");

    // The next stallscope run as root puts back what the dead trial held:
    // the labs' values where they hold the knob, else the original.
    let said = ok(lab(&["status"], &a).output().unwrap(), "status");
    assert!(
        said.contains(&format!("left by pid {pid}, which exited")),
        "{said}"
    );
    assert_eq!(
        Some(&strict_limit(&dev_a)),
        before.bdis[&dev_a].get("strict_limit"),
        "{said}"
    );
    assert!(
        labs.contains(&dirty()),
        "a lab's limits again: {:?}",
        dirty()
    );

    // A's down leaves B's limits and cap; B's puts the originals back.
    ok(lab(&["down"], &a).output().unwrap(), "lab down a");
    assert_eq!(dirty(), labs[1], "B is up: its limits stay");
    let blkio = cgroup_knobs().0;
    assert!(blkio.contains(&format!("{dev_b} {}", 20 << 20)), "{blkio}");
    assert!(!blkio.contains(&format!("{dev_a} ")), "{blkio}");
    ok(lab(&["down"], &b).output().unwrap(), "lab down b");

    let after = bin().args(["lab", "status"]).arg("--dir").arg(&a).output();
    let text = String::from_utf8_lossy(&after.unwrap().stdout).into_owned();
    assert!(text.contains("no knob held by stallscope"), "{text}");
    assert_eq!(
        cgroup_knobs(),
        cgroups_before,
        "blkio caps, subtree_control"
    );
    let now = Machine::now();
    assert_eq!(now.dirty, before.dirty, "vm dirty limits as before");
    assert_eq!(now.bdis, before.bdis, "every bdi's knobs as before");
    assert_eq!(now, before, "the machine as it was");
}
