//! The aggregator: a pure fold of writer messages into per-interval
//! snapshots. `fold` takes a message, `tick(now)` emits every interval whose
//! end plus a grace period has passed. No threads, no clock: tests drive it.
//!
//! One module per responsibility: `acc` what an interval being filled
//! holds; `ingest` the messages, trace events and kernel samples folded
//! in; `observe` the observed processes (who is watched, their samples,
//! their figures per interval); `explain` a block's attribution (its
//! thread's trace, the kernel counters it spans, its stack); `emit` the
//! intervals out as snapshots, and the summary; `sched` and `siblings` as
//! before.

use crate::config::Mode;
use crate::fold::attribute::Unseen;
use crate::fold::blocks::{BlockTimer, Samples};
use crate::fold::calls::CallTracker;
use crate::fold::chains::Chains;
use crate::model::kernel::{KernelInterval, ProcSample, TraceKind};
use crate::model::observed::Watched;
use crate::model::ops::new_histogram;
use crate::model::snapshot::{ObservedSummary, RunEvent, SpanUnion, TargetSummary};
use crate::model::stall::{Blocked, Stall, Who};
use acc::{Acc, Pending};
use hdrhistogram::Histogram;
use rustc_hash::FxHashMap as HashMap;
use std::collections::{BTreeMap, VecDeque};

mod acc;
mod emit;
mod explain;
mod ingest;
mod observe;
mod sched;
mod siblings;

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

/// Whose a kernel thread id is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// Our writer: target, thread.
    Writer(usize, u32),
    /// An observed process's.
    Process(u32),
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
    /// Observed processes' write-path calls counted (`set_call_pattern`).
    calls: Option<CallTracker>,
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
            tids: HashMap::default(),
            tracing: false,
            unseen: Unseen::default(),
            recent_trace: VecDeque::new(),
            recent_kernel: VecDeque::new(),
            stacks: HashMap::default(),
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
            obs_union: HashMap::default(),
            last_throttle: HashMap::default(),
            end_ns: None,
            trace_through: None,
            failed: Vec::new(),
            obs_live: Vec::new(),
            target_bdis: Vec::new(),
            sched: None,
            blocks: BlockTimer::default(),
            calls: None,
            chains: None,
            gone: HashMap::default(),
            wakers: HashMap::default(),
        }
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

    /// The observed threads' write-path system calls are traced: each
    /// process's `CallPattern` is counted from them (their absence then
    /// means none were made).
    pub fn set_call_pattern(&mut self) {
        self.calls = Some(CallTracker::default());
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

    /// Every trace event up to `t_ns` has been folded (the session drained
    /// the trace after `t_ns`).
    pub fn set_trace_through(&mut self, t_ns: u64) {
        self.trace_through = Some(t_ns);
    }
}

#[cfg(test)]
mod tests;
