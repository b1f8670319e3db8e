//! The aggregator: a pure fold of writer messages into per-interval
//! snapshots. `fold` takes a message, `tick(now)` emits every interval whose
//! end plus a grace period has passed. No threads, no clock: tests drive it.

use crate::config::Mode;
use crate::fold::attribute::{attribute, Counters, StallFacts, ThreadTrace, Unseen};
use crate::fold::blocks::{BlockTimer, Samples};
use crate::fold::chains::Chains;
use crate::fold::derive::derive;
use crate::model::cause::Cause;
use crate::model::kernel::TraceKind;
use crate::model::kernel::{KernelInterval, ProcSample};
use crate::model::msg::{Batch, EventKind, Msg};
use crate::model::observed::{BlockTiming, ObsTick, Watched};
use crate::model::ops::new_histogram;
use crate::model::snapshot::{
    tally, BdpStats, ObservedInterval, ObservedSummary, RunEvent, Snapshot, SpanUnion, Summary,
    TargetInterval, TargetSummary,
};
use crate::model::stall::{Blocked, Live, Stall, Who};
use hdrhistogram::Histogram;

mod sched;
mod siblings;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// How far back kernel intervals are kept for attribution (a stall longer
/// than this is attributed on what is left).
pub const HISTORY_NS: u64 = 120_000_000_000;

/// How far back our threads' trace events are kept, and at most how many:
/// a stall is attributed within an interval or two of its end, and a stall
/// longer than this still has its last 30 s of events. Throttled writers
/// make hundreds of events a second; a longer window only made memory
/// creep up for minutes before it levelled (the soak's RSS check).
pub const TRACE_HISTORY_NS: u64 = 30_000_000_000;
pub const MAX_TRACE_EVENTS: usize = 100_000;

/// Batches are flushed every 100 ms; wait a little longer for stragglers.
pub const GRACE_NS: u64 = 150_000_000;
/// How long a thread that left stays known to the trace events (they are
/// drained later than the sampler sees the thread go).
pub const GONE_GRACE_NS: u64 = 3_000_000_000;
/// At most this many wakers outside the watched processes are traced
/// (the least recently useful one makes room).
pub const MAX_WAKERS: usize = 64;
/// The "process" of a waker outside the watched ones: its waits explain
/// sleeps, they are never stalls of their own.
const WAKER_PID: u32 = 0;

#[derive(Clone, Debug)]
struct Acc {
    ops: u64,
    bytes: u64,
    hist: Histogram<u64>,
    sync_hist: Histogram<u64>,
    stalls: Vec<Blocked>,
    counts: ThreadCounts,
}

impl Acc {
    /// Adds a later part of the same target's interval.
    fn add(&mut self, b: Acc) {
        self.ops += b.ops;
        self.bytes += b.bytes;
        let _ = self.hist.add(&b.hist);
        let _ = self.sync_hist.add(&b.sync_hist);
        self.stalls.extend(b.stalls);
        self.counts.add(&b.counts);
    }

    fn new() -> Acc {
        Acc {
            ops: 0,
            bytes: 0,
            hist: new_histogram(),
            sync_hist: new_histogram(),
            stalls: Vec::new(),
            counts: ThreadCounts::default(),
        }
    }
}

/// What the threads of a target or an observed process add up to over an
/// interval: their page faults and, from tracing, their throttling.
#[derive(Clone, Copy, Debug, Default)]
struct ThreadCounts {
    minflt: u64,
    majflt: u64,
    bdp: BdpStats,
    wb_waits: u64,
}

impl ThreadCounts {
    fn add(&mut self, o: &ThreadCounts) {
        self.minflt += o.minflt;
        self.majflt += o.majflt;
        self.bdp.add(&o.bdp);
        self.wb_waits += o.wb_waits;
    }
    /// One of the threads' trace events.
    fn add_event(&mut self, kind: &TraceKind) {
        match kind {
            TraceKind::BalanceDirtyPages { pause_ms, .. } => self.bdp.add_pause(*pause_ms),
            TraceKind::WaitWriteback { .. } => self.wb_waits += 1,
            _ => {}
        }
    }
}

/// Whose a kernel thread id is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// Our writer: target, thread.
    Writer(usize, u32),
    /// An observed process's.
    Process(u32),
}

/// One observed process over one interval being filled.
#[derive(Clone, Debug, Default)]
struct ObsAcc {
    samples: u32,
    threads: u32,
    d_sum: u64,
    d_max: u32,
    write_bytes: u64,
    /// Some sample could not read /proc/PID/io: write_bytes is unknown.
    unreadable_io: bool,
    exited: bool,
    /// It joined (was found) in this interval.
    joined: bool,
    /// Scheduler-timed D time of its threads.
    blocked_ns: u64,
    /// Their runs under the threshold by cause (stalls are added by their
    /// shares when the interval is emitted), ns.
    blocked_by: BTreeMap<Cause, u64>,
    /// Long sleeps waiting for work held up upstream (`chains::Starved`).
    starved_ns: u64,
    counts: ThreadCounts,
}

impl ObsAcc {
    /// One sample of one process.
    fn of_tick(t: &crate::model::observed::ProcTick) -> ObsAcc {
        ObsAcc {
            samples: 1,
            threads: t.threads,
            d_sum: u64::from(t.d_threads),
            d_max: t.d_threads,
            counts: ThreadCounts {
                minflt: t.minflt,
                majflt: t.majflt,
                ..ThreadCounts::default()
            },
            write_bytes: t.write_bytes.unwrap_or(0),
            unreadable_io: t.write_bytes.is_none(),
            ..ObsAcc::default()
        }
    }

    fn add(&mut self, o: &ObsAcc) {
        self.samples += o.samples;
        self.threads = if o.samples > 0 {
            o.threads
        } else {
            self.threads
        };
        self.d_sum += o.d_sum;
        self.d_max = self.d_max.max(o.d_max);
        self.counts.add(&o.counts);
        self.unreadable_io |= o.unreadable_io;
        self.write_bytes += o.write_bytes;
        self.exited |= o.exited;
        self.joined |= o.joined;
        self.blocked_ns += o.blocked_ns;
        for (c, ns) in &o.blocked_by {
            *self.blocked_by.entry(*c).or_default() += ns;
        }
        self.starved_ns += o.starved_ns;
    }
}

/// One interval being filled.
struct Pending {
    accs: Vec<Acc>,
    /// Observed processes by pid, and their threads' finished D-state runs.
    observed: BTreeMap<u32, ObsAcc>,
    obs_stalls: Vec<Blocked>,
    /// Sleeps that wake-up chains explained (already attributed).
    chain_stalls: Vec<Stall>,
    /// The raw kernel sample taken at the interval's end.
    raw: Option<ProcSample>,
    wb_starts: BTreeMap<String, u64>,
}

/// A watched thread as the fold keys it: cheap to copy, unlike `Who`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum ThreadKey {
    Writer(usize, u32),
    Tid(u32),
}

impl ThreadKey {
    fn of(who: &Who) -> ThreadKey {
        match who {
            Who::Writer { target, thread } => ThreadKey::Writer(*target, *thread),
            Who::Process { tid, .. } => ThreadKey::Tid(*tid),
        }
    }
}

/// A trace event of one of our threads, on the run's clock.
#[derive(Clone, Debug)]
struct ThreadEvent {
    t_ns: u64,
    key: ThreadKey,
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
    /// Kernel thread id -> our writer or an observed process.
    tids: HashMap<u32, Owner>,
    /// Whether a trace session feeds us (else trace fields are unknown).
    tracing: bool,
    /// Evidence tracing cannot give here (`set_trace_unseen`).
    unseen: Unseen,
    recent_trace: VecDeque<ThreadEvent>,
    recent_kernel: VecDeque<(u64, KernelInterval)>,
    /// The raw sample the next interval's kernel figures are derived from.
    last_raw: Option<ProcSample>,
    page_kib: u64,
    /// Kernel stacks the watchdog took of stalled ops, until attributed:
    /// the first, and all of them tallied by the wait they name.
    stacks: HashMap<(ThreadKey, u64), (String, Samples)>,
    totals: Vec<TargetSummary>,
    /// Our writers' ops the watchdog saw blocked, not yet returned.
    in_progress: Vec<Blocked>,
    /// Writers' latest stalls, for a writer that waited behind one.
    recent_writer_stalls: VecDeque<Stall>,
    events: Vec<RunEvent>,
    /// Emptied histograms to hand back to writers.
    pub recycled: Vec<Histogram<u64>>,
    /// Observe mode: the processes, whether their thread ids changed since
    /// `take_observed_tids_changed`, and totals.
    watched: Vec<Watched>,
    obs_tids_changed: bool,
    obs_totals: BTreeMap<u32, ObservedSummary>,
    /// Each observed process's stalled wall time (its threads' stalls
    /// joined).
    obs_union: HashMap<u32, SpanUnion>,
    /// Each observed thread's latest dirty-throttle event: a short write
    /// that blocked after one was throttled.
    last_throttle: HashMap<u32, u64>,
    /// Targets whose writers reported a fatal error since they started.
    failed: Vec<bool>,
    /// Observe mode: D-state runs past the threshold, still going.
    obs_live: Vec<Blocked>,
    /// Observe mode with the scheduler's events: blocks timed exactly (the
    /// sampler's D-state runs are then ignored), and the stall threshold.
    /// Threads outside the watched processes that woke a watched one
    /// from a long sleep (a flusher, another process), with when: their
    /// waits are traced too, to explain the next such sleep (`MAX_WAKERS`).
    wakers: HashMap<u32, u64>,
    /// Observed threads that left, with when: still known for
    /// `GONE_GRACE_NS` (see `fold_observe`).
    gone: HashMap<u32, (u32, u64)>,
    sched: Option<u64>,
    /// Wake-up chains (with scheduler timing, when asked for).
    chains: Option<Chains>,
    blocks: BlockTimer,
    /// Each target's bdi ("MAJ:MIN"), to give an observed thread's stall
    /// the device evidence of the filesystem its trace events name.
    target_bdis: Vec<Option<String>>,
    /// Set when the run stops: observe samples taken after it join the
    /// last interval instead of opening one of their own.
    end_ns: Option<u64>,
    /// The trace events up to this time are all folded (the session's last
    /// drain): what can still grow is judged as of then, not of `now`.
    trace_through: Option<u64>,
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
            unseen: Unseen::default(),
            recent_trace: VecDeque::new(),
            recent_kernel: VecDeque::new(),
            stacks: HashMap::new(),
            last_raw: None,
            page_kib: 4,
            totals,
            in_progress: Vec::new(),
            recent_writer_stalls: VecDeque::new(),
            events: Vec::new(),
            recycled: Vec::new(),
            watched: Vec::new(),
            obs_tids_changed: false,
            obs_totals: BTreeMap::new(),
            obs_union: HashMap::new(),
            last_throttle: HashMap::new(),
            end_ns: None,
            trace_through: None,
            failed: Vec::new(),
            obs_live: Vec::new(),
            target_bdis: Vec::new(),
            sched: None,
            blocks: BlockTimer::default(),
            chains: None,
            gone: HashMap::new(),
            wakers: HashMap::new(),
        }
    }

    /// The processes observe mode watches (their figures appear in every
    /// snapshot from now on).
    pub fn set_observed(&mut self, watched: Vec<Watched>) {
        self.watched.clear();
        for w in watched {
            self.watch(w);
        }
    }

    /// One more process to observe (at start, or joined while running).
    fn watch(&mut self, w: Watched) {
        // Already known from its fork event (`forked`), before the sampler.
        if self.watched.iter().any(|x| x.pid == w.pid) {
            return;
        }
        self.obs_totals.insert(
            w.pid,
            ObservedSummary {
                pid: w.pid,
                comm: w.comm.clone(),
                write_bytes: Some(0),
                ..ObservedSummary::default()
            },
        );
        self.watched.push(w);
    }

    /// The observed thread ids, when they changed since the last call (the
    /// trace filter follows them).
    pub fn take_observed_tids_changed(&mut self) -> Option<Vec<u32>> {
        if !std::mem::take(&mut self.obs_tids_changed) {
            return None;
        }
        let mut v: Vec<u32> = self
            .tids
            .iter()
            .filter(|(_, o)| matches!(o, Owner::Process(_)))
            .map(|(t, _)| *t)
            .chain(self.wakers.keys().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        Some(v)
    }

    /// New writers on `target`: it is no longer marked failed.
    pub fn clear_failed(&mut self, target: usize) {
        if let Some(f) = self.failed.get_mut(target) {
            *f = false;
        }
    }

    /// The bdi of `target`'s device (see `target_bdis`).
    pub fn set_target_bdi(&mut self, target: usize, bdi: String) {
        if self.target_bdis.len() <= target {
            self.target_bdis.resize(target + 1, None);
        }
        self.target_bdis[target] = Some(bdi);
    }

    /// The run's end; see `end_ns`.
    pub fn set_end(&mut self, end_ns: u64) {
        self.end_ns = Some(end_ns);
    }

    fn fold_observe(&mut self, t: ObsTick) {
        let t_ns = self
            .end_ns
            .map_or(t.t_ns, |e| t.t_ns.min(e.saturating_sub(1)));
        let idx = t_ns / self.interval_ns;
        if let Some(tids) = t.tids {
            // Threads that left stay known a while: the trace is drained
            // later than the sampler reports, and their last events (the
            // wait a thread woke another from before it exited) still come.
            let now = t.t_ns;
            let left: Vec<(u32, u32)> = self
                .tids
                .iter()
                .filter_map(|(tid, o)| match o {
                    Owner::Process(pid) => Some((*tid, *pid)),
                    Owner::Writer(..) => None,
                })
                .collect();
            self.gone
                .extend(left.into_iter().map(|(tid, pid)| (tid, (pid, now))));
            let expired: Vec<u32> = self
                .gone
                .iter()
                .filter(|(_, (_, since))| now.saturating_sub(*since) >= GONE_GRACE_NS)
                .map(|(tid, _)| *tid)
                .collect();
            for tid in expired {
                self.gone.remove(&tid);
                // Its waits no longer explain anyone's sleep.
                if let Some(c) = self.chains.as_mut() {
                    c.forget(tid);
                }
            }
            self.tids.retain(|_, o| !matches!(o, Owner::Process(_)));
            for (tid, pid) in tids {
                self.gone.remove(&tid);
                self.tids.insert(tid, Owner::Process(pid));
            }
            self.obs_tids_changed = true;
            // A thread gone while "blocked" went to its death, not a wait.
            let tids = &self.tids;
            let gone = &self.gone;
            let wakers = &self.wakers;
            self.blocks.retain_open(|tid| {
                matches!(tids.get(&tid), Some(Owner::Process(_)))
                    || gone.contains_key(&tid)
                    || wakers.contains_key(&tid)
            });
        }
        let (stalls, ongoing) = if self.sched.is_some() {
            self.adopt_blocks(&t.ongoing);
            // The sampler's stacks of threads it saw in D name the waits of
            // the scheduler-timed blocks.
            for b in t.stalls.iter().chain(&t.ongoing) {
                if let (Who::Process { tid, .. }, Some(st)) = (&b.who, &b.stack) {
                    self.blocks.stack(*tid, st.clone());
                }
            }
            (Vec::new(), Vec::new())
        } else {
            (t.stalls, t.ongoing)
        };
        self.obs_live = ongoing;
        for w in &t.joined {
            self.watch(w.clone());
        }
        let p = self.pending_at(idx);
        for w in &t.joined {
            p.observed.entry(w.pid).or_default().joined = true;
        }
        for pt in &t.procs {
            p.observed
                .entry(pt.pid)
                .or_default()
                .add(&ObsAcc::of_tick(pt));
        }
        for pid in &t.exited {
            p.observed.entry(*pid).or_default().exited = true;
        }
        p.obs_stalls.extend(stalls);
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

    /// What tracing cannot see on this kernel (its events are missing):
    /// those counts are null, not 0, and attribution does not take their
    /// silence for evidence.
    pub fn set_trace_unseen(&mut self, unseen: Unseen) {
        self.unseen = unseen;
    }

    /// Maps a kernel thread id to one of our threads.
    pub fn set_tid(&mut self, tid: u32, target: usize, thread: u32) {
        self.tids.insert(tid, Owner::Writer(target, thread));
    }

    fn pending_at(&mut self, interval: u64) -> &mut Pending {
        // Late data (a thread blocked past the grace) joins the oldest open interval.
        let i = interval.saturating_sub(self.next_emit) as usize;
        let n = self.state.len();
        while self.pending.len() <= i {
            self.pending.push_back(Pending {
                accs: (0..n).map(|_| Acc::new()).collect(),
                observed: BTreeMap::new(),
                obs_stalls: Vec::new(),
                chain_stalls: Vec::new(),
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
    /// finish while writers stop, however long that takes, join the last
    /// interval of the run); the newest kernel sample ends the merged span.
    fn merge_open_after(&mut self, index: u64) {
        let keep = (index.saturating_sub(self.next_emit) + 1) as usize;
        if self.pending.len() <= keep {
            return;
        }
        let extra: Vec<Pending> = self.pending.drain(keep..).collect();
        let tail = self.pending_at(index);
        for p in extra {
            for (a, b) in tail.accs.iter_mut().zip(p.accs) {
                a.add(b);
            }
            for (k, v) in p.wb_starts {
                *tail.wb_starts.entry(k).or_insert(0) += v;
            }
            for (pid, o) in p.observed {
                tail.observed.entry(pid).or_default().add(&o);
            }
            tail.obs_stalls.extend(p.obs_stalls);
            if p.raw.is_some() {
                tail.raw = p.raw;
            }
        }
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
        if self.fold_sched(t_ns, tid, &kind) {
            return;
        }
        if let TraceKind::BalanceDirtyPages { .. } = &kind {
            if self.process_of(tid).is_some() {
                self.last_throttle.insert(tid, t_ns);
            }
        }
        // An observed process's thread, or one of our writers.
        let (key, counts) = match self.tids.get(&tid).copied() {
            Some(Owner::Process(pid)) => (
                ThreadKey::Tid(tid),
                &mut self.pending_at(idx).observed.entry(pid).or_default().counts,
            ),
            Some(Owner::Writer(target, thread)) => (
                ThreadKey::Writer(target, thread),
                &mut self.slot(idx, target).counts,
            ),
            None => return,
        };
        counts.add_event(&kind);
        if self.recent_trace.len() >= MAX_TRACE_EVENTS {
            self.recent_trace.pop_front();
        }
        self.recent_trace.push_back(ThreadEvent { t_ns, key, kind });
    }

    pub fn fold(&mut self, msg: Msg) {
        match msg {
            Msg::Batch(b) => self.fold_batch(*b),
            Msg::Blocked(b) => {
                if let Some(st) = &b.stack {
                    let (_, samples) = self
                        .stacks
                        .entry((ThreadKey::of(&b.who), b.start_ns))
                        .or_insert_with(|| (st.clone(), Samples::default()));
                    samples.add(st);
                }
                // The watchdog reports a long op again with each new stack
                // read; the op's kind may have changed (a segment wait).
                match self.in_progress.iter_mut().find(|p| p.same(&b)) {
                    Some(p) => p.op = b.op,
                    None => self.in_progress.push(b),
                }
            }
            Msg::Observe(t) => self.fold_observe(*t),
            Msg::Event {
                target,
                thread,
                t_ns,
                kind,
                message,
            } => {
                if let (Some(th), EventKind::WriterError) = (thread, kind) {
                    // A thread that failed inside an op will never finish it.
                    let who = Who::Writer { target, thread: th };
                    self.in_progress.retain(|p| p.who != who);
                    if self.failed.len() <= target {
                        self.failed.resize(target + 1, false);
                    }
                    self.failed[target] = true;
                }
                self.events.push(RunEvent {
                    target,
                    t_ns,
                    kind,
                    message,
                });
            }
        }
    }

    fn fold_batch(&mut self, mut b: Batch) {
        if b.target >= self.state.len() {
            return;
        }
        for s in &b.stalls {
            self.in_progress.retain(|p| !p.same(s));
        }
        // A stall belongs to the interval it ended in, whatever interval
        // the batch that carries it was opened in.
        for s in b.stalls.drain(..) {
            let end = (s.start_ns + s.dur()) / self.interval_ns;
            self.slot(end, b.target).stalls.push(s);
        }
        let acc = self.slot(b.interval, b.target);
        acc.counts.minflt += b.minflt;
        acc.counts.majflt += b.majflt;
        acc.ops += b.ops;
        acc.bytes += b.bytes;
        let _ = acc.hist.add(&b.hist);
        let _ = acc.sync_hist.add(&b.sync_hist);
        for mut h in [b.hist, b.sync_hist] {
            if self.recycled.len() < 256 {
                h.reset();
                self.recycled.push(h);
            }
        }
    }

    /// Every trace event up to `t_ns` has been folded (the session drained
    /// the trace after `t_ns`).
    pub fn set_trace_through(&mut self, t_ns: u64) {
        self.trace_through = Some(t_ns);
    }

    /// Emits every interval that ended at least `GRACE_NS` before `now_ns`.
    /// Blocks and delay steps are judged as of the trace events folded
    /// (`set_trace_through`), at most `now_ns`: a thread whose next event
    /// is still in the trace buffer has not gone quiet.
    pub fn tick(&mut self, now_ns: u64) -> Vec<Snapshot> {
        let seen = self.trace_through.map_or(now_ns, |t| t.min(now_ns));
        self.finish_runs(seen);
        self.finish_steps(seen);
        let mut out = Vec::new();
        while (self.next_emit + 1) * self.interval_ns + GRACE_NS <= now_ns {
            out.push(self.emit(self.interval_ns));
        }
        out
    }

    /// Emits what is left when the run stops at `end_ns` (the last interval
    /// partial when the end is not on a boundary) and the summary.
    pub fn finish(mut self, end_ns: u64) -> (Vec<Snapshot>, Summary) {
        // Blocks still going on end with the run: their runs are stalls so far.
        for r in self.blocks.ongoing() {
            let (ended, _) = self
                .blocks
                .wake(r.tid, end_ns.saturating_sub(1), (0, String::new()));
            if let Some(run) = ended {
                self.run_done(run);
            }
        }
        self.finish_runs(u64::MAX);
        self.finish_steps(end_ns.saturating_add(1_000_000_000));
        // The run's last interval: the one `end_ns` falls in, or the one it
        // closes when it is on a boundary. What finished while the writers
        // were stopping joins it (never an interval of its own past the end,
        // which would chart as a drop to nothing), so the snapshots still
        // add up to the summary.
        let iv = self.interval_ns;
        let last = end_ns.div_ceil(iv).saturating_sub(1).max(self.next_emit);
        self.merge_open_after(last);
        let mut out = Vec::new();
        while self.next_emit < last {
            out.push(self.emit(iv));
        }
        if !self.pending.is_empty() {
            // A trailing partial interval has its true length (rates are
            // per second of it).
            let len = match end_ns.saturating_sub(last * iv) {
                0 => iv,
                p => p.min(iv),
            };
            out.push(self.emit(len));
        }
        for (pid, t) in self.obs_totals.iter_mut() {
            t.stalled_ns = self.obs_union.get(pid).map_or(0, SpanUnion::total);
        }
        let summary = Summary {
            duration_s: end_ns as f64 / 1e9,
            targets: self.totals,
            observed: self.obs_totals.into_values().collect(),
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

    /// Counts finished stalls into their target's or process's totals.
    fn add_stalls(&mut self, stalls: &[Stall]) {
        for s in stalls {
            let t = match &s.ev.who {
                Who::Writer { target, .. } => self
                    .totals
                    .get_mut(*target)
                    .map(|t| (&mut t.stalls, &mut t.stall_ns, &mut t.by_cause)),
                Who::Process { pid, .. } => self
                    .obs_totals
                    .get_mut(pid)
                    .map(|t| (&mut t.stalls, &mut t.stall_ns, &mut t.by_cause)),
            };
            if let Some((n, ns, by_cause)) = t {
                tally(n, ns, by_cause, s);
            }
            if let Who::Process { pid, .. } = &s.ev.who {
                let u = self.obs_union.entry(*pid).or_default();
                u.add(s.ev.start_ns, s.ev.start_ns + s.ev.dur());
            }
        }
    }

    /// What tracing saw of one thread during the block (to `now_ns` for
    /// one still going).
    fn thread_trace(&self, ev: &Blocked, now_ns: u64) -> ThreadTrace {
        let key = ThreadKey::of(&ev.who);
        let (from, to) = (
            ev.start_ns.saturating_sub(1_000_000),
            ev.start_ns + ev.dur_at(now_ns) + 5_000_000,
        );
        let mut t = ThreadTrace {
            unseen: self.unseen,
            ..ThreadTrace::default()
        };
        for e in self
            .recent_trace
            .iter()
            .filter(|e| e.key == key && e.t_ns >= from && e.t_ns <= to)
        {
            add_to_trace(&mut t, &e.kind);
        }
        t
    }

    /// The target whose device a block waited on: a writer's own, or for an
    /// observed thread the target whose bdi its trace events name.
    fn device_of(&self, ev: &Blocked, trace: Option<&ThreadTrace>) -> Option<usize> {
        match &ev.who {
            Who::Writer { target, .. } => Some(*target),
            Who::Process { .. } => {
                let bdi = trace?.bdi.as_ref()?;
                self.target_bdis
                    .iter()
                    .position(|b| b.as_ref() == Some(bdi))
            }
        }
    }

    /// Worst kernel figures over the intervals a stall spans.
    fn counters(&self, ev: &Blocked, now_ns: u64, dev: Option<usize>) -> Counters {
        let first = ev.start_ns / self.interval_ns;
        let last = (ev.start_ns + ev.dur_at(now_ns)) / self.interval_ns;
        let mut c = Counters::default();
        for (_, k) in self
            .recent_kernel
            .iter()
            .filter(|(i, _)| *i >= first && *i <= last)
        {
            c.dirty_kib = c.dirty_kib.max(k.dirty_kib);
            c.dirty_thresh_kib = k.dirty_thresh_kib.or(c.dirty_thresh_kib);
            c.dirty_bg_thresh_kib = k.dirty_bg_thresh_kib.or(c.dirty_bg_thresh_kib);
            if let Some(Some(d)) = dev.and_then(|i| k.devs.get(i)) {
                c.util_pct = Some(c.util_pct.unwrap_or(0.0).max(d.util_pct));
                c.w_await_ms = Some(c.w_await_ms.unwrap_or(0.0).max(d.w_await_ms));
                c.inflight = Some(c.inflight.unwrap_or(0).max(d.inflight));
            }
        }
        c
    }

    /// Stalls in progress at `now_ns`, with the cause as far as it is known
    /// yet (same rules as for finished stalls).
    pub fn live(&self, now_ns: u64) -> Live {
        Live {
            now_ns,
            stalls: self
                .in_progress
                .iter()
                .chain(&self.obs_live)
                .cloned()
                .chain(self.sched_live(now_ns))
                .map(|b| self.explain(b, now_ns))
                .collect(),
        }
    }

    /// Attributes a block: its thread's trace events, the kernel counters
    /// of the intervals it spans, its kernel stack.
    fn explain(&self, mut ev: Blocked, now_ns: u64) -> Stall {
        let trace = self.tracing.then(|| self.thread_trace(&ev, now_ns));
        let dev = self.device_of(&ev, trace.as_ref());
        let counters = self.counters(&ev, now_ns, dev);
        // The watchdog's stacks of a writer's op: of the wait most of them
        // were in, else the first (one that names no wait).
        if let Some((first, samples)) = self.stacks.get(&(ThreadKey::of(&ev.who), ev.start_ns)) {
            ev.stack = Some(samples.best().unwrap_or(first).to_string());
        }
        let mode = ev
            .who
            .target()
            .and_then(|t| self.state.get(t))
            .map(|s| s.mode);
        let mut why = attribute(&StallFacts {
            op: ev.op,
            mode,
            dur_ms: ev.dur_at(now_ns) as f64 / 1e6,
            trace: trace.as_ref(),
            counters: &counters,
            stack: ev.stack.as_deref(),
            call: ev.call.as_ref().map(|c| c.name.as_str()),
        });
        // The call its entry event named, not one read off a stack.
        if let Some(c) = &ev.call {
            let e = &mut why.evidence;
            e.syscall = Some(c.name.clone());
            if e.sync_op.is_some() {
                e.sync_op = Some(c.name.clone());
            }
        }
        Stall { ev, why }
    }

    /// Kernel figures of the interval being emitted, from its raw sample.
    fn emit_kernel(&mut self, index: u64, raw: Option<&ProcSample>) -> Option<KernelInterval> {
        let kernel = match (&self.last_raw, raw) {
            (Some(prev), Some(cur)) => Some(derive(prev, cur, self.page_kib)),
            _ => None,
        };
        if let Some(k) = &kernel {
            self.recent_kernel.push_back((index, k.clone()));
        }
        if let Some(r) = raw {
            self.last_raw = Some(r.clone());
        }
        kernel
    }

    /// Each target's figures of the interval; its stalls go to `blocks`.
    fn emit_targets(&self, accs: Vec<Acc>, blocks: &mut Vec<Blocked>) -> Vec<TargetInterval> {
        let tracing = self.tracing;
        accs.into_iter()
            .enumerate()
            .map(|(target, mut a)| {
                let st = self.state[target];
                let count = a.stalls.len() as u32;
                blocks.append(&mut a.stalls);
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
                    minflt: a.counts.minflt,
                    majflt: a.counts.majflt,
                    bdp: (tracing && !self.unseen.throttle).then_some(a.counts.bdp),
                    wb_waits: (tracing && !self.unseen.page_waits).then_some(a.counts.wb_waits),
                    failed: self.failed.get(target).copied().unwrap_or(false),
                }
            })
            .collect()
    }

    /// Forgets trace events and kernel intervals too old to explain a stall.
    fn trim_history(&mut self, t_end: u64) {
        let trace_horizon = t_end.saturating_sub(TRACE_HISTORY_NS);
        while self
            .recent_trace
            .front()
            .is_some_and(|e| e.t_ns < trace_horizon)
        {
            self.recent_trace.pop_front();
        }
        let oldest = t_end.saturating_sub(HISTORY_NS) / self.interval_ns;
        while self.recent_kernel.front().is_some_and(|(i, _)| *i < oldest) {
            self.recent_kernel.pop_front();
        }
    }

    fn emit(&mut self, len_ns: u64) -> Snapshot {
        self.pending_at(self.next_emit);
        let mut p = self.pending.pop_front().expect("pending interval exists");
        self.add_totals(&p.accs);
        let index = self.next_emit;
        self.next_emit += 1;
        let t_end = index * self.interval_ns + len_ns;
        let kernel = self.emit_kernel(index, p.raw.as_ref());
        let mut blocks = p.obs_stalls;
        let targets = self.emit_targets(p.accs, &mut blocks);
        blocks.sort_by_key(|s| s.start_ns);
        let mut stalls: Vec<Stall> = blocks.into_iter().map(|e| self.explain(e, t_end)).collect();
        self.chain_siblings(&mut stalls, t_end);
        stalls.append(&mut p.chain_stalls);
        stalls.sort_by_key(|s| s.ev.start_ns);
        for s in &stalls {
            self.stacks
                .remove(&(ThreadKey::of(&s.ev.who), s.ev.start_ns));
        }
        self.add_stalls(&stalls);
        let observed = self.emit_observed(p.observed, &stalls);
        self.trim_history(t_end);
        Snapshot {
            index,
            t_s: t_end as f64 / 1e9,
            interval_s: len_ns as f64 / 1e9,
            targets,
            stalls,
            kernel,
            raw: p.raw,
            wb_starts: (self.tracing && !self.unseen.flusher).then_some(p.wb_starts),
            in_progress: self
                .in_progress
                .iter()
                .chain(&self.obs_live)
                .cloned()
                .chain(self.sched_live(t_end))
                .filter(|p| p.start_ns < t_end)
                .collect(),
            events: std::mem::take(&mut self.events),
            observed,
        }
    }

    /// The observed processes' figures of one interval (their stalls are
    /// among `stalls`).
    fn emit_observed(
        &mut self,
        mut accs: BTreeMap<u32, ObsAcc>,
        stalls: &[Stall],
    ) -> Vec<ObservedInterval> {
        let tracing = self.tracing;
        let timing = self.timing();
        let mut out = Vec::with_capacity(self.watched.len());
        for w in &self.watched {
            let a = accs.remove(&w.pid).unwrap_or_default();
            let t = self.obs_totals.entry(w.pid).or_default();
            // Gone before, or not sampled in this interval (the tail while
            // stopping): nothing to show.
            if t.exited || (a.samples == 0 && !a.exited) {
                continue;
            }
            let write_bytes = (!a.unreadable_io).then_some(a.write_bytes);
            // Sampled blocks: waits under the threshold are not seen.
            let blocked_by = match timing {
                BlockTiming::Sched => blocked_by_cause(&a, stalls, w.pid),
                BlockTiming::Sampled => BTreeMap::new(),
            };
            for (c, ns) in &blocked_by {
                *t.blocked_by.entry(*c).or_default() += ns;
            }
            t.starved_ns += a.starved_ns;
            t.exited = a.exited;
            t.d_threads_max = t.d_threads_max.max(a.d_max);
            t.minflt += a.counts.minflt;
            t.majflt += a.counts.majflt;
            t.write_bytes = match (t.write_bytes, write_bytes) {
                (Some(x), Some(y)) => Some(x + y),
                _ => None,
            };
            out.push(ObservedInterval {
                pid: w.pid,
                comm: w.comm.clone(),
                alive: !a.exited,
                joined: a.joined,
                samples: a.samples,
                threads: a.threads,
                d_threads_max: a.d_max,
                d_threads_mean: if a.samples > 0 {
                    (a.d_sum as f64 / f64::from(a.samples) * 100.0).round() / 100.0
                } else {
                    0.0
                },
                minflt: a.counts.minflt,
                majflt: a.counts.majflt,
                write_bytes,
                bdp: (tracing && !self.unseen.throttle).then_some(a.counts.bdp),
                wb_waits: (tracing && !self.unseen.page_waits).then_some(a.counts.wb_waits),
                stalls: stalls
                    .iter()
                    .filter(|s| s.ev.who.pid() == Some(w.pid))
                    .count() as u32,
                timing,
                blocked_ms: (timing == BlockTiming::Sched).then(|| a.blocked_ns as f64 / 1e6),
                starved_ms: self
                    .chains
                    .is_some()
                    .then(|| (a.starved_ns as f64 / 1e3).round() / 1e3),
                blocked_by_cause: blocked_by
                    .into_iter()
                    .map(|(c, ns)| (c, (ns as f64 / 1e3).round() / 1e3))
                    .collect(),
            });
        }
        // Exited processes leave the per-interval work (their totals stay):
        // a server forking a process per client would otherwise make every
        // interval walk all it ever forked.
        let totals = &self.obs_totals;
        self.watched
            .retain(|w| !totals.get(&w.pid).is_some_and(|t| t.exited));
        out
    }
}

/// One process's blocked time in an interval by cause, ns: its runs under
/// the threshold (classified when they ended) and its stalls by their
/// shares (a D stall's scaled to the time it was blocked; a chained
/// sleep's whole).
fn blocked_by_cause(a: &ObsAcc, stalls: &[Stall], pid: u32) -> BTreeMap<Cause, u64> {
    let mut by = a.blocked_by.clone();
    for s in stalls.iter().filter(|s| s.ev.who.pid() == Some(pid)) {
        let dur = s.ev.dur();
        let scale = match s.ev.blocked_ns {
            Some(b) if dur > 0 => b as f64 / dur as f64,
            _ => 1.0,
        };
        for sh in s.why.shares_of(dur as f64 / 1e6) {
            *by.entry(sh.cause).or_default() += (sh.ms * scale * 1e6).round() as u64;
        }
    }
    by
}

/// Adds one trace event of the stalled thread to what attribution sees.
fn add_to_trace(t: &mut ThreadTrace, kind: &TraceKind) {
    match kind {
        TraceKind::BalanceDirtyPages {
            bdi,
            limit,
            setpoint,
            dirty,
            pause_ms,
            ..
        } => {
            t.throttle.add_pause(*pause_ms);
            t.dirty_pages = Some(*dirty);
            t.limit_pages = Some(*limit);
            t.setpoint_pages = Some(*setpoint);
            t.bdi = Some(bdi.clone());
        }
        TraceKind::WaitWriteback { bdi, .. } => {
            t.wb_waits += 1;
            t.bdi.get_or_insert_with(|| bdi.clone());
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
