//! A recording's span as every reader of it counts it: the intervals kept,
//! the span's one list of stalls (those filed in its intervals), and the
//! segments per target and (mode, threads) setting with their stalls.
//! `report`'s text, CSV and SVG and `advise`'s diagnosis all draw from it,
//! so they cannot disagree.

use crate::config::Mode;
use crate::model::cause::Cause;
use crate::model::snapshot::{
    cause_totals, CauseTotal, LatSummary, Snapshot, TargetInterval, TargetMeta,
};
use crate::model::stall::Stall;
use std::collections::BTreeMap;

/// What a report is made from: a recording's targets and snapshots, and the
/// span to cover.
pub struct ReportInput<'a> {
    /// The workload and where it ran, e.g. "mmap × 4 threads, 818 B records,
    /// periodic:10s — host, kernel".
    pub title: String,
    pub targets: &'a [TargetMeta],
    /// In time order, one per interval.
    pub snapshots: &'a [Snapshot],
    /// Keep the intervals whose end `t_s` is in `(from_s, to_s]`.
    pub from_s: Option<f64>,
    pub to_s: Option<f64>,
    /// `compare`: each run's dirty memory (end of interval s, MiB), drawn
    /// one line per run; empty: the snapshots' kernel figures.
    pub dirty_by_target: Vec<Vec<(f64, Option<f64>)>>,
}

impl ReportInput<'_> {
    /// Whether the interval ending at `t_s` is in the span.
    pub fn keeps(&self, t_s: f64) -> bool {
        self.from_s.is_none_or(|f| t_s > f) && self.to_s.is_none_or(|t| t_s <= t)
    }

    /// The snapshots in the span, in time order.
    pub fn selected(&self) -> impl Iterator<Item = &Snapshot> + '_ {
        self.snapshots.iter().filter(|s| self.keeps(s.t_s))
    }

    /// Start of the first and end of the last interval in the span.
    pub fn span(&self) -> Option<(f64, f64)> {
        let first = self.selected().next()?;
        let last = self.selected().last()?;
        Some((first.t_s - first.interval_s, last.t_s))
    }

    /// Every stall of the span, ours and observed processes' alike, by
    /// start: those filed in its intervals. A stall is filed in the
    /// interval it ended in, so over a whole recording this is every stall
    /// the run's summary counts, wherever it started (before a target
    /// switch, while the writers were stopping, after the last interval
    /// began). Every output counts stalls from this one list, so the text,
    /// the chart, the CSV and the summary cannot disagree.
    pub fn stalls(&self) -> Vec<&Stall> {
        let mut v: Vec<&Stall> = self.selected().flat_map(|s| &s.stalls).collect();
        v.sort_by_key(|st| st.ev.start_ns);
        v
    }

    pub fn label(&self, target: usize) -> String {
        self.targets.get(target).map_or_else(
            || format!("target {target}"),
            |m| format!("{} ({})", m.path, m.fs),
        )
    }
}

pub fn start_s(st: &Stall) -> f64 {
    st.ev.start_ns as f64 / 1e9
}

/// One target's figures over a run of intervals.
#[derive(Clone, Debug)]
pub struct Segment {
    pub target: usize,
    /// The writers' mode and thread count; `None` on a whole-span line
    /// (`totals`), which may cover several.
    pub mode: Option<Mode>,
    pub threads: Option<u32>,
    /// Start of the first interval and end of the last, seconds since the
    /// run started.
    pub from_s: f64,
    pub to_s: f64,
    pub intervals: usize,
    pub ops: u64,
    pub bytes: u64,
    /// Medians of the per-interval rates of the active intervals: a steady
    /// figure that one stalled interval does not drag down.
    pub median_ops_per_s: f64,
    pub median_mib_per_s: f64,
    /// Totals over the time the target was active (ops / s, bytes / s):
    /// beside the medians, so a target that wrote never reads 0 when most
    /// of its intervals were stalled.
    pub mean_ops_per_s: f64,
    pub mean_mib_per_s: f64,
    /// Write latency (µs) of the merged interval histograms; None when no
    /// op was timed (an idle target, or a file without histograms).
    pub lat: Option<LatSummary>,
    /// Its target's stalls of the span (`ReportInput::stalls`) that belong
    /// here (`place_stalls`).
    pub stalls: u64,
    pub stall_ns: u64,
    pub by_cause: BTreeMap<Cause, CauseTotal>,
}

/// One target's interval, with the snapshot it belongs to.
type Row<'a> = (&'a Snapshot, &'a TargetInterval);

pub fn interval_of(s: &Snapshot, target: usize) -> Option<&TargetInterval> {
    s.targets.iter().find(|t| t.target == target)
}

/// One segment per target and contiguous run of intervals in which the
/// target was active with one (mode, threads); ordered by target, then time.
/// Each of the span's writer stalls is in the segment of its target that
/// `place_stalls` picks, so the segments of a target add up to its
/// whole-span line.
pub fn summarize(input: &ReportInput) -> Vec<Segment> {
    let mut segs: Vec<Segment> = (0..input.targets.len())
        .flat_map(|target| {
            runs(input, target).into_iter().map(move |rows| {
                let t = rows[0].1;
                segment(target, Some((t.mode, t.threads)), &rows)
            })
        })
        .collect();
    let stalls = input.stalls();
    let spans: Vec<(usize, f64)> = segs.iter().map(|s| (s.target, s.from_s)).collect();
    for (i, placed) in place_stalls(&spans, &stalls).into_iter().enumerate() {
        add_stalls(&mut segs[i], &placed);
    }
    segs
}

/// Which segment each writer stall goes to, given the segments' (target,
/// start) in time order per target: the last of its target's segments that
/// began at or before the stall did (the setting in force when it began,
/// or the one whose writers were stopping when it began after a switch or
/// a pause), else its target's first. A stall of a target without a
/// segment in the span is in its whole-span line only.
fn place_stalls<'a>(segs: &[(usize, f64)], stalls: &[&'a Stall]) -> Vec<Vec<&'a Stall>> {
    let mut out: Vec<Vec<&Stall>> = vec![Vec::new(); segs.len()];
    for st in stalls {
        let Some(target) = st.ev.who.target() else {
            continue;
        };
        let own = || segs.iter().enumerate().filter(|(_, s)| s.0 == target);
        let at = own()
            .rfind(|(_, s)| s.1 <= start_s(st))
            .or_else(|| own().next());
        if let Some((i, _)) = at {
            out[i].push(st);
        }
    }
    out
}

/// One whole-span line per target seen in the span (active, writing, or
/// with a stall). Every interval counts, active or not, so ops and
/// percentiles equal the run summary's for the same span; the medians use
/// the active intervals only, since an idle target's zeros say nothing
/// about its speed.
pub fn totals(input: &ReportInput) -> Vec<Segment> {
    let stalls = input.stalls();
    (0..input.targets.len())
        .filter_map(|target| {
            let rows: Vec<Row> = input
                .selected()
                .filter_map(|s| interval_of(s, target).map(|t| (s, t)))
                .collect();
            let own: Vec<&Stall> = stalls
                .iter()
                .copied()
                .filter(|st| st.ev.who.target() == Some(target))
                .collect();
            let seen = rows.iter().any(|(_, t)| t.active || t.ops > 0) || !own.is_empty();
            (seen && !rows.is_empty()).then(|| {
                let mut s = segment(target, None, &rows);
                add_stalls(&mut s, &own);
                s
            })
        })
        .collect()
}

/// Splits a target's intervals in the span into runs of one active setting.
fn runs<'a>(input: &'a ReportInput, target: usize) -> Vec<Vec<Row<'a>>> {
    let mut out: Vec<Vec<Row>> = Vec::new();
    let mut open = false;
    for s in input.selected() {
        match interval_of(s, target) {
            Some(t) if t.active => {
                let same = |(_, p): &Row| (p.mode, p.threads) == (t.mode, t.threads);
                match out.last_mut() {
                    Some(run) if open && run.last().is_some_and(same) => run.push((s, t)),
                    _ => out.push(vec![(s, t)]),
                }
                open = true;
            }
            _ => open = false,
        }
    }
    out
}

/// Figures over `rows` (not empty, in time order), without stalls (see
/// `add_stalls`).
fn segment(target: usize, setting: Option<(Mode, u32)>, rows: &[Row]) -> Segment {
    let (first, last) = (rows[0].0, rows[rows.len() - 1].0);
    let (from_s, to_s) = (first.t_s - first.interval_s, last.t_s);
    let mut hist = crate::model::ops::new_histogram();
    for (_, t) in rows {
        // Same bounds on both sides: adding cannot fail.
        let _ = hist.add(&t.hist);
    }
    let rates: Vec<_> = rows
        .iter()
        .filter(|(_, t)| t.active)
        .map(|(s, t)| t.rates(s.interval_s))
        .collect();
    let (ops, bytes) = (
        rows.iter().map(|(_, t)| t.ops).sum(),
        rows.iter().map(|(_, t)| t.bytes).sum(),
    );
    // Over the time active: a whole-span line's idle stretches (the writers
    // were on another target) would understate its speed.
    let active_s: f64 = rows
        .iter()
        .filter(|(_, t)| t.active)
        .map(|(s, _)| s.interval_s)
        .sum();
    let secs = if active_s > 0.0 {
        active_s
    } else {
        to_s - from_s
    };
    let mean = crate::model::snapshot::rates(ops, bytes, secs);
    Segment {
        target,
        mode: setting.map(|s| s.0),
        threads: setting.map(|s| s.1),
        from_s,
        to_s,
        intervals: rows.len(),
        ops,
        bytes,
        median_ops_per_s: median(rates.iter().map(|r| r.ops_per_s).collect()),
        median_mib_per_s: median(rates.iter().map(|r| r.mib_per_s).collect()),
        mean_ops_per_s: mean.ops_per_s,
        mean_mib_per_s: mean.mib_per_s,
        lat: (!hist.is_empty()).then(|| LatSummary::of(&hist)),
        stalls: 0,
        stall_ns: 0,
        by_cause: BTreeMap::new(),
    }
}

/// Counts `stalls` into a segment (count, time, by cause: `cause_totals`).
fn add_stalls(seg: &mut Segment, stalls: &[&Stall]) {
    seg.stalls += stalls.len() as u64;
    seg.stall_ns += stalls.iter().map(|s| s.ev.dur()).sum::<u64>();
    crate::model::snapshot::merge_causes(&mut seg.by_cause, &cause_totals(stalls.iter().copied()));
}

/// The middle value (mean of the two middle ones for an even count); 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}
