//! Observe mode: the processes watched, their samples folded into the
//! interval being filled, and their figures per interval.

use super::acc::ObsAcc;
use super::{Aggregator, Owner, GONE_GRACE_NS};
use crate::model::cause::Cause;
use crate::model::kernel::Comm;
use crate::model::observed::{BlockTiming, ObsTick, Watched};
use crate::model::snapshot::{ObservedInterval, ObservedSummary};
use crate::model::stall::{Stall, Who};
use std::collections::BTreeMap;

impl Aggregator {
    /// The processes observe mode watches (their figures appear in every
    /// snapshot from now on).
    pub fn set_observed(&mut self, watched: Vec<Watched>) {
        self.watched.clear();
        for w in watched {
            self.watch(w);
        }
    }

    /// One more process to observe (at start, or joined while running).
    pub(super) fn watch(&mut self, w: Watched) {
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

    /// The observed threads changed (`ObsTick::tids`, at `now`).
    fn retid(&mut self, now: u64, tids: Vec<(u32, u32)>) {
        // Threads that left stay known a while: the trace is drained
        // later than the sampler reports, and their last events (the
        // wait a thread woke another from before it exited) still come.
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
            if let Some(c) = self.calls.as_mut() {
                c.forget_thread(tid);
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

    pub(super) fn fold_observe(&mut self, t: ObsTick) {
        let t_ns = self
            .end_ns
            .map_or(t.t_ns, |e| t.t_ns.min(e.saturating_sub(1)));
        let idx = t_ns / self.interval_ns;
        if let Some(c) = self.calls.as_mut() {
            for (tid, comm) in &t.names {
                c.name(*tid, Comm::new(comm));
            }
        }
        if let Some(tids) = t.tids {
            self.retid(t.t_ns, tids);
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
        if let Some(c) = self.calls.as_mut() {
            t.exited.iter().for_each(|pid| c.forget(*pid));
        }
    }

    /// The observed processes' figures of one interval (their stalls are
    /// among `stalls`).
    pub(super) fn emit_observed(
        &mut self,
        mut accs: BTreeMap<u32, ObsAcc>,
        stalls: &[Stall],
    ) -> Vec<ObservedInterval> {
        let tracing = self.tracing;
        let timing = self.timing();
        let mut out = Vec::with_capacity(self.watched.len());
        for w in &self.watched {
            let mut a = accs.remove(&w.pid).unwrap_or_default();
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
                calls: self
                    .calls
                    .is_some()
                    .then(|| std::mem::take(&mut a.calls).finish(&w.comm)),
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
