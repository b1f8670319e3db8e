//! Root-only: `lab up` / `lab down` leave losetup, the mount table, the
//! dirty sysctls and the blkio caps exactly as before — after a clean run,
//! after an `up` that fails halfway, and after `up` was killed mid-way.
//! These tests change global state, so they run one at a time.

mod common;

use common::{bin, have, need_root, skip};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// Everything lab up may touch, as text.
fn system_state() -> String {
    let run = |c: &str, a: &[&str]| {
        String::from_utf8_lossy(&Command::new(c).args(a).output().unwrap().stdout).into_owned()
    };
    let mounts: String = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .map(|l| l.split(' ').skip(2).collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    let vm: String = [
        "dirty_bytes",
        "dirty_ratio",
        "dirty_background_bytes",
        "dirty_background_ratio",
    ]
    .iter()
    .map(|k| {
        format!(
            "{k}={}",
            std::fs::read_to_string(format!("/proc/sys/vm/{k}")).unwrap()
        )
    })
    .collect();
    let blkio = std::fs::read_to_string("/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device")
        .unwrap_or_default();
    // cgroup v2: the controllers the root passes down, and the lab's group.
    let v2 = v2_root().map_or(String::new(), |r| {
        let subtree = std::fs::read_to_string(r.join("cgroup.subtree_control")).unwrap_or_default();
        let group = r.join(stallscope::source::cgroup::LAB_GROUP);
        format!(
            "v2 subtree_control: {subtree}lab group: {}\n",
            group.exists()
        )
    });
    format!("{}\n{mounts}\n{vm}\n{blkio}\n{v2}", run("losetup", &["-a"]))
}

fn v2_root() -> Option<std::path::PathBuf> {
    stallscope::source::cgroup::Cgroups::detect().v2_root
}

/// Whether the lab caps through the v1 root blkio throttle here (else in
/// a v2 group).
fn caps_on_v1() -> bool {
    stallscope::source::cgroup::Cgroups::detect()
        .v1_write_bps_file()
        .is_some()
}

fn ready(name: &str) -> bool {
    if !need_root(name) {
        return false;
    }
    if !have("mkfs.ext4") || !have("mkfs.xfs") {
        skip(
            name,
            "mkfs.ext4 / mkfs.xfs missing (apt-get install e2fsprogs xfsprogs)",
        );
        return false;
    }
    true
}

fn lab(args: &[&str], dir: &Path) -> std::process::Output {
    bin()
        .arg("lab")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn up_then_down_restores_everything() {
    if !ready("up_then_down_restores_everything") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = tempfile::tempdir_in("/var/tmp").unwrap();
    let dir = base.path().join("lab");
    let before = system_state();
    let out = lab(
        &[
            "up",
            "--fs",
            "ext4,xfs",
            "--size",
            "512MiB",
            "--cap",
            "50MiB/s",
            "--dirty-bytes",
            "256M",
        ],
        &dir,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let during = system_state();
    assert_ne!(before, during);
    assert!(during.contains("268435456"), "dirty_bytes set");
    for fs in ["ext4", "xfs"] {
        let m = dir.join("mnt").join(fs);
        std::fs::write(m.join("probe"), b"x").expect("lab fs writable");
        std::fs::remove_file(m.join("probe")).unwrap();
    }
    // Twice is safe.
    let again = lab(&["up", "--fs", "ext4,xfs", "--size", "512MiB"], &dir);
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already up"));
    let st = lab(&["status"], &dir);
    assert!(String::from_utf8_lossy(&st.stdout).contains("capped at 50MiB/s"));
    let down = lab(&["down"], &dir);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert_eq!(before, system_state());
    assert!(!dir.exists(), "images and state removed");
}

/// A PATH whose mkfs.xfs is `body` (to fail or hang on purpose).
fn fake_mkfs_xfs(dir: &Path, body: &str) -> String {
    let f = dir.join("mkfs.xfs");
    std::fs::write(&f, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn a_failed_up_undoes_itself() {
    if !ready("a_failed_up_undoes_itself") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = tempfile::tempdir_in("/var/tmp").unwrap();
    let dir = base.path().join("lab");
    let path = fake_mkfs_xfs(
        base.path(),
        "echo 'mkfs.xfs: simulated failure' >&2; exit 1",
    );
    let before = system_state();
    let out = bin()
        .args([
            "lab",
            "up",
            "--fs",
            "ext4,xfs",
            "--size",
            "512MiB",
            "--dirty-bytes",
            "256M",
            "--dir",
        ])
        .arg(&dir)
        .env("PATH", path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("simulated failure") && err.contains("undoing"),
        "{err}"
    );
    assert_eq!(before, system_state(), "ext4 half was undone");
    let down = lab(&["down"], &dir);
    assert!(down.status.success());
    assert_eq!(before, system_state());
}

#[test]
fn down_after_up_was_killed_midway() {
    if !ready("down_after_up_was_killed_midway") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = tempfile::tempdir_in("/var/tmp").unwrap();
    let dir = base.path().join("lab");
    let path = fake_mkfs_xfs(base.path(), "sleep 30");
    let before = system_state();
    let mut child = bin()
        .args([
            "lab", "up", "--fs", "ext4,xfs", "--size", "512MiB", "--cap", "50MiB", "--dir",
        ])
        .arg(&dir)
        .env("PATH", path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until ext4 is mounted and xfs's mkfs is hanging, then SIGKILL.
    let t0 = Instant::now();
    while !std::fs::read_to_string(dir.join("state.json"))
        .unwrap_or_default()
        .contains("xfs.img")
        || !std::fs::read_to_string(dir.join("state.json"))
            .unwrap_or_default()
            .contains("/dev/loop")
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "lab up never got to xfs"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = Command::new("pkill")
        .args(["-f", &format!("{}/mkfs.xfs", base.path().display())])
        .status();
    assert_ne!(before, system_state(), "something was left to undo");
    let down = lab(&["down"], &dir);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert_eq!(before, system_state());
}

#[test]
fn lab_up_refuses_without_root_tools_or_room() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = lab(&["up", "--fs", "zfs"], &base.path().join("lab"));
    assert_eq!(out.status.code(), Some(2));
    let out = lab(
        &["up", "--fs", "ext4", "--size", "1EiB"],
        &base.path().join("lab"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("free") || err.contains("root"), "{err}");
}

/// A serial test's start: its lock, a fresh lab dir under /var/tmp and
/// the system as it was; None when it cannot run here (skip recorded).
struct Fresh {
    _serial: std::sync::MutexGuard<'static, ()>,
    _base: tempfile::TempDir,
    dir: std::path::PathBuf,
    before: String,
}

fn fresh(test: &str) -> Option<Fresh> {
    if !ready(test) {
        return None;
    }
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = tempfile::tempdir_in("/var/tmp").unwrap();
    Some(Fresh {
        _serial: serial,
        dir: base.path().join("lab"),
        _base: base,
        before: system_state(),
    })
}

/// Its stderr, after checking it succeeded.
fn ok(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    err
}

/// `lab SUB --dir DIR REST…`, for a REST that ends in `-- CMD`.
fn lab_first(args: &[&str], dir: &Path) -> std::process::Output {
    bin()
        .args(["lab", args[0], "--dir"])
        .arg(dir)
        .args(&args[1..])
        .output()
        .unwrap()
}

/// A small ext4 lab (`extra` options added); its mount point.
fn small_lab(dir: &Path, extra: &[&str]) -> std::path::PathBuf {
    let mut args = vec!["up", "--fs", "ext4", "--size", "256MiB"];
    args.extend_from_slice(extra);
    ok(&lab(&args, dir));
    dir.join("mnt").join("ext4")
}

/// Defect: with a process still on a lab mount, `lab down` retried umount
/// for minutes and deleted the image under the live mount. Now it names
/// the process, changes nothing and stops at once; once the process is
/// gone it finishes.
#[test]
fn down_names_what_holds_the_lab_and_changes_nothing() {
    let Some(f) = fresh("down_names_what_holds_the_lab_and_changes_nothing") else {
        return;
    };
    let mnt = small_lab(&f.dir, &["--cap", "0", "--dirty-bytes", "256M"]);
    let mut holder = Command::new("sleep")
        .arg("60")
        .current_dir(&mnt)
        .spawn()
        .unwrap();
    let state_before = std::fs::read(f.dir.join("state.json")).unwrap();
    let during = system_state();
    let t0 = Instant::now();
    let down = lab(&["down"], &f.dir);
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&down.stderr);
    assert!(!down.status.success(), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(
        err.contains(&format!("pid {} (sleep)", holder.id()))
            && err.contains(&format!("cwd {}", mnt.display())),
        "{err}"
    );
    assert!(err.contains("nothing changed"), "{err}");
    assert!(err.lines().all(|l| l.len() < 400), "short lines: {err}");
    assert_eq!(
        std::fs::read(f.dir.join("state.json")).unwrap(),
        state_before
    );
    assert_eq!(
        system_state(),
        during,
        "mount, loop device, sysctls as they were"
    );
    let st = lab(&["status"], &f.dir);
    assert!(String::from_utf8_lossy(&st.stdout).contains("mounted"));
    holder.kill().unwrap();
    holder.wait().unwrap();
    ok(&lab(&["down"], &f.dir));
    assert_eq!(f.before, system_state());
    assert!(!f.dir.exists(), "image, state and dirs removed");
}

/// `--force` stops what holds the lab (SIGTERM is enough for sleep), then
/// undoes everything.
#[test]
fn down_force_stops_the_holders_then_finishes() {
    let Some(f) = fresh("down_force_stops_the_holders_then_finishes") else {
        return;
    };
    let mnt = small_lab(&f.dir, &["--cap", "0"]);
    std::fs::write(mnt.join("held"), b"x").unwrap();
    // A child holding an fd (not its cwd) on the mount.
    let mut holder = Command::new("sh")
        .args([
            "-c",
            &format!("exec 3<{}/held; exec sleep 60", mnt.display()),
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let err = ok(&lab(&["down", "--force"], &f.dir));
    assert!(
        err.contains(&format!("pid {}", holder.id()))
            && err.contains("fd 3")
            && err.contains("SIGTERM"),
        "{err}"
    );
    holder.wait().unwrap();
    assert_eq!(f.before, system_state());
    assert!(!f.dir.exists());
}

/// Where no process needs moving, `lab exec` says so and runs the command
/// as is, with its exit status, and `lab adopt` moves nothing: on cgroup v1
/// because the root group's throttle caps everyone (a lab with a cap), on
/// v2 because a lab without a cap has no group.
#[test]
fn exec_and_adopt_run_and_move_nothing_where_nothing_needs_moving() {
    let Some(f) = fresh("exec_and_adopt_run_and_move_nothing_where_nothing_needs_moving") else {
        return;
    };
    let (cap, why) = if caps_on_v1() {
        ("20MiB", "cgroup v1")
    } else {
        ("0", "no write cap")
    };
    small_lab(&f.dir, &["--cap", cap]);
    let lab_cmd = |args: &[&str]| lab_first(args, &f.dir);
    let out = lab_cmd(&["exec", "--", "sh", "-c", "cat /proc/self/cgroup; exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains(why));
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), own, "not moved");
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let err = ok(&lab_cmd(&["adopt", &sleeper.id().to_string()]));
    assert!(err.contains("nothing to move"), "{err}");
    let cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", sleeper.id())).unwrap();
    assert_eq!(cgroup, own, "not moved");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    ok(&lab(&["down"], &f.dir));
    assert_eq!(f.before, system_state());
}

/// The v2 group's moves on this kernel's real cgroup2 tree (here it may
/// have no controllers, so no io.max: the caps themselves are unit-tested
/// on a fake root). `lab exec` runs its command in the group, `lab adopt`
/// moves a process with its children, `lab down` moves them back and
/// removes the group.
#[test]
fn exec_adopt_and_down_move_processes_on_cgroup_v2() {
    use stallscope::source::cgroup::LAB_GROUP;
    let test = "exec_adopt_and_down_move_processes_on_cgroup_v2";
    let Some(root) = v2_root() else {
        skip(test, "no cgroup2 mounted");
        return;
    };
    let Some(f) = fresh(test) else {
        return;
    };
    assert!(!root.join(LAB_GROUP).exists(), "a group left over");
    std::fs::create_dir_all(&f.dir).unwrap();
    let mut st = stallscope::cmd::lab::state::LabState::default();
    let knobs = stallscope::knob::Registry::machine();
    let by = stallscope::cmd::lab::state::Claimant::lab(&knobs, &f.dir);
    let group = stallscope::cmd::lab::cap::ensure_group(&root, &f.dir, &mut st, &by).unwrap();
    let cgroup_of = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let lab_cmd = |args: &[&str]| lab_first(args, &f.dir);
    let out = lab_cmd(&["exec", "--", "sh", "-c", "cat /proc/self/cgroup; exit 4"]);
    assert_eq!(out.status.code(), Some(4));
    let inside = format!("0::/{LAB_GROUP}\n");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&inside));
    let mut server = Command::new("sh")
        .args(["-c", "sleep 30 & sleep 30 & wait"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let was = cgroup_of(server.id());
    let err = ok(&lab_cmd(&["adopt", &server.id().to_string()]));
    assert!(err.contains("3 processes"), "{err}");
    let procs = std::fs::read_to_string(group.join("cgroup.procs")).unwrap();
    assert_eq!(procs.lines().count(), 3, "{procs}");
    assert!(cgroup_of(server.id()).contains(&inside));
    ok(&lab(&["down"], &f.dir));
    assert_eq!(cgroup_of(server.id()), was, "moved back");
    assert!(!group.exists(), "group removed");
    assert!(!f.dir.exists());
    // Its two sleeps first (by parent pid), then the shell.
    let _ = Command::new("pkill")
        .args(["-P", &server.id().to_string()])
        .status();
    server.kill().unwrap();
    server.wait().unwrap();
    assert_eq!(f.before, system_state());
}
