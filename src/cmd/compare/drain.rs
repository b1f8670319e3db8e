//! Between runs: the targets' dirty data written back, so no run pays for
//! the previous one's data.
//!
//! Only the targets' own filesystems are flushed (`syncfs`), never the
//! machine: a global `sync()` makes every process's dirty data go out and
//! `drop_caches` empties every process's page cache, which on a node that
//! serves anything else is a stall we caused. The previous run's files are
//! deleted when it ends, so its page cache goes with them. `--drop-caches`
//! (`Drain::machine`) asks for the old, global way on a lab machine.

use crate::source::proc::{read_meminfo, ProcRoot};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Dirty+Writeback below this counts as drained (global way only).
const DRAINED_KIB: u64 = 16 << 10;
/// The longest we wait for it; a disk that never drains must not hang us.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// How to drain before each run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drain {
    /// Drain at all (`--no-drain` turns it off).
    pub on: bool,
    /// The global way: `sync()`, the clean page cache dropped (root) and a
    /// wait until the machine's Dirty+Writeback is small.
    pub machine: bool,
}

impl Drain {
    /// The way a run drains unless told otherwise: the targets only.
    pub fn targets() -> Drain {
        Drain {
            on: true,
            machine: false,
        }
    }
}

/// Writes back the dirty data of the filesystems holding `targets` and
/// waits for it, saying what is left about once a second. With
/// `how.machine`, the whole machine's instead, and the page cache dropped.
pub fn drain(
    before: &str,
    targets: &[PathBuf],
    how: &Drain,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let drop_caches = how.machine && root;
    let what = if how.machine {
        "the machine's dirty data"
    } else {
        "the targets' dirty data"
    };
    let caches = if how.machine && !root {
        " (not root: page cache kept)"
    } else {
        ""
    };
    progress(&format!("writing back {what} before {before}…{caches}"));
    // The flush blocks until the data is written: in a thread, so we can
    // report and give up after the limit.
    let (tx, rx) = crossbeam::channel::bounded::<()>(1);
    let machine = how.machine;
    let dirs = targets.to_vec();
    std::thread::spawn(move || {
        if machine {
            // SAFETY: sync has no preconditions.
            unsafe { libc::sync() };
        } else {
            for d in &dirs {
                syncfs(d);
            }
        }
        let _ = tx.send(());
    });
    let t0 = Instant::now();
    let mut synced = false;
    while !stop.load(Ordering::Relaxed) {
        // After syncfs returned, the targets hold no dirty data of ours:
        // what the rest of the machine has dirty is not ours to wait for.
        let left = if machine { dirty_kib() } else { None };
        if synced && left.is_none_or(|k| k < DRAINED_KIB) {
            return;
        }
        if t0.elapsed() >= DRAIN_LIMIT {
            let secs = DRAIN_LIMIT.as_secs();
            progress(&format!(
                "{what} not written back after {secs} s; starting {before} anyway"
            ));
            return;
        }
        if let Some(k) = left {
            let mib = k >> 10;
            progress(&format!(
                "draining dirty data before {before}: {mib} MiB left"
            ));
        }
        if synced {
            std::thread::sleep(Duration::from_secs(1));
        } else if rx.recv_timeout(Duration::from_secs(1)).is_ok() {
            synced = true;
            if drop_caches {
                drop_page_cache(progress);
            }
        }
    }
}

/// `syncfs` on the filesystem holding `dir` (or its nearest existing
/// parent): that filesystem's dirty data only.
fn syncfs(dir: &std::path::Path) {
    let Some(d) = dir.ancestors().find(|a| a.is_dir()) else {
        return;
    };
    if let Ok(f) = std::fs::File::open(d) {
        use std::os::fd::AsRawFd;
        // SAFETY: the fd is open for the call's duration.
        unsafe { libc::syncfs(f.as_raw_fd()) };
    }
}

/// `1` drops the clean page cache; `3` would also drop dentries and
/// inodes, which no run depends on.
fn drop_page_cache(progress: &mut dyn FnMut(&str)) {
    if let Err(e) = std::fs::write("/proc/sys/vm/drop_caches", "1") {
        progress(&format!("cannot drop the page cache: {e}"));
    }
}

fn dirty_kib() -> Option<u64> {
    let m = read_meminfo(&ProcRoot::default()).ok()?;
    Some(m.dirty_kib? + m.writeback_kib.unwrap_or(0))
}
