//! Timing on the writer threads. A `Recorder` lives on one writer thread and
//! is the only thing it touches per op: a thread-local HdrHistogram and plain
//! counters, handed over as a `Batch` through a channel. No lock, no
//! allocation per op: histograms are recycled through a return channel.
//!
//! Batches are handed over at every interval boundary and also every
//! `FLUSH_EVERY` within an interval, so the ops a thread finished just before
//! it blocks for seconds are not held back until the block ends (that would
//! smear the throughput drop over the wrong intervals).

use crossbeam::channel::{Receiver, Sender};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Latencies are recorded in microseconds, 1 µs .. 60 s, 2 significant digits:
/// exact below 256 µs, within 1 % above (fio's buckets are within 1.6 %).
/// Three digits would be 0.1 % but makes each recorded interval histogram
/// half again as large, and the recording must stay under 10 MiB/h.
pub const HIST_MAX_US: u64 = 60_000_000;
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 2).expect("static histogram bounds")
}

/// The monotonic clock of one run; times are nanoseconds since its start.
/// `mono_base_ns` is CLOCK_MONOTONIC at the start, to place kernel trace
/// timestamps (trace_clock=mono) on the same axis.
#[derive(Clone, Copy, Debug)]
pub struct Clock(Instant, u64);

/// CLOCK_MONOTONIC in nanoseconds (what `Instant` and trace_clock=mono use).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Clock {
    pub fn new() -> Self {
        let i = Instant::now();
        Clock(i, mono_ns())
    }
    /// Converts a CLOCK_MONOTONIC time to run time (0 if before the start).
    pub fn from_mono(&self, mono: u64) -> u64 {
        mono.saturating_sub(self.1)
    }
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
    pub fn start(&self) -> Instant {
        self.0
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// What a timed operation was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// Appending one record (the op whose latency is the headline).
    Write,
    /// msync / fdatasync / syncfs.
    Sync,
    /// Journal mode: waiting for room in a full journal before the write.
    JournalWait,
    /// A write that had to wait for a free segment: the disk budget was
    /// full and the oldest segment had to be synced before it could go.
    SegmentWait,
    /// Observe mode: another process's thread in uninterruptible sleep
    /// (we do not know which call it made).
    Blocked,
}

impl OpKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Write => "write",
            OpKind::Sync => "sync",
            OpKind::JournalWait => "journal_wait",
            OpKind::SegmentWait => "segment_wait",
            OpKind::Blocked => "blocked",
        }
    }
    fn code(self) -> u64 {
        match self {
            OpKind::Write => 1,
            OpKind::Sync => 2,
            OpKind::JournalWait => 3,
            OpKind::SegmentWait => 4,
            OpKind::Blocked => 5,
        }
    }
    fn from_code(c: u64) -> Option<OpKind> {
        match c {
            1 => Some(OpKind::Write),
            2 => Some(OpKind::Sync),
            3 => Some(OpKind::JournalWait),
            4 => Some(OpKind::SegmentWait),
            5 => Some(OpKind::Blocked),
            _ => None,
        }
    }
}

/// A finished op that took at least the stall threshold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StallEvent {
    pub target: usize,
    pub thread: u32,
    pub op: OpKind,
    pub start_ns: u64,
    pub dur_ns: u64,
}

/// One thread's measurements over part of one interval.
#[derive(Debug)]
pub struct Batch {
    pub target: usize,
    pub thread: u32,
    /// Index of the interval its ops finished in.
    pub interval: u64,
    pub ops: u64,
    pub bytes: u64,
    /// Latency of write ops, µs.
    pub hist: Histogram<u64>,
    /// Latency of sync ops, µs.
    pub sync_hist: Histogram<u64>,
    pub stalls: Vec<StallEvent>,
    /// Page faults of this thread since its previous batch (getrusage).
    pub minflt: u64,
    pub majflt: u64,
}

/// A thread's published "I am inside an op since…": 0 when idle, else
/// `(start_ns + 1) << 3 | kind`. Written by the writer, read by the watchdog.
#[derive(Debug, Default)]
pub struct InFlight(AtomicU64, std::sync::atomic::AtomicU32);

impl InFlight {
    /// The kernel thread id of the thread that owns this slot (0 = not started).
    pub fn tid(&self) -> u32 {
        self.1.load(Ordering::Acquire)
    }
    /// Called once by the owning thread.
    pub fn set_tid_to_current(&self) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        self.1.store(tid, Ordering::Release);
    }
    #[inline]
    pub fn enter(&self, start_ns: u64, kind: OpKind) {
        self.0
            .store(((start_ns + 1) << 3) | kind.code(), Ordering::Release);
    }
    #[inline]
    pub fn leave(&self) {
        self.0.store(0, Ordering::Release);
    }
    /// The op in progress and its start time, if any.
    pub fn current(&self) -> Option<(u64, OpKind)> {
        let v = self.0.load(Ordering::Acquire);
        if v == 0 {
            return None;
        }
        Some(((v >> 3) - 1, OpKind::from_code(v & 7)?))
    }
}

/// Messages from writer, sync and watchdog threads to the aggregator.
#[derive(Debug)]
pub enum Msg {
    Batch(Box<Batch>),
    /// The watchdog saw an op older than the threshold that has not returned.
    StallInProgress {
        target: usize,
        thread: u32,
        op: OpKind,
        start_ns: u64,
        /// Where the thread sat in the kernel when it was seen (root:
        /// /proc/self/task/TID/stack, else wchan), innermost first.
        stack: Option<String>,
    },
    /// One sample of the observed processes (observe mode).
    Observe(Box<crate::observe::ObsTick>),
    /// Something a person should see: disk full, a failed thread.
    Event {
        target: usize,
        /// The writer thread it is about, when it is about one (a thread
        /// that died mid-op has no stall in progress any more).
        thread: Option<u32>,
        t_ns: u64,
        kind: EventKind,
        message: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    TargetFull,
    WriterError,
    Info,
}

/// The clock and periods every thread of a run shares.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub clock: Clock,
    pub interval: Duration,
    pub threshold: Duration,
}

/// Where a thread hands its batches, and where emptied histograms come back.
#[derive(Clone, Debug)]
pub struct Handover {
    pub tx: Sender<Msg>,
    pub spare: Receiver<Histogram<u64>>,
}

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

    /// Like `begin`, but latency counts from `intended_ns` (rate limiting).
    #[inline]
    pub fn begin_at(&mut self, intended_ns: u64, now: u64, kind: OpKind) -> u64 {
        self.maybe_flush(now);
        self.inflight.enter(intended_ns, kind);
        intended_ns
    }

    /// Ends an op that started at `start_ns`; `bytes` counted for writes.
    #[inline]
    pub fn end(&mut self, start_ns: u64, kind: OpKind, bytes: u64) {
        let now = self.clock.now_ns();
        self.inflight.leave();
        self.maybe_flush(now);
        let dur = now.saturating_sub(start_ns);
        let us = (dur / 1000).clamp(1, HIST_MAX_US);
        match kind {
            OpKind::Sync => self.cur.sync_hist.saturating_record(us),
            OpKind::Write | OpKind::JournalWait | OpKind::SegmentWait | OpKind::Blocked => {
                self.cur.hist.saturating_record(us);
                self.cur.ops += 1;
                self.cur.bytes += bytes;
            }
        }
        if dur >= self.threshold_ns {
            self.cur.stalls.push(StallEvent {
                target: self.target,
                thread: self.thread,
                op: kind,
                start_ns,
                dur_ns: dur,
            });
            if self.cur.stalls.len() == self.cur.stalls.capacity() {
                self.flush(now);
            }
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
