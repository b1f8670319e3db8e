//! Cost of drawing one dashboard frame: an App filled with 600 s of
//! snapshots for two targets with stalls, drawn at 200×50 onto ratatui's
//! TestBackend (layout, charts, diff; no terminal I/O). The UI redraws at
//! most `--fps` times a second, so a frame must stay well under 2 ms.
//!
//! `cargo bench --bench render`

use std::time::{Duration, Instant};

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use stallscope::config::{Mode, SyncPolicy};
use stallscope::model::cause::{Attribution, Cause, Evidence};
use stallscope::model::kernel::{DevInterval, KernelInterval};
use stallscope::model::ops::{new_histogram, OpKind};
use stallscope::model::snapshot::{BdpStats, Snapshot, TargetInterval, TargetMeta};
use stallscope::model::stall::{Blocked, Live, Stall};
use stallscope::tui::app::{App, Header, Style};
use stallscope::tui::keys::Action;
use stallscope::tui::view::draw;

const FRAMES: usize = 500;
const WARMUP: usize = 20;
const SECS: u64 = 600;
const TARGETS: usize = 2;

fn meta(i: usize) -> TargetMeta {
    TargetMeta {
        path: format!("/mnt/bench{i}"),
        fs: ["ext4", "xfs"][i % 2].into(),
        device: format!("loop{i}"),
        mount_options: "rw,relatime".into(),
    }
}

fn interval(target: usize, t: u64, active: bool) -> TargetInterval {
    let mut hist = new_histogram();
    let ops = if active {
        60_000 + (t * 7919) % 20_000
    } else {
        0
    };
    if active {
        hist.record_n(40 + t % 30, ops - 100).expect("in range");
        hist.record_n(3_000, 99).expect("in range");
        hist.record(100_000 + (t % 40) * 50_000).expect("in range");
    }
    TargetInterval {
        target,
        active,
        mode: Mode::Mmap,
        threads: 4,
        ops,
        bytes: ops * 818,
        hist,
        sync_hist: new_histogram(),
        stalls: 0,
        minflt: ops / 5,
        majflt: 0,
        bdp: Some(BdpStats {
            events: t % 9,
            pause_ms: (t % 9) * 40,
            max_pause_ms: 200,
        }),
        wb_waits: Some(t % 3),
        failed: false,
    }
}

fn kernel(t: u64) -> KernelInterval {
    let dev = |i: usize| {
        Some(DevInterval {
            name: format!("loop{i}"),
            write_mib_per_s: 50.0,
            util_pct: (t % 100) as f64,
            inflight: 8,
            w_await_ms: 4.0,
            flushes: Some(2),
        })
    };
    KernelInterval {
        dirty_kib: Some((60 + t % 150) * 1024),
        writeback_kib: Some((t % 40) * 1024),
        dirty_thresh_kib: Some(256 * 1024),
        dirty_bg_thresh_kib: Some(64 * 1024),
        nr_dirty: None,
        nr_writeback: None,
        dirtied_pages: Some(12_000),
        written_pages: Some(12_000),
        pgmajfault: Some(0),
        psi_io_some_pct: Some((t % 50) as f64),
        psi_io_full_pct: Some((t % 25) as f64),
        devs: (0..TARGETS).map(dev).collect(),
    }
}

fn stall(target: usize, t: u64) -> Stall {
    Stall {
        ev: Blocked::writer(
            target,
            (t % 4) as u32,
            OpKind::Write,
            t * 1_000_000_000 - 600_000_000,
            450_000_000,
        ),
        why: Attribution::high(Cause::DirtyThrottle, Evidence::default()),
    }
}

/// Writers on target 0 for the first half, then on target 1; a stall
/// every 7 s and a burst every 60 s.
fn filled() -> App {
    let header = Header {
        mode: Mode::Mmap,
        threads: 4,
        record_size: 818,
        sync: SyncPolicy::Periodic(Duration::from_secs(10)),
        active: 0,
        recording: true,
        tracing: Ok(()),
        replay: false,
    };
    let mut app = App::new(
        header,
        (0..TARGETS).map(meta).collect(),
        120,
        Style::default(),
    );
    for t in 1..=SECS {
        let active = usize::from(t > SECS / 2);
        let mut stalls = Vec::new();
        if t % 7 == 0 {
            stalls.push(stall(active, t));
        }
        if t % 60 == 0 {
            stalls.extend((0..5).map(|_| stall(active, t)));
        }
        app.on_snapshot(&Snapshot {
            index: t,
            t_s: t as f64,
            interval_s: 1.0,
            targets: (0..TARGETS).map(|i| interval(i, t, i == active)).collect(),
            stalls,
            kernel: Some(kernel(t)),
            raw: None,
            wb_starts: None,
            ..Snapshot::default()
        });
    }
    let now_ns = SECS * 1_000_000_000;
    let mut st = stall(1, SECS);
    st.ev.who = stallscope::model::stall::Who::Writer {
        target: 1,
        thread: 2,
    };
    st.ev.start_ns = now_ns - 1_800_000_000;
    st.ev.dur_ns = None;
    app.on_live(Live {
        now_ns,
        stalls: vec![st],
    });
    app
}

/// µs per frame, sorted.
fn measure(app: &App) -> Vec<f64> {
    let mut term = Terminal::new(TestBackend::new(200, 50)).expect("test backend");
    let mut frame = |app: &App| {
        term.draw(|f| draw(f, app)).expect("draw");
    };
    for _ in 0..WARMUP {
        frame(app);
    }
    let mut us = Vec::with_capacity(FRAMES);
    for _ in 0..FRAMES {
        let start = Instant::now();
        frame(std::hint::black_box(app));
        us.push(start.elapsed().as_secs_f64() * 1e6);
    }
    us.sort_by(f64::total_cmp);
    us
}

fn report(name: &str, app: &App) {
    let us = measure(app);
    let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
    println!(
        "render {name:<22} 200x50, {FRAMES} frames, µs per frame: median {:.0}, p90 {:.0}, max {:.0}",
        at(0.5),
        at(0.9),
        at(1.0)
    );
}

fn main() {
    let app = filled();
    report("dashboard (120 s)", &app);
    let mut compare = app.clone();
    compare.on_action(Action::ToggleCompare);
    report("compare (120 s)", &compare);
    let mut wide = app.clone();
    for _ in 0..3 {
        wide.on_action(Action::WiderWindow);
    }
    report(&format!("dashboard ({} s)", wide.window_s()), &wide);
}
