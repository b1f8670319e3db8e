//! Exact blocking times from the scheduler's own events: a watched thread
//! blocks when it is switched out in D (sched_switch) and unblocks when it
//! is woken (sched_waking), both stamped to the microsecond. The blocks of
//! one system call (the throttle sleeps of one write(), the page waits of
//! one fsync) form one run. Where the kernel's syscall events give the
//! call's entry and exit (`enter`, `exit`), the run *is* the call: it
//! starts at the entry and ends at the exit, however far apart its blocks
//! are, and two calls are never one run. Elsewhere (a page fault, a call
//! we do not trace, a kernel without the events) back-to-back blocks less
//! than `MERGE_GAP_NS` apart in the same call by their stacks are one run.
//! Pure: the aggregator feeds it trace events.

use crate::model::cause::{read_stack, stack_cause};
use crate::model::kernel::Comm;
use rustc_hash::FxHashMap as HashMap;

/// Blocks closer than this, in the same system call, are one run: the
/// thread only ran kernel code between them.
pub const MERGE_GAP_NS: u64 = 1_000_000;

/// A traced system call going on: its entry was seen, its exit not yet.
#[derive(Clone, Debug, PartialEq)]
pub struct CallOpen {
    pub name: Comm,
    pub entry_ns: u64,
    pub fd: Option<i64>,
    pub bytes: Option<u64>,
    /// The fd's path, once looked up (`Some("")`: looked, not found).
    pub file: Option<String>,
}

/// Runs that have lasted this long have their stack read at every look
/// (every 50 ms), not only until one names the wait: the wait named is the
/// one most of the samples were in, not the first seen.
pub const RESAMPLE_NS: u64 = 100_000_000;

/// One block going on.
#[derive(Clone, Debug)]
struct Open {
    pid: u32,
    start_ns: u64,
    comm: Comm,
    /// Its first stack that names a wait, else its first stack.
    stack: Option<String>,
    /// Every stack read while it lasted, tallied by wait.
    samples: Samples,
}

/// Stacks read during a run, tallied by the wait they name: (wait, count,
/// the first stack naming it). Stacks that name no wait are not counted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Samples(Vec<(String, u32, String)>);

impl Samples {
    pub fn add(&mut self, stack: &str) {
        let r = read_stack(stack);
        let Some(cause) = r.cause else { return };
        let key = format!("{}/{}", cause.as_str(), r.wait.unwrap_or_default());
        match self.0.iter_mut().find(|(k, ..)| *k == key) {
            Some(e) => e.1 += 1,
            None => self.0.push((key, 1, stack.to_string())),
        }
    }

    fn merge(&mut self, o: Samples) {
        for (k, n, st) in o.0 {
            match self.0.iter_mut().find(|(key, ..)| *key == k) {
                Some(e) => e.1 += n,
                None => self.0.push((k, n, st)),
            }
        }
    }

    /// The stack of the wait most samples were in (the first on a tie).
    pub fn best(&self) -> Option<&str> {
        let mut best: Option<&(String, u32, String)> = None;
        for e in &self.0 {
            if best.is_none_or(|b| e.1 > b.1) {
                best = Some(e);
            }
        }
        best.map(|e| e.2.as_str())
    }
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
    /// The most telling stack of its blocks: of the wait most of its
    /// stack samples were in.
    pub stack: Option<String>,
    /// Its stack samples by wait.
    pub samples: Samples,
    /// The last waker: the task that ended its last block.
    pub waker: Option<(u32, String)>,
    /// The system call it is, when its entry was seen: then `start_ns` is
    /// the entry and `end_ns` (once the call is over) the exit.
    pub call: Option<CallOpen>,
}

impl Run {
    fn syscall(&self) -> Option<String> {
        read_stack(self.stack.as_deref()?).syscall
    }

    /// Whether a block starting at `start_ns` is close enough to this
    /// run's end to join it (the same call permitting).
    fn reaches(&self, start_ns: u64) -> bool {
        self.call.is_none()
            && self
                .end_ns
                .is_some_and(|e| start_ns.saturating_sub(e) <= MERGE_GAP_NS)
    }

    /// Whether this run is the call `c`.
    fn is_call(&self, c: &CallOpen) -> bool {
        self.call.as_ref().is_some_and(|r| r.entry_ns == c.entry_ns)
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
    /// Traced system calls going on, by thread.
    calls: HashMap<u32, CallOpen>,
    /// Threads the scheduler's events have shown blocking: the sampler's
    /// sightings of them are late copies of what the events tell, never
    /// blocks to adopt.
    seen: rustc_hash::FxHashSet<u32>,
}

impl BlockTimer {
    /// The thread went to sleep in D.
    pub fn block(&mut self, pid: u32, tid: u32, t_ns: u64, comm: impl Into<Comm>) {
        self.seen.insert(tid);
        self.open.insert(
            tid,
            Open {
                pid,
                start_ns: t_ns,
                comm: comm.into(),
                stack: None,
                samples: Samples::default(),
            },
        );
    }

    /// A block the scheduler's events did not show start: the thread was
    /// already in D when it joined the trace filter (a process forked and
    /// blocked before the filter caught up). The /proc sampler saw it in D
    /// since `start_ns`; its wakeup will end it exactly. A block the events
    /// do show replaces it.
    pub fn adopt(&mut self, pid: u32, tid: u32, start_ns: u64, comm: &str, stack: Option<String>) {
        // The sampler's sight of a thread the events already time comes
        // later than they do: adopting it would start a block at the
        // sampler's tick that the events never saw.
        if self.open.contains_key(&tid) || self.seen.contains(&tid) {
            return;
        }
        let after_last = self.runs.get(&tid).and_then(|r| r.end_ns).unwrap_or(0);
        let mut samples = Samples::default();
        if let Some(st) = &stack {
            samples.add(st);
        }
        self.open.insert(
            tid,
            Open {
                pid,
                start_ns: start_ns.max(after_last),
                comm: Comm::new(comm),
                stack,
                samples,
            },
        );
    }

    /// The kernel stack of the block the thread just entered. It may be
    /// read after the wakeup of a short block (the trace merges per-CPU
    /// buffers by time): then it goes to the run that block joined.
    pub fn stack(&mut self, tid: u32, frames: String) {
        if let Some(o) = self.open.get_mut(&tid) {
            o.samples.add(&frames);
            if !names_wait(&o.stack) {
                o.stack = Some(frames);
            }
        } else if let Some(r) = self.runs.get_mut(&tid) {
            r.samples.add(&frames);
            r.stack = r.samples.best().map(str::to_string).or(Some(frames));
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
        // In a traced call the block joins the call's run; elsewhere the
        // thread's last run if close enough and in the same call by the
        // stacks (which come from the sampler, for some blocks only: an
        // unknown call on either side does not split a run).
        let call = self.calls.get(&tid).cloned();
        let joins = |r: &Run| match &call {
            Some(c) => r.is_call(c),
            None => {
                let here = o.stack.as_deref().and_then(|s| read_stack(s).syscall);
                let same_call = match (r.syscall(), here) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                };
                r.reaches(o.start_ns) && same_call
            }
        };
        if let Some(r) = self.runs.get_mut(&tid).filter(|r| joins(r)) {
            r.end_ns = Some(t_ns);
            r.blocked_ns += dur;
            r.blocks += 1;
            r.samples.merge(o.samples);
            r.stack = match r.samples.best() {
                Some(best) => Some(best.to_string()),
                None => o.stack.or(r.stack.take()),
            };
            r.waker = Some(waker);
            return (None, dur);
        }
        let run = Run {
            pid: o.pid,
            tid,
            comm: o.comm.to_string(),
            // A call's run starts at its entry.
            start_ns: call
                .as_ref()
                .map_or(o.start_ns, |c| c.entry_ns.min(o.start_ns)),
            end_ns: Some(t_ns),
            blocked_ns: dur,
            blocks: 1,
            stack: o.samples.best().map(str::to_string).or(o.stack),
            samples: o.samples,
            waker: Some(waker),
            call,
        };
        (self.runs.insert(tid, run), dur)
    }

    /// The thread entered a traced system call. Returns its previous run,
    /// which can no longer grow.
    pub fn enter(&mut self, tid: u32, call: CallOpen) -> Option<Run> {
        self.calls.insert(tid, call);
        self.running(tid);
        self.runs.remove(&tid).filter(|r| r.end_ns.is_some())
    }

    /// The thread is running (it entered or left a call, or went to sleep
    /// in S): a block still open has lost its wakeup event, and is dropped
    /// rather than left to end at some later wakeup.
    pub fn running(&mut self, tid: u32) {
        self.open.remove(&tid);
    }

    /// The thread left its traced system call at `t_ns`: the call's run,
    /// if it blocked, ends here.
    pub fn exit(&mut self, tid: u32, t_ns: u64) -> Option<Run> {
        self.running(tid);
        let c = self.calls.remove(&tid)?;
        if !self.runs.get(&tid).is_some_and(|r| r.is_call(&c)) {
            return None;
        }
        let mut r = self.runs.remove(&tid)?;
        r.end_ns = Some(t_ns.max(r.end_ns.unwrap_or(0)));
        Some(r)
    }

    /// Threads in a traced call that blocked (or is blocked now) whose
    /// fd's file has not been looked up: (tid, fd). Looked up while the
    /// call lasts, the fd still names the file the call is on.
    pub fn calls_wanting_file(&self) -> Vec<(u32, i64)> {
        let mut v: Vec<(u32, i64)> = self
            .calls
            .iter()
            .filter(|(tid, c)| {
                c.file.is_none()
                    && (self.open.contains_key(tid)
                        || self.runs.get(tid).is_some_and(|r| r.is_call(c)))
            })
            .filter_map(|(tid, c)| Some((*tid, c.fd.filter(|fd| *fd >= 0)?)))
            .collect();
        v.sort_unstable();
        v
    }

    /// The file of `tid`'s call (empty: it could not be read).
    pub fn call_file(&mut self, tid: u32, file: String) {
        let Some(c) = self.calls.get_mut(&tid) else {
            return;
        };
        c.file = Some(file.clone());
        let entry = c.entry_ns;
        if let Some(rc) = self.runs.get_mut(&tid).and_then(|r| r.call.as_mut()) {
            if rc.entry_ns == entry {
                rc.file = Some(file);
            }
        }
    }

    /// Whether the thread is in a traced system call.
    pub fn in_call(&self, tid: u32) -> bool {
        self.calls.contains_key(&tid)
    }

    /// Where the run that a block starting at `o.start_ns` joins starts,
    /// and whether that run's stack already names its wait.
    fn run_start(&self, tid: u32, o: &Open) -> (u64, bool) {
        let run = self.runs.get(&tid);
        if let Some(c) = self.calls.get(&tid) {
            return match run.filter(|r| r.is_call(c)) {
                Some(r) => (r.start_ns, names_wait(&r.stack)),
                None => (c.entry_ns.min(o.start_ns), false),
            };
        }
        match run.filter(|r| r.reaches(o.start_ns)) {
            Some(r) => (r.start_ns, names_wait(&r.stack)),
            None => (o.start_ns, false),
        }
    }

    /// Threads whose block has lasted, with the run it extends, at least
    /// `min_ns` at `now_ns`, and whose wait no stack names yet, and those
    /// whose run has lasted `RESAMPLE_NS` (sampled at every look): the ones
    /// whose kernel stack is worth reading now. (Reading every blocked
    /// thread's stack would cost more than the events: a busy database has
    /// thousands of short blocks a second.)
    pub fn wanting_stack(&self, now_ns: u64, min_ns: u64) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .open
            .iter()
            .filter(|(tid, o)| {
                let (start, named) = self.run_start(**tid, o);
                let age = now_ns.saturating_sub(start);
                let unnamed = !names_wait(&o.stack) && !named;
                (unnamed && age >= min_ns) || age >= RESAMPLE_NS
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
                    && !self.calls.get(tid).is_some_and(|c| r.is_call(c))
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
            let call = self.calls.get(tid);
            let joins = |r: &&Run| match call {
                Some(c) => r.is_call(c),
                None => r.reaches(o.start_ns),
            };
            match self.runs.get(tid).filter(joins) {
                Some(r) => {
                    out.push(Run {
                        end_ns: None,
                        stack: r.stack.clone().or_else(|| o.stack.clone()),
                        ..r.clone()
                    });
                }
                None => out.push(Run {
                    pid: o.pid,
                    tid: *tid,
                    comm: o.comm.to_string(),
                    start_ns: self.run_start(*tid, o).0,
                    end_ns: None,
                    blocked_ns: 0,
                    blocks: 1,
                    stack: o.stack.clone(),
                    samples: o.samples.clone(),
                    waker: None,
                    call: call.cloned(),
                }),
            }
        }
        out.sort_by_key(|r| (r.start_ns, r.tid));
        out
    }

    /// Forgets a thread (its process is gone).
    pub fn forget(&mut self, tid: u32) {
        self.open.remove(&tid);
        self.calls.remove(&tid);
        self.seen.remove(&tid);
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

    fn call(name: &str, entry_ns: u64) -> CallOpen {
        CallOpen {
            name: Comm::new(name),
            entry_ns,
            fd: Some(3),
            bytes: None,
            file: None,
        }
    }

    #[test]
    fn two_syncs_back_to_back_are_two_runs_each_from_entry_to_exit() {
        let mut b = BlockTimer::default();
        let mut done = Vec::new();
        // fdatasync; fdatasync: 20 µs apart, each with two page waits.
        for (entry, exit) in [(0, 100 * MS), (100 * MS + 20_000, 250 * MS)] {
            assert!(b.enter(7, call("fdatasync", entry)).is_none());
            b.block(1, 7, entry + 10_000, "postgres");
            b.wake(7, entry + 40 * MS, w());
            b.block(1, 7, entry + 40 * MS + 5_000, "postgres");
            assert!(b.wake(7, exit - 30_000, w()).0.is_none());
            assert!(b.finished(exit).is_empty(), "in its call: may still grow");
            done.extend(b.exit(7, exit));
        }
        assert_eq!(done.len(), 2);
        assert_eq!(
            (done[0].start_ns, done[0].end_ns, done[0].blocks),
            (0, Some(100 * MS), 2)
        );
        assert_eq!(done[0].blocked_ns, 100 * MS - 30_000 - 10_000 - 5_000);
        assert_eq!(
            (done[1].start_ns, done[1].end_ns),
            (100 * MS + 20_000, Some(250 * MS))
        );
        assert_eq!(
            done[1].call.as_ref().map(|c| c.name.as_str()),
            Some("fdatasync")
        );
    }

    #[test]
    fn a_throttled_write_with_long_gaps_is_one_run_and_blocks_outside_calls_keep_the_gap_rule() {
        let mut b = BlockTimer::default();
        b.enter(7, call("write", 0));
        // Three throttle pauses 5 ms apart (the CPU was busy between).
        for k in 0..3 {
            b.block(1, 7, k * 50 * MS, "logger");
            b.stack(7, WRITE.into());
            assert!(b.wake(7, k * 50 * MS + 45 * MS, w()).0.is_none());
        }
        let on = b.ongoing();
        assert!(on.is_empty(), "running between blocks: nothing ongoing");
        let r = b.exit(7, 160 * MS).expect("the write blocked");
        assert_eq!((r.start_ns, r.end_ns, r.blocks), (0, Some(160 * MS), 3));
        assert_eq!(r.blocked_ns, 135 * MS);
        // A page fault 0.2 ms after the call: not part of it.
        b.block(1, 7, 160 * MS + 200_000, "logger");
        assert!(b.wake(7, 170 * MS, w()).0.is_none());
        b.block(1, 7, 170 * MS + 300_000, "logger");
        b.wake(7, 180 * MS, w());
        let f = b.finished(200 * MS);
        assert_eq!(f.len(), 1, "the fault's two blocks, merged by the gap rule");
        assert!(f[0].call.is_none());
        assert_eq!(f[0].start_ns, 160 * MS + 200_000);
    }

    #[test]
    fn a_call_blocked_now_starts_at_its_entry_and_a_call_that_never_blocked_is_nothing() {
        let mut b = BlockTimer::default();
        b.enter(7, call("fsync", 5 * MS));
        assert!(b.exit(7, 6 * MS).is_none(), "never blocked");
        b.enter(7, call("fsync", 10 * MS));
        b.block(1, 7, 12 * MS, "postgres");
        let on = b.ongoing();
        assert_eq!((on[0].start_ns, on[0].end_ns), (10 * MS, None));
        assert_eq!(
            b.wanting_stack(12 * MS, 2 * MS),
            vec![7],
            "aged from the entry"
        );
        assert_eq!(b.calls_wanting_file(), vec![(7, 3)]);
        b.call_file(7, "/var/lib/pg/pg_wal/0001".into());
        assert!(b.calls_wanting_file().is_empty(), "looked up once");
        // A new entry (its exit was lost) ends the old call's run.
        b.wake(7, 20 * MS, w());
        let prev = b.enter(7, call("write", 30 * MS)).expect("the fsync's run");
        assert_eq!(prev.start_ns, 10 * MS);
        assert_eq!(
            prev.call.and_then(|c| c.file).as_deref(),
            Some("/var/lib/pg/pg_wal/0001")
        );
    }

    #[test]
    fn the_wait_named_is_the_one_most_samples_were_in() {
        const COMMIT: &str =
            "jbd2_log_wait_commit < ext4_sync_file < do_fsync < __x64_sys_fdatasync";
        let mut b = BlockTimer::default();
        b.enter(7, call("fdatasync", 0));
        b.block(1, 7, MS, "osd");
        b.stack(7, FSYNC.into()); // the first sample
        assert_eq!(
            b.wanting_stack(50 * MS, MS),
            Vec::<u32>::new(),
            "named, young"
        );
        assert_eq!(
            b.wanting_stack(150 * MS, MS),
            vec![7],
            "long: sampled again"
        );
        for _ in 0..3 {
            b.stack(7, COMMIT.into());
        }
        b.wake(7, 400 * MS, w());
        b.block(1, 7, 401 * MS, "osd");
        b.stack(7, FSYNC.into());
        b.wake(7, 500 * MS, w());
        let r = b.exit(7, 501 * MS).unwrap();
        assert_eq!(r.stack.as_deref(), Some(COMMIT), "3 samples against 2");
    }

    #[test]
    fn a_block_whose_wakeup_was_lost_is_dropped_when_the_thread_runs() {
        let mut b = BlockTimer::default();
        b.block(1, 7, 0, "osd");
        // No wakeup event; then the thread enters a call: it ran.
        b.enter(7, call("fdatasync", 500 * MS));
        b.block(1, 7, 510 * MS, "osd");
        b.wake(7, 600 * MS, w());
        let r = b.exit(7, 601 * MS).unwrap();
        assert_eq!(
            (r.start_ns, r.blocked_ns),
            (500 * MS, 90 * MS),
            "not from 0"
        );
        b.block(1, 7, 700 * MS, "osd");
        b.running(7);
        assert_eq!(
            b.wake(7, 5_000 * MS, w()),
            (None, 0),
            "the stale block is gone"
        );
    }

    #[test]
    fn a_block_already_going_on_is_adopted_from_the_sampler_and_ended_by_its_wakeup() {
        let mut b = BlockTimer::default();
        // 7 was in D before it joined the filter: the sampler saw it since 0.
        b.adopt(1, 7, 0, "postgres", Some(FSYNC.into()));
        let (prev, dur) = b.wake(7, 2_000 * MS, w());
        assert_eq!((prev, dur), (None, 2_000 * MS));
        let r = b.finished(3_000 * MS);
        assert_eq!((r[0].start_ns, r[0].end_ns), (0, Some(2_000 * MS)));
        assert_eq!(r[0].stack.as_deref(), Some(FSYNC));
        // 8's blocks are timed by the events: the sampler's later sight of
        // it in D (from its 200 ms tick) is not a block of its own.
        b.block(1, 8, 10 * MS, "postgres");
        b.wake(8, 12 * MS, w());
        b.adopt(1, 8, 0, "postgres", Some(FSYNC.into()));
        assert_eq!(b.wake(8, 2_000 * MS, w()), (None, 0), "nothing adopted");
        // An exact switch replaces an adopted start.
        b.adopt(1, 9, 100 * MS, "postgres", None);
        b.block(1, 9, 130 * MS, "postgres");
        assert_eq!(b.wake(9, 150 * MS, w()).1, 20 * MS);
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
