//! Timing on the writer threads. A `Recorder` lives on one writer thread and
//! is the only thing it touches per op: a thread-local HdrHistogram and plain
//! counters, handed over as a `Batch` through a channel. No lock, no
//! allocation per op: histograms are recycled through a return channel.
//!
//! Batches are handed over at every interval boundary and also every
//! `FLUSH_EVERY` within an interval, so the ops a thread finished just before
//! it blocks for seconds are not held back until the block ends (that would
//! smear the throughput drop over the wrong intervals).

use crate::base::clock::Clock;
use crate::model::msg::{Batch, EventKind, Handover, Msg, Timing};
use crate::model::ops::{new_histogram, InFlight, OpKind, FLUSH_EVERY, HIST_MAX_US};
use crate::model::stall::Blocked;
use crossbeam::channel::{Receiver, Sender};
use hdrhistogram::Histogram;
use std::sync::Arc;

/// Per-thread timing state; see the module doc.
pub struct Recorder {
    target: usize,
    thread: u32,
    clock: Clock,
    interval_ns: u64,
    threshold_ns: u64,
    tx: Sender<Msg>,
    spare: Receiver<Histogram<u64>>,
    cur: Batch,
    next_flush_ns: u64,
    faults: (u64, u64),
    /// The sibling writer whose segment roll the current op waited behind.
    behind: Option<u32>,
    /// When the current call began: the stall is the call, whatever its
    /// latency counts from (`begin_at`).
    call_ns: u64,
    pub inflight: Arc<InFlight>,
}

impl Recorder {
    pub fn new(
        target: usize,
        thread: u32,
        timing: &Timing,
        handover: Handover,
        inflight: Arc<InFlight>,
    ) -> Self {
        let interval_ns = timing.interval.as_nanos() as u64;
        let now = timing.clock.now_ns();
        let mut r = Recorder {
            target,
            thread,
            clock: timing.clock,
            interval_ns,
            threshold_ns: timing.threshold.as_nanos() as u64,
            tx: handover.tx,
            spare: handover.spare,
            cur: fresh_batch(target, thread, 0, new_histogram(), new_histogram()),
            next_flush_ns: 0,
            faults: thread_faults(),
            behind: None,
            call_ns: now,
            inflight,
        };
        r.inflight.set_tid_to_current();
        r.cur.interval = now / interval_ns;
        r.next_flush_ns = r.flush_deadline(now);
        r
    }

    fn flush_deadline(&self, now: u64) -> u64 {
        let boundary = (now / self.interval_ns + 1) * self.interval_ns;
        boundary.min(now + FLUSH_EVERY.as_nanos() as u64)
    }

    /// This writer's thread number.
    #[inline]
    pub fn thread(&self) -> u32 {
        self.thread
    }

    /// The current op waited for sibling `thread`'s segment roll: its
    /// stall, if it is one, says so (a plain field: no lock, no allocation).
    #[cold]
    pub fn behind(&mut self, thread: u32) {
        self.behind = Some(thread);
    }

    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Marks the start of an op (for the watchdog) and returns its start time.
    #[inline]
    pub fn begin(&mut self, kind: OpKind) -> u64 {
        let now = self.clock.now_ns();
        self.begin_at(now, now, kind)
    }

    /// Like `begin`, but latency counts from `intended_ns` (rate limiting:
    /// an op that starts late because an earlier one blocked has that wait
    /// in its latency). The call itself begins `now`: a stall is one
    /// blocking call, so the late ops behind it are not stalls of their own.
    #[inline]
    pub fn begin_at(&mut self, intended_ns: u64, now: u64, kind: OpKind) -> u64 {
        self.maybe_flush(now);
        self.call_ns = now;
        self.inflight.enter(now, kind);
        intended_ns
    }

    /// When the current call began (not its intended start).
    #[inline]
    pub fn call_start(&self) -> u64 {
        self.call_ns
    }

    /// Ends an op whose latency counts from `start_ns`; `bytes` counted for
    /// writes. It is a stall when the call (from `call_start`) took the
    /// threshold or longer.
    #[inline]
    pub fn end(&mut self, start_ns: u64, kind: OpKind, bytes: u64) {
        let now = self.clock.now_ns();
        self.inflight.leave();
        self.maybe_flush(now);
        let dur = now.saturating_sub(start_ns);
        let call = now.saturating_sub(self.call_ns);
        let behind = self.behind.take();
        let us = (dur / 1000).clamp(1, HIST_MAX_US);
        match kind {
            OpKind::Sync => self.cur.sync_hist.saturating_record(us),
            OpKind::Write
            | OpKind::JournalWait
            | OpKind::SegmentWait
            | OpKind::Blocked
            | OpKind::Wait => {
                self.cur.hist.saturating_record(us);
                self.cur.ops += 1;
                self.cur.bytes += bytes;
            }
        }
        if call >= self.threshold_ns {
            let mut b = Blocked::writer(self.target, self.thread, kind, self.call_ns, call);
            b.behind = behind;
            self.cur.stalls.push(b);
            // Handed over at once (stalls are rare by definition): a thread
            // that sleeps after its op (the periodic sync) would otherwise
            // hold the stall back for a whole period, and the banner would
            // keep counting an op that has ended.
            self.flush(now);
        }
    }

    #[inline]
    fn maybe_flush(&mut self, now: u64) {
        if now >= self.next_flush_ns {
            self.flush(now);
        }
    }

    /// Hands the current batch over (if it holds anything) and starts a new one.
    #[cold]
    pub fn flush(&mut self, now: u64) {
        let idx = now / self.interval_ns;
        let has_data =
            self.cur.ops > 0 || !self.cur.stalls.is_empty() || !self.cur.sync_hist.is_empty();
        if has_data {
            let f = thread_faults();
            self.cur.minflt = f.0 - self.faults.0;
            self.cur.majflt = f.1 - self.faults.1;
            self.faults = f;
            let hist = self.spare.try_recv().unwrap_or_else(|_| new_histogram());
            let sync_hist = self.spare.try_recv().unwrap_or_else(|_| new_histogram());
            let next = fresh_batch(self.target, self.thread, idx, hist, sync_hist);
            let done = std::mem::replace(&mut self.cur, next);
            let _ = self.tx.send(Msg::Batch(Box::new(done)));
        } else {
            self.cur.interval = idx;
        }
        self.next_flush_ns = self.flush_deadline(now);
    }

    /// Sends a user-visible event from this thread.
    pub fn event(&self, kind: EventKind, message: String) {
        let _ = self.tx.send(Msg::Event {
            target: self.target,
            thread: Some(self.thread),
            t_ns: self.clock.now_ns(),
            kind,
            message,
        });
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.inflight.leave();
        let now = self.clock.now_ns();
        self.flush(now);
    }
}

const STALLS_PER_BATCH: usize = 32;

fn fresh_batch(
    target: usize,
    thread: u32,
    interval: u64,
    hist: Histogram<u64>,
    sync_hist: Histogram<u64>,
) -> Batch {
    Batch {
        target,
        thread,
        interval,
        ops: 0,
        bytes: 0,
        hist,
        sync_hist,
        stalls: Vec::with_capacity(STALLS_PER_BATCH),
        minflt: 0,
        majflt: 0,
    }
}

/// This thread's (minor, major) page faults so far.
fn thread_faults() -> (u64, u64) {
    // SAFETY: zeroed rusage is valid; RUSAGE_THREAD reports the caller.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    (ru.ru_minflt as u64, ru.ru_majflt as u64)
}
