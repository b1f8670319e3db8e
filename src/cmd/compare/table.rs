//! The side-by-side table: a row per run, a verdict row naming the best
//! run per column.

use super::RunResult;
use crate::model::cause::Cause;
use std::fmt::Write as _;

/// Which way a column is better.
#[derive(Clone, Copy, PartialEq)]
enum Better {
    Higher,
    Lower,
}

/// A numeric column: its header, which way is better, the value compared
/// and the text shown.
pub(super) struct Col {
    name: &'static str,
    better: Better,
    value: fn(&RunResult) -> f64,
    show: fn(&RunResult) -> String,
}

pub(super) const COLS: [Col; 9] = [
    Col {
        name: "ops/s",
        better: Better::Higher,
        value: |r| r.median_ops_per_s,
        show: |r| format!("{:.0}", r.median_ops_per_s),
    },
    Col {
        name: "MiB/s",
        better: Better::Higher,
        value: |r| r.median_mib_per_s,
        show: |r| format!("{:.1}", r.median_mib_per_s),
    },
    Col {
        name: "p50 ms",
        better: Better::Lower,
        value: |r| r.lat.p50 as f64,
        show: |r| ms(r.lat.p50),
    },
    Col {
        name: "p99 ms",
        better: Better::Lower,
        value: |r| r.lat.p99 as f64,
        show: |r| ms(r.lat.p99),
    },
    Col {
        name: "p99.9 ms",
        better: Better::Lower,
        value: |r| r.lat.p999 as f64,
        show: |r| ms(r.lat.p999),
    },
    Col {
        name: "max ms",
        better: Better::Lower,
        value: |r| r.lat.max as f64,
        show: |r| ms(r.lat.max),
    },
    Col {
        name: "stalls",
        better: Better::Lower,
        value: |r| r.stalls as f64,
        show: |r| r.stalls.to_string(),
    },
    Col {
        name: "stalled s",
        better: Better::Lower,
        value: |r| r.stall_ms,
        show: |r| format!("{:.1}", r.stall_ms / 1e3),
    },
    Col {
        name: "0-ops ints",
        better: Better::Lower,
        value: |r| r.zero_intervals as f64,
        show: |r| r.zero_intervals.to_string(),
    },
];

/// Microseconds as milliseconds, with the digits that matter at each size.
pub(super) fn ms(us: u64) -> String {
    let v = us as f64 / 1e3;
    match us {
        0..1_000 => format!("{v:.3}"),
        1_000..10_000 => format!("{v:.2}"),
        10_000..100_000 => format!("{v:.1}"),
        _ => format!("{v:.0}"),
    }
}

/// The winning runs of a column among those that ran: "#2", "#1 #3" on a
/// tie, "tie" when all are equal, "-" when none ran.
pub(super) fn winner(col: &Col, results: &[RunResult]) -> String {
    let ok: Vec<&RunResult> = results.iter().filter(|r| r.error.is_none()).collect();
    let best = ok
        .iter()
        .map(|r| (col.value)(r))
        .reduce(|a, b| match col.better {
            Better::Higher => a.max(b),
            Better::Lower => a.min(b),
        });
    let Some(best) = best else {
        return "-".into();
    };
    let wins: Vec<String> = ok
        .iter()
        .filter(|r| (col.value)(r) == best)
        .map(|r| format!("#{}", r.n))
        .collect();
    if wins.len() == ok.len() && ok.len() > 1 {
        "tie".into()
    } else {
        wins.join(" ")
    }
}

/// A row per run (the run, its figures and top stall cause, or why it
/// failed), then the verdict row naming the best run per column, then what
/// the columns mean.
pub fn render_table(results: &[RunResult]) -> String {
    let mut header = vec!["run".to_string()];
    header.extend(COLS.iter().map(|c| c.name.to_string()));
    header.push("top cause".into());
    let mut rows = vec![header];
    for r in results {
        let mut row = vec![format!("#{} {}", r.n, r.label)];
        match &r.error {
            Some(e) => row.push(format!("failed: {e}")),
            None => {
                row.extend(COLS.iter().map(|c| (c.show)(r)));
                row.push(r.top_cause.map_or("-", Cause::as_str).to_string());
            }
        }
        rows.push(row);
    }
    let mut verdict = vec!["verdict".to_string()];
    verdict.extend(COLS.iter().map(|c| winner(c, results)));
    rows.push(verdict);
    let mut out = align(&rows);
    out.push_str(
        "ops/s, MiB/s: medians over the run's intervals; latency: all its writes; \
         0-ops ints: intervals without a finished write; verdict: best run per column\n",
    );
    out
}

/// The run label and the cause read left-aligned, the figures
/// right-aligned; a failed row's reason runs on past the column edges.
fn align(rows: &[Vec<String>]) -> String {
    let last = COLS.len() + 1;
    let is_reason = |row: &[String], i: usize| row.len() == 2 && i == 1;
    let mut width = vec![0; last + 1];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if !is_reason(row, i) {
                width[i] = width[i].max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let w = width[i];
            let _ = if i == 0 {
                write!(line, "{cell:<w$}")
            } else if i == last || is_reason(row, i) {
                write!(line, "  {cell}")
            } else {
                write!(line, "  {cell:>w$}")
            };
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
