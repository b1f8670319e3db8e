//! The aggregator: a pure fold of writer messages into per-interval
//! snapshots. `fold` takes a message, `tick(now)` emits every interval whose
//! end plus a grace period has passed. No threads, no clock: tests drive it.

use crate::config::Mode;
use crate::kernel::attribute::{attribute, Counters, StallFacts, ThreadTrace};
use crate::kernel::proc::{derive, KernelInterval, ProcSample};
use crate::kernel::trace::TraceKind;
use crate::measure::{new_histogram, Batch, Msg, StallEvent};
use crate::snapshot::{
    BdpStats, InProgress, LiveStall, RunEvent, Snapshot, Stall, Summary, TargetInterval,
    TargetSummary,
};
use hdrhistogram::Histogram;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// How far back trace events and kernel intervals are kept for attribution
/// (a stall longer than this is attributed on what is left).
pub const HISTORY_NS: u64 = 120_000_000_000;

/// Batches are flushed every 100 ms; wait a little longer for stragglers.
pub const GRACE_NS: u64 = 150_000_000;

#[derive(Clone, Debug)]
struct Acc {
    ops: u64,
    bytes: u64,
    hist: Histogram<u64>,
    sync_hist: Histogram<u64>,
    stalls: Vec<StallEvent>,
    minflt: u64,
    majflt: u64,
    bdp: BdpStats,
    wb_waits: u64,
}

impl Acc {
    fn new() -> Acc {
        Acc {
            ops: 0,
            bytes: 0,
            hist: new_histogram(),
            sync_hist: new_histogram(),
            stalls: Vec::new(),
            minflt: 0,
            majflt: 0,
            bdp: BdpStats::default(),
            wb_waits: 0,
        }
    }
}

/// One interval being filled.
struct Pending {
    accs: Vec<Acc>,
    /// The raw kernel sample taken at the interval's end.
    raw: Option<ProcSample>,
    wb_starts: BTreeMap<String, u64>,
}

/// A trace event of one of our threads, on the run's clock.
#[derive(Clone, Debug)]
struct ThreadEvent {
    t_ns: u64,
    target: usize,
    thread: u32,
    kind: TraceKind,
}

/// Current mode and threads of a target (they can change at runtime).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TargetState {
    pub mode: Mode,
    pub threads: u32,
    pub active: bool,
}

pub struct Aggregator {
    interval_ns: u64,
    state: Vec<TargetState>,
    next_emit: u64,
    /// pending[i] holds interval next_emit + i.
    pending: VecDeque<Pending>,
    /// Kernel thread id -> (target, thread) of our writers.
    tids: HashMap<u32, (usize, u32)>,
    /// Whether a trace session feeds us (else trace fields are unknown).
    tracing: bool,
    recent_trace: VecDeque<ThreadEvent>,
    recent_kernel: VecDeque<(u64, KernelInterval)>,
    /// The raw sample the next interval's kernel figures are derived from.
    last_raw: Option<ProcSample>,
    page_kib: u64,
    /// Kernel stacks the watchdog took of stalled ops, until attributed.
    stacks: HashMap<(usize, u32, u64), String>,
    totals: Vec<TargetSummary>,
    in_progress: Vec<InProgress>,
    events: Vec<RunEvent>,
    /// Emptied histograms to hand back to writers.
    pub recycled: Vec<Histogram<u64>>,
}

/// A target's whole-run figures before any op.
fn empty_total(target: usize) -> TargetSummary {
    TargetSummary {
        target,
        ops: 0,
        bytes: 0,
        hist: new_histogram(),
        sync_hist: new_histogram(),
        stalls: 0,
        stall_ns: 0,
        by_cause: BTreeMap::new(),
    }
}

impl Aggregator {
    pub fn new(interval_ns: u64, state: Vec<TargetState>) -> Aggregator {
        let totals = (0..state.len()).map(empty_total).collect();
        Aggregator {
            interval_ns,
            state,
            next_emit: 0,
            pending: VecDeque::new(),
            tids: HashMap::new(),
            tracing: false,
            recent_trace: VecDeque::new(),
            recent_kernel: VecDeque::new(),
            stacks: HashMap::new(),
            last_raw: None,
            page_kib: 4,
            totals,
            in_progress: Vec::new(),
            events: Vec::new(),
            recycled: Vec::new(),
        }
    }

    /// A target added at runtime; returns its index.
    pub fn add_target(&mut self, st: TargetState) -> usize {
        let target = self.state.len();
        self.state.push(st);
        for p in &mut self.pending {
            p.accs.push(Acc::new());
        }
        self.totals.push(empty_total(target));
        target
    }

    pub fn state(&self, target: usize) -> Option<TargetState> {
        self.state.get(target).copied()
    }

    pub fn set_state(&mut self, target: usize, st: TargetState) {
        if let Some(s) = self.state.get_mut(target) {
            *s = st;
        }
    }

    /// Trace events will be folded in (their absence then means zero).
    pub fn set_tracing(&mut self, on: bool) {
        self.tracing = on;
    }

    /// Maps a kernel thread id to one of our threads.
    pub fn set_tid(&mut self, tid: u32, target: usize, thread: u32) {
        self.tids.insert(tid, (target, thread));
    }

    fn pending_at(&mut self, interval: u64) -> &mut Pending {
        // Late data (a thread blocked past the grace) joins the oldest open interval.
        let i = interval.saturating_sub(self.next_emit) as usize;
        let n = self.state.len();
        while self.pending.len() <= i {
            self.pending.push_back(Pending {
                accs: (0..n).map(|_| Acc::new()).collect(),
                raw: None,
                wb_starts: BTreeMap::new(),
            });
        }
        &mut self.pending[i]
    }

    fn slot(&mut self, interval: u64, target: usize) -> &mut Acc {
        &mut self.pending_at(interval).accs[target]
    }

    /// The raw kernel sample at the start of the run; kernel figures of
    /// each interval are derived at emit time from consecutive raw samples,
    /// the same way replay derives them from a recording.
    pub fn set_kernel_base(&mut self, start: ProcSample, page_kib: u64) {
        self.last_raw = Some(start);
        self.page_kib = page_kib;
    }

    /// Folds every open interval after `index` into `index` (the ops that
    /// finish while writers stop, however long that takes, form one tail).
    pub fn merge_open_after(&mut self, index: u64) {
        let keep = (index.saturating_sub(self.next_emit) + 1) as usize;
        if self.pending.len() <= keep {
            return;
        }
        let extra: Vec<Pending> = self.pending.drain(keep..).collect();
        let tail = self.pending_at(index);
        for p in extra {
            for (a, b) in tail.accs.iter_mut().zip(p.accs) {
                a.ops += b.ops;
                a.bytes += b.bytes;
                let _ = a.hist.add(&b.hist);
                let _ = a.sync_hist.add(&b.sync_hist);
                a.stalls.extend(b.stalls);
                a.minflt += b.minflt;
                a.majflt += b.majflt;
                a.bdp.events += b.bdp.events;
                a.bdp.pause_ms += b.bdp.pause_ms;
                a.bdp.max_pause_ms = a.bdp.max_pause_ms.max(b.bdp.max_pause_ms);
                a.wb_waits += b.wb_waits;
            }
            for (k, v) in p.wb_starts {
                *tail.wb_starts.entry(k).or_insert(0) += v;
            }
        }
    }

    /// The newest interval that holds data and is not emitted yet.
    pub fn last_open_index(&self) -> Option<u64> {
        self.pending
            .len()
            .checked_sub(1)
            .map(|i| self.next_emit + i as u64)
    }

    /// The raw kernel sample taken at the end of interval `index` (a late
    /// one joins the oldest open interval).
    pub fn fold_kernel(&mut self, index: u64, raw: ProcSample) {
        self.pending_at(index).raw = Some(raw);
    }

    /// One trace event; `t_ns` on the run's clock.
    pub fn fold_trace(&mut self, t_ns: u64, tid: u32, kind: TraceKind) {
        let idx = t_ns / self.interval_ns;
        if let TraceKind::WritebackStart { reason, .. } = &kind {
            *self
                .pending_at(idx)
                .wb_starts
                .entry(reason.clone())
                .or_insert(0) += 1;
            return;
        }
        let Some(&(target, thread)) = self.tids.get(&tid) else {
            return;
        };
        let acc = self.slot(idx, target);
        match &kind {
            TraceKind::BalanceDirtyPages { pause_ms, .. } => {
                let p = (*pause_ms).max(0) as u64;
                acc.bdp.events += 1;
                acc.bdp.pause_ms += p;
                acc.bdp.max_pause_ms = acc.bdp.max_pause_ms.max(p);
            }
            TraceKind::WaitWriteback { .. } => acc.wb_waits += 1,
            TraceKind::WritebackStart { .. } => {}
        }
        self.recent_trace.push_back(ThreadEvent {
            t_ns,
            target,
            thread,
            kind,
        });
    }

    pub fn fold(&mut self, msg: Msg) {
        match msg {
            Msg::Batch(b) => self.fold_batch(*b),
            Msg::StallInProgress {
                target,
                thread,
                op,
                start_ns,
                stack,
            } => {
                if let Some(st) = &stack {
                    self.stacks.insert((target, thread, start_ns), st.clone());
                }
                let ip = InProgress {
                    target,
                    thread,
                    op,
                    start_ns,
                    stack,
                };
                if !self.in_progress.contains(&ip) {
                    self.in_progress.push(ip);
                }
            }
            Msg::Event {
                target,
                t_ns,
                kind,
                message,
            } => self.events.push(RunEvent {
                target,
                t_ns,
                kind,
                message,
            }),
        }
    }

    fn fold_batch(&mut self, mut b: Batch) {
        if b.target >= self.state.len() {
            return;
        }
        for s in &b.stalls {
            self.in_progress.retain(|p| {
                !(p.target == s.target && p.thread == s.thread && p.start_ns == s.start_ns)
            });
        }
        let acc = self.slot(b.interval, b.target);
        acc.minflt += b.minflt;
        acc.majflt += b.majflt;
        acc.ops += b.ops;
        acc.bytes += b.bytes;
        let _ = acc.hist.add(&b.hist);
        let _ = acc.sync_hist.add(&b.sync_hist);
        acc.stalls.append(&mut b.stalls);
        for mut h in [b.hist, b.sync_hist] {
            if self.recycled.len() < 256 {
                h.reset();
                self.recycled.push(h);
            }
        }
    }

    /// Emits every interval that ended at least `GRACE_NS` before `now_ns`.
    pub fn tick(&mut self, now_ns: u64) -> Vec<Snapshot> {
        let mut out = Vec::new();
        while (self.next_emit + 1) * self.interval_ns + GRACE_NS <= now_ns {
            out.push(self.emit(self.interval_ns));
        }
        out
    }

    /// Emits what is left when the run stops at `end_ns` (a trailing partial
    /// interval only if it is at least half an interval long) and the summary.
    pub fn finish(mut self, end_ns: u64) -> (Vec<Snapshot>, Summary) {
        let mut out = Vec::new();
        while (self.next_emit + 1) * self.interval_ns <= end_ns {
            out.push(self.emit(self.interval_ns));
        }
        let partial = end_ns.saturating_sub(self.next_emit * self.interval_ns);
        // A trailing partial interval is emitted with its true length, so
        // the intervals always add up to the summary (report relies on it).
        if !self.pending.is_empty() && partial > 0 {
            out.push(self.emit(partial));
        }
        // Ops that finished while the writers were stopping: emitted too, so
        // the snapshots still add up to the summary.
        while !self.pending.is_empty() {
            out.push(self.emit(self.interval_ns));
        }
        let summary = Summary {
            duration_s: end_ns as f64 / 1e9,
            targets: self.totals,
        };
        (out, summary)
    }

    fn add_totals(&mut self, accs: &[Acc]) {
        for (t, a) in self.totals.iter_mut().zip(accs) {
            t.ops += a.ops;
            t.bytes += a.bytes;
            let _ = t.hist.add(&a.hist);
            let _ = t.sync_hist.add(&a.sync_hist);
        }
    }

    fn add_stalls(&mut self, stalls: &[Stall]) {
        for s in stalls {
            let Some(t) = self.totals.get_mut(s.ev.target) else {
                continue;
            };
            t.stalls += 1;
            t.stall_ns += s.ev.dur_ns;
            let c = t.by_cause.entry(s.why.cause).or_default();
            c.count += 1;
            c.ms += s.ev.dur_ns as f64 / 1e6;
        }
    }

    /// What tracing saw of one thread during [start, end].
    fn thread_trace(&self, ev: &StallEvent) -> ThreadTrace {
        let (from, to) = (
            ev.start_ns.saturating_sub(1_000_000),
            ev.start_ns + ev.dur_ns + 5_000_000,
        );
        let mut t = ThreadTrace::default();
        for e in self.recent_trace.iter().filter(|e| {
            e.target == ev.target && e.thread == ev.thread && e.t_ns >= from && e.t_ns <= to
        }) {
            match &e.kind {
                TraceKind::BalanceDirtyPages {
                    bdi,
                    limit,
                    setpoint,
                    dirty,
                    pause_ms,
                    ..
                } => {
                    let p = (*pause_ms).max(0) as u64;
                    t.throttle_events += 1;
                    t.pause_ms += p;
                    t.max_pause_ms = t.max_pause_ms.max(p);
                    t.dirty_pages = Some(*dirty);
                    t.limit_pages = Some(*limit);
                    t.setpoint_pages = Some(*setpoint);
                    t.bdi = Some(bdi.clone());
                }
                TraceKind::WaitWriteback { bdi, .. } => {
                    t.wb_waits += 1;
                    t.bdi.get_or_insert_with(|| bdi.clone());
                }
                TraceKind::WritebackStart { .. } => {}
            }
        }
        t
    }

    /// Worst kernel figures over the intervals a stall spans.
    fn counters(&self, ev: &StallEvent) -> Counters {
        let first = ev.start_ns / self.interval_ns;
        let last = (ev.start_ns + ev.dur_ns) / self.interval_ns;
        let mut c = Counters::default();
        for (_, k) in self
            .recent_kernel
            .iter()
            .filter(|(i, _)| *i >= first && *i <= last)
        {
            c.dirty_kib = c.dirty_kib.max(k.dirty_kib);
            c.dirty_thresh_kib = k.dirty_thresh_kib.or(c.dirty_thresh_kib);
            c.dirty_bg_thresh_kib = k.dirty_bg_thresh_kib.or(c.dirty_bg_thresh_kib);
            if let Some(Some(d)) = k.devs.get(ev.target) {
                c.util_pct = Some(c.util_pct.unwrap_or(0.0).max(d.util_pct));
                c.w_await_ms = Some(c.w_await_ms.unwrap_or(0.0).max(d.w_await_ms));
                c.inflight = Some(c.inflight.unwrap_or(0).max(d.inflight));
            }
        }
        c
    }

    /// Stalls the watchdog sees in progress at `now_ns`, with the cause as
    /// far as it is known yet (same rules as for finished stalls).
    pub fn live(&self, now_ns: u64) -> Vec<LiveStall> {
        self.in_progress
            .iter()
            .map(|p| {
                let ev = StallEvent {
                    target: p.target,
                    thread: p.thread,
                    op: p.op,
                    start_ns: p.start_ns,
                    dur_ns: now_ns.saturating_sub(p.start_ns),
                };
                let why = self.explain(ev).why;
                LiveStall {
                    target: p.target,
                    thread: p.thread,
                    op: p.op,
                    elapsed_ms: now_ns.saturating_sub(p.start_ns) as f64 / 1e6,
                    cause: why.cause,
                }
            })
            .collect()
    }

    fn explain(&self, ev: StallEvent) -> Stall {
        let trace = self.tracing.then(|| self.thread_trace(&ev));
        let counters = self.counters(&ev);
        let stack = self.stacks.get(&(ev.target, ev.thread, ev.start_ns));
        let mode = self.state.get(ev.target).map_or(Mode::Mmap, |s| s.mode);
        let why = attribute(&StallFacts {
            op: ev.op,
            mode,
            dur_ms: ev.dur_ns as f64 / 1e6,
            trace: trace.as_ref(),
            counters: &counters,
            stack: stack.map(|s| s.as_str()),
        });
        Stall { ev, why }
    }

    fn emit(&mut self, len_ns: u64) -> Snapshot {
        self.pending_at(self.next_emit);
        let p = self.pending.pop_front().expect("pending interval exists");
        self.add_totals(&p.accs);
        let index = self.next_emit;
        self.next_emit += 1;
        let t_end = index * self.interval_ns + len_ns;
        let kernel = match (&self.last_raw, &p.raw) {
            (Some(prev), Some(cur)) => Some(derive(prev, cur, self.page_kib)),
            _ => None,
        };
        if let Some(k) = &kernel {
            self.recent_kernel.push_back((index, k.clone()));
        }
        if p.raw.is_some() {
            self.last_raw = p.raw.clone();
        }
        let mut events: Vec<StallEvent> = Vec::new();
        let tracing = self.tracing;
        let targets = p
            .accs
            .into_iter()
            .enumerate()
            .map(|(target, mut a)| {
                let st = self.state[target];
                let count = a.stalls.len() as u32;
                events.append(&mut a.stalls);
                TargetInterval {
                    target,
                    active: st.active,
                    mode: st.mode,
                    threads: st.threads,
                    ops: a.ops,
                    bytes: a.bytes,
                    hist: a.hist,
                    sync_hist: a.sync_hist,
                    stalls: count,
                    minflt: a.minflt,
                    majflt: a.majflt,
                    bdp: tracing.then_some(a.bdp),
                    wb_waits: tracing.then_some(a.wb_waits),
                }
            })
            .collect();
        events.sort_by_key(|s| s.start_ns);
        let stalls: Vec<Stall> = events.into_iter().map(|e| self.explain(e)).collect();
        for s in &stalls {
            self.stacks
                .remove(&(s.ev.target, s.ev.thread, s.ev.start_ns));
        }
        self.add_stalls(&stalls);
        let horizon = t_end.saturating_sub(HISTORY_NS);
        while self.recent_trace.front().is_some_and(|e| e.t_ns < horizon) {
            self.recent_trace.pop_front();
        }
        let oldest = horizon / self.interval_ns;
        while self.recent_kernel.front().is_some_and(|(i, _)| *i < oldest) {
            self.recent_kernel.pop_front();
        }
        Snapshot {
            index,
            t_s: t_end as f64 / 1e9,
            interval_s: len_ns as f64 / 1e9,
            targets,
            stalls,
            kernel,
            raw: p.raw,
            wb_starts: tracing.then_some(p.wb_starts),
            in_progress: self
                .in_progress
                .iter()
                .filter(|p| p.start_ns < t_end)
                .cloned()
                .collect(),
            events: std::mem::take(&mut self.events),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::OpKind;

    const S: u64 = 1_000_000_000;

    fn batch(target: usize, thread: u32, interval: u64, lats_us: &[u64]) -> Msg {
        let mut hist = new_histogram();
        for &l in lats_us {
            hist.record(l).unwrap();
        }
        Msg::Batch(Box::new(Batch {
            target,
            thread,
            interval,
            ops: lats_us.len() as u64,
            bytes: lats_us.len() as u64 * 818,
            hist,
            sync_hist: new_histogram(),
            stalls: Vec::new(),
            minflt: 0,
            majflt: 0,
        }))
    }

    fn agg(n: usize) -> Aggregator {
        let st = TargetState {
            mode: Mode::Mmap,
            threads: 2,
            active: true,
        };
        Aggregator::new(S, vec![st; n])
    }

    #[test]
    fn merged_count_equals_ops_done() {
        let mut a = agg(2);
        let mut done = 0;
        for i in 0..5u64 {
            for th in 0..3 {
                let lats: Vec<u64> = (1..=(10 + i * th as u64)).collect();
                done += lats.len() as u64;
                a.fold(batch((th % 2) as usize, th, i, &lats));
            }
        }
        let snaps = a.tick(5 * S + GRACE_NS);
        assert_eq!(snaps.len(), 5);
        let per_interval: u64 = snaps
            .iter()
            .flat_map(|s| s.targets.iter())
            .map(|t| t.hist.len())
            .sum();
        assert_eq!(per_interval, done);
        let (_, sum) = a.finish(5 * S + GRACE_NS);
        assert_eq!(sum.ops(), done);
        assert_eq!(sum.merged().len(), done);
    }

    #[test]
    fn waits_for_grace_then_emits_in_order() {
        let mut a = agg(1);
        a.fold(batch(0, 0, 0, &[100]));
        assert!(a.tick(S).is_empty(), "not before the grace period");
        let s = a.tick(S + GRACE_NS);
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].index, s[0].t_s), (0, 1.0));
        assert_eq!(s[0].targets[0].ops, 1);
        // An empty interval is still emitted (zero throughput is the news).
        let s = a.tick(3 * S + GRACE_NS);
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].targets[0].ops, 0);
    }

    #[test]
    fn late_batch_joins_oldest_open_interval() {
        let mut a = agg(1);
        a.tick(3 * S + GRACE_NS);
        a.fold(batch(0, 0, 1, &[5, 6]));
        let s = a.tick(4 * S + GRACE_NS);
        assert_eq!(s[0].index, 3);
        assert_eq!(s[0].targets[0].ops, 2);
    }

    #[test]
    fn stall_in_progress_until_it_finishes() {
        let mut a = agg(1);
        a.fold(Msg::StallInProgress {
            target: 0,
            thread: 1,
            op: OpKind::Write,
            start_ns: S / 2,
            stack: None,
        });
        let s = a.tick(S + GRACE_NS);
        assert_eq!(s[0].in_progress.len(), 1);
        let mut m = batch(0, 1, 2, &[2_500_000]);
        if let Msg::Batch(b) = &mut m {
            b.stalls.push(StallEvent {
                target: 0,
                thread: 1,
                op: OpKind::Write,
                start_ns: S / 2,
                dur_ns: 2 * S,
            });
        }
        a.fold(m);
        let s = a.tick(3 * S + GRACE_NS);
        assert_eq!(s[1].stalls.len(), 1);
        assert_eq!(s[1].targets[0].stalls, 1);
        assert!(s[1].in_progress.is_empty());
        let (_, sum) = a.finish(3 * S + GRACE_NS);
        assert_eq!(sum.stalls(), 1);
        assert_eq!(sum.stall_ns(), 2 * S);
    }

    #[test]
    fn a_partial_tail_is_emitted_with_its_length() {
        let mut a = agg(1);
        a.fold(batch(0, 0, 0, &[10]));
        a.fold(batch(0, 0, 1, &[10, 20]));
        let (snaps, sum) = a.finish(S + S / 10);
        assert_eq!(snaps.len(), 2);
        assert!((snaps[1].interval_s - 0.1).abs() < 1e-9);
        let in_snaps: u64 = snaps.iter().map(|s| s.targets[0].ops).sum();
        assert_eq!(in_snaps, sum.ops());
    }
}
