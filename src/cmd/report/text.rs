//! The text summary `report` prints: per target a table of its segments
//! and a whole-span line, then observe mode's processes; the figures at a
//! glance, without the chart.

use super::{totals, ReportInput, Segment};
use crate::model::cause::Cause;
use crate::model::pattern::{bucket_bytes, median_bucket, CallPattern};
use crate::model::snapshot::{cause_totals, LatSummary};
use crate::model::stall::Stall;
use crate::sink::schema::causes_text;
use std::collections::BTreeMap;
use std::fmt::Write as _;

const TEXT_HEADER: &str = "     from       to  mode      thr  ints     ops/s     MiB/s  med MiB/s       p50       p99     p99.9       max  stalls   stalled  causes";

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
        "span {from:.1}–{to:.1} s, {n} intervals; ops/s and MiB/s are totals over the time active, med the median of the active intervals' MiB/s; latencies in ms from merged histograms"
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
/// faults, bytes written, its threads' stalls by cause, the wall time in
/// which any of them was stalled, its blocked time by cause (short waits
/// too), and which thread names and files the stall time went to.
fn observed_text(input: &ReportInput) -> String {
    let mut procs: BTreeMap<u32, ObservedSpan> = BTreeMap::new();
    let mut stalls: BTreeMap<u32, Vec<&Stall>> = BTreeMap::new();
    for st in input.stalls() {
        if let Some(pid) = st.ev.who.pid() {
            stalls.entry(pid).or_default().push(st);
        }
    }
    for s in input.selected() {
        for o in &s.observed {
            let e = procs.entry(o.pid).or_insert_with(|| ObservedSpan {
                comm: o.comm.clone(),
                write_bytes: Some(0),
                ..ObservedSpan::default()
            });
            e.d_max = e.d_max.max(o.d_threads_max);
            e.majflt += o.majflt;
            e.write_bytes = e.write_bytes.zip(o.write_bytes).map(|(a, b)| a + b);
            e.exited |= !o.alive;
            for (c, ms) in &o.blocked_by_cause {
                *e.blocked.entry(*c).or_default() += ms;
            }
            e.starved_ms += o.starved_ms.unwrap_or(0.0);
            if let Some(c) = &o.calls {
                e.calls.get_or_insert_with(Default::default).add(c);
            }
        }
    }
    let mut out = String::new();
    for (pid, p) in procs {
        let own = stalls.remove(&pid).unwrap_or_default();
        out.push_str(&process_text(pid, &p, &own, input.span()));
    }
    out
}

/// One observed process's figures over the span.
#[derive(Default)]
struct ObservedSpan {
    comm: String,
    d_max: u32,
    majflt: u64,
    write_bytes: Option<u64>,
    exited: bool,
    /// Blocked ms by cause.
    blocked: BTreeMap<Cause, f64>,
    /// Long sleeps waiting for work held up upstream, ms.
    starved_ms: f64,
    /// Its write-path calls, when they were traced.
    calls: Option<CallPattern>,
}

fn process_text(pid: u32, p: &ObservedSpan, own: &[&Stall], span: Option<(f64, f64)>) -> String {
    let thread_time: u64 = own.iter().map(|s| s.ev.dur()).sum();
    // The wall time stalled is clipped to the span: a stall that ends after
    // the last interval (the process kept blocking as the run stopped)
    // counts in thread time, but the span cannot hold more than itself.
    let (lo, hi) = span.map_or((0, 0), |(a, b)| ((a * 1e9) as u64, (b * 1e9) as u64));
    let mut union = crate::model::snapshot::SpanUnion::default();
    for s in own {
        union.add(s.ev.start_ns.max(lo), (s.ev.start_ns + s.ev.dur()).min(hi));
    }
    let wall = span.map_or(0.0, |(a, b)| b - a);
    let mut out = format!(
        "\nobserved {} (pid {pid}){}: {} stalls, stalled {:.2} s of the {wall:.1} s span (any thread; {:.2} s of thread time){}{}; most threads in D at once {}, {} major faults, {}\n",
        p.comm,
        if p.exited { ", exited" } else { "" },
        own.len(),
        union.total() as f64 / 1e9,
        thread_time as f64 / 1e9,
        if own.is_empty() { "" } else { ": " },
        causes_text(&cause_totals(own.iter().copied()), secs),
        p.d_max,
        p.majflt,
        p.write_bytes.map_or("write_bytes unreadable".to_string(), |b| format!(
            "{:.1} MiB written",
            crate::base::units::mib(b)
        ))
    );
    if !p.blocked.is_empty() {
        let parts: Vec<String> = p
            .blocked
            .iter()
            .map(|(c, ms)| format!("{} {:.2} s", c.as_str(), ms / 1e3))
            .collect();
        let _ = writeln!(out, "  blocked, short waits too: {}", parts.join(", "));
    }
    if p.starved_ms > 0.0 {
        let _ = writeln!(
            out,
            "  starved (threads waiting for work held up upstream, not stall time): {:.2} s",
            p.starved_ms / 1e3
        );
    }
    if let Some(c) = p.calls.as_ref().filter(|c| !c.is_empty()) {
        out.push_str(&calls_text(c, wall));
    }
    let by_thread = group(own, |s| match &s.ev.who {
        crate::model::stall::Who::Process { thread_comm, .. } => Some(thread_comm.clone()),
        crate::model::stall::Who::Writer { .. } => None,
    });
    out.push_str(&group_text("by thread name", &by_thread));
    let by_file = group(own, |s| s.ev.call.as_ref().and_then(|c| c.file.clone()));
    out.push_str(&group_text("by file", &by_file));
    // A chained stall waited for another thread: which one, doing what.
    let by_waker = group(own, |s| {
        s.why.via.first().map(|h| format!("← {}", h.doing()))
    });
    out.push_str(&group_text(
        "waited for another thread (wake-up chains), by waker",
        &by_waker,
    ));
    out
}

/// An observed process's write-path calls over the span (the pattern an
/// imitation follows): rates, typical sizes, what each sync flushed.
fn calls_text(c: &CallPattern, wall_s: f64) -> String {
    let per_s = |n: u64| n as f64 / wall_s.max(1e-9);
    let size = |h: &BTreeMap<u8, u64>| {
        median_bucket(h).map_or("-".to_string(), |b| {
            crate::base::units::ByteSize(bucket_bytes(b)).to_string()
        })
    };
    let mut out = format!(
        "  calls: {} writes ({:.1}/s, {:.1} MiB, median up to {}, {:.2} ms each) to {} fd(s) at most in an interval",
        c.writes,
        per_s(c.writes),
        crate::base::units::mib(c.write_bytes),
        size(&c.write_size_log2),
        if c.writes > 0 { c.write_ms / c.writes as f64 } else { 0.0 },
        c.files
    );
    for (name, s) in &c.syncs {
        let _ = write!(
            out,
            "; {name} {} ({:.1}/s, {:.2} ms each{})",
            s.calls,
            per_s(s.calls),
            s.in_call_ms / s.calls.max(1) as f64,
            if s.bytes_before_log2.is_empty() {
                String::new()
            } else {
                format!(", flushing a median up to {}", size(&s.bytes_before_log2))
            }
        );
    }
    if !c.other.is_empty() {
        let parts: Vec<String> = c.other.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = write!(out, "; other: {}", parts.join(", "));
    }
    if c.failed > 0 {
        let _ = write!(out, "; {} failed", c.failed);
    }
    out.push('\n');
    out
}

/// Stalls grouped by a key: per key its count, time and largest cause;
/// the most time first.
fn group(
    own: &[&Stall],
    key: impl Fn(&Stall) -> Option<String>,
) -> Vec<(String, usize, u64, Cause)> {
    let mut by: BTreeMap<String, Vec<&Stall>> = BTreeMap::new();
    for s in own {
        if let Some(k) = key(s) {
            by.entry(k).or_default().push(s);
        }
    }
    let mut rows: Vec<(String, usize, u64, Cause)> = by
        .into_iter()
        .map(|(k, v)| {
            let ns = v.iter().map(|s| s.ev.dur()).sum();
            let causes = cause_totals(v.iter().copied());
            let top = causes
                .iter()
                .max_by(|a, b| a.1.ms.total_cmp(&b.1.ms))
                .map_or(Cause::Unknown, |(c, _)| *c);
            (k, v.len(), ns, top)
        })
        .collect();
    rows.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    rows
}

/// At most 10 rows of a grouping, and how many more there were.
fn group_text(title: &str, rows: &[(String, usize, u64, Cause)]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!("  {title}:\n");
    for (k, n, ns, cause) in rows.iter().take(10) {
        let name = crate::base::text::elide_path(k, 48);
        let _ = writeln!(
            out,
            "    {name:<48} {n:>6} stalls {:>9.2} s  {}",
            *ns as f64 / 1e9,
            cause.as_str()
        );
    }
    if rows.len() > 10 {
        let _ = writeln!(out, "    … and {} more", rows.len() - 10);
    }
    out
}

fn target_heading(input: &ReportInput, target: usize) -> String {
    match input.targets.get(target) {
        // What `run --format jsonl` printed names no device.
        Some(m) if m.device == "?" => format!("{}  ({})\n", m.path, m.fs),
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
    // No op timed: unknown, not 0 ms.
    let ms = |f: fn(&LatSummary) -> u64| {
        s.lat
            .as_ref()
            .map_or("-".to_string(), |l| format!("{:.3}", f(l) as f64 / 1000.0))
    };
    format!(
        "{:>8.1}s {:>7.1}s  {mode:<9} {threads:>3} {:>5} {:>9.0} {:>9.2} {:>10.2} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8.2}s  {}\n",
        s.from_s,
        s.to_s,
        s.intervals,
        s.mean_ops_per_s,
        s.mean_mib_per_s,
        s.median_mib_per_s,
        ms(|l| l.p50),
        ms(|l| l.p99),
        ms(|l| l.p999),
        ms(|l| l.max),
        s.stalls,
        s.stall_ns as f64 / 1e9,
        causes_text(&s.by_cause, secs)
    )
}

/// A time in ms as the report writes it: seconds, two decimals.
fn secs(ms: f64) -> String {
    format!("{:.2} s", ms / 1000.0)
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

    /// A chained stall (a thread that waited for another) is listed under
    /// the thread it waited for, doing what.
    #[test]
    fn an_observed_process_lists_its_chained_stalls_by_waker() {
        use crate::cmd::report::tests::{snap, stall};
        use crate::model::cause::Hop;
        let mut st = stall(0, 0.2, 400, Cause::Sync);
        st.ev = crate::model::stall::Blocked::process(
            (7, "db", 8, "worker"),
            st.ev.start_ns,
            400_000_000,
        );
        st.why.via = vec![Hop {
            tid: 9,
            comm: "walwriter".into(),
            state: "D".into(),
            wait: None,
            syscall: Some("fdatasync".into()),
            cause: Cause::Sync,
            ms: 400.0,
        }];
        let mut s = snap(0, vec![], vec![st]);
        s.observed = vec![crate::model::snapshot::ObservedInterval {
            pid: 7,
            comm: "db".into(),
            alive: true,
            ..Default::default()
        }];
        let snaps = [s];
        let text = render_text(&[], &input(&[], &snaps));
        let at = text.find("by waker").expect(&text);
        assert!(text[at..].contains("← walwriter fdatasync"), "{text}");
    }
}

#[cfg(test)]
mod calls_tests {
    use super::*;
    use crate::model::pattern::SyncCalls;

    #[test]
    fn the_calls_line_gives_rates_typical_sizes_and_what_syncs_flushed() {
        let mut c = CallPattern {
            writes: 300,
            write_bytes: 300 * 8192,
            write_ms: 30.0,
            write_size_log2: [(13, 290), (16, 10)].into(),
            files: 2,
            other: [("close".to_string(), 4)].into(),
            ..Default::default()
        };
        c.syncs.insert(
            "fdatasync".into(),
            SyncCalls {
                calls: 30,
                in_call_ms: 60.0,
                bytes_before: 30 * 81920,
                bytes_before_log2: [(17, 30)].into(),
            },
        );
        let line = calls_text(&c, 10.0);
        assert_eq!(
            line,
            "  calls: 300 writes (30.0/s, 2.3 MiB, median up to 8KiB, 0.10 ms each) to 2 fd(s) at most in an interval; \
             fdatasync 30 (3.0/s, 2.00 ms each, flushing a median up to 128KiB); other: close 4\n"
        );
    }
}
