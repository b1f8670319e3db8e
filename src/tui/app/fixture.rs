//! Synthetic snapshots for the tests of `app` and of `view`.

use super::*;
use crate::config::SyncPolicy;
use crate::model::cause::{Attribution, Cause, Evidence};
use crate::model::kernel::{DevInterval, KernelInterval};
use crate::model::ops::{new_histogram, OpKind};
use crate::model::snapshot::BdpStats;
use crate::model::snapshot::TargetInterval;
use crate::model::stall::Blocked;

pub fn meta(i: usize) -> TargetMeta {
    let (path, fs) = [("/mnt/ext4", "ext4"), ("/mnt/xfs", "xfs")][i % 2];
    TargetMeta {
        path: format!(
            "{path}{}",
            if i >= 2 { i.to_string() } else { String::new() }
        ),
        fs: fs.into(),
        device: format!("loop{i}"),
        mount_options: "rw,relatime".into(),
    }
}

pub fn header() -> Header {
    Header {
        mode: Mode::Mmap,
        threads: 4,
        record_size: 818,
        sync: SyncPolicy::Periodic(std::time::Duration::from_secs(10)),
        active: 0,
        recording: false,
        tracing: Err("not root".into()),
        replay: false,
    }
}

pub fn app(n: usize) -> App {
    App::new(header(), (0..n).map(meta).collect(), 120, Style::default())
}

pub fn stall(target: usize, start_s: f64, dur_ms: f64, thread: u32, cause: Cause) -> Stall {
    Stall {
        ev: Blocked::writer(
            target,
            thread,
            OpKind::Write,
            (start_s * 1e9) as u64,
            (dur_ms * 1e6) as u64,
        ),
        why: Attribution::high(cause, Evidence::default()),
    }
}

pub fn interval(target: usize, active: bool, ops: u64, lat_us: &[u64]) -> TargetInterval {
    let mut hist = new_histogram();
    for &v in lat_us {
        hist.record(v).expect("latency in range");
    }
    TargetInterval {
        target,
        active,
        mode: Mode::Mmap,
        threads: 4,
        ops,
        bytes: ops * 818,
        hist,
        sync_hist: new_histogram(),
        stalls: 0,
        minflt: 0,
        majflt: 0,
        bdp: Some(BdpStats {
            events: 3,
            pause_ms: 120,
            max_pause_ms: 80,
        }),
        wb_waits: Some(0),
        failed: false,
    }
}

pub fn kernel(n: usize, dirty_mib: u64) -> KernelInterval {
    let dev = |i: usize| {
        Some(DevInterval {
            name: format!("loop{i}"),
            write_mib_per_s: 50.0,
            util_pct: 80.0,
            inflight: 4,
            w_await_ms: 3.0,
            flushes: None,
        })
    };
    KernelInterval {
        dirty_kib: Some(dirty_mib * 1024),
        writeback_kib: Some(10 * 1024),
        dirty_thresh_kib: Some(256 * 1024),
        dirty_bg_thresh_kib: Some(64 * 1024),
        nr_dirty: None,
        nr_writeback: None,
        dirtied_pages: None,
        written_pages: None,
        pgmajfault: None,
        psi_io_some_pct: Some(30.0),
        psi_io_full_pct: Some(12.0),
        devs: (0..n).map(dev).collect(),
    }
}

/// Interval `index` (1 s long, ending at `index` s) for `n` targets,
/// target `active` running, ops and latencies from the index.
pub fn snapshot(index: u64, n: usize, active: usize, stalls: Vec<Stall>) -> Snapshot {
    let targets = (0..n)
        .map(|i| {
            let on = i == active;
            let ops = if on { 10_000 + 100 * (index % 7) } else { 0 };
            let mut ti = interval(i, on, ops, &[]);
            if on {
                // p99 3 ms, max 250 ms: both must be readable.
                ti.hist.record_n(300, 985).expect("in range");
                ti.hist.record_n(3_000, 14).expect("in range");
                ti.hist.record(250_000).expect("in range");
            }
            ti
        })
        .collect();
    Snapshot {
        index,
        t_s: index as f64,
        interval_s: 1.0,
        targets,
        stalls,
        kernel: Some(kernel(n, 40 + index % 50)),
        raw: None,
        wb_starts: None,
        in_progress: Vec::new(),
        events: Vec::new(),
        observed: Vec::new(),
    }
}

/// `secs` intervals with a stall on the active target every 30 s.
pub fn filled(n: usize, secs: u64) -> App {
    let mut a = app(n);
    for i in 1..=secs {
        let st = if i % 30 == 0 {
            vec![stall(0, i as f64 - 0.5, 2300.0, 7, Cause::DirtyThrottle)]
        } else {
            vec![]
        };
        a.on_snapshot(&snapshot(i, n, 0, st));
    }
    a
}
