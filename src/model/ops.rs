//! Timed operations: what an op was (`OpKind`), the latency histogram every
//! op is recorded in, and the in-flight slot a writer publishes for the
//! watchdog. The writer-side timer is `source::writer::recorder`; what it
//! hands over is in `model::msg`.

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
    /// Observe mode: a thread asleep (S) waiting for another thread that
    /// was itself in a kernel write-path wait (its wake-up chain says so).
    Wait,
}

impl OpKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Write => "write",
            OpKind::Sync => "sync",
            OpKind::JournalWait => "journal_wait",
            OpKind::SegmentWait => "segment_wait",
            OpKind::Blocked => "blocked",
            OpKind::Wait => "wait",
        }
    }
    fn code(self) -> u64 {
        match self {
            OpKind::Write => 1,
            OpKind::Sync => 2,
            OpKind::JournalWait => 3,
            OpKind::SegmentWait => 4,
            OpKind::Blocked => 5,
            OpKind::Wait => 6,
        }
    }
    fn from_code(c: u64) -> Option<OpKind> {
        match c {
            1 => Some(OpKind::Write),
            2 => Some(OpKind::Sync),
            3 => Some(OpKind::JournalWait),
            4 => Some(OpKind::SegmentWait),
            5 => Some(OpKind::Blocked),
            6 => Some(OpKind::Wait),
            _ => None,
        }
    }
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
