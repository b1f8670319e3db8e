//! Rendering tests on a TestBackend buffer; `screens` renders every
//! screen at 80×24 in ASCII without colour.

use super::*;
use crate::tui::app::fixture::*;
use crate::tui::app::{App, Style};
use crate::tui::keys::Action;

use crate::model::snapshot::TargetMeta;
use crate::model::stall::Live;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

mod screens;

/// The screen as drawn, without `draw`'s ASCII safety net: a glyph of ours
/// that is not ASCII in `--ascii` must fail, not turn into `?`.
fn render(app: &App, w: u16, h: u16) -> Buffer {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| draw_screen(f, app)).unwrap();
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
        blocked_ms: Some(450.0),
        blocked_by_cause: [(Cause::Sync, 400.0), (Cause::DirtyThrottle, 50.0)].into(),
        ..Default::default()
    }];
    app.on_snapshot(&s);
    let b = render(&app, 160, 40);
    assert!(
        text(&b, 0).contains("view 1/1 ceph-osd (pid 4242)"),
        "{}",
        text(&b, 0)
    );
    assert!(text(&b, 1).contains("observing ceph-osd (4242), no writers of ours"));
    assert!(text(&b, 2).contains("writes 3.0 MiB/s"), "{}", text(&b, 2));
    assert!(
        text(&b, 2).contains("blocked 450 ms/s: sync 400, dirty_throttle 50"),
        "blocked time by cause, short waits included: {}",
        text(&b, 2)
    );
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

/// A RocksDB writer that waited for the flush thread's fdatasync.
fn chained_wait() -> Stall {
    use crate::model::cause::{Hop, Share};
    use crate::model::ops::OpKind;
    use crate::model::stall::{Blocked, Who};
    let mut why = crate::model::cause::Attribution::high(Cause::Sync, Default::default());
    why.shares = vec![
        Share {
            cause: Cause::Sync,
            ms: 2300.0,
        },
        Share {
            cause: Cause::Unknown,
            ms: 40.0,
        },
    ];
    why.via = vec![Hop {
        tid: 3489,
        comm: "rocksdb:high".into(),
        state: "D".into(),
        wait: Some("data writeback".into()),
        syscall: Some("fdatasync".into()),
        cause: Cause::Sync,
        ms: 2300.0,
    }];
    Stall {
        ev: Blocked {
            who: Who::Process {
                pid: 3389,
                comm: "db_bench".into(),
                tid: 3522,
                thread_comm: "db_bench".into(),
            },
            op: OpKind::Wait,
            start_ns: 5_000_000_000,
            dur_ns: Some(2_340_000_000),
            stack: None,
            call: None,
            blocked_ns: None,
            behind: None,
        },
        why,
    }
}

#[test]
fn a_waiting_stall_shows_its_chain_and_w_shows_it_hop_by_hop() {
    let mut app = App::new(header(), vec![], 120, Style::default());
    app.observe(&[crate::model::observed::Watched {
        pid: 3389,
        comm: "db_bench".into(),
    }]);
    app.on_snapshot(&snapshot(8, 0, 0, vec![chained_wait()]));
    let b = all(&render(&app, 120, 40));
    let row = b
        .lines()
        .find(|l| l.contains(" wait "))
        .unwrap_or_else(|| panic!("no waiting stall in the list:\n{b}"));
    assert!(
        row.contains("\u{2190} rocksdb:high fdatasync \u{2190} data writeback"),
        "{row}"
    );
    app.on_action(Action::ToggleChains);
    let b = all(&render(&app, 120, 40));
    assert!(b.contains("wake-up chains"), "{b}");
    assert!(
        b.contains("db_bench (tid 3522) waited 2.34 s: 2.30 s sync, 40 ms unknown"),
        "{b}"
    );
    assert!(
        b.contains("rocksdb:high (tid 3489) D in fdatasync, data writeback: sync, 2300 ms"),
        "{b}"
    );
    app.on_action(Action::Dismiss);
    assert!(!all(&render(&app, 120, 40)).contains("wake-up chains"));
}

#[test]
fn an_empty_chains_popup_says_why_only_where_it_applies() {
    let hint = |observe: bool, tracing: Result<(), String>| {
        let mut h = header();
        h.tracing = tracing;
        let mut app = App::new(h, vec![], 120, Style::default());
        if observe {
            app.observe(&[crate::model::observed::Watched {
                pid: 1,
                comm: "postgres".into(),
            }]);
        }
        app.on_action(Action::ToggleChains);
        all(&render(&app, 120, 40))
    };
    let no_observe = hint(false, Ok(()));
    assert!(no_observe.contains("--observe PID"), "{no_observe}");
    assert!(
        !no_observe.contains("need"),
        "root is not the reason: {no_observe}"
    );
    let not_root = hint(true, Err("not root".into()));
    assert!(not_root.contains("run as root"), "{not_root}");
    let root = hint(true, Ok(()));
    assert!(
        !root.contains("root"),
        "root is told nothing about root: {root}"
    );
}
