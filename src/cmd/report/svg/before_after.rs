//! The before/after chart (`trial --svg`): runs that each started at 0 s
//! on one time axis, their throughput and write latency percentiles per
//! interval over their stall lanes by cause. Drawn with the report chart's
//! pieces (its panels, keys, lanes and legend), so the two charts read
//! alike.

use super::{
    centre_note, chart, colour, draw_dashed, draw_keys, draw_lanes, draw_line, draw_title,
    interval_of, lanes_px, linear_top, log_range, mesh, panel, pieces, text_px, text_style, values,
    Area, ChartData, DrawResult, Key, Line, INK, LANE_TEXT, TEXT, WIDTH, Y_LABEL_PX,
};
use crate::analysis::span::ReportInput;
use crate::cmd::lanes::{cause_legend, stall_lanes, Lane, LaneOf, StallSpan};
use crate::model::cause::Cause;
use crate::model::snapshot::LatSummary;
use crate::model::stall::Stall;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The header, the throughput and latency panels and the time axis; the
/// lanes go under them.
const HEIGHT: u32 = 820;
/// Of the panels' height, the throughput panel's (latency gets the rest).
const THROUGHPUT_PX: u32 = 200;

/// One run as the chart draws it, taken from its snapshots once: a few KB
/// where the snapshots hold two latency histograms per interval, so a
/// trial can keep this of every run and draw the two it picks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunTrace {
    /// Per interval of the span: its end (s since the run started) and
    /// its write latency p50, p99, p99.9 in ms (`None`: no write timed).
    pub latency: Vec<(f64, Option<[f64; 3]>)>,
    /// Per interval: its end and the MiB/s written in it (0 when the
    /// writers finished no write: the seconds at 0 MiB/s show as such;
    /// `None` while they were not running).
    pub mib: Vec<(f64, Option<f64>)>,
    /// Its stalls, clipped to the span (`stall_lanes`).
    pub spans: Vec<StallSpan>,
    /// Per cause its stalls and time (`cause_legend`).
    pub legend: Vec<(Cause, u64, f64)>,
    /// Start of the first interval and end of the last.
    pub span: (f64, f64),
}

impl RunTrace {
    /// Target `target` over `input`'s span: percentiles from each
    /// interval's histogram, the stalls filed in the span.
    pub fn of(input: &ReportInput, target: usize) -> RunTrace {
        let Some((x0, x1)) = input.span() else {
            return RunTrace::default();
        };
        let (latency, mib) = input
            .selected()
            .map(|s| {
                let active = interval_of(s, target).filter(|t| t.active);
                let ms = active.filter(|t| !t.hist.is_empty()).map(|t| {
                    let l = LatSummary::of(&t.hist);
                    [l.p50, l.p99, l.p999].map(|us| us as f64 / 1e3)
                });
                let mib = active.map(|t| t.rates(s.interval_s).mib_per_s);
                ((s.t_s, ms), (s.t_s, mib))
            })
            .unzip();
        let stalls: Vec<&Stall> = input
            .stalls()
            .into_iter()
            .filter(|st| st.ev.who.target() == Some(target))
            .collect();
        let names = vec![String::new(); target + 1];
        let mut lanes = stall_lanes(&stalls, &names, &[], x0, x1);
        RunTrace {
            latency,
            mib,
            spans: lanes.swap_remove(target).spans,
            legend: cause_legend(&stalls),
            span: (x0, x1),
        }
    }
}

/// A run on the chart: its lane's name ("A"), its key in the header.
pub struct ShownRun<'a> {
    pub lane: String,
    pub key: String,
    pub trace: &'a RunTrace,
}

/// What the chart says: its title (after "stallscope — "), lines under
/// it, the latency panel's caption and the runs, each in its colour.
pub struct BeforeAfter<'a> {
    pub title: String,
    pub notes: Vec<String>,
    pub latency: String,
    pub runs: Vec<ShownRun<'a>>,
}

/// The chart as SVG text.
pub fn render_before_after(c: &BeforeAfter) -> Result<String, String> {
    let d = frame(c).ok_or("no intervals to draw")?;
    let mut buf = String::new();
    {
        let size = (WIDTH, HEIGHT + lanes_px(&d));
        let root = SVGBackend::with_string(&mut buf, size).into_drawing_area();
        draw(&root, c, &d).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(buf)
}

/// The report chart's frame for these runs: the time axis over all of
/// them, a lane each, the causes' legend over both (counts and time add
/// up across runs).
fn frame(c: &BeforeAfter) -> Option<ChartData> {
    let spans = c.runs.iter().map(|r| r.trace.span);
    let traced = c.runs.iter().any(|r| !r.trace.latency.is_empty());
    let (x0, x1) = spans.fold((f64::MAX, f64::MIN), |(a, b), (x, y)| (a.min(x), b.max(y)));
    if !traced || x0 > x1 {
        return None;
    }
    let lanes: Vec<Lane> = (0..)
        .zip(&c.runs)
        .map(|(i, r)| Lane {
            of: LaneOf::Target(i),
            name: r.lane.clone(),
            spans: r.trace.spans.clone(),
        })
        .collect();
    let left = lanes
        .iter()
        .map(|l| text_px(&l.name, LANE_TEXT) as u32 + 12)
        .fold(Y_LABEL_PX, u32::max);
    let legend = Cause::ALL
        .iter()
        .filter_map(|&cause| {
            let of = c.runs.iter().flat_map(|r| &r.trace.legend);
            let (n, secs) = of
                .filter(|e| e.0 == cause)
                .fold((0, 0.0), |(n, s), e| (n + e.1, s + e.2));
            (n > 0 || secs > 0.0).then_some((cause, n, secs))
        })
        .collect();
    Some(ChartData {
        x0,
        x1: if x1 > x0 { x1 } else { x0 + 1.0 },
        lanes,
        legend,
        left,
        ..ChartData::default()
    })
}

fn draw(root: &Area, c: &BeforeAfter, d: &ChartData) -> DrawResult {
    root.fill(&WHITE)?;
    let x = draw_title(root, &c.title)?;
    let mut y = 44;
    for line in &c.notes {
        let style = text_style(TEXT, INK).pos(Pos::new(HPos::Left, VPos::Center));
        root.draw_text(line, &style, (x, y))?;
        y += 20;
    }
    let keys: Vec<Key> = (0..)
        .zip(&c.runs)
        .map(|(i, r)| Key::solid(r.key.clone(), colour(i), 3))
        .collect();
    let y = draw_keys(root, &keys, x, y + 4)?;
    let (_, body) = root.split_vertically((y + 16) as u32);
    let h = body.dim_in_pixel().1;
    let (plot, lanes) = body.split_vertically(h.saturating_sub(lanes_px(d)));
    let (mib, latency) = plot.split_vertically(THROUGHPUT_PX);
    throughput_panel(&mib, c, d)?;
    latency_panel(&latency, c, d)?;
    draw_lanes(&lanes, &[], d)
}

/// Each run's MiB/s per interval in its colour: where one sits at 0 the
/// writers finished nothing (`--measure zero` counts those seconds).
fn throughput_panel(area: &Area, c: &BeforeAfter, d: &ChartData) -> DrawResult {
    let plot = panel(area, d, "Throughput per interval", &[])?;
    let lines: Vec<Line> = c
        .runs
        .iter()
        .map(|r| pieces(r.trace.mib.iter().copied()))
        .collect();
    let all: Vec<&Line> = lines.iter().collect();
    let top = linear_top(values(&all));
    let mut ch = chart(&plot, d, 0.0..top, false)?;
    mesh(&mut ch, "MiB/s", 5, false)?;
    for (i, line) in lines.iter().enumerate() {
        draw_line(&mut ch, line, colour(i).stroke_width(2))?;
    }
    if all.iter().all(|l| l.is_empty()) {
        centre_note(&ch, "nothing written")?;
    }
    Ok(())
}

/// Each run's p99.9 (thick), p99 (thin) and p50 (dashed) in its colour,
/// on a log scale.
fn latency_panel(area: &Area, c: &BeforeAfter, d: &ChartData) -> DrawResult {
    let n = c.runs.len();
    let colours = || (0..n).map(colour).collect::<Vec<_>>();
    let keys = [
        Key::per_target("p99.9 (thick)", colours(), 3),
        Key::per_target("p99 (thin)", colours(), 1),
        Key::line("p50 (dashed)", INK, 2, true),
    ];
    let plot = panel(area, d, &c.latency, &keys)?;
    // Per run: p50, p99, p99.9.
    let lines: Vec<[Line; 3]> = c
        .runs
        .iter()
        .map(|r| {
            [0, 1, 2].map(|k| pieces(r.trace.latency.iter().map(|(t, v)| (*t, v.map(|v| v[k])))))
        })
        .collect();
    let all: Vec<&Line> = lines.iter().flatten().collect();
    let (lo, hi) = log_range(values(&all));
    let mut ch = chart(&plot, d, (lo..hi).log_scale(), true)?;
    let decades = (hi / lo).log10().round() as usize;
    mesh(&mut ch, "ms (log scale)", decades + 1, true)?;
    for (i, [p50, p99, p999]) in lines.iter().enumerate() {
        draw_dashed(&mut ch, p50, colour(i).stroke_width(2))?;
        draw_line(&mut ch, p99, colour(i).stroke_width(1))?;
        draw_line(&mut ch, p999, colour(i).stroke_width(3))?;
    }
    if all.iter().all(|l| l.is_empty()) {
        centre_note(&ch, "no write latency timed")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{hex, rects};
    use super::*;
    use crate::cmd::lanes::cause_rgb;
    use crate::cmd::report::tests::{input, meta, snap, stall, ti};
    use crate::config::Mode;
    use crate::model::snapshot::{Snapshot, TargetMeta};

    /// `secs` intervals of one target (`target` of two), write latencies
    /// rising with time, and `stalls` (start s, ms, cause).
    fn run(target: usize, secs: u64, stalls: &[(f64, u64, Cause)]) -> Vec<Snapshot> {
        (0..secs)
            .map(|i| {
                let lat: Vec<u64> = (1..=100).map(|v| v * (i + 1)).collect();
                let ts = (0..2)
                    .map(|t| {
                        ti(
                            t,
                            t == target,
                            Mode::Buffered,
                            1,
                            if t == target { &lat } else { &[] },
                        )
                    })
                    .collect();
                let mine = stalls
                    .iter()
                    .filter(|s| (s.0 + s.1 as f64 / 1e3).ceil() as u64 == i + 1)
                    .map(|s| stall(target, s.0, s.1, s.2))
                    .collect();
                snap(i, ts, mine)
            })
            .collect()
    }

    fn targets() -> Vec<TargetMeta> {
        vec![meta("/lab/ext4", "ext4"), meta("/lab/xfs", "xfs")]
    }

    #[test]
    fn a_runs_trace_is_its_targets_percentiles_and_stalls() {
        let snaps = run(
            1,
            6,
            &[(1.2, 1500, Cause::DirtyThrottle), (4.5, 300, Cause::Sync)],
        );
        let targets = targets();
        let t = RunTrace::of(&input(&targets, &snaps), 1);
        assert_eq!(t.span, (0.0, 6.0));
        assert_eq!(t.latency.len(), 6);
        let [p50, p99, p999] = t.latency[2].1.unwrap();
        assert!(p50 < p99 && p99 <= p999, "{:?}", t.latency[2]);
        assert!(
            (p50 - 0.15).abs() < 0.01,
            "the third second's median: {p50}"
        );
        assert_eq!(t.spans.len(), 2);
        assert_eq!(
            (t.spans[0].from_s, t.spans[0].cause),
            (1.2, Cause::DirtyThrottle)
        );
        assert!((t.spans[0].to_s - 2.7).abs() < 1e-9);
        assert_eq!(t.legend.len(), 2);
        let other = RunTrace::of(&input(&targets, &snaps), 0);
        assert!(other.spans.is_empty() && other.latency.iter().all(|l| l.1.is_none()));
    }

    #[test]
    fn each_runs_stalls_are_bars_in_its_own_lane_under_one_legend() {
        let targets = targets();
        let a = run(
            0,
            10,
            &[
                (2.0, 1500, Cause::DirtyThrottle),
                (6.0, 800, Cause::DirtyThrottle),
            ],
        );
        let b = run(0, 8, &[(3.0, 2000, Cause::Sync)]);
        let (ta, tb) = (
            RunTrace::of(&input(&targets, &a), 0),
            RunTrace::of(&input(&targets, &b), 0),
        );
        let c = BeforeAfter {
            title: "trial: x=1 — improved".into(),
            notes: vec!["a note".into()],
            latency: "Write latency".into(),
            runs: vec![
                ShownRun {
                    lane: "A".into(),
                    key: "A: as it is".into(),
                    trace: &ta,
                },
                ShownRun {
                    lane: "B".into(),
                    key: "B: with x=1".into(),
                    trace: &tb,
                },
            ],
        };
        let svg = render_before_after(&c).unwrap();
        // Each text element's words, as plotters writes them.
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| Some(t[t.find('>')? + 1..t.find("</text>")?].trim()))
            .collect();
        for want in [
            "stallscope — trial: x=1 — improved",
            "a note",
            "A: as it is",
            "B: with x=1",
            "A",
            "B",
            "p99.9 (thick)",
            "dirty_throttle 2 (2.3 s)",
            "sync 1 (2.0 s)",
        ] {
            assert!(texts.contains(&want), "{want} in {texts:?}");
        }
        let d = frame(&c).unwrap();
        assert_eq!((d.x0, d.x1), (0.0, 10.0), "one axis over both runs");
        let lane_y = |i: usize| {
            let (top, bottom) = super::super::lane_bar(i);
            (top + HEIGHT as i32, bottom + HEIGHT as i32)
        };
        let bars = |fill: String| -> Vec<i32> {
            rects(&svg)
                .into_iter()
                .filter(|r| r.fill == fill && r.h < 20)
                .map(|r| r.y)
                .collect()
        };
        let throttle = bars(hex(cause_rgb(Cause::DirtyThrottle)));
        let sync = bars(hex(cause_rgb(Cause::Sync)));
        let within = |ys: &[i32], (top, bottom): (i32, i32)| {
            ys.iter().filter(|y| **y >= top && **y < bottom).count()
        };
        assert_eq!(
            within(&throttle, lane_y(0)),
            2,
            "A's two stalls in lane A: {throttle:?}"
        );
        assert_eq!(within(&sync, lane_y(1)), 1, "B's stall in lane B: {sync:?}");
        assert_eq!(within(&throttle, lane_y(1)) + within(&sync, lane_y(0)), 0);
    }

    /// A run whose writers finished nothing for seconds (the Ceph seed's
    /// A): its throughput sits at 0 there, and its one timed interval
    /// between them still shows, as a dot, where a line of one point
    /// would draw nothing and leave B's line to look like the worse one.
    #[test]
    fn seconds_at_zero_show_and_a_lone_interval_is_a_dot() {
        let targets = targets();
        let mut snaps = run(0, 6, &[]);
        for i in [1, 2, 4, 5] {
            snaps[i].targets[0] = ti(0, true, Mode::Buffered, 1, &[]);
        }
        let t = RunTrace::of(&input(&targets, &snaps), 0);
        let mib: Vec<f64> = t.mib.iter().filter_map(|m| m.1).collect();
        assert_eq!(mib.len(), 6);
        assert!(mib[0] > 0.0 && mib[3] > 0.0, "{mib:?}");
        assert_eq!([mib[1], mib[2], mib[4], mib[5]], [0.0; 4]);
        assert!(t.latency[3].1.is_some() && t.latency[2].1.is_none());
        let c = BeforeAfter {
            title: "trial".into(),
            notes: Vec::new(),
            latency: "Write latency".into(),
            runs: vec![ShownRun {
                lane: "A".into(),
                key: "A".into(),
                trace: &t,
            }],
        };
        let svg = render_before_after(&c).unwrap();
        assert!(
            svg.contains("Throughput per interval"),
            "the panel's caption"
        );
        assert!(svg.contains("MiB/s"));
        // The lone intervals at 1 s and 4 s: p50, p99 and p99.9 each a
        // dot in A's colour (the throughput line is one piece).
        let c0 = hex((31, 119, 180));
        let dots = svg
            .split("<circle")
            .skip(1)
            .filter(|e| e.contains(&format!("fill=\"{c0}\"")))
            .count();
        assert_eq!(dots, 6, "{svg}");
    }

    #[test]
    fn runs_without_intervals_draw_nothing() {
        let empty = RunTrace::default();
        let c = BeforeAfter {
            title: String::new(),
            notes: Vec::new(),
            latency: String::new(),
            runs: vec![ShownRun {
                lane: "A".into(),
                key: String::new(),
                trace: &empty,
            }],
        };
        assert!(render_before_after(&c).is_err());
    }
}
