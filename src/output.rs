//! The headless printer: one line per target per interval, stall and event
//! lines, and the summary, as an aligned table or as JSON Lines. The JSONL
//! field names are a public schema: add fields, never rename them.

use crate::config::Format;
use crate::kernel::attribute::{Cause, Confidence, Evidence};
use crate::kernel::proc::DevInterval;
use crate::measure::OpKind;
use crate::snapshot::{
    BdpStats, CauseTotal, LatSummary, RunEvent, Snapshot, Stall, Summary, TargetInterval,
    TargetMeta,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// A consumer of the run's snapshots (printer, UI, recorder).
pub trait Sink {
    fn begin(&mut self, targets: &[TargetMeta]) -> io::Result<()>;
    fn snapshot(&mut self, s: &Snapshot) -> io::Result<()>;
    fn summary(&mut self, s: &Summary) -> io::Result<()>;
    /// A runtime action (target switch, mode change…); only a recording keeps it.
    fn marker(&mut self, _m: &crate::recording::Marker) -> io::Result<()> {
        Ok(())
    }
}

/// Hands everything to two sinks (the printer and the recorder).
pub struct Tee<'a>(pub &'a mut dyn Sink, pub &'a mut dyn Sink);

impl Sink for Tee<'_> {
    fn begin(&mut self, targets: &[TargetMeta]) -> io::Result<()> {
        self.0.begin(targets)?;
        self.1.begin(targets)
    }
    fn snapshot(&mut self, s: &Snapshot) -> io::Result<()> {
        self.0.snapshot(s)?;
        self.1.snapshot(s)
    }
    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        self.0.summary(s)?;
        self.1.summary(s)
    }
    fn marker(&mut self, m: &crate::recording::Marker) -> io::Result<()> {
        self.0.marker(m)?;
        self.1.marker(m)
    }
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
    pub dirty_kib: Option<u64>,
    pub writeback_kib: Option<u64>,
    pub dirty_thresh_kib: Option<u64>,
    pub dirty_bg_thresh_kib: Option<u64>,
    pub psi_io_some_pct: Option<f64>,
    pub psi_io_full_pct: Option<f64>,
    pub dev: Option<&'a DevInterval>,
    pub minflt: u64,
    pub majflt: u64,
    /// null when kernel tracing is unavailable (unknown, not zero).
    pub bdp: Option<BdpStats>,
    pub wb_waits: Option<u64>,
    pub wb_starts: Option<&'a BTreeMap<String, u64>>,
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
    pub cause: Cause,
    pub confidence: Confidence,
    pub evidence: &'a Evidence,
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
    pub by_cause: BTreeMap<Cause, CauseTotal>,
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
    pub by_cause: BTreeMap<Cause, CauseTotal>,
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
    s: &'a Snapshot,
    t: &TargetInterval,
    meta: &'a TargetMeta,
) -> IntervalLine<'a> {
    let r = t.rates(s.interval_s);
    let k = s.kernel.as_ref();
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
        dirty_kib: k.and_then(|k| k.dirty_kib),
        writeback_kib: k.and_then(|k| k.writeback_kib),
        dirty_thresh_kib: k.and_then(|k| k.dirty_thresh_kib),
        dirty_bg_thresh_kib: k.and_then(|k| k.dirty_bg_thresh_kib),
        psi_io_some_pct: k.and_then(|k| k.psi_io_some_pct).map(|v| round(v, 2)),
        psi_io_full_pct: k.and_then(|k| k.psi_io_full_pct).map(|v| round(v, 2)),
        dev: k
            .and_then(|k| k.devs.get(t.target))
            .and_then(|d| d.as_ref()),
        minflt: t.minflt,
        majflt: t.majflt,
        bdp: t.bdp,
        wb_waits: t.wb_waits,
        wb_starts: s.wb_starts.as_ref(),
    }
}

pub fn stall_line<'a>(st: &'a Stall, meta: &'a TargetMeta, mode: &'static str) -> StallLine<'a> {
    let e = &st.ev;
    StallLine {
        ty: "stall",
        t_s: round(e.start_ns as f64 / 1e9, 3),
        duration_ms: round(e.dur_ns as f64 / 1e6, 3),
        thread: e.thread,
        op: e.op,
        target: &meta.path,
        mode,
        cause: st.why.cause,
        confidence: st.why.confidence,
        evidence: &st.why.evidence,
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
        by_cause: rounded(s.by_cause()),
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
                    by_cause: rounded(t.by_cause.clone()),
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

const HEADER: &str = "   time  target               ops/s     MiB/s    mean     p50     p95     p99   p99.9       max stalls  dirty     wb  pause  cause";

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
                    let k = s.kernel.as_ref();
                    let mib_of = |kib: Option<u64>| {
                        kib.map_or("     -".to_string(), |v| {
                            format!("{:>6.0}", v as f64 / 1024.0)
                        })
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
                    )?;
                }
            }
        }
        for st in &s.stalls {
            let mode = s
                .targets
                .get(st.ev.target)
                .map(|t| t.mode.as_str())
                .unwrap_or("?");
            match self.format {
                Format::Jsonl => {
                    let meta = self.meta[st.ev.target].clone();
                    self.json(&stall_line(st, &meta, mode))?;
                }
                Format::Table => {
                    let l = self.label(st.ev.target);
                    let e = &st.ev;
                    writeln!(
                        self.out,
                        "{:7.1}  {l:<18} ~ stall {:.0} ms: thread {} in {} ({mode}): {} [{}]{}",
                        e.start_ns as f64 / 1e9,
                        e.dur_ns as f64 / 1e6,
                        e.thread,
                        e.op.as_str(),
                        st.why.cause.as_str(),
                        match st.why.confidence {
                            Confidence::High => "high",
                            Confidence::Low => "low",
                        },
                        evidence_text(&st.why.evidence)
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
                if !line.by_cause.is_empty() {
                    let parts: Vec<String> = line
                        .by_cause
                        .iter()
                        .map(|(c, t)| format!("{} {} ({:.0} ms)", c.as_str(), t.count, t.ms))
                        .collect();
                    writeln!(self.out, "stalls by cause: {}", parts.join(", "))?;
                }
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

fn rounded(mut m: BTreeMap<Cause, CauseTotal>) -> BTreeMap<Cause, CauseTotal> {
    for v in m.values_mut() {
        v.ms = round(v.ms, 3);
    }
    m
}

/// The cause with the most stall time among one target's stalls.
pub fn top_interval_cause(stalls: &[Stall], target: usize) -> Option<Cause> {
    let mut m: BTreeMap<Cause, CauseTotal> = BTreeMap::new();
    for s in stalls.iter().filter(|s| s.ev.target == target) {
        let e = m.entry(s.why.cause).or_default();
        e.count += 1;
        e.ms += s.ev.dur_ns as f64 / 1e6;
    }
    crate::snapshot::top_cause(&m)
}

/// A short human rendering of the evidence, for the table format.
pub fn evidence_text(e: &Evidence) -> String {
    let mut parts = Vec::new();
    if let (Some(n), Some(p)) = (e.throttle_events, e.pause_ms) {
        parts.push(format!("{n} throttle sleeps, {p} ms paused"));
    }
    if let (Some(d), Some(l)) = (e.dirty_pages, e.limit_pages) {
        parts.push(format!("dirty {d} / limit {l} pages"));
    }
    if let Some(w) = e.wb_waits {
        parts.push(format!("{w} writeback waits"));
    }
    if let Some(b) = &e.bdi {
        parts.push(format!("bdi {b}"));
    }
    if let Some(op) = &e.sync_op {
        parts.push(op.clone());
    }
    if let (Some(d), Some(t)) = (e.dirty_kib, e.throttle_start_kib) {
        parts.push(format!(
            "dirty {} MiB >= throttle start {} MiB",
            d / 1024,
            t / 1024
        ));
    }
    if let Some(u) = e.util_pct {
        parts.push(format!("device {u:.0}% busy"));
    }
    if let Some(a) = e.w_await_ms {
        parts.push(format!("w_await {a:.1} ms"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" {}", parts.join(", "))
    }
}
