//! What the dashboard keeps of each view (a target or an observed
//! process): its points, one per interval, and the marks of its stalls;
//! and the header's and message line's state.

use crate::base::units::kib_to_mib;
use crate::config::{Mode, SyncPolicy};
use crate::model::cause::Cause;
use crate::model::snapshot::{
    CauseTotal, LatSummary, ObservedInterval, Snapshot, TargetInterval, TargetMeta,
};
use std::collections::{BTreeMap, VecDeque};

/// What the header shows about the run. `mode`, `threads` and `active`
/// follow the key actions at once and the snapshots when they change.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub mode: Mode,
    pub threads: u32,
    pub record_size: u64,
    pub sync: SyncPolicy,
    pub active: usize,
    pub recording: bool,
    /// Ok: tracefs events available; Err: why not.
    pub tracing: Result<(), String>,
    /// Showing a recording: there are no writers to control.
    pub replay: bool,
}

/// How the terminal may be drawn on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// No braille or box-drawing glyphs: ASCII only.
    pub ascii: bool,
    /// False for NO_COLOR / --no-color.
    pub color: bool,
}

impl Default for Style {
    fn default() -> Self {
        Style {
            ascii: false,
            color: true,
        }
    }
}

/// One interval of one target as the charts plot it; `None` = unknown
/// (no sample, no tracing, no ops to time), drawn as a gap, never as 0.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Point {
    /// End of the interval, s since start.
    pub t_s: f64,
    pub interval_s: f64,
    /// Writers ran on this target during the interval.
    pub active: bool,
    pub ops_per_s: f64,
    pub mib_per_s: f64,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub dirty_mib: Option<f64>,
    pub writeback_mib: Option<f64>,
    pub bg_thresh_mib: Option<f64>,
    pub thresh_mib: Option<f64>,
    pub pause_ms_per_s: Option<f64>,
    pub psi_full_pct: Option<f64>,
    pub util_pct: Option<f64>,
    /// The target's device's write rate, MiB/s (writeback's pace).
    pub dev_mib_per_s: Option<f64>,
    /// An observed process, not our writers: no ops, `mib_per_s` is its
    /// write_bytes rate and `max_ms` its longest D-state stall.
    pub observed: bool,
    /// A writer of this target stopped on an error (see `TargetInterval`).
    pub failed: bool,
    /// Stalls of this view, and of all views, up to this interval: what
    /// the header and the list count at the view end (frozen or not).
    pub stalls_so_far: u64,
    pub all_stalls_so_far: u64,
    /// An observed process's threads' blocked time, ms per second of the
    /// interval (waits under the threshold included), and its two largest
    /// causes; None when its blocks are sampled.
    pub blocked_ms_per_s: Option<f64>,
    pub blocked_top: [Option<(Cause, f64)>; 2],
}

impl Point {
    /// Figures through `rates` and `LatSummary::of`, like every other view.
    pub fn of(s: &Snapshot, ti: &TargetInterval) -> Point {
        let r = ti.rates(s.interval_s);
        let lat = (!ti.hist.is_empty()).then(|| LatSummary::of(&ti.hist));
        let k = s.kernel.as_ref();
        let mib = |kib: Option<u64>| kib.map(kib_to_mib);
        let dev = k
            .and_then(|k| k.devs.get(ti.target))
            .and_then(Option::as_ref);
        let per_s = |v: u64| (s.interval_s > 0.0).then(|| v as f64 / s.interval_s);
        Point {
            t_s: s.t_s,
            interval_s: s.interval_s,
            active: ti.active,
            ops_per_s: r.ops_per_s,
            mib_per_s: r.mib_per_s,
            p99_ms: lat.map(|l| l.p99 as f64 / 1e3),
            max_ms: lat.map(|l| l.max as f64 / 1e3),
            dirty_mib: k.and_then(|k| mib(k.dirty_kib)),
            writeback_mib: k.and_then(|k| mib(k.writeback_kib)),
            bg_thresh_mib: k.and_then(|k| mib(k.dirty_bg_thresh_kib)),
            thresh_mib: k.and_then(|k| mib(k.dirty_thresh_kib)),
            pause_ms_per_s: ti.bdp.and_then(|b| per_s(b.pause_ms)),
            psi_full_pct: k.and_then(|k| k.psi_io_full_pct),
            util_pct: dev.map(|d| d.util_pct),
            dev_mib_per_s: dev.map(|d| d.write_mib_per_s),
            observed: false,
            failed: ti.failed,
            stalls_so_far: 0,
            all_stalls_so_far: 0,
            blocked_ms_per_s: None,
            blocked_top: [None, None],
        }
    }

    /// An observed process's interval; `longest_ms` is its longest stall
    /// that ended in the interval.
    pub fn of_observed(s: &Snapshot, o: &ObservedInterval, longest_ms: Option<f64>) -> Point {
        let k = s.kernel.as_ref();
        let mib = |kib: Option<u64>| kib.map(kib_to_mib);
        let per_s = |v: u64| (s.interval_s > 0.0).then(|| v as f64 / s.interval_s);
        Point {
            t_s: s.t_s,
            interval_s: s.interval_s,
            active: o.alive,
            ops_per_s: 0.0,
            mib_per_s: o.write_bytes.map_or(0.0, |b| {
                crate::model::snapshot::rates(0, b, s.interval_s).mib_per_s
            }),
            p99_ms: None,
            max_ms: longest_ms,
            dirty_mib: k.and_then(|k| mib(k.dirty_kib)),
            writeback_mib: k.and_then(|k| mib(k.writeback_kib)),
            bg_thresh_mib: k.and_then(|k| mib(k.dirty_bg_thresh_kib)),
            thresh_mib: k.and_then(|k| mib(k.dirty_thresh_kib)),
            pause_ms_per_s: o.bdp.and_then(|b| per_s(b.pause_ms)),
            psi_full_pct: k.and_then(|k| k.psi_io_full_pct),
            util_pct: None,
            dev_mib_per_s: None,
            observed: true,
            failed: false,
            stalls_so_far: 0,
            all_stalls_so_far: 0,
            blocked_ms_per_s: o
                .blocked_ms
                .filter(|_| s.interval_s > 0.0)
                .map(|_| o.blocked_by_cause.values().sum::<f64>() / s.interval_s),
            blocked_top: top_two(o, s.interval_s),
        }
    }

    /// Where the interval sits on a time axis: its middle.
    pub fn x(&self) -> f64 {
        self.t_s - self.interval_s / 2.0
    }
}

/// The two causes an observed process's threads were blocked by most in
/// an interval, ms per second.
fn top_two(o: &ObservedInterval, interval_s: f64) -> [Option<(Cause, f64)>; 2] {
    let mut by: Vec<(Cause, f64)> = o
        .blocked_by_cause
        .iter()
        .filter(|(_, ms)| **ms > 0.0 && interval_s > 0.0)
        .map(|(c, ms)| (*c, ms / interval_s))
        .collect();
    by.sort_by(|a, b| b.1.total_cmp(&a.1));
    [by.first().copied(), by.get(1).copied()]
}

/// A stall as a view draws it: when, until when, why.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StallMark {
    pub t_s: f64,
    pub end_s: f64,
    pub cause: Cause,
}

/// A target, its chart history and its stall times.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetView {
    pub meta: TargetMeta,
    /// Oldest first, ascending `t_s`.
    pub points: VecDeque<Point>,
    /// Stalls of this view by start time, ascending.
    pub stall_marks: VecDeque<StallMark>,
    /// Stalls seen on this target over the whole run.
    pub stalls: u64,
    /// Their time and count by cause (`cause_totals`), and the bytes
    /// written (None for a process whose /proc/PID/io is unreadable): what
    /// the advice panel diagnoses.
    pub by_cause: BTreeMap<Cause, CauseTotal>,
    pub bytes: Option<u64>,
}

impl TargetView {
    pub(super) fn new(meta: TargetMeta) -> Self {
        TargetView {
            meta,
            points: VecDeque::new(),
            stall_marks: VecDeque::new(),
            stalls: 0,
            by_cause: BTreeMap::new(),
            bytes: Some(0),
        }
    }

    /// Points whose interval ends within `[t0, t1]`, plus one either side
    /// so lines reach the chart edges.
    pub fn visible(&self, t0: f64, t1: f64) -> impl Iterator<Item = &Point> {
        let a = self
            .points
            .partition_point(|p| p.t_s < t0)
            .saturating_sub(1);
        let b = (self.points.partition_point(|p| p.t_s <= t1) + 1).min(self.points.len());
        self.points.range(a..b.max(a))
    }

    /// The last point at or before `t`.
    pub fn at(&self, t: f64) -> Option<&Point> {
        let i = self.points.partition_point(|p| p.t_s <= t);
        i.checked_sub(1).map(|i| &self.points[i])
    }

    pub fn marks_in(&self, t0: f64, t1: f64) -> impl Iterator<Item = f64> + '_ {
        let a = self.stall_marks.partition_point(|m| m.t_s < t0);
        self.stall_marks
            .range(a..)
            .map(|m| m.t_s)
            .take_while(move |&t| t <= t1)
    }

    /// The stall lane over `[t0, t1]` in `cols` cells, as seen at `until`
    /// (the view end): each cell the cause that stalled this view longest
    /// within the cell's time, if any. A 13 s stall spans 13 s of cells;
    /// 500 short ones make a band.
    pub fn lane(&self, t0: f64, t1: f64, cols: usize, until: f64) -> Vec<Option<Cause>> {
        let mut time = vec![[0.0f64; Cause::ALL.len()]; cols];
        if cols == 0 || t1 <= t0 {
            return Vec::new();
        }
        let dt = (t1 - t0) / cols as f64;
        for m in self
            .stall_marks
            .iter()
            .take_while(|m| m.t_s <= t1.min(until))
        {
            let (a, b) = (m.t_s.max(t0), m.end_s.min(t1).min(until));
            if b < a {
                continue;
            }
            let k = Cause::ALL.iter().position(|&c| c == m.cause).unwrap_or(0);
            let first = ((a - t0) / dt) as usize;
            let last = (((b - t0) / dt) as usize).min(cols - 1);
            for (i, cell) in time.iter_mut().enumerate().take(last + 1).skip(first) {
                let (c0, c1) = (t0 + i as f64 * dt, t0 + (i + 1) as f64 * dt);
                let overlap = b.min(c1) - a.max(c0);
                // A stall shorter than a cell still shows in its cell; one
                // that ends on a cell's edge does not spill into it.
                if overlap > 0.0 || first == last {
                    cell[k] += overlap.max(1e-9);
                }
            }
        }
        time.iter()
            .map(|c| {
                let (k, v) = c
                    .iter()
                    .enumerate()
                    .max_by(|x, y| x.1.total_cmp(y.1))
                    .unwrap_or((0, &0.0));
                (*v > 0.0).then(|| Cause::ALL[k])
            })
            .collect()
    }
}

/// When the active target, mode or thread count changed (or a control was
/// applied); every chart draws it.
#[derive(Clone, Debug, PartialEq)]
pub struct Switch {
    pub t_s: f64,
    pub what: String,
}

/// A line for the status bar.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub text: String,
    pub error: bool,
}
