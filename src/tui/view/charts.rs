//! The chart column: series definitions, scales, points folded into
//! terminal columns (pure), and drawing the charts, the stall lane and the
//! time axis.

use super::*;

/// What a series reads from a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
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
    pub(super) fn get(self, p: &Point) -> Option<f64> {
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
pub(super) enum AxisKind {
    /// 0..a round number at least `floor`.
    Linear {
        floor: f64,
    },
    /// Decades of ms: a 3 ms p99 and a 4 s max both readable.
    Log,
    Percent,
}

pub(super) struct SeriesDef {
    pub(super) name: &'static str,
    /// The name where the legend must be short (the compare view at 80).
    pub(super) short: &'static str,
    pub(super) field: Field,
    pub(super) color: Color,
    pub(super) right: bool,
}

pub(super) struct ChartDef {
    pub(super) title: &'static str,
    pub(super) left: AxisKind,
    pub(super) right: Option<AxisKind>,
    pub(super) series: &'static [SeriesDef],
}

pub(super) const fn s(
    (name, short): (&'static str, &'static str),
    field: Field,
    color: Color,
    right: bool,
) -> SeriesDef {
    SeriesDef {
        name,
        short,
        field,
        color,
        right,
    }
}

/// The four charts, top to bottom; small terminals drop them from the end.
pub(super) const CHARTS: [ChartDef; 4] = [
    ChartDef {
        title: "Throughput",
        left: AxisKind::Linear { floor: 1.0 },
        right: Some(AxisKind::Linear { floor: 10.0 }),
        series: &[
            s(("MiB/s", "MiB/s"), Field::Mib, Color::Cyan, false),
            s(
                ("ops/s (right)", "ops/s (r)"),
                Field::Ops,
                Color::Yellow,
                true,
            ),
        ],
    },
    ChartDef {
        title: "Latency ms, log",
        left: AxisKind::Log,
        right: None,
        series: &[
            s(("p99", "p99"), Field::P99, Color::Green, false),
            s(("max", "max"), Field::Max, Color::Red, false),
        ],
    },
    ChartDef {
        title: "Dirty MiB",
        left: AxisKind::Linear { floor: 1.0 },
        right: None,
        series: &[
            s(("dirty", "dirty"), Field::Dirty, Color::Magenta, false),
            s(("writeback", "wb"), Field::Writeback, Color::Blue, false),
            s(("bg thresh", "bg"), Field::BgThresh, Color::Gray, false),
            s(("thresh", "thr"), Field::Thresh, Color::LightRed, false),
        ],
    },
    ChartDef {
        title: "Kernel pressure",
        left: AxisKind::Percent,
        right: Some(AxisKind::Linear { floor: 100.0 }),
        series: &[
            s(
                ("PSI io full %", "PSI %"),
                Field::Psi,
                Color::LightMagenta,
                false,
            ),
            s(("util %", "util %"), Field::Util, Color::LightBlue, false),
            s(
                ("throttle ms/s (right)", "throttle (r)"),
                Field::Pause,
                Color::LightRed,
                true,
            ),
        ],
    },
];

/// Chart titles, top to bottom (tests look for them).
pub fn chart_titles() -> [&'static str; 4] {
    CHARTS.map(|c| c.title)
}

/// A value → fraction-of-height mapping.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Scale {
    Linear(f64),
    /// log10 bounds.
    Log(f64, f64),
}

impl Scale {
    pub(super) fn frac(self, v: f64) -> f64 {
        match self {
            Scale::Linear(max) => (v / max).clamp(0.0, 1.0),
            Scale::Log(lo, hi) => ((v.max(1e-9).log10() - lo) / (hi - lo)).clamp(0.0, 1.0),
        }
    }
}

/// One chart's scales, shared by both sides of the compare view.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Scales {
    pub(super) left: Scale,
    pub(super) right: Option<Scale>,
}

pub(super) fn scales(def: &ChartDef, views: &[&TargetView], t0: f64, t1: f64) -> Scales {
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

pub(super) fn scale(kind: AxisKind, vals: &[f64]) -> Scale {
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
pub(super) fn nice_ceil(v: f64) -> f64 {
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
pub(super) type Run = Vec<(f64, f64)>;

/// Runs of (x, height fraction) without unknown values inside a run. Points
/// sharing a sub-column fold to their min and max, so an hour costs what two
/// minutes do and a one-interval spike still shows.
pub(super) fn runs(
    points: &[&Point],
    field: Field,
    sc: Scale,
    t0: f64,
    t1: f64,
    cols: usize,
) -> Vec<Run> {
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
pub(super) fn clip(
    a: (f64, f64),
    b: (f64, f64),
    t0: f64,
    t1: f64,
) -> Option<((f64, f64), (f64, f64))> {
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
pub(super) fn draw_body(buf: &mut Buffer, r: Rect, app: &App, th: &Theme) {
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
pub(super) fn draw_charts(
    buf: &mut Buffer,
    r: Rect,
    app: &App,
    shown: &[usize],
    n: usize,
    th: &Theme,
) {
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
    for (k, ((col, v), &i)) in [left, right].into_iter().zip(&views).zip(shown).enumerate() {
        let other = &views[1 - k].meta.path;
        let title = fit(
            compare_title(v, i, app.targets().len(), other, th),
            usize::from(col.width),
            th.g.more,
            th.dim(),
        );
        draw_column(buf, col, app, v, Some(title), &defs, th);
    }
}

/// A compare column's title: "target 1/2 …/mnt/ext4 (ext4 on loop0)"; in
/// a narrow column the path keeps what tells it from the other one.
pub(super) fn compare_title(
    v: &TargetView,
    i: usize,
    n: usize,
    other: &str,
    th: &Theme,
) -> Vec<Piece> {
    vec![
        Piece::new("", format!("target {}/{n}", i + 1), RStyle::new()),
        Piece::new(" ", th.text(&v.meta.path), th.bold()).cut(Cut::Path(Some(th.text(other)))),
        Piece::new(
            " ",
            th.text(&format!("({} on {})", v.meta.fs, v.meta.device)),
            RStyle::new(),
        )
        .rank(1),
    ]
}

pub(super) fn draw_column(
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
pub(super) fn draw_lane(buf: &mut Buffer, r: Rect, app: &App, v: &TargetView, th: &Theme) {
    let Some(plot) = plot_area(Rect::new(r.x, r.y.saturating_sub(1), r.width, 2)) else {
        return;
    };
    put_str(buf, r.x, r.y, "stalls", usize::from(GUTTER_L), th.dim());
    let (t0, t1) = app.view_range();
    let cell = th.g.lane;
    let lane = v.lane(t0, t1, usize::from(plot.width), app.view_end());
    for (i, c) in lane.iter().enumerate() {
        if let Some(c) = c {
            put_str(buf, plot.x + i as u16, r.y, cell, 1, th.fg(cause_color(*c)));
        }
    }
}

/// Where the plot goes inside a chart's rect (title row and gutters off).
pub(super) fn plot_area(c: Rect) -> Option<Rect> {
    let w = c
        .width
        .checked_sub(GUTTER_L + GUTTER_R)
        .filter(|&w| w >= 2)?;
    let h = c.height.checked_sub(1).filter(|&h| h >= 1)?;
    Some(Rect::new(c.x + GUTTER_L, c.y + 1, w, h))
}

pub(super) fn draw_chart(
    buf: &mut Buffer,
    c: Rect,
    app: &App,
    v: &TargetView,
    def: &ChartDef,
    sc: Scales,
    th: &Theme,
) {
    let (t0, t1) = app.view_range();
    put_line(
        buf,
        c,
        &chart_title(def, v, app.view_end(), th, usize::from(c.width)),
    );
    let Some(plot) = plot_area(c) else {
        return;
    };
    draw_y_labels(buf, plot, sc.left, false, th);
    if let Some(r) = sc.right {
        draw_y_labels(buf, plot, r, true, th);
    }
    let pts: Vec<&Point> = v.visible(t0, t1).collect();
    let cols = usize::from(plot.width) * usize::from(th.sub());
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
    let canvas = |series: &[(Color, Vec<Run>)], marker: Marker, buf: &mut Buffer| {
        Canvas::default()
            .marker(marker)
            .x_bounds([t0, t1])
            .y_bounds([0.0, 1.0])
            .paint(|ctx| {
                for (color, runs) in series {
                    for run in runs {
                        paint_run(ctx, run, *color, t0, t1);
                    }
                    ctx.layer();
                }
            })
            .render(plot, buf);
    };
    if th.glyph_series() {
        // One canvas per series, each of its cells drawn in its own glyph:
        // later series over earlier ones, as the layers of one canvas.
        for (k, one) in series.chunks(1).enumerate() {
            let mut scratch = Buffer::empty(plot);
            canvas(one, Marker::Dot, &mut scratch);
            let glyph = SERIES_GLYPHS[k % SERIES_GLYPHS.len()];
            for (i, dot) in scratch.content.iter().enumerate() {
                if dot.symbol() == " " {
                    continue;
                }
                let (x, y) = scratch.pos_of(i);
                if let Some(cell) = buf.cell_mut(Position::new(x, y)) {
                    cell.set_symbol(glyph).set_fg(one[0].0);
                }
            }
        }
    } else {
        canvas(&series, th.g.marker, buf);
    }
    draw_marks(buf, plot, app, v, th);
}

pub(super) fn paint_run(
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

/// Title plus a legend in `width`: each series with its mark (its glyph
/// where colour cannot tell them apart) and its value at the view end;
/// where that does not fit, short names, then no values, then cut.
pub(super) fn chart_title(
    def: &ChartDef,
    v: &TargetView,
    end: f64,
    th: &Theme,
    width: usize,
) -> Line<'static> {
    let now = v.at(end);
    let mark = |k: usize| {
        if th.glyph_series() {
            SERIES_GLYPHS[k % SERIES_GLYPHS.len()]
        } else {
            th.g.legend
        }
    };
    let legend = |short: bool, values: bool| -> Vec<Span<'static>> {
        let mut spans = vec![Span::styled(def.title, th.bold())];
        for (k, s) in def.series.iter().enumerate() {
            let name = if short { s.short } else { s.name };
            let val = if values {
                let v = now.and_then(|p| s.field.get(p)).map_or("-".into(), fmt_val);
                format!(" {v}")
            } else {
                String::new()
            };
            let sep = if short { " " } else { "  " };
            spans.push(Span::styled(
                format!("{sep}{} {name}{val}", mark(k)),
                th.fg(s.color),
            ));
        }
        spans
    };
    let fits = |spans: &[Span]| spans.iter().map(Span::width).sum::<usize>() <= width;
    let line = [(false, true), (true, true), (true, false)]
        .into_iter()
        .map(|(short, values)| legend(short, values))
        .find(|l| fits(l));
    match line {
        Some(spans) => Line::from(spans),
        None => {
            let text: String = legend(true, false)
                .iter()
                .map(|s| s.content.as_ref())
                .collect();
            Line::styled(
                crate::base::text::cut_end(&text, width, th.g.more),
                th.bold(),
            )
        }
    }
}

/// Axis labels: top, middle and bottom for linear scales, each decade that
/// fits for the log one.
pub(super) fn draw_y_labels(buf: &mut Buffer, plot: Rect, sc: Scale, right: bool, th: &Theme) {
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
pub(super) fn draw_marks(buf: &mut Buffer, plot: Rect, app: &App, v: &TargetView, th: &Theme) {
    let (t0, t1) = app.view_range();
    let sub = th.sub();
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

pub(super) fn mark(buf: &mut Buffer, plot: Rect, x: u16, top: &str, line: &str, st: RStyle) {
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

pub(super) fn draw_time_axis(buf: &mut Buffer, r: Rect, app: &App, th: &Theme) {
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
