//! Intervals out: each one emitted as a snapshot once its grace has
//! passed (`tick`), the rest and the summary when the run ends (`finish`).

use super::acc::{Acc, Pending};
use super::{Aggregator, ThreadKey, GRACE_NS, HISTORY_NS, TRACE_HISTORY_NS};
use crate::fold::derive::derive;
use crate::model::kernel::{KernelInterval, ProcSample};
use crate::model::snapshot::{tally, Snapshot, SpanUnion, Summary, TargetInterval};
use crate::model::stall::{Blocked, Stall, Who};

impl Aggregator {
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
}
