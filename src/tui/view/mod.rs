//! Drawing `&App` onto a ratatui frame. Pure: the same App gives the same
//! screen, so tests assert on a TestBackend buffer. Every size down to 1×1
//! draws what fits and never panics: each direct cell write is bounds-checked.
//!
//! Split by screen region: `header` (state, workload, figures, banner),
//! `charts` (the chart column, its lane and time axis, and the pure
//! scaling and folding of points into columns), `stalls` (the list),
//! `overlays` (status line, help, prompt), `advice` (the advice panel,
//! `A`: `advise`'s cards for the stalls so far), `theme` (glyphs and colours),
//! `fit` (a line of fields into a width: what matters least gives way,
//! what is cut is marked) and `cells` (bounds-checked writes and number
//! formats).

use super::app::{App, Point, TargetView};
use super::keys::{view_keys, KeyDef, KEYS, PROMPT_KEYS, REPLAY_KEYS};
use crate::base::units::ByteSize;
use crate::model::cause::Cause;
use crate::model::observed::BlockTiming;
use crate::model::stall::Stall;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::{Color, Modifier, Style as RStyle};
use ratatui::symbols::{self, Marker};
use ratatui::text::{Line, Span};
use ratatui::widgets::canvas::{Canvas, Line as CLine, Points};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Widget};
use ratatui::Frame;

mod advice;
mod cells;
mod charts;
mod fit;
mod header;
mod overlays;
mod stalls;
#[cfg(test)]
mod tests;
mod theme;

use advice::*;
use cells::*;
use charts::*;
use fit::*;
use header::*;
use overlays::*;
use stalls::*;
use theme::*;

pub use charts::{chart_titles, time_col};

/// Left of each plot: y labels (6 columns) and the axis.
pub const GUTTER_L: u16 = 7;
/// Right of each plot: the axis and right-hand labels (5 columns).
pub const GUTTER_R: u16 = 6;
/// A chart needs its title row and three plot rows to say anything.
pub const MIN_CHART_H: u16 = 4;
/// Below this only the header and the one-line summary are drawn.
pub const COMPACT_W: u16 = 60;
pub const COMPACT_H: u16 = 15;
const HEADER_H: u16 = 3;

/// Draws the dashboard; with `--ascii` any character that came with the
/// data (a path, a process name) and is not ASCII is drawn as one that is.
pub fn draw(f: &mut Frame, app: &App) {
    draw_screen(f, app);
    if app.style().ascii {
        ascii_only(f.buffer_mut());
    }
}

/// Every cell as ASCII: `to_ascii`'s first character, `?` for the rest.
fn ascii_only(buf: &mut Buffer) {
    for cell in &mut buf.content {
        if !cell.symbol().is_ascii() {
            let c = crate::base::text::to_ascii(cell.symbol());
            cell.set_symbol(&c[..1]);
        }
    }
}

/// The screen without the ASCII safety net: what tests check, so a glyph
/// of ours that is not ASCII in `--ascii` is a failure, not a `?`.
fn draw_screen(f: &mut Frame, app: &App) {
    let area = f.area();
    let buf = f.buffer_mut();
    if area.is_empty() {
        return;
    }
    let th = Theme::of(app);
    let banner_h = u16::from(!app.live_is_empty());
    let status_h = status_lines(app, &th, area.width).len() as u16;
    let [header, banner, body, status] = Layout::vertical([
        Constraint::Length(HEADER_H),
        Constraint::Length(banner_h),
        Constraint::Fill(1),
        Constraint::Length(status_h),
    ])
    .areas(area);
    Paragraph::new(header_lines(app, &th, area.width)).render(header, buf);
    draw_banner(buf, banner, app, &th);
    if area.width >= COMPACT_W && area.height >= COMPACT_H {
        draw_body(buf, body, app, &th);
    } else if body.height > 0 {
        let why = format!(
            "terminal too small for charts: need {COMPACT_W}{x}{COMPACT_H}, have {}{x}{}",
            area.width,
            area.height,
            x = th.g.times
        );
        put_str(buf, body.x, body.y, &why, usize::from(body.width), th.dim());
    }
    draw_status(buf, status, app, &th);
    if app.chains_open() {
        draw_chains(buf, area, app, &th);
    }
    if app.advice_open() {
        draw_advice(buf, area, app, &th);
    }
    if app.help_open() {
        draw_help(buf, area, app.header().replay, &th);
    }
    if let Some(p) = app.prompt() {
        draw_prompt(buf, area, status, p, &th);
    }
}
