//! A block's attribution: what tracing saw of its thread, the kernel
//! counters of the intervals it spans, its kernel stack.

use super::{Aggregator, ThreadKey};
use crate::fold::attribute::{attribute, Counters, StallFacts, ThreadTrace};
use crate::model::kernel::TraceKind;
use crate::model::stall::{Blocked, Live, Stall, Who};

impl Aggregator {
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
    pub(super) fn explain(&self, mut ev: Blocked, now_ns: u64) -> Stall {
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
