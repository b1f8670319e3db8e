//! Why a stall happened, as every layer names it: the cause, how sure we
//! are, and the evidence behind it. `stack_cause` is the vocabulary of kernel
//! frames (which wait a frame means), shared by the observer that keeps the
//! most telling stack and by attribution in the fold.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The thread slept in balance_dirty_pages (dirty-page throttling).
    DirtyThrottle,
    /// The thread waited for a page under writeback.
    WritebackWait,
    /// The op was (or waited for) msync / fdatasync / syncfs.
    Sync,
    /// Journal mode: no room in the journal until the next commit.
    JournalFull,
    /// No throttling or waits seen, but the device was saturated.
    Device,
    Unknown,
}

impl Cause {
    pub const ALL: [Cause; 6] = [
        Cause::DirtyThrottle,
        Cause::WritebackWait,
        Cause::Sync,
        Cause::JournalFull,
        Cause::Device,
        Cause::Unknown,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::DirtyThrottle => "dirty_throttle",
            Cause::WritebackWait => "writeback_wait",
            Cause::Sync => "sync",
            Cause::JournalFull => "journal_full",
            Cause::Device => "device",
            Cause::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Seen directly: the op kind, or the thread's own trace events.
    High,
    /// Inferred from system-wide counters (no tracing).
    Low,
}

impl Confidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::High => "high",
            Confidence::Low => "low",
        }
    }
}

/// The evidence behind a cause; only the fields that apply are set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle_events: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pause_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dirty_pages: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_pages: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setpoint_pages: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wb_waits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bdi: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_op: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dirty_kib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle_start_kib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub util_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub w_await_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inflight: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_stack: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    pub cause: Cause,
    pub confidence: Confidence,
    pub evidence: Evidence,
}

/// Kernel frames where a thread waits for its own I/O to reach the device
/// (an O_DIRECT write in flight, a full or throttled request queue).
const DEVICE_WAITS: [&str; 6] = [
    "iomap_dio_rw",
    "__blockdev_direct_IO",
    "blkdev_direct_IO",
    "rq_qos_wait",
    "wbt_wait",
    "blk_mq_get_tag",
];

/// Kernel frames where a thread waits for the filesystem journal to commit
/// (ext4's jbd2, xfs's log), which fsync/msync/syncfs force.
const FS_JOURNAL_WAITS: [&str; 5] = [
    "wait_transaction_locked",
    "jbd2_log_wait_commit",
    "jbd2_journal_lock_updates",
    "xlog_wait",
    "xfs_log_force",
];

/// What a mid-stall kernel stack says, if it is conclusive.
pub fn stack_cause(stack: &str) -> Option<Cause> {
    let has = |fs: &[&str]| fs.iter().any(|f| stack.contains(f));
    if stack.contains("balance_dirty_pages") {
        Some(Cause::DirtyThrottle)
    } else if has(&[
        "folio_wait_writeback",
        "folio_wait_stable",
        "wait_on_page_writeback",
    ]) {
        Some(Cause::WritebackWait)
    } else if has(&FS_JOURNAL_WAITS) {
        // Waiting for the filesystem's journal commit, which a sync forces.
        Some(Cause::Sync)
    } else if has(&DEVICE_WAITS) {
        Some(Cause::Device)
    } else {
        None
    }
}
