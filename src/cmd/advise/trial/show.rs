//! A trial's outcome as text: the verdict with its factor and interval,
//! the two sides' figures side by side, where stall time moved, the notes
//! and the recipe.

use crate::analysis::advice::outcome::{verdict_line, Figures, Outcome};
use std::fmt::Write as _;

/// The text `trial` prints.
pub fn render(o: &Outcome) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "verdict: {}", verdict_line(o));
    let (a, b) = (&o.before, &o.after);
    let mut rows: Vec<(String, String, String)> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&Figures) -> String| {
        rows.push((name.to_string(), f(a), f(b)));
    };
    let lat = if a.open_loop {
        "open loop"
    } else {
        "closed loop"
    };
    row("runs", &|f| f.runs.to_string());
    let causes: std::collections::BTreeSet<&String> = a
        .stall_ms_per_gib
        .keys()
        .chain(b.stall_ms_per_gib.keys())
        .collect();
    row("stall ms/GiB, all causes", &|f| {
        format!("{:.0}", f.stall_total())
    });
    for c in causes {
        let v = |f: &Figures| format!("{:.0}", f.stall_ms_per_gib.get(c).copied().unwrap_or(0.0));
        row(&format!("  {c}"), &v);
    }
    row(&format!("p99 ms ({lat})"), &|f| format!("{:.1}", f.p99_ms));
    row(&format!("p99.9 ms ({lat})"), &|f| {
        format!("{:.1}", f.p999_ms)
    });
    row("max stall ms (median of runs)", &|f| {
        format!("{:.0}", f.max_stall_ms)
    });
    row("MiB/s (share of offered)", &|f| {
        format!("{:.1} ({:.0} %)", f.mib_per_s, f.achieved_share * 100.0)
    });
    row("seconds at 0 MiB/s (median)", &|f| {
        format!("{:.0}", f.zero_s)
    });
    row("peak dirty+writeback MiB", &|f| {
        format!("{}", f.peak_dirty_kib >> 10)
    });
    let w0 = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(14);
    let _ = writeln!(
        s,
        "{:<w0$}  {:>w1$}  {:>w1$}",
        "", "A (as it is)", "B (the change)"
    );
    for (n, x, y) in &rows {
        let _ = writeln!(s, "{n:<w0$}  {x:>w1$}  {y:>w1$}");
    }
    s.push_str(&tail(o));
    s
}

/// The end of a trial's text, lab or live: where stall time moved, the
/// notes and the recipe.
pub fn tail(o: &Outcome) -> String {
    let mut s = String::new();
    if let Some(m) = &o.moved {
        let _ = writeln!(s, "{m}");
    }
    for n in &o.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let _ = writeln!(s, "recipe:");
    for l in o.recipe.lines() {
        let _ = writeln!(s, "  {l}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::advice::outcome::Verdict;

    #[test]
    fn the_text_has_the_verdict_the_figures_and_the_recipe() {
        let fig = |sync: f64, p: f64| Figures {
            stall_ms_per_gib: [("sync".to_string(), sync)].into_iter().collect(),
            p99_ms: p,
            p999_ms: p * 3.0,
            max_stall_ms: p * 10.0,
            achieved_share: 1.0,
            mib_per_s: 14.9,
            peak_dirty_kib: 512 << 10,
            zero_s: 2.0,
            runs: 9,
            open_loop: true,
        };
        let o = Outcome {
            verdict: Verdict::Improved,
            measure: "ln(B/A) of stall_ms_per_gib".into(),
            difference: 0.25f64.ln(),
            interval: (0.2f64.ln(), 0.3f64.ln()),
            noise: 1.1f64.ln(),
            pairs_lower: 6,
            pairs_higher: 0,
            before: fig(40_000.0, 900.0),
            after: fig(10_000.0, 300.0),
            moved: None,
            recipe: "stallscope lab up\nstallscope lab down".into(),
            notes: vec!["few ops".into()],
        };
        let t = render(&o);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "verdict: improved  ln(B/A) of stall_ms_per_gib ×0.25 (95 % interval ×0.20 … ×0.30), noise band ±10 % (A/A pair, at least 10 %)"
        );
        assert!(lines[1].ends_with("A (as it is)  B (the change)"), "{t}");
        assert!(t.contains("  sync  "), "{t}");
        let sync = lines
            .iter()
            .find(|l| l.trim_start().starts_with("sync"))
            .unwrap();
        assert!(sync.ends_with("40000           10000"), "{t}");
        assert!(t.contains("p99.9 ms (open loop)"), "{t}");
        assert!(t.contains("peak dirty+writeback MiB"), "{t}");
        assert!(
            t.lines()
                .any(|l| l.starts_with("seconds at 0 MiB/s") && l.ends_with("2               2")),
            "{t}"
        );
        assert!(t.contains("note: few ops"), "{t}");
        // Held at no_change by the pairs' split alone: the line says so.
        let split = Outcome {
            verdict: Verdict::NoChange,
            pairs_lower: 5,
            pairs_higher: 1,
            ..o.clone()
        };
        assert!(
            verdict_line(&split).ends_with(
                "(A/A pair, at least 10 %); B lower in only 5 of 6 pairs: within chance (sign test, 5 %)"
            ),
            "{}",
            verdict_line(&split)
        );
        // An interval across zero is reason enough: nothing added.
        let across = Outcome {
            interval: (0.5f64.ln(), 1.2f64.ln()),
            ..split
        };
        assert!(verdict_line(&across).ends_with("at least 10 %)"));
        assert!(
            t.ends_with("recipe:\n  stallscope lab up\n  stallscope lab down\n"),
            "{t}"
        );
    }
}
