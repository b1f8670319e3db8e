//! A live trial as text: the verdict (or why there is none), how the
//! windows were sized, each window with its wall-clock time, the two
//! sides' figures, the notes and the recipe.

use super::super::show::tail;
use super::LiveOutcome;
use crate::analysis::advice::outcome::verdict_line;
use crate::analysis::advice::outcome::Figures;
use std::fmt::Write as _;

/// The text `trial --observe` prints.
pub fn render(l: &LiveOutcome) -> String {
    let o = &l.outcome;
    let mut s = String::new();
    match &l.load {
        Some(why) => {
            let _ = writeln!(s, "verdict: inconclusive: {why}");
            let _ = writeln!(s, "  (had the load held: {})", verdict_line(o));
        }
        None => {
            let _ = writeln!(s, "verdict: {}", verdict_line(o));
        }
    }
    let _ = writeln!(s, "observed: {}", l.observed.join(", "));
    let _ = writeln!(
        s,
        "windows: {} of {:.0} s ({}), the first {:.0} s of each not counted",
        l.windows.len(),
        l.window_s,
        l.window_why,
        l.settle_s
    );
    s.push_str(&window_table(l));
    let (a, b) = (&o.before, &o.after);
    type Row = (&'static str, fn(&Figures) -> String);
    let rows: [Row; 4] = [
        ("stall ms/GiB, all causes", |f| {
            format!("{:.0}", f.stall_total())
        }),
        ("max stall ms (median)", |f| {
            format!("{:.0}", f.max_stall_ms)
        }),
        ("seconds in a stall (median)", |f| {
            format!("{:.0}", f.zero_s)
        }),
        ("server writes MiB/s (median)", |f| {
            format!("{:.1}", f.mib_per_s)
        }),
    ];
    let _ = writeln!(
        s,
        "{:<30} {:>14} {:>14}",
        "", "A (as it is)", "B (the change)"
    );
    for (name, f) in rows {
        let _ = writeln!(s, "{name:<30} {:>14} {:>14}", f(a), f(b));
    }
    let causes: std::collections::BTreeSet<&String> = a
        .stall_ms_per_gib
        .keys()
        .chain(b.stall_ms_per_gib.keys())
        .collect();
    for c in causes {
        let v = |f: &Figures| format!("{:.0}", f.stall_ms_per_gib.get(c).copied().unwrap_or(0.0));
        let _ = writeln!(s, "{:<30} {:>14} {:>14}", format!("  {c}"), v(a), v(b));
    }
    s.push_str(&tail(o));
    s
}

/// One line per window: side, pair, start, the server's stalls and writes.
fn window_table(l: &LiveOutcome) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>3} {:>4} {:>4}  {:<19} {:>7} {:>12} {:>9} {:>7} {:>11}",
        "#",
        "side",
        "pair",
        "start (UTC)",
        "stalls",
        "stall ms/GiB",
        "max ms",
        "stall s",
        "write MiB/s"
    );
    for (i, w) in l.windows.iter().enumerate() {
        let _ = writeln!(
            s,
            "{:>3} {:>4} {:>4}  {:<19} {:>7} {:>12.0} {:>9.0} {:>7.0} {:>11.1}",
            i + 1,
            w.side,
            w.pair,
            utc(w.start_unix),
            w.stalls,
            w.stall_ms_per_gib,
            w.max_stall_ms,
            w.stall_s,
            w.write_mib_s
        );
    }
    s
}

/// `2026-12-06 22:41:07`: seconds since the epoch as UTC.
pub fn utc(unix: f64) -> String {
    let secs = unix.max(0.0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_table_s_columns_line_up() {
        use crate::analysis::advice::outcome::{Outcome, Verdict};
        let row = super::super::WindowRow {
            side: "B",
            pair: 3,
            start_unix: 1_796_596_952.8,
            measured_from_unix: 1_796_596_954.8,
            end_unix: 1_796_596_962.8,
            measure: 1.0,
            stalls: 12,
            stall_ms_per_gib: 123_456.0,
            max_stall_ms: 992.0,
            stall_s: 7.0,
            write_mib_s: 285.2,
        };
        let l = LiveOutcome {
            outcome: Outcome {
                verdict: Verdict::NoChange,
                measure: String::new(),
                difference: 0.0,
                interval: (0.0, 0.0),
                noise: 0.1,
                pairs_lower: 0,
                pairs_higher: 0,
                before: Figures::default(),
                after: Figures::default(),
                moved: None,
                recipe: String::new(),
                notes: Vec::new(),
            },
            observed: Vec::new(),
            window_s: 10.0,
            settle_s: 2.0,
            window_why: String::new(),
            load: None,
            windows: vec![row],
        };
        let t = window_table(&l);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0].len(), lines[1].len(), "{t}");
        // Each header ends where its column's figures end.
        for (name, figure) in [("stall ms/GiB", "123456"), ("write MiB/s", "285.2")] {
            let end = |l: &str, w: &str| l.find(w).unwrap() + w.len();
            assert_eq!(end(lines[0], name), end(lines[1], figure), "{t}");
        }
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_796_596_952.8), "2026-12-06 22:42:32");
        assert_eq!(utc(951_782_400.0), "2000-02-29 00:00:00");
    }
}
