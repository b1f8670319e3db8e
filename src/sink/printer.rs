//! The headless printer: one line per target per interval, stall and event
//! lines, and the summary, as an aligned table or as JSON Lines. The JSONL
//! field names are a public schema: add fields, never rename them.

use crate::base::units::kib_to_mib;
use crate::config::Format;
use crate::model::snapshot::{
    cause_totals, LatSummary, ObservedInterval, RunEvent, Snapshot, Summary, TargetInterval,
    TargetMeta,
};
use crate::model::stall::{Stall, Who};
use crate::sink::schema::*;
use crate::sink::Sink;
use serde::Serialize;
use std::io::{self, Write};

/// Prints to any writer (stdout in the CLI, a buffer in tests).
pub struct Printer<W: Write> {
    out: W,
    format: Format,
    meta: Vec<TargetMeta>,
    rows: u64,
    obs_rows: u64,
}

impl<W: Write> Printer<W> {
    pub fn new(out: W, format: Format) -> Self {
        Printer {
            out,
            format,
            meta: Vec::new(),
            rows: 0,
            obs_rows: 0,
        }
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    fn json<T: Serialize>(&mut self, v: &T) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, v)?;
        self.out.write_all(b"\n")
    }

    fn label(&self, target: usize) -> String {
        let p = self
            .meta
            .get(target)
            .map(|m| m.path.as_str())
            .unwrap_or("?");
        crate::base::text::elide_path(p, 18)
    }

    fn event(&mut self, e: &RunEvent) -> io::Result<()> {
        let t = e.t_ns as f64 / 1e9;
        match self.format {
            Format::Jsonl => {
                let meta = self
                    .meta
                    .get(e.target)
                    .map(|m| m.path.clone())
                    .unwrap_or_default();
                self.json(&EventLine {
                    ty: "event",
                    t_s: round(t, 3),
                    target: &meta,
                    kind: e.kind,
                    message: &e.message,
                })
            }
            Format::Table => {
                let l = self.label(e.target);
                writeln!(self.out, "{t:7.1}  {l:<18} ! {}", e.message)
            }
        }
    }
}

const OBS_HEADER: &str = "   time  process              threads  D max  D mean  write MiB/s    minflt  majflt  pause stalls  dirty     wb  cause";

const HEADER: &str = "   time  target               ops/s     MiB/s    mean     p50     p95     p99   p99.9       max stalls  dirty     wb  pause  cause";

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl<W: Write> Sink for Printer<W> {
    fn begin(&mut self, targets: &[TargetMeta]) -> io::Result<()> {
        self.meta = targets.to_vec();
        if self.format == Format::Table && !targets.is_empty() {
            writeln!(self.out, "latencies in ms")?;
            writeln!(self.out, "{HEADER}")?;
        }
        self.out.flush()
    }

    fn snapshot(&mut self, s: &Snapshot) -> io::Result<()> {
        for e in &s.events {
            self.event(e)?;
        }
        for t in &s.targets {
            match self.format {
                Format::Jsonl => {
                    let meta = self.meta[t.target].clone();
                    self.json(&interval_line(s, t, &meta))?;
                }
                Format::Table => self.target_row(s, t)?,
            }
        }
        self.observed(s)?;
        for st in &s.stalls {
            self.stall(s, st)?;
        }
        self.out.flush()
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        let meta = self.meta.clone();
        let line = summary_line(s, &meta);
        match self.format {
            Format::Jsonl => self.json(&line)?,
            Format::Table if line.targets.is_empty() => {
                writeln!(self.out)?;
                writeln!(self.out, "summary: {:.1} s observed", line.duration_s)?;
                self.observed_summary(&line)?;
            }
            Format::Table => {
                writeln!(self.out)?;
                writeln!(
                    self.out,
                    "summary: {:.1} s, {} ops, {:.0} ops/s, {:.2} MiB/s, {} stalls ({:.0} ms stalled){}",
                    line.duration_s, line.ops, line.ops_per_s, line.mib_per_s, line.stalls, line.stall_ms,
                    if line.observed_stalls > 0 {
                        format!(
                            ": {} of our writers, {} of observed processes",
                            line.writer_stalls, line.observed_stalls
                        )
                    } else {
                        String::new()
                    }
                )?;
                let l = line.lat_us;
                writeln!(
                    self.out,
                    "latency ms: mean {:.3}  p50 {:.3}  p95 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
                    l.mean / 1000.0,
                    ms(l.p50),
                    ms(l.p95),
                    ms(l.p99),
                    ms(l.p999),
                    ms(l.max)
                )?;
                if !line.by_cause.is_empty() {
                    let causes = causes_text(&line.by_cause, |ms| format!("{ms:.0} ms"));
                    writeln!(self.out, "stalls by cause: {causes}")?;
                }
                self.observed_summary(&line)?;
                if line.targets.len() > 1 {
                    for t in &line.targets {
                        writeln!(
                            self.out,
                            "  {}: {:.0} ops/s, {:.2} MiB/s, p99 {:.3} ms, max {:.3} ms, {} stalls",
                            t.target,
                            t.ops_per_s,
                            t.mib_per_s,
                            ms(t.lat_us.p99),
                            ms(t.lat_us.max),
                            t.stalls
                        )?;
                    }
                }
            }
        }
        self.out.flush()
    }
}

/// `; blocked (short waits too): sync 5907 ms, dirty_throttle 12 ms`.
fn blocked_text(by: &std::collections::BTreeMap<crate::model::cause::Cause, f64>) -> String {
    if by.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = by
        .iter()
        .map(|(c, ms)| format!("{} {ms:.0} ms", c.as_str()))
        .collect();
    format!("; blocked (short waits too): {}", parts.join(", "))
}

impl<W: Write> Printer<W> {
    fn observed_summary(&mut self, line: &SummaryLine) -> io::Result<()> {
        for o in &line.observed {
            let causes = causes_text(&o.by_cause, |ms| format!("{ms:.0} ms"));
            writeln!(
                self.out,
                "observed {} (pid {}){}: {} stalls ({:.0} ms of thread time, stalled {:.0} ms of the run){}{}{}, most threads in D at once {}, {} major faults, {}",
                o.comm,
                o.pid,
                if o.exited { ", exited" } else { "" },
                o.stalls,
                o.stall_ms,
                o.stalled_ms,
                if causes.is_empty() { "" } else { ": " },
                causes,
                blocked_text(&o.blocked_ms_by_cause),
                o.d_threads_max,
                o.majflt,
                o.write_bytes.map_or("write_bytes unreadable".to_string(), |b| {
                    format!("{:.1} MiB written", crate::base::units::mib(b))
                })
            )?;
        }
        Ok(())
    }

    /// Observe mode: one line per observed process, then its stalls.
    fn observed(&mut self, s: &Snapshot) -> io::Result<()> {
        for o in &s.observed {
            match self.format {
                Format::Jsonl => self.json(&observed_line(s, o))?,
                Format::Table => {
                    if self.obs_rows % 40 == 0 {
                        writeln!(self.out, "{OBS_HEADER}")?;
                    }
                    self.obs_rows += 1;
                    let l = observed_line(s, o);
                    let name = format!("{} {}", o.pid, o.comm);
                    let name: String = name.chars().take(18).collect();
                    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
                    let cause = crate::model::snapshot::top_cause(&cause_totals(
                        s.stalls.iter().filter(|x| x.ev.who.pid() == Some(o.pid)),
                    ));
                    writeln!(
                        self.out,
                        "{:7.1}  {name:<18} {:>8} {:>6} {:>7.2} {:>12} {:>9} {:>7} {:>6} {:>6} {:>6} {:>6}  {}",
                        s.t_s,
                        o.threads,
                        o.d_threads_max,
                        o.d_threads_mean,
                        opt(l.write_mib_per_s.map(|v| format!("{v:.2}"))),
                        o.minflt,
                        o.majflt,
                        opt(o.bdp.map(|b| b.pause_ms.to_string())),
                        o.stalls,
                        opt(l.system.dirty_kib.map(|v| format!("{:.0}", kib_to_mib(v)))),
                        opt(l.system.writeback_kib.map(|v| format!("{:.0}", kib_to_mib(v)))),
                        cause.map_or("", |c| c.as_str())
                    )?;
                }
            }
            if o.joined {
                self.process_event(s, o, "process_joined", "joined")?;
            }
            if !o.alive {
                self.process_event(s, o, "process_exited", "exited")?;
            }
        }
        Ok(())
    }

    /// One target's row of the table.
    fn target_row(&mut self, s: &Snapshot, t: &TargetInterval) -> io::Result<()> {
        if self.rows > 0 && self.rows % 40 == 0 {
            writeln!(self.out, "{HEADER}")?;
        }
        self.rows += 1;
        let r = t.rates(s.interval_s);
        let l = LatSummary::of(&t.hist);
        let k = s.kernel.as_ref();
        let mib_of = |kib: Option<u64>| {
            kib.map_or("     -".to_string(), |v| format!("{:>6.0}", kib_to_mib(v)))
        };
        let pause = t
            .bdp
            .map_or("     -".to_string(), |b| format!("{:>6}", b.pause_ms));
        let cause = top_interval_cause(&s.stalls, t.target).map_or("", |c| c.as_str());
        writeln!(
            self.out,
            "{:7.1}  {:<18} {:>8.0} {:>9.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>9.2} {:>6} {} {} {}  {}",
            s.t_s,
            self.label(t.target),
            r.ops_per_s,
            r.mib_per_s,
            l.mean / 1000.0,
            ms(l.p50),
            ms(l.p95),
            ms(l.p99),
            ms(l.p999),
            ms(l.max),
            t.stalls,
            mib_of(k.and_then(|k| k.dirty_kib)),
            mib_of(k.and_then(|k| k.writeback_kib)),
            pause,
            cause
        )
    }

    /// A finished stall: its JSONL line, or its table row (ours name the
    /// target and op, an observed thread's the process and thread).
    fn stall(&mut self, s: &Snapshot, st: &Stall) -> io::Result<()> {
        let e = &st.ev;
        let mode = e
            .who
            .target()
            .map(|i| s.targets.get(i).map_or("?", |t| t.mode.as_str()));
        if self.format == Format::Jsonl {
            let meta = e.who.target().map(|i| self.meta[i].clone());
            let place = meta.as_ref().zip(mode);
            return self.json(&stall_line(st, place));
        }
        let (label, what) = match &e.who {
            Who::Writer { target, thread } => (
                self.label(*target),
                format!(
                    "thread {thread} in {} ({}){}",
                    e.op.as_str(),
                    mode.unwrap_or("?"),
                    // Behind a sibling's segment roll: whose, and its wait.
                    st.why
                        .chain_brief()
                        .map_or(String::new(), |c| format!(" waited {c}"))
                ),
            ),
            Who::Process {
                pid,
                comm,
                tid,
                thread_comm,
            } => (
                format!("{pid} {comm}").chars().take(18).collect(),
                match (st.why.chain_brief(), &e.call) {
                    (Some(chain), _) => {
                        format!("thread {tid} ({thread_comm}) waited (S) {chain}")
                    }
                    (None, Some(c)) => format!(
                        "thread {tid} ({thread_comm}) in {}{} (D {:.0} ms)",
                        c.name,
                        c.file.as_deref().map_or(String::new(), |f| format!(" {f}")),
                        e.blocked_ns.unwrap_or(0) as f64 / 1e6
                    ),
                    (None, None) => format!("thread {tid} ({thread_comm}) blocked (D)"),
                },
            ),
        };
        writeln!(
            self.out,
            "{:7.1}  {label:<18} ~ stall {:.0} ms: {what}: {} [{}]{}",
            e.start_ns as f64 / 1e9,
            e.dur() as f64 / 1e6,
            st.why.cause.as_str(),
            st.why.confidence.as_str(),
            evidence_text(&st.why.evidence)
        )
    }

    /// An observed process came or went: an event line.
    fn process_event(
        &mut self,
        s: &Snapshot,
        o: &ObservedInterval,
        kind: &str,
        what: &str,
    ) -> io::Result<()> {
        let msg = format!("observed process {} ({}) {what}", o.pid, o.comm);
        match self.format {
            Format::Jsonl => self.json(&serde_json::json!({"type": "event",
                "t_s": round(s.t_s, 3), "kind": kind, "pid": o.pid,
                "comm": o.comm, "message": msg})),
            Format::Table => writeln!(self.out, "{:7.1}  ! {msg}", s.t_s),
        }
    }
}
