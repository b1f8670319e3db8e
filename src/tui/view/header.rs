//! The header's three lines and the live-stall banner.

use super::*;

pub(super) fn header_lines(app: &App, th: &Theme, width: u16) -> Vec<Line<'static>> {
    let mut l1 = vec![Piece::new("", "stallscope", th.bold())];
    l1.extend(state_flags(app, th));
    l1.extend(target_fields(app, th));
    let room = usize::from(width);
    [l1, workload_fields(app, th), summary_fields(app, th)]
        .into_iter()
        .map(|f| fit(f, room, th.g.more, th.dim()))
        .collect()
}

/// The state a person must not miss (replay and where it is, recording,
/// paused, frozen, a failed target): first on the header and never
/// dropped before what follows, so no width hides it.
pub(super) fn state_flags(app: &App, th: &Theme) -> Vec<Piece> {
    let h = app.header();
    let flag = |text: String, c: Color| {
        Piece::new("  ", th.text(&text), th.fg(c).add_modifier(Modifier::BOLD))
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

/// "target 1/2 …/mnt/ext4  ext4 on /dev/loop0 (7:0)  rw,relatime": the
/// mount options give way first, then the device, then the path loses
/// its leading folders.
pub(super) fn target_fields(app: &App, th: &Theme) -> Vec<Piece> {
    let h = app.header();
    let Some(m) = app.targets().get(h.active).map(|t| &t.meta) else {
        return Vec::new();
    };
    let what = if app.is_observed_view(h.active) {
        "view"
    } else {
        "target"
    };
    let mut v = vec![
        Piece::new(
            "  ",
            format!("{what} {}/{}", h.active + 1, app.targets().len()),
            RStyle::new(),
        ),
        Piece::new(" ", th.text(&m.path), th.bold()).cut(Cut::Path(None)),
        Piece::new(
            "  ",
            th.text(&format!("{} on {}", m.fs, m.device)),
            RStyle::new(),
        )
        .rank(2),
    ];
    if !m.mount_options.is_empty() {
        v.push(Piece::new("  ", th.text(&m.mount_options), th.dim()).rank(3));
    }
    v
}

/// The second header line: what runs (or is observed), tracing and why
/// it is off, and how observed threads' blocks are timed. The window and
/// the record size give way first; tracing and its reason stay.
pub(super) fn workload_fields(app: &App, th: &Theme) -> Vec<Piece> {
    let h = app.header();
    let plain = RStyle::new();
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
            many => format!("{c} {}{}", th.g.times, many.len()),
        })
        .collect();
    let observing = th.text(&observing.join(", "));
    let window = Piece::new("   ", format!("window {} s", app.window_s()), plain).rank(4);
    let mut v = if app.is_observed_view(0) {
        vec![
            Piece::new(
                "",
                format!("observing {observing}, no writers of ours"),
                plain,
            )
            .cut(Cut::Words),
            window,
        ]
    } else {
        let mut v = vec![
            Piece::new(
                "",
                format!(
                    "{} {} {}",
                    h.mode,
                    th.g.times,
                    crate::base::text::count(h.threads.into(), "thread")
                ),
                plain,
            ),
            Piece::new("   ", format!("{} records", ByteSize(h.record_size)), plain).rank(3),
            Piece::new("   ", format!("sync {}", h.sync), plain).rank(2),
        ];
        if !observing.is_empty() {
            v.push(Piece::new("   ", format!("observing {observing}"), plain).rank(1));
        }
        v.push(window);
        v
    };
    match &h.tracing {
        Ok(()) => v.push(Piece::new("   ", "tracing: on", th.fg(Color::Green))),
        Err(why) => {
            let st = th.fg(Color::Yellow);
            v.push(Piece::new("   ", "tracing: off", st));
            v.push(Piece::new(" ", format!("({})", th.text(why)), st).cut(Cut::Words));
        }
    }
    if let Some(t) = app.block_timing() {
        let text = match t {
            BlockTiming::Sched => "blocks: scheduler, exact",
            BlockTiming::Sampled => "blocks: sampled",
        };
        v.push(Piece::new("   ", text, plain).rank(2));
    }
    v
}

/// The active target's figures at the view end: what a glance needs. The
/// throughput and the stall count stay; dirty, then latency, give way.
pub(super) fn summary_fields(app: &App, th: &Theme) -> Vec<Piece> {
    let plain = RStyle::new();
    let Some(t) = app.targets().get(app.header().active) else {
        return vec![Piece::new("", "no targets", plain)];
    };
    let Some(p) = t.at(app.view_end()) else {
        return vec![Piece::new("", "waiting for the first interval", th.dim())];
    };
    let ms = |v: Option<f64>| v.map_or("-".to_string(), fmt_val);
    let mib = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    let stalls = match app.stall_counts() {
        (here, all) if here == all => format!("stalls {here}"),
        (here, all) => format!("stalls {here}/{all}"),
    };
    let mut v = vec![Piece::new("", format!("{:.0} s", p.t_s), th.dim())];
    if p.observed {
        v.push(Piece::new(
            "  ",
            format!("writes {:.1} MiB/s", p.mib_per_s),
            th.bold(),
        ));
        v.push(
            Piece::new(
                "  ",
                format!("longest D-state stall {} ms", ms(p.max_ms)),
                plain,
            )
            .rank(2),
        );
        v.push(
            Piece::new(
                "  ",
                format!("throttled {} ms/s", ms(p.pause_ms_per_s)),
                plain,
            )
            .rank(2),
        );
        // Blocked ms/s by its largest causes, short waits included.
        if let Some(total) = p.blocked_ms_per_s {
            let top: Vec<String> = p
                .blocked_top
                .iter()
                .flatten()
                .map(|(c, v)| format!("{} {}", c.as_str(), fmt_val(*v)))
                .collect();
            let by = if top.is_empty() {
                String::new()
            } else {
                format!(": {}", top.join(", "))
            };
            v.push(Piece::new("  ", format!("blocked {} ms/s{by}", fmt_val(total)), plain).rank(1));
        }
    } else {
        v.push(Piece::new(
            "  ",
            format!("{:.1} MiB/s", p.mib_per_s),
            th.bold(),
        ));
        v.push(Piece::new("  ", format!("{} op/s", fmt_num(p.ops_per_s)), th.bold()).rank(1));
        v.push(Piece::new("  ", format!("p99 {} ms", ms(p.p99_ms)), plain).rank(2));
        v.push(Piece::new("  ", format!("max {} ms", ms(p.max_ms)), plain).rank(2));
    }
    v.push(Piece::new("  ", format!("dirty {} MiB", mib(p.dirty_mib)), plain).rank(3));
    v.push(Piece::new("  ", stalls, plain));
    v
}

/// The longest stall going on now: age, cause, thread and op stay whole;
/// then how many more, then the path in what room is left.
pub(super) fn draw_banner(buf: &mut Buffer, r: Rect, app: &App, th: &Theme) {
    let Some(s) = app
        .live()
        .iter()
        .max_by(|a, b| app.live_age_ms(a).total_cmp(&app.live_age_ms(b)))
    else {
        return;
    };
    let plain = RStyle::new();
    let mut v = vec![
        Piece::new(
            " ",
            format!("STALL {:.1} s", app.live_age_ms(s) / 1e3),
            plain,
        ),
        Piece::new(
            " ",
            format!("{} {},", th.g.dash, s.why.cause.as_str()),
            plain,
        ),
        Piece::new(
            " ",
            th.text(&format!("thread {} in {}", s.ev.who.thread(), op_name(s))),
            plain,
        )
        .cut(Cut::Words),
    ];
    if app.live().len() > 1 {
        v.push(Piece::new(
            "  ",
            format!("+{} more", app.live().len() - 1),
            plain,
        ));
    }
    if let Some(t) = app.view_of(&s.ev.who).and_then(|i| app.targets().get(i)) {
        v.push(
            Piece::new("  ", th.text(&t.meta.path), plain)
                .rank(1)
                .cut(Cut::Path(None)),
        );
    }
    let line = fit(v, usize::from(r.width), th.g.more, plain);
    Paragraph::new(line).style(th.alarm()).render(r, buf);
}
