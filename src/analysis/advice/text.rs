//! The cards as text, grouped by cause (largest stall time first), each
//! cause with its stall time; every line fits 80 columns (a single word
//! longer than that, a long path, stays whole).

use super::card::{Fidelity, Proposal, Scope};
use super::diagnosis::{Diagnosis, Stalled};
use super::machine::Machine;
use super::outcome::{times, verdict_line, verdict_word};
use super::outcome::{Figures, Outcome};
use super::treatment::Setting;
use crate::model::cause::Cause;
use std::fmt::Write as _;

pub const WIDTH: usize = 80;
/// Where a card's labelled lines put their text.
const INDENT: usize = 15;

/// The whole text: a head (what was recorded, where it is checked), then
/// the cards by cause, or why there is nothing to advise.
pub fn render(d: &Diagnosis, m: &Machine, cards: &[Proposal]) -> String {
    let mut out = String::new();
    let causes = d.causes();
    let stalls: u64 = causes.iter().map(|(_, t)| t.count).sum();
    // + 0.0: an empty sum is -0.0, which would print as "-0.00 s".
    let ms: f64 = causes.iter().map(|(_, t)| t.ms).sum::<f64>() + 0.0;
    let _ = writeln!(
        out,
        "{}",
        wrap(&format!("stallscope advise — {}", d.title), 0)
    );
    let _ = writeln!(
        out,
        "{}",
        wrap(
            &format!(
                "recorded on {}, Linux {}: {:.1} s, {stalls} stalls, {:.2} s of stall time",
                d.host,
                d.kernel,
                d.span_s,
                ms / 1e3
            ),
            0
        )
    );
    if m.probed {
        let _ = writeln!(
            out,
            "{}",
            wrap(
                &format!(
                    "knobs checked on this machine ({}, Linux {}); a card that does not apply here says why",
                    m.host, m.kernel
                ),
                0
            )
        );
    }
    if causes.is_empty() {
        let _ = writeln!(
            out,
            "\n{}",
            wrap(
                &format!(
                    "Nothing to advise: no stalls in the {:.1} s recorded. A change now could only make things worse, or be noise.",
                    d.span_s
                ),
                0
            )
        );
        return out;
    }
    let mut n = 0;
    for (cause, total) in &causes {
        let _ = writeln!(
            out,
            "\n{}: {:.2} s of stall time in {} stalls",
            cause.as_str(),
            total.ms / 1e3,
            total.count
        );
        let mine: Vec<&Proposal> = cards.iter().filter(|c| c.cause == cause.as_str()).collect();
        if mine.is_empty() {
            let _ = writeln!(out, "{}", wrap(&format!("  {}", nothing_for(*cause)), 2));
        }
        for c in mine {
            n += 1;
            out.push_str(&render_card(n, c));
        }
    }
    let _ = writeln!(
        out,
        "\n{}",
        wrap("direction: the lab can show which way a change moves the stalls, not by how much (a loop device is not your disk); not-testable: only the real hardware can tell. `stallscope advise --try` tries the lab-testable ones.", 0)
    );
    if let Some(hint) = live_hint(d) {
        let _ = writeln!(out, "{}", wrap(&hint, 0));
    }
    out
}

/// For an observed server's recording: how to try a card under it.
fn live_hint(d: &Diagnosis) -> Option<String> {
    let comm = d.subjects.iter().find_map(|s| match &s.who {
        Stalled::Server { comm, .. } => Some(comm),
        Stalled::Writers { .. } => None,
    })?;
    Some(format!(
        "On the server itself (root): `stallscope trial --observe-name {comm} --setting KNOB=VALUE` flips a card's sysctl or device knob under the running {comm}, in A/B windows judged by its own stalls, and puts it back after each."
    ))
}

/// Why a cause with stall time has no card.
fn nothing_for(cause: Cause) -> &'static str {
    match cause {
        Cause::Unknown => "no card: the stalls' evidence did not say what they waited for (tracing off? run as root to see it)",
        Cause::AppDelay => "no card: the application held its own writes back; the catalog knows RocksDB's write-stall knobs only",
        _ => "no card for these stalls' subjects (no device known, or the change is already in place)",
    }
}

/// One card: its number and change, then labelled lines.
pub fn render_card(n: usize, c: &Proposal) -> String {
    let mut out = String::new();
    let head = format!("{n:>3}. {}", c.change);
    let _ = writeln!(out, "{}", wrap(&head, 5));
    let scope = match c.scope {
        Scope::Application => "the application",
        Scope::Mount => "this mount",
        Scope::Device => "this device",
        Scope::Global => "global",
    };
    let tag = match c.outcome.as_ref() {
        Some(o) => format!("{} ({})", fidelity(c.fidelity), verdict_word(o.verdict)),
        None => fidelity(c.fidelity).to_string(),
    };
    let mut rows: Vec<(&str, String)> = vec![("fidelity", format!("{tag}, scope: {scope}"))];
    if let Some(s) = &c.subject {
        rows.push(("for", s.clone()));
    }
    for (i, a) in apply_lines(c).into_iter().enumerate() {
        rows.push((if i == 0 { "apply" } else { "" }, a));
    }
    rows.push(("trade-off", c.tradeoff.clone()));
    rows.push(("source", c.source.clone()));
    if let Some(g) = &c.gate {
        rows.push(("not here", g.clone()));
    }
    if let Some(o) = &c.outcome {
        rows.extend(outcome_rows(o));
    }
    for (label, text) in rows {
        let head = format!("     {label:<9} ");
        let _ = writeln!(out, "{}", labelled(&head, &text, INDENT));
    }
    if let Some(o) = &c.outcome {
        // Commands stay whole, one a line, to be pasted.
        for (i, l) in o.recipe.lines().enumerate() {
            let label = if i == 0 { "recipe" } else { "" };
            let _ = writeln!(out, "     {label:<9} {l}");
        }
    }
    out
}

/// A trial's rows: the verdict, each side's figures (B's with its factor
/// over A's), where stall time moved, what the figures cannot vouch for.
fn outcome_rows(o: &Outcome) -> Vec<(&'static str, String)> {
    let (a, b) = (&o.before, &o.after);
    let stall = Figures::stall_total;
    let by = |x: f64, y: f64| {
        if x > 0.0 {
            format!(" ({})", times(y / x))
        } else {
            String::new()
        }
    };
    let lat = if a.open_loop {
        "open-loop"
    } else {
        "closed-loop"
    };
    let side = |f: &Figures, base: Option<&Figures>| {
        let k = |get: fn(&Figures) -> f64| base.map_or(String::new(), |a| by(get(a), get(f)));
        format!(
            "max stall {:.0} ms{}, {lat} p99.9 {:.1} ms{}, {:.0} ms/GiB stalled{}, {:.1} MiB/s, {:.0} s at 0 MiB/s, peak dirty+writeback {} MiB, {} runs",
            f.max_stall_ms,
            k(|f| f.max_stall_ms),
            f.p999_ms,
            k(|f| f.p999_ms),
            stall(f),
            base.map_or(String::new(), |a| by(stall(a), stall(f))),
            f.mib_per_s,
            f.zero_s,
            f.peak_dirty_kib >> 10,
            f.runs
        )
    };
    let mut rows = vec![
        ("verdict", verdict_line(o)),
        ("before", side(a, None)),
        ("after", side(b, Some(a))),
    ];
    if let Some(m) = &o.moved {
        rows.push(("moved", m.clone()));
    }
    rows.extend(o.notes.iter().map(|n| ("note", n.clone())));
    rows
}

pub fn fidelity(f: Fidelity) -> &'static str {
    match f {
        Fidelity::Verified => "verified",
        Fidelity::Direction => "direction",
        Fidelity::NotTestable => "not-testable",
    }
}

/// What a person runs to apply it: the treatment's settings as commands,
/// else the knob and its value.
pub fn apply_lines(c: &Proposal) -> Vec<String> {
    let Some(t) = &c.treatment else {
        return vec![match c.scope {
            Scope::Mount => format!("mount -o {}={} (a fresh mount)", c.knob, c.to),
            _ if c.knob.starts_with('/') => format!("echo {} > {}", c.to, c.knob),
            _ => format!("{} = {}", c.knob, c.to),
        }];
    };
    let at = c
        .subject
        .as_deref()
        .and_then(|s| s.split(" on ").nth(1))
        .and_then(|s| s.split(' ').next())
        .unwrap_or("DIR");
    t.settings
        .iter()
        .map(|s| match s {
            Setting::Sysctl { name, value } => format!("sysctl -w {name}={value}"),
            Setting::Sysfs { path, value } => format!("echo {value} > {}", path.display()),
            Setting::MountOption { option } => {
                format!("mount -o remount,{option} \"$(findmnt -no TARGET -T {at})\"")
            }
            Setting::RunArgs { args } => format!("rerun with {}", args.join(" ")),
        })
        .collect()
}

/// `text` broken between words into lines of at most `WIDTH` columns,
/// its leading spaces kept and the lines after the first indented by
/// `indent`. A word longer than a line (a URL) stays whole on its own.
pub fn wrap(text: &str, indent: usize) -> String {
    let lead = text.len() - text.trim_start().len();
    labelled(&text[..lead], &text[lead..], indent)
}

/// `head` as it is, then `text`'s words wrapped after it.
fn labelled(head: &str, text: &str, indent: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut cur = head.to_string();
    let mut fresh = true;
    for word in text.split_whitespace() {
        let need = cur.chars().count() + usize::from(!fresh) + word.chars().count();
        if !fresh && need > WIDTH {
            lines.push(std::mem::take(&mut cur));
            cur = " ".repeat(indent);
            fresh = true;
        }
        if !fresh {
            cur.push(' ');
        }
        cur.push_str(word);
        fresh = false;
    }
    lines.push(cur);
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_80_columns_and_indents() {
        let t = format!("     trade-off {}", "word ".repeat(40));
        let w = wrap(&t, INDENT);
        for l in w.lines() {
            assert!(l.chars().count() <= WIDTH, "{l}");
        }
        assert!(w.lines().nth(1).unwrap().starts_with(&" ".repeat(INDENT)));
        assert!(w.starts_with("     trade-off word"));
    }
}
