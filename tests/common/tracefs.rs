//! Private tracefs instances for the tests' own accounts of what the
//! kernel did (`sched_truth`, `wb_truth`): made, read and removed here.

use std::io::Read;
use std::path::{Path, PathBuf};

pub const TRACEFS: &str = "/sys/kernel/tracing";
/// stallscope's marker for a tracefs mount one of its runs made, holding
/// the mount's id (src/source/trace/mount.rs; the path and the text are
/// a convention between processes, not shared code).
const MOUNT_MARKER: &str = "/run/stallscope-tracefs_sys_kernel_tracing.mounted";

/// Removes the instance; if this mounted tracefs (`mounted`), unmounts it
/// when no instance is left, else hands the mount over to stallscope by
/// its marker, so that the last stallscope run out (or `lab down`)
/// unmounts it rather than nobody.
pub fn release(instance: &Path, mounted: bool) {
    let _ = std::fs::remove_dir(instance);
    if !mounted {
        return;
    }
    let others = std::fs::read_dir(Path::new(TRACEFS).join("instances"))
        .map(|rd| rd.count())
        .unwrap_or(0);
    let unmounted = others == 0
        && std::process::Command::new("umount")
            .arg(TRACEFS)
            .status()
            .is_ok_and(|s| s.success());
    if !unmounted {
        if let Some(id) = mount_id() {
            let _ = std::fs::write(MOUNT_MARKER, format!("{id}\n"));
        }
    }
}

/// The id of the tracefs mount on top at TRACEFS (mountinfo's first field).
fn mount_id() -> Option<u64> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .ok()?
        .lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(TRACEFS) && l.contains(" - tracefs "))?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

/// Mounts tracefs if it is not (true if this did), and makes the instance
/// `name-<pid>` with the monotonic clock and `kb` of buffer per CPU.
pub fn instance(name: &str, kb: u32) -> (PathBuf, bool) {
    let root = Path::new(TRACEFS);
    let mounted = !root.join("instances").is_dir();
    if mounted {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev", TRACEFS])
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount tracefs");
    }
    let instance = root
        .join("instances")
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir(&instance).unwrap();
    std::fs::write(instance.join("trace_clock"), "mono").unwrap();
    std::fs::write(instance.join("buffer_size_kb"), kb.to_string()).unwrap();
    (instance, mounted)
}

/// Hands `trace_pipe`'s whole lines to `each` until it ends or `stop`.
pub fn read_lines(mut pipe: std::fs::File, stop: impl Fn() -> bool, mut each: impl FnMut(&str)) {
    let mut buf = vec![0u8; 1 << 16];
    let mut partial = String::new();
    while !stop() {
        let n = match pipe.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        partial.push_str(&String::from_utf8_lossy(&buf[..n]));
        let Some(last) = partial.rfind('\n') else {
            continue;
        };
        let lines: String = partial.drain(..=last).collect();
        lines.lines().for_each(&mut each);
    }
}
