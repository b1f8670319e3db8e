//! Observed threads timed by the scheduler's events: their D-state blocks
//! joined into runs (`fold::blocks`), their sleeps in S judged by wake-up
//! chains (`fold::chains`), and the runs that become stalls.

use super::{Aggregator, Owner, MAX_WAKERS, WAKER_PID};
use crate::fold::blocks::{CallOpen, Run};
use crate::fold::chains::{ChainStall, Chains, Span};
use crate::model::cause::{stack_cause, Attribution, Cause};
use crate::model::kernel::TraceKind;
use crate::model::observed::BlockTiming;
use crate::model::ops::OpKind;
use crate::model::stall::{Blocked, Call, Stall, Who};

impl Aggregator {
    /// Observed threads' blocks come from the scheduler's events from now
    /// on; a run of blocks of at least `threshold_ns` is a stall.
    /// With `chains`, sleeps in S are followed to their waker too.
    pub fn set_sched_timing(&mut self, threshold_ns: u64, chains: bool) {
        self.sched = Some(threshold_ns);
        self.chains = chains.then(|| Chains::new(threshold_ns));
    }

    /// Threads blocked now (scheduler timing) for a millisecond or more,
    /// at `now_ns`, whose wait no stack names yet: the session reads their
    /// kernel stacks (`block_stack`). Not only blocks that may become
    /// stalls: a waker's short waits (a WAL writer's fdatasync) name what
    /// the threads waiting for it waited on. Younger blocks are mostly
    /// over by the time their stack is read.
    pub fn blocks_wanting_stack(&self, now_ns: u64) -> Vec<u32> {
        match self.sched {
            Some(_) => self
                .blocks
                .wanting_stack(now_ns, crate::fold::blocks::MERGE_GAP_NS),
            None => Vec::new(),
        }
    }

    /// The kernel stack of a thread `blocks_wanting_stack` named.
    pub fn block_stack(&mut self, tid: u32, stack: String) {
        self.blocks.stack(tid, stack);
    }

    /// Threads in a traced call that blocked, whose fd's file is wanted:
    /// (tid, fd); the session reads the link (`call_file`).
    pub fn calls_wanting_file(&self) -> Vec<(u32, i64)> {
        self.blocks.calls_wanting_file()
    }

    /// The file of a call `calls_wanting_file` named (empty: unreadable).
    pub fn call_file(&mut self, tid: u32, file: String) {
        self.blocks.call_file(tid, file);
    }

    /// A watched thread forked `child` (of process `tgid`, named `comm`):
    /// its thread, or a new process of the watched tree, known from now
    /// on, before the sampler next lists them.
    pub fn forked(&mut self, parent: u32, child: u32, tgid: u32, comm: &str) {
        let Some(pid) = self.process_of(parent).filter(|p| *p != WAKER_PID) else {
            return;
        };
        if self.tids.contains_key(&child) {
            return;
        }
        if tgid != pid && !self.watched.iter().any(|w| w.pid == tgid) {
            // Its `joined` mark comes with the sampler's first sight.
            self.watch(crate::model::observed::Watched {
                pid: tgid,
                comm: comm.to_string(),
            });
        }
        self.tids.insert(child, Owner::Process(tgid));
        self.obs_tids_changed = true;
    }

    /// How observed threads' blocks are timed.
    pub fn timing(&self) -> BlockTiming {
        if self.sched.is_some() {
            BlockTiming::Sched
        } else {
            BlockTiming::Sampled
        }
    }

    /// The process of an observed thread, or of one that left lately.
    pub(super) fn process_of(&self, tid: u32) -> Option<u32> {
        match self.tids.get(&tid) {
            Some(Owner::Process(pid)) => Some(*pid),
            Some(Owner::Writer(..)) => None,
            None => self
                .gone
                .get(&tid)
                .map(|(pid, _)| *pid)
                .or_else(|| self.wakers.contains_key(&tid).then_some(WAKER_PID)),
        }
    }

    /// A scheduler event of an observed thread (true: it was one).
    pub(super) fn fold_sched(&mut self, t_ns: u64, tid: u32, kind: &TraceKind) -> bool {
        let Some(pid) = self.process_of(tid) else {
            return matches!(
                kind,
                TraceKind::SchedBlock { .. }
                    | TraceKind::SchedWake { .. }
                    | TraceKind::SysEnter { .. }
                    | TraceKind::SysExit { .. }
            );
        };
        self.count_call(pid, tid, t_ns, kind);
        match kind {
            TraceKind::SchedBlock { comm, sleep: false } => {
                self.blocks.block(pid, tid, t_ns, *comm);
                if let Some(c) = self.chains.as_mut() {
                    c.blocked(tid, t_ns);
                }
            }
            // A waker outside the watched processes counts by its kernel
            // waits only: its sleeps (a client waiting for its server)
            // would chain idle waits to it.
            TraceKind::SchedBlock { sleep: true, .. } if pid == WAKER_PID => {}
            TraceKind::SchedBlock { comm, sleep: true } => {
                self.blocks.running(tid);
                if let Some(c) = self.chains.as_mut() {
                    c.sleep(pid, tid, t_ns, *comm);
                }
            }
            TraceKind::SchedWake {
                waker,
                waker_comm,
                irq,
            } => {
                if !self.blocks.is_open(tid) {
                    self.chain_wake(tid, t_ns, (*waker, *irq));
                    return true;
                }
                let (ended, dur) = self.blocks.wake(tid, t_ns, (*waker, waker_comm.clone()));
                let idx = t_ns / self.interval_ns;
                if pid != WAKER_PID {
                    self.pending_at(idx)
                        .observed
                        .entry(pid)
                        .or_default()
                        .blocked_ns += dur;
                }
                if let Some(run) = ended {
                    self.run_done(run);
                }
            }
            // Where a thread is about to sleep: not a call on the write
            // path, a site for the chains.
            TraceKind::SysEnter {
                addr: Some(addr), ..
            } => {
                if let Some(c) = self.chains.as_mut() {
                    c.site(tid, *addr);
                }
            }
            TraceKind::SysEnter {
                call, fd, bytes, ..
            } => {
                let c = CallOpen {
                    name: *call,
                    entry_ns: t_ns,
                    fd: *fd,
                    bytes: *bytes,
                    file: None,
                };
                if let Some(run) = self.blocks.enter(tid, c) {
                    self.run_done(run);
                }
            }
            TraceKind::SysExit { .. } => {
                if let Some(run) = self.blocks.exit(tid, t_ns) {
                    self.run_done(run);
                }
            }
            _ => return false,
        }
        true
    }

    /// A write-path call's entry or exit counted into its process's
    /// pattern (`set_call_pattern`); a waker's calls are not its own.
    fn count_call(&mut self, pid: u32, tid: u32, t_ns: u64, kind: &TraceKind) {
        if pid == WAKER_PID {
            return;
        }
        let Some(mut calls) = self.calls.take() else {
            return;
        };
        match kind {
            TraceKind::SysEnter {
                call,
                fd,
                addr: None,
                ..
            } => calls.enter(tid, *call, *fd, t_ns),
            TraceKind::SchedBlock { comm, .. } => calls.name(tid, *comm),
            TraceKind::SysExit { call, ret } => {
                let idx = t_ns / self.interval_ns;
                let acc = &mut self.pending_at(idx).observed.entry(pid).or_default().calls;
                calls.exit(pid, tid, *call, *ret, t_ns, acc);
            }
            _ => {}
        }
        self.calls = Some(calls);
    }

    /// The wakeup of a thread asleep in S: a stall if its chain says so.
    pub(super) fn chain_wake(&mut self, tid: u32, t_ns: u64, waker: (u32, bool)) {
        let Some(c) = self.chains.as_mut() else {
            return;
        };
        let Some(since) = c.asleep_since(tid) else {
            return;
        };
        let long = c.is_long(since, t_ns);
        let current = self.blocks.last_run(waker.0).map(span_of);
        let woken = c.wake(tid, t_ns, waker, current);
        for s in c.take_starved() {
            let acc = self.pending_at(s.end_ns / self.interval_ns);
            acc.observed.entry(s.pid).or_default().starved_ns += s.end_ns - s.start_ns;
        }
        if long {
            self.learn_waker(t_ns, waker);
        }
        match woken {
            // A waker's own stalls only explain others'.
            Some(st) if st.pid != WAKER_PID => self.chain_done(st),
            _ => {}
        }
    }

    /// A watched thread (not a waker) woken from a long sleep by a task
    /// we do not trace: trace that task from now on, so that its waits can
    /// explain the next such sleep.
    pub(super) fn learn_waker(&mut self, t_ns: u64, (waker, irq): (u32, bool)) {
        if irq || waker == 0 || self.process_of(waker).is_some() {
            if let Some(seen) = self.wakers.get_mut(&waker) {
                *seen = t_ns;
            }
            return;
        }
        if self.wakers.len() >= MAX_WAKERS {
            let Some(oldest) = self.wakers.iter().min_by_key(|(_, t)| **t).map(|(w, _)| *w) else {
                return;
            };
            self.wakers.remove(&oldest);
        }
        self.wakers.insert(waker, t_ns);
        self.obs_tids_changed = true;
    }

    /// A sleep the chains explained: a stall of its process, in the
    /// interval it ended in.
    pub(super) fn chain_done(&mut self, c: ChainStall) {
        let comm = self
            .obs_totals
            .get(&c.pid)
            .map_or_else(String::new, |t| t.comm.clone());
        let stall = Stall {
            ev: Blocked {
                who: Who::Process {
                    pid: c.pid,
                    comm,
                    tid: c.tid,
                    thread_comm: c.comm,
                },
                op: OpKind::Wait,
                start_ns: c.start_ns,
                dur_ns: Some(c.end_ns - c.start_ns),
                stack: None,
                call: None,
                blocked_ns: None,
                behind: None,
            },
            why: Attribution {
                cause: c.cause,
                confidence: c.confidence,
                evidence: c.evidence,
                shares: c.shares,
                via: c.via,
            },
        };
        self.pending_at(c.end_ns / self.interval_ns)
            .chain_stalls
            .push(stall);
    }

    /// Runs of timer steps that ended by `now_ns`, judged: stalls, or the
    /// blocked time (`app_delay`) of their process in the interval they
    /// ended in.
    pub(super) fn finish_steps(&mut self, now_ns: u64) {
        let Some(c) = self.chains.as_mut() else {
            return;
        };
        let ongoing: Vec<Span> = self
            .blocks
            .ongoing()
            .iter()
            .map(|r| Span {
                end_ns: now_ns,
                ..span_of(r)
            })
            .collect();
        let delays = c.tick(now_ns, &ongoing);
        for st in delays.stalls {
            self.chain_done(st);
        }
        for d in delays.short.into_iter().filter(|d| d.pid != WAKER_PID) {
            let acc = self.pending_at(d.end_ns / self.interval_ns);
            let by = &mut acc.observed.entry(d.pid).or_default().blocked_by;
            *by.entry(Cause::AppDelay).or_default() += d.end_ns - d.start_ns;
        }
    }

    /// Threads the sampler sees in D with no block from the scheduler:
    /// blocked since before their tid joined the filter.
    pub(super) fn adopt_blocks(&mut self, ongoing: &[Blocked]) {
        for b in ongoing {
            if let Who::Process {
                pid,
                tid,
                thread_comm,
                ..
            } = &b.who
            {
                self.blocks
                    .adopt(*pid, *tid, b.start_ns, thread_comm, b.stack.clone());
            }
        }
    }

    /// A finished run of blocks: a stall of its process if long enough,
    /// in the interval it ended in.
    pub(super) fn run_done(&mut self, run: Run) {
        let (Some(threshold), Some(end)) = (self.sched, run.end_ns) else {
            return;
        };
        if let Some(c) = self.chains.as_mut() {
            c.add_run(span_of(&run));
        }
        if run.pid == WAKER_PID {
            return;
        }
        let dur = end.saturating_sub(run.start_ns);
        // A call is a stall by the time it was blocked (its running
        // between blocks is not a stall); a run of blocks by its length.
        let long = if run.call.is_some() {
            run.blocked_ns
        } else {
            dur
        };
        if long < threshold {
            let cause = self.quick_cause(&run);
            let acc = self.pending_at(end / self.interval_ns);
            let by = &mut acc.observed.entry(run.pid).or_default().blocked_by;
            *by.entry(cause).or_default() += run.blocked_ns;
            return;
        }
        let b = self.run_blocked(run, Some(dur));
        self.pending_at(end / self.interval_ns).obs_stalls.push(b);
    }

    /// The cause of a run too short to be a stall, cheaply: its stack's
    /// wait when one was read, a sync call's name, a write after its
    /// thread was throttled; else unknown.
    fn quick_cause(&self, run: &Run) -> Cause {
        if let Some(c) = run.stack.as_deref().and_then(stack_cause) {
            return c;
        }
        let call = run.call.as_ref().map(|c| c.name.as_str());
        match call {
            Some(c) if crate::model::cause::is_sync_call(c) => Cause::Sync,
            _ if self
                .last_throttle
                .get(&run.tid)
                .is_some_and(|t| *t >= run.start_ns) =>
            {
                Cause::DirtyThrottle
            }
            _ => Cause::Unknown,
        }
    }

    pub(super) fn run_blocked(&self, run: Run, dur_ns: Option<u64>) -> Blocked {
        let pid = run.pid;
        // From the totals: a process that exited has left `watched`.
        let comm = self
            .obs_totals
            .get(&pid)
            .map_or_else(String::new, |t| t.comm.clone());
        Blocked {
            who: Who::Process {
                pid,
                comm,
                tid: run.tid,
                thread_comm: run.comm,
            },
            op: OpKind::Blocked,
            start_ns: run.start_ns,
            dur_ns,
            stack: run.stack,
            blocked_ns: Some(run.blocked_ns),
            behind: None,
            call: run.call.map(|c| Call {
                name: c.name.to_string(),
                fd: c.fd,
                bytes: c.bytes,
                file: c.file.filter(|f| !f.is_empty()),
            }),
        }
    }

    /// Runs that can no longer grow at `now_ns` become stalls.
    pub(super) fn finish_runs(&mut self, now_ns: u64) {
        for run in self.blocks.finished(now_ns) {
            self.run_done(run);
        }
    }

    /// Scheduler-timed blocks of observed threads going on at `now_ns`,
    /// past the threshold.
    pub(super) fn sched_live(&self, now_ns: u64) -> Vec<Blocked> {
        let Some(threshold) = self.sched else {
            return Vec::new();
        };
        self.blocks
            .ongoing()
            .into_iter()
            .filter(|r| r.pid != WAKER_PID && now_ns.saturating_sub(r.start_ns) >= threshold)
            .map(|r| self.run_blocked(r, None))
            .collect()
    }
}

/// A D run as a wait that can explain the sleeps of the threads it wakes.
/// Inside a sync call by its entry event, the time is the sync's even
/// when no stack names the wait (none read, or read while runnable).
fn span_of(r: &Run) -> Span {
    let mut s = Span::d_run(
        (r.pid, r.tid, &r.comm),
        r.start_ns,
        r.end_ns.unwrap_or(r.start_ns + r.blocked_ns),
        r.stack.as_deref(),
    );
    if let Some(call) = r.call.as_ref().map(|c| c.name.as_str().to_string()) {
        if crate::model::cause::is_sync_call(&call) {
            if s.cause == Cause::Unknown {
                s.cause = Cause::Sync;
            }
            s.syscall.get_or_insert(call);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::blocks::Samples;
    use crate::model::kernel::Comm;

    fn run(call: &str, stack: Option<&str>) -> Run {
        Run {
            pid: 1,
            tid: 2,
            comm: "postgres".into(),
            start_ns: 0,
            end_ns: Some(120_000_000),
            blocked_ns: 120_000_000,
            blocks: 3,
            stack: stack.map(str::to_string),
            samples: Samples::default(),
            waker: None,
            call: Some(CallOpen {
                name: Comm::new(call),
                entry_ns: 0,
                fd: None,
                bytes: None,
                file: None,
            }),
        }
    }

    /// CI saw a sleeper chained behind a WAL fsync called `unknown`: the
    /// fsync's D runs had no stack naming a wait. Their call says sync.
    #[test]
    fn a_d_run_inside_a_sync_call_is_sync_without_a_telling_stack() {
        let s = span_of(&run("fsync", None));
        assert_eq!(
            (s.cause, s.syscall.as_deref()),
            (Cause::Sync, Some("fsync"))
        );
        let preempted = "preempt_schedule_common < __cond_resched < do_syscall_64";
        assert_eq!(
            span_of(&run("fdatasync", Some(preempted))).cause,
            Cause::Sync
        );
        // Outside a sync call nothing is guessed.
        assert_eq!(span_of(&run("write", None)).cause, Cause::Unknown);
    }
}
