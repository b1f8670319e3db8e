//! The headless printer: one line per target per interval, stall and event
//! lines, and the summary, as an aligned table or as JSON Lines. The JSONL
//! field names are a public schema: add fields, never rename them.

use crate::config::Format;
use crate::measure::{OpKind, StallEvent};
use crate::snapshot::{LatSummary, RunEvent, Snapshot, Summary, TargetInterval, TargetMeta};
use serde::Serialize;
use std::io::{self, Write};

/// A consumer of the run's snapshots (printer, UI, recorder).
pub trait Sink {
    fn begin(&mut self, targets: &[TargetMeta]) -> io::Result<()>;
    fn snapshot(&mut self, s: &Snapshot) -> io::Result<()>;
    fn summary(&mut self, s: &Summary) -> io::Result<()>;
}

#[derive(Serialize)]
pub struct IntervalLine<'a> {
    #[serde(rename = "type")]
    pub ty: &'static str,
    pub t_s: f64,
    pub target: &'a str,
    pub fs: &'a str,
    pub mode: &'static str,
    pub threads: u32,
    pub ops: u64,
    pub ops_per_s: f64,
    pub mib_per_s: f64,
    pub lat_us: LatSummary,
    pub stalls: u32,
    pub sync: SyncLine,
}

#[derive(Serialize)]
pub struct SyncLine {
    pub ops: u64,
    pub max_ms: f64,
}

#[derive(Serialize)]
pub struct StallLine<'a> {
    #[serde(rename = "type")]
    pub ty: &'static str,
    pub t_s: f64,
    pub duration_ms: f64,
    pub thread: u32,
    pub op: OpKind,
    pub target: &'a str,
    pub mode: &'static str,
}

#[derive(Serialize)]
pub struct EventLine<'a> {
    #[serde(rename = "type")]
    pub ty: &'static str,
    pub t_s: f64,
    pub target: &'a str,
    pub kind: crate::measure::EventKind,
    pub message: &'a str,
}

#[derive(Serialize)]
pub struct SummaryLine<'a> {
    #[serde(rename = "type")]
    pub ty: &'static str,
    pub duration_s: f64,
    pub ops: u64,
    pub mib_per_s: f64,
    pub ops_per_s: f64,
    pub lat_us: LatSummary,
    pub stalls: u64,
    pub stall_ms: f64,
    pub targets: Vec<TargetSummaryLine<'a>>,
}

#[derive(Serialize)]
pub struct TargetSummaryLine<'a> {
    pub target: &'a str,
    pub ops: u64,
    pub mib_per_s: f64,
    pub ops_per_s: f64,
    pub lat_us: LatSummary,
    pub stalls: u64,
    pub stall_ms: f64,
    pub sync: SyncLine,
}

fn round(v: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (v * m).round() / m
}

fn sync_line(h: &hdrhistogram::Histogram<u64>) -> SyncLine {
    SyncLine {
        ops: h.len(),
        max_ms: round(h.max() as f64 / 1000.0, 3),
    }
}

pub fn interval_line<'a>(
    s: &Snapshot,
    t: &TargetInterval,
    meta: &'a TargetMeta,
) -> IntervalLine<'a> {
    let r = t.rates(s.interval_s);
    IntervalLine {
        ty: "interval",
        t_s: round(s.t_s, 3),
        target: &meta.path,
        fs: &meta.fs,
        mode: t.mode.as_str(),
        threads: t.threads,
        ops: t.ops,
        ops_per_s: round(r.ops_per_s, 1),
        mib_per_s: round(r.mib_per_s, 3),
        lat_us: LatSummary::of(&t.hist),
        stalls: t.stalls,
        sync: sync_line(&t.sync_hist),
    }
}

pub fn stall_line<'a>(st: &StallEvent, meta: &'a TargetMeta, mode: &'static str) -> StallLine<'a> {
    StallLine {
        ty: "stall",
        t_s: round(st.start_ns as f64 / 1e9, 3),
        duration_ms: round(st.dur_ns as f64 / 1e6, 3),
        thread: st.thread,
        op: st.op,
        target: &meta.path,
        mode,
    }
}

pub fn summary_line<'a>(s: &Summary, meta: &'a [TargetMeta]) -> SummaryLine<'a> {
    let all = crate::snapshot::rates(s.ops(), s.bytes(), s.duration_s);
    SummaryLine {
        ty: "summary",
        duration_s: round(s.duration_s, 3),
        ops: s.ops(),
        mib_per_s: round(all.mib_per_s, 3),
        ops_per_s: round(all.ops_per_s, 1),
        lat_us: LatSummary::of(&s.merged()),
        stalls: s.stalls(),
        stall_ms: round(s.stall_ns() as f64 / 1e6, 3),
        targets: s
            .targets
            .iter()
            .map(|t| {
                let r = crate::snapshot::rates(t.ops, t.bytes, s.duration_s);
                TargetSummaryLine {
                    target: meta.get(t.target).map(|m| m.path.as_str()).unwrap_or("?"),
                    ops: t.ops,
                    mib_per_s: round(r.mib_per_s, 3),
                    ops_per_s: round(r.ops_per_s, 1),
                    lat_us: LatSummary::of(&t.hist),
                    stalls: t.stalls,
                    stall_ms: round(t.stall_ns as f64 / 1e6, 3),
                    sync: sync_line(&t.sync_hist),
                }
            })
            .collect(),
    }
}

/// Prints to any writer (stdout in the CLI, a buffer in tests).
pub struct Printer<W: Write> {
    out: W,
    format: Format,
    meta: Vec<TargetMeta>,
    rows: u64,
}

impl<W: Write> Printer<W> {
    pub fn new(out: W, format: Format) -> Self {
        Printer {
            out,
            format,
            meta: Vec::new(),
            rows: 0,
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
        if p.len() > 18 {
            format!("…{}", &p[p.len() - 17..])
        } else {
            p.to_string()
        }
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

const HEADER: &str = "   time  target               ops/s     MiB/s    mean     p50     p95     p99   p99.9       max  stalls";

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl<W: Write> Sink for Printer<W> {
    fn begin(&mut self, targets: &[TargetMeta]) -> io::Result<()> {
        self.meta = targets.to_vec();
        if self.format == Format::Table {
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
                Format::Table => {
                    if self.rows > 0 && self.rows % 40 == 0 {
                        writeln!(self.out, "{HEADER}")?;
                    }
                    self.rows += 1;
                    let r = t.rates(s.interval_s);
                    let l = LatSummary::of(&t.hist);
                    writeln!(
                        self.out,
                        "{:7.1}  {:<18} {:>8.0} {:>9.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>9.2} {:>7}",
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
                        t.stalls
                    )?;
                }
            }
        }
        for st in &s.stalls {
            let mode = s
                .targets
                .get(st.target)
                .map(|t| t.mode.as_str())
                .unwrap_or("?");
            match self.format {
                Format::Jsonl => {
                    let meta = self.meta[st.target].clone();
                    self.json(&stall_line(st, &meta, mode))?;
                }
                Format::Table => {
                    let l = self.label(st.target);
                    writeln!(
                        self.out,
                        "{:7.1}  {l:<18} ~ stall {:.0} ms: thread {} in {} ({mode})",
                        st.start_ns as f64 / 1e9,
                        st.dur_ns as f64 / 1e6,
                        st.thread,
                        st.op.as_str()
                    )?;
                }
            }
        }
        self.out.flush()
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        let meta = self.meta.clone();
        let line = summary_line(s, &meta);
        match self.format {
            Format::Jsonl => self.json(&line)?,
            Format::Table => {
                writeln!(self.out)?;
                writeln!(
                    self.out,
                    "summary: {:.1} s, {} ops, {:.0} ops/s, {:.2} MiB/s, {} stalls ({:.0} ms stalled)",
                    line.duration_s, line.ops, line.ops_per_s, line.mib_per_s, line.stalls, line.stall_ms
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
