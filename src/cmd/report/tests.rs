//! The fixtures every format's tests build recordings from, and the tests
//! of the model: segments, medians, merged percentiles, stalls by cause, the
//! span.

use super::*;
use crate::model::cause::{Attribution, Evidence};
use crate::model::kernel::KernelInterval;
use crate::model::ops::{new_histogram, OpKind};
use crate::model::stall::Blocked;
use hdrhistogram::Histogram;

pub(super) fn meta(path: &str, fs: &str) -> TargetMeta {
    TargetMeta {
        path: path.into(),
        fs: fs.into(),
        device: "/dev/loop0 (7:0)".into(),
        mount_options: "rw,relatime".into(),
    }
}

fn hist(values: &[u64]) -> Histogram<u64> {
    let mut h = new_histogram();
    for &v in values {
        h.record(v).unwrap();
    }
    h
}

pub(super) fn ti(
    target: usize,
    active: bool,
    mode: Mode,
    threads: u32,
    lat_us: &[u64],
) -> TargetInterval {
    TargetInterval {
        target,
        active,
        mode,
        threads,
        ops: lat_us.len() as u64,
        bytes: lat_us.len() as u64 * 818,
        hist: hist(lat_us),
        sync_hist: new_histogram(),
        stalls: 0,
        minflt: 0,
        majflt: 0,
        bdp: None,
        wb_waits: None,
        failed: false,
    }
}

/// The interval ending at second `i + 1`.
pub(super) fn snap(i: u64, targets: Vec<TargetInterval>, stalls: Vec<Stall>) -> Snapshot {
    Snapshot {
        index: i,
        t_s: (i + 1) as f64,
        interval_s: 1.0,
        targets,
        stalls,
        kernel: None,
        raw: None,
        wb_starts: None,
        in_progress: Vec::new(),
        events: Vec::new(),
        observed: Vec::new(),
    }
}

pub(super) fn stall(target: usize, start_s: f64, dur_ms: u64, cause: Cause) -> Stall {
    Stall {
        ev: Blocked::writer(
            target,
            0,
            if cause == Cause::Sync {
                OpKind::Sync
            } else {
                OpKind::Write
            },
            (start_s * 1e9) as u64,
            dur_ms * 1_000_000,
        ),
        why: Attribution::high(cause, Evidence::default()),
    }
}

pub(super) fn kernel(dirty_kib: u64) -> KernelInterval {
    KernelInterval {
        dirty_kib: Some(dirty_kib),
        writeback_kib: Some(dirty_kib / 4),
        dirty_thresh_kib: Some(256 << 10),
        dirty_bg_thresh_kib: Some(64 << 10),
        nr_dirty: None,
        nr_writeback: None,
        dirtied_pages: None,
        written_pages: None,
        pgmajfault: None,
        psi_io_some_pct: Some(12.5),
        psi_io_full_pct: None,
        devs: vec![None],
    }
}

pub(super) fn input<'a>(targets: &'a [TargetMeta], snaps: &'a [Snapshot]) -> ReportInput<'a> {
    ReportInput {
        title: "mmap × 4 threads, 818 B records, periodic:10s — lab, 6.1".into(),
        targets,
        snapshots: snaps,
        from_s: None,
        to_s: None,
        dirty_by_target: Vec::new(),
    }
}

/// Writers on target 0 (mmap × 4, then buffered × 4), then on target 1.
pub(super) fn moving() -> (Vec<TargetMeta>, Vec<Snapshot>) {
    let targets = vec![meta("/lab/ext4", "ext4"), meta("/lab/xfs", "xfs")];
    let setting = |i: u64| match i {
        0..=2 => (0, Mode::Mmap),
        3..=5 => (0, Mode::Buffered),
        _ => (1, Mode::Buffered),
    };
    let snaps = (0..8)
        .map(|i| {
            let (on, mode) = setting(i);
            let lat: Vec<u64> = (1..=10 * (i + 1)).collect();
            let ts = (0..2)
                .map(|t| ti(t, t == on, mode, 4, if t == on { &lat } else { &[] }))
                .collect();
            snap(i, ts, Vec::new())
        })
        .collect();
    (targets, snaps)
}

#[test]
fn segments_split_on_mode_change_and_target_switch() {
    let (targets, snaps) = moving();
    let segs = summarize(&input(&targets, &snaps));
    let got: Vec<_> = segs
        .iter()
        .map(|s| (s.target, s.mode, s.from_s, s.to_s, s.intervals))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, Some(Mode::Mmap), 0.0, 3.0, 3),
            (0, Some(Mode::Buffered), 3.0, 6.0, 3),
            (1, Some(Mode::Buffered), 6.0, 8.0, 2),
        ]
    );
}

#[test]
fn a_thread_change_or_an_idle_gap_starts_a_new_segment() {
    let targets = [meta("/a", "ext4")];
    let snaps: Vec<Snapshot> = [(true, 4), (true, 8), (false, 8), (true, 8)]
        .iter()
        .enumerate()
        .map(|(i, &(active, threads))| {
            snap(
                i as u64,
                vec![ti(0, active, Mode::Mmap, threads, &[5])],
                vec![],
            )
        })
        .collect();
    let segs = summarize(&input(&targets, &snaps));
    let got: Vec<_> = segs.iter().map(|s| (s.threads, s.intervals)).collect();
    assert_eq!(got, vec![(Some(4), 1), (Some(8), 1), (Some(8), 1)]);
}

#[test]
fn median_of_per_interval_rates() {
    let targets = [meta("/a", "ext4")];
    let snaps: Vec<Snapshot> = [3usize, 100, 5, 7]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            snap(
                i as u64,
                vec![ti(0, true, Mode::Mmap, 4, &vec![10; n])],
                vec![],
            )
        })
        .collect();
    let seg = &summarize(&input(&targets, &snaps))[0];
    assert_eq!(seg.median_ops_per_s, 6.0);
    assert!((seg.median_mib_per_s - 6.0 * 818.0 / 1048576.0).abs() < 1e-12);
    assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(vec![]), 0.0);
}

#[test]
fn merged_percentiles_equal_one_histogram_of_all_values() {
    let (targets, snaps) = moving();
    let segs = summarize(&input(&targets, &snaps));
    let mmap: Vec<u64> = (0..3u64).flat_map(|i| 1..=10 * (i + 1)).collect();
    assert_eq!(segs[0].lat, LatSummary::of(&hist(&mmap)));
    assert_eq!(segs[0].ops, mmap.len() as u64);
    // The whole-span line equals the run summary's: every interval merged.
    let all: Vec<u64> = (0..6u64).flat_map(|i| 1..=10 * (i + 1)).collect();
    let t0 = &totals(&input(&targets, &snaps))[0];
    assert_eq!((t0.mode, t0.intervals), (None, 8));
    assert_eq!(t0.lat, LatSummary::of(&hist(&all)));
}

#[test]
fn stalls_count_by_cause_per_segment_and_target() {
    let (targets, mut snaps) = moving();
    snaps[0].stalls = vec![stall(0, 0.5, 200, Cause::DirtyThrottle)];
    snaps[1].stalls = vec![
        stall(0, 1.5, 300, Cause::DirtyThrottle),
        stall(1, 1.6, 900, Cause::Unknown),
    ];
    // Started in the mmap segment, reported once it ended in the next one.
    snaps[4].stalls = vec![
        stall(0, 2.9, 1500, Cause::Sync),
        stall(0, 4.2, 120, Cause::Sync),
    ];
    let segs = summarize(&input(&targets, &snaps));
    let (a, b) = (&segs[0], &segs[1]);
    assert_eq!((a.stalls, a.stall_ns), (3, 2_000_000_000));
    assert_eq!(a.by_cause[&Cause::DirtyThrottle].count, 2);
    assert_eq!(a.by_cause[&Cause::Sync].count, 1);
    assert!(!a.by_cause.contains_key(&Cause::Unknown));
    assert_eq!((b.stalls, b.by_cause[&Cause::Sync].ms), (1, 120.0));
    assert_eq!(segs[2].stalls, 0);
    let text = render_text(&segs, &input(&targets, &snaps));
    assert!(
        text.contains("dirty_throttle 2 (0.50 s), sync 1 (1.50 s)"),
        "{text}"
    );
}

#[test]
fn from_and_to_keep_intervals_ending_in_the_span() {
    let (targets, snaps) = moving();
    let mut inp = input(&targets, &snaps);
    (inp.from_s, inp.to_s) = (Some(2.0), Some(4.0));
    let ends: Vec<f64> = inp.selected().map(|s| s.t_s).collect();
    assert_eq!(ends, vec![3.0, 4.0]);
    assert_eq!(inp.span(), Some((2.0, 4.0)));
    let segs = summarize(&inp);
    let got: Vec<_> = segs.iter().map(|s| (s.mode, s.from_s, s.to_s)).collect();
    assert_eq!(
        got,
        vec![
            (Some(Mode::Mmap), 2.0, 3.0),
            (Some(Mode::Buffered), 3.0, 4.0)
        ]
    );
    assert_eq!(render_csv(&inp).lines().count(), 1 + 2 * 2);
    (inp.from_s, inp.to_s) = (Some(50.0), None);
    assert!(summarize(&inp).is_empty());
    assert!(render_text(&[], &inp).contains("no intervals"));
    assert!(render_svg(&inp, &[]).is_err());
}
