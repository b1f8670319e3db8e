//! The header's three lines and the live-stall banner.

use super::*;

pub(super) fn header_lines<'a>(app: &'a App, th: &Theme, width: u16) -> Vec<Line<'a>> {
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
pub(super) fn state_flags(app: &App, th: &Theme) -> Vec<Span<'static>> {
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
pub(super) fn target_spans<'a>(app: &'a App, th: &Theme, room: usize) -> Vec<Span<'a>> {
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
pub(super) fn workload_line<'a>(app: &'a App, th: &Theme) -> Line<'a> {
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
pub(super) fn summary_line<'a>(app: &App, th: &Theme) -> Line<'a> {
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
        // Blocked ms/s by its largest causes, short waits included.
        let blocked = match p.blocked_ms_per_s {
            Some(total) => {
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
                format!("  blocked {} ms/s{by}", fmt_val(total))
            }
            None => String::new(),
        };
        return Line::from(vec![
            Span::styled(format!("{:.0} s  ", p.t_s), th.dim()),
            Span::styled(format!("writes {:.1} MiB/s", p.mib_per_s), th.bold()),
            Span::raw(format!(
                "  longest D-state stall {} ms  throttled {} ms/s{blocked}  dirty {} MiB  stalls {stalls}",
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

pub(super) fn draw_banner(buf: &mut Buffer, r: Rect, app: &App, th: &Theme) {
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
