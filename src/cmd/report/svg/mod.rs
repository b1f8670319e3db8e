//! The SVG chart of `report --svg` (and `compare`): throughput, latency and
//! dirty memory on one time axis with the stall lanes under it, drawn with
//! plotters, to attach to a mailing-list post.

use super::{interval_of, ReportInput, Segment};
use crate::base::units::kib_to_mib;
use crate::cmd::lanes::{bands, cause_legend, cause_rgb, stall_lanes, Lane};
use crate::model::kernel::KernelInterval;
use crate::model::snapshot::{LatSummary, Snapshot, TargetInterval};
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::error::Error;

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 900;
/// Left room for the y labels and description, the same on every panel so
/// the plots line up on the shared time axis; wider when a lane's name
/// needs it (`ChartData::left`).
const Y_LABEL_PX: u32 = 72;
/// The lanes' names' text size.
const LANE_TEXT: f64 = 13.0;
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
#[derive(Default)]
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
    /// The lanes' legend: per cause its stalls and time (`cause_legend`).
    legend: Vec<(crate::model::cause::Cause, u64, f64)>,
    /// Observe mode: per process, its write MiB/s. Its stalls are in the
    /// lanes only: an observed thread's stall is not a write's latency.
    observed: Vec<ObservedSeries>,
    /// Left of the plots: room for the y labels and the longest lane name,
    /// so no name is cut.
    left: u32,
    /// Why the latency panel is empty, when it is.
    latency_note: Option<&'static str>,
}

struct ObservedSeries {
    name: String,
    mib: Line,
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
                name: format!("{comm} (pid {pid}), observed: writes"),
                mib: pieces(input.selected().map(|s| {
                    let o = s.observed.iter().find(|o| o.pid == pid && o.alive);
                    let mib = o
                        .and_then(|o| o.write_bytes)
                        .map(|b| crate::model::snapshot::rates(0, b, s.interval_s).mib_per_s);
                    (s.t_s, mib)
                })),
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
        let stalls = input.stalls();
        let lanes = stall_lanes(&stalls, &target_names, &procs, x0, x1);
        let left = lanes
            .iter()
            .map(|l| text_px(&l.name, LANE_TEXT) as u32 + 12)
            .fold(Y_LABEL_PX, u32::max);
        let p99 = per_target(&|_, t| timed(t).map(|l| l.p99 as f64 / 1e3));
        let latency_note = if n == 0 {
            Some("no writers of ours: the observed processes' stalls are in the lanes below")
        } else if p99.iter().all(Vec::is_empty) {
            Some("no write latency timed in this span")
        } else {
            None
        };
        Some(ChartData {
            x0,
            x1: if x1 > x0 { x1 } else { x0 + 1.0 },
            mib: per_target(&|s, t| Some(t.rates(s.interval_s).mib_per_s)),
            p99,
            max: per_target(&|_, t| timed(t).map(|l| l.max as f64 / 1e3)),
            dirty: kernel(|k| k.dirty_kib),
            writeback: kernel(|k| k.writeback_kib),
            bg_thresh: kernel(|k| k.dirty_bg_thresh_kib),
            thresh: kernel(|k| k.dirty_thresh_kib),
            legend: cause_legend(&stalls),
            lanes,
            left,
            latency_note,
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
    // Count by headline, time by shares, as the text and summary: a cause
    // with only shares of other stalls is time within them, not "0 (…)".
    let keys: Vec<Key> = d
        .legend
        .iter()
        .map(|&(c, n, secs)| {
            let name = if n > 0 {
                format!("{} {n} ({secs:.1} s)", c.as_str())
            } else {
                format!("{} {secs:.1} s within other stalls", c.as_str())
            };
            Key::bar(name, rgb(cause_rgb(c)))
        })
        .collect();
    let y = 8 + (LANE_PX * d.lanes.len() as u32) as i32 + 16;
    let label = text_style(TEXT, INK).pos(Pos::new(HPos::Left, VPos::Center));
    if keys.is_empty() {
        area.draw_text("no stalls in this span", &label, (d.left as i32, y))?;
        return Ok(());
    }
    area.draw_text("stalls:", &label, (4, y))?;
    draw_keys(area, &keys, d.left as i32, y)?;
    Ok(())
}

/// The x pixel of time `t_s` in the lanes, on the panels' scale.
fn lane_x(d: &ChartData, t_s: f64) -> i32 {
    let (left, right) = (f64::from(d.left), f64::from(WIDTH - RIGHT_PX));
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
    area.draw_text(name, &label(LANE_TEXT), (4, (top + bottom) / 2))?;
    let (left, right) = (d.left as i32, (WIDTH - RIGHT_PX) as i32);
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

/// "stallscope — `title`" at the top left, in bold; returns its x, where
/// the lines under it start.
fn draw_title(root: &Area, title: &str) -> Result<i32, Box<dyn Error>> {
    let title = format!("stallscope — {title}");
    let x = Y_LABEL_PX as i32 - 60;
    // A long title gets smaller rather than cut at the edge.
    let room = (WIDTH - RIGHT_PX) as f64 - x as f64;
    let size = (22.0 * room / text_px(&title, 22.0) as f64).clamp(12.0, 22.0);
    let style = (FONT, size).into_font().style(FontStyle::Bold).color(&INK);
    root.draw_text(&title, &style, (x, 10))?;
    Ok(x)
}

/// Title, then the legend of targets and stall marks; returns the header's
/// height.
fn header(root: &Area, input: &ReportInput, d: &ChartData) -> Result<u32, Box<dyn Error>> {
    let x = draw_title(root, &input.title)?;
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
fn panel<'a>(
    area: &Area<'a>,
    d: &ChartData,
    caption: &str,
    keys: &[Key],
) -> Result<Area<'a>, Box<dyn Error>> {
    let (strip, plot) = area.split_vertically(STRIP_PX);
    let style = (FONT, 16.0).into_font().style(FontStyle::Bold).color(&INK);
    let pos = Pos::new(HPos::Left, VPos::Center);
    let x = d.left as i32;
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
        .y_label_area_size(d.left)
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

/// Each piece of two points or more as a line (`draw_lone_points` the
/// rest).
fn draw_line<Y: Ranged<ValueType = f64>>(
    c: &mut Chart<'_, '_, Y>,
    line: &Line,
    style: ShapeStyle,
) -> DrawResult {
    for piece in line.iter().filter(|p| p.len() > 1) {
        c.draw_series(LineSeries::new(piece.iter().copied(), style))?;
    }
    draw_lone_points(c, line, style)
}

/// A piece of one point (a value between two missing ones) as a filled
/// dot the line's width (at least 3 px): a line of one point shows nothing.
fn draw_lone_points<Y: Ranged<ValueType = f64>>(
    c: &mut Chart<'_, '_, Y>,
    line: &Line,
    style: ShapeStyle,
) -> DrawResult {
    let dot = |p: (f64, f64)| Circle::new(p, style.stroke_width.max(3), style.filled());
    c.draw_series(line.iter().filter_map(|p| match p.as_slice() {
        [p] => Some(dot(*p)),
        _ => None,
    }))?;
    Ok(())
}

fn draw_dashed<Y: Ranged<ValueType = f64>>(
    c: &mut Chart<'_, '_, Y>,
    line: &Line,
    style: ShapeStyle,
) -> DrawResult {
    for piece in line.iter().filter(|p| p.len() > 1) {
        c.draw_series(DashedLineSeries::new(piece.iter().copied(), 8, 6, style))?;
    }
    draw_lone_points(c, line, style)
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
    let plot = panel(area, d, "Throughput", &[])?;
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
    let plot = panel(area, d, "Write latency", &keys)?;
    let all: Vec<&Line> = d.p99.iter().chain(&d.max).collect();
    let (lo, hi) = log_range(values(&all));
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
    if let Some(note) = d.latency_note {
        centre_note(&c, note)?;
    }
    marks(&c, segs, d, hi, lo)
}

/// A line of text in the middle of a panel's plot: why it is empty.
fn centre_note<Y: Ranged<ValueType = f64>>(c: &Chart<'_, '_, Y>, note: &str) -> DrawResult {
    let pos = Pos::new(HPos::Center, VPos::Center);
    let style = text_style(TEXT, INK).pos(pos);
    let area = c.plotting_area().strip_coord_spec();
    let (w, h) = area.dim_in_pixel();
    area.draw_text(note, &style, (w as i32 / 2, h as i32 / 2))?;
    Ok(())
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
    let plot = panel(area, d, "Dirty memory (system-wide)", &keys)?;
    let lines = [&d.dirty, &d.writeback, &d.bg_thresh, &d.thresh];
    let top = linear_top(values(&lines));
    let mut c = chart(&plot, d, 0.0..top, true)?;
    mesh(&mut c, "MiB", 6, true)?;
    draw_dashed(&mut c, &d.bg_thresh, BG_THRESH.stroke_width(2))?;
    draw_dashed(&mut c, &d.thresh, THRESH.stroke_width(2))?;
    draw_line(&mut c, &d.writeback, WRITEBACK.stroke_width(2))?;
    draw_line(&mut c, &d.dirty, DIRTY.stroke_width(2))?;
    if lines.iter().all(|l| l.is_empty()) {
        centre_note(&c, "no kernel counters in this span")?;
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
    let plot = panel(area, d, "Dirty memory (system-wide)", &keys)?;
    let lines: Vec<&Line> = d.dirty_by_target.iter().collect();
    let top = linear_top(values(&lines));
    let mut c = chart(&plot, d, 0.0..top, true)?;
    mesh(&mut c, "MiB", 6, true)?;
    for (t, line) in lines.iter().enumerate() {
        draw_line(&mut c, line, colour(t).stroke_width(2))?;
    }
    marks(&c, segs, d, top, 0.0)
}

mod before_after;
pub use before_after::{render_before_after, BeforeAfter, RunTrace, ShownRun};

#[cfg(test)]
mod tests;
