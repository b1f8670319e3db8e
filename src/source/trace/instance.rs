//! The private instances under tracefs and tracefs itself: creating and
//! writing their files, removing a dead run's leftovers, mounting.

use super::INSTANCE_PREFIX;
use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const TRACEFS_MAGIC: u64 = 0x7472_6163;

/// Writes `value` to `file` of `instance`; Err names the file.
pub(super) fn write_file(instance: &Path, file: &str, value: &str) -> Result<(), String> {
    let path = instance.join(file);
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| format!("tracefs write {value:?} to {}: {e}", path.display()))
}

/// Removes `instances/stallscope-<pid>` whose pid no longer runs (a killed
/// run's leftover, which would otherwise trace forever); returns their names.
pub fn remove_stale_instances(tracefs_root: &Path) -> Vec<String> {
    let Ok(dir) = fs::read_dir(tracefs_root.join("instances")) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = instance_pid(&name) else {
            continue;
        };
        if pid <= 0 || pid_alive(pid) {
            continue;
        }
        clear_triggers(&entry.path());
        if fs::remove_dir(entry.path()).is_ok() {
            removed.push(name);
        }
    }
    removed.sort();
    removed
}

/// Removes every trigger a dead run left on its instance's sched_switch
/// (they keep the instance from being removed).
fn clear_triggers(instance: &Path) {
    let file = instance.join("events/sched/sched_switch/trigger");
    let Ok(text) = fs::read_to_string(&file) else {
        return;
    };
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let t = line.split(" [").next().unwrap_or(line).trim();
        let _ = fs::write(&file, format!("!{t}"));
    }
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// The file that says a stallscope run mounted tracefs at `root`.
pub(super) fn mount_marker(root: &Path) -> PathBuf {
    let tag: String = root
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    PathBuf::from(format!("/run/stallscope-tracefs{tag}.mounted"))
}

/// `stallscope-<pid>`, and `stallscope-<pid>.<n>` for a second session in
/// the same process (tests run several at once).
pub(super) fn instance_name() -> String {
    static SESSIONS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let pid = std::process::id();
    match SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
        0 => format!("{INSTANCE_PREFIX}{pid}"),
        n => format!("{INSTANCE_PREFIX}{pid}.{n}"),
    }
}

/// The pid in an instance name of ours.
fn instance_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(INSTANCE_PREFIX)?;
    rest.split('.').next()?.parse().ok()
}

/// True if another live stallscope session (another run, or another in
/// this process) still has an instance under `root` besides `own`.
pub(super) fn other_live_instances(root: &Path, own: &Path) -> bool {
    fs::read_dir(root.join("instances"))
        .map(|rd| {
            rd.flatten().any(|e| {
                e.path() != own
                    && e.file_name()
                        .to_str()
                        .and_then(instance_pid)
                        .is_some_and(pid_alive)
            })
        })
        .unwrap_or(false)
}

pub(super) fn is_tracefs(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid C string and a zeroed statfs to fill.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as u64 == TRACEFS_MAGIC
    }
}

pub(super) fn mount_tracefs(path: &Path) -> std::io::Result<()> {
    let target = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: valid C strings; tracefs takes no data.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A plain umount: it fails (EBUSY) rather than detach if someone else is using it.
pub(super) fn umount(path: &Path) -> std::io::Result<()> {
    let target = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(target.as_ptr(), 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_instances_of_dead_pids_are_removed() {
        let root = tempfile::tempdir().unwrap();
        let inst = root.path().join("instances");
        fs::create_dir(&inst).unwrap();
        // 4194311 exceeds the largest pid_max (2^22), so it is never alive.
        let ours = format!("{INSTANCE_PREFIX}{}", std::process::id());
        for name in [
            "stallscope-4194311",
            "stallscope-4194311.2",
            &ours,
            "stallscope-1",
            "stallscope-x",
            "other",
        ] {
            fs::create_dir(inst.join(name)).unwrap();
        }
        assert_eq!(
            remove_stale_instances(root.path()),
            ["stallscope-4194311", "stallscope-4194311.2"]
        );
        let mut left: Vec<String> = fs::read_dir(&inst)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = vec![
            ours,
            "other".into(),
            "stallscope-1".into(),
            "stallscope-x".into(),
        ];
        want.sort();
        assert_eq!(left, want);
        assert!(remove_stale_instances(&root.path().join("missing")).is_empty());
    }
}
