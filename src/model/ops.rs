//! What the sources hand the fold: timed ops (`Batch`), the in-flight slot a
//! writer publishes for the watchdog, and the messages on the one channel
//! into the aggregator. The writer-side timer that fills these is
//! `source::writer::recorder`.

use crate::base::clock::Clock;
use crate::model::stall::Blocked;
use crossbeam::channel::{Receiver, Sender};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Latencies are recorded in microseconds, 1 µs .. 60 s, 2 significant digits:
/// exact below 256 µs, within 1 % above (fio's buckets are within 1.6 %).
/// Three digits would be 0.1 % but makes each recorded interval histogram
/// half again as large, and the recording must stay under 10 MiB/h.
pub const HIST_MAX_US: u64 = 60_000_000;
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 2).expect("static histogram bounds")
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
    /// Ops of this batch that took at least the stall threshold.
    pub stalls: Vec<Blocked>,
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
    /// The watchdog saw an op older than the threshold that has not
    /// returned (`dur_ns` None, with the thread's kernel stack).
    Blocked(Blocked),
    /// One sample of the observed processes (observe mode).
    Observe(Box<crate::model::observed::ObsTick>),
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
