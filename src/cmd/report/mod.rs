//! `stallscope report`: a recording's snapshots turned into a text summary per
//! target and (mode, threads) segment, a CSV of every interval, and an SVG
//! chart to attach to a mailing-list post.
//!
//! Rates and percentiles come from the same functions the live run uses
//! (`TargetInterval::rates`, `LatSummary::of` on merged histograms), so the
//! report agrees with the run's own summary for the same span.

use crate::base::units::kib_to_mib;
use crate::cmd::lanes::{bands, cause_legend, cause_rgb, stall_lanes, Lane};
use crate::config::Mode;
use crate::model::cause::Cause;
use crate::model::kernel::{DevInterval, KernelInterval};
use crate::model::snapshot::{
    cause_totals, CauseTotal, LatSummary, Snapshot, TargetInterval, TargetMeta,
};
use crate::model::stall::Stall;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;

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

    /// A target's stalls that started in `[from_s, to_s)`. All snapshots are
    /// searched: a stall is reported in the interval it ends in, which may
    /// lie past the span.
    fn stalls_starting(&self, target: usize, from_s: f64, to_s: f64) -> Vec<&Stall> {
        self.snapshots
            .iter()
            .flat_map(|s| &s.stalls)
            .filter(|st| {
                st.ev.who.target() == Some(target) && (from_s..to_s).contains(&start_s(st))
            })
            .collect()
    }

    fn label(&self, target: usize) -> String {
        self.targets.get(target).map_or_else(
            || format!("target {target}"),
            |m| format!("{} ({})", m.path, m.fs),
        )
    }
}

fn start_s(st: &Stall) -> f64 {
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
    /// Write latency (µs) of the merged interval histograms.
    pub lat: LatSummary,
    /// Stalls of this target that started in the segment's span.
    pub stalls: u64,
    pub stall_ns: u64,
    pub by_cause: BTreeMap<Cause, CauseTotal>,
}

/// One target's interval, with the snapshot it belongs to.
type Row<'a> = (&'a Snapshot, &'a TargetInterval);

fn interval_of(s: &Snapshot, target: usize) -> Option<&TargetInterval> {
    s.targets.iter().find(|t| t.target == target)
}

/// One segment per target and contiguous run of intervals in which the
/// target was active with one (mode, threads); ordered by target, then time.
pub fn summarize(input: &ReportInput) -> Vec<Segment> {
    (0..input.targets.len())
        .flat_map(|target| {
            runs(input, target).into_iter().map(move |rows| {
                let t = rows[0].1;
                segment(input, target, Some((t.mode, t.threads)), &rows)
            })
        })
        .collect()
}

/// One whole-span line per target seen in the span. Every interval counts,
/// active or not, so ops and percentiles equal the run summary's for the
/// same span; the medians use the active intervals only, since an idle
/// target's zeros say nothing about its speed.
pub fn totals(input: &ReportInput) -> Vec<Segment> {
    (0..input.targets.len())
        .filter_map(|target| {
            let rows: Vec<Row> = input
                .selected()
                .filter_map(|s| interval_of(s, target).map(|t| (s, t)))
                .collect();
            let seen = rows.iter().any(|(_, t)| t.active || t.ops > 0);
            seen.then(|| segment(input, target, None, &rows))
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

/// Figures over `rows` (not empty, in time order).
fn segment(
    input: &ReportInput,
    target: usize,
    setting: Option<(Mode, u32)>,
    rows: &[Row],
) -> Segment {
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
    let stalls = input.stalls_starting(target, from_s, to_s);
    Segment {
        target,
        mode: setting.map(|s| s.0),
        threads: setting.map(|s| s.1),
        from_s,
        to_s,
        intervals: rows.len(),
        ops: rows.iter().map(|(_, t)| t.ops).sum(),
        bytes: rows.iter().map(|(_, t)| t.bytes).sum(),
        median_ops_per_s: median(rates.iter().map(|r| r.ops_per_s).collect()),
        median_mib_per_s: median(rates.iter().map(|r| r.mib_per_s).collect()),
        lat: LatSummary::of(&hist),
        stalls: stalls.len() as u64,
        stall_ns: stalls.iter().map(|s| s.ev.dur()).sum(),
        by_cause: cause_totals(stalls.iter().copied()),
    }
}

/// The middle value (mean of the two middle ones for an even count); 0 for none.
fn median(mut v: Vec<f64>) -> f64 {
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

// ---------------------------------------------------------------- text

const TEXT_HEADER: &str = "     from       to  mode      thr  ints     ops/s     MiB/s       p50       p99     p99.9       max  stalls   stalled  causes";

/// The text summary: per target, its segments, then a whole-span line when
/// it had more than one segment.
pub fn render_text(segs: &[Segment], input: &ReportInput) -> String {
    let mut out = format!("stallscope report — {}\n", input.title);
    let Some((from, to)) = input.span() else {
        out.push_str("no intervals in the chosen span\n");
        return out;
    };
    let n = input.selected().count();
    let _ = writeln!(
        out,
        "span {from:.1}–{to:.1} s, {n} intervals; rates are medians of the per-interval rates; latencies in ms from merged histograms"
    );
    let totals = totals(input);
    for (target, _) in input.targets.iter().enumerate() {
        let own: Vec<&Segment> = segs.iter().filter(|s| s.target == target).collect();
        let all = totals.iter().find(|s| s.target == target);
        out.push('\n');
        out.push_str(&target_heading(input, target));
        if own.is_empty() && all.is_none() {
            out.push_str("  not active in this span\n");
            continue;
        }
        let _ = writeln!(out, "{TEXT_HEADER}");
        for s in &own {
            out.push_str(&segment_line(s));
        }
        if let Some(all) = all.filter(|_| own.len() != 1) {
            out.push_str(&segment_line(all));
        }
    }
    out.push_str(&observed_text(input));
    out
}

/// Observe mode: per observed process over the span, its D-state threads,
/// faults, bytes written and its threads' stalls by cause.
fn observed_text(input: &ReportInput) -> String {
    let mut procs: BTreeMap<u32, (String, u32, u64, Option<u64>, bool)> = BTreeMap::new();
    let mut stalls: BTreeMap<u32, Vec<&Stall>> = BTreeMap::new();
    for s in input.selected() {
        for o in &s.observed {
            let e = procs
                .entry(o.pid)
                .or_insert_with(|| (o.comm.clone(), 0, 0, Some(0), false));
            e.1 = e.1.max(o.d_threads_max);
            e.2 += o.majflt;
            e.3 = e.3.zip(o.write_bytes).map(|(a, b)| a + b);
            e.4 |= !o.alive;
        }
        for st in &s.stalls {
            if let Some(pid) = st.ev.who.pid() {
                stalls.entry(pid).or_default().push(st);
            }
        }
    }
    let mut out = String::new();
    for (pid, (comm, dmax, majflt, wb, exited)) in procs {
        let own = stalls.remove(&pid).unwrap_or_default();
        let stalled: u64 = own.iter().map(|s| s.ev.dur()).sum();
        let _ = writeln!(
            out,
            "\nobserved {comm} (pid {pid}){}: {} stalls, {:.2} s stalled{}{}; most threads in D at once {dmax}, {majflt} major faults, {}",
            if exited { ", exited" } else { "" },
            own.len(),
            stalled as f64 / 1e9,
            if own.is_empty() { "" } else { ": " },
            causes_text(&cause_totals(own.into_iter())),
            wb.map_or("write_bytes unreadable".to_string(), |b| format!(
                "{:.1} MiB written",
                crate::base::units::mib(b)
            ))
        );
    }
    out
}

fn target_heading(input: &ReportInput, target: usize) -> String {
    match input.targets.get(target) {
        Some(m) => format!(
            "{}  ({} on {}, {})\n",
            m.path, m.fs, m.device, m.mount_options
        ),
        None => format!("target {target}\n"),
    }
}

fn segment_line(s: &Segment) -> String {
    let mode = s.mode.map_or("all", |m| m.as_str());
    let threads = s.threads.map_or(String::new(), |t| t.to_string());
    let ms = |us: u64| us as f64 / 1000.0;
    format!(
        "{:>8.1}s {:>7.1}s  {mode:<9} {threads:>3} {:>5} {:>9.0} {:>9.2} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>7} {:>8.2}s  {}\n",
        s.from_s,
        s.to_s,
        s.intervals,
        s.median_ops_per_s,
        s.median_mib_per_s,
        ms(s.lat.p50),
        ms(s.lat.p99),
        ms(s.lat.p999),
        ms(s.lat.max),
        s.stalls,
        s.stall_ns as f64 / 1e9,
        causes_text(&s.by_cause)
    )
}

fn causes_text(m: &BTreeMap<Cause, CauseTotal>) -> String {
    let parts: Vec<String> = m
        .iter()
        .map(|(c, t)| format!("{} {} ({:.2} s)", c.as_str(), t.count, t.ms / 1000.0))
        .collect();
    parts.join(", ")
}

// ---------------------------------------------------------------- CSV

const CSV_COLUMNS: [&str; 40] = [
    "t_s",
    "interval_s",
    "target",
    "fs",
    "mode",
    "threads",
    "active",
    "ops",
    "bytes",
    "ops_per_s",
    "mib_per_s",
    "lat_mean_us",
    "lat_p50_us",
    "lat_p95_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_max_us",
    "stalls",
    "sync_ops",
    "sync_max_ms",
    "dirty_kib",
    "writeback_kib",
    "dirty_thresh_kib",
    "dirty_bg_thresh_kib",
    "dirtied_pages",
    "written_pages",
    "psi_io_some_pct",
    "psi_io_full_pct",
    "dev_write_mib_per_s",
    "dev_util_pct",
    "dev_inflight",
    "dev_w_await_ms",
    "dev_flushes",
    "minflt",
    "majflt",
    "bdp_events",
    "bdp_pause_ms",
    "bdp_max_pause_ms",
    "wb_waits",
    "wb_starts",
];

/// One row per interval and target with every numeric field. An unknown
/// value (no kernel sample, no tracing, no device, no op to time) is an
/// empty cell, never 0.
pub fn render_csv(input: &ReportInput) -> String {
    let mut out = CSV_COLUMNS.join(",");
    out.push('\n');
    for s in input.selected() {
        for t in &s.targets {
            let cells: Vec<String> = csv_row(s, t, input.targets.get(t.target))
                .iter()
                .map(|c| csv_quote(c))
                .collect();
            out.push_str(&cells.join(","));
            out.push('\n');
        }
    }
    out
}

fn csv_row(s: &Snapshot, t: &TargetInterval, meta: Option<&TargetMeta>) -> Vec<String> {
    let r = t.rates(s.interval_s);
    let (lat, timed) = (LatSummary::of(&t.hist), !t.hist.is_empty());
    let lat_us = |v: u64| opt(timed.then_some(v));
    let k = s.kernel.as_ref();
    let kv = |f: fn(&KernelInterval) -> Option<u64>| opt(k.and_then(f));
    let dev = k
        .and_then(|k| k.devs.get(t.target))
        .and_then(Option::as_ref);
    let dv = |f: fn(&DevInterval) -> f64| opt(dev.map(|d| round(f(d), 3)));
    let bdp = |f: fn(&crate::model::snapshot::BdpStats) -> u64| opt(t.bdp.as_ref().map(f));
    let sync_max = (!t.sync_hist.is_empty()).then(|| round(t.sync_hist.max() as f64 / 1e3, 3));
    vec![
        round(s.t_s, 3).to_string(),
        round(s.interval_s, 3).to_string(),
        meta.map_or(String::new(), |m| m.path.clone()),
        meta.map_or(String::new(), |m| m.fs.clone()),
        t.mode.as_str().to_string(),
        t.threads.to_string(),
        t.active.to_string(),
        t.ops.to_string(),
        t.bytes.to_string(),
        round(r.ops_per_s, 1).to_string(),
        round(r.mib_per_s, 3).to_string(),
        opt(timed.then_some(lat.mean)),
        lat_us(lat.p50),
        lat_us(lat.p95),
        lat_us(lat.p99),
        lat_us(lat.p999),
        lat_us(lat.max),
        t.stalls.to_string(),
        t.sync_hist.len().to_string(),
        opt(sync_max),
        kv(|k| k.dirty_kib),
        kv(|k| k.writeback_kib),
        kv(|k| k.dirty_thresh_kib),
        kv(|k| k.dirty_bg_thresh_kib),
        kv(|k| k.dirtied_pages),
        kv(|k| k.written_pages),
        opt(k.and_then(|k| k.psi_io_some_pct).map(|v| round(v, 2))),
        opt(k.and_then(|k| k.psi_io_full_pct).map(|v| round(v, 2))),
        dv(|d| d.write_mib_per_s),
        dv(|d| d.util_pct),
        opt(dev.map(|d| d.inflight)),
        dv(|d| d.w_await_ms),
        opt(dev.and_then(|d| d.flushes)),
        t.minflt.to_string(),
        t.majflt.to_string(),
        bdp(|b| b.events),
        bdp(|b| b.pause_ms),
        bdp(|b| b.max_pause_ms),
        opt(t.wb_waits),
        opt(s.wb_starts.as_ref().map(|m| m.values().sum::<u64>())),
    ]
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

fn round(v: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (v * m).round() / m
}

/// RFC 4180: a field with a comma, quote or line break is quoted, its
/// quotes doubled.
fn csv_quote(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

// ---------------------------------------------------------------- SVG

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 900;
/// Left room for the y labels and description, the same on every panel so
/// the plots line up on the shared time axis.
const Y_LABEL_PX: u32 = 72;
const RIGHT_PX: u32 = 24;
/// Above each plot: its caption and series legend.
const STRIP_PX: u32 = 24;
const FONT: &str = "sans-serif";
/// plotters sizes text in its own unit: the SVG font-size is this / 1.24.
const TEXT: f64 = 15.0;

/// Target colours (the "tab10" palette less its red, the colour of
/// dirty-throttle stalls in the lanes).
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
const INK: RGBColor = RGBColor(40, 40, 40);
const DIRTY: RGBColor = RGBColor(60, 60, 60);
const WRITEBACK: RGBColor = RGBColor(23, 190, 207);
const BG_THRESH: RGBColor = RGBColor(200, 150, 0);
const THRESH: RGBColor = RGBColor(150, 0, 0);

fn colour(target: usize) -> RGBColor {
    PALETTE[target % PALETTE.len()]
}

/// A colour at 55 % over white: the thin `max` lines.
fn faded(c: RGBColor) -> RGBColor {
    let f = |v: u8| (f64::from(v) * 0.55 + 255.0 * 0.45).round() as u8;
    RGBColor(f(c.0), f(c.1), f(c.2))
}

type DrawResult = Result<(), Box<dyn Error>>;
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
/// A series split where a value is missing, so lines do not bridge gaps.
type Line = Vec<Vec<(f64, f64)>>;

/// Everything the chart draws, taken out of the snapshots once.
struct ChartData {
    x0: f64,
    x1: f64,
    /// Per target: MiB/s, p99 ms and max ms while it was active.
    mib: Vec<Line>,
    p99: Vec<Line>,
    max: Vec<Line>,
    dirty: Line,
    writeback: Line,
    bg_thresh: Line,
    thresh: Line,
    /// A lane per target, then per observed process's most stalled
    /// thread names: every stall in the span as a span of time.
    lanes: Vec<Lane>,
    /// `compare`: dirty MiB per run.
    dirty_by_target: Vec<Line>,
    /// Observe mode: per process, its write MiB/s and its longest D-state
    /// stall (ms) in each interval that had one.
    observed: Vec<ObservedSeries>,
}

struct ObservedSeries {
    name: String,
    mib: Line,
    longest: Vec<(f64, f64)>,
}

impl ObservedSeries {
    /// Every observed process in the span, in order of appearance.
    fn procs(input: &ReportInput) -> Vec<(u32, String)> {
        let mut procs: Vec<(u32, String)> = Vec::new();
        for o in input.selected().flat_map(|s| &s.observed) {
            if !procs.iter().any(|p| p.0 == o.pid) {
                procs.push((o.pid, o.comm.clone()));
            }
        }
        procs
    }

    fn all(input: &ReportInput, procs: &[(u32, String)]) -> Vec<ObservedSeries> {
        procs
            .iter()
            .map(|&(pid, ref comm)| ObservedSeries {
                name: format!("{comm} (pid {pid}), observed: writes, longest D-state stall"),
                mib: pieces(input.selected().map(|s| {
                    let o = s.observed.iter().find(|o| o.pid == pid && o.alive);
                    let mib = o
                        .and_then(|o| o.write_bytes)
                        .map(|b| crate::model::snapshot::rates(0, b, s.interval_s).mib_per_s);
                    (s.t_s, mib)
                })),
                longest: input
                    .selected()
                    .filter_map(|s| {
                        let ms = s
                            .stalls
                            .iter()
                            .filter(|st| st.ev.who.pid() == Some(pid))
                            .map(|st| st.ev.dur() as f64 / 1e6)
                            .reduce(f64::max)?;
                        Some((s.t_s - s.interval_s / 2.0, ms))
                    })
                    .collect(),
            })
            .collect()
    }
}

impl ChartData {
    fn of(input: &ReportInput) -> Option<ChartData> {
        let (x0, x1) = input.span()?;
        let n = input.targets.len();
        let per_target = |f: &dyn Fn(&Snapshot, &TargetInterval) -> Option<f64>| -> Vec<Line> {
            (0..n)
                .map(|target| {
                    pieces(input.selected().map(|s| {
                        let v = interval_of(s, target).filter(|t| t.active);
                        (s.t_s, v.and_then(|t| f(s, t)))
                    }))
                })
                .collect()
        };
        let timed = |t: &TargetInterval| (!t.hist.is_empty()).then(|| LatSummary::of(&t.hist));
        let kernel = |f: fn(&KernelInterval) -> Option<u64>| -> Line {
            pieces(input.selected().map(|s| {
                let kib = s.kernel.as_ref().and_then(f);
                (s.t_s, kib.map(kib_to_mib))
            }))
        };
        let procs = ObservedSeries::procs(input);
        let observed = ObservedSeries::all(input, &procs);
        let target_names: Vec<String> = (0..n)
            .map(|t| {
                let fs = input.targets.get(t).map_or("?", |m| m.fs.as_str());
                format!("#{} {fs}", t + 1)
            })
            .collect();
        let lanes = stall_lanes(input.snapshots, &target_names, &procs, x0, x1);
        Some(ChartData {
            x0,
            x1: if x1 > x0 { x1 } else { x0 + 1.0 },
            mib: per_target(&|s, t| Some(t.rates(s.interval_s).mib_per_s)),
            p99: per_target(&|_, t| timed(t).map(|l| l.p99 as f64 / 1e3)),
            max: per_target(&|_, t| timed(t).map(|l| l.max as f64 / 1e3)),
            dirty: kernel(|k| k.dirty_kib),
            writeback: kernel(|k| k.writeback_kib),
            bg_thresh: kernel(|k| k.dirty_bg_thresh_kib),
            thresh: kernel(|k| k.dirty_thresh_kib),
            lanes,
            dirty_by_target: input
                .dirty_by_target
                .iter()
                .map(|l| pieces(l.iter().copied()))
                .collect(),
            observed,
        })
    }
}

fn pieces(points: impl Iterator<Item = (f64, Option<f64>)>) -> Line {
    let mut out: Line = Vec::new();
    let mut open = false;
    for (t, v) in points {
        match v {
            Some(v) if open => out.last_mut().expect("open piece").push((t, v)),
            Some(v) => out.push(vec![(t, v)]),
            None => {}
        }
        open = v.is_some();
    }
    out
}

fn values<'a>(lines: &'a [&'a Line]) -> impl Iterator<Item = f64> + 'a {
    lines.iter().flat_map(|l| l.iter().flatten().map(|p| p.1))
}

/// The chart: throughput, latency and dirty memory stacked on one time
/// axis, stall starts marked on each. `segs` (from `summarize`) marks where
/// the writers moved or changed mode.
pub fn render_svg(input: &ReportInput, segs: &[Segment]) -> Result<String, String> {
    let data = ChartData::of(input).ok_or("no intervals in the chosen span")?;
    let mut buf = String::new();
    {
        let size = (WIDTH, HEIGHT + lanes_px(&data));
        let root = SVGBackend::with_string(&mut buf, size).into_drawing_area();
        draw(&root, input, segs, &data).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(buf)
}

fn draw(root: &Area, input: &ReportInput, segs: &[Segment], d: &ChartData) -> DrawResult {
    root.fill(&WHITE)?;
    let header_px = header(root, input, d)?;
    let (_, body) = root.split_vertically(header_px);
    let (h, _) = (body.dim_in_pixel().1, 0);
    let (charts, lanes) = body.split_vertically(h.saturating_sub(lanes_px(d)));
    let panels = charts.split_evenly((3, 1));
    throughput_panel(&panels[0], segs, d)?;
    latency_panel(&panels[1], segs, d)?;
    dirty_panel(&panels[2], segs, d)?;
    draw_lanes(&lanes, segs, d)
}

/// Height of a lane row: a line for the segment labels, then the bars.
const LANE_PX: u32 = 36;
/// Under the lanes: the legend of causes.
const LANE_LEGEND_PX: u32 = 34;

fn lanes_px(d: &ChartData) -> u32 {
    8 + LANE_PX * d.lanes.len() as u32 + LANE_LEGEND_PX
}

fn rgb(c: (u8, u8, u8)) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

/// The stall lanes under the time axis, on the panels' x scale (one lane
/// per target, then per observed process); the causes' legend with their
/// counts and time below.
fn draw_lanes(area: &Area, segs: &[Segment], d: &ChartData) -> DrawResult {
    for (i, lane) in d.lanes.iter().enumerate() {
        draw_lane(area, i, lane, &lane.name, segs, d)?;
    }
    let keys: Vec<Key> = cause_legend(&d.lanes)
        .into_iter()
        .map(|(c, n, secs)| {
            Key::bar(
                format!("{} {n} ({secs:.1} s)", c.as_str()),
                rgb(cause_rgb(c)),
            )
        })
        .collect();
    let y = 8 + (LANE_PX * d.lanes.len() as u32) as i32 + 16;
    let label = text_style(TEXT, INK).pos(Pos::new(HPos::Left, VPos::Center));
    if keys.is_empty() {
        area.draw_text("no stalls in this span", &label, (Y_LABEL_PX as i32, y))?;
        return Ok(());
    }
    area.draw_text("stalls:", &label, (4, y))?;
    draw_keys(area, &keys, Y_LABEL_PX as i32, y)?;
    Ok(())
}

/// The x pixel of time `t_s` in the lanes, on the panels' scale.
fn lane_x(d: &ChartData, t_s: f64) -> i32 {
    let (left, right) = (f64::from(Y_LABEL_PX), f64::from(WIDTH - RIGHT_PX));
    (left + (t_s - d.x0) / (d.x1 - d.x0) * (right - left)).round() as i32
}

/// The top and bottom pixel of lane `i`'s bar (under its label line).
fn lane_bar(i: usize) -> (i32, i32) {
    let top = 8 + (LANE_PX * i as u32) as i32;
    (top + 14, top + 32)
}

/// Lane `i`: its name left of the plot, mode × threads where a segment
/// starts, then its stalls as bars from start to end, a strip of the bar
/// per cause (`bands`: overlapping stalls of a cause merged), so no cause
/// hides another.
fn draw_lane(
    area: &Area,
    i: usize,
    lane: &Lane,
    name: &str,
    segs: &[Segment],
    d: &ChartData,
) -> DrawResult {
    let label = |size| text_style(size, colour(i)).pos(Pos::new(HPos::Left, VPos::Center));
    let (top, bottom) = lane_bar(i);
    area.draw_text(name, &label(13.0), (4, (top + bottom) / 2))?;
    let (left, right) = (Y_LABEL_PX as i32, (WIDTH - RIGHT_PX) as i32);
    let shade = RGBColor(245, 245, 245).filled();
    area.draw(&Rectangle::new([(left, top), (right, bottom)], shade))?;
    let strips = bands(lane);
    let k = strips.len() as i32;
    for (j, (cause, spans)) in strips.iter().enumerate() {
        let j = j as i32;
        let (y0, y1) = (
            top + (bottom - top) * j / k,
            top + (bottom - top) * (j + 1) / k,
        );
        let fill = rgb(cause_rgb(*cause)).filled();
        for &(from, to) in spans {
            let (a, b) = (lane_x(d, from), lane_x(d, to));
            area.draw(&Rectangle::new([(a, y0), (b.max(a + 1), y1)], fill))?;
        }
    }
    let mut last_end = i32::MIN;
    for sg in segs.iter().filter(|sg| sg.target == i) {
        let (Some(mode), Some(threads)) = (sg.mode, sg.threads) else {
            continue;
        };
        let text = format!("{mode} × {threads}");
        let x = lane_x(d, sg.from_s.max(d.x0)) + 2;
        if x >= last_end {
            area.draw_text(&text, &label(12.0), (x, top - 8))?;
            last_end = x + text_px(&text, 12.0) + 8;
        }
    }
    Ok(())
}

fn text_style(size: f64, colour: RGBColor) -> TextStyle<'static> {
    (FONT, size).into_font().color(&colour)
}

/// Rough rendered width of `s`: plotters cannot measure text without fonts.
fn text_px(s: &str, size: f64) -> i32 {
    (s.chars().count() as f64 * size / 1.24 * 0.58).ceil() as i32
}

/// How a legend entry shows its series.
#[derive(Clone, Copy)]
enum Sample {
    Line {
        width: u32,
        dashed: bool,
    },
    /// A stall lane's bar.
    Bar,
}

/// A legend entry: a sample, then its name.
struct Key {
    name: String,
    /// The sample's colours: one, or a piece of line per target for a
    /// key that stands for every target's line.
    colours: Vec<RGBColor>,
    sample: Sample,
}

impl Key {
    fn line(name: impl Into<String>, colour: RGBColor, width: u32, dashed: bool) -> Key {
        Key {
            name: name.into(),
            colours: vec![colour],
            sample: Sample::Line { width, dashed },
        }
    }
    fn solid(name: impl Into<String>, colour: RGBColor, width: u32) -> Key {
        Key::line(name, colour, width, false)
    }
    /// A solid line sample in each of `colours` side by side.
    fn per_target(name: impl Into<String>, colours: Vec<RGBColor>, width: u32) -> Key {
        Key {
            colours: if colours.is_empty() {
                vec![INK]
            } else {
                colours
            },
            ..Key::solid(name, INK, width)
        }
    }
    fn dashed(name: impl Into<String>, colour: RGBColor) -> Key {
        Key::line(name, colour, 2, true)
    }
    fn bar(name: impl Into<String>, colour: RGBColor) -> Key {
        Key {
            name: name.into(),
            colours: vec![colour],
            sample: Sample::Bar,
        }
    }
    /// The sample's width: 21 px, wider for many colours.
    fn sample_px(&self) -> i32 {
        21.max(7 * self.colours.len() as i32)
    }
    fn px(&self) -> i32 {
        self.sample_px() + 5 + text_px(&self.name, TEXT) + 18
    }
    fn draw_sample(&self, area: &Area, x: i32, y: i32) -> DrawResult {
        let c0 = self.colours[0];
        match self.sample {
            Sample::Line {
                width,
                dashed: true,
            } => {
                for (a, b) in [(0, 5), (8, 13), (16, 21)] {
                    let piece = vec![(x + a, y), (x + b, y)];
                    area.draw(&PathElement::new(piece, c0.stroke_width(width)))?;
                }
            }
            Sample::Line { width, .. } => {
                let (w, n) = (self.sample_px(), self.colours.len() as i32);
                for (i, c) in (0..).zip(&self.colours) {
                    let piece = vec![(x + w * i / n, y), (x + w * (i + 1) / n, y)];
                    area.draw(&PathElement::new(piece, c.stroke_width(width)))?;
                }
            }
            Sample::Bar => {
                let corners = [(x, y - 6), (x + self.sample_px(), y + 6)];
                area.draw(&Rectangle::new(corners, c0.filled()))?;
            }
        }
        Ok(())
    }
}

/// Draws keys left to right from `x` on the line centred at `y`, wrapping
/// at the right edge; returns the y of the last line.
fn draw_keys(area: &Area, keys: &[Key], x: i32, mut y: i32) -> Result<i32, Box<dyn Error>> {
    let mut cx = x;
    for k in keys {
        if cx > x && cx + k.px() > (WIDTH - RIGHT_PX) as i32 {
            cx = x;
            y += 20;
        }
        k.draw_sample(area, cx, y)?;
        let pos = Pos::new(HPos::Left, VPos::Center);
        let at = (cx + k.sample_px() + 5, y);
        area.draw_text(&k.name, &text_style(TEXT, INK).pos(pos), at)?;
        cx += k.px();
    }
    Ok(y)
}

/// Title, then the legend of targets and stall marks; returns the header's
/// height.
fn header(root: &Area, input: &ReportInput, d: &ChartData) -> Result<u32, Box<dyn Error>> {
    let title = format!("stallscope — {}", input.title);
    let x = Y_LABEL_PX as i32 - 60;
    // A long title gets smaller rather than cut at the edge.
    let room = (WIDTH - RIGHT_PX) as f64 - x as f64;
    let size = (22.0 * room / text_px(&title, 22.0) as f64).clamp(12.0, 22.0);
    let style = (FONT, size).into_font().style(FontStyle::Bold).color(&INK);
    root.draw_text(&title, &style, (x, 10))?;
    let n = input.targets.len();
    let keys: Vec<Key> = (0..n)
        .map(|t| {
            // compare's labels are numbered already ("#2 /mnt/xfs · mmap × 4").
            let label = input.label(t);
            let name = if label.starts_with('#') {
                label
            } else {
                format!("#{} {label}", t + 1)
            };
            Key::solid(name, colour(t), 3)
        })
        .chain(
            d.observed
                .iter()
                .enumerate()
                .map(|(i, o)| Key::solid(o.name.clone(), colour(n + i), 3)),
        )
        .collect();
    let y = draw_keys(root, &keys, x, 48)?;
    Ok((y + 16) as u32)
}

/// Splits a panel into its caption strip and plot, and draws the caption
/// and series keys.
fn panel<'a>(area: &Area<'a>, caption: &str, keys: &[Key]) -> Result<Area<'a>, Box<dyn Error>> {
    let (strip, plot) = area.split_vertically(STRIP_PX);
    let style = (FONT, 16.0).into_font().style(FontStyle::Bold).color(&INK);
    let pos = Pos::new(HPos::Left, VPos::Center);
    let x = Y_LABEL_PX as i32;
    strip.draw_text(caption, &style.pos(pos), (x, 14))?;
    draw_keys(&strip, keys, x + text_px(caption, 16.0) + 24, 14)?;
    Ok(plot)
}

type Chart<'a, 'b, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>;

fn chart<'a, 'b, R: AsRangedCoord<Value = f64>>(
    plot: &'a Area<'b>,
    d: &ChartData,
    y: R,
    bottom: bool,
) -> Result<Chart<'a, 'b, R::CoordDescType>, Box<dyn Error>> {
    Ok(ChartBuilder::on(plot)
        .margin_right(RIGHT_PX)
        .margin_top(4)
        .x_label_area_size(if bottom { 44 } else { 22 })
        .y_label_area_size(Y_LABEL_PX)
        .build_cartesian_2d(d.x0..d.x1, y)?)
}

/// Axes and grid, the same on every panel; the time axis is named once,
/// under the bottom one.
fn mesh<Y>(c: &mut Chart<'_, '_, Y>, y_desc: &str, y_labels: usize, bottom: bool) -> DrawResult
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let x_fmt = |v: &f64| format!("{v:.0}");
    let mut m = c.configure_mesh();
    m.x_labels(12)
        .y_labels(y_labels)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&num_label)
        .label_style(text_style(TEXT, INK))
        .axis_desc_style(text_style(TEXT, INK))
        .y_desc(y_desc)
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(TRANSPARENT);
    if bottom {
        m.x_desc("seconds since the start of the run");
    }
    m.draw()?;
    Ok(())
}

/// A faint line where each segment after the first begins (the stalls
/// are in the lanes under the time axis).
fn marks<Y: Ranged<ValueType = f64>>(
    c: &Chart<'_, '_, Y>,
    segs: &[Segment],
    d: &ChartData,
    y_top: f64,
    y_bottom: f64,
) -> DrawResult {
    let area = c.plotting_area();
    for s in segs.iter().filter(|s| s.from_s > d.x0) {
        let style = RGBColor(150, 150, 150).stroke_width(1);
        area.draw(&PathElement::new(
            vec![(s.from_s, y_bottom), (s.from_s, y_top)],
            style,
        ))?;
    }
    Ok(())
}

fn draw_line<Y: Ranged<ValueType = f64>>(
    c: &mut Chart<'_, '_, Y>,
    line: &Line,
    style: ShapeStyle,
) -> DrawResult {
    for piece in line {
        c.draw_series(LineSeries::new(piece.iter().copied(), style))?;
    }
    Ok(())
}

fn draw_dashed<Y: Ranged<ValueType = f64>>(
    c: &mut Chart<'_, '_, Y>,
    line: &Line,
    style: ShapeStyle,
) -> DrawResult {
    for piece in line {
        c.draw_series(DashedLineSeries::new(piece.iter().copied(), 8, 6, style))?;
    }
    Ok(())
}

/// A linear axis from 0 to a little above the largest value.
fn linear_top(vals: impl Iterator<Item = f64>) -> f64 {
    let max = vals.fold(0.0, f64::max);
    if max > 0.0 {
        max * 1.15
    } else {
        1.0
    }
}

/// Whole decades around the values, at least two, so 3 ms and 4 s are both
/// readable.
fn log_range(vals: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = vals
        .filter(|v| *v > 0.0)
        .fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi == 0.0 {
        return (0.001, 1.0);
    }
    // Just under the decade, so its label is not lost to rounding.
    let lo = 10f64.powf(lo.log10().floor()) * 0.999;
    let hi = 10f64.powf((hi * 1.5).log10().ceil()).max(lo * 100.0);
    (lo, hi)
}

fn num_label(v: &f64) -> String {
    if *v >= 1000.0 && (*v / 1000.0).fract() == 0.0 {
        format!("{}k", v / 1000.0)
    } else if *v >= 10.0 || *v == 0.0 {
        format!("{v:.0}")
    } else {
        let decimals = (-v.log10().floor()).max(0.0) as usize + 1;
        let s = format!("{v:.decimals$}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn throughput_panel(area: &Area, segs: &[Segment], d: &ChartData) -> DrawResult {
    let plot = panel(area, "Throughput", &[])?;
    let lines: Vec<&Line> = d
        .mib
        .iter()
        .chain(d.observed.iter().map(|o| &o.mib))
        .collect();
    let top = linear_top(values(&lines));
    let mut c = chart(&plot, d, 0.0..top, false)?;
    mesh(&mut c, "MiB/s", 6, false)?;
    for (t, line) in lines.iter().enumerate() {
        draw_line(&mut c, line, colour(t).stroke_width(2))?;
    }
    marks(&c, segs, d, top, 0.0)
}

fn latency_panel(area: &Area, segs: &[Segment], d: &ChartData) -> DrawResult {
    // The keys in the lines' own colours (each target's): p99 thick, max
    // thin and faded.
    let n = d.p99.len();
    let keys = [
        Key::per_target("p99 (thick)", (0..n).map(colour).collect(), 3),
        Key::per_target(
            "max (thin); each target in its colour",
            (0..n).map(|t| faded(colour(t))).collect(),
            1,
        ),
    ];
    let plot = panel(area, "Write latency", &keys)?;
    let all: Vec<&Line> = d.p99.iter().chain(&d.max).collect();
    let longest = d
        .observed
        .iter()
        .flat_map(|o| o.longest.iter().map(|p| p.1));
    let (lo, hi) = log_range(values(&all).chain(longest));
    let mut c = chart(&plot, d, (lo..hi).log_scale(), false)?;
    // One label per decade.
    let decades = (hi / lo).log10().round() as usize;
    mesh(&mut c, "ms (log scale)", decades + 1, false)?;
    for (t, line) in d.max.iter().enumerate() {
        draw_line(&mut c, line, faded(colour(t)).stroke_width(1))?;
    }
    for (t, line) in d.p99.iter().enumerate() {
        draw_line(&mut c, line, colour(t).stroke_width(2))?;
    }
    for (i, o) in d.observed.iter().enumerate() {
        let style = colour(n + i).filled();
        c.draw_series(o.longest.iter().map(|&p| Circle::new(p, 4, style)))?;
    }
    marks(&c, segs, d, hi, lo)
}

fn dirty_panel(area: &Area, segs: &[Segment], d: &ChartData) -> DrawResult {
    let keys = [
        Key::solid("Dirty", DIRTY, 2),
        Key::solid("Writeback", WRITEBACK, 2),
        Key::dashed("background threshold", BG_THRESH),
        Key::dashed("threshold", THRESH),
    ];
    if !d.dirty_by_target.is_empty() {
        return dirty_per_run_panel(area, segs, d);
    }
    let plot = panel(area, "Dirty memory (system-wide)", &keys)?;
    let lines = [&d.dirty, &d.writeback, &d.bg_thresh, &d.thresh];
    let top = linear_top(values(&lines));
    let mut c = chart(&plot, d, 0.0..top, true)?;
    mesh(&mut c, "MiB", 6, true)?;
    draw_dashed(&mut c, &d.bg_thresh, BG_THRESH.stroke_width(2))?;
    draw_dashed(&mut c, &d.thresh, THRESH.stroke_width(2))?;
    draw_line(&mut c, &d.writeback, WRITEBACK.stroke_width(2))?;
    draw_line(&mut c, &d.dirty, DIRTY.stroke_width(2))?;
    if lines.iter().all(|l| l.is_empty()) {
        let pos = Pos::new(HPos::Center, VPos::Center);
        let note = text_style(TEXT, INK).pos(pos);
        let area = c.plotting_area().strip_coord_spec();
        let (w, h) = area.dim_in_pixel();
        let at = (w as i32 / 2, h as i32 / 2);
        area.draw_text("no kernel counters in this span", &note, at)?;
    }
    marks(&c, segs, d, top, 0.0)
}

/// `compare`: the system's dirty memory during each run, in the run's
/// colour (the runs took turns, so one system-wide line would mix them).
fn dirty_per_run_panel(area: &Area, segs: &[Segment], d: &ChartData) -> DrawResult {
    let n = d.dirty_by_target.len();
    let keys = [Key::per_target(
        "Dirty during each run, in its colour",
        (0..n).map(colour).collect(),
        2,
    )];
    let plot = panel(area, "Dirty memory (system-wide)", &keys)?;
    let lines: Vec<&Line> = d.dirty_by_target.iter().collect();
    let top = linear_top(values(&lines));
    let mut c = chart(&plot, d, 0.0..top, true)?;
    mesh(&mut c, "MiB", 6, true)?;
    for (t, line) in lines.iter().enumerate() {
        draw_line(&mut c, line, colour(t).stroke_width(2))?;
    }
    marks(&c, segs, d, top, 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cause::{Attribution, Evidence};
    use crate::model::ops::{new_histogram, OpKind};
    use crate::model::snapshot::BdpStats;
    use crate::model::stall::Blocked;
    use hdrhistogram::Histogram;

    fn meta(path: &str, fs: &str) -> TargetMeta {
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

    fn ti(target: usize, active: bool, mode: Mode, threads: u32, lat_us: &[u64]) -> TargetInterval {
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
    fn snap(i: u64, targets: Vec<TargetInterval>, stalls: Vec<Stall>) -> Snapshot {
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

    fn stall(target: usize, start_s: f64, dur_ms: u64, cause: Cause) -> Stall {
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

    fn kernel(dirty_kib: u64) -> KernelInterval {
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

    fn input<'a>(targets: &'a [TargetMeta], snaps: &'a [Snapshot]) -> ReportInput<'a> {
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
    fn moving() -> (Vec<TargetMeta>, Vec<Snapshot>) {
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

    #[test]
    fn text_has_a_line_per_segment_and_a_whole_span_line() {
        let (targets, snaps) = moving();
        let inp = input(&targets, &snaps);
        let text = render_text(&summarize(&inp), &inp);
        assert!(text.starts_with("stallscope report — mmap × 4 threads"));
        let rows: Vec<&str> = text.lines().filter(|l| l.contains("s  ")).collect();
        assert!(text.contains("/lab/ext4  (ext4 on /dev/loop0 (7:0), rw,relatime)"));
        assert_eq!(
            rows.iter().filter(|l| l.contains(" all ")).count(),
            1,
            "{text}"
        );
        assert_eq!(rows.iter().filter(|l| l.contains(" mmap ")).count(), 1);
        assert_eq!(rows.iter().filter(|l| l.contains(" buffered ")).count(), 2);
    }

    /// A tiny CSV reader for the tests: quoted fields, doubled quotes.
    fn csv_fields(line: &str) -> Vec<String> {
        let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    cur.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => out.push(std::mem::take(&mut cur)),
                _ => cur.push(c),
            }
        }
        out.push(cur);
        out
    }

    #[test]
    fn csv_has_every_column_a_row_per_interval_and_target_and_empty_unknowns() {
        let targets = vec![meta("/lab/a,\"b\"", "ext4"), meta("/lab/xfs", "xfs")];
        let (_, mut snaps) = moving();
        snaps[0].kernel = Some(kernel(100 << 10));
        snaps[0].targets[0].bdp = Some(BdpStats {
            events: 3,
            pause_ms: 0,
            max_pause_ms: 0,
        });
        let csv = render_csv(&input(&targets, &snaps));
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + snaps.len() * 2);
        let header = csv_fields(lines[0]);
        for col in [
            "t_s",
            "target",
            "fs",
            "mode",
            "threads",
            "active",
            "ops",
            "ops_per_s",
            "mib_per_s",
            "lat_mean_us",
            "lat_p50_us",
            "lat_p95_us",
            "lat_p99_us",
            "lat_p999_us",
            "lat_max_us",
            "stalls",
            "sync_ops",
            "sync_max_ms",
            "dirty_kib",
            "writeback_kib",
            "dirty_thresh_kib",
            "dirty_bg_thresh_kib",
            "psi_io_some_pct",
            "psi_io_full_pct",
            "dev_write_mib_per_s",
            "dev_util_pct",
            "dev_inflight",
            "dev_w_await_ms",
            "minflt",
            "majflt",
            "bdp_events",
            "bdp_pause_ms",
            "bdp_max_pause_ms",
            "wb_waits",
        ] {
            assert!(header.iter().any(|h| h == col), "no column {col}");
        }
        let row = |i: usize| -> BTreeMap<String, String> {
            header.iter().cloned().zip(csv_fields(lines[i])).collect()
        };
        let (r0, r1) = (row(1), row(3));
        assert_eq!(csv_fields(lines[1]).len(), header.len());
        assert_eq!(r0["target"], "/lab/a,\"b\"");
        assert_eq!((r0["t_s"].as_str(), r0["ops"].as_str()), ("1", "10"));
        assert_eq!(r0["dirty_kib"], (100 << 10).to_string());
        assert_eq!(r0["psi_io_some_pct"], "12.5");
        // Unknown is empty, a measured zero is 0.
        assert_eq!(r0["psi_io_full_pct"], "");
        assert_eq!(r0["dev_util_pct"], "");
        assert_eq!(
            (r0["bdp_events"].as_str(), r0["bdp_pause_ms"].as_str()),
            ("3", "0")
        );
        assert_eq!(r0["wb_waits"], "");
        assert_eq!(
            (r0["sync_ops"].as_str(), r0["sync_max_ms"].as_str()),
            ("0", "")
        );
        assert_eq!(r1["dirty_kib"], "");
        assert_eq!(r1["bdp_events"], "");
        // The idle target timed nothing: no latency, not 0 µs.
        let idle = row(2);
        assert_eq!(
            (idle["active"].as_str(), idle["ops"].as_str()),
            ("false", "0")
        );
        assert_eq!(idle["lat_p99_us"], "");
        assert_eq!(r0["lat_max_us"], "10");
    }

    #[test]
    fn svg_is_whole_and_names_the_workload_targets_and_each_stall() {
        let (targets, snaps) = sample(120);
        let inp = input(&targets, &snaps);
        let svg = render_svg(&inp, &summarize(&inp)).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
        assert!(svg.contains(&inp.title));
        for t in &targets {
            assert!(
                svg.contains(&format!("{} ({})", t.path, t.fs)),
                "{}",
                t.path
            );
        }
        let stalls: Vec<&Stall> = snaps.iter().flat_map(|s| &s.stalls).collect();
        assert!(stalls.len() > 5);
        // No markers crowding the panels: each stall lies in a bar of its
        // cause's colour in its target's lane, as long as it lasted;
        // overlapping ones share a bar, so there are no more bars than
        // stalls (and the legend has a bar per cause).
        assert_eq!(svg.matches("<polygon").count(), 0);
        let d = ChartData::of(&inp).unwrap();
        let bars = rects(&svg);
        for st in &stalls {
            let from = start_s(st).clamp(d.x0, d.x1);
            let to = (start_s(st) + st.ev.dur() as f64 / 1e9).clamp(d.x0, d.x1);
            let (a, b) = (lane_x(&d, from), lane_x(&d, to).max(lane_x(&d, from) + 1));
            let (top, bottom) = lane_rows(st.ev.who.target().unwrap());
            let fill = hex(cause_rgb(st.why.cause));
            assert!(
                bars.iter().any(|r| r.fill == fill
                    && r.x <= a
                    && r.x + r.w >= b
                    && r.y >= top
                    && r.y + r.h <= bottom),
                "no {fill} bar over x {a}..{b} in lane y {top}..{bottom} for {st:?}"
            );
        }
        for c in Cause::ALL {
            let n = stalls.iter().filter(|s| s.why.cause == c).count();
            let drawn = bars.iter().filter(|r| r.fill == hex(cause_rgb(c))).count();
            assert!(drawn <= n + 1, "{c:?}: {drawn} bars for {n} stalls");
            assert_eq!(drawn > 0, n > 0, "{c:?}");
        }
        for word in [
            "Throughput",
            "Write latency",
            "Dirty memory",
            "threshold",
            "seconds",
        ] {
            assert!(svg.contains(word), "{word}");
        }
    }

    /// A stall's bar is as long as the stall on the panels' time axis.
    #[test]
    fn a_long_stall_is_a_bar_as_long_as_it_lasted() {
        let targets = [meta("/mnt/ext4", "ext4"), meta("/mnt/xfs", "xfs")];
        let snaps: Vec<Snapshot> = (0..40)
            .map(|i| {
                let mut s = snap(i, vec![], vec![]);
                if i == 20 {
                    s.stalls = vec![stall(1, 5.0, 13_000, Cause::Sync)];
                }
                s
            })
            .collect();
        let inp = input(&targets, &snaps);
        let d = ChartData::of(&inp).unwrap();
        assert!(d.lanes[0].spans.is_empty(), "target 0 has no stall");
        assert_eq!(d.lanes[1].spans.len(), 1, "target 1's lane has it");
        let svg = render_svg(&inp, &[]).unwrap();
        let (top, bottom) = lane_rows(1);
        let bars: Vec<Rect> = rects(&svg)
            .into_iter()
            .filter(|r| r.fill == hex(cause_rgb(Cause::Sync)))
            .filter(|r| r.y >= top && r.y + r.h <= bottom)
            .collect();
        assert_eq!(bars.len(), 1, "one bar in target 1's lane: {bars:?}");
        let plot_px = f64::from(WIDTH - Y_LABEL_PX - RIGHT_PX);
        let want = 13.0 / (d.x1 - d.x0) * plot_px;
        assert!(
            (f64::from(bars[0].w) - want).abs() <= 2.0,
            "a {want:.0} px bar for 13 s of {:.0} s: {bars:?}",
            d.x1 - d.x0
        );
        assert!((f64::from(bars[0].x) - f64::from(lane_x(&d, 5.0))).abs() <= 1.0);
    }

    /// Stalls of two causes overlapping in one lane: each cause has its
    /// own strip, so a 10 s sync under 40 throttle sleeps of other threads
    /// shows whole, and the sleeps, overlapping, are one band.
    #[test]
    fn overlapping_stalls_of_two_causes_both_show_in_their_lane() {
        let targets = [meta("/mnt/ext4", "ext4")];
        let mut stalls: Vec<Stall> = (0..40)
            .map(|i| stall(0, 1.0 + f64::from(i) * 0.25, 300, Cause::DirtyThrottle))
            .collect();
        stalls.push(stall(0, 2.0, 10_000, Cause::Sync));
        let snaps: Vec<Snapshot> = (0..20)
            .map(|i| snap(i, vec![], if i == 12 { stalls.clone() } else { vec![] }))
            .collect();
        let inp = input(&targets, &snaps);
        let d = ChartData::of(&inp).unwrap();
        let (top, bottom) = lane_rows(0);
        let in_lane = |c: Cause| -> Vec<Rect> {
            rects(&render_svg(&inp, &[]).unwrap())
                .into_iter()
                .filter(|r| r.fill == hex(cause_rgb(c)) && r.y >= top && r.y + r.h <= bottom)
                .collect()
        };
        let (sync, throttle) = (in_lane(Cause::Sync), in_lane(Cause::DirtyThrottle));
        assert_eq!(sync.len(), 1, "{sync:?}");
        assert_eq!(throttle.len(), 1, "the sleeps merged: {throttle:?}");
        let (s, t) = (&sync[0], &throttle[0]);
        assert_eq!((s.x, s.x + s.w), (lane_x(&d, 2.0), lane_x(&d, 12.0)));
        assert_eq!((t.x, t.x + t.w), (lane_x(&d, 1.0), lane_x(&d, 11.05)));
        assert!(
            s.y >= t.y + t.h || t.y >= s.y + s.h,
            "the strips do not overlap: {s:?} {t:?}"
        );
    }

    /// A `<rect>` of the SVG.
    #[derive(Debug)]
    struct Rect {
        x: i32,
        y: i32,
        w: i32,
        h: i32,
        fill: String,
    }

    fn rects(svg: &str) -> Vec<Rect> {
        let attr = |r: &str, name: &str| -> Option<String> {
            let v = r.split(&format!(" {name}=\"")).nth(1)?.split('"').next()?;
            Some(v.to_string())
        };
        let num = |r: &str, name: &str| attr(r, name)?.parse::<i32>().ok();
        svg.split("<rect")
            .skip(1)
            .map(|r| &r[..r.find('>').unwrap_or(r.len())])
            .filter_map(|r| {
                Some(Rect {
                    x: num(r, "x")?,
                    y: num(r, "y")?,
                    w: num(r, "width")?,
                    h: num(r, "height")?,
                    fill: attr(r, "fill")?,
                })
            })
            .collect()
    }

    /// Lane `i`'s bar in the SVG: the lanes are drawn under the panels,
    /// from `HEIGHT` down.
    fn lane_rows(i: usize) -> (i32, i32) {
        let (top, bottom) = lane_bar(i);
        (top + HEIGHT as i32, bottom + HEIGHT as i32)
    }

    fn hex((r, g, b): (u8, u8, u8)) -> String {
        format!("#{r:02X}{g:02X}{b:02X}")
    }

    #[test]
    fn svg_of_an_observe_recording_charts_the_process_and_its_stalls() {
        let snaps: Vec<Snapshot> = (0..10)
            .map(|i| {
                let mut s = snap(i, vec![], vec![]);
                s.observed = vec![crate::model::snapshot::ObservedInterval {
                    pid: 42,
                    comm: "java".into(),
                    alive: true,
                    samples: 20,
                    write_bytes: Some((20 + i) << 20),
                    ..Default::default()
                }];
                if i % 3 == 0 {
                    let mut st = stall(0, i as f64 + 0.2, 400, Cause::DirtyThrottle);
                    st.ev = Blocked::process(
                        (42, "java", 43, "MutationStage"),
                        st.ev.start_ns,
                        st.ev.dur(),
                    );
                    s.stalls = vec![st];
                }
                s
            })
            .collect();
        let inp = input(&[], &snaps);
        let d = ChartData::of(&inp).unwrap();
        assert_eq!(d.observed.len(), 1);
        assert_eq!(
            d.observed[0].longest.len(),
            4,
            "one point per interval with a stall"
        );
        assert_eq!(d.observed[0].longest[0].1, 400.0);
        assert_eq!(d.observed[0].mib[0][0], (1.0, 20.0));
        assert_eq!(d.lanes.len(), 1, "a lane for the process");
        assert_eq!(d.lanes[0].spans.len(), 4, "its stalls in it");
        let svg = render_svg(&inp, &[]).unwrap();
        assert!(svg.contains("java (pid 42), observed"), "legend names it");
        assert!(svg.matches("<circle").count() >= 4, "its stalls drawn");
    }

    #[test]
    fn svg_converts_to_png() {
        let Ok(out) = std::process::Command::new("rsvg-convert")
            .arg("--version")
            .output()
        else {
            println!("SKIPPED svg_converts_to_png: rsvg-convert not installed (apt-get install librsvg2-bin)");
            return;
        };
        assert!(out.status.success());
        let dir = tempfile::tempdir().unwrap();
        let png = write_chart(&dir.path().join("chart.svg"));
        let bytes = std::fs::read(png).unwrap();
        assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }

    /// Writes the 120 s sample chart as SVG and PNG to
    /// `$STALLSCOPE_SAMPLE_DIR`, to look at.
    #[test]
    #[ignore]
    fn write_sample_chart() {
        let dir = std::env::var("STALLSCOPE_SAMPLE_DIR").expect("STALLSCOPE_SAMPLE_DIR");
        let png = write_chart(&std::path::Path::new(&dir).join("report-sample.svg"));
        let (targets, snaps) = sample(120);
        let inp = input(&targets, &snaps);
        println!("{}\n{}", render_text(&summarize(&inp), &inp), png.display());
    }

    /// Renders the sample to `svg` and converts it to PNG beside it.
    fn write_chart(svg: &std::path::Path) -> std::path::PathBuf {
        let (targets, snaps) = sample(120);
        let inp = input(&targets, &snaps);
        std::fs::write(svg, render_svg(&inp, &summarize(&inp)).unwrap()).unwrap();
        let png = svg.with_extension("png");
        let st = std::process::Command::new("rsvg-convert")
            .args(["-b", "white", "-o"])
            .arg(&png)
            .arg(svg)
            .status()
            .unwrap();
        assert!(st.success());
        png
    }

    /// A deterministic pseudo-random number in 0..1.
    fn noise(seed: u64) -> f64 {
        let x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((x >> 33) % 10_000) as f64 / 10_000.0
    }

    /// A realistic session: mmap × 4 on ext4, 8 threads from 50 s, then the
    /// writers move to xfs at 80 s. Dirty memory climbs to the throttle
    /// point, each periodic msync takes seconds and drains it, and throttled
    /// writes stall every few seconds.
    fn sample(secs: u64) -> (Vec<TargetMeta>, Vec<Snapshot>) {
        let targets = vec![
            meta("/var/tmp/lab/ext4", "ext4"),
            meta("/var/tmp/lab/xfs", "xfs"),
        ];
        let mut dirty = 40.0f64;
        let mut pending: Vec<Stall> = Vec::new();
        let mut snaps = Vec::new();
        for i in 0..secs {
            let t = i as f64;
            let on = usize::from(t >= 80.0);
            let threads = if (50.0..80.0).contains(&t) { 8 } else { 4 };
            let sync_now = i % 10 == 9;
            dirty = if sync_now {
                dirty * 0.3
            } else {
                (dirty + 28.0).min(215.0)
            };
            let throttled = dirty > 160.0;
            if throttled && i % 3 == 0 {
                let d = 150 + (noise(i) * 300.0) as u64;
                pending.push(stall(on, t + noise(i + 7), d, Cause::DirtyThrottle));
            }
            if sync_now {
                let d = 800 + (noise(i + 3) * 2500.0) as u64;
                pending.push(stall(on, t + 0.2, d, Cause::Sync));
            }
            let end = t + 1.0;
            let (done, rest): (Vec<Stall>, Vec<Stall>) = pending
                .into_iter()
                .partition(|s| (s.ev.start_ns + s.ev.dur()) as f64 / 1e9 <= end);
            pending = rest;
            let targets_now = (0..2)
                .map(|target| {
                    let mine: Vec<&Stall> = done
                        .iter()
                        .filter(|s| s.ev.who.target() == Some(target))
                        .collect();
                    interval(target, target == on, threads, i, throttled, &mine)
                })
                .collect();
            let mut s = snap(i, targets_now, done);
            s.kernel = Some(KernelInterval {
                writeback_kib: Some(
                    ((if sync_now {
                        120.0
                    } else {
                        8.0 + noise(i) * 20.0
                    }) * 1024.0) as u64,
                ),
                ..kernel((dirty * 1024.0) as u64)
            });
            snaps.push(s);
        }
        (targets, snaps)
    }

    /// One target's interval: ~20k fast ops/s per 4 threads, fewer and
    /// slower when throttled, plus the stalls that ended in it.
    fn interval(
        target: usize,
        active: bool,
        threads: u32,
        i: u64,
        throttled: bool,
        stalls: &[&Stall],
    ) -> TargetInterval {
        let mut t = ti(target, active, Mode::Mmap, threads, &[]);
        if !active {
            return t;
        }
        let base = 5000.0 * threads as f64 * if target == 1 { 0.6 } else { 1.0 };
        let ops = (base * if throttled { 0.35 } else { 1.0 } * (0.85 + 0.3 * noise(i))) as u64;
        let slow = if throttled { ops / 50 } else { ops / 500 };
        t.hist
            .record_n(4 + (noise(i + 1) * 6.0) as u64, ops - slow)
            .unwrap();
        t.hist
            .record_n(800 + (noise(i + 2) * 4000.0) as u64, slow)
            .unwrap();
        for s in stalls {
            t.hist.record(s.ev.dur() / 1000).unwrap();
        }
        t.mode = if target == 1 {
            Mode::Buffered
        } else {
            Mode::Mmap
        };
        t.ops = ops;
        t.bytes = ops * 818;
        t.stalls = stalls.len() as u32;
        t
    }
}
