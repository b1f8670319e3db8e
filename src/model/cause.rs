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
    /// No throttling or waits seen, but the device was saturated; or the
    /// thread waited on the device queue or a cache flush outside a sync.
    Device,
    /// A page fault waited (reading a page in, allocating one), not on
    /// dirty throttling or a page under writeback.
    Fault,
    /// The application held its own writes back: the thread slept on a
    /// timer in short steps (RocksDB's write slowdown) while another of
    /// its process's threads was in a kernel write-path wait.
    AppDelay,
    Unknown,
}

impl Cause {
    pub const ALL: [Cause; 8] = [
        Cause::DirtyThrottle,
        Cause::WritebackWait,
        Cause::Sync,
        Cause::JournalFull,
        Cause::Device,
        Cause::Fault,
        Cause::AppDelay,
        Cause::Unknown,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::DirtyThrottle => "dirty_throttle",
            Cause::WritebackWait => "writeback_wait",
            Cause::Sync => "sync",
            Cause::JournalFull => "journal_full",
            Cause::Device => "device",
            Cause::Fault => "fault",
            Cause::AppDelay => "app_delay",
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
    /// The system call the thread was in, from its kernel stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall: Option<String>,
    /// What it waited for inside it ("data writeback", "journal commit",
    /// "device cache flush", …), from its kernel stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
    /// app_delay: how many short timer sleeps in a row the thread took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer_sleeps: Option<u64>,
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
    /// A wake-up chain followed no further than this many hops: its root
    /// (the kernel wait) is not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_cut_at: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    /// The headline: the cause with the largest share of the time.
    pub cause: Cause,
    /// High when direct evidence covers most of the time (`COVERED`).
    pub confidence: Confidence,
    pub evidence: Evidence,
    /// What the time went to, part by part; adds up to the stall's
    /// duration. Empty in recordings of older builds: all of it was `cause`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<Share>,
    /// The wake-up chain of a thread that slept waiting for another one:
    /// the thread that woke it first, the root (the kernel wait at the
    /// end of the chain) last. Empty when the thread itself waited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub via: Vec<Hop>,
}

/// Evidence must cover this share of a stall's time for high confidence.
pub const COVERED: f64 = 2.0 / 3.0;

/// Part of a stall's time and what it went to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Share {
    pub cause: Cause,
    pub ms: f64,
}

/// One hop of a wake-up chain: the thread waited for and what it was
/// doing while the stalled thread slept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    pub tid: u32,
    pub comm: String,
    /// "D" (a kernel wait), "S" (itself asleep, waiting for the next hop).
    pub state: String,
    /// What it waited for in the kernel ("data writeback"), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
    /// Its system call, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall: Option<String>,
    pub cause: Cause,
    /// How long that wait overlapped the stalled thread's sleep.
    pub ms: f64,
}

impl Attribution {
    /// A headline with direct evidence and nothing else.
    pub fn high(cause: Cause, evidence: Evidence) -> Attribution {
        Attribution {
            cause,
            confidence: Confidence::High,
            evidence,
            shares: Vec::new(),
            via: Vec::new(),
        }
    }
    /// The shares of a stall of `ms`: as recorded, or all of it the
    /// headline's (recordings of older builds).
    pub fn shares_of(&self, ms: f64) -> Vec<Share> {
        if self.shares.is_empty() {
            vec![Share {
                cause: self.cause,
                ms,
            }]
        } else {
            self.shares.clone()
        }
    }
    /// The root of the chain: the last hop's cause and wait, or the
    /// headline's when the thread waited itself.
    pub fn root(&self) -> Option<&Hop> {
        self.via.last()
    }

    /// The chain in a few words, first hop and root:
    /// `← rocksdb:high fsync ← data writeback`; None without a chain.
    pub fn chain_brief(&self) -> Option<String> {
        let first = self.via.first()?;
        let root = self.via.last()?;
        let mut s = format!("\u{2190} {}", first.doing());
        if self.via.len() > 2 {
            s.push_str(" \u{2190} \u{2026}");
        }
        if self.via.len() > 1 {
            s.push_str(&format!(" \u{2190} {}", root.doing()));
        }
        if let Some(w) = &root.wait {
            s.push_str(&format!(" \u{2190} {w}"));
        }
        if let Some(n) = self.evidence.chain_cut_at {
            s.push_str(&format!(" \u{2190} \u{2026} (cut at {n} hops)"));
        }
        Some(s)
    }
}

impl Hop {
    /// The thread and what it was in: `rocksdb:high fsync`, or its
    /// state when the call is not known (`flusher D`, `walwriter S`).
    pub fn doing(&self) -> String {
        match &self.syscall {
            Some(call) => format!("{} {call}", self.comm),
            None => format!("{} {}", self.comm, self.state),
        }
    }

    /// One line of a chain's detail: who, in what, waiting for what, how long.
    pub fn detail(&self) -> String {
        let mut s = format!("{} (tid {}) {}", self.comm, self.tid, self.state);
        if let Some(call) = &self.syscall {
            s.push_str(&format!(" in {call}"));
        }
        if let Some(w) = &self.wait {
            s.push_str(&format!(", {w}"));
        }
        s.push_str(&format!(": {}, {:.0} ms", self.cause.as_str(), self.ms));
        s
    }
}

/// Adds `ms` of `cause` to `shares`, one entry per cause.
pub fn add_share(shares: &mut Vec<Share>, cause: Cause, ms: f64) {
    if ms <= 0.0 {
        return;
    }
    match shares.iter_mut().find(|s| s.cause == cause) {
        Some(s) => s.ms += ms,
        None => shares.push(Share { cause, ms }),
    }
}

/// The cause with the largest share (ties: the first named).
pub fn largest(shares: &[Share]) -> Option<Cause> {
    shares
        .iter()
        .fold(None::<&Share>, |best, s| match best {
            Some(b) if b.ms >= s.ms => Some(b),
            _ => Some(s),
        })
        .map(|s| s.cause)
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
const FS_JOURNAL_WAITS: [&str; 8] = [
    "wait_transaction_locked",
    "jbd2_log_wait_commit",
    "jbd2_complete_transaction",
    "jbd2_journal_lock_updates",
    "xlog_wait",
    "xfs_log_force",
    "xlog_cil_force",
    "xlog_wait_on_iclog",
];

/// Waits on a page under writeback: data written back for a sync, or a
/// page being rewritten while it is written (stable pages). Before 5.2
/// `wait_on_page_writeback` is inline: the frames are its callers
/// (`filemap_fdatawait*`, `wait_for_stable_page`) over `wait_on_page_bit`,
/// which alone is also a page-lock wait, so it is not in this list.
const PAGE_WRITEBACK_WAITS: [&str; 4] = [
    "folio_wait_writeback",
    "folio_wait_stable",
    "wait_on_page_writeback",
    "filemap_fdatawait",
];

/// btrfs waiting for its own data writeback: an *ordered extent* is
/// btrfs's record of data under write I/O, and these wait for it to
/// complete (a write fault on a page of one, an fsync's range). Named
/// "data writeback" as `PAGE_WRITEBACK_WAITS` are: the same wait by
/// another name (`btrfs_start_ordered_extent_nowriteback` from 6.13).
const BTRFS_ORDERED_WAITS: [&str; 3] = [
    "btrfs_start_ordered_extent",
    "btrfs_wait_ordered_range",
    "btrfs_wait_ordered_extents",
];

/// btrfs's transaction commit (its journal, in effect) and its fsync
/// log, which a sync forces: the counterpart of `FS_JOURNAL_WAITS`.
/// Matched as prefixes: `btrfs_start_ordered_extent_nowriteback` and
/// `btrfs_commit_transaction.cold` are the same waits.
const BTRFS_COMMIT_WAITS: [&str; 6] = [
    "btrfs_commit_transaction",
    "btrfs_sync_file",
    "btrfs_sync_log",
    "wait_current_trans",
    "btrfs_wait_for_commit",
    "wait_for_commit",
];

/// A page lock taken in a filesystem's `page_mkwrite`: a write fault on a
/// shared mapping waits there for the thread that holds the page, and on
/// a page under writeback that is the flusher submitting it or a sibling
/// that holds it while it waits for the page's writeback (btrfs and ext4
/// wait for writeback with the page locked). Seen on btrfs for seconds
/// beside `folio_wait_writeback < btrfs_page_mkwrite` in the siblings.
const PAGE_LOCKS: [&str; 3] = ["__folio_lock", "folio_lock", "__lock_page"];

/// Frames a thread is in when it was *preempted* or is about to be
/// rescheduled on the way out of an interrupt or a fault: runnable, not
/// waiting for anything. Innermost (after the scheduler's own frames),
/// they say the thread was not blocked when its stack was read.
const PREEMPT_FRAMES: [&str; 9] = [
    "preempt_schedule",
    "preempt_schedule_common",
    "preempt_schedule_irq",
    "preempt_schedule_notrace",
    "irqentry_exit_to_user_mode",
    "irqentry_exit",
    "exit_to_user_mode_prepare",
    "__cond_resched",
    "_cond_resched",
];

/// What a preempted thread's stack says instead of a wait.
pub const PREEMPTED: &str = "preempted (runnable, not waiting)";

/// Waits for a page to be written before it may change again: the
/// folio name from 5.16, `wait_for_stable_page` before.
const STABLE_PAGE_WAITS: [&str; 2] = ["folio_wait_stable", "wait_for_stable_page"];

/// Waits on a filesystem's own blocks (bitmaps, inode tables, journal
/// buffers): written or read through the buffer cache.
const METADATA_WAITS: [&str; 6] = [
    "__sync_dirty_buffer",
    "__wait_on_buffer",
    "ext4_wait_block_bitmap",
    "ext4_read_block_bitmap",
    "__bread_gfp",
    "xfs_buf_read_map",
];

/// Sleeping locks: the thread waits for another thread to let go
/// (`rwsem_down_*_failed` until 5.2, `_slowpath` after).
const LOCK_WAITS: [&str; 6] = [
    "rwsem_down_write_slowpath",
    "rwsem_down_read_slowpath",
    "rwsem_down_write_failed",
    "rwsem_down_read_failed",
    "__mutex_lock",
    "mutex_lock",
];

/// A device cache flush (REQ_PREFLUSH), which fsync sends after the data.
const FLUSH_WAITS: [&str; 1] = ["blkdev_issue_flush"];

/// A discard (TRIM) the filesystem sends and waits for, e.g. on unlink.
const DISCARD_WAITS: [&str; 2] = ["blkdev_issue_discard", "__blkdev_issue_discard"];

/// Frames of a page fault.
const FAULT_FRAMES: [&str; 5] = [
    "page_fault",
    "exc_page_fault",
    "handle_mm_fault",
    "filemap_fault",
    "do_page_mkwrite",
];

/// The system calls that write dirty data back and wait for it.
const SYNC_CALLS: [&str; 7] = [
    "fsync",
    "fdatasync",
    "msync",
    "syncfs",
    "sync_file_range",
    "sync",
    "sync_file_range2",
];

/// Whether `call` writes dirty data back and waits for it.
pub fn is_sync_call(call: &str) -> bool {
    SYNC_CALLS.contains(&call)
}

/// Frames to leave out of a compact stack: the scheduler and tracing
/// machinery every blocked thread has on top.
const SCHED_FRAMES: [&str; 13] = [
    "trace_event_raw_event_sched_switch",
    "__traceiter_sched_switch",
    "__schedule",
    "schedule",
    "io_schedule",
    "schedule_timeout",
    "io_schedule_timeout",
    "schedule_preempt_disabled",
    "bit_wait_io",
    "__wait_on_bit",
    "folio_wait_bit",
    "folio_wait_bit_common",
    "wait_on_page_bit_common",
];

/// Kernel frames, innermost first (`func+0x1/0x2` or plain names), as one
/// line: the scheduler's frames dropped, the innermost 10 waits kept, and
/// the system call (`sys_fsync`) or page fault (`page_fault`) at the end.
pub fn compact_stack<'a>(frames: impl IntoIterator<Item = &'a str>) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let mut entry: Option<String> = None;
    for f in frames {
        let f = f.split('+').next().unwrap_or(f).trim();
        if f.is_empty() || SCHED_FRAMES.contains(&f) {
            continue;
        }
        if let Some(call) = ["__x64_sys_", "__arm64_sys_", "__do_sys_", "__se_sys_"]
            .iter()
            .find_map(|p| f.strip_prefix(p))
        {
            entry.get_or_insert_with(|| format!("sys_{call}"));
            continue;
        }
        // `page_fault` is the entry's name before 5.8.
        if f.starts_with("asm_exc_page_fault") || f == "page_fault" {
            entry.get_or_insert_with(|| "page_fault".into());
            continue;
        }
        if f.starts_with("do_syscall_64") || f.starts_with("entry_SYSCALL") {
            continue;
        }
        if kept.len() < 10 {
            kept.push(f);
        }
    }
    let mut s = kept.join(" < ");
    if let Some(e) = entry {
        if !s.is_empty() {
            s.push_str(" < ");
        }
        s.push_str(&e);
    }
    s
}

/// What a kernel stack says: the system call the thread was in, the wait
/// inside it, and the cause they make.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StackReading {
    pub cause: Option<Cause>,
    pub syscall: Option<String>,
    pub wait: Option<&'static str>,
}

/// Reads a compact stack (see `compact_stack`), innermost first. A stack
/// with no wait we know of gives no cause: never guessed.
pub fn read_stack(stack: &str) -> StackReading {
    let has = |fs: &[&str]| fs.iter().any(|f| stack.contains(f));
    let syscall = stack
        .split(" < ")
        .find_map(|f| {
            ["sys_", "__x64_sys_", "__arm64_sys_", "__do_sys_"]
                .iter()
                .find_map(|p| f.strip_prefix(p))
        })
        .map(str::to_string);
    let in_sync = syscall.as_deref().is_some_and(|c| SYNC_CALLS.contains(&c));
    let in_fault = has(&FAULT_FRAMES);
    if preempted(stack) {
        // Runnable: no wait, so no cause (see `PREEMPT_FRAMES`), except
        // inside a sync call, whose time is the sync's whatever the stack
        // shows (a D run's stack read just after it ended is preempted).
        return StackReading {
            cause: in_sync.then_some(Cause::Sync),
            syscall,
            wait: Some(PREEMPTED),
        };
    }
    let wait = if stack.contains("balance_dirty_pages") {
        Some("dirty throttle")
    } else if has(&STABLE_PAGE_WAITS) || old_stable_page_wait(stack) {
        Some("stable page")
    } else if has(&PAGE_WRITEBACK_WAITS) || has(&BTRFS_ORDERED_WAITS) {
        Some("data writeback")
    } else if page_lock_in_mkwrite(stack) {
        Some("page locked for writeback")
    } else if has(&FS_JOURNAL_WAITS) {
        Some("journal commit")
    } else if has(&BTRFS_COMMIT_WAITS) {
        Some("transaction commit")
    } else if has(&METADATA_WAITS) {
        Some("filesystem metadata I/O")
    } else if has(&LOCK_WAITS) {
        Some("lock held by another thread")
    } else if has(&FLUSH_WAITS) {
        Some("device cache flush")
    } else if has(&DISCARD_WAITS) {
        Some("device discard")
    } else if has(&DEVICE_WAITS) {
        Some("device queue")
    } else {
        None
    };
    let cause = match wait {
        Some("dirty throttle") => Some(Cause::DirtyThrottle),
        Some(_) if in_sync => Some(Cause::Sync),
        // Inside a sync call whatever the wait: it is the sync's.
        None if in_sync => Some(Cause::Sync),
        Some("stable page" | "data writeback" | "page locked for writeback") => {
            Some(Cause::WritebackWait)
        }
        // Waiting for the filesystem's journal (btrfs: transaction)
        // commit, which a sync forces.
        Some("journal commit" | "transaction commit") => Some(Cause::Sync),
        Some("device cache flush" | "device queue" | "device discard") => Some(Cause::Device),
        // A lock or metadata wait outside a sync: where, not why.
        Some(_) if in_fault => Some(Cause::Fault),
        Some(_) => None,
        None if in_fault => Some(Cause::Fault),
        None => None,
    };
    StackReading {
        cause,
        syscall,
        wait,
    }
}

/// Whether the innermost frame (the scheduler's left out) is a
/// preemption or an interrupt's exit: the thread was runnable when its
/// stack was read. A stack read that way mid-stall says nothing about
/// why the op was slow; calling it `fault` because a page fault's entry
/// is below it (`irqentry_exit_to_user_mode < page_fault`) would be a
/// guess dressed as evidence. (The scheduler's own events already leave
/// preempted switches out: their filters take only S and D.)
fn preempted(stack: &str) -> bool {
    let first = stack.split(" < ").next().unwrap_or("");
    PREEMPT_FRAMES.contains(&first) || first.starts_with("asm_sysvec_")
}

/// A page lock taken under a filesystem's `page_mkwrite` (see
/// `PAGE_LOCKS`): the innermost frame is the lock, one of the next few a
/// `*_page_mkwrite`.
fn page_lock_in_mkwrite(stack: &str) -> bool {
    let mut frames = stack.split(" < ");
    let first = frames.next().unwrap_or("");
    PAGE_LOCKS.contains(&first) && frames.take(3).any(|f| f.ends_with("_page_mkwrite"))
}

/// Before 5.2 a stable-page wait in a write fault leaves only
/// `wait_on_page_bit` under the filesystem's `page_mkwrite` (the inline
/// `wait_on_page_writeback` and the tail call in `wait_for_stable_page`
/// leave no frame). `wait_on_page_bit` elsewhere may be a page-lock wait.
fn old_stable_page_wait(stack: &str) -> bool {
    let mut frames = stack.split(" < ");
    frames.any(|f| f == "wait_on_page_bit") && stack.contains("page_mkwrite")
}

/// What a mid-stall kernel stack says, if it is conclusive.
pub fn stack_cause(stack: &str) -> Option<Cause> {
    read_stack(stack).cause
}
