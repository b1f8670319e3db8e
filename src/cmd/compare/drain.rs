//! Between runs: dirty data written back and the page cache dropped, so
//! no run pays for the previous one's data.

use crate::source::proc::{read_meminfo, ProcRoot};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Dirty+Writeback below this counts as drained.
const DRAINED_KIB: u64 = 16 << 10;
/// The longest we wait for it; a disk that never drains must not hang us.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Writes dirty data back, drops the page cache when root and waits until
/// Dirty+Writeback is small, saying what is left about once a second.
pub fn drain(before: &str, stop: &AtomicBool, progress: &mut dyn FnMut(&str)) {
    let root = unsafe { libc::geteuid() } == 0;
    let caches = if root {
        ""
    } else {
        " (not root: page cache kept)"
    };
    progress(&format!("draining dirty data before {before}…{caches}"));
    // sync() blocks until the data is written: in a thread, so we can
    // report and give up after the limit.
    let (tx, rx) = crossbeam::channel::bounded::<()>(1);
    std::thread::spawn(move || {
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        let _ = tx.send(());
    });
    let t0 = Instant::now();
    let mut synced = false;
    while !stop.load(Ordering::Relaxed) {
        let left = dirty_kib();
        if synced && left.is_none_or(|k| k < DRAINED_KIB) {
            return;
        }
        if t0.elapsed() >= DRAIN_LIMIT {
            let mib = left.map_or(0, |k| k >> 10);
            let secs = DRAIN_LIMIT.as_secs();
            progress(&format!(
                "still {mib} MiB dirty after {secs} s; starting {before} anyway"
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
            if root {
                drop_page_cache(progress);
            }
        }
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
