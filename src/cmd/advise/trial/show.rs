//! A trial's outcome as text: the verdict with its factor and interval,
//! the two sides' figures side by side, where stall time moved, the notes
//! and the recipe.

use crate::cmd::advise::outcome::{Figures, Outcome, Verdict};
use std::fmt::Write as _;

fn factor(l: f64) -> String {
    format!("×{:.2}", l.exp())
}

pub fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Improved => "improved",
        Verdict::NoChange => "no_change",
        Verdict::Worse => "worse",
    }
}

/// "verdict: improved  ln(B/A) of … ×0.52 (95 % interval …), noise band
/// ±8 % …": the text's first line and the chart's.
pub fn verdict_line(o: &Outcome) -> String {
    format!(
        "verdict: {}  {} {} (95 % interval {} … {}), noise band ±{:.0} % (A/A pair, at least 10 %)",
        verdict_word(o.verdict),
        o.measure,
        factor(o.difference),
        factor(o.interval.0),
        factor(o.interval.1),
        (o.noise.exp() - 1.0) * 100.0
    )
}

/// The text `trial` prints.
pub fn render(o: &Outcome) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", verdict_line(o));
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
    let total = |f: &Figures| f.stall_ms_per_gib.values().sum::<f64>();
    row("stall ms/GiB, all causes", &|f| format!("{:.0}", total(f)));
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
            runs: 9,
            open_loop: true,
        };
        let o = Outcome {
            verdict: Verdict::Improved,
            measure: "ln(B/A) of stall_ms_per_gib".into(),
            difference: 0.25f64.ln(),
            interval: (0.2f64.ln(), 0.3f64.ln()),
            noise: 1.1f64.ln(),
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
        assert!(t.contains("note: few ops"), "{t}");
        assert!(
            t.ends_with("recipe:\n  stallscope lab up\n  stallscope lab down\n"),
            "{t}"
        );
    }
}
