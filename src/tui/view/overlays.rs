//! The status line, the help popup and the add-target prompt.

use super::*;

/// The key hint at the status line's right.
fn hint(app: &App) -> &'static str {
    if app.header().replay {
        "space play  n stall  ? keys  q quit"
    } else {
        "? help  q quit"
    }
}

/// The status line's rows: the newest message, and the hint on the last
/// row. A note too long for its room is cut after a word; an error first
/// gets a second row, then is shortened from the middle (its subject and
/// its end, the reason, stay).
pub(super) fn status_lines(app: &App, th: &Theme, width: u16) -> Vec<String> {
    let hint_w = hint(app).len();
    match app.last_message() {
        Some(m) => message_rows(
            &th.text(&m.text),
            m.error,
            usize::from(width),
            hint_w,
            th.g.more,
        ),
        None => vec![String::new()],
    }
}

/// `text` in one row of `width` less the hint, or (an error) two rows, the
/// first of the full width. Pure, so the cases are tested without a screen.
pub(super) fn message_rows(
    text: &str,
    error: bool,
    width: usize,
    hint_w: usize,
    mark: &str,
) -> Vec<String> {
    use crate::base::text::{cut_end, shorten_middle, split_at_word};
    let room = width.saturating_sub(hint_w + 2);
    if text.chars().count() <= room {
        return vec![text.to_string()];
    }
    if !error {
        return vec![cut_end(text, room, mark)];
    }
    if room < 8 {
        return vec![shorten_middle(text, room, mark)];
    }
    let (first, rest) = split_at_word(text, width);
    vec![first, shorten_middle(&rest, room, mark)]
}

pub(super) fn draw_status(buf: &mut Buffer, r: Rect, app: &App, th: &Theme) {
    let hint = hint(app);
    let hint_w = hint.len() as u16;
    let rows = status_lines(app, th, r.width);
    if let Some(m) = app.last_message() {
        let st = if m.error {
            th.fg(Color::Red).add_modifier(Modifier::BOLD)
        } else {
            RStyle::new()
        };
        for (y, row) in (r.y..r.bottom()).zip(&rows) {
            put_str(buf, r.x, y, row, usize::from(r.width), st);
        }
    }
    if r.width > hint_w && r.height > 0 {
        put_str(
            buf,
            r.right() - hint_w,
            r.bottom() - 1,
            hint,
            usize::from(hint_w),
            th.dim(),
        );
    }
}

/// A centred popup listing the key tables of this dashboard (live, or a
/// replay's player and view keys). Rows without a label share the row
/// above ("> <").
pub(super) fn draw_help(buf: &mut Buffer, area: Rect, replay: bool, th: &Theme) {
    let row = |d: &KeyDef| {
        Line::from(vec![
            Span::styled(format!(" {:<11}", d.label), th.bold()),
            Span::raw(th.text(d.help)),
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
        lines.extend(KEYS.iter().filter(labelled).map(row));
        lines.push(Line::raw(""));
        lines.push(Line::styled(" at the add-target prompt:", th.dim()));
        lines.extend(PROMPT_KEYS.iter().map(row));
    }
    let w = lines.iter().map(Line::width).max().unwrap_or(0) as u16 + 3;
    let r = centered(area, w, lines.len() as u16 + 2);
    popup(buf, r, " keys ", lines, th);
}

/// The latest stalls that waited for another thread, each with its whole
/// chain: the thread that woke it first, the kernel wait at the root last.
pub(super) fn draw_chains(buf: &mut Buffer, area: Rect, app: &App, th: &Theme) {
    let w = area.width.saturating_sub(4).min(100);
    let h = area.height.saturating_sub(4);
    let mut lines: Vec<Line> = Vec::new();
    for s in app.stalls().filter(|s| !s.why.via.is_empty()) {
        let need = 1 + s.why.via.len();
        if lines.len() + need > usize::from(h.saturating_sub(2)) {
            break;
        }
        let (tid, comm) = match &s.ev.who {
            crate::model::stall::Who::Process {
                tid, thread_comm, ..
            } => (*tid, thread_comm.as_str()),
            crate::model::stall::Who::Writer { thread, .. } => (*thread, "writer"),
        };
        let shares = s
            .why
            .shares
            .iter()
            .filter(|x| x.ms >= 0.5)
            .map(|x| format!("{} {}", fmt_dur(x.ms), x.cause.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        lines.push(Line::from(vec![
            Span::raw(th.text(&format!(
                " {} {comm} (tid {tid}) waited {}: ",
                fmt_t(s.ev.start_ns as f64 / 1e9),
                fmt_dur(s.ev.dur() as f64 / 1e6)
            ))),
            Span::styled(shares, th.fg(cause_color(s.why.cause))),
        ]));
        for (i, hop) in s.why.via.iter().enumerate() {
            lines.push(Line::from(vec![
                Span::styled(format!("   {}{} ", "  ".repeat(i), th.g.arrow), th.dim()),
                Span::raw(th.text(&hop.detail())),
            ]));
        }
    }
    if lines.is_empty() {
        // Said as two short lines: the popup is at most 100 columns wide.
        lines.push(Line::raw(" no stall has waited for another thread yet"));
        lines.push(Line::styled(chains_hint(app), th.dim()));
    }
    let r = centered(area, w, (lines.len() as u16 + 2).min(area.height));
    popup(
        buf,
        r,
        " wake-up chains, newest first (w closes) ",
        lines,
        th,
    );
}

/// The one-line "add target" input, just above the status line.
/// Why the chains popup may be empty: chains come with `--observe`, as
/// root, unless turned off; said only where it applies.
fn chains_hint(app: &App) -> &'static str {
    if app.observed().is_empty() {
        " (wake-up chains are traced for observed processes: --observe PID)"
    } else if app.header().tracing.is_err() {
        " (wake-up chains need tracing: run as root)"
    } else {
        " (--chains off turns them off)"
    }
}

pub(super) fn draw_prompt(buf: &mut Buffer, area: Rect, status: Rect, text: &str, th: &Theme) {
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

pub(super) fn popup(buf: &mut Buffer, r: Rect, title: &str, lines: Vec<Line>, th: &Theme) {
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

pub(super) fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let (w, h) = (w.min(area.width), h.min(area.height));
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

// ------------------------------------------------------- buffer helpers ----
