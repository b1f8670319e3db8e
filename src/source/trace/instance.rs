//! The private instances under tracefs: naming them for the process that
//! owns them, writing their files, removing a dead owner's leftovers.

use super::INSTANCE_PREFIX;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

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
