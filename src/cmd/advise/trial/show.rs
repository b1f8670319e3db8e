//! A trial's outcome as text: the verdict with its factor and interval,
//! the two sides' figures side by side, where stall time moved, the notes
//! and the recipe.

use crate::cmd::advise::outcome::{Figures, Outcome, Verdict};
use std::fmt::Write as _;

/// A log ratio as a factor: ln(B/A) −0.69 is `×0.50`.
pub fn factor(l: f64) -> String {
    times(l.exp())
}

/// A ratio as a factor, `×0.37`; below 0.1 with three decimals (`×0.005`)
/// so that a hundredfold drop does not read `×0.00`.
pub fn times(r: f64) -> String {
    if r < 0.1 {
        format!("×{r:.3}")
    } else {
        format!("×{r:.2}")
    }
}

/// The verdict, its factor and interval, and the noise band, in one line.
pub fn verdict_line(o: &Outcome) -> String {
    format!(
        "{}  {} {} (95 % interval {} … {}), noise band ±{:.0} % (A/A pair, at least 10 %){}",
        verdict_word(o.verdict),
        o.measure,
        factor(o.difference),
        factor(o.interval.0),
        factor(o.interval.1),
        (o.noise.exp() - 1.0) * 100.0,
        split_within_chance(o).unwrap_or_default()
    )
}

/// Where the interval and the noise band alone would have given a
/// verdict but the pairs' split kept it at no_change, that split (the
/// sign test in `verdict`), so the verdict does not read as a slip.
fn split_within_chance(o: &Outcome) -> Option<String> {
    let clear = o.interval.1 < 0.0 || o.interval.0 > 0.0;
    if o.verdict != Verdict::NoChange || !clear || o.difference.abs() <= o.noise {
        return None;
    }
    let (way, n) = if o.difference < 0.0 {
        ("lower", o.pairs_lower)
    } else {
        ("higher", o.pairs_higher)
    };
    let moved = o.pairs_lower + o.pairs_higher;
    Some(format!(
        "; B {way} in only {n} of {moved} pairs: within chance (sign test, 5 %)"
    ))
}

pub fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Improved => "improved",
        Verdict::NoChange => "no_change",
        Verdict::Worse => "worse",
        Verdict::Inconclusive => "inconclusive",
    }
}

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

    #[test]
    fn small_factors_keep_their_digits() {
        assert_eq!(times(0.0046), "×0.005");
        assert_eq!(times(0.37), "×0.37");
        assert_eq!(factor(2f64.ln()), "×2.00");
    }

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
