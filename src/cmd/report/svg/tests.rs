//! The chart's tests: its bars measured in the SVG it writes, and a
//! realistic 120 s sample to look at.

use super::*;
use crate::analysis::span::start_s;
use crate::cmd::report::tests::{input, kernel, meta, snap, stall, ti};
use crate::cmd::report::{render_text, summarize};
use crate::config::Mode;
use crate::model::cause::Cause;
use crate::model::snapshot::TargetMeta;
use crate::model::stall::{Blocked, Stall};

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
    let plot_px = f64::from(WIDTH - d.left - RIGHT_PX);
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
pub(super) struct Rect {
    pub(super) x: i32,
    pub(super) y: i32,
    pub(super) w: i32,
    pub(super) h: i32,
    pub(super) fill: String,
}

pub(super) fn rects(svg: &str) -> Vec<Rect> {
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

pub(super) fn hex((r, g, b): (u8, u8, u8)) -> String {
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
    assert_eq!(d.observed[0].mib[0][0], (1.0, 20.0));
    assert_eq!(d.lanes.len(), 1, "a lane for the process");
    assert_eq!(d.lanes[0].spans.len(), 4, "its stalls in it");
    let svg = render_svg(&inp, &[]).unwrap();
    assert!(svg.contains("java (pid 42), observed"), "legend names it");
    // An observed thread's stall is not a write's latency: no dots in the
    // latency panel, and the panel says why it is empty.
    assert_eq!(svg.matches("<circle").count(), 0);
    assert!(
        svg.contains("no writers of ours"),
        "the empty panel says why"
    );
}

/// A lane's name is never cut: the label column is as wide as the
/// longest name, and the plots move right with it, on one time axis.
#[test]
fn a_long_lane_name_widens_the_label_column() {
    let name = "filestore_sync_thread";
    let snaps: Vec<Snapshot> = (0..4)
        .map(|i| {
            let mut s = snap(i, vec![], vec![]);
            s.observed = vec![crate::model::snapshot::ObservedInterval {
                pid: 42,
                comm: "ceph-osd".into(),
                alive: true,
                samples: 20,
                ..Default::default()
            }];
            let st = stall(0, i as f64 + 0.2, 400, Cause::Sync);
            let who = (42, "ceph-osd", 43, name);
            s.stalls = vec![Stall {
                ev: Blocked::process(who, st.ev.start_ns, st.ev.dur()),
                ..st
            }];
            s
        })
        .collect();
    let inp = input(&[], &snaps);
    let d = ChartData::of(&inp).unwrap();
    assert_eq!(d.lanes[0].name, name);
    // The name starts at x 4; the first plot pixel is past its end.
    let name_end = 4 + text_px(name, LANE_TEXT);
    assert!(
        lane_x(&d, d.x0) > name_end,
        "plots start at {} px, the name ends at {name_end} px",
        lane_x(&d, d.x0)
    );
    let short = {
        let (targets, snaps) = (vec![meta("/a", "ext4")], vec![snap(0, vec![], vec![])]);
        ChartData::of(&input(&targets, &snaps)).unwrap().left
    };
    assert_eq!(short, Y_LABEL_PX, "short names keep the usual column");
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
