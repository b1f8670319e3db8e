//! Wake-up chains: a watched thread asleep in S (a futex, a condition
//! variable, a lock) is stalled when the thread that woke it had just come
//! out of a kernel write-path wait that overlapped the sleep: the writer
//! waited for the flush thread, which waited in fsync for writeback. Its
//! time is split by what the waker was doing while it slept (the waker's D
//! runs by their cause, the waker's own chained sleeps by their shares, the
//! rest `unknown`). Idle waits stay out: a thread woken by a client, by a
//! timer, or by a thread that was just running is not stalled.
//!
//! A thread that sleeps on a timer in short steps, again and again, while
//! another thread of its process is in a kernel wait is `app_delay`: the
//! application holding its own writes back (RocksDB's write slowdown).
//! A run of such steps too short to be a stall still counts as the
//! thread's blocked time (`ShortDelay`): a slowdown broken into many short
//! runs loses no time.
//!
//! Pure: the aggregator feeds it the scheduler's events in time order and
//! the D runs `fold::blocks` finishes.

use crate::model::cause::{
    add_share, largest, read_stack, Cause, Confidence, Evidence, Hop, Share, COVERED,
};
use crate::model::kernel::Comm;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;

/// The waker must have left its wait at most this long before it woke the
/// sleeper: it went (nearly) straight from the wait to the wakeup. RocksDB's
/// flush thread takes 10–20 ms after its fdatasync (the manifest, the
/// version) before it wakes the writer.
pub const WAKE_GAP_NS: u64 = 20_000_000;
/// A waker that has not slept since its wait ended went straight from it
/// to the wakeup however long it ran on a busy CPU, up to this.
pub const WAKE_RUN_NS: u64 = 250_000_000;
/// Or this share of the sleep, when more: on a busy machine that work
/// after the fdatasync waits for a CPU too (21 ms seen after a 3.2 s
/// fdatasync that covered a writer's 3.5 s stop), and a waker whose waits
/// covered seconds of the sleep did not come from somewhere else.
pub const WAKE_GAP_SHARE: u64 = 50;
/// The waker's waits must cover at least this share of a sleep for it to
/// be a stall: a thread that waited mostly for another one's work on the
/// CPU (a main thread joining its workers) is not stalled on writes.
pub const MIN_COVERED: f64 = 0.5;
/// And its longest wait alone a quarter: a main thread joining a worker
/// that stalled now and then (hundreds of short waits) waited for the
/// worker, not for one write.
pub const MAIN_COVERED: f64 = 0.25;
/// Chains are walked this many hops deep.
pub const MAX_HOPS: usize = 4;
/// Waits kept per thread, and for how long, to explain later wakeups.
const MAX_SPANS: usize = 256;
const HISTORY_NS: u64 = 120_000_000_000;
/// Timer sleeps of this length are an application's delay steps (RocksDB
/// sleeps 1001 µs at a time), when at least `DELAY_MIN_SLEEPS` follow one
/// another less than `DELAY_GAP_NS` apart.
const DELAY_STEP_NS: (u64, u64) = (300_000, 3_000_000);
const DELAY_GAP_NS: u64 = 1_000_000;
const DELAY_MIN_SLEEPS: u32 = 5;
/// A shorter run counts as blocked time (not as a stall) from this many
/// steps: one timer sleep alone is no delay loop.
const SHORT_MIN_SLEEPS: u32 = 2;
/// The steps of one run are of one length, within this ratio of its first:
/// a delay loop sleeps the same time again and again, a backoff that
/// doubles its sleep (Go's sysmon) is no delay.
const STEP_RATIO: f64 = 1.5;

/// A wait of one thread: a D run, or a sleep that was a stall itself.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// "D" or "S".
    pub state: &'static str,
    pub cause: Cause,
    pub wait: Option<String>,
    pub syscall: Option<String>,
    /// A chained sleep's shares and chain (empty for a D run).
    pub shares: Vec<Share>,
    pub via: Vec<Hop>,
}

impl Span {
    /// A D run of `tid` with the kernel stack that names its wait.
    pub fn d_run(ids: (u32, u32, &str), start_ns: u64, end_ns: u64, stack: Option<&str>) -> Span {
        let r = stack.map(read_stack);
        Span {
            pid: ids.0,
            tid: ids.1,
            comm: ids.2.to_string(),
            start_ns,
            end_ns,
            state: "D",
            cause: r.as_ref().and_then(|r| r.cause).unwrap_or(Cause::Unknown),
            wait: r.as_ref().and_then(|r| r.wait.map(str::to_string)),
            syscall: r.and_then(|r| r.syscall),
            shares: Vec::new(),
            via: Vec::new(),
        }
    }

    fn overlap(&self, from: u64, to: u64) -> u64 {
        self.end_ns.min(to).saturating_sub(self.start_ns.max(from))
    }

    /// This span as a hop, `ms` of the waker's waits overlapping the
    /// sleeper's sleep.
    fn hop(&self, ms: f64) -> Hop {
        Hop {
            tid: self.tid,
            comm: self.comm.clone(),
            state: self.state.to_string(),
            wait: self.wait.clone(),
            syscall: self.syscall.clone(),
            cause: self.cause,
            ms,
        }
    }
}

/// A sleep (or a run of delay steps) that was a stall.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainStall {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub cause: Cause,
    pub confidence: Confidence,
    pub evidence: Evidence,
    pub shares: Vec<Share>,
    pub via: Vec<Hop>,
}

#[derive(Clone, Debug)]
struct Asleep {
    pid: u32,
    start_ns: u64,
    comm: Comm,
    /// The futex word it sleeps on, when its futex call was traced.
    site: Option<u64>,
}

/// A sleep that its waker's kernel wait explains, at a place where the
/// thread also sleeps when idle: it waited for work that was held up
/// upstream (starved), not for a result (stalled).
#[derive(Clone, Debug, PartialEq)]
pub struct Starved {
    pub pid: u32,
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// At most this many idle wait places are kept per thread.
const MAX_IDLE_SITES: usize = 32;
/// A place is where a thread waits when idle when it holds at least this
/// share of the thread's idle sleeps.
const IDLE_SHARE: f64 = 0.25;

/// The place a futex word stands for: its aligned 8-byte block. A glibc
/// condition variable's waiters sleep on one of its two group words
/// (`__g_signals[0]` and `[1]`, adjacent in one aligned block) and the
/// group flips as signals are consumed, so a thread idle on its queue's
/// condition variable alternates between the two words; a mutex's word
/// opens a block of its own.
fn place(addr: u64) -> u64 {
    addr & !7
}

/// A run of delay steps that was `app_delay` in kind (a sibling waited in
/// the kernel meanwhile) but too short to be a stall: under the threshold,
/// or fewer than `DELAY_MIN_SLEEPS` steps. Its time is the thread's
/// blocked time all the same.
#[derive(Clone, Debug, PartialEq)]
pub struct ShortDelay {
    pub pid: u32,
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub sleeps: u32,
}

/// The runs of delay steps `Chains::tick` found over, judged.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Delays {
    /// Long enough to be stalls.
    pub stalls: Vec<ChainStall>,
    /// Too short: blocked time only.
    pub short: Vec<ShortDelay>,
}

/// Consecutive timer sleeps of one thread.
#[derive(Clone, Debug)]
struct Steps {
    pid: u32,
    comm: String,
    start_ns: u64,
    end_ns: u64,
    sleeps: u32,
    /// The first step's length: the others are about as long.
    step_ns: u64,
    /// A sleep of another kind ended it; it can be judged.
    closed: bool,
}

impl Steps {
    /// Whether a timer sleep of `dur` is one more step of this run.
    fn same_step(&self, dur: u64) -> bool {
        let (a, b) = (dur as f64, self.step_ns as f64);
        a < b * STEP_RATIO && b < a * STEP_RATIO
    }
}

#[derive(Debug, Default)]
pub struct Chains {
    threshold_ns: u64,
    asleep: HashMap<u32, Asleep>,
    spans: HashMap<u32, VecDeque<Span>>,
    steps: HashMap<u32, Steps>,
    /// Each thread's latest futex wait word, until its next sleep.
    next_site: HashMap<u32, u64>,
    /// Words each thread was seen to sleep on while idle: a long sleep
    /// there woken by a timer, or by a thread that had waited on nothing.
    /// Each with how many idle sleeps were there (see `idle_site`).
    idle_sites: HashMap<u32, VecDeque<(u64, u32)>>,
    /// When each thread last went to sleep (S or D).
    last_sleep: HashMap<u32, u64>,
    starved: Vec<Starved>,
    /// Runs a step that could not join ended, judged at the next tick.
    over: Vec<(u32, Steps)>,
}

impl Chains {
    /// Sleeps of at least `threshold_ns` can be stalls.
    pub fn new(threshold_ns: u64) -> Chains {
        Chains {
            threshold_ns,
            ..Chains::default()
        }
    }

    /// A watched thread went to sleep in S.
    pub fn sleep(&mut self, pid: u32, tid: u32, t_ns: u64, comm: impl Into<Comm>) {
        let site = self.next_site.remove(&tid);
        self.last_sleep.insert(tid, t_ns);
        self.asleep.insert(
            tid,
            Asleep {
                pid,
                start_ns: t_ns,
                comm: comm.into(),
                site,
            },
        );
    }

    /// A watched thread (or a waker) went to sleep in D at `t_ns`.
    pub fn blocked(&mut self, tid: u32, t_ns: u64) {
        self.last_sleep.insert(tid, t_ns);
    }

    /// A watched thread entered a futex wait on `addr`: its next sleep is
    /// there.
    pub fn site(&mut self, tid: u32, addr: u64) {
        self.next_site.insert(tid, addr);
    }

    /// Sleeps found starved since the last call.
    pub fn take_starved(&mut self) -> Vec<Starved> {
        std::mem::take(&mut self.starved)
    }

    /// The sleep `a` of `tid` was idle: its place is one where `tid`
    /// waits for work, once more.
    fn idle_at(&mut self, tid: u32, a: &Asleep) {
        let Some(site) = a.site.map(place) else {
            return;
        };
        let q = self.idle_sites.entry(tid).or_default();
        if let Some(e) = q.iter_mut().find(|e| e.0 == site) {
            e.1 += 1;
            return;
        }
        if q.len() >= MAX_IDLE_SITES {
            q.pop_front();
        }
        q.push_back((site, 1));
    }

    /// Whether `a` sleeps where `tid` waits when idle: a place that holds
    /// at least `IDLE_SHARE` of its idle sleeps. Not any place seen idle
    /// once: a lock the thread's siblings take in turn is sometimes
    /// released by one that waited on nothing (Ceph's op threads: 64 idle
    /// sleeps on their queue, 2 on such a lock, then 3 s on that lock
    /// behind a sibling stuck in a throttle, which is a stall).
    fn idle_site(&self, tid: u32, a: &Asleep) -> bool {
        let (Some(site), Some(q)) = (a.site.map(place), self.idle_sites.get(&tid)) else {
            return false;
        };
        let total: u32 = q.iter().map(|e| e.1).sum();
        q.iter()
            .find(|e| e.0 == site)
            .is_some_and(|e| f64::from(e.1) >= IDLE_SHARE * f64::from(total))
    }

    /// Whether `waker` was in any kernel wait during `[start, end)`.
    fn waited(&self, waker: u32, start: u64, end: u64, current: Option<&Span>) -> bool {
        current.is_some_and(|c| c.overlap(start, end) > 0)
            || self
                .spans
                .get(&waker)
                .is_some_and(|q| q.iter().any(|s| s.overlap(start, end) > 0))
    }

    /// Since when `tid` is asleep in S as far as the events tell.
    pub fn asleep_since(&self, tid: u32) -> Option<u64> {
        self.asleep.get(&tid).map(|a| a.start_ns)
    }

    /// Whether a sleep from `start_ns` to `end_ns` is long enough to be a stall.
    pub fn is_long(&self, start_ns: u64, end_ns: u64) -> bool {
        end_ns.saturating_sub(start_ns) >= self.threshold_ns
    }

    /// A D run of a watched thread ended: kept to explain the sleeps of
    /// the threads it wakes.
    pub fn add_run(&mut self, span: Span) {
        self.keep(span);
    }

    fn keep(&mut self, span: Span) {
        let q = self.spans.entry(span.tid).or_default();
        if q.len() >= MAX_SPANS {
            q.pop_front();
        }
        q.push_back(span);
    }

    /// A watched thread asleep in S was woken at `t_ns` by `waker` (in a
    /// hardware interrupt when `irq`). `current` is the waker's D run
    /// not yet handed to `add_run` (it may still grow), if any. Returns
    /// the stall the sleep was, if it was one.
    pub fn wake(
        &mut self,
        tid: u32,
        t_ns: u64,
        waker: (u32, bool),
        current: Option<Span>,
    ) -> Option<ChainStall> {
        let a = self.asleep.remove(&tid)?;
        let dur = t_ns.saturating_sub(a.start_ns);
        let (waker, irq) = waker;
        if irq && (DELAY_STEP_NS.0..=DELAY_STEP_NS.1).contains(&dur) {
            self.step(tid, &a, t_ns);
            return None;
        }
        let behind = !irq && self.just_stepped(waker, tid, a.pid, t_ns);
        if let Some(s) = self.steps.get_mut(&tid).filter(|s| !s.closed) {
            if (dur <= DELAY_STEP_NS.1 || behind)
                && a.start_ns.saturating_sub(s.end_ns) <= DELAY_GAP_NS
            {
                // A short wait between steps (the mutex the application
                // takes to check again) is part of the delay, and so is a
                // wait for a sibling's steps (writers queued behind the
                // one that sleeps for them all).
                s.end_ns = t_ns;
            } else {
                s.closed = true;
            }
        }
        if dur < self.threshold_ns || waker == tid {
            return None;
        }
        // Woken by a timer, or by a thread that waited on nothing: idle.
        if irq || waker == 0 || !self.waited(waker, a.start_ns, t_ns, current.as_ref()) {
            self.idle_at(tid, &a);
            return None;
        }
        let stall = self.explain(tid, &a, t_ns, waker, current)?;
        if self.idle_site(tid, &a) {
            self.starved.push(Starved {
                pid: a.pid,
                tid,
                start_ns: a.start_ns,
                end_ns: t_ns,
            });
            return None;
        }
        self.keep(Span {
            pid: a.pid,
            tid,
            comm: a.comm.to_string(),
            start_ns: a.start_ns,
            end_ns: t_ns,
            state: "S",
            cause: stall.cause,
            wait: stall.via.last().and_then(|h| h.wait.clone()),
            syscall: None,
            shares: stall.shares.clone(),
            via: stall.via.clone(),
        });
        Some(stall)
    }

    /// Whether `waker`, another thread of process `pid`, woke `tid` at
    /// `t_ns` straight out of a run of delay steps.
    fn just_stepped(&self, waker: u32, tid: u32, pid: u32, t_ns: u64) -> bool {
        waker != tid
            && self.steps.get(&waker).is_some_and(|w| {
                !w.closed && w.pid == pid && t_ns.saturating_sub(w.end_ns) <= DELAY_STEP_NS.1
            })
    }

    /// One more timer step of `tid`: joins its run of steps, or starts one
    /// (the run it ends is judged at the next tick).
    fn step(&mut self, tid: u32, a: &Asleep, t_ns: u64) {
        let dur = t_ns.saturating_sub(a.start_ns);
        if let Some(s) = self.steps.get_mut(&tid) {
            if !s.closed && a.start_ns.saturating_sub(s.end_ns) <= DELAY_GAP_NS && s.same_step(dur)
            {
                s.end_ns = t_ns;
                s.sleeps += 1;
                return;
            }
        }
        let run = Steps {
            pid: a.pid,
            comm: a.comm.to_string(),
            start_ns: a.start_ns,
            end_ns: t_ns,
            sleeps: 1,
            step_ns: dur,
            closed: false,
        };
        if let Some(old) = self.steps.insert(tid, run) {
            self.over.push((tid, old));
        }
    }

    /// Whether `waker` went straight from its wait `last` to waking a
    /// sleep of `start..end`: soon after (`WAKE_GAP_NS`, or a share of a
    /// long sleep), or without a sleep of its own since (it ran, on a CPU
    /// it may have waited for) up to `WAKE_RUN_NS`. Only a watched waker's
    /// sleeps in S are all seen; an outside waker's (pid 0) are not.
    fn straight_from(&self, waker: u32, last: &Span, start: u64, end: u64) -> bool {
        let gap = end - last.end_ns;
        let ran_since = last.pid != 0
            && self
                .last_sleep
                .get(&waker)
                .is_some_and(|s| *s <= last.end_ns);
        gap <= WAKE_GAP_NS.max((end - start) / WAKE_GAP_SHARE) || (ran_since && gap <= WAKE_RUN_NS)
    }

    /// The waker's waits overlapping the sleep `[a.start_ns, end)`: a
    /// stall when the last of them ended right before the wakeup.
    fn explain(
        &self,
        tid: u32,
        a: &Asleep,
        end: u64,
        waker: u32,
        current: Option<Span>,
    ) -> Option<ChainStall> {
        let start = a.start_ns;
        let mut waits: Vec<&Span> = self
            .spans
            .get(&waker)
            .map(|q| q.iter().filter(|s| s.overlap(start, end) > 0).collect())
            .unwrap_or_default();
        if let Some(c) = current.as_ref().filter(|c| c.overlap(start, end) > 0) {
            waits.push(c);
        }
        let last = waits
            .iter()
            .filter(|s| s.end_ns <= end)
            .max_by_key(|s| s.end_ns)?;
        if !self.straight_from(waker, last, start, end) {
            return None;
        }
        // A chain back to the sleeper: it waited for work its own earlier
        // work held up (a flush thread idle while the writer it woke waited
        // for its last flush), not for a write to finish.
        if waits.iter().any(|w| w.via.iter().any(|h| h.tid == tid)) {
            return None;
        }
        let dur_ms = (end - start) as f64 / 1e6;
        let mut shares = Vec::new();
        let mut covered = 0.0;
        for w in &waits {
            let ov = w.overlap(start, end) as f64 / 1e6;
            if w.shares.is_empty() {
                add_share(&mut shares, w.cause, ov);
            } else {
                let len = (w.end_ns - w.start_ns).max(1) as f64 / 1e6;
                for sh in &w.shares {
                    add_share(&mut shares, sh.cause, sh.ms * ov / len);
                }
            }
            covered += ov;
        }
        let covered = covered.min(dur_ms);
        if covered < MIN_COVERED * dur_ms {
            return None;
        }
        add_share(&mut shares, Cause::Unknown, dur_ms - covered);
        let known: f64 = shares
            .iter()
            .filter(|s| s.cause != Cause::Unknown)
            .map(|s| s.ms)
            .sum();
        // The hop names the waker's longest wait in the sleep (an fsync's
        // data writeback, not the short journal wait that ended it), with
        // all of its waits' time.
        let main = waits
            .iter()
            .max_by_key(|w| w.overlap(start, end))
            .unwrap_or(last);
        if (main.overlap(start, end) as f64 / 1e6) < MAIN_COVERED * dur_ms {
            return None;
        }
        let mut via = vec![main.hop(covered)];
        via.extend(main.via.iter().cloned());
        // Cut at the limit, or ending in a sleep: the root is not known,
        // and the cause is no more than likely.
        let cut = via.len() > MAX_HOPS;
        via.truncate(MAX_HOPS);
        let root = via.last().cloned();
        let rooted = !cut && root.as_ref().is_some_and(|h| h.state == "D");
        let cause = largest(&shares).unwrap_or(Cause::Unknown);
        Some(ChainStall {
            pid: a.pid,
            tid,
            comm: a.comm.to_string(),
            start_ns: start,
            end_ns: end,
            cause,
            confidence: if rooted && known >= COVERED * dur_ms {
                Confidence::High
            } else {
                Confidence::Low
            },
            evidence: root_evidence(root.as_ref(), cut),
            shares,
            via,
        })
    }

    /// Runs of timer steps that are over at `now_ns` (closed by another
    /// sleep or by a step that could not join, or their thread gone quiet),
    /// judged: `app_delay` when another thread of the process was in a
    /// kernel wait meanwhile (`ongoing`: D runs still going on, ended at
    /// `now_ns`); a stall when long enough, else blocked time only.
    /// `now_ns` must not be past the events seen: a run whose next step is
    /// not folded yet would be cut.
    pub fn tick(&mut self, now_ns: u64, ongoing: &[Span]) -> Delays {
        let quiet: Vec<u32> = self
            .steps
            .iter()
            .filter(|(tid, s)| {
                let quiet = match self.asleep.get(tid) {
                    // Asleep longer than a step: not one.
                    Some(a) => now_ns.saturating_sub(a.start_ns) > DELAY_STEP_NS.1,
                    None => now_ns.saturating_sub(s.end_ns) > DELAY_GAP_NS,
                };
                s.closed || quiet
            })
            .map(|(t, _)| *t)
            .collect();
        for tid in quiet {
            if let Some(s) = self.steps.remove(&tid) {
                self.over.push((tid, s));
            }
        }
        let mut out = Delays::default();
        for (tid, s) in std::mem::take(&mut self.over) {
            self.judge(tid, &s, ongoing, &mut out);
        }
        self.trim(now_ns);
        out
    }

    /// A run of steps that is over: a stall, blocked time, or nothing (no
    /// sibling in a kernel wait beside it: a timer loop; a lone sleep).
    fn judge(&self, tid: u32, s: &Steps, ongoing: &[Span], out: &mut Delays) {
        if s.sleeps < SHORT_MIN_SLEEPS {
            return;
        }
        // The longest kernel wait of another thread of the process
        // overlapping the steps.
        let Some(busy) = self
            .spans
            .values()
            .flatten()
            .chain(ongoing)
            .filter(|w| w.pid == s.pid && w.tid != tid && w.state == "D")
            .max_by_key(|w| w.overlap(s.start_ns, s.end_ns))
            .filter(|w| w.overlap(s.start_ns, s.end_ns) > 0)
        else {
            return;
        };
        let dur = s.end_ns - s.start_ns;
        if dur < self.threshold_ns || s.sleeps < DELAY_MIN_SLEEPS {
            out.short.push(ShortDelay {
                pid: s.pid,
                tid,
                start_ns: s.start_ns,
                end_ns: s.end_ns,
                sleeps: s.sleeps,
            });
            return;
        }
        let ms = dur as f64 / 1e6;
        out.stalls.push(ChainStall {
            pid: s.pid,
            tid,
            comm: s.comm.clone(),
            start_ns: s.start_ns,
            end_ns: s.end_ns,
            cause: Cause::AppDelay,
            confidence: Confidence::High,
            evidence: Evidence {
                timer_sleeps: Some(u64::from(s.sleeps)),
                ..Evidence::default()
            },
            shares: vec![Share {
                cause: Cause::AppDelay,
                ms,
            }],
            via: vec![busy.hop(busy.overlap(s.start_ns, s.end_ns) as f64 / 1e6)],
        });
    }

    /// Forgets a thread (its process is gone).
    pub fn forget(&mut self, tid: u32) {
        self.asleep.remove(&tid);
        self.spans.remove(&tid);
        self.steps.remove(&tid);
        self.last_sleep.remove(&tid);
        self.idle_sites.remove(&tid);
        self.next_site.remove(&tid);
    }

    /// Drops waits too old to explain a sleep that ends now.
    fn trim(&mut self, now_ns: u64) {
        let horizon = now_ns.saturating_sub(HISTORY_NS);
        self.spans.retain(|_, q| {
            while q.front().is_some_and(|s| s.end_ns < horizon) {
                q.pop_front();
            }
            !q.is_empty()
        });
    }
}

/// A chained stall's evidence: its root's call and wait, and whether the
/// chain was cut at the hop limit.
fn root_evidence(root: Option<&Hop>, cut: bool) -> Evidence {
    Evidence {
        syscall: root.and_then(|h| h.syscall.clone()),
        wait: root.and_then(|h| h.wait.clone()),
        sync_op: root
            .filter(|h| h.cause == Cause::Sync)
            .and_then(|h| h.syscall.clone()),
        chain_cut_at: cut.then_some(MAX_HOPS),
        ..Evidence::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const FSYNC: &str = "folio_wait_writeback < __filemap_fdatawait_range < do_fsync < sys_fsync";

    fn fsync_run(tid: u32, from_ms: u64, to_ms: u64) -> Span {
        Span::d_run((1, tid, "flush"), from_ms * MS, to_ms * MS, Some(FSYNC))
    }

    #[test]
    fn a_thread_waiting_for_an_fsync_is_stalled_by_it() {
        let mut c = Chains::new(20 * MS);
        c.sleep(1, 10, 100 * MS, "writer");
        // The flush thread (11) was in fsync 150..1100 ms and woke the
        // writer 2 ms after.
        c.add_run(fsync_run(11, 150, 1100));
        // A short wait of another kind ended its fsync: the hop is the fsync.
        c.add_run(Span::d_run(
            (1, 11, "flush"),
            1100 * MS + 200_000,
            1101 * MS,
            None,
        ));
        let s = c.wake(10, 1102 * MS, (11, false), None).expect("a stall");
        assert_eq!((s.start_ns, s.end_ns), (100 * MS, 1102 * MS));
        assert_eq!(s.cause, Cause::Sync);
        assert_eq!(s.confidence, Confidence::High);
        let total: f64 = s.shares.iter().map(|x| x.ms).sum();
        assert!((total - 1002.0).abs() < 1e-6, "shares add up: {total}");
        let sync = s.shares.iter().find(|x| x.cause == Cause::Sync).unwrap();
        assert!((sync.ms - 950.0).abs() < 1e-6);
        assert!((s.via[0].ms - 950.8).abs() < 1e-6, "all the waker's waits");
        assert_eq!(s.via.len(), 1);
        assert_eq!(s.via[0].tid, 11);
        assert_eq!(s.via[0].wait.as_deref(), Some("data writeback"));
        assert_eq!(s.evidence.sync_op.as_deref(), Some("fsync"));
    }

    #[test]
    fn idle_waits_are_not_stalls() {
        let mut c = Chains::new(20 * MS);
        // Woken by a thread that left its last wait long before.
        c.add_run(fsync_run(11, 150, 300));
        c.sleep(1, 10, 100 * MS, "writer");
        assert!(c.wake(10, 900 * MS, (11, false), None).is_none());
        // By a timer, by an unknown task, by a thread we know nothing of.
        for waker in [(0, false), (11, true), (99, false)] {
            c.sleep(1, 10, 1000 * MS, "writer");
            assert!(c.wake(10, 1500 * MS, waker, None).is_none());
        }
        // Shorter than the threshold.
        c.add_run(fsync_run(11, 1600, 1610));
        c.sleep(1, 10, 1600 * MS, "writer");
        assert!(c.wake(10, 1611 * MS, (11, false), None).is_none());
    }

    #[test]
    fn chains_walk_back_through_sleeping_wakers() {
        let mut c = Chains::new(20 * MS);
        // 12 waits for 11, which waits for 13's fsync; 10 waits for 12.
        c.sleep(1, 10, 0, "backend");
        c.sleep(1, 12, 50 * MS, "walwriter");
        c.add_run(Span::d_run(
            (1, 13, "flusher"),
            60 * MS,
            500 * MS,
            Some(FSYNC),
        ));
        let mid = c.wake(12, 501 * MS, (13, false), None).expect("12 stalled");
        assert_eq!(mid.via.len(), 1);
        let top = c.wake(10, 503 * MS, (12, false), None).expect("10 stalled");
        assert_eq!(top.via.iter().map(|h| h.tid).collect::<Vec<_>>(), [12, 13]);
        assert_eq!(top.via[0].state, "S");
        assert_eq!(top.via[1].state, "D");
        assert_eq!(top.cause, Cause::Sync);
        // 0..50 ms nobody it waited for was waiting: unknown, the rest sync.
        let unknown = top.shares.iter().find(|x| x.cause == Cause::Unknown);
        assert!(
            unknown.is_some_and(|u| u.ms > 50.0 && u.ms < 70.0),
            "{top:?}"
        );
    }

    #[test]
    fn a_chain_cut_at_the_hop_limit_says_so_and_is_not_high() {
        let mut c = Chains::new(20 * MS);
        // 10 ← 11 ← 12 ← 13 ← 14 ← 15's fsync: five hops to the root.
        for (k, tid) in [10u32, 11, 12, 13, 14].iter().enumerate() {
            c.sleep(1, *tid, k as u64 * MS, "t");
        }
        c.add_run(fsync_run(15, 10, 900));
        let mut waker = 15;
        let mut last = None;
        for (k, tid) in [14u32, 13, 12, 11, 10].iter().enumerate() {
            let s = c.wake(*tid, (901 + k as u64) * MS, (waker, false), None);
            last = Some(s.expect("each waited for the next"));
            waker = *tid;
        }
        let top = last.unwrap();
        assert_eq!(top.via.len(), MAX_HOPS);
        assert_eq!(top.evidence.chain_cut_at, Some(MAX_HOPS));
        assert_eq!(top.confidence, Confidence::Low, "no root: {top:?}");
    }

    #[test]
    fn a_thread_waiting_where_it_waits_when_idle_is_starved_not_stalled() {
        const QUEUE: u64 = 0x7f00_0000_1000; // the journal writer's work queue
        const LOCK: u64 = 0x7f00_0000_2000; // a lock the op thread holds
        let mut c = Chains::new(20 * MS);
        // Idle: 10 sleeps on its queue; 11 (which waited on nothing) wakes it.
        c.site(10, QUEUE);
        c.sleep(1, 10, 0, "journal");
        assert!(c.wake(10, 500 * MS, (11, false), None).is_none());
        // Later 11 is in fsync 600..1100 ms, then queues work for 10.
        c.add_run(fsync_run(11, 600, 1100));
        c.site(10, QUEUE);
        c.sleep(1, 10, 550 * MS, "journal");
        assert!(c.wake(10, 1101 * MS, (11, false), None).is_none());
        let starved = c.take_starved();
        assert_eq!(starved.len(), 1, "waiting for work held up upstream");
        assert_eq!(
            (starved[0].start_ns, starved[0].end_ns),
            (550 * MS, 1101 * MS)
        );
        // 12 waits on a lock 11 holds through its next fsync: stalled.
        c.add_run(fsync_run(11, 1200, 1700));
        c.site(12, LOCK);
        c.sleep(1, 12, 1150 * MS, "op");
        let s = c.wake(12, 1701 * MS, (11, false), None).expect("a stall");
        assert_eq!(s.cause, Cause::Sync);
        // Without the futex event (no site), as before: a stall.
        c.add_run(fsync_run(11, 1800, 2300));
        c.sleep(1, 10, 1750 * MS, "journal");
        assert!(c.wake(10, 2301 * MS, (11, false), None).is_some());
        assert!(c.take_starved().is_empty());
        // The queue's condition variable's other group word is the same
        // place: still starved; the lock's neighbour block is not.
        c.add_run(fsync_run(11, 2450, 2900));
        c.site(10, QUEUE + 4);
        c.sleep(1, 10, 2420 * MS, "journal");
        assert!(c.wake(10, 2901 * MS, (11, false), None).is_none());
        assert_eq!(c.take_starved().len(), 1, "the other group word");
        c.add_run(fsync_run(11, 3050, 3500));
        c.site(10, QUEUE + 8);
        c.sleep(1, 10, 3020 * MS, "journal");
        assert!(c.wake(10, 3501 * MS, (11, false), None).is_some());
        // 12 was idle once on LOCK (its holder had waited on nothing) but
        // waits for work on its own queue: the lock is no idle place.
        const OWN: u64 = 0x7f00_0000_3000;
        let idle = |c: &mut Chains, site: u64, at_ms: u64| {
            c.site(12, site);
            c.sleep(1, 12, at_ms * MS, "op");
            assert!(c.wake(12, (at_ms + 300) * MS, (13, false), None).is_none());
        };
        idle(&mut c, LOCK, 3600);
        for i in 0..4 {
            idle(&mut c, OWN, 4000 + i * 400);
        }
        c.add_run(fsync_run(11, 6000, 9000));
        c.site(12, LOCK);
        c.sleep(1, 12, 5990 * MS, "op");
        assert!(
            c.wake(12, 9001 * MS, (11, false), None).is_some(),
            "a stall"
        );
        assert!(c.take_starved().is_empty());
        c.add_run(fsync_run(11, 9100, 9500));
        c.site(12, OWN);
        c.sleep(1, 12, 9050 * MS, "op");
        assert!(c.wake(12, 9501 * MS, (11, false), None).is_none());
        assert_eq!(c.take_starved().len(), 1, "its own queue");
    }

    #[test]
    fn a_waker_that_ran_on_a_busy_cpu_after_its_wait_still_explains_the_sleep() {
        let mut c = Chains::new(20 * MS);
        // 11's fsync 150..1100 ms; it wakes 10 at 1130 ms, 30 ms later,
        // without having slept since (it waited for a CPU).
        c.blocked(11, 150 * MS);
        c.add_run(fsync_run(11, 150, 1100));
        c.sleep(1, 10, 100 * MS, "op");
        assert!(c.wake(10, 1130 * MS, (11, false), None).is_some());
        // The same, but 11 slept again at 1110 ms: not straight out of it.
        c.blocked(11, 1200 * MS);
        c.add_run(fsync_run(11, 1200, 2100));
        c.sleep(1, 11, 2110 * MS, "fstore");
        c.wake(11, 2112 * MS, (0, true), None);
        c.sleep(1, 10, 1150 * MS, "op");
        assert!(c.wake(10, 2130 * MS, (11, false), None).is_none());
    }

    #[test]
    fn waiting_mostly_for_cpu_work_or_for_oneself_is_not_a_stall() {
        let mut c = Chains::new(20 * MS);
        // 20 slept 1.2 s; 10's only wait in it was 100 ms of fsync.
        c.sleep(1, 20, 0, "main");
        c.add_run(fsync_run(10, 1_090, 1_190));
        assert!(c.wake(20, 1_200 * MS, (10, false), None).is_none());
        // 21 slept 1 s; 10 waited 40 times 20 ms: 80 % covered, but by
        // no wait longer than 2 %: it joined a worker, not a write.
        c.sleep(1, 21, 2_000 * MS, "main");
        for i in 0..40 {
            c.add_run(fsync_run(10, 2_000 + i * 25, 2_020 + i * 25));
        }
        assert!(c.wake(21, 3_000 * MS, (10, false), None).is_none());
        // 13 (a flush thread) idle; 12 waited for 13's last fsync, then
        // gave 13 work: 13 did not wait for a write.
        c.sleep(1, 13, 2_000 * MS, "flusher");
        c.sleep(1, 12, 2_010 * MS, "writer");
        c.add_run(fsync_run(13, 1_990, 2_400));
        assert!(c.wake(12, 2_401 * MS, (13, false), None).is_some());
        assert!(c.wake(13, 2_402 * MS, (12, false), None).is_none());
    }

    #[test]
    fn a_waker_still_in_its_run_counts_through_current() {
        let mut c = Chains::new(20 * MS);
        c.sleep(1, 10, 0, "writer");
        let cur = fsync_run(11, 5, 400);
        assert!(c.wake(10, 401 * MS, (11, false), Some(cur)).is_some());
    }

    #[test]
    fn timer_steps_while_a_sibling_waits_in_the_kernel_are_app_delay() {
        let mut c = Chains::new(20 * MS);
        // 40 sleeps of 1 ms, 20 µs apart, while 11 was in fsync.
        c.add_run(fsync_run(11, 0, 2000));
        let mut t = 100 * MS;
        for _ in 0..40 {
            c.sleep(1, 10, t, "writer");
            t += MS;
            assert!(c.wake(10, t, (0, true), None).is_none());
            t += 20_000;
        }
        assert_eq!(c.tick(t, &[]), Delays::default(), "may go on");
        let out = c.tick(t + 5 * MS, &[]).stalls;
        assert_eq!(out.len(), 1);
        let s = &out[0];
        assert_eq!(s.cause, Cause::AppDelay);
        assert_eq!(s.evidence.timer_sleeps, Some(40));
        assert_eq!(s.via[0].tid, 11);
        assert!(((s.end_ns - s.start_ns) as f64 / 1e6 - 40.78).abs() < 0.01);
        // The same steps with nobody waiting in the kernel: a timer loop.
        let mut c = Chains::new(20 * MS);
        let mut t = 0;
        for _ in 0..40 {
            c.sleep(1, 10, t, "sysmon");
            t += MS;
            c.wake(10, t, (0, true), None);
            t += 20_000;
        }
        assert_eq!(c.tick(t + 5 * MS, &[]), Delays::default());
    }

    /// `n` timer steps of `step_ns` each, 20 µs apart, from `t`; returns
    /// the time after the last.
    fn steps(c: &mut Chains, tid: u32, mut t: u64, n: u32, step_ns: u64) -> u64 {
        for _ in 0..n {
            c.sleep(1, tid, t, "writer");
            t += step_ns;
            assert!(c.wake(tid, t, (0, true), None).is_none());
            t += 20_000;
        }
        t
    }

    #[test]
    fn short_delay_runs_are_blocked_time_not_stalls() {
        let mut c = Chains::new(20 * MS);
        c.add_run(fsync_run(11, 0, 2000));
        // 3 steps (3 ms), then another kind of sleep: too few for a stall.
        let t = steps(&mut c, 10, 100 * MS, 3, MS);
        c.sleep(1, 10, t, "writer");
        assert!(c.wake(10, t + 50 * MS, (12, false), None).is_none());
        let d = c.tick(t + 50 * MS, &[]);
        assert!(d.stalls.is_empty());
        assert_eq!(d.short.len(), 1);
        let s = &d.short[0];
        assert_eq!((s.pid, s.tid, s.sleeps), (1, 10, 3));
        assert_eq!((s.start_ns, s.end_ns), (100 * MS, t - 20_000));
        // 10 steps, 10 ms: enough steps, under the threshold.
        let t = steps(&mut c, 10, 300 * MS, 10, MS);
        let d = c.tick(t + 5 * MS, &[]);
        assert_eq!(d.short.len(), 1);
        assert_eq!(d.short[0].sleeps, 10);
        // A lone timer sleep is no delay loop.
        let t = steps(&mut c, 10, 500 * MS, 1, MS);
        assert_eq!(c.tick(t + 5 * MS, &[]), Delays::default());
        // Nobody waiting in the kernel beside it: a timer loop.
        let t = steps(&mut c, 10, 3000 * MS, 3, MS);
        assert_eq!(c.tick(t + 5 * MS, &[]), Delays::default());
        // The sibling still in its wait (`ongoing`) counts too.
        let t = steps(&mut c, 10, 3100 * MS, 3, MS);
        let d = c.tick(t + 5 * MS, &[fsync_run(11, 3050, 3200)]);
        assert_eq!(d.short.len(), 1);
    }

    #[test]
    fn a_run_a_later_step_cannot_join_is_still_judged() {
        let mut c = Chains::new(20 * MS);
        c.add_run(fsync_run(11, 0, 2000));
        // 30 steps, 2 ms on the CPU (too long a gap), 30 more, before any
        // tick: two runs, both stalls.
        let t = steps(&mut c, 10, 100 * MS, 30, MS);
        let t = steps(&mut c, 10, t + 2 * MS, 30, MS);
        let d = c.tick(t + 5 * MS, &[]);
        assert_eq!(d.stalls.len(), 2, "{d:?}");
        assert!(d.stalls.iter().all(|s| s.evidence.timer_sleeps == Some(30)));
        // A step of another length starts a new run too.
        let t = steps(&mut c, 10, 500 * MS, 30, MS);
        let t = steps(&mut c, 10, t, 30, 2 * MS);
        let d = c.tick(t + 5 * MS, &[]);
        assert_eq!(d.stalls.len(), 2, "{d:?}");
    }

    #[test]
    fn a_doubling_backoff_is_no_delay() {
        let mut c = Chains::new(20 * MS);
        c.add_run(fsync_run(11, 0, 2000));
        // Go's sysmon after a while idle: 20 µs sleeps, then doubling.
        let mut t = 100 * MS;
        for us in [320, 640, 1280, 2560] {
            t = steps(&mut c, 10, t, 1, us * 1000);
        }
        assert_eq!(c.tick(t + 5 * MS, &[]), Delays::default());
    }

    #[test]
    fn writers_queued_behind_a_sibling_s_steps_are_delayed_too() {
        let mut c = Chains::new(20 * MS);
        c.add_run(fsync_run(11, 0, 2000));
        // Four writers take turns, 1.25 ms each: the leader sleeps a 1 ms
        // step, wakes the next 0.2 ms after it and waits (3.7 ms, longer
        // than a step) until the writer before it wakes it.
        let w = [10u32, 12, 13, 14];
        let slot = 1_250_000;
        for k in 0..40u64 {
            let tk = 100 * MS + k * slot;
            let me = w[(k % 4) as usize];
            let next = w[((k + 1) % 4) as usize];
            c.sleep(1, me, tk, "writer");
            assert!(c.wake(me, tk + MS, (0, true), None).is_none());
            if c.asleep_since(next).is_some() {
                assert!(c.wake(next, tk + 1_200_000, (me, false), None).is_none());
            }
            c.sleep(1, me, tk + 1_210_000, "writer");
        }
        let d = c.tick(200 * MS, &[]);
        assert!(d.short.is_empty(), "{d:?}");
        assert_eq!(d.stalls.len(), 4, "one run each: {d:?}");
        for s in &d.stalls {
            assert_eq!(s.evidence.timer_sleeps, Some(10), "its own steps");
            assert!(s.end_ns - s.start_ns > 45 * MS, "{s:?}");
        }
        // Woken by a sibling that was not stepping: the run ends there.
        let mut c = Chains::new(20 * MS);
        c.add_run(fsync_run(11, 0, 2000));
        let t = steps(&mut c, 10, 100 * MS, 10, MS);
        c.sleep(1, 10, t, "writer");
        c.wake(10, t + 4 * MS, (12, false), None);
        let t = steps(&mut c, 10, t + 4 * MS, 10, MS);
        let d = c.tick(t + 10 * MS, &[]);
        assert_eq!(d.short.len(), 2, "{d:?}");
    }

    #[test]
    fn a_long_sleep_allows_a_longer_way_from_the_wait_to_the_wakeup() {
        let mut c = Chains::new(20 * MS);
        // A 3.5 s stop; the flush thread's fdatasync covered it and it woke
        // the writer 21 ms after (its manifest work waited for a CPU).
        c.add_run(fsync_run(11, 130, 3420));
        c.sleep(1, 10, 100 * MS, "writer");
        assert!(c.wake(10, 3441 * MS, (11, false), None).is_some());
        // 21 ms after is too late for a 500 ms sleep (2 %: 10 ms; 20 ms).
        c.add_run(fsync_run(11, 4010, 4479));
        c.sleep(1, 10, 4000 * MS, "writer");
        assert!(c.wake(10, 4500 * MS, (11, false), None).is_none());
    }
}
