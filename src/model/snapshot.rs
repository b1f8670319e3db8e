//! What the aggregator emits once per interval, and the one place where raw
//! counts and histograms become rates and percentiles. The headless printer,
//! the UI and replay all derive their figures through these functions.

use crate::config::Mode;
use crate::model::cause::Cause;
use crate::model::kernel::KernelInterval;
use crate::model::msg::EventKind;
use crate::model::stall::{Blocked, Stall};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Static facts about a target, fixed at start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetMeta {
    /// The directory the person named (or the default one).
    pub path: String,
    pub fs: String,
    pub device: String,
    pub mount_options: String,
}

/// One target's raw measurements over one interval.
#[derive(Clone, Debug)]
pub struct TargetInterval {
    pub target: usize,
    /// Whether writers ran on this target during the interval (the
    /// dashboard moves them between targets; `run` keeps all active).
    pub active: bool,
    pub mode: Mode,
    pub threads: u32,
    pub ops: u64,
    pub bytes: u64,
    /// Write-op latency, µs.
    pub hist: Histogram<u64>,
    /// Sync-op latency, µs.
    pub sync_hist: Histogram<u64>,
    /// Stall events that finished in this interval.
    pub stalls: u32,
    /// Page faults of the writer threads (mmap: the page_mkwrite faults).
    pub minflt: u64,
    pub majflt: u64,
    /// balance_dirty_pages seen on our writer threads; None without tracing.
    pub bdp: Option<BdpStats>,
    /// Waits on pages under writeback by our writers; None without tracing.
    pub wb_waits: Option<u64>,
    /// A writer thread of this target stopped on an error (the target
    /// vanished, went read-only…) since its writers last started.
    pub failed: bool,
}

/// Dirty-page throttling of our threads over an interval (from tracefs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BdpStats {
    pub events: u64,
    pub pause_ms: u64,
    pub max_pause_ms: u64,
}

impl BdpStats {
    /// One balance_dirty_pages event with its pause (a negative pause, a
    /// rate limit without sleep, counts as 0 ms).
    pub fn add_pause(&mut self, pause_ms: i64) {
        let p = pause_ms.max(0) as u64;
        self.events += 1;
        self.pause_ms += p;
        self.max_pause_ms = self.max_pause_ms.max(p);
    }
    /// Adds another span's throttling.
    pub fn add(&mut self, o: &BdpStats) {
        self.events += o.events;
        self.pause_ms += o.pause_ms;
        self.max_pause_ms = self.max_pause_ms.max(o.max_pause_ms);
    }
}

/// Something that happened to the run (disk full, a thread failed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunEvent {
    pub target: usize,
    pub t_ns: u64,
    pub kind: EventKind,
    pub message: String,
}

/// One observed process over one interval (observe mode).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ObservedInterval {
    pub pid: u32,
    pub comm: String,
    /// False from the interval in which it was found gone.
    pub alive: bool,
    /// True in the interval in which it was found (forked or started
    /// after the run began).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub joined: bool,
    /// /proc samples taken in the interval.
    pub samples: u32,
    pub threads: u32,
    /// Threads in uninterruptible sleep (D): most in one sample, and the
    /// mean over the samples.
    pub d_threads_max: u32,
    pub d_threads_mean: f64,
    pub minflt: u64,
    pub majflt: u64,
    /// Bytes the process sent (or dirtied) for storage; None when
    /// /proc/PID/io is not readable (another user's process, not root).
    pub write_bytes: Option<u64>,
    /// Dirty throttling of its threads; None without tracing.
    pub bdp: Option<BdpStats>,
    pub wb_waits: Option<u64>,
    /// Stalls of its threads that ended in this interval.
    pub stalls: u32,
    /// How its blocks were timed.
    #[serde(default)]
    pub timing: crate::model::observed::BlockTiming,
    /// Time its threads spent blocked in D, summed over them, from the
    /// scheduler (a block counts in the interval it ends); None when
    /// sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_ms: Option<f64>,
    /// Its threads' blocked time by cause, waits under the threshold
    /// included (stalls by their shares; a chained sleep counts whole),
    /// ms; empty when blocks are sampled.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub blocked_by_cause: BTreeMap<Cause, f64>,
    /// Its threads' long sleeps waiting for work that was held up
    /// upstream (starved, not stalled: never in stall time), ms; None
    /// without wake-up chains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starved_ms: Option<f64>,
    /// Its write-path calls (`CallPattern`); None unless the syscall
    /// events were traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<crate::model::pattern::CallPattern>,
}

/// Whole-run figures of one observed process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedSummary {
    pub pid: u32,
    pub comm: String,
    pub exited: bool,
    pub d_threads_max: u32,
    pub minflt: u64,
    pub majflt: u64,
    pub write_bytes: Option<u64>,
    pub stalls: u64,
    /// Its threads' stall time added up (thread-seconds: more than the
    /// wall time when several threads stall at once).
    pub stall_ns: u64,
    /// Wall time in which at least one of its threads was stalled (the
    /// union of their stalls): never more than the run.
    pub stalled_ns: u64,
    pub by_cause: BTreeMap<Cause, CauseTotal>,
    /// Blocked time by cause, waits under the threshold included, ns.
    pub blocked_by: BTreeMap<Cause, u64>,
    /// Its threads' starved time (see `ObservedInterval::starved_ms`), ns.
    pub starved_ns: u64,
}

/// The union of time spans, kept as disjoint spans: how long at least one
/// of them was going on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpanUnion {
    /// start → end, disjoint and not touching.
    spans: BTreeMap<u64, u64>,
}

impl SpanUnion {
    pub fn add(&mut self, start: u64, end: u64) {
        let (mut s, mut e) = (start, end);
        if e <= s {
            return;
        }
        if let Some((&ps, &pe)) = self.spans.range(..=s).next_back() {
            if pe >= s {
                s = ps;
                e = e.max(pe);
            }
        }
        let inside: Vec<u64> = self.spans.range(s..=e).map(|(k, _)| *k).collect();
        for k in inside {
            if let Some(ke) = self.spans.remove(&k) {
                e = e.max(ke);
            }
        }
        self.spans.insert(s, e);
    }

    pub fn total(&self) -> u64 {
        self.spans.iter().map(|(s, e)| e - s).sum()
    }
}

/// Everything known about one interval.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub index: u64,
    /// End of the interval, seconds since the run started.
    pub t_s: f64,
    /// Length of the interval in seconds (the last one may be shorter).
    pub interval_s: f64,
    pub targets: Vec<TargetInterval>,
    pub stalls: Vec<Stall>,
    /// System-wide dirty/writeback state and each target's device; None
    /// when /proc could not be sampled.
    pub kernel: Option<KernelInterval>,
    /// The raw kernel sample `kernel` was derived from (what a recording keeps).
    pub raw: Option<crate::model::kernel::ProcSample>,
    /// Writeback started by the flusher, by reason; None without tracing.
    pub wb_starts: Option<BTreeMap<String, u64>>,
    /// Stalls in progress at the end of the interval (`dur_ns` None).
    pub in_progress: Vec<Blocked>,
    pub events: Vec<RunEvent>,
    /// Observe mode: each observed process (its threads' stalls are in
    /// `stalls`).
    pub observed: Vec<ObservedInterval>,
}

/// Sums two optional counts; None only when both are.
fn add_opt<T: std::ops::Add<Output = T>>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    }
}

fn add_bdp(a: Option<BdpStats>, b: Option<BdpStats>) -> Option<BdpStats> {
    match (a, b) {
        (Some(mut a), Some(b)) => {
            a.add(&b);
            Some(a)
        }
        (a, b) => a.or(b),
    }
}

impl Snapshot {
    /// Takes in the interval after this one, keeping this one's time span
    /// and kernel figures: recordings of builds before 2026-12-04 wrote the
    /// ops that finished while the writers stopped as an interval of their
    /// own past the run's end, which charted as a drop to nothing. Runs now
    /// fold them into the last interval; the reader does the same.
    pub fn absorb(&mut self, later: Snapshot) {
        for lt in later.targets {
            match self.targets.iter_mut().find(|t| t.target == lt.target) {
                Some(t) => {
                    t.ops += lt.ops;
                    t.bytes += lt.bytes;
                    let _ = t.hist.add(&lt.hist);
                    let _ = t.sync_hist.add(&lt.sync_hist);
                    t.stalls += lt.stalls;
                    t.minflt += lt.minflt;
                    t.majflt += lt.majflt;
                    t.bdp = add_bdp(t.bdp, lt.bdp);
                    t.wb_waits = add_opt(t.wb_waits, lt.wb_waits);
                    t.failed |= lt.failed;
                }
                None => self.targets.push(lt),
            }
        }
        for lo in later.observed {
            match self.observed.iter_mut().find(|o| o.pid == lo.pid) {
                Some(o) => {
                    o.alive = lo.alive;
                    o.samples += lo.samples;
                    o.minflt += lo.minflt;
                    o.majflt += lo.majflt;
                    o.write_bytes = add_opt(o.write_bytes, lo.write_bytes);
                    o.bdp = add_bdp(o.bdp, lo.bdp);
                    o.wb_waits = add_opt(o.wb_waits, lo.wb_waits);
                    o.stalls += lo.stalls;
                    o.blocked_ms = add_opt(o.blocked_ms, lo.blocked_ms);
                    if let Some(l) = &lo.calls {
                        match &mut o.calls {
                            Some(c) => c.add(l),
                            None => o.calls = Some(l.clone()),
                        }
                    }
                }
                None => self.observed.push(lo),
            }
        }
        self.stalls.extend(later.stalls);
        self.events.extend(later.events);
        self.in_progress = later.in_progress;
    }
}

/// Latency figures in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatSummary {
    pub mean: f64,
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl LatSummary {
    pub fn of(h: &Histogram<u64>) -> LatSummary {
        if h.is_empty() {
            return LatSummary::default();
        }
        LatSummary {
            mean: (h.mean() * 10.0).round() / 10.0,
            p50: h.value_at_quantile(0.50),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// Rates of one interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    pub ops_per_s: f64,
    pub mib_per_s: f64,
}

impl TargetInterval {
    pub fn rates(&self, interval_s: f64) -> Rates {
        rates(self.ops, self.bytes, interval_s)
    }
}

pub fn rates(ops: u64, bytes: u64, secs: f64) -> Rates {
    if secs <= 0.0 {
        return Rates {
            ops_per_s: 0.0,
            mib_per_s: 0.0,
        };
    }
    Rates {
        ops_per_s: ops as f64 / secs,
        mib_per_s: crate::base::units::mib(bytes) / secs,
    }
}

/// Whole-run figures for one target.
#[derive(Clone, Debug)]
pub struct TargetSummary {
    pub target: usize,
    pub ops: u64,
    pub bytes: u64,
    pub hist: Histogram<u64>,
    pub sync_hist: Histogram<u64>,
    pub stalls: u64,
    pub stall_ns: u64,
    /// Stall count and time by cause.
    pub by_cause: BTreeMap<Cause, CauseTotal>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CauseTotal {
    pub count: u64,
    pub ms: f64,
}

impl CauseTotal {
    /// Adds another total of the same cause.
    pub fn add(&mut self, o: &CauseTotal) {
        self.count += o.count;
        self.ms += o.ms;
    }
}

/// Stall count and time by cause: the one tally every view of stalls
/// (the fold's totals, the printer, the report, metrics) is made with.
pub fn cause_totals<'a>(
    stalls: impl IntoIterator<Item = &'a Stall>,
) -> BTreeMap<Cause, CauseTotal> {
    let mut m: BTreeMap<Cause, CauseTotal> = BTreeMap::new();
    for s in stalls {
        // Counted once, under its headline; its time by shares, so that
        // the time by cause adds up to the time stalled.
        m.entry(s.why.cause).or_default().count += 1;
        for sh in s.why.shares_of(s.ev.dur() as f64 / 1e6) {
            m.entry(sh.cause).or_default().ms += sh.ms;
        }
    }
    m
}

/// Adds every cause of `from` into `into`.
pub fn merge_causes(into: &mut BTreeMap<Cause, CauseTotal>, from: &BTreeMap<Cause, CauseTotal>) {
    for (c, v) in from {
        into.entry(*c).or_default().add(v);
    }
}

/// Counts one finished stall into whole-run totals (a target's or an
/// observed process's).
pub fn tally(
    stalls: &mut u64,
    stall_ns: &mut u64,
    by_cause: &mut BTreeMap<Cause, CauseTotal>,
    s: &Stall,
) {
    *stalls += 1;
    *stall_ns += s.ev.dur();
    merge_causes(by_cause, &cause_totals([s]));
}

impl TargetSummary {
    /// The cause with the most stall time, if any stall happened.
    pub fn top_cause(&self) -> Option<Cause> {
        top_cause(&self.by_cause)
    }
}

pub fn top_cause(m: &BTreeMap<Cause, CauseTotal>) -> Option<Cause> {
    m.iter()
        .filter(|(_, t)| t.count > 0 || t.ms > 0.0)
        .max_by(|a, b| a.1.ms.total_cmp(&b.1.ms))
        .map(|(c, _)| *c)
}

/// Whole-run figures; percentiles from merged histograms, never averages.
#[derive(Clone, Debug)]
pub struct Summary {
    pub duration_s: f64,
    pub targets: Vec<TargetSummary>,
    pub observed: Vec<ObservedSummary>,
}

impl Summary {
    pub fn ops(&self) -> u64 {
        self.targets.iter().map(|t| t.ops).sum()
    }
    pub fn bytes(&self) -> u64 {
        self.targets.iter().map(|t| t.bytes).sum()
    }
    /// Our writers' stalls.
    pub fn writer_stalls(&self) -> u64 {
        self.targets.iter().map(|t| t.stalls).sum()
    }
    pub fn writer_stall_ns(&self) -> u64 {
        self.targets.iter().map(|t| t.stall_ns).sum()
    }
    /// Observed processes' threads' stalls.
    pub fn observed_stalls(&self) -> u64 {
        self.observed.iter().map(|o| o.stalls).sum()
    }
    pub fn observed_stall_ns(&self) -> u64 {
        self.observed.iter().map(|o| o.stall_ns).sum()
    }
    /// Every stall, ours and observed: an observe run's stalls are all
    /// observed, and a total of 0 beside 1518 per process reads as none.
    pub fn stalls(&self) -> u64 {
        self.writer_stalls() + self.observed_stalls()
    }
    pub fn stall_ns(&self) -> u64 {
        self.writer_stall_ns() + self.observed_stall_ns()
    }
    /// Every stall by cause, ours and observed.
    pub fn by_cause(&self) -> BTreeMap<Cause, CauseTotal> {
        let mut m = BTreeMap::new();
        let observed = self.observed.iter().map(|o| &o.by_cause);
        for by in self.targets.iter().map(|t| &t.by_cause).chain(observed) {
            merge_causes(&mut m, by);
        }
        m
    }
    /// All targets' write latencies merged.
    pub fn merged(&self) -> Histogram<u64> {
        let mut h = crate::model::ops::new_histogram();
        for t in &self.targets {
            let _ = h.add(&t.hist);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::SpanUnion;

    #[test]
    fn a_union_of_spans_counts_overlaps_once() {
        let mut u = SpanUnion::default();
        for (s, e) in [
            (10, 20),
            (30, 40),
            (15, 35),
            (50, 60),
            (0, 5),
            (5, 10),
            (55, 58),
        ] {
            u.add(s, e);
        }
        assert_eq!(u.total(), 50, "0..40 and 50..60");
        u.add(0, 100);
        assert_eq!(u.total(), 100);
    }
}
