//! What is folded in: the sources' messages, trace events and the kernel
//! samples taken at interval boundaries.

use super::{Aggregator, Owner, ThreadEvent, ThreadKey, MAX_TRACE_EVENTS};
use crate::fold::blocks::Samples;
use crate::model::kernel::{ProcSample, TraceKind};
use crate::model::msg::{Batch, EventKind, Msg};
use crate::model::snapshot::RunEvent;
use crate::model::stall::Who;

impl Aggregator {
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
}
