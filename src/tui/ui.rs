//! Drawing `&App` onto a ratatui frame. Pure: the same App gives the same
//! screen, so tests assert on a TestBackend buffer. Every size down to 1×1
//! draws what fits and never panics: each direct cell write is bounds-checked.

use super::app::{App, Point, TargetView};
use super::keys::{view_keys, KeyDef, KEYS, PROMPT_KEYS, REPLAY_KEYS};
use crate::base::units::ByteSize;
use crate::model::cause::Cause;
use crate::model::observed::BlockTiming;
use crate::model::stall::Stall;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::{Color, Modifier, Style as RStyle};
use ratatui::symbols::{self, Marker};
use ratatui::text::{Line, Span};
use ratatui::widgets::canvas::{Canvas, Line as CLine, Points};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Widget};
use ratatui::Frame;

/// Left of each plot: y labels (6 columns) and the axis.
pub const GUTTER_L: u16 = 7;
/// Right of each plot: the axis and right-hand labels (5 columns).
pub const GUTTER_R: u16 = 6;
/// A chart needs its title row and three plot rows to say anything.
pub const MIN_CHART_H: u16 = 4;
/// Below this only the header and the one-line summary are drawn.
pub const COMPACT_W: u16 = 60;
pub const COMPACT_H: u16 = 15;
const HEADER_H: u16 = 3;

// ---------------------------------------------------------------- theme ----

/// Glyphs, so `--ascii` swaps them all in one place.
struct Glyphs {
    times: &'static str,
    dash: &'static str,
    rec: &'static str,
    legend: &'static str,
    stall_top: &'static str,
    stall_line: &'static str,
    switch_top: &'static str,
    switch_line: &'static str,
    axis: &'static str,
    tick: &'static str,
    cursor: &'static str,
    marker: Marker,
    border: symbols::border::Set,
}

const UNICODE: Glyphs = Glyphs {
    times: "×",
    dash: "—",
    rec: "● REC",
    legend: "━",
    stall_top: "▼",
    stall_line: "┊",
    switch_top: "◆",
    switch_line: "┆",
    axis: "│",
    tick: "┤",
    cursor: "█",
    marker: Marker::Braille,
    border: symbols::border::ROUNDED,
};

const ASCII: Glyphs = Glyphs {
    times: "x",
    dash: "-",
    rec: "* REC",
    legend: "-",
    stall_top: "v",
    stall_line: ":",
    switch_top: "#",
    switch_line: "|",
    axis: "|",
    tick: "+",
    cursor: "_",
    marker: Marker::Dot,
    border: symbols::border::Set {
        top_left: "+",
        top_right: "+",
        bottom_left: "+",
        bottom_right: "+",
        vertical_left: "|",
        vertical_right: "|",
        horizontal_top: "-",
        horizontal_bottom: "-",
    },
};

/// What `Marker::Dot` draws, replaced by an ASCII star in `--ascii`.
const DOT: &str = "•";

struct Theme {
    color: bool,
    ascii: bool,
    g: &'static Glyphs,
}

impl Theme {
    fn of(app: &App) -> Theme {
        let s = app.style();
        Theme {
            color: s.color,
            ascii: s.ascii,
            g: if s.ascii { &ASCII } else { &UNICODE },
        }
    }
    /// A foreground colour, or nothing at all under NO_COLOR.
    fn fg(&self, c: Color) -> RStyle {
        if self.color {
            RStyle::new().fg(c)
        } else {
            RStyle::new()
        }
    }
    /// The colour a series paints with (Reset = the terminal's own).
    fn paint(&self, c: Color) -> Color {
        if self.color {
            c
        } else {
            Color::Reset
        }
    }
    fn bold(&self) -> RStyle {
        RStyle::new().add_modifier(Modifier::BOLD)
    }
    fn dim(&self) -> RStyle {
        RStyle::new().add_modifier(Modifier::DIM)
    }
    /// An alarm: red background, or reversed video without colour.
    fn alarm(&self) -> RStyle {
        let s = self.bold();
        if self.color {
            s.fg(Color::White).bg(Color::Red)
        } else {
            s.add_modifier(Modifier::REVERSED)
        }
    }
}

// --------------------------------------------------------------- charts ----

/// What a series reads from a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Mib,
    Ops,
    P99,
    Max,
    Dirty,
    Writeback,
    BgThresh,
    Thresh,
    Pause,
    Psi,
    Util,
}

impl Field {
    fn get(self, p: &Point) -> Option<f64> {
        match self {
            Field::Mib => Some(p.mib_per_s),
            Field::Ops => (!p.observed).then_some(p.ops_per_s),
            Field::P99 => p.p99_ms,
            Field::Max => p.max_ms,
            Field::Dirty => p.dirty_mib,
            Field::Writeback => p.writeback_mib,
            Field::BgThresh => p.bg_thresh_mib,
            Field::Thresh => p.thresh_mib,
            Field::Pause => p.pause_ms_per_s,
            Field::Psi => p.psi_full_pct,
            Field::Util => p.util_pct,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum AxisKind {
    /// 0..a round number at least `floor`.
    Linear {
        floor: f64,
    },
    /// Decades of ms: a 3 ms p99 and a 4 s max both readable.
    Log,
    Percent,
}

struct SeriesDef {
    name: &'static str,
    field: Field,
    color: Color,
    right: bool,
}

struct ChartDef {
    title: &'static str,
    left: AxisKind,
    right: Option<AxisKind>,
    series: &'static [SeriesDef],
}

const fn s(name: &'static str, field: Field, color: Color, right: bool) -> SeriesDef {
    SeriesDef {
        name,
        field,
        color,
        right,
    }
}

/// The four charts, top to bottom; small terminals drop them from the end.
const CHARTS: [ChartDef; 4] = [
    ChartDef {
        title: "Throughput",
        left: AxisKind::Linear { floor: 1.0 },
        right: Some(AxisKind::Linear { floor: 10.0 }),
        series: &[
            s("MiB/s", Field::Mib, Color::Cyan, false),
            s("ops/s (right)", Field::Ops, Color::Yellow, true),
        ],
    },
    ChartDef {
        title: "Latency ms, log",
        left: AxisKind::Log,
        right: None,
        series: &[
            s("p99", Field::P99, Color::Green, false),
            s("max", Field::Max, Color::Red, false),
        ],
    },
    ChartDef {
        title: "Dirty MiB",
        left: AxisKind::Linear { floor: 1.0 },
        right: None,
        series: &[
            s("dirty", Field::Dirty, Color::Magenta, false),
            s("writeback", Field::Writeback, Color::Blue, false),
            s("bg thresh", Field::BgThresh, Color::Gray, false),
            s("thresh", Field::Thresh, Color::LightRed, false),
        ],
    },
    ChartDef {
        title: "Kernel pressure",
        left: AxisKind::Percent,
        right: Some(AxisKind::Linear { floor: 100.0 }),
        series: &[
            s("PSI io full %", Field::Psi, Color::LightMagenta, false),
            s("util %", Field::Util, Color::LightBlue, false),
            s("throttle ms/s (right)", Field::Pause, Color::LightRed, true),
        ],
    },
];

/// Chart titles, top to bottom (tests look for them).
pub fn chart_titles() -> [&'static str; 4] {
    CHARTS.map(|c| c.title)
}

/// A value → fraction-of-height mapping.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scale {
    Linear(f64),
    /// log10 bounds.
    Log(f64, f64),
}

impl Scale {
    fn frac(self, v: f64) -> f64 {
        match self {
            Scale::Linear(max) => (v / max).clamp(0.0, 1.0),
            Scale::Log(lo, hi) => ((v.max(1e-9).log10() - lo) / (hi - lo)).clamp(0.0, 1.0),
        }
    }
}

/// One chart's scales, shared by both sides of the compare view.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Scales {
    left: Scale,
    right: Option<Scale>,
}

fn scales(def: &ChartDef, views: &[&TargetView], t0: f64, t1: f64) -> Scales {
    let values = |right: bool| {
        let fields: Vec<Field> = def
            .series
            .iter()
            .filter(|s| s.right == right)
            .map(|s| s.field)
            .collect();
        let mut vals = Vec::new();
        for v in views {
            for p in v.visible(t0, t1) {
                vals.extend(fields.iter().filter_map(|f| f.get(p)));
            }
        }
        vals
    };
    Scales {
        left: scale(def.left, &values(false)),
        right: def.right.map(|k| scale(k, &values(true))),
    }
}

fn scale(kind: AxisKind, vals: &[f64]) -> Scale {
    let max = vals.iter().copied().fold(0.0, f64::max);
    match kind {
        AxisKind::Percent => Scale::Linear(100.0),
        AxisKind::Linear { floor } => Scale::Linear(nice_ceil(max.max(floor))),
        AxisKind::Log => {
            let min = vals
                .iter()
                .copied()
                .filter(|&v| v > 0.0)
                .fold(f64::MAX, f64::min);
            let lo = if min == f64::MAX {
                0.0
            } else {
                min.log10().floor().clamp(-3.0, 0.0)
            };
            let hi = max.max(1.0).log10().ceil().clamp(4.0, 6.0);
            Scale::Log(lo, hi)
        }
    }
}

/// The next 1, 2 or 5 × 10^k at or above `v`.
fn nice_ceil(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&n| n >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * p)
}

/// Connected (x, height fraction) points of one series.
type Run = Vec<(f64, f64)>;

/// Runs of (x, height fraction) without unknown values inside a run. Points
/// sharing a sub-column fold to their min and max, so an hour costs what two
/// minutes do and a one-interval spike still shows.
fn runs(points: &[&Point], field: Field, sc: Scale, t0: f64, t1: f64, cols: usize) -> Vec<Run> {
    let mut out = Vec::new();
    let mut cur: Vec<(f64, f64)> = Vec::new();
    let mut bucket: Option<(i64, f64, f64, f64)> = None;
    let flush = |b: &mut Option<(i64, f64, f64, f64)>, cur: &mut Vec<(f64, f64)>| {
        if let Some((_, x, lo, hi)) = b.take() {
            cur.push((x, lo));
            if hi > lo {
                cur.push((x, hi));
            }
        }
    };
    let span = (t1 - t0).max(1e-9);
    for p in points {
        let Some(v) = field.get(p) else {
            flush(&mut bucket, &mut cur);
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        };
        let (x, y) = (p.x(), sc.frac(v));
        let col = ((x - t0) / span * cols as f64).floor() as i64;
        match bucket.as_mut() {
            Some(b) if b.0 == col => {
                b.2 = b.2.min(y);
                b.3 = b.3.max(y);
            }
            _ => {
                flush(&mut bucket, &mut cur);
                bucket = Some((col, x, y, y));
            }
        }
    }
    flush(&mut bucket, &mut cur);
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The segment a→b cut to t0..=t1 (the canvas drops lines that leave it).
fn clip(a: (f64, f64), b: (f64, f64), t0: f64, t1: f64) -> Option<((f64, f64), (f64, f64))> {
    if b.0 < t0 || a.0 > t1 || b.0 < a.0 {
        return None;
    }
    let at = |x: f64| {
        if b.0 == a.0 {
            a.1
        } else {
            a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
        }
    };
    let (x0, x1) = (a.0.max(t0), b.0.min(t1));
    Some(((x0, at(x0)), (x1, at(x1))))
}

/// The column (from the plot's left edge) the canvas puts time `t` in:
/// the same arithmetic as ratatui's grid, so markers sit on the data.
pub fn time_col(t: f64, t0: f64, t1: f64, width: u16, sub: u16) -> u16 {
    let dots = f64::from(width) * f64::from(sub) - 1.0;
    let dot = ((t - t0) * dots / (t1 - t0)).max(0.0) as u16;
    (dot / sub).min(width.saturating_sub(1))
}

// ---------------------------------------------------------------- draw -----

/// Draws the whole dashboard.
pub fn draw(f: &mut Frame, app: &App) {
    let area = f.area();
    let buf = f.buffer_mut();
    if area.is_empty() {
        return;
    }
    let th = Theme::of(app);
    let banner_h = u16::from(!app.live_is_empty());
    let [header, banner, body, status] = Layout::vertical([
        Constraint::Length(HEADER_H),
        Constraint::Length(banner_h),
        Constraint::Fill(1),
        Constraint::Length(1),
    ])
    .areas(area);
    Paragraph::new(header_lines(app, &th, area.width)).render(header, buf);
    draw_banner(buf, banner, app, &th);
    if area.width >= COMPACT_W && area.height >= COMPACT_H {
        draw_body(buf, body, app, &th);
    } else if body.height > 0 {
        let why = format!(
            "terminal too small for charts: need {COMPACT_W}\u{d7}{COMPACT_H}, have {}\u{d7}{}",
            area.width, area.height
        );
        put_str(buf, body.x, body.y, &why, usize::from(body.width), th.dim());
    }
    draw_status(buf, status, app, &th);
    if app.help_open() {
        draw_help(buf, area, app.header().replay, &th);
    }
    if let Some(p) = app.prompt() {
        draw_prompt(buf, area, status, p, &th);
    }
}

fn header_lines<'a>(app: &'a App, th: &Theme, width: u16) -> Vec<Line<'a>> {
    let mut l1 = vec![Span::styled("stallscope", th.bold())];
    l1.extend(state_flags(app, th));
    let used: usize = l1.iter().map(Span::width).sum();
    l1.extend(target_spans(
        app,
        th,
        usize::from(width).saturating_sub(used),
    ));
    vec![
        Line::from(l1),
        workload_line(app, th),
        summary_line(app, th),
    ]
}

/// The state a person must not miss (replay and where it is, recording,
/// paused, frozen, a failed target): first on the header, so no width
/// hides it.
fn state_flags(app: &App, th: &Theme) -> Vec<Span<'static>> {
    let h = app.header();
    let flag = |text: String, c: Color| {
        Span::styled(format!("  {text}"), th.fg(c).add_modifier(Modifier::BOLD))
    };
    let mut v = Vec::new();
    if h.replay {
        v.push(flag(format!("REPLAY {}", app.replay_status()), Color::Cyan));
    }
    if h.recording {
        v.push(flag(th.g.rec.to_string(), Color::Red));
    }
    if app.paused() {
        v.push(flag("PAUSED".into(), Color::Yellow));
    }
    if app.frozen() {
        v.push(flag(
            format!("FROZEN at {}", fmt_s(app.view_end())),
            Color::Cyan,
        ));
    }
    let failed = app
        .targets()
        .get(h.active)
        .and_then(|t| t.at(app.view_end()))
        .is_some_and(|p| p.failed);
    if failed {
        v.push(flag("TARGET FAILED".into(), Color::Red));
    }
    v
}

/// "target 1/2 …/mnt/ext4  ext4 on /dev/loop0 (7:0)  rw,relatime" in
/// `room` columns: the mount options give way first, then the device,
/// then the path loses its leading folders.
fn target_spans<'a>(app: &'a App, th: &Theme, room: usize) -> Vec<Span<'a>> {
    let h = app.header();
    let Some(m) = app.targets().get(h.active).map(|t| &t.meta) else {
        return Vec::new();
    };
    let what = if app.is_observed_view(h.active) {
        "view"
    } else {
        "target"
    };
    let lead = format!("  {what} {}/{} ", h.active + 1, app.targets().len());
    let on = format!("  {} on {}", m.fs, m.device);
    let opts = format!("  {}", m.mount_options);
    let path_len = m.path.chars().count();
    let fixed = lead.len() + path_len;
    let mut v = vec![Span::raw(lead.clone())];
    let path_room = room.saturating_sub(lead.len());
    v.push(Span::styled(
        crate::base::text::elide_path(&m.path, path_room),
        th.bold(),
    ));
    if fixed + on.len() <= room {
        v.push(Span::raw(on.clone()));
        if !m.mount_options.is_empty() && fixed + on.len() + opts.len() <= room {
            v.push(Span::styled(opts, th.dim()));
        }
    }
    v
}

/// The second header line: what runs (or is observed), tracing, and how
/// observed threads' blocks are timed.
fn workload_line<'a>(app: &'a App, th: &Theme) -> Line<'a> {
    let h = app.header();
    let tracing = match &h.tracing {
        Ok(()) => Span::styled("tracing: on", th.fg(Color::Green)),
        Err(why) => Span::styled(format!("tracing: off ({why})"), th.fg(Color::Yellow)),
    };
    // By name: a server that forks a process per connection is one entry.
    let mut by_comm: Vec<(&str, Vec<u32>)> = Vec::new();
    for w in app.observed() {
        match by_comm.iter_mut().find(|(c, _)| *c == w.comm) {
            Some((_, pids)) => pids.push(w.pid),
            None => by_comm.push((&w.comm, vec![w.pid])),
        }
    }
    let observing: Vec<String> = by_comm
        .iter()
        .map(|(c, pids)| match pids.as_slice() {
            [one] => format!("{c} ({one})"),
            many => format!("{c} \u{d7}{}", many.len()),
        })
        .collect();
    let workload = if app.is_observed_view(0) {
        format!(
            "observing {}, no writers of ours   window {} s   ",
            observing.join(", "),
            app.window_s()
        )
    } else {
        let also = if observing.is_empty() {
            String::new()
        } else {
            format!("   observing {}", observing.join(", "))
        };
        format!(
            "{} {} {}   {} records   sync {}{also}   window {} s   ",
            h.mode,
            th.g.times,
            crate::base::text::count(h.threads.into(), "thread"),
            ByteSize(h.record_size),
            h.sync,
            app.window_s()
        )
    };
    let mut l2 = vec![Span::raw(workload), tracing];
    if let Some(t) = app.block_timing() {
        l2.push(Span::raw(match t {
            BlockTiming::Sched => "   blocks: scheduler, exact",
            BlockTiming::Sampled => "   blocks: sampled",
        }));
    }
    Line::from(l2)
}

/// The active target's figures at the view end: what a glance needs.
fn summary_line<'a>(app: &App, th: &Theme) -> Line<'a> {
    let Some(t) = app.targets().get(app.header().active) else {
        return Line::raw("no targets");
    };
    let Some(p) = t.at(app.view_end()) else {
        return Line::styled("waiting for the first interval", th.dim());
    };
    let ms = |v: Option<f64>| v.map_or("-".to_string(), fmt_val);
    let mib = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    let stalls = match app.stall_counts() {
        (here, all) if here == all => format!("{here}"),
        (here, all) => format!("{here}/{all}"),
    };
    if p.observed {
        return Line::from(vec![
            Span::styled(format!("{:.0} s  ", p.t_s), th.dim()),
            Span::styled(format!("writes {:.1} MiB/s", p.mib_per_s), th.bold()),
            Span::raw(format!(
                "  longest D-state stall {} ms  throttled {} ms/s  dirty {} MiB  stalls {stalls}",
                ms(p.max_ms),
                ms(p.pause_ms_per_s),
                mib(p.dirty_mib),
            )),
        ]);
    }
    Line::from(vec![
        Span::styled(format!("{:.0} s  ", p.t_s), th.dim()),
        Span::styled(
            format!("{:.1} MiB/s  {} op/s", p.mib_per_s, fmt_num(p.ops_per_s)),
            th.bold(),
        ),
        Span::raw(format!(
            "  p99 {} ms  max {} ms  dirty {} MiB  stalls {stalls}",
            ms(p.p99_ms),
            ms(p.max_ms),
            mib(p.dirty_mib),
        )),
    ])
}

fn draw_banner(buf: &mut Buffer, r: Rect, app: &App, th: &Theme) {
    let Some(s) = app
        .live()
        .iter()
        .max_by(|a, b| app.live_age_ms(a).total_cmp(&app.live_age_ms(b)))
    else {
        return;
    };
    // Age, cause, thread and op first; the path gets what room is left.
    let mut text = format!(
        " STALL {:.1} s {} {}, thread {} in {}",
        app.live_age_ms(s) / 1e3,
        th.g.dash,
        s.why.cause.as_str(),
        s.ev.who.thread(),
        op_name(s)
    );
    if app.live().len() > 1 {
        text.push_str(&format!("  +{} more", app.live().len() - 1));
    }
    if let Some(t) = app.view_of(&s.ev.who).and_then(|i| app.targets().get(i)) {
        let room = usize::from(r.width).saturating_sub(text.chars().count() + 2);
        if room >= 8 {
            text.push_str("  ");
            text.push_str(&crate::base::text::elide_path(&t.meta.path, room));
        }
    }
    Paragraph::new(text).style(th.alarm()).render(r, buf);
}

fn draw_body(buf: &mut Buffer, r: Rect, app: &App, th: &Theme) {
    let shown = app.shown_targets();
    let titled = shown.len() > 1;
    let list_h = (r.height / 4).clamp(5, 12).min(r.height);
    let charts_h = r.height - list_h;
    let n = (charts_h.saturating_sub(1 + u16::from(titled)) / MIN_CHART_H).min(4) as usize;
    let (charts, list) = if n == 0 {
        (Rect::default(), r)
    } else {
        let [c, l] = Layout::vertical([Constraint::Length(charts_h), Constraint::Fill(1)]).areas(r);
        (c, l)
    };
    if n > 0 {
        draw_charts(buf, charts, app, &shown, n, th);
    }
    draw_stalls(buf, list, app, th);
}

/// One column of charts per shown target; compare puts two side by side
/// with each chart's scales computed over both.
fn draw_charts(buf: &mut Buffer, r: Rect, app: &App, shown: &[usize], n: usize, th: &Theme) {
    let (t0, t1) = app.view_range();
    let views: Vec<&TargetView> = shown.iter().filter_map(|&i| app.targets().get(i)).collect();
    let defs: Vec<(&ChartDef, Scales)> = CHARTS[..n]
        .iter()
        .map(|d| (d, scales(d, &views, t0, t1)))
        .collect();
    if views.len() < 2 {
        if let Some(v) = views.first() {
            draw_column(buf, r, app, v, None, &defs, th);
        }
        return;
    }
    let [left, _, right] = Layout::horizontal([
        Constraint::Fill(1),
        Constraint::Length(1),
        Constraint::Fill(1),
    ])
    .areas(r);
    for ((col, v), &i) in [left, right].into_iter().zip(&views).zip(shown) {
        let title = Line::from(vec![
            Span::raw(format!("target {}/{} ", i + 1, app.targets().len())),
            Span::styled(v.meta.path.as_str(), th.bold()),
            Span::raw(format!(" ({} on {})", v.meta.fs, v.meta.device)),
        ]);
        draw_column(buf, col, app, v, Some(title), &defs, th);
    }
}

fn draw_column(
    buf: &mut Buffer,
    r: Rect,
    app: &App,
    v: &TargetView,
    title: Option<Line>,
    defs: &[(&ChartDef, Scales)],
    th: &Theme,
) {
    let mut cons = Vec::with_capacity(defs.len() + 2);
    if title.is_some() {
        cons.push(Constraint::Length(1));
    }
    cons.extend(defs.iter().map(|_| Constraint::Fill(1)));
    cons.push(Constraint::Length(1));
    cons.push(Constraint::Length(1));
    let rows = Layout::vertical(cons).split(r);
    let skip = usize::from(title.is_some());
    if let Some(t) = title {
        put_line(buf, rows[0], &t);
    }
    for ((def, sc), row) in defs.iter().zip(&rows[skip..]) {
        draw_chart(buf, *row, app, v, def, *sc, th);
    }
    if let [.., lane, axis] = rows[..] {
        draw_lane(buf, lane, app, v, th);
        draw_time_axis(buf, axis, app, th);
    }
}

/// One row under the charts: the view's stalls as spans coloured by cause,
/// as long as they lasted (the chart's stall lane).
fn draw_lane(buf: &mut Buffer, r: Rect, app: &App, v: &TargetView, th: &Theme) {
    let Some(plot) = plot_area(Rect::new(r.x, r.y.saturating_sub(1), r.width, 2)) else {
        return;
    };
    put_str(buf, r.x, r.y, "stalls", usize::from(GUTTER_L), th.dim());
    let (t0, t1) = app.view_range();
    let cell = if th.ascii { "#" } else { "\u{2588}" };
    let lane = v.lane(t0, t1, usize::from(plot.width), app.view_end());
    for (i, c) in lane.iter().enumerate() {
        if let Some(c) = c {
            put_str(buf, plot.x + i as u16, r.y, cell, 1, th.fg(cause_color(*c)));
        }
    }
}

/// Where the plot goes inside a chart's rect (title row and gutters off).
fn plot_area(c: Rect) -> Option<Rect> {
    let w = c
        .width
        .checked_sub(GUTTER_L + GUTTER_R)
        .filter(|&w| w >= 2)?;
    let h = c.height.checked_sub(1).filter(|&h| h >= 1)?;
    Some(Rect::new(c.x + GUTTER_L, c.y + 1, w, h))
}

fn draw_chart(
    buf: &mut Buffer,
    c: Rect,
    app: &App,
    v: &TargetView,
    def: &ChartDef,
    sc: Scales,
    th: &Theme,
) {
    let (t0, t1) = app.view_range();
    put_line(buf, c, &chart_title(def, v, app.view_end(), th));
    let Some(plot) = plot_area(c) else {
        return;
    };
    draw_y_labels(buf, plot, sc.left, false, th);
    if let Some(r) = sc.right {
        draw_y_labels(buf, plot, r, true, th);
    }
    let pts: Vec<&Point> = v.visible(t0, t1).collect();
    let sub: u16 = if th.ascii { 1 } else { 2 };
    let cols = usize::from(plot.width) * usize::from(sub);
    let series: Vec<(Color, Vec<Run>)> = def
        .series
        .iter()
        .map(|s| {
            let scale = if s.right {
                sc.right.unwrap_or(sc.left)
            } else {
                sc.left
            };
            (th.paint(s.color), runs(&pts, s.field, scale, t0, t1, cols))
        })
        .collect();
    Canvas::default()
        .marker(th.g.marker)
        .x_bounds([t0, t1])
        .y_bounds([0.0, 1.0])
        .paint(|ctx| {
            for (color, runs) in &series {
                for run in runs {
                    paint_run(ctx, run, *color, t0, t1);
                }
                ctx.layer();
            }
        })
        .render(plot, buf);
    if th.ascii {
        for_cells(buf, plot, |cell| {
            if cell.symbol() == DOT {
                cell.set_symbol("*");
            }
        });
    }
    draw_marks(buf, plot, app, v, th);
}

fn paint_run(
    ctx: &mut ratatui::widgets::canvas::Context,
    run: &[(f64, f64)],
    color: Color,
    t0: f64,
    t1: f64,
) {
    if let [p] = run {
        ctx.draw(&Points {
            coords: &[*p],
            color,
        });
    }
    for w in run.windows(2) {
        if let Some((a, b)) = clip(w[0], w[1], t0, t1) {
            ctx.draw(&CLine::new(a.0, a.1, b.0, b.1, color));
        }
    }
}

/// Title plus a legend: each series in its colour with its value at the
/// view end.
fn chart_title<'a>(def: &'a ChartDef, v: &TargetView, end: f64, th: &Theme) -> Line<'a> {
    let now = v.at(end);
    let mut spans = vec![Span::styled(def.title, th.bold())];
    for s in def.series {
        let val = now.and_then(|p| s.field.get(p)).map_or("-".into(), fmt_val);
        spans.push(Span::styled(
            format!("  {} {} {val}", th.g.legend, s.name),
            th.fg(s.color),
        ));
    }
    Line::from(spans)
}

/// Axis labels: top, middle and bottom for linear scales, each decade that
/// fits for the log one.
fn draw_y_labels(buf: &mut Buffer, plot: Rect, sc: Scale, right: bool, th: &Theme) {
    let h = plot.height;
    let axis_x = if right { plot.right() } else { plot.x - 1 };
    let row_of = |frac: f64| plot.bottom() - 1 - (frac * f64::from(h - 1)).round() as u16;
    let labels: Vec<(f64, String)> = match sc {
        Scale::Linear(max) => [1.0, 0.5, 0.0]
            .iter()
            .map(|&f| (f, fmt_num(max * f)))
            .collect(),
        Scale::Log(lo, hi) => (lo as i32..=hi as i32)
            .rev()
            .map(|d| ((f64::from(d) - lo) / (hi - lo), fmt_decade(d)))
            .collect(),
    };
    for y in plot.top()..plot.bottom() {
        put_str(buf, axis_x, y, th.g.axis, 1, th.dim());
    }
    let mut used = Vec::new();
    for (frac, text) in labels {
        let y = row_of(frac);
        if used.contains(&y) {
            continue;
        }
        used.push(y);
        put_str(buf, axis_x, y, th.g.tick, 1, th.dim());
        let w = usize::from(GUTTER_L - 1);
        if right {
            put_str(buf, axis_x + 1, y, &format!("{text:<w$}"), w, th.dim());
        } else {
            put_str(
                buf,
                plot.x.saturating_sub(GUTTER_L),
                y,
                &format!("{text:>w$}"),
                w,
                th.dim(),
            );
        }
    }
}

/// Stall starts (and switches) at the same x on every chart: a glyph on the
/// top row and a faint line through the blank cells below it.
fn draw_marks(buf: &mut Buffer, plot: Rect, app: &App, v: &TargetView, th: &Theme) {
    let (t0, t1) = app.view_range();
    let sub: u16 = if th.ascii { 1 } else { 2 };
    let col = |t: f64| plot.x + time_col(t, t0, t1, plot.width, sub);
    for sw in app.switches().iter().filter(|s| s.t_s >= t0 && s.t_s <= t1) {
        mark(
            buf,
            plot,
            col(sw.t_s),
            th.g.switch_top,
            th.g.switch_line,
            th.fg(Color::Cyan),
        );
    }
    let mut cols: Vec<u16> = v.marks_in(t0, t1).map(col).collect();
    cols.dedup();
    // Dense stalls would paint the whole chart with lines and hide the data:
    // then only the glyph on the top row marks them.
    let line = if cols.len() * 8 <= usize::from(plot.width) {
        th.g.stall_line
    } else {
        ""
    };
    let st = th.fg(Color::Red).add_modifier(Modifier::BOLD);
    for x in cols {
        mark(buf, plot, x, th.g.stall_top, line, st);
    }
}

fn mark(buf: &mut Buffer, plot: Rect, x: u16, top: &str, line: &str, st: RStyle) {
    put_str(buf, x, plot.y, top, 1, st);
    if line.is_empty() {
        return;
    }
    for y in plot.y + 1..plot.bottom() {
        if let Some(cell) = buf.cell_mut(Position::new(x, y)) {
            if cell.symbol() == " " {
                cell.set_symbol(line)
                    .set_style(st.remove_modifier(Modifier::BOLD));
            }
        }
    }
}

fn draw_time_axis(buf: &mut Buffer, r: Rect, app: &App, th: &Theme) {
    let Some(plot) = plot_area(Rect::new(r.x, r.y.saturating_sub(1), r.width, 2)) else {
        return;
    };
    let (t0, t1) = app.view_range();
    let w = usize::from(plot.width);
    let (a, m, b) = (fmt_s(t0), fmt_s((t0 + t1) / 2.0), fmt_s(t1));
    let mid = (w / 2).saturating_sub(m.len() / 2);
    let mut text = format!("{a:<w$}");
    if mid > a.len() && mid + m.len() + b.len() < w {
        text.replace_range(mid..mid + m.len(), &m);
    }
    if b.len() < w {
        text.replace_range(w - b.len()..w, &b);
    }
    put_str(buf, plot.x, r.y, &text, w, th.dim());
}

fn draw_stalls(buf: &mut Buffer, r: Rect, app: &App, th: &Theme) {
    if r.height == 0 {
        return;
    }
    let (_, total) = app.stall_counts();
    let title = Line::from(vec![
        Span::styled("Stalls", th.bold()),
        Span::styled(format!(", newest first ({total} in all)"), th.dim()),
    ]);
    let head = format!(
        "{:>9} {:>9}  {:<15} {:<4} {:>6}  {:<15}  target",
        "time", "duration", "cause", "conf", "thread", "op"
    );
    let mut lines = vec![title, Line::styled(head, th.dim())];
    let rows = usize::from(r.height).saturating_sub(2);
    let width = usize::from(r.width);
    lines.extend(
        app.stalls()
            .take(rows)
            .map(|s| stall_row(s, app, th, width)),
    );
    Paragraph::new(lines).render(r, buf);
}

fn stall_row<'a>(s: &Stall, app: &App, th: &Theme, width: usize) -> Line<'a> {
    let target = app
        .view_of(&s.ev.who)
        .and_then(|i| app.targets().get(i))
        .map_or("?", |t| t.meta.path.as_str());
    let conf = s.why.confidence.as_str();
    let lead = Span::raw(format!(
        "{:>9} {:>9}  ",
        fmt_t(s.ev.start_ns as f64 / 1e9),
        fmt_dur(s.ev.dur() as f64 / 1e6)
    ));
    let cause = Span::styled(
        format!("{:<15}", s.why.cause.as_str()),
        th.fg(cause_color(s.why.cause)),
    );
    let rest = format!(" {conf:<4} {:>6}  {:<15}  ", s.ev.who.thread(), op_name(s));
    let room = width.saturating_sub(lead.width() + cause.width() + rest.chars().count());
    Line::from(vec![
        lead,
        cause,
        Span::raw(rest),
        Span::raw(crate::base::text::elide_path(target, room)),
    ])
}

/// What the thread was doing: our op (a segment wait says which sync it
/// waited for), or an observed thread's system call when its stack named one.
fn op_name(s: &Stall) -> String {
    use crate::model::ops::OpKind;
    let e = &s.why.evidence;
    match (s.ev.op, e.syscall.as_deref(), e.sync_op.as_deref()) {
        (OpKind::Blocked, Some(call), _) => call.to_string(),
        (OpKind::SegmentWait, _, Some(op)) => {
            let call = op.split_whitespace().next().unwrap_or(op);
            format!("{call} (recycle)")
        }
        (op, _, _) => op.as_str().to_string(),
    }
}

fn cause_color(c: Cause) -> Color {
    match c {
        Cause::DirtyThrottle => Color::Red,
        Cause::WritebackWait => Color::Magenta,
        Cause::Sync => Color::Yellow,
        Cause::JournalFull => Color::Cyan,
        Cause::Device => Color::Blue,
        Cause::Fault => Color::Green,
        Cause::Unknown => Color::Gray,
    }
}

fn draw_status(buf: &mut Buffer, r: Rect, app: &App, th: &Theme) {
    let hint = if app.header().replay {
        "space play  n stall  ? keys  q quit"
    } else {
        "? help  q quit"
    };
    let hint_w = hint.len() as u16;
    if let Some(m) = app.last_message() {
        let st = if m.error {
            th.fg(Color::Red).add_modifier(Modifier::BOLD)
        } else {
            RStyle::new()
        };
        let w = r.width.saturating_sub(hint_w + 2);
        put_str(buf, r.x, r.y, &m.text, usize::from(w), st);
    }
    if r.width > hint_w {
        put_str(
            buf,
            r.right() - hint_w,
            r.y,
            hint,
            usize::from(hint_w),
            th.dim(),
        );
    }
}

/// A centred popup listing the key tables of this dashboard (live, or a
/// replay's player and view keys). Rows without a label share the row
/// above ("> <").
fn draw_help(buf: &mut Buffer, area: Rect, replay: bool, th: &Theme) {
    let row = |d: &KeyDef| {
        Line::from(vec![
            Span::styled(format!(" {:<11}", d.label), th.bold()),
            Span::raw(d.help),
        ])
    };
    let labelled = |d: &&KeyDef| !d.label.is_empty();
    let mut lines: Vec<Line> = Vec::new();
    if replay {
        lines.extend(REPLAY_KEYS.iter().filter(labelled).map(row));
        lines.push(Line::raw(""));
        lines.push(Line::styled(" the view:", th.dim()));
        lines.extend(view_keys().filter(labelled).map(row));
    } else {
        lines.extend(KEYS.iter().map(row));
        lines.push(Line::raw(""));
        lines.push(Line::styled(" at the add-target prompt:", th.dim()));
        lines.extend(PROMPT_KEYS.iter().map(row));
    }
    let w = lines.iter().map(Line::width).max().unwrap_or(0) as u16 + 3;
    let r = centered(area, w, lines.len() as u16 + 2);
    popup(buf, r, " keys ", lines, th);
}

/// The one-line "add target" input, just above the status line.
fn draw_prompt(buf: &mut Buffer, area: Rect, status: Rect, text: &str, th: &Theme) {
    let label = "add target: ";
    let w = area.width.min(72);
    let room = usize::from(w.saturating_sub(4)).saturating_sub(label.len() + 1);
    let skip = text.chars().count().saturating_sub(room);
    let shown: String = text.chars().skip(skip).collect();
    let line = Line::from(vec![
        Span::styled(label, th.bold()),
        Span::raw(shown),
        Span::styled(th.g.cursor, th.fg(Color::Yellow)),
    ]);
    if area.height < 6 {
        Clear.render(status, buf);
        put_line(buf, status, &line);
        return;
    }
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        status.y.saturating_sub(3),
        w,
        3,
    );
    popup(buf, r, " Enter adds, Esc cancels ", vec![line], th);
}

fn popup(buf: &mut Buffer, r: Rect, title: &str, lines: Vec<Line>, th: &Theme) {
    Clear.render(r, buf);
    if r.width < 3 || r.height < 3 {
        Paragraph::new(lines).render(r, buf);
        return;
    }
    let block = Block::default()
        .borders(Borders::ALL)
        .border_set(th.g.border)
        .title(Span::styled(title.to_string(), th.bold()));
    Paragraph::new(lines).block(block).render(r, buf);
}

fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let (w, h) = (w.min(area.width), h.min(area.height));
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

// ------------------------------------------------------- buffer helpers ----

/// Writes a line on the first row of `r`, clipped to it.
fn put_line(buf: &mut Buffer, r: Rect, line: &Line) {
    let r = r.intersection(buf.area);
    if !r.is_empty() {
        buf.set_line(r.x, r.y, line, r.width);
    }
}

/// Writes text at (x, y) if that cell exists, clipped to `max` columns.
fn put_str(buf: &mut Buffer, x: u16, y: u16, text: &str, max: usize, st: RStyle) {
    if buf.area.contains(Position::new(x, y)) {
        buf.set_stringn(x, y, text, max, st);
    }
}

fn for_cells(buf: &mut Buffer, r: Rect, mut f: impl FnMut(&mut ratatui::buffer::Cell)) {
    let r = r.intersection(buf.area);
    for y in r.top()..r.bottom() {
        for x in r.left()..r.right() {
            f(&mut buf[(x, y)]);
        }
    }
}

// ------------------------------------------------------------- numbers -----

/// At most five columns: 0, 2.5, 350, 1.5k, 15k, 350k, 1.2M, 120M, 1.2G.
fn fmt_num(v: f64) -> String {
    let a = v.abs();
    let (d, unit) = match a {
        _ if a >= 1e9 => (v / 1e9, "G"),
        _ if a >= 1e6 => (v / 1e6, "M"),
        _ if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    match d.abs() {
        0.0 => "0".into(),
        x if x < 10.0 && (unit.is_empty() || x < 9.95) => format!("{d:.1}{unit}").replace(".0", ""),
        _ => format!("{d:.0}{unit}"),
    }
}

/// Values in a legend: small ones keep their decimals (0.37 ms).
fn fmt_val(v: f64) -> String {
    if v.abs() < 1.0 && v != 0.0 {
        format!("{v:.2}")
    } else {
        fmt_num(v)
    }
}

fn fmt_decade(d: i32) -> String {
    if d >= 0 {
        format!("{}", 10u64.pow(d as u32))
    } else {
        format!("{:.*}", d.unsigned_abs() as usize, 10f64.powi(d))
    }
}

/// A stall's start: tenths, to tell apart stalls of one interval.
fn fmt_t(t: f64) -> String {
    format!("{t:.1}s")
}

/// A time-axis label.
fn fmt_s(t: f64) -> String {
    format!("{t:.0}s")
}

fn fmt_dur(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", ms / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::super::app::fixture::*;
    use super::super::app::{App, Style};
    use super::super::keys::Action;
    use super::*;

    use crate::model::snapshot::TargetMeta;
    use crate::model::stall::Live;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn render(app: &App, w: u16, h: u16) -> Buffer {
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|f| draw(f, app)).unwrap();
        term.backend().buffer().clone()
    }

    /// Row y as one symbol per column.
    fn row(buf: &Buffer, y: u16) -> Vec<String> {
        (0..buf.area.width)
            .map(|x| buf[(x, y)].symbol().to_string())
            .collect()
    }

    fn text(buf: &Buffer, y: u16) -> String {
        row(buf, y).concat()
    }

    #[test]
    fn a_failed_target_is_flagged_in_the_header() {
        let mut app = App::new(header(), vec![meta(0)], 120, Style::default());
        let mut s = snapshot(1, 1, 0, vec![]);
        app.on_snapshot(&s);
        assert!(!text(&render(&app, 120, 40), 0).contains("TARGET FAILED"));
        s = snapshot(2, 1, 0, vec![]);
        s.targets[0].failed = true;
        app.on_snapshot(&s);
        let top = text(&render(&app, 120, 40), 0);
        assert!(top.contains("TARGET FAILED"), "{top}");
    }

    #[test]
    fn an_observe_only_dashboard_says_what_it_watches() {
        let mut app = App::new(header(), vec![], 120, Style::default());
        app.observe(&[crate::model::observed::Watched {
            pid: 4242,
            comm: "ceph-osd".into(),
        }]);
        let mut s = snapshot(1, 0, 0, vec![]);
        s.observed = vec![crate::model::snapshot::ObservedInterval {
            pid: 4242,
            comm: "ceph-osd".into(),
            alive: true,
            write_bytes: Some(3 << 20),
            ..Default::default()
        }];
        app.on_snapshot(&s);
        let b = render(&app, 120, 40);
        assert!(
            text(&b, 0).contains("view 1/1 ceph-osd (pid 4242)"),
            "{}",
            text(&b, 0)
        );
        assert!(text(&b, 1).contains("observing ceph-osd (4242), no writers of ours"));
        assert!(text(&b, 2).contains("writes 3.0 MiB/s"), "{}", text(&b, 2));
        assert!(!text(&b, 1).contains("threads"), "no writer workload shown");
    }

    /// (column, row) of the first occurrence of `s`.
    fn find(buf: &Buffer, s: &str) -> Option<(u16, u16)> {
        (0..buf.area.height).find_map(|y| {
            let cells = row(buf, y);
            (0..cells.len())
                .find(|&x| cells[x..].concat().starts_with(s))
                .map(|x| (x as u16, y))
        })
    }

    fn all(buf: &Buffer) -> String {
        (0..buf.area.height).map(|y| text(buf, y) + "\n").collect()
    }

    const NOW_NS: u64 = 100_000_000_000;

    /// A stall of writer `thread` on target 0, `secs` old at `NOW_NS`.
    fn live(secs: f64, thread: u32, cause: Cause) -> Stall {
        let mut st = crate::tui::app::fixture::stall(0, 0.0, 0.0, thread, cause);
        st.ev.start_ns = NOW_NS - (secs * 1e9) as u64;
        st.ev.dur_ns = None;
        st
    }

    fn at(stalls: Vec<Stall>) -> Live {
        Live {
            now_ns: NOW_NS,
            stalls,
        }
    }

    #[test]
    fn all_panels_at_120x40() {
        let app = filled(2, 200);
        let b = render(&app, 120, 40);
        let s = all(&b);
        for want in [
            "target 1/2",
            "/mnt/ext4",
            "ext4 on loop0",
            "mmap × 4 threads",
            "818B records",
            "periodic:10s",
            "tracing: off (not root)",
            "Stalls, newest first",
            "dirty_throttle",
            "? help",
        ] {
            assert!(s.contains(want), "missing {want:?}\n{s}");
        }
        for t in chart_titles() {
            assert!(s.contains(t), "missing chart {t:?}\n{s}");
        }
        assert!(s.contains("2.30 s"), "stall duration\n{s}");
    }

    #[test]
    fn stall_markers_sit_at_the_stall_time_on_every_chart() {
        let app = filled(1, 200);
        let (t0, t1) = app.view_range();
        assert_eq!((t0, t1), (80.0, 200.0));
        let b = render(&app, 120, 40);
        let width = 120 - GUTTER_L - GUTTER_R;
        for stall_t in [89.5, 119.5, 149.5, 179.5] {
            // The braille grid has two dots per column over the plot width.
            let dots = f64::from(width) * 2.0 - 1.0;
            let x = GUTTER_L + (((stall_t - t0) * dots / (t1 - t0)) as u16) / 2;
            for title in chart_titles() {
                let (_, y) = find(&b, title).expect(title);
                assert_eq!(
                    b[(x, y + 1)].symbol(),
                    "▼",
                    "{title} at t={stall_t} x={x}\n{}",
                    all(&b)
                );
                assert_eq!(b[(x, y + 1)].fg, Color::Red);
            }
        }
        // No marker where there was no stall.
        let (_, y) = find(&b, "Throughput").unwrap();
        let markers = row(&b, y + 1).iter().filter(|c| *c == "▼").count();
        assert_eq!(markers, 4);
    }

    #[test]
    fn switches_are_marked_too() {
        let mut app = filled(2, 100);
        app.on_snapshot(&snapshot(101, 2, 1, vec![]));
        let b = render(&app, 120, 40);
        for title in chart_titles() {
            let (_, y) = find(&b, title).unwrap();
            assert!(
                row(&b, y + 1).iter().any(|c| c == "◆"),
                "{title}\n{}",
                all(&b)
            );
        }
        assert!(all(&b).contains("target 2/2"));
    }

    #[test]
    fn latency_axis_is_log_with_ms_decades() {
        let app = filled(1, 60);
        let b = render(&app, 120, 40);
        let (_, y) = find(&b, "Latency").unwrap();
        let (_, next) = find(&b, "Dirty MiB").unwrap();
        let gutter: Vec<String> = (y + 1..next)
            .map(|r| text(&b, r)[..6].trim().to_string())
            .collect();
        assert_eq!(
            gutter.first().map(String::as_str),
            Some("10000"),
            "{gutter:?}"
        );
        assert!(
            gutter.iter().any(|g| g == "1") || gutter.iter().any(|g| g == "10"),
            "{gutter:?}"
        );
        assert!(
            gutter.iter().any(|g| g == "1000" || g == "100"),
            "{gutter:?}"
        );
    }

    #[test]
    fn help_lists_every_key() {
        let mut app = filled(2, 30);
        app.on_action(Action::ToggleHelp);
        let s = all(&render(&app, 120, 40));
        for d in KEYS.iter().chain(PROMPT_KEYS) {
            assert!(
                s.contains(d.label) && s.contains(d.help),
                "{}\n{s}",
                d.label
            );
        }
        app.on_action(Action::Dismiss);
        assert!(!all(&render(&app, 120, 40)).contains("freeze the view"));
    }

    #[test]
    fn help_fits_80x24() {
        let mut app = filled(2, 30);
        app.on_action(Action::ToggleHelp);
        let s = all(&render(&app, 80, 24));
        for d in KEYS.iter().chain(PROMPT_KEYS) {
            assert!(s.contains(d.help), "{}\n{s}", d.label);
        }
    }

    #[test]
    fn compare_puts_two_targets_side_by_side_on_one_scale() {
        let mut app = filled(2, 200);
        // Target 2 is faster, so the shared scale must cover it on both sides.
        for i in 201..=230 {
            let mut s = snapshot(i, 2, 0, vec![]);
            s.targets[1] = interval(1, false, 90_000, &[100, 200]);
            app.on_snapshot(&s);
        }
        app.on_action(Action::ToggleCompare);
        let b = render(&app, 120, 40);
        let (lx, ly) = find(&b, "/mnt/ext4 (ext4").expect("left title");
        let (rx, ry) = find(&b, "/mnt/xfs (xfs").expect("right title");
        assert_eq!(ly, ry, "{}", all(&b));
        assert!(lx < 60 && rx >= 60, "{lx} {rx}");
        for title in chart_titles() {
            let (x, y) = find(&b, title).unwrap();
            assert!(x < 60);
            let right = text(&b, y).chars().skip(61).collect::<String>();
            assert!(right.contains(title), "{title} on the right\n{}", all(&b));
            // The same y labels on both sides: one scale.
            for r in y + 1..y + 3 {
                let cells = row(&b, r);
                assert_eq!(
                    cells[..6].concat(),
                    cells[61..67].concat(),
                    "{title} row {r}\n{}",
                    all(&b)
                );
            }
        }
    }

    #[test]
    fn at_80x24_three_charts_and_a_short_list() {
        let app = filled(2, 200);
        let s = all(&render(&app, 80, 24));
        for want in ["target 1/2", "Throughput", "Latency", "Dirty MiB", "Stalls"] {
            assert!(s.contains(want), "missing {want}\n{s}");
        }
        assert!(!s.contains("Kernel pressure"), "{s}");
    }

    #[test]
    fn small_terminals_get_header_and_summary() {
        let app = filled(1, 50);
        let s = all(&render(&app, 59, 14));
        assert!(
            s.contains("target 1/1") && s.contains("MiB/s") && s.contains("p99"),
            "{s}"
        );
        assert!(!s.contains("Throughput") && !s.contains("Stalls"), "{s}");
        assert!(
            s.contains("terminal too small for charts: need 60×15, have 59×14"),
            "{s}"
        );
    }

    /// Defect: at 80 columns the state came after the mount options and
    /// was cut off.
    #[test]
    fn at_80_columns_the_state_comes_first() {
        let long = TargetMeta {
            path: "/var/tmp/stallscope-lab/mnt/ext4-with-a-long-name".into(),
            fs: "ext4".into(),
            device: "/dev/loop7 (7:7)".into(),
            mount_options: "rw,relatime,errors=remount-ro,data=ordered".into(),
        };
        let mut app = App::new(header(), vec![long.clone()], 120, Style::default());
        for i in 1..=20 {
            app.on_snapshot(&snapshot(i, 1, 0, vec![]));
        }
        app.on_action(Action::ToggleRecord);
        app.on_action(Action::TogglePause);
        app.on_action(Action::ToggleFreeze);
        let top = text(&render(&app, 80, 24), 0);
        for want in ["● REC", "PAUSED", "FROZEN at 20s", "target 1/1", "…/"] {
            assert!(top.contains(want), "{want}: {top}");
        }
        let mut h = header();
        h.replay = true;
        let mut app = App::new(h, vec![long], 120, Style::default());
        app.set_replay_status("paused 8× 12/60 s".into());
        let b = render(&app, 80, 24);
        let top = text(&b, 0);
        assert!(top.contains("REPLAY paused 8× 12/60 s"), "{top}");
        assert!(text(&b, 23).contains("space play"), "{}", text(&b, 23));
    }

    /// The stall lane under the charts: a span as long as the stall, in
    /// its cause's colour.
    #[test]
    fn the_lane_draws_stalls_as_long_as_they_lasted() {
        let app = filled(1, 60);
        let b = render(&app, 120 + GUTTER_L + GUTTER_R, 40);
        let (_, y) = (0..40)
            .map(|y| (0, y))
            .find(|&(_, y)| text(&b, y).starts_with("stalls "))
            .expect("a lane row");
        let cells: Vec<u16> = (0..b.area.width)
            .filter(|&x| b[(x, y)].symbol() == "█")
            .collect();
        // Two 2.3 s stalls at 29.5 s and 59.5 s on a 120 s, 120-cell axis.
        assert!(cells.len() >= 4 && cells.len() <= 8, "{cells:?}");
        assert!(
            cells.iter().all(|&x| b[(x, y)].fg == Color::Red),
            "dirty_throttle is red"
        );
        let first = cells[0] - GUTTER_L;
        assert!((29..=30).contains(&first), "{cells:?}");
    }

    /// Defect: the dashboard showed `segment_wait` unexplained.
    #[test]
    fn a_segment_wait_says_which_sync_it_waited_for() {
        let mut st = stall(0, 5.0, 300.0, 1, Cause::Sync);
        st.ev.op = crate::model::ops::OpKind::SegmentWait;
        st.why.evidence.sync_op = Some("msync (recycling a segment)".into());
        assert_eq!(op_name(&st), "msync (recycle)");
    }

    /// Defect: a frozen view's stall count kept moving.
    #[test]
    fn a_frozen_view_keeps_its_stall_counts() {
        let mut app = filled(1, 60);
        app.on_action(Action::ToggleFreeze);
        for i in 61..=90 {
            let st = vec![stall(0, i as f64 - 0.5, 300.0, 1, Cause::Sync)];
            app.on_snapshot(&snapshot(i, 1, 0, st));
        }
        let b = render(&app, 120, 40);
        assert!(
            text(&b, 2).trim_end().ends_with("stalls 2"),
            "{}",
            text(&b, 2)
        );
        assert!(all(&b).contains("(2 in all)"), "{}", all(&b));
        app.on_action(Action::ToggleFreeze);
        let b = render(&app, 120, 40);
        assert!(text(&b, 2).contains("stalls 32"), "{}", text(&b, 2));
    }

    /// Defect: the list said "newest first" but was in arrival order.
    #[test]
    fn the_stall_list_is_newest_first_by_start() {
        let mut app = app(1);
        let late_long = stall(0, 3.0, 5000.0, 1, Cause::Sync);
        let early_short = stall(0, 7.0, 200.0, 2, Cause::DirtyThrottle);
        app.on_snapshot(&snapshot(8, 1, 0, vec![early_short]));
        app.on_snapshot(&snapshot(9, 1, 0, vec![late_long]));
        let starts: Vec<u64> = app.stalls().map(|s| s.ev.start_ns).collect();
        assert!(starts.windows(2).all(|w| w[0] >= w[1]), "{starts:?}");
    }

    /// Defect: replay's help was the live dashboard's.
    #[test]
    fn replay_help_lists_the_players_keys() {
        let mut h = header();
        h.replay = true;
        let mut app = App::new(h, vec![meta(0)], 120, Style::default());
        app.on_action(Action::ToggleHelp);
        let s = all(&render(&app, 80, 24));
        for want in [
            "play / pause",
            "faster / slower",
            "one interval forward",
            "next / previous stall",
            "go to a time",
            "freeze",
        ] {
            assert!(s.contains(want), "{want}\n{s}");
        }
        for not in [
            "pause / resume the writers",
            "add a target",
            "next write mode",
        ] {
            assert!(!s.contains(not), "{not}\n{s}");
        }
    }

    #[test]
    fn no_size_panics() {
        let mut app = filled(2, 300);
        app.on_live(at(vec![live(2.3, 7, Cause::DirtyThrottle)]));
        app.on_action(Action::ToggleCompare);
        let sizes = [
            1, 2, 3, 4, 5, 6, 7, 10, 14, 15, 16, 20, 24, 30, 59, 60, 61, 80, 121, 333,
        ];
        for _help in 0..2 {
            for _prompt in 0..2 {
                for &w in &sizes {
                    for &h in &sizes {
                        render(&app, w, h);
                    }
                }
                app.on_action(Action::AddTarget);
                app.on_action(Action::PromptChar('/'));
            }
            app.on_action(Action::PromptCancel);
            app.on_action(Action::ToggleHelp);
        }
        render(&app, 20, 5);
        render(&app, 1, 1);
        render(&crate::tui::app::fixture::app(1), 1, 1);
        render(&crate::tui::app::fixture::app(0), 80, 24);
    }

    #[test]
    fn banner_shows_the_longest_live_stall() {
        let mut app = filled(1, 40);
        app.on_live(at(vec![
            live(0.4, 2, Cause::Sync),
            live(2.3, 7, Cause::DirtyThrottle),
        ]));
        let b = render(&app, 120, 40);
        let (x, y) = find(&b, "STALL 2.3 s — dirty_throttle, thread 7 in write").expect("banner");
        assert!(
            text(&b, y).contains("+1 more  /mnt/ext4"),
            "{}",
            text(&b, y)
        );
        // At 80 columns the count is not cut off; a long path gives way.
        let b80 = render(&app, 80, 24);
        assert!(text(&b80, 3).contains("+1 more"), "{}", text(&b80, 3));
        assert_eq!(b[(x, y)].bg, Color::Red);
        app.on_live(at(vec![]));
        assert!(find(&render(&app, 120, 40), "STALL").is_none());
        // Small terminals still get it.
        app.on_live(at(vec![live(2.3, 7, Cause::DirtyThrottle)]));
        assert!(find(&render(&app, 40, 6), "STALL 2.3 s").is_some());
    }

    #[test]
    fn prompt_shows_the_typed_path() {
        let mut app = filled(1, 20);
        app.on_action(Action::AddTarget);
        for c in "/mnt/xfs".chars() {
            app.on_action(Action::PromptChar(c));
        }
        assert!(find(&render(&app, 120, 40), "add target: /mnt/xfs█").is_some());
        assert!(find(&render(&app, 30, 4), "add target: /mnt/xfs").is_some());
    }

    #[test]
    fn header_flags() {
        let mut app = filled(1, 20);
        app.on_action(Action::ToggleRecord);
        app.on_action(Action::TogglePause);
        app.on_action(Action::ToggleFreeze);
        let s = text(&render(&app, 120, 40), 0);
        for want in ["● REC", "PAUSED", "FROZEN"] {
            assert!(s.contains(want), "{want}: {s}");
        }
        app.on_notice(crate::model::control::Notice::WorkerError(
            "writer 2 failed: EIO".into(),
        ));
        let b = render(&app, 120, 40);
        assert!(
            text(&b, 39).starts_with("writer 2 failed: EIO"),
            "{}",
            text(&b, 39)
        );
    }

    #[test]
    fn ascii_mode_draws_only_ascii() {
        let mut app = App::new(
            header(),
            vec![meta(0), meta(1)],
            120,
            Style {
                ascii: true,
                color: true,
            },
        );
        for i in 1..=150 {
            let st = if i % 30 == 0 {
                vec![stall(0, i as f64 - 0.5, 900.0, 3, Cause::Device)]
            } else {
                vec![]
            };
            app.on_snapshot(&snapshot(i, 2, 0, st));
        }
        app.on_live(at(vec![live(1.0, 3, Cause::Device)]));
        app.on_action(Action::ToggleRecord);
        for view in [
            vec![],
            vec![Action::ToggleCompare],
            vec![Action::ToggleHelp],
            vec![Action::AddTarget],
        ] {
            let mut a = app.clone();
            for v in view {
                a.on_action(v);
            }
            let s = all(&render(&a, 120, 40));
            assert!(s.is_ascii(), "{s}");
            assert!(s.contains('*'), "data points drawn\n{s}");
        }
    }

    #[test]
    fn no_color_means_no_colors() {
        let mut app = App::new(
            header(),
            vec![meta(0), meta(1)],
            120,
            Style {
                ascii: false,
                color: false,
            },
        );
        for i in 1..=100 {
            let st = if i % 30 == 0 {
                vec![stall(0, i as f64 - 0.5, 900.0, 3, Cause::DirtyThrottle)]
            } else {
                vec![]
            };
            app.on_snapshot(&snapshot(i, 2, 0, st));
        }
        app.on_live(at(vec![live(1.0, 3, Cause::Device)]));
        let b = render(&app, 120, 40);
        for c in b.content() {
            assert!(c.fg == Color::Reset && c.bg == Color::Reset, "{c:?}");
        }
        assert!(find(&b, "STALL").is_some());
    }

    #[test]
    fn numbers_stay_narrow() {
        for (v, s) in [
            (0.0, "0"),
            (2.5, "2.5"),
            (350.0, "350"),
            (1500.0, "1.5k"),
            (15000.0, "15k"),
            (350e3, "350k"),
            (1.2e6, "1.2M"),
            (120e6, "120M"),
            (1.2e9, "1.2G"),
            (9.99, "10"),
            (2.0, "2"),
        ] {
            assert_eq!(fmt_num(v), s);
            assert!(fmt_num(v).len() <= 5);
        }
        assert_eq!(fmt_decade(-1), "0.1");
        assert_eq!(fmt_decade(4), "10000");
        assert_eq!(nice_ceil(13.0), 20.0);
        assert_eq!(nice_ceil(50.0), 50.0);
        assert_eq!(nice_ceil(0.3), 0.5);
    }

    #[test]
    fn many_points_fold_per_column() {
        let pts: Vec<Point> = (0..3600)
            .map(|i| Point {
                t_s: i as f64 + 1.0,
                interval_s: 1.0,
                ops_per_s: if i == 1800 { 100.0 } else { 10.0 },
                ..Point::default()
            })
            .collect();
        let refs: Vec<&Point> = pts.iter().collect();
        let r = runs(&refs, Field::Ops, Scale::Linear(100.0), 0.0, 3600.0, 200);
        let n: usize = r.iter().map(Vec::len).sum();
        assert!(n <= 400, "{n}");
        assert!(r[0].iter().any(|p| p.1 == 1.0), "the spike survives");
        let gap = [
            Point {
                p99_ms: Some(1.0),
                ..Point::default()
            },
            Point {
                t_s: 1.0,
                ..Point::default()
            },
            Point {
                t_s: 2.0,
                p99_ms: Some(2.0),
                ..Point::default()
            },
        ];
        let refs: Vec<&Point> = gap.iter().collect();
        assert_eq!(
            runs(&refs, Field::P99, Scale::Linear(2.0), 0.0, 3.0, 10).len(),
            2,
            "unknown breaks the line"
        );
    }
}
