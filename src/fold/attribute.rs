//! Why a stall happened: a pure function from what we know about the stalled
//! op (its kind, the stalled thread's trace events during it, the kernel
//! counters of the intervals it spans) to a cause, a confidence and the
//! evidence. Kept free of I/O so every rule is unit-tested.

use crate::config::Mode;
use crate::model::cause::{
    add_share, largest, read_stack, Attribution, Cause, Confidence, Evidence, Share, COVERED,
    PREEMPTED,
};
use crate::model::ops::OpKind;
use crate::model::snapshot::BdpStats;

/// What tracing saw of the stalled thread during the stall.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadTrace {
    /// Its balance_dirty_pages sleeps.
    pub throttle: BdpStats,
    /// From the last throttle event: global dirty and limit pages.
    pub dirty_pages: Option<u64>,
    pub limit_pages: Option<u64>,
    pub setpoint_pages: Option<u64>,
    pub wb_waits: u64,
    pub bdi: Option<String>,
    /// What this kernel's tracing cannot see: no event, no evidence
    /// either way (a count of 0 says nothing).
    pub unseen: Unseen,
}

/// Evidence missing because this kernel lacks its event (an older
/// kernel, or the event hidden): `TraceFeatures` in `source::trace`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unseen {
    /// writeback:balance_dirty_pages.
    pub throttle: bool,
    /// writeback:folio_wait_writeback (wait_on_page_writeback before 5.16).
    pub page_waits: bool,
    /// writeback:writeback_start.
    pub flusher: bool,
}

/// Kernel counters over the intervals the stall spans (worst values).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    pub dirty_kib: Option<u64>,
    pub dirty_thresh_kib: Option<u64>,
    pub dirty_bg_thresh_kib: Option<u64>,
    pub util_pct: Option<f64>,
    pub w_await_ms: Option<f64>,
    pub inflight: Option<u64>,
}

/// Everything attribution looks at.
#[derive(Clone, Debug)]
pub struct StallFacts<'a> {
    pub op: OpKind,
    /// Our writer's mode; None for an observed thread.
    pub mode: Option<Mode>,
    pub dur_ms: f64,
    /// None when tracing is unavailable; Some (maybe empty) when it ran.
    pub trace: Option<&'a ThreadTrace>,
    pub counters: &'a Counters,
    /// The stalled thread's kernel stack as the watchdog saw it mid-stall.
    pub stack: Option<&'a str>,
    /// The system call the stall was, from its entry event (observed
    /// threads with call boundaries).
    pub call: Option<&'a str>,
}

/// A device this busy, or with this deep a queue, is saturated.
pub const BUSY_UTIL_PCT: f64 = 90.0;
pub const DEEP_QUEUE: u64 = 32;

/// The sync call a mode makes ("sync" when the mode is not ours to know).
pub fn sync_call(mode: Option<Mode>) -> &'static str {
    match mode {
        Some(Mode::Mmap) => "msync",
        Some(Mode::Buffered | Mode::Direct) => "fdatasync",
        Some(Mode::Journal) => "syncfs",
        None => "sync",
    }
}

/// Where the kernel starts throttling dirtiers: halfway between the
/// background and the hard threshold (the "freerun" ceiling).
pub fn throttle_start_kib(c: &Counters) -> Option<u64> {
    Some((c.dirty_thresh_kib? + c.dirty_bg_thresh_kib?) / 2)
}

/// Attribution plus the kernel stack as evidence whenever we have one.
pub fn attribute(f: &StallFacts) -> Attribution {
    let mut a = attribute_inner(f);
    a.evidence.kernel_stack = f.stack.map(str::to_string);
    // A stack read while the thread was preempted names no wait; say so
    // beside the unknown rather than leave the stack to be misread.
    if a.evidence.wait.is_none()
        && f.stack
            .is_some_and(|st| read_stack(st).wait == Some(PREEMPTED))
    {
        a.evidence.wait = Some(PREEMPTED.to_string());
    }
    a
}

/// Time-weighted: the thread's dirty-throttle sleeps are timed exactly
/// by their trace events, so that part of the stall is `dirty_throttle`;
/// the rest goes to what the most direct other evidence says (the op's
/// kind, the kernel stack, waits on pages under writeback, and only then
/// system counters). The headline is the largest share; confidence is
/// high when direct evidence covers `COVERED` of the time.
fn attribute_inner(f: &StallFacts) -> Attribution {
    if let Some(mut a) = by_op(f) {
        // The op's kind is its cause, all of it.
        a.shares = vec![Share {
            cause: a.cause,
            ms: f.dur_ms,
        }];
        return a;
    }
    let throttle = f.trace.and_then(by_throttle);
    let rest = by_stack_and_waits(f);
    let Some(thr) = throttle else {
        let mut a = rest.unwrap_or_else(|| by_counters(f));
        a.shares = vec![Share {
            cause: a.cause,
            ms: f.dur_ms,
        }];
        return a;
    };
    let paused = (thr.evidence.pause_ms.unwrap_or(0) as f64).min(f.dur_ms);
    // A stack caught in balance_dirty_pages says nothing the pauses don't.
    let rest = rest.filter(|r| r.cause != Cause::DirtyThrottle);
    let mut shares = Vec::new();
    add_share(&mut shares, Cause::DirtyThrottle, paused);
    let rest_cause = rest.as_ref().map_or(Cause::Unknown, |r| r.cause);
    add_share(&mut shares, rest_cause, f.dur_ms - paused);
    let covered = if rest.is_some() { f.dur_ms } else { paused };
    let mut evidence = rest.map(|r| r.evidence).unwrap_or_default();
    let t = thr.evidence;
    evidence.throttle_events = t.throttle_events;
    evidence.pause_ms = t.pause_ms;
    evidence.max_pause_ms = t.max_pause_ms;
    evidence.dirty_pages = t.dirty_pages;
    evidence.limit_pages = t.limit_pages;
    evidence.setpoint_pages = t.setpoint_pages;
    evidence.bdi = evidence.bdi.or(t.bdi);
    Attribution {
        cause: largest(&shares).unwrap_or(Cause::DirtyThrottle),
        confidence: confidence(covered, f.dur_ms),
        evidence,
        shares,
        via: Vec::new(),
    }
}

/// High when `covered` ms of `total` is at least `COVERED` of it.
pub fn confidence(covered: f64, total: f64) -> Confidence {
    if total <= 0.0 || covered >= COVERED * total {
        Confidence::High
    } else {
        Confidence::Low
    }
}

/// The kernel stack (detailed by waits on pages under writeback), else
/// those waits alone. A stack that shows only a page fault, with no wait
/// we know of in it, says where the thread was, not why; the thread's
/// own page-writeback wait events do say why, so they win (btrfs'
/// `btrfs_page_mkwrite` waits on writeback with no wait frame left in
/// the stack read mid-stall).
fn by_stack_and_waits(f: &StallFacts) -> Option<Attribution> {
    let waited = f.trace.is_some_and(|t| t.wb_waits > 0);
    f.stack
        .and_then(|st| {
            let mut a = by_stack(st)?;
            if waited && a.cause == Cause::Fault && a.evidence.wait.is_none() {
                return None;
            }
            // Its waits on pages under writeback detail a sync's wait.
            if let Some(t) = f.trace.filter(|t| t.wb_waits > 0) {
                a.evidence.wb_waits = Some(t.wb_waits);
                a.evidence.bdi = t.bdi.clone();
            }
            Some(a)
        })
        .or_else(|| by_sync_call(f))
        .or_else(|| f.trace.and_then(by_wb_waits))
}

/// A stall that was a sync call by its entry event, with no stack that
/// names its wait: the call is direct evidence; its waits on pages under
/// writeback, if any, say it waited for data writeback.
fn by_sync_call(f: &StallFacts) -> Option<Attribution> {
    let call = f.call.filter(|c| crate::model::cause::is_sync_call(c))?;
    let waits = f.trace.filter(|t| t.wb_waits > 0);
    Some(high(
        Cause::Sync,
        Evidence {
            sync_op: Some(call.to_string()),
            syscall: Some(call.to_string()),
            wait: waits.map(|_| "data writeback".to_string()),
            wb_waits: waits.map(|t| t.wb_waits),
            bdi: waits.and_then(|t| t.bdi.clone()),
            ..Evidence::default()
        },
    ))
}

/// The thread's own kernel stack, caught mid-stall: direct evidence.
fn by_stack(stack: &str) -> Option<Attribution> {
    let r = read_stack(stack);
    let cause = r.cause?;
    let sync_op = (cause == Cause::Sync).then(|| r.syscall.clone()).flatten();
    Some(high(
        cause,
        Evidence {
            sync_op,
            syscall: r.syscall,
            wait: r.wait.map(str::to_string),
            ..Evidence::default()
        },
    ))
}

fn high(cause: Cause, evidence: Evidence) -> Attribution {
    Attribution::high(cause, evidence)
}

/// Ops whose kind is their cause: a sync, a wait for journal room or for
/// a segment to recycle.
fn by_op(f: &StallFacts) -> Option<Attribution> {
    match f.op {
        OpKind::Sync => Some(high(
            Cause::Sync,
            Evidence {
                sync_op: Some(sync_call(f.mode).into()),
                sync_ms: Some(f.dur_ms),
                ..Evidence::default()
            },
        )),
        OpKind::JournalWait => Some(high(Cause::JournalFull, Evidence::default())),
        OpKind::SegmentWait => Some(high(
            Cause::Sync,
            Evidence {
                sync_op: Some(format!("{} (recycling a segment)", sync_call(f.mode))),
                sync_ms: Some(f.dur_ms),
                ..Evidence::default()
            },
        )),
        OpKind::Write | OpKind::Blocked | OpKind::Wait => None,
    }
}

/// The thread's balance_dirty_pages sleeps.
fn by_throttle(t: &ThreadTrace) -> Option<Attribution> {
    let b = &t.throttle;
    if b.events > 0 && b.pause_ms > 0 {
        return Some(high(
            Cause::DirtyThrottle,
            Evidence {
                throttle_events: Some(b.events),
                pause_ms: Some(b.pause_ms),
                max_pause_ms: Some(b.max_pause_ms),
                dirty_pages: t.dirty_pages,
                limit_pages: t.limit_pages,
                setpoint_pages: t.setpoint_pages,
                bdi: t.bdi.clone(),
                ..Evidence::default()
            },
        ));
    }
    None
}

/// The thread's waits on pages under writeback (folio_wait_writeback).
fn by_wb_waits(t: &ThreadTrace) -> Option<Attribution> {
    (t.wb_waits > 0).then(|| {
        high(
            Cause::WritebackWait,
            Evidence {
                wb_waits: Some(t.wb_waits),
                bdi: t.bdi.clone(),
                ..Evidence::default()
            },
        )
    })
}

/// What system-wide counters suggest when the thread's own evidence is
/// silent: throttling (only without tracing, which would have seen it), a
/// saturated device, or nothing.
fn by_counters(f: &StallFacts) -> Attribution {
    let c = f.counters;
    // Throttling was not traced: only the counters can suggest it.
    let throttle_unseen = f.trace.is_none_or(|t| t.unseen.throttle);
    if let (true, Some(d), Some(start)) = (throttle_unseen, c.dirty_kib, throttle_start_kib(c)) {
        if d >= start {
            return Attribution {
                cause: Cause::DirtyThrottle,
                confidence: Confidence::Low,
                evidence: Evidence {
                    dirty_kib: Some(d),
                    throttle_start_kib: Some(start),
                    ..Evidence::default()
                },
                shares: Vec::new(),
                via: Vec::new(),
            };
        }
    }
    let busy = c.util_pct.is_some_and(|u| u >= BUSY_UTIL_PCT)
        || c.inflight.is_some_and(|q| q >= DEEP_QUEUE);
    if busy {
        return Attribution {
            cause: Cause::Device,
            // With tracing we know the thread was not throttled nor waiting.
            confidence: if f
                .trace
                .is_some_and(|t| !t.unseen.throttle && !t.unseen.page_waits)
            {
                Confidence::High
            } else {
                Confidence::Low
            },
            evidence: Evidence {
                util_pct: c.util_pct,
                w_await_ms: c.w_await_ms,
                inflight: c.inflight,
                ..Evidence::default()
            },
            shares: Vec::new(),
            via: Vec::new(),
        };
    }
    Attribution {
        cause: Cause::Unknown,
        confidence: Confidence::Low,
        evidence: Evidence {
            dirty_kib: c.dirty_kib,
            util_pct: c.util_pct,
            ..Evidence::default()
        },
        shares: Vec::new(),
        via: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(op: OpKind, trace: Option<&'a ThreadTrace>, c: &'a Counters) -> StallFacts<'a> {
        StallFacts {
            op,
            mode: Some(Mode::Mmap),
            dur_ms: 650.0,
            trace,
            counters: c,
            stack: None,
            call: None,
        }
    }

    /// sched_switch stacktrace of `dd conv=fsync` blocked in fsync on
    /// ext4, Linux 6.18 (this kernel), as the trace session compacts it.
    const DD_FSYNC: [&str; 16] = [
        "trace_event_raw_event_sched_switch",
        "__traceiter_sched_switch",
        "__schedule",
        "schedule",
        "io_schedule",
        "folio_wait_bit",
        "folio_wait_writeback",
        "__filemap_fdatawait_range",
        "file_write_and_wait_range",
        "generic_buffers_fsync_noflush",
        "ext4_fsync_nojournal.constprop.0",
        "ext4_sync_file",
        "do_fsync",
        "__x64_sys_fsync",
        "do_syscall_64",
        "entry_SYSCALL_64_after_hwframe",
    ];

    #[test]
    fn an_fsync_waiting_for_its_data_is_sync_not_writeback_wait() {
        let stack = crate::model::cause::compact_stack(DD_FSYNC);
        assert_eq!(
            stack,
            "folio_wait_writeback < __filemap_fdatawait_range < file_write_and_wait_range < \
             generic_buffers_fsync_noflush < ext4_fsync_nojournal.constprop.0 < ext4_sync_file < \
             do_fsync < sys_fsync"
        );
        let c = Counters::default();
        // The trace saw its folio_wait_writeback events too: they detail the
        // sync, they do not make it a writeback wait.
        let t = ThreadTrace {
            wb_waits: 12,
            bdi: Some("254:0".into()),
            ..ThreadTrace::default()
        };
        let mut f = facts(OpKind::Blocked, Some(&t), &c);
        f.stack = Some(&stack);
        let a = attribute(&f);
        assert_eq!((a.cause, a.confidence), (Cause::Sync, Confidence::High));
        assert_eq!(a.evidence.syscall.as_deref(), Some("fsync"));
        assert_eq!(a.evidence.sync_op.as_deref(), Some("fsync"));
        assert_eq!(a.evidence.wait.as_deref(), Some("data writeback"));
        assert_eq!(a.evidence.wb_waits, Some(12));
    }

    #[test]
    fn stacks_name_the_wait_inside_the_call() {
        use crate::model::cause::read_stack;
        let cases = [
            // fdatasync waiting for ext4's journal commit.
            ("jbd2_log_wait_commit < ext4_fc_commit < ext4_sync_file < do_fsync < sys_fdatasync", Some(Cause::Sync), Some("journal commit")),
            // fsync waiting for the device's cache flush.
            ("submit_bio_wait < blkdev_issue_flush < ext4_sync_file < do_fsync < sys_fsync", Some(Cause::Sync), Some("device cache flush")),
            ("submit_bio_wait < blkdev_issue_flush < blkdev_fsync < sys_fdatasync", Some(Cause::Sync), Some("device cache flush")),
            // msync of an mmap'd commitlog.
            ("folio_wait_writeback < __filemap_fdatawait_range < file_write_and_wait_range < xfs_file_fsync < sys_msync", Some(Cause::Sync), Some("data writeback")),
            // A write rewriting a page under writeback (stable pages).
            ("folio_wait_stable < ext4_page_mkwrite < do_page_mkwrite < do_wp_page < handle_mm_fault < exc_page_fault < page_fault", Some(Cause::WritebackWait), Some("stable page")),
            // Dirty throttling from a shared-mapping fault.
            ("balance_dirty_pages < balance_dirty_pages_ratelimited_flags < fault_dirty_shared_page < do_wp_page < handle_mm_fault < page_fault", Some(Cause::DirtyThrottle), Some("dirty throttle")),
            // A page fault reading a page in.
            ("__folio_lock_or_retry < filemap_fault < __do_fault < handle_mm_fault < exc_page_fault < page_fault", Some(Cause::Fault), None),
            // O_DIRECT write waiting for the device, outside any sync.
            ("iomap_dio_rw < ext4_file_write_iter < vfs_write < ksys_write < sys_write", Some(Cause::Device), Some("device queue")),
            // fsync's block allocation reading a bitmap, and waiting on a lock.
            ("out_of_line_wait_on_bit < ext4_wait_block_bitmap < ext4_mb_init_cache < ext4_mb_load_buddy_gfp < ext4_mb_regular_allocator < ext4_mb_new_blocks < ext4_ext_map_blocks < ext4_map_blocks < ext4_do_writepages < sys_fsync", Some(Cause::Sync), Some("filesystem metadata I/O")),
            ("rwsem_down_write_slowpath < down_write < ext4_map_blocks < ext4_do_writepages < ext4_writepages < do_writepages < filemap_fdatawrite_wbc < sys_fsync", Some(Cause::Sync), Some("lock held by another thread")),
            // unlink waiting for a discard: the device, not a sync.
            ("wait_for_completion_io_timeout < submit_bio_wait < blkdev_issue_discard < ext4_free_blocks < ext4_truncate < ext4_evict_inode < do_unlinkat < sys_unlinkat", Some(Cause::Device), Some("device discard")),
            // A lock wait in write(): where, not why; unknown.
            ("rwsem_down_write_slowpath < down_write < ext4_buffered_write_iter < vfs_write < sys_write", None, Some("lock held by another thread")),
            // Nothing we know: unknown, never guessed.
            ("futex_wait_queue < futex_wait < do_futex < sys_futex", None, None),
        ];
        for (stack, cause, wait) in cases {
            let r = read_stack(stack);
            assert_eq!((r.cause, r.wait), (cause, wait), "{stack}");
        }
    }

    /// A `/proc/TID/stack` fixture (tests/fixtures/stacks/, read from our
    /// writers on a capped btrfs lab, Linux 6.18) as the watchdog compacts it.
    fn fixture(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/stacks")
            .join(format!("{name}.txt"));
        let text = std::fs::read_to_string(&path).unwrap();
        crate::model::cause::compact_stack(text.lines().filter_map(|l| l.split_whitespace().nth(1)))
    }

    #[test]
    fn btrfs_waits_are_named_by_what_btrfs_waits_for() {
        use crate::model::cause::read_stack;
        let cases = [
            // A write fault on a page under writeback, and on one of an
            // ordered extent (btrfs's data in flight): its own writeback.
            (
                "btrfs-mkwrite-writeback",
                Some(Cause::WritebackWait),
                Some("data writeback"),
            ),
            (
                "btrfs-mkwrite-ordered-extent",
                Some(Cause::WritebackWait),
                Some("data writeback"),
            ),
            // The page lock a sibling holds while it waits for writeback.
            (
                "btrfs-mkwrite-page-lock",
                Some(Cause::WritebackWait),
                Some("page locked for writeback"),
            ),
            // msync: the transaction commit, the ordered range, the log.
            (
                "btrfs-msync-commit",
                Some(Cause::Sync),
                Some("transaction commit"),
            ),
            (
                "btrfs-msync-ordered-range",
                Some(Cause::Sync),
                Some("data writeback"),
            ),
            (
                "btrfs-msync-sync-log",
                Some(Cause::Sync),
                Some("transaction commit"),
            ),
            (
                "btrfs-fault-dirty-throttle",
                Some(Cause::DirtyThrottle),
                Some("dirty throttle"),
            ),
            // pwrite64 into a range of an ordered extent; fdatasync's commit.
            (
                "btrfs-write-ordered-extent",
                Some(Cause::WritebackWait),
                Some("data writeback"),
            ),
            (
                "btrfs-fdatasync-commit",
                Some(Cause::Sync),
                Some("transaction commit"),
            ),
        ];
        for (name, cause, wait) in cases {
            let stack = fixture(name);
            let r = read_stack(&stack);
            assert_eq!((r.cause, r.wait), (cause, wait), "{name}: {stack}");
        }
        assert_eq!(
            read_stack(&fixture("btrfs-msync-commit"))
                .syscall
                .as_deref(),
            Some("msync")
        );
        // Outside a sync call a wait for the commit is still the sync's.
        let r = read_stack("wait_current_trans < start_transaction < btrfs_dirty_inode < file_update_time < btrfs_page_mkwrite < do_page_mkwrite < page_fault");
        assert_eq!(
            (r.cause, r.wait),
            (Some(Cause::Sync), Some("transaction commit"))
        );
    }

    /// CI on btrfs: a mmap write's fault, its stack read mid-stall with no
    /// wait frame left, while the kernel's folio_wait_writeback events for
    /// the thread covered 453 of its 461 ms. The events name the wait.
    #[test]
    fn a_bare_fault_stack_yields_to_the_thread_s_page_writeback_waits() {
        let stack = "btrfs_page_mkwrite < do_page_mkwrite < do_wp_page < __handle_mm_fault < handle_mm_fault < exc_page_fault < page_fault";
        let c = Counters::default();
        let t = ThreadTrace {
            wb_waits: 1,
            bdi: Some("btrfs-10".into()),
            ..ThreadTrace::default()
        };
        let mut f = facts(OpKind::Write, Some(&t), &c);
        f.stack = Some(stack);
        let a = attribute(&f);
        assert_eq!(
            (a.cause, a.confidence),
            (Cause::WritebackWait, Confidence::High)
        );
        assert_eq!(a.evidence.wb_waits, Some(1));
        assert_eq!(a.evidence.kernel_stack.as_deref(), Some(stack));
        // Without the waits the same stack is a fault, as before.
        let none = ThreadTrace::default();
        f.trace = Some(&none);
        assert_eq!(attribute(&f).cause, Cause::Fault);
        // A fault stack that names its own wait keeps it.
        let locked = "rwsem_down_read_slowpath < btrfs_page_mkwrite < do_page_mkwrite < handle_mm_fault < page_fault";
        f.trace = Some(&t);
        f.stack = Some(locked);
        let a = attribute(&f);
        assert_eq!(a.cause, Cause::Fault);
        assert_eq!(
            a.evidence.wait.as_deref(),
            Some("lock held by another thread")
        );
    }

    #[test]
    fn a_preempted_thread_is_not_a_fault() {
        use crate::model::cause::{read_stack, PREEMPTED};
        for name in ["preempted-page-fault", "preempted-timer-irq"] {
            let stack = fixture(name);
            let r = read_stack(&stack);
            assert_eq!(
                (r.cause, r.wait),
                (None, Some(PREEMPTED)),
                "{name}: {stack}"
            );
        }
        assert_eq!(
            fixture("preempted-page-fault"),
            "irqentry_exit_to_user_mode < page_fault"
        );
        for stack in [
            "preempt_schedule_common < __cond_resched < balance_dirty_pages_ratelimited_flags < fault_dirty_shared_page < do_wp_page < handle_mm_fault < page_fault",
            "preempt_schedule_irq < irqentry_exit < asm_sysvec_apic_timer_interrupt",
        ] {
            assert_eq!(read_stack(stack).cause, None, "{stack}");
        }
        // Inside a sync call the time is the sync's, preempted or not (a
        // D run's stack read just after it ended; CI saw a chained stall
        // behind a WAL fsync called `unknown` this way).
        let r = read_stack("preempt_schedule_common < __cond_resched < ext4_sync_file < do_fsync < __x64_sys_fsync < do_syscall_64");
        assert_eq!((r.cause, r.wait), (Some(Cause::Sync), Some(PREEMPTED)));
        // As the only evidence of a long stall: unknown and low, never
        // `fault`/high, and the evidence says the thread was runnable.
        let c = Counters::default();
        let empty = ThreadTrace::default();
        let stack = fixture("preempted-page-fault");
        let mut f = facts(OpKind::Write, Some(&empty), &c);
        f.stack = Some(&stack);
        let a = attribute(&f);
        assert_eq!((a.cause, a.confidence), (Cause::Unknown, Confidence::Low));
        assert_eq!(a.evidence.wait.as_deref(), Some(PREEMPTED));
        // A real wait under the same entry still names it.
        let stack = fixture("btrfs-mkwrite-writeback");
        f.stack = Some(&stack);
        let a = attribute(&f);
        assert_eq!(
            (a.cause, a.confidence),
            (Cause::WritebackWait, Confidence::High)
        );
    }

    #[test]
    fn a_mid_stall_stack_decides_when_trace_is_silent() {
        let c = Counters::default();
        let mut f = facts(OpKind::Write, None, &c);
        f.stack =
            Some("folio_wait_writeback < __filemap_fdatawait_range < file_write_and_wait_range");
        let a = attribute(&f);
        assert_eq!(
            (a.cause, a.confidence),
            (Cause::WritebackWait, Confidence::High)
        );
        assert!(a
            .evidence
            .kernel_stack
            .unwrap()
            .starts_with("folio_wait_writeback"));
        f.stack = Some(
            "__iomap_dio_rw < iomap_dio_rw < xfs_file_dio_write_aligned < xfs_file_write_iter",
        );
        assert_eq!(attribute(&f).cause, Cause::Device);
        f.stack = Some("wait_transaction_locked < add_transaction_credits < start_this_handle < jbd2__journal_start");
        assert_eq!(attribute(&f).cause, Cause::Sync);
        f.stack = Some("schedule_timeout < some_other_wait");
        let a = attribute(&f);
        assert_eq!(a.cause, Cause::Unknown);
        assert_eq!(
            a.evidence.kernel_stack.as_deref(),
            Some("schedule_timeout < some_other_wait")
        );
    }

    #[test]
    fn op_kind_decides_sync_and_journal() {
        let c = Counters::default();
        let a = attribute(&facts(OpKind::Sync, None, &c));
        assert_eq!((a.cause, a.confidence), (Cause::Sync, Confidence::High));
        assert_eq!(a.evidence.sync_op.as_deref(), Some("msync"));
        assert_eq!(a.evidence.sync_ms, Some(650.0));
        let a = attribute(&facts(OpKind::JournalWait, None, &c));
        assert_eq!(a.cause, Cause::JournalFull);
    }

    #[test]
    fn trace_pause_is_high_confidence_throttle() {
        let t = ThreadTrace {
            throttle: BdpStats {
                events: 4,
                pause_ms: 600,
                max_pause_ms: 200,
            },
            dirty_pages: Some(70000),
            limit_pages: Some(65536),
            ..ThreadTrace::default()
        };
        let c = Counters {
            util_pct: Some(100.0),
            ..Counters::default()
        };
        let a = attribute(&facts(OpKind::Write, Some(&t), &c));
        assert_eq!(
            (a.cause, a.confidence),
            (Cause::DirtyThrottle, Confidence::High)
        );
        assert_eq!(a.evidence.pause_ms, Some(600));
        assert_eq!(a.evidence.limit_pages, Some(65536));
    }

    #[test]
    fn trace_waits_then_device_then_unknown() {
        let c = Counters::default();
        let t = ThreadTrace {
            wb_waits: 3,
            bdi: Some("7:1".into()),
            ..ThreadTrace::default()
        };
        let a = attribute(&facts(OpKind::Write, Some(&t), &c));
        assert_eq!(a.cause, Cause::WritebackWait);
        let empty = ThreadTrace::default();
        let busy = Counters {
            util_pct: Some(97.0),
            w_await_ms: Some(80.0),
            ..Counters::default()
        };
        let a = attribute(&facts(OpKind::Write, Some(&empty), &busy));
        assert_eq!((a.cause, a.confidence), (Cause::Device, Confidence::High));
        assert_eq!(a.evidence.w_await_ms, Some(80.0));
        let a = attribute(&facts(OpKind::Write, Some(&empty), &c));
        assert_eq!(a.cause, Cause::Unknown);
    }

    #[test]
    fn without_trace_counters_give_low_confidence() {
        let c = Counters {
            dirty_kib: Some(200 << 10),
            dirty_thresh_kib: Some(256 << 10),
            dirty_bg_thresh_kib: Some(64 << 10),
            ..Counters::default()
        };
        let a = attribute(&facts(OpKind::Write, None, &c));
        assert_eq!(
            (a.cause, a.confidence),
            (Cause::DirtyThrottle, Confidence::Low)
        );
        assert_eq!(a.evidence.throttle_start_kib, Some(160 << 10));
        let below = Counters {
            dirty_kib: Some(100 << 10),
            ..c.clone()
        };
        assert_eq!(
            attribute(&facts(OpKind::Write, None, &below)).cause,
            Cause::Unknown
        );
        let queue = Counters {
            inflight: Some(64),
            ..below
        };
        let a = attribute(&facts(OpKind::Write, None, &queue));
        assert_eq!((a.cause, a.confidence), (Cause::Device, Confidence::Low));
    }

    #[test]
    fn a_sync_call_without_a_stack_is_a_sync_waiting_for_data_writeback() {
        let t = ThreadTrace {
            wb_waits: 2,
            bdi: Some("7:3".into()),
            ..ThreadTrace::default()
        };
        let c = Counters::default();
        let mut f = facts(OpKind::Blocked, Some(&t), &c);
        f.mode = None;
        let a = attribute(&f);
        assert_eq!(
            a.cause,
            Cause::WritebackWait,
            "no call known: the waits alone"
        );
        f.call = Some("fdatasync");
        let a = attribute(&f);
        assert_eq!((a.cause, a.confidence), (Cause::Sync, Confidence::High));
        assert_eq!(a.evidence.wait.as_deref(), Some("data writeback"));
        assert_eq!(a.evidence.sync_op.as_deref(), Some("fdatasync"));
        f.call = Some("write");
        assert_eq!(attribute(&f).cause, Cause::WritebackWait, "not a sync call");
    }
}
