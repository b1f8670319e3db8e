//! The stall list, newest first.

use super::*;

pub(super) fn draw_stalls(buf: &mut Buffer, r: Rect, app: &App, th: &Theme) {
    if r.height == 0 {
        return;
    }
    let (_, total) = app.stall_counts();
    let title = Line::from(vec![
        Span::styled("Stalls", th.bold()),
        Span::styled(format!(", newest first ({total} in all)"), th.dim()),
    ]);
    let width = usize::from(r.width);
    let lead = format!(
        "{:>9} {:>9}  {:<15} {:<4} {:>6}  {:<15}  ",
        "time", "duration", "cause", "conf", "thread", "op"
    );
    // The last column's name in the words that fit: it holds a target, a
    // file or the chain a thread waited through.
    let last = ["target / waited for", "target / chain", "target"]
        .into_iter()
        .find(|h| lead.len() + h.len() <= width)
        .unwrap_or("target");
    let head = format!("{lead}{last}");
    let mut lines = vec![title, Line::styled(head, th.dim())];
    let rows = usize::from(r.height).saturating_sub(2);
    lines.extend(
        app.stalls()
            .take(rows)
            .map(|s| stall_row(s, app, th, width)),
    );
    Paragraph::new(lines).render(r, buf);
}

pub(super) fn stall_row<'a>(s: &Stall, app: &App, th: &Theme, width: usize) -> Line<'a> {
    let target = app
        .view_of(&s.ev.who)
        .and_then(|i| app.targets().get(i))
        .map_or("?", |t| t.meta.path.as_str());
    let conf = s.why.confidence.as_str();
    let lead = Span::raw(format!(
        "{:>9} {:>9}  ",
        fmt_t(s.ev.start_ns as f64 / 1e9),
        fmt_dur(s.ev.dur() as f64 / 1e6)
    ));
    let cause = Span::styled(
        format!("{:<15}", s.why.cause.as_str()),
        th.fg(cause_color(s.why.cause)),
    );
    let rest = format!(" {conf:<4} {:>6}  {:<15}  ", s.ev.who.thread(), op_name(s));
    let room = width.saturating_sub(lead.width() + cause.width() + rest.chars().count());
    // A thread that waited for another one: the chain instead of a place.
    let file = s.ev.call.as_ref().and_then(|c| c.file.as_deref());
    let mark = th.g.more;
    let place = match (s.why.chain_brief(), file) {
        (Some(chain), _) => crate::base::text::cut_end(&th.text(&chain), room, mark),
        (None, Some(file)) => crate::base::text::elide_path_with(&th.text(file), room, mark),
        (None, None) => crate::base::text::elide_path_with(&th.text(target), room, mark),
    };
    Line::from(vec![
        lead,
        cause,
        Span::raw(th.text(&rest)),
        Span::raw(place),
    ])
}

/// What the thread was doing: our op (a segment wait says which sync it
/// waited for), or an observed thread's system call when its stack named one.
pub(super) fn op_name(s: &Stall) -> String {
    use crate::model::ops::OpKind;
    let e = &s.why.evidence;
    if let Some(c) = &s.ev.call {
        return c.name.clone();
    }
    match (s.ev.op, e.syscall.as_deref(), e.sync_op.as_deref()) {
        (OpKind::Blocked, Some(call), _) => call.to_string(),
        (OpKind::SegmentWait, _, Some(op)) => {
            let call = op.split_whitespace().next().unwrap_or(op);
            format!("{call} (recycle)")
        }
        (op, _, _) => op.as_str().to_string(),
    }
}

pub(super) fn cause_color(c: Cause) -> Color {
    match c {
        Cause::DirtyThrottle => Color::Red,
        Cause::WritebackWait => Color::Magenta,
        Cause::Sync => Color::Yellow,
        Cause::JournalFull => Color::Cyan,
        Cause::Device => Color::Blue,
        Cause::Fault => Color::Green,
        Cause::AppDelay => Color::LightRed,
        Cause::Unknown => Color::Gray,
    }
}
