//! The text summary `report` prints: per target a table of its segments
//! and a whole-span line, then observe mode's processes; the figures at a
//! glance, without the chart.

use super::{totals, ReportInput, Segment};
use crate::model::cause::Cause;
use crate::model::snapshot::{cause_totals, CauseTotal};
use crate::model::stall::Stall;
use std::collections::BTreeMap;
use std::fmt::Write as _;

const TEXT_HEADER: &str = "     from       to  mode      thr  ints     ops/s     MiB/s       p50       p99     p99.9       max  stalls   stalled  causes";

/// The text summary: per target, its segments, then a whole-span line when
/// it had more than one segment.
pub fn render_text(segs: &[Segment], input: &ReportInput) -> String {
    let mut out = format!("stallscope report — {}\n", input.title);
    let Some((from, to)) = input.span() else {
        out.push_str("no intervals in the chosen span\n");
        return out;
    };
    let n = input.selected().count();
    let _ = writeln!(
        out,
        "span {from:.1}–{to:.1} s, {n} intervals; rates are medians of the per-interval rates; latencies in ms from merged histograms"
    );
    let totals = totals(input);
    for (target, _) in input.targets.iter().enumerate() {
        let own: Vec<&Segment> = segs.iter().filter(|s| s.target == target).collect();
        let all = totals.iter().find(|s| s.target == target);
        out.push('\n');
        out.push_str(&target_heading(input, target));
        if own.is_empty() && all.is_none() {
            out.push_str("  not active in this span\n");
            continue;
        }
        let _ = writeln!(out, "{TEXT_HEADER}");
        for s in &own {
            out.push_str(&segment_line(s));
        }
        if let Some(all) = all.filter(|_| own.len() != 1) {
            out.push_str(&segment_line(all));
        }
    }
    out.push_str(&observed_text(input));
    out
}

/// Observe mode: per observed process over the span, its D-state threads,
/// faults, bytes written and its threads' stalls by cause.
fn observed_text(input: &ReportInput) -> String {
    let mut procs: BTreeMap<u32, (String, u32, u64, Option<u64>, bool)> = BTreeMap::new();
    let mut stalls: BTreeMap<u32, Vec<&Stall>> = BTreeMap::new();
    for s in input.selected() {
        for o in &s.observed {
            let e = procs
                .entry(o.pid)
                .or_insert_with(|| (o.comm.clone(), 0, 0, Some(0), false));
            e.1 = e.1.max(o.d_threads_max);
            e.2 += o.majflt;
            e.3 = e.3.zip(o.write_bytes).map(|(a, b)| a + b);
            e.4 |= !o.alive;
        }
        for st in &s.stalls {
            if let Some(pid) = st.ev.who.pid() {
                stalls.entry(pid).or_default().push(st);
            }
        }
    }
    let mut out = String::new();
    for (pid, (comm, dmax, majflt, wb, exited)) in procs {
        let own = stalls.remove(&pid).unwrap_or_default();
        let stalled: u64 = own.iter().map(|s| s.ev.dur()).sum();
        let _ = writeln!(
            out,
            "\nobserved {comm} (pid {pid}){}: {} stalls, {:.2} s stalled{}{}; most threads in D at once {dmax}, {majflt} major faults, {}",
            if exited { ", exited" } else { "" },
            own.len(),
            stalled as f64 / 1e9,
            if own.is_empty() { "" } else { ": " },
            causes_text(&cause_totals(own.into_iter())),
            wb.map_or("write_bytes unreadable".to_string(), |b| format!(
                "{:.1} MiB written",
                crate::base::units::mib(b)
            ))
        );
    }
    out
}

fn target_heading(input: &ReportInput, target: usize) -> String {
    match input.targets.get(target) {
        Some(m) => format!(
            "{}  ({} on {}, {})\n",
            m.path, m.fs, m.device, m.mount_options
        ),
        None => format!("target {target}\n"),
    }
}

fn segment_line(s: &Segment) -> String {
    let mode = s.mode.map_or("all", |m| m.as_str());
    let threads = s.threads.map_or(String::new(), |t| t.to_string());
    let ms = |us: u64| us as f64 / 1000.0;
    format!(
        "{:>8.1}s {:>7.1}s  {mode:<9} {threads:>3} {:>5} {:>9.0} {:>9.2} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>7} {:>8.2}s  {}\n",
        s.from_s,
        s.to_s,
        s.intervals,
        s.median_ops_per_s,
        s.median_mib_per_s,
        ms(s.lat.p50),
        ms(s.lat.p99),
        ms(s.lat.p999),
        ms(s.lat.max),
        s.stalls,
        s.stall_ns as f64 / 1e9,
        causes_text(&s.by_cause)
    )
}

fn causes_text(m: &BTreeMap<Cause, CauseTotal>) -> String {
    let parts: Vec<String> = m
        .iter()
        .map(|(c, t)| format!("{} {} ({:.2} s)", c.as_str(), t.count, t.ms / 1000.0))
        .collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::report::summarize;
    use crate::cmd::report::tests::{input, moving};

    #[test]
    fn text_has_a_line_per_segment_and_a_whole_span_line() {
        let (targets, snaps) = moving();
        let inp = input(&targets, &snaps);
        let text = render_text(&summarize(&inp), &inp);
        assert!(text.starts_with("stallscope report — mmap × 4 threads"));
        let rows: Vec<&str> = text.lines().filter(|l| l.contains("s  ")).collect();
        assert!(text.contains("/lab/ext4  (ext4 on /dev/loop0 (7:0), rw,relatime)"));
        assert_eq!(
            rows.iter().filter(|l| l.contains(" all ")).count(),
            1,
            "{text}"
        );
        assert_eq!(rows.iter().filter(|l| l.contains(" mmap ")).count(), 1);
        assert_eq!(rows.iter().filter(|l| l.contains(" buffered ")).count(), 2);
    }
}
