//! The headless printer: one line per target per interval, stall and event
//! lines, and the summary, as an aligned table or as JSON Lines. The JSONL
//! field names are a public schema: add fields, never rename them.

use crate::config::Format;
use crate::kernel::attribute::{Cause, Confidence, Evidence};
use crate::kernel::proc::DevInterval;
use crate::measure::OpKind;
use crate::snapshot::{
    BdpStats, CauseTotal, LatSummary, ObservedInterval, ObservedStall, ObservedSummary, RunEvent,
    Snapshot, Stall, Summary, TargetInterval, TargetMeta,
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
    #[serde(flatten)]
    pub system: SystemLine,
    pub dev: Option<&'a DevInterval>,
    pub minflt: u64,
    pub majflt: u64,
    /// null when kernel tracing is unavailable (unknown, not zero).
    pub bdp: Option<BdpStats>,
    pub wb_waits: Option<u64>,
    pub wb_starts: Option<&'a BTreeMap<String, u64>>,
    /// Present (true) once a writer of this target stopped on an error.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

/// The system-wide kernel figures every interval and observed line carries.
#[derive(Serialize)]
pub struct SystemLine {
    pub dirty_kib: Option<u64>,
    pub writeback_kib: Option<u64>,
    pub dirty_thresh_kib: Option<u64>,
    pub dirty_bg_thresh_kib: Option<u64>,
    pub psi_io_some_pct: Option<f64>,
    pub psi_io_full_pct: Option<f64>,
}

pub fn system_line(k: Option<&crate::kernel::proc::KernelInterval>) -> SystemLine {
    SystemLine {
        dirty_kib: k.and_then(|k| k.dirty_kib),
        writeback_kib: k.and_then(|k| k.writeback_kib),
        dirty_thresh_kib: k.and_then(|k| k.dirty_thresh_kib),
        dirty_bg_thresh_kib: k.and_then(|k| k.dirty_bg_thresh_kib),
        psi_io_some_pct: k.and_then(|k| k.psi_io_some_pct).map(|v| round(v, 2)),
        psi_io_full_pct: k.and_then(|k| k.psi_io_full_pct).map(|v| round(v, 2)),
    }
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

/// Observe mode: one observed process over one interval, with the system
/// figures (there may be no target line to carry them).
#[derive(Serialize)]
pub struct ObservedLine<'a> {
    #[serde(rename = "type")]
    pub ty: &'static str,
    pub t_s: f64,
    /// Every field of the interval (write_bytes, bdp and wb_waits are null
    /// when unknown: another user's process, no tracing).
    #[serde(flatten)]
    pub observed: &'a ObservedInterval,
    pub write_mib_per_s: Option<f64>,
    #[serde(flatten)]
    pub system: SystemLine,
}

pub fn observed_line<'a>(s: &Snapshot, o: &'a ObservedInterval) -> ObservedLine<'a> {
    ObservedLine {
        ty: "observed",
        t_s: round(s.t_s, 3),
        observed: o,
        write_mib_per_s: o
            .write_bytes
            .map(|b| round(crate::snapshot::rates(0, b, s.interval_s).mib_per_s, 3)),
        system: system_line(s.kernel.as_ref()),
    }
}

/// A stall of an observed process's thread: the stall line's fields, with
/// the process and thread instead of a target.
#[derive(Serialize)]
pub struct ObservedStallLine<'a> {
    #[serde(rename = "type")]
    pub ty: &'static str,
    pub t_s: f64,
    pub duration_ms: f64,
    pub pid: u32,
    pub comm: &'a str,
    pub tid: u32,
    pub thread_comm: &'a str,
    pub op: OpKind,
    pub cause: Cause,
    pub confidence: Confidence,
    pub evidence: &'a Evidence,
}

pub fn observed_stall_line(o: &ObservedStall) -> ObservedStallLine<'_> {
    let st = &o.stall;
    ObservedStallLine {
        ty: "stall",
        t_s: round(st.ev.start_ns as f64 / 1e9, 3),
        duration_ms: round(st.ev.dur_ns as f64 / 1e6, 3),
        pid: o.pid,
        comm: &o.comm,
        tid: st.ev.thread,
        thread_comm: &o.thread_comm,
        op: st.ev.op,
        cause: st.why.cause,
        confidence: st.why.confidence,
        evidence: &st.why.evidence,
    }
}

#[derive(Serialize)]
pub struct ObservedSummaryLine<'a> {
    pub pid: u32,
    pub comm: &'a str,
    pub exited: bool,
    pub d_threads_max: u32,
    pub minflt: u64,
    pub majflt: u64,
    pub write_bytes: Option<u64>,
    pub stalls: u64,
    pub stall_ms: f64,
    pub by_cause: BTreeMap<Cause, CauseTotal>,
}

fn observed_summary_line(o: &ObservedSummary) -> ObservedSummaryLine<'_> {
    ObservedSummaryLine {
        pid: o.pid,
        comm: &o.comm,
        exited: o.exited,
        d_threads_max: o.d_threads_max,
        minflt: o.minflt,
        majflt: o.majflt,
        write_bytes: o.write_bytes,
        stalls: o.stalls,
        stall_ms: round(o.stall_ns as f64 / 1e6, 3),
        by_cause: rounded(o.by_cause.clone()),
    }
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
    /// Observe mode only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub observed: Vec<ObservedSummaryLine<'a>>,
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
        system: system_line(k),
        dev: k
            .and_then(|k| k.devs.get(t.target))
            .and_then(|d| d.as_ref()),
        minflt: t.minflt,
        majflt: t.majflt,
        bdp: t.bdp,
        wb_waits: t.wb_waits,
        wb_starts: s.wb_starts.as_ref(),
        failed: t.failed,
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

pub fn summary_line<'a>(s: &'a Summary, meta: &'a [TargetMeta]) -> SummaryLine<'a> {
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
        observed: s.observed.iter().map(observed_summary_line).collect(),
    }
}

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
        self.observed(s)?;
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
            Format::Table if line.targets.is_empty() => {
                writeln!(self.out)?;
                writeln!(self.out, "summary: {:.1} s observed", line.duration_s)?;
                self.observed_summary(&line)?;
            }
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

impl<W: Write> Printer<W> {
    fn observed_summary(&mut self, line: &SummaryLine) -> io::Result<()> {
        for o in &line.observed {
            let causes: Vec<String> = o
                .by_cause
                .iter()
                .map(|(c, t)| format!("{} {} ({:.0} ms)", c.as_str(), t.count, t.ms))
                .collect();
            writeln!(
                self.out,
                "observed {} (pid {}){}: {} stalls ({:.0} ms){}{}, most threads in D at once {}, {} major faults, {}",
                o.comm,
                o.pid,
                if o.exited { ", exited" } else { "" },
                o.stalls,
                o.stall_ms,
                if causes.is_empty() { "" } else { ": " },
                causes.join(", "),
                o.d_threads_max,
                o.majflt,
                o.write_bytes.map_or("write_bytes unreadable".to_string(), |b| {
                    format!("{:.1} MiB written", crate::units::mib(b))
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
                    let cause = crate::snapshot::top_cause(&cause_totals(
                        s.observed_stalls
                            .iter()
                            .filter(|x| x.pid == o.pid)
                            .map(|x| &x.stall),
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
                        opt(l.system.dirty_kib.map(|v| format!("{:.0}", v as f64 / 1024.0))),
                        opt(l.system.writeback_kib.map(|v| format!("{:.0}", v as f64 / 1024.0))),
                        cause.map_or("", |c| c.as_str())
                    )?;
                }
            }
            if !o.alive {
                let msg = format!("observed process {} ({}) exited", o.pid, o.comm);
                match self.format {
                    Format::Jsonl => self.json(&serde_json::json!({"type": "event",
                        "t_s": round(s.t_s, 3), "kind": "process_exited", "pid": o.pid,
                        "comm": o.comm, "message": msg}))?,
                    Format::Table => writeln!(self.out, "{:7.1}  ! {msg}", s.t_s)?,
                }
            }
        }
        for o in &s.observed_stalls {
            match self.format {
                Format::Jsonl => self.json(&observed_stall_line(o))?,
                Format::Table => {
                    let e = &o.stall.ev;
                    writeln!(
                        self.out,
                        "{:7.1}  {:<18} ~ stall {:.0} ms: thread {} ({}) blocked (D): {} [{}]{}",
                        e.start_ns as f64 / 1e9,
                        format!("{} {}", o.pid, o.comm)
                            .chars()
                            .take(18)
                            .collect::<String>(),
                        e.dur_ns as f64 / 1e6,
                        e.thread,
                        o.thread_comm,
                        o.stall.why.cause.as_str(),
                        match o.stall.why.confidence {
                            Confidence::High => "high",
                            Confidence::Low => "low",
                        },
                        evidence_text(&o.stall.why.evidence)
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// Stall count and time by cause.
pub fn cause_totals<'a>(stalls: impl Iterator<Item = &'a Stall>) -> BTreeMap<Cause, CauseTotal> {
    let mut m: BTreeMap<Cause, CauseTotal> = BTreeMap::new();
    for s in stalls {
        let e = m.entry(s.why.cause).or_default();
        e.count += 1;
        e.ms += s.ev.dur_ns as f64 / 1e6;
    }
    m
}

fn rounded(mut m: BTreeMap<Cause, CauseTotal>) -> BTreeMap<Cause, CauseTotal> {
    for v in m.values_mut() {
        v.ms = round(v.ms, 3);
    }
    m
}

/// The cause with the most stall time among one target's stalls.
pub fn top_interval_cause(stalls: &[Stall], target: usize) -> Option<Cause> {
    crate::snapshot::top_cause(&cause_totals(
        stalls.iter().filter(|s| s.ev.target == target),
    ))
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
