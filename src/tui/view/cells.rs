//! Bounds-checked cell writes and the number formats of the dashboard.

use super::*;

/// Writes a line on the first row of `r`, clipped to it.
pub(super) fn put_line(buf: &mut Buffer, r: Rect, line: &Line) {
    let r = r.intersection(buf.area);
    if !r.is_empty() {
        buf.set_line(r.x, r.y, line, r.width);
    }
}

/// Writes text at (x, y) if that cell exists, clipped to `max` columns.
pub(super) fn put_str(buf: &mut Buffer, x: u16, y: u16, text: &str, max: usize, st: RStyle) {
    if buf.area.contains(Position::new(x, y)) {
        buf.set_stringn(x, y, text, max, st);
    }
}

// ------------------------------------------------------------- numbers -----

/// At most five columns: 0, 2.5, 350, 1.5k, 15k, 350k, 1.2M, 120M, 1.2G.
pub(super) fn fmt_num(v: f64) -> String {
    let a = v.abs();
    let (d, unit) = match a {
        _ if a >= 1e9 => (v / 1e9, "G"),
        _ if a >= 1e6 => (v / 1e6, "M"),
        _ if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    match d.abs() {
        0.0 => "0".into(),
        x if x < 10.0 && (unit.is_empty() || x < 9.95) => format!("{d:.1}{unit}").replace(".0", ""),
        _ => format!("{d:.0}{unit}"),
    }
}

/// Values in a legend: small ones keep their decimals (0.37 ms).
pub(super) fn fmt_val(v: f64) -> String {
    if v.abs() < 1.0 && v != 0.0 {
        format!("{v:.2}")
    } else {
        fmt_num(v)
    }
}

pub(super) fn fmt_decade(d: i32) -> String {
    if d >= 0 {
        format!("{}", 10u64.pow(d as u32))
    } else {
        format!("{:.*}", d.unsigned_abs() as usize, 10f64.powi(d))
    }
}

/// A stall's start: tenths, to tell apart stalls of one interval.
pub(super) fn fmt_t(t: f64) -> String {
    format!("{t:.1}s")
}

/// A time-axis label.
pub(super) fn fmt_s(t: f64) -> String {
    format!("{t:.0}s")
}

pub(super) fn fmt_dur(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", ms / 1e3)
    }
}
