//! Private tracefs instances for the tests' own accounts of what the
//! kernel did (`sched_truth`, `wb_truth`): made, read and removed here.

use std::io::Read;
use std::path::{Path, PathBuf};

pub const TRACEFS: &str = "/sys/kernel/tracing";

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
