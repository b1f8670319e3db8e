//! Every screen at 80×24 with `--ascii` and no colour, as a person on a
//! plain terminal sees it (issue 25, items 4 and 5): every cell ASCII, no
//! colour, the state, target, tracing and count words whole, and each
//! chart's series told apart by glyph, with the legend showing them.

use super::*;
use crate::model::observed::Watched;

const EXT4: &str = "/var/tmp/stallscope-lab/mnt/ext4";
const XFS: &str = "/var/tmp/stallscope-lab/mnt/xfs";

fn lab(path: &str, fs: &str, dev: &str) -> TargetMeta {
    TargetMeta {
        path: path.into(),
        fs: fs.into(),
        device: format!("/dev/{dev} (7:0)"),
        mount_options: "rw,relatime,errors=remount-ro,data=ordered".into(),
    }
}

/// Two lab targets and an observed process, 200 s in: 61 stalls on the
/// shown target of 129 in all, one that waited through another thread.
fn app(style: Style, replay: bool) -> App {
    let mut h = header();
    h.replay = replay;
    let metas = vec![lab(EXT4, "ext4", "loop0"), lab(XFS, "xfs", "loop1")];
    let mut app = App::new(h, metas, 120, style);
    app.observe(&[Watched {
        pid: 3389,
        comm: "db_bench".into(),
    }]);
    for i in 1..=200u64 {
        let t = i as f64 - 0.5;
        let mut st = Vec::new();
        if i <= 61 {
            st.push(stall(0, t, 150.0, 1, Cause::DirtyThrottle));
        }
        if i <= 67 {
            st.push(stall(1, t, 150.0, 2, Cause::Sync));
        }
        if i == 100 {
            st.push(chained_wait());
        }
        app.on_snapshot(&snapshot(i, 2, 0, st));
    }
    if replay {
        app.set_replay_status("paused 8\u{d7} 40/200 s".into());
    }
    app.set_advice_env(advice_env());
    app
}

/// A machine on Linux 6.8 with loop0's bdi knobs.
fn advice_env() -> crate::tui::app::AdviceEnv {
    let mut machine = crate::analysis::advice::machine::Machine {
        kernel: "6.8.0".into(),
        host: "lab".into(),
        probed: true,
        ..Default::default()
    };
    for k in [
        "/proc/sys/vm/dirty_bytes",
        "/proc/sys/vm/dirty_background_bytes",
        "/sys/class/bdi/7:0/max_bytes",
        "/sys/class/bdi/7:0/strict_limit",
    ] {
        machine.knobs.insert(k.into(), "0".into());
    }
    crate::tui::app::AdviceEnv {
        kernel: "6.8.0".into(),
        host: "lab".into(),
        machine,
        ..Default::default()
    }
}

/// The screens keys reach, by name.
fn screens(style: Style) -> Vec<(&'static str, App)> {
    let with = |replay: bool, actions: &[Action]| {
        let mut a = app(style, replay);
        for &x in actions {
            a.on_action(x);
        }
        a
    };
    let mut failed = with(false, &[Action::ToggleRecord, Action::TogglePause]);
    failed.on_notice(crate::model::control::Notice::WorkerError(
        "writer 2 failed: open /var/tmp/stallscope-lab/mnt/ext4/.stallscope-1/e0/seg-000017: No such file or directory".into(),
    ));
    failed.on_live(at(vec![live(23.7, 4, Cause::Sync)]));
    vec![
        ("dashboard", with(false, &[])),
        ("compare", with(false, &[Action::ToggleCompare])),
        ("help", with(false, &[Action::ToggleHelp])),
        ("chains", with(false, &[Action::ToggleChains])),
        ("advice", with(false, &[Action::ToggleAdvice])),
        ("add target", with(false, &[Action::AddTarget])),
        (
            "frozen",
            with(false, &[Action::ToggleFreeze, Action::ToggleRecord]),
        ),
        ("paused, an error, a live stall", failed),
        ("replay", with(true, &[])),
        ("replay help", with(true, &[Action::ToggleHelp])),
    ]
}

fn rows(b: &Buffer) -> Vec<String> {
    (0..b.area.height).map(|y| text(b, y)).collect()
}

/// The words of the header (and status line) rows, split where a popup's
/// border or a gap is: at 80 columns each must be one of the words the
/// same screen shows at 240, or the end of one after the mark (`~/mnt/ext4`).
fn cut_words(narrow: &[String], wide: &[String]) -> Vec<String> {
    let known: Vec<&str> = wide.iter().flat_map(|r| r.split_whitespace()).collect();
    narrow
        .iter()
        .flat_map(|r| r.split_whitespace())
        .filter(|w| !w.contains('|') && !w.contains('+') && *w != "~")
        .filter(|w| match w.strip_prefix('~') {
            Some(tail) => !known.iter().any(|k| k.ends_with(tail)),
            None => !known.contains(w),
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn every_screen_at_80x24_in_ascii_without_colour_reads_whole() {
    let style = Style {
        ascii: true,
        color: false,
    };
    for (name, app) in screens(style) {
        let b = render(&app, 80, 24);
        let r = rows(&b);
        let screen = r.join("\n");
        for c in b.content() {
            assert!(c.symbol().is_ascii(), "{name}: {:?}\n{screen}", c.symbol());
            assert!(
                c.fg == Color::Reset && c.bg == Color::Reset,
                "{name}: {c:?}"
            );
        }
        // Words cut inside: the header rows, the status rows and the
        // compare titles (row 3), against the same screen at 240 columns.
        // What the screen says with its popup closed, given all the room.
        let mut open = app.clone();
        open.on_action(Action::Dismiss);
        let mut wide = rows(&render(&open, 240, 24));
        wide.extend(rows(&render(&app, 240, 24)));
        // A message wrapped onto two rows is one text (a path may break
        // after a `/`); the hint is not part of it.
        let status = match (&r[22], r[23].trim_end().strip_suffix("? help  q quit")) {
            (a, Some(b)) if a.starts_with("writer") => {
                let joint = if a.trim_end().ends_with('/') { "" } else { " " };
                vec![format!("{}{joint}{}", a.trim_end(), b.trim_end())]
            }
            _ => r[22..].to_vec(),
        };
        let header = [&r[..4], &status[..]].concat();
        let wide_header = [&wide[..4], &wide[22..28], &wide[46..]].concat();
        let cut = cut_words(&header, &wide_header);
        assert!(cut.is_empty(), "{name}: cut words {cut:?}\n{screen}");
        if name.contains("help") || name == "chains" || name == "advice" {
            continue;
        }
        // Not hidden by a popup: the words themselves, whole.
        let state: &[&str] = match name {
            "frozen" => &["FROZEN at 200s", "* REC"],
            "paused, an error, a live stall" => &["* REC", "PAUSED"],
            "replay" => &["REPLAY paused 8x 40/200 s"],
            _ => &[],
        };
        for w in state.iter().chain(&["target 1/3 "]) {
            assert!(r[0].contains(w), "{name}: {w}\n{screen}");
        }
        assert!(
            r[1].contains("tracing: off (not root)"),
            "{name}: why tracing is off\n{screen}"
        );
        assert!(r[2].contains("stalls 61/129"), "{name}\n{screen}");
    }
}

#[test]
fn the_compare_view_keeps_what_tells_its_targets_apart() {
    let mut app = app(
        Style {
            ascii: true,
            color: false,
        },
        false,
    );
    app.on_action(Action::ToggleCompare);
    let b = render(&app, 80, 24);
    let r = rows(&b);
    let (left, right) = r[3].split_at(40);
    for (half, n, path) in [(left, 1, EXT4), (right, 2, XFS)] {
        let shown = half
            .split_whitespace()
            .nth(2)
            .unwrap_or_else(|| panic!("{}", r[3]));
        let half = half.trim_start();
        assert!(half.starts_with(&format!("target {n}/3 ~/")), "{}", r[3]);
        let tail = shown.strip_prefix('~').unwrap();
        assert!(
            path.ends_with(tail) && tail.ends_with(&path[27..]),
            "{}",
            r[3]
        );
    }
}

/// An error too long for the status line takes a second row; its start
/// and its reason both stay. A note is cut after a word.
#[test]
fn a_long_error_keeps_its_subject_and_its_reason() {
    let (_, app) = screens(Style {
        ascii: true,
        color: false,
    })
    .into_iter()
    .find(|(n, _)| n.contains("an error"))
    .unwrap();
    let r = rows(&render(&app, 80, 24));
    assert!(r[22].starts_with("writer 2 failed: open"), "{}", r[22]);
    assert!(r[23].contains("No such file or directory"), "{}", r[23]);
    assert!(r[23].ends_with("? help  q quit"), "{}", r[23]);
    assert!(r[3].starts_with(" STALL 23.7 s - sync, thread 4 in write"));
    let note = "kernel 6.18.44: without scheduler timing, wake-up chains, syscall bounds (`stallscope probe` says why and the fix)";
    let rows = message_rows(note, false, 80, 14, "~");
    assert_eq!(
        rows,
        ["kernel 6.18.44: without scheduler timing, wake-up chains, ~"]
    );
    let rows = message_rows(note, true, 80, 14, "~");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows[1].ends_with("says why and the fix)"), "{rows:?}");
}

/// Where colour cannot tell series apart, each has its own glyph in the
/// plot and beside its name in the legend.
#[test]
fn series_are_told_apart_by_glyph_and_legend() {
    for style in [
        Style {
            ascii: true,
            color: false,
        },
        Style {
            ascii: false,
            color: false,
        },
        Style {
            ascii: true,
            color: true,
        },
    ] {
        let b = render(&app(style, false), 80, 24);
        let r = rows(&b);
        let screen = r.join("\n");
        for def in &CHARTS[..3] {
            let y = r
                .iter()
                .position(|l| l.starts_with(def.title))
                .unwrap_or_else(|| panic!("{}\n{screen}", def.title));
            let glyphs: Vec<&str> = (0..def.series.len()).map(|k| SERIES_GLYPHS[k]).collect();
            let mut seen = glyphs.clone();
            seen.dedup();
            assert_eq!(seen.len(), glyphs.len(), "one glyph a series");
            for (s, g) in def.series.iter().zip(&glyphs) {
                assert!(
                    r[y].contains(&format!("{g} {}", s.name))
                        || r[y].contains(&format!("{g} {}", s.short)),
                    "{style:?} legend of {}: {}",
                    s.name,
                    r[y]
                );
            }
            // The plot rows up to the next chart's title.
            let plot: String = r[y + 1..]
                .iter()
                .take_while(|l| !CHARTS.iter().any(|c| l.starts_with(c.title)))
                .take_while(|l| !l.starts_with("stalls"))
                .map(|l| {
                    let n = l.chars().count() - usize::from(GUTTER_R);
                    l.chars()
                        .take(n)
                        .skip(usize::from(GUTTER_L))
                        .collect::<String>()
                })
                .collect();
            let drawn: Vec<&&str> = glyphs.iter().filter(|g| plot.contains(**g)).collect();
            // Lines that share a cell show the later series' glyph, and
            // here the first three of the dirty chart share a row.
            let want = 2;
            let marks = [UNICODE, ASCII]
                .map(|g| [g.stall_top, g.stall_line, g.switch_top, g.switch_line])
                .concat();
            for c in plot.chars().filter(|c| *c != ' ') {
                let c = c.to_string();
                assert!(
                    glyphs.contains(&c.as_str()) || marks.contains(&c.as_str()),
                    "{style:?} {}: {c:?} is no series in the legend\n{screen}",
                    def.title
                );
            }
            assert!(
                drawn.len() >= want,
                "{style:?} {}: {drawn:?}\n{screen}",
                def.title
            );
        }
    }
}

/// Text that came with the data (a message, a path, a process's name) is
/// drawn in ASCII too; `draw`'s net catches any character that is not.
#[test]
fn ascii_draws_data_in_ascii_too() {
    let mut buf = Buffer::empty(Rect::new(0, 0, 8, 1));
    buf.set_string(0, 0, "caf\u{e9}\u{2026}", RStyle::new());
    ascii_only(&mut buf);
    assert_eq!(text(&buf, 0), "caf?.   ");
    let mut app = app(
        Style {
            ascii: true,
            color: false,
        },
        false,
    );
    app.on_notice(crate::model::control::Notice::WorkerError(
        "caf\u{e9} \u{2192} d\u{e9}j\u{e0}".into(),
    ));
    let mut term = Terminal::new(TestBackend::new(80, 24)).unwrap();
    term.draw(|f| draw(f, &app)).unwrap();
    let b = term.backend().buffer();
    assert!(b.content().iter().all(|c| c.symbol().is_ascii()));
    assert!(text(b, 23).starts_with("caf? -> d?j?"), "{}", text(b, 23));
}

/// `A` opens the advice panel: at 80×24 in ASCII it shows the causes with
/// their stall time, whole cards (change, fidelity and scope, what to
/// write, the trade-off) and counts the cards that did not fit.
#[test]
fn the_advice_panel_fits_80x24() {
    let style = Style {
        ascii: true,
        color: false,
    };
    let mut app = app(style, true);
    app.on_action(Action::ToggleAdvice);
    let r = rows(&render(&app, 80, 24));
    let screen = r.join("\n");
    assert!(
        r[1].contains("advice for the stalls so far (A closes)"),
        "{screen}"
    );
    // Sync (67 x 150 ms and the chained wait) first: the most stall time.
    assert!(r[3].contains("| sync: 12.35 s in 68 stalls"), "{screen}");
    assert!(
        r[4].contains(" 1. --sync periodic:10s -> periodic:1s"),
        "{screen}"
    );
    assert!(
        r.iter()
            .any(|l| l.contains("rerun with --sync periodic:1s")),
        "{screen}"
    );
    // The observed RocksDB's own knobs: direction, written as in its options.
    assert!(
        r.iter()
            .any(|l| l.contains("direction, the application, for db_bench (pid 3389)")),
        "{screen}"
    );
    assert!(
        r.iter().any(|l| l.contains("wal_bytes_per_sync = 1048576")),
        "{screen}"
    );
    let more = r
        .iter()
        .find(|l| l.contains(" more: `stallscope advise RECORDING`"));
    let n: usize = more
        .and_then(|l| l.split("+ ").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{screen}"));
    assert_eq!(n + 4, app.advice().len(), "shown and counted add up");
    assert!(
        !screen.contains("not here"),
        "the env has the knobs: {screen}"
    );
    // Every card shown is whole: four rows after its number.
    let numbered: Vec<usize> = r
        .iter()
        .enumerate()
        .take(21)
        .filter(|(_, l)| {
            l.get(2..)
                .unwrap_or_default()
                .trim_start()
                .split('.')
                .next()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .map(|(i, _)| i)
        .collect();
    assert!(numbered.len() >= 3, "{screen}");
    for i in numbered {
        assert!(
            r[i + 3][1..].starts_with("|    ") && r[i + 3].trim_end().len() > 10,
            "{screen}"
        );
    }
    app.on_action(Action::Dismiss);
    assert!(!all(&render(&app, 80, 24)).contains("advice for the stalls"));
    // Nothing stalled yet: it says so.
    let mut empty = App::new(header(), vec![lab(EXT4, "ext4", "loop0")], 120, style);
    empty.on_action(Action::ToggleAdvice);
    assert!(all(&render(&empty, 80, 24)).contains("no stalls so far: nothing to advise"));
}
