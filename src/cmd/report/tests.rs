//! The fixtures every format's tests build recordings from, and the tests
//! of the model: segments, medians, merged percentiles, stalls by cause, the
//! span.

use super::*;
use crate::config::Mode;
use crate::model::cause::{Attribution, Cause, Evidence};
use crate::model::kernel::KernelInterval;
use crate::model::ops::{new_histogram, OpKind};
use crate::model::snapshot::{LatSummary, Snapshot, TargetInterval, TargetMeta};
use crate::model::stall::Blocked;
use crate::model::stall::Stall;
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

pub(crate) fn ti(
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
pub(crate) fn snap(i: u64, targets: Vec<TargetInterval>, stalls: Vec<Stall>) -> Snapshot {
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

pub(crate) fn stall(target: usize, start_s: f64, dur_ms: u64, cause: Cause) -> Stall {
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

/// One target active in every interval, `ops[i]` 10 µs writes in the i-th.
fn active_intervals(ops: &[usize]) -> Vec<Snapshot> {
    ops.iter()
        .enumerate()
        .map(|(i, &n)| {
            snap(
                i as u64,
                vec![ti(0, true, Mode::Mmap, 4, &vec![10; n])],
                vec![],
            )
        })
        .collect()
}

#[test]
fn median_of_per_interval_rates() {
    let targets = [meta("/a", "ext4")];
    let snaps = active_intervals(&[3, 100, 5, 7]);
    let seg = &summarize(&input(&targets, &snaps))[0];
    assert_eq!(seg.median_ops_per_s, 6.0);
    assert!((seg.median_mib_per_s - 6.0 * 818.0 / 1048576.0).abs() < 1e-12);
    assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(vec![]), 0.0);
}

/// A target that wrote but was stalled most of the time: the median of
/// its intervals' rates is 0, the mean (total over the time) is not.
#[test]
fn a_mostly_stalled_target_has_a_mean_rate_beside_its_median_of_zero() {
    let targets = [meta("/a", "btrfs")];
    let ops = [0usize, 0, 400, 0, 0];
    let snaps = active_intervals(&ops);
    let inp = input(&targets, &snaps);
    let seg = &summarize(&inp)[0];
    assert_eq!(seg.median_mib_per_s, 0.0);
    let secs = snaps.len() as f64;
    let written: u64 = snaps.iter().map(|s| s.targets[0].bytes).sum();
    assert!((seg.mean_mib_per_s - written as f64 / 1048576.0 / secs).abs() < 1e-12);
    assert_eq!(seg.mean_ops_per_s, ops.iter().sum::<usize>() as f64 / secs);
    let text = render_text(&summarize(&inp), &inp);
    let row = text.lines().find(|l| l.contains("s  mmap ")).unwrap();
    assert!(
        row.contains(&format!(" {:.2} ", seg.mean_mib_per_s)),
        "the row shows the mean: {row}"
    );
}

/// A cause with no stall of its own but a share of another's time is
/// named as time within them, never "dirty_throttle 0 (0.34 s)".
#[test]
fn a_cause_with_only_shares_reads_as_time_within_other_stalls() {
    use crate::model::cause::Share;
    let targets = [meta("/a", "btrfs")];
    let mut st = stall(0, 0.5, 1000, Cause::WritebackWait);
    st.why.shares = vec![
        Share {
            cause: Cause::WritebackWait,
            ms: 660.0,
        },
        Share {
            cause: Cause::DirtyThrottle,
            ms: 340.0,
        },
    ];
    let snaps = vec![snap(0, vec![ti(0, true, Mode::Mmap, 1, &[5])], vec![st])];
    let inp = input(&targets, &snaps);
    let text = render_text(&summarize(&inp), &inp);
    assert!(
        text.contains("writeback_wait 1 (0.66 s); within them: dirty_throttle 0.34 s"),
        "{text}"
    );
    assert!(!text.contains("dirty_throttle 0 ("), "{text}");
}

/// Stalls whose start lies outside every active run of their target (in
/// the interval of a switch, while its writers stopped, after the last
/// interval began) are still the target's: each goes to a segment, and
/// the segments add up to the whole-span line and to every stall filed.
#[test]
fn every_stall_of_the_span_is_in_a_segment_of_its_target() {
    let (targets, mut snaps) = moving();
    // Target 0 is active until 6 s: one begun at 6.2 s (its writers
    // stopping), one begun before the run's 8 s end by target 1 and one
    // begun after it, filed in the last interval.
    snaps[6].stalls = vec![stall(0, 6.2, 500, Cause::Sync)];
    snaps[7].stalls = vec![
        stall(1, 7.5, 3000, Cause::Sync),
        stall(1, 8.1, 2000, Cause::Sync),
    ];
    let inp = input(&targets, &snaps);
    let segs = summarize(&inp);
    let placed: u64 = segs.iter().map(|s| s.stalls).sum();
    assert_eq!(placed, inp.stalls().len() as u64);
    let buffered0 = segs
        .iter()
        .find(|s| s.target == 0 && s.from_s == 3.0)
        .unwrap();
    assert_eq!(buffered0.stalls, 1, "the stopping writers' stall");
    let t1 = segs.iter().find(|s| s.target == 1).unwrap();
    assert_eq!(t1.stalls, 2, "the one begun after the end too");
    for all in totals(&inp) {
        let own: u64 = segs
            .iter()
            .filter(|s| s.target == all.target)
            .map(|s| s.stalls)
            .sum();
        assert_eq!(all.stalls, own, "target {}", all.target);
    }
}

#[test]
fn merged_percentiles_equal_one_histogram_of_all_values() {
    let (targets, snaps) = moving();
    let segs = summarize(&input(&targets, &snaps));
    let mmap: Vec<u64> = (0..3u64).flat_map(|i| 1..=10 * (i + 1)).collect();
    assert_eq!(segs[0].lat, Some(LatSummary::of(&hist(&mmap))));
    assert_eq!(segs[0].ops, mmap.len() as u64);
    // The whole-span line equals the run summary's: every interval merged.
    let all: Vec<u64> = (0..6u64).flat_map(|i| 1..=10 * (i + 1)).collect();
    let t0 = &totals(&input(&targets, &snaps))[0];
    assert_eq!((t0.mode, t0.intervals), (None, 8));
    assert_eq!(t0.lat, Some(LatSummary::of(&hist(&all))));
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
    // Target 1's stall at 1.6 s, before its writers came to it: still
    // its own, in its only segment (every stall of the span is counted).
    assert_eq!(segs[2].stalls, 1);
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
