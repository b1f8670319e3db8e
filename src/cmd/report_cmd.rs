//! `stallscope report FILE`: read a recording, print the per-segment
//! summary, and write the SVG chart and the CSV when asked. Output files are
//! written to a temporary name and renamed, so a failed run leaves none.

use crate::base::error::UsageError;
use crate::base::units::Dur;
use crate::cmd::outfile::write_atomic;
use crate::cmd::report::{render_csv, render_svg, render_text, summarize, ReportInput};
use crate::sink::recording::PRINTED_NOTE;
use std::path::Path;

pub fn run(
    file: &Path,
    svg: Option<&Path>,
    csv: Option<&Path>,
    from: Option<Dur>,
    to: Option<Dur>,
) -> anyhow::Result<()> {
    if let (Some(f), Some(t)) = (from, to) {
        if f.0 >= t.0 {
            return Err(UsageError::new(format!(
                "--from {f} is not before --to {t}: the span is empty (did you swap them?)"
            ))
            .into());
        }
    }
    for out in [svg, csv].into_iter().flatten() {
        let dir = out
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !dir.is_dir() {
            return Err(UsageError::new(format!(
                "{}: {} is not a directory",
                out.display(),
                dir.display()
            ))
            .into());
        }
    }
    let rec = crate::sink::recording::read(file).map_err(|e| UsageError::new(format!("{e:#}")))?;
    if let Some(note) = rec.damage_note() {
        eprintln!("stallscope: {note}");
    }
    let h = &rec.header;
    let title = if rec.printed {
        eprintln!("stallscope: {}: {}", file.display(), PRINTED_NOTE);
        format!("{} — from `run --format jsonl` output", printed_workload(h))
    } else {
        format!("{} — {}, Linux {}", h.workload(), h.host, h.kernel)
    };
    let input = ReportInput {
        title,
        targets: &h.targets,
        snapshots: &rec.snapshots,
        from_s: from.map(|d| d.0.as_secs_f64()),
        to_s: to.map(|d| d.0.as_secs_f64()),
        dirty_by_target: Vec::new(),
    };
    if input.selected().next().is_none() {
        let end = rec.snapshots.last().map_or(0.0, |s| s.t_s);
        return Err(UsageError::new(format!(
            "{}: no intervals in the chosen span ({} in the file, 0 to {end:.1} s)",
            file.display(),
            rec.snapshots.len()
        ))
        .into());
    }
    let segs = summarize(&input);
    print!("{}", render_text(&segs, &input));
    if let Some(out) = svg {
        let text = render_svg(&input, &segs).map_err(anyhow::Error::msg)?;
        write_atomic(out, text.as_bytes())?;
        eprintln!("stallscope: wrote {}", out.display());
    }
    if let Some(out) = csv {
        write_atomic(out, render_csv(&input).as_bytes())?;
        eprintln!("stallscope: wrote {}", out.display());
    }
    Ok(())
}

/// What is known of the workload from printed lines: the writers' mode and
/// threads (not their record size or sync), and the observed processes.
fn printed_workload(h: &crate::sink::recording::Header) -> String {
    let observed: Vec<String> = h
        .observed
        .iter()
        .map(|w| format!("{} ({})", w.comm, w.pid))
        .collect();
    let writers = format!("{} × {} threads", h.config.mode, h.config.threads);
    match (h.targets.is_empty(), observed.is_empty()) {
        (false, true) => writers,
        (true, _) => format!("observing {}", observed.join(", ")),
        (false, false) => format!("{writers}; observing {}", observed.join(", ")),
    }
}
