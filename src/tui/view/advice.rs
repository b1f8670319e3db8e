//! The advice panel (`A`): `advise`'s cards for the stalls so far, by
//! cause, largest stall time first; each card in four rows (the change;
//! its fidelity, scope and whether it applies here; what to write; the
//! trade-off), cut with the mark where the room ends. What does not fit
//! is counted, and `stallscope advise` prints every card in full.

use super::*;
use crate::analysis::advice::card::{Proposal, Scope};
use crate::analysis::advice::text::{apply_lines, fidelity};
use crate::base::text::cut_end;

pub(super) fn draw_advice(buf: &mut Buffer, area: Rect, app: &App, th: &Theme) {
    let w = area.width.saturating_sub(2).min(100);
    let h = area.height.saturating_sub(2);
    let room = usize::from(w.saturating_sub(2));
    let rows = usize::from(h.saturating_sub(2));
    let lines = advice_lines(app, th, room, rows);
    let r = centered(area, w, (lines.len() as u16 + 2).min(h));
    popup(
        buf,
        r,
        " advice for the stalls so far (A closes) ",
        lines,
        th,
    );
}

/// The panel's rows, at most `rows` of at most `room` columns.
fn advice_lines(app: &App, th: &Theme, room: usize, rows: usize) -> Vec<Line<'static>> {
    let cut = |s: &str| cut_end(&th.text(s), room, th.g.more);
    let d = app.diagnosis();
    let causes = d.causes();
    let mut lines: Vec<Line> = Vec::new();
    if causes.is_empty() {
        lines.push(Line::raw(cut(" no stalls so far: nothing to advise")));
        lines.push(Line::styled(
            cut(" (a change now could only make things worse, or be noise)"),
            th.dim(),
        ));
        return lines;
    }
    let env = app.advice_env();
    let checked = if env.machine.probed {
        "knobs checked on this machine"
    } else {
        "knobs not checked on this machine"
    };
    lines.push(Line::styled(
        cut(&format!(" stalls on Linux {}; {checked}", d.kernel)),
        th.dim(),
    ));
    let cards = app.advice();
    let mut shown = 0;
    'causes: for (cause, total) in &causes {
        let mine: Vec<&Proposal> = cards.iter().filter(|c| c.cause == cause.as_str()).collect();
        // A cause's line and its first card together, or neither.
        if lines.len() + 1 + 4.min(4 * mine.len()) > rows.saturating_sub(1) {
            break;
        }
        lines.push(Line::styled(
            cut(&format!(
                " {}: {} in {} stalls",
                cause.as_str(),
                fmt_dur(total.ms),
                total.count
            )),
            th.fg(cause_color(*cause)).add_modifier(Modifier::BOLD),
        ));
        if mine.is_empty() {
            lines.push(Line::styled(cut("   no card in the catalog"), th.dim()));
        }
        for c in mine {
            if lines.len() + 4 > rows.saturating_sub(1) {
                break 'causes;
            }
            shown += 1;
            lines.extend(card_rows(shown, c, th, &cut));
        }
    }
    let rest = cards.len() - shown;
    if rest > 0 {
        lines.push(Line::styled(
            cut(&format!(
                " + {rest} more: `stallscope advise RECORDING` prints every card in full"
            )),
            th.dim(),
        ));
    }
    lines
}

/// One card in four rows.
fn card_rows(
    n: usize,
    c: &Proposal,
    th: &Theme,
    cut: &dyn Fn(&str) -> String,
) -> Vec<Line<'static>> {
    let scope = match c.scope {
        Scope::Application => "the application",
        Scope::Mount => "this mount",
        Scope::Device => "this device",
        Scope::Global => "global",
    };
    let here = c
        .gate
        .as_ref()
        .map_or(String::new(), |g| format!("; not here: {g}"));
    let who = c.subject.as_deref().map_or(String::new(), |s| {
        format!(", for {}", s.split(" on ").next().unwrap_or(s))
    });
    let status = format!("    {}, {scope}{who}{here}", fidelity(c.fidelity));
    let st = if c.gate.is_some() {
        th.dim()
    } else {
        RStyle::new()
    };
    vec![
        Line::styled(cut(&format!(" {n:>2}. {}", c.change)), th.bold()),
        Line::styled(cut(&status), st),
        Line::raw(cut(&format!("    {}", apply_lines(c).join("; ")))),
        Line::styled(cut(&format!("    {}", c.tradeoff)), th.dim()),
    ]
}
