//! Glyph sets (Unicode, ASCII) and the colour theme.

use super::*;

// ---------------------------------------------------------------- theme ----

/// Glyphs, so `--ascii` swaps them all in one place.
pub(super) struct Glyphs {
    pub(super) times: &'static str,
    pub(super) dash: &'static str,
    pub(super) rec: &'static str,
    pub(super) legend: &'static str,
    pub(super) stall_top: &'static str,
    pub(super) stall_line: &'static str,
    pub(super) switch_top: &'static str,
    pub(super) switch_line: &'static str,
    pub(super) axis: &'static str,
    pub(super) tick: &'static str,
    pub(super) cursor: &'static str,
    /// Marks text that was cut or fields that gave way.
    pub(super) more: &'static str,
    /// Before each hop of a wake-up chain.
    pub(super) arrow: &'static str,
    pub(super) lane: &'static str,
    pub(super) marker: Marker,
    pub(super) border: symbols::border::Set,
}

pub(super) const UNICODE: Glyphs = Glyphs {
    times: "×",
    dash: "—",
    rec: "● REC",
    legend: "━",
    stall_top: "▼",
    stall_line: "┊",
    switch_top: "◆",
    switch_line: "┆",
    axis: "│",
    tick: "┤",
    cursor: "█",
    more: "…",
    arrow: "←",
    lane: "█",
    marker: Marker::Braille,
    border: symbols::border::ROUNDED,
};

pub(super) const ASCII: Glyphs = Glyphs {
    times: "x",
    dash: "-",
    rec: "* REC",
    legend: "-",
    stall_top: "v",
    stall_line: ":",
    switch_top: "#",
    switch_line: "|",
    axis: "|",
    tick: "+",
    cursor: "_",
    more: "~",
    arrow: "<-",
    lane: "#",
    marker: Marker::Dot,
    border: symbols::border::Set {
        top_left: "+",
        top_right: "+",
        bottom_left: "+",
        bottom_right: "+",
        vertical_left: "|",
        vertical_right: "|",
        horizontal_top: "-",
        horizontal_bottom: "-",
    },
};

/// Each series' glyph, in a chart's order, where colour cannot tell them
/// apart (`--ascii`, NO_COLOR); the legend shows the same glyph. None of
/// them is a stall (`v` `:`) or switch (`#` `|`) mark.
pub(super) const SERIES_GLYPHS: [&str; 4] = ["*", "o", "+", "x"];

pub(super) struct Theme {
    pub(super) color: bool,
    pub(super) ascii: bool,
    pub(super) g: &'static Glyphs,
}

impl Theme {
    pub(super) fn of(app: &App) -> Theme {
        let s = app.style();
        Theme {
            color: s.color,
            ascii: s.ascii,
            g: if s.ascii { &ASCII } else { &UNICODE },
        }
    }
    /// Series are told apart by glyph, not colour: one cell a point.
    pub(super) fn glyph_series(&self) -> bool {
        self.ascii || !self.color
    }
    /// Canvas points per cell across: braille has two, a glyph one.
    pub(super) fn sub(&self) -> u16 {
        if self.glyph_series() {
            1
        } else {
            2
        }
    }
    /// Text as this terminal may draw it: ASCII stand-ins in `--ascii`.
    pub(super) fn text(&self, s: &str) -> String {
        if self.ascii {
            crate::base::text::to_ascii(s)
        } else {
            s.to_string()
        }
    }
    /// A foreground colour, or nothing at all under NO_COLOR.
    pub(super) fn fg(&self, c: Color) -> RStyle {
        if self.color {
            RStyle::new().fg(c)
        } else {
            RStyle::new()
        }
    }
    /// The colour a series paints with (Reset = the terminal's own).
    pub(super) fn paint(&self, c: Color) -> Color {
        if self.color {
            c
        } else {
            Color::Reset
        }
    }
    pub(super) fn bold(&self) -> RStyle {
        RStyle::new().add_modifier(Modifier::BOLD)
    }
    pub(super) fn dim(&self) -> RStyle {
        RStyle::new().add_modifier(Modifier::DIM)
    }
    /// An alarm: red background, or reversed video without colour.
    pub(super) fn alarm(&self) -> RStyle {
        let s = self.bold();
        if self.color {
            s.fg(Color::White).bg(Color::Red)
        } else {
            s.add_modifier(Modifier::REVERSED)
        }
    }
}

// --------------------------------------------------------------- charts ----
