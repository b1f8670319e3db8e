//! The JSONL schema: one builder per line type (interval, stall, event,
//! observed, summary), shared by the printer and the recorder so a
//! recording's lines are exactly `run --format jsonl`'s. Field names are a
//! public schema: add fields, never rename them.

use crate::model::cause::{Cause, Confidence, Evidence, Hop, Share};
use crate::model::kernel::DevInterval;
use crate::model::ops::OpKind;
use crate::model::snapshot::{
    cause_totals, BdpStats, CauseTotal, LatSummary, ObservedInterval, ObservedSummary, Snapshot,
    Summary, TargetInterval, TargetMeta,
};
use crate::model::stall::{Stall, Who};
use serde::Serialize;
use std::collections::BTreeMap;

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

pub fn system_line(k: Option<&crate::model::kernel::KernelInterval>) -> SystemLine {
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

/// A finished stall, ours or an observed process's: the same line with
/// the thread's identity in between (a writer: `thread` and, after `op`,
/// `target` and `mode`; an observed thread: `pid`, `comm`, `tid`,
/// `thread_comm`).
#[derive(Serialize)]
pub struct StallLine<'a> {
    #[serde(rename = "type")]
    pub ty: &'static str,
    pub t_s: f64,
    pub duration_ms: f64,
    /// How its start and end were found: `syscall` (an observed call's
    /// entry and exit), `gap` (blocks less than 1 ms apart), `sleep` (a
    /// sleep a wake-up chain explains), `op` (our writer's op).
    pub bounds: &'static str,
    /// Time blocked within it, where the scheduler's events timed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked_ms: Option<f64>,
    /// The system call it was (`bounds: syscall`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub syscall: Option<&'a str>,
    /// The file the call was on, from its fd.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<&'a str>,
    /// Bytes the call asked to write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(flatten)]
    pub who: WhoLine<'a>,
    pub op: OpKind,
    #[serde(flatten)]
    pub place: Option<PlaceLine<'a>>,
    pub cause: Cause,
    pub confidence: Confidence,
    pub evidence: &'a Evidence,
    /// What the time went to, part by part (adds up to `duration_ms`).
    pub shares: Vec<Share>,
    /// The wake-up chain of a thread that waited for another one: first
    /// hop first, the root (a kernel wait) last.
    #[serde(skip_serializing_if = "<[Hop]>::is_empty")]
    pub via: &'a [Hop],
}

#[derive(Serialize)]
#[serde(untagged)]
pub enum WhoLine<'a> {
    Writer {
        thread: u32,
    },
    Process {
        pid: u32,
        comm: &'a str,
        tid: u32,
        thread_comm: &'a str,
    },
}

/// Where a writer's stall happened.
#[derive(Serialize)]
pub struct PlaceLine<'a> {
    pub target: &'a str,
    pub mode: &'static str,
}

#[derive(Serialize)]
pub struct EventLine<'a> {
    #[serde(rename = "type")]
    pub ty: &'static str,
    pub t_s: f64,
    pub target: &'a str,
    pub kind: crate::model::msg::EventKind,
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
        write_mib_per_s: o.write_bytes.map(|b| {
            round(
                crate::model::snapshot::rates(0, b, s.interval_s).mib_per_s,
                3,
            )
        }),
        system: system_line(s.kernel.as_ref()),
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
    /// Its threads' stall time added up (thread time).
    pub stall_ms: f64,
    /// Wall time with at least one thread stalled (≤ the run).
    pub stalled_ms: f64,
    /// Blocked time by cause, waits under the threshold included.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub blocked_ms_by_cause: BTreeMap<Cause, f64>,
    /// Its threads' sleeps waiting for work held up upstream.
    pub starved_ms: f64,
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
        stalled_ms: round(o.stalled_ns as f64 / 1e6, 3),
        blocked_ms_by_cause: o
            .blocked_by
            .iter()
            .map(|(c, ns)| (*c, round(*ns as f64 / 1e6, 3)))
            .collect(),
        starved_ms: round(o.starved_ns as f64 / 1e6, 3),
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
    /// Every stall, ours and observed processes' (builds before
    /// 2026-12-06 counted ours only here).
    pub stalls: u64,
    pub stall_ms: f64,
    /// Every stall by cause, ours and observed.
    pub by_cause: BTreeMap<Cause, CauseTotal>,
    /// Our writers' stalls, and observed processes' threads' stalls: the
    /// two parts of `stalls`.
    pub writer_stalls: u64,
    pub writer_stall_ms: f64,
    pub observed_stalls: u64,
    pub observed_stall_ms: f64,
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

pub fn round(v: f64, digits: i32) -> f64 {
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

/// The line of a finished stall; `place` is a writer's target and mode.
pub fn stall_line<'a>(
    st: &'a Stall,
    place: Option<(&'a TargetMeta, &'static str)>,
) -> StallLine<'a> {
    let e = &st.ev;
    let who = match &e.who {
        Who::Writer { thread, .. } => WhoLine::Writer { thread: *thread },
        Who::Process {
            pid,
            comm,
            tid,
            thread_comm,
        } => WhoLine::Process {
            pid: *pid,
            comm,
            tid: *tid,
            thread_comm,
        },
    };
    StallLine {
        ty: "stall",
        t_s: round(e.start_ns as f64 / 1e9, 3),
        duration_ms: round(e.dur() as f64 / 1e6, 3),
        bounds: crate::model::stall::bounds_of(e),
        blocked_ms: e.blocked_ns.map(|b| round(b as f64 / 1e6, 3)),
        syscall: e.call.as_ref().map(|c| c.name.as_str()),
        file: e.call.as_ref().and_then(|c| c.file.as_deref()),
        bytes: e.call.as_ref().and_then(|c| c.bytes),
        who,
        op: e.op,
        place: place.map(|(meta, mode)| PlaceLine {
            target: &meta.path,
            mode,
        }),
        cause: st.why.cause,
        confidence: st.why.confidence,
        shares: recorded_shares(st),
        via: &st.why.via,
        evidence: &st.why.evidence,
    }
}

/// A stall's shares as its line holds them: the headline's alone when
/// the fold split nothing, each in ms to 3 decimals (µs). A replay sees
/// these, so a test comparing it with the live run compares these too.
pub fn recorded_shares(st: &Stall) -> Vec<Share> {
    st.why
        .shares_of(st.ev.dur() as f64 / 1e6)
        .into_iter()
        .map(|s| Share {
            ms: round(s.ms, 3),
            ..s
        })
        .collect()
}

pub fn summary_line<'a>(s: &'a Summary, meta: &'a [TargetMeta]) -> SummaryLine<'a> {
    let all = crate::model::snapshot::rates(s.ops(), s.bytes(), s.duration_s);
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
        writer_stalls: s.writer_stalls(),
        writer_stall_ms: round(s.writer_stall_ns() as f64 / 1e6, 3),
        observed_stalls: s.observed_stalls(),
        observed_stall_ms: round(s.observed_stall_ns() as f64 / 1e6, 3),
        targets: s
            .targets
            .iter()
            .map(|t| {
                let r = crate::model::snapshot::rates(t.ops, t.bytes, s.duration_s);
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

fn rounded(mut m: BTreeMap<Cause, CauseTotal>) -> BTreeMap<Cause, CauseTotal> {
    for v in m.values_mut() {
        v.ms = round(v.ms, 3);
    }
    m
}

/// Stalls by cause in words, `time` writing a time given in ms:
/// `writeback_wait 20 (173.42 s), sync 1 (2.00 s); within them:
/// dirty_throttle 0.34 s`. A cause is counted by the stalls it headlines
/// and timed by its shares of every stall (so the times add up to the time
/// stalled); a cause that only had a share of other stalls is named with
/// its time "within them", never as `dirty_throttle 0 (0.34 s)`, which
/// reads as a contradiction.
pub fn causes_text(m: &BTreeMap<Cause, CauseTotal>, time: impl Fn(f64) -> String) -> String {
    let counted: Vec<String> = m
        .iter()
        .filter(|(_, t)| t.count > 0)
        .map(|(c, t)| format!("{} {} ({})", c.as_str(), t.count, time(t.ms)))
        .collect();
    let within: Vec<String> = m
        .iter()
        .filter(|(_, t)| t.count == 0 && t.ms > 0.0)
        .map(|(c, t)| format!("{} {}", c.as_str(), time(t.ms)))
        .collect();
    match (counted.is_empty(), within.is_empty()) {
        (_, true) => counted.join(", "),
        (true, false) => format!("within other stalls: {}", within.join(", ")),
        (false, false) => format!("{}; within them: {}", counted.join(", "), within.join(", ")),
    }
}

/// The cause with the most stall time among one target's stalls.
pub fn top_interval_cause(stalls: &[Stall], target: usize) -> Option<Cause> {
    crate::model::snapshot::top_cause(&cause_totals(
        stalls.iter().filter(|s| s.ev.who.target() == Some(target)),
    ))
}

/// A short human rendering of the evidence, for the table format.
pub fn evidence_text(e: &Evidence) -> String {
    let mut parts = Vec::new();
    // "in fsync: journal commit" first: where the thread was and for what.
    match (&e.syscall, &e.wait) {
        (Some(c), Some(w)) => parts.push(format!("in {c}: {w}")),
        (Some(c), None) => parts.push(format!("in {c}")),
        (None, Some(w)) => parts.push(w.clone()),
        (None, None) => {}
    }
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
    if let Some(op) = e.sync_op.as_ref().filter(|_| e.syscall.is_none()) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::TargetSummary;

    fn total(count: u64, ms: f64) -> CauseTotal {
        CauseTotal { count, ms }
    }

    /// Observe mode: the top-level count is every stall, with its two
    /// parts named, so `"stalls":0` never sits beside 1518 per process.
    #[test]
    fn the_summary_counts_observed_stalls_at_the_top_and_names_the_parts() {
        let target = TargetSummary {
            target: 0,
            ops: 10,
            bytes: 10,
            hist: crate::model::ops::new_histogram(),
            sync_hist: crate::model::ops::new_histogram(),
            stalls: 2,
            stall_ns: 300_000_000,
            by_cause: BTreeMap::from([(Cause::Sync, total(2, 300.0))]),
        };
        let observed = ObservedSummary {
            pid: 7,
            stalls: 1518,
            stall_ns: 9_000_000_000,
            by_cause: BTreeMap::from([(Cause::Sync, total(1518, 9000.0))]),
            ..ObservedSummary::default()
        };
        let s = Summary {
            duration_s: 10.0,
            targets: vec![target.clone()],
            observed: vec![observed.clone()],
        };
        let meta = [TargetMeta {
            path: "/a".into(),
            fs: "ext4".into(),
            device: "?".into(),
            mount_options: String::new(),
        }];
        let v = serde_json::to_value(summary_line(&s, &meta)).unwrap();
        let (w, o) = (target.stalls, observed.stalls);
        assert_eq!(v["stalls"], w + o);
        assert_eq!(
            (v["writer_stalls"].clone(), v["observed_stalls"].clone()),
            (w.into(), o.into())
        );
        assert_eq!(v["by_cause"]["sync"]["count"], w + o);
        let ms = (target.stall_ns + observed.stall_ns) as f64 / 1e6;
        assert_eq!(v["stall_ms"], ms);
        // Observing only: the total is the observed one.
        let only = Summary {
            targets: vec![],
            ..s
        };
        assert_eq!(
            serde_json::to_value(summary_line(&only, &[])).unwrap()["stalls"],
            o
        );
    }

    #[test]
    fn a_cause_with_time_but_no_stall_of_its_own_is_time_within_them() {
        let ms = |v: f64| format!("{v:.0} ms");
        let m = BTreeMap::from([
            (Cause::Sync, total(3, 900.0)),
            (Cause::Unknown, total(0, 147.0)),
        ]);
        assert_eq!(
            causes_text(&m, ms),
            "sync 3 (900 ms); within them: unknown 147 ms"
        );
        let only = BTreeMap::from([(Cause::Unknown, total(0, 147.0))]);
        assert_eq!(
            causes_text(&only, ms),
            "within other stalls: unknown 147 ms"
        );
        assert_eq!(causes_text(&BTreeMap::new(), ms), "");
    }
}
