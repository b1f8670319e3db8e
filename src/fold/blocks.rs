//! Exact blocking times from the scheduler's own events: a watched thread
//! blocks when it is switched out in D (sched_switch) and unblocks when it
//! is woken (sched_waking), both stamped to the microsecond. Back-to-back
//! blocks of one thread in one system call (the throttle sleeps of one
//! write(), the page waits of one fsync) form one run; a run of at least
//! the threshold is a stall. Pure: the aggregator feeds it trace events.

use crate::model::cause::{read_stack, stack_cause};
use crate::model::kernel::Comm;
use std::collections::HashMap;

/// Blocks closer than this, in the same system call, are one run: the
/// thread only ran kernel code between them.
pub const MERGE_GAP_NS: u64 = 1_000_000;

/// One block going on.
#[derive(Clone, Debug)]
struct Open {
    pid: u32,
    start_ns: u64,
    comm: Comm,
    stack: Option<String>,
}

/// A run of blocks of one thread.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The thread's process (kept: the process may be gone by the end).
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub start_ns: u64,
    /// When its last block ended (the wakeup), or `None` while one lasts.
    pub end_ns: Option<u64>,
    /// Time blocked in it (the gaps between its blocks left out).
    pub blocked_ns: u64,
    pub blocks: u32,
    /// The most telling stack of its blocks (one whose wait we know).
    pub stack: Option<String>,
    /// The last waker: the task that ended its last block.
    pub waker: Option<(u32, String)>,
}

impl Run {
    fn syscall(&self) -> Option<String> {
        read_stack(self.stack.as_deref()?).syscall
    }

    /// Whether a block starting at `start_ns` is close enough to this
    /// run's end to join it (the same call permitting).
    fn reaches(&self, start_ns: u64) -> bool {
        self.end_ns
            .is_some_and(|e| start_ns.saturating_sub(e) <= MERGE_GAP_NS)
    }
}

/// Whether a stack names the wait (then no other stack is needed).
fn names_wait(stack: &Option<String>) -> bool {
    stack.as_deref().and_then(stack_cause).is_some()
}

#[derive(Debug, Default)]
pub struct BlockTimer {
    open: HashMap<u32, Open>,
    /// Each thread's latest run, until it can no longer grow.
    runs: HashMap<u32, Run>,
}

impl BlockTimer {
    /// The thread went to sleep in D.
    pub fn block(&mut self, pid: u32, tid: u32, t_ns: u64, comm: impl Into<Comm>) {
        self.open.insert(
            tid,
            Open {
                pid,
                start_ns: t_ns,
                comm: comm.into(),
                stack: None,
            },
        );
    }

    /// A block the scheduler's events did not show start: the thread was
    /// already in D when it joined the trace filter (a process forked and
    /// blocked before the filter caught up). The /proc sampler saw it in D
    /// since `start_ns`; its wakeup will end it exactly. A block the events
    /// do show replaces it.
    pub fn adopt(&mut self, pid: u32, tid: u32, start_ns: u64, comm: &str, stack: Option<String>) {
        if self.open.contains_key(&tid) {
            return;
        }
        let after_last = self.runs.get(&tid).and_then(|r| r.end_ns).unwrap_or(0);
        self.open.insert(
            tid,
            Open {
                pid,
                start_ns: start_ns.max(after_last),
                comm: Comm::new(comm),
                stack,
            },
        );
    }

    /// The kernel stack of the block the thread just entered. It may be
    /// read after the wakeup of a short block (the trace merges per-CPU
    /// buffers by time): then it goes to the run that block joined.
    pub fn stack(&mut self, tid: u32, frames: String) {
        if let Some(o) = self.open.get_mut(&tid) {
            o.stack.get_or_insert(frames);
        } else if let Some(r) = self.runs.get_mut(&tid) {
            if !names_wait(&r.stack) {
                r.stack = Some(frames);
            }
        }
    }

    /// The thread was woken. Returns the finished run it ended, if the
    /// block did not extend the thread's previous run, and the time this
    /// block lasted (0 for a wakeup of a thread not blocked in D).
    pub fn wake(&mut self, tid: u32, t_ns: u64, waker: (u32, String)) -> (Option<Run>, u64) {
        let Some(o) = self.open.remove(&tid) else {
            return (None, 0);
        };
        let dur = t_ns.saturating_sub(o.start_ns);
        // Stacks come from the sampler, for some blocks only: an unknown
        // call on either side does not split a run.
        let same_call = |r: &Run| {
            let here = o.stack.as_deref().and_then(|s| read_stack(s).syscall);
            match (r.syscall(), here) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
        };
        if let Some(r) = self.runs.get_mut(&tid) {
            if r.reaches(o.start_ns) && same_call(r) {
                r.end_ns = Some(t_ns);
                r.blocked_ns += dur;
                r.blocks += 1;
                if !names_wait(&r.stack) {
                    r.stack = o.stack.or(r.stack.take());
                }
                r.waker = Some(waker);
                return (None, dur);
            }
        }
        let run = Run {
            pid: o.pid,
            tid,
            comm: o.comm.to_string(),
            start_ns: o.start_ns,
            end_ns: Some(t_ns),
            blocked_ns: dur,
            blocks: 1,
            stack: o.stack,
            waker: Some(waker),
        };
        (self.runs.insert(tid, run), dur)
    }

    /// Threads whose block has lasted, with the run it extends, at least
    /// `min_ns` at `now_ns`, and whose wait no stack names yet: the ones
    /// whose kernel stack is worth reading now. (Reading every blocked
    /// thread's stack would cost more than the events: a busy database has
    /// thousands of short blocks a second.)
    pub fn wanting_stack(&self, now_ns: u64, min_ns: u64) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .open
            .iter()
            .filter(|(tid, o)| {
                if names_wait(&o.stack) {
                    return false;
                }
                let start = match self.runs.get(tid) {
                    Some(r) if r.reaches(o.start_ns) => {
                        if names_wait(&r.stack) {
                            return false;
                        }
                        r.start_ns
                    }
                    _ => o.start_ns,
                };
                now_ns.saturating_sub(start) >= min_ns
            })
            .map(|(tid, _)| *tid)
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether `tid` is in a block (switched out in D, not woken yet).
    pub fn is_open(&self, tid: u32) -> bool {
        self.open.contains_key(&tid)
    }

    /// The thread's latest run, ended but possibly still growing.
    pub fn last_run(&self, tid: u32) -> Option<&Run> {
        self.runs.get(&tid).filter(|r| r.end_ns.is_some())
    }

    /// Runs that can no longer grow at `now_ns` (their thread has been
    /// running for more than the merge gap), taken out.
    pub fn finished(&mut self, now_ns: u64) -> Vec<Run> {
        let done: Vec<u32> = self
            .runs
            .iter()
            .filter(|(tid, r)| {
                !self.open.contains_key(tid)
                    && r.end_ns
                        .is_some_and(|e| now_ns.saturating_sub(e) > MERGE_GAP_NS)
            })
            .map(|(t, _)| *t)
            .collect();
        let mut out: Vec<Run> = done.iter().filter_map(|t| self.runs.remove(t)).collect();
        out.sort_by_key(|r| r.start_ns);
        out
    }

    /// Every run still open or growing, and blocks going on, as runs whose
    /// `end_ns` is None when a block of it still lasts.
    pub fn ongoing(&self) -> Vec<Run> {
        let mut out: Vec<Run> = Vec::new();
        for (tid, o) in &self.open {
            match self.runs.get(tid) {
                Some(r) if r.reaches(o.start_ns) => {
                    out.push(Run {
                        end_ns: None,
                        stack: r.stack.clone().or_else(|| o.stack.clone()),
                        ..r.clone()
                    });
                }
                _ => out.push(Run {
                    pid: o.pid,
                    tid: *tid,
                    comm: o.comm.to_string(),
                    start_ns: o.start_ns,
                    end_ns: None,
                    blocked_ns: 0,
                    blocks: 1,
                    stack: o.stack.clone(),
                    waker: None,
                }),
            }
        }
        out.sort_by_key(|r| (r.start_ns, r.tid));
        out
    }

    /// Forgets a thread (its process is gone).
    pub fn forget(&mut self, tid: u32) {
        self.open.remove(&tid);
        self.runs.remove(&tid);
    }

    /// Drops the blocks going on of threads that no longer exist: a thread
    /// switched out on its way to exit is never woken.
    pub fn retain_open(&mut self, alive: impl Fn(u32) -> bool) {
        self.open.retain(|tid, _| alive(*tid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const FSYNC: &str = "folio_wait_writeback < __filemap_fdatawait_range < do_fsync < sys_fsync";
    const WRITE: &str = "balance_dirty_pages < generic_perform_write < ksys_write < sys_write";

    fn w() -> (u32, String) {
        (0, String::new())
    }

    #[test]
    fn a_block_is_timed_from_switch_to_wakeup() {
        let mut b = BlockTimer::default();
        b.block(1, 7, 100 * MS, "postgres");
        b.stack(7, FSYNC.into());
        let (prev, dur) = b.wake(7, 100 * MS + 23_456_789, (12, "kworker/u8:1".into()));
        assert!(prev.is_none());
        assert_eq!(dur, 23_456_789, "to the nanosecond the trace gives");
        assert!(
            b.finished(100 * MS + 23_456_789 + MS / 2).is_empty(),
            "may still grow"
        );
        let r = b.finished(200 * MS);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].start_ns, r[0].end_ns, r[0].blocks),
            (100 * MS, Some(100 * MS + 23_456_789), 1)
        );
        assert_eq!(r[0].waker, Some((12, "kworker/u8:1".into())));
        assert_eq!(r[0].stack.as_deref(), Some(FSYNC));
    }

    #[test]
    fn back_to_back_blocks_in_one_call_are_one_run_and_others_are_not() {
        let mut b = BlockTimer::default();
        // Three page waits of one fsync, 50 µs apart.
        for (s, e) in [(0, 10), (10, 30), (30, 60)] {
            b.block(1, 7, s * MS + 50_000, "postgres");
            b.stack(7, FSYNC.into());
            assert!(b.wake(7, e * MS, w()).0.is_none());
        }
        // A write 0.5 ms later: another call, another run.
        b.block(1, 7, 60 * MS + 500_000, "postgres");
        b.stack(7, WRITE.into());
        let (prev, _) = b.wake(7, 80 * MS, w());
        let prev = prev.expect("the fsync run ended");
        assert_eq!(
            (prev.start_ns, prev.end_ns, prev.blocks),
            (50_000, Some(60 * MS), 3)
        );
        assert_eq!(prev.blocked_ns, 60 * MS - 150_000);
        // A block of the same call 5 ms later is a new run too.
        b.block(1, 7, 85 * MS, "postgres");
        b.stack(7, WRITE.into());
        assert!(b.wake(7, 90 * MS, w()).0.is_some());
    }

    #[test]
    fn a_block_already_going_on_is_adopted_from_the_sampler_and_ended_by_its_wakeup() {
        let mut b = BlockTimer::default();
        b.block(1, 7, 10 * MS, "postgres");
        b.wake(7, 12 * MS, w());
        // The sampler saw 7 in D since 0 ms: not before its last wakeup.
        b.adopt(1, 7, 0, "postgres", Some(FSYNC.into()));
        let (prev, dur) = b.wake(7, 2_000 * MS, w());
        assert_eq!(dur, 1_988 * MS);
        // It starts right where the last block ended: one run with it.
        assert!(prev.is_none());
        let r = b.finished(3_000 * MS);
        assert_eq!(
            (r[0].start_ns, r[0].end_ns, r[0].blocks),
            (10 * MS, Some(2_000 * MS), 2)
        );
        assert_eq!(r[0].stack.as_deref(), Some(FSYNC));
        // An exact switch replaces an adopted start.
        b.adopt(1, 8, 100 * MS, "postgres", None);
        b.block(1, 8, 130 * MS, "postgres");
        assert_eq!(b.wake(8, 150 * MS, w()).1, 20 * MS);
    }

    #[test]
    fn ongoing_runs_have_no_end_and_a_wakeup_without_a_block_is_nothing() {
        let mut b = BlockTimer::default();
        assert_eq!(b.wake(9, 5 * MS, w()), (None, 0), "woken from S: not ours");
        b.block(1, 9, 10 * MS, "etcd");
        let on = b.ongoing();
        assert_eq!((on.len(), on[0].end_ns, on[0].start_ns), (1, None, 10 * MS));
        b.forget(9);
        assert!(b.ongoing().is_empty());
    }

    #[test]
    fn stacks_are_wanted_of_blocks_old_enough_until_one_names_the_wait() {
        let mut b = BlockTimer::default();
        b.block(1, 7, 0, "postgres");
        assert!(b.wanting_stack(10 * MS, 25 * MS).is_empty(), "too young");
        assert_eq!(b.wanting_stack(30 * MS, 25 * MS), vec![7]);
        b.stack(7, "schedule".into());
        assert_eq!(b.wanting_stack(40 * MS, 25 * MS), vec![7], "names no wait");
        // A run of short page waits is old enough as a whole.
        b.block(1, 8, 0, "postgres");
        b.wake(8, 5 * MS, w());
        b.block(1, 8, 5 * MS + MS / 2, "postgres");
        assert_eq!(b.wanting_stack(30 * MS, 25 * MS), vec![7, 8]);
        b.wake(7, 41 * MS, w());
        b.block(1, 7, 41 * MS + MS / 2, "postgres");
        b.stack(
            7,
            "folio_wait_writeback < file_write_and_wait_range < do_fsync".into(),
        );
        b.block(1, 9, 10 * MS, "postgres");
        assert_eq!(
            b.wanting_stack(50 * MS, 25 * MS),
            vec![8, 9],
            "7's run has its wait named"
        );
    }
}
