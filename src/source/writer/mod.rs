//! The writer engine of one target: writer threads running one of the four
//! write paths, plus the sync (or journal commit) thread. Every op is timed
//! by a thread-local `Recorder`; failures become events, never dead threads
//! nobody hears about.

mod aligned;
mod journal;
pub mod recorder;
pub mod segments;

use crate::base::error::UsageError;
use crate::base::units::ByteSize;
use crate::config::{Config, Mode, SyncPolicy, DIRECT_ALIGN};
use crate::model::msg::{EventKind, Handover, Timing};
use crate::model::ops::{InFlight, OpKind};
use crate::source::writer::recorder::Recorder;
use aligned::AlignedBuf;
use segments::{Appended, LogKind, SegmentLog};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What one engine runs; derived from the validated `Config`.
#[derive(Clone, Debug)]
pub struct EngineSpec {
    pub target: usize,
    /// Our scratch folder on the target.
    pub dir: PathBuf,
    /// Journal mode: the scratch folder holding the journal (may be another target).
    pub journal_dir: PathBuf,
    pub mode: Mode,
    pub threads: u32,
    pub record_size: u64,
    pub segment_size: u64,
    pub sync: SyncPolicy,
    pub rate: u64,
    pub thread_rate: u64,
    pub disk_budget: u64,
    pub commit_interval: Duration,
    pub journal_size: u64,
    /// Test hook: while set, writers hold inside their op.
    #[cfg(test)]
    pub hold: Arc<AtomicBool>,
    /// Test hook: the writer thread with this index panics in its next op.
    #[cfg(test)]
    pub panic_thread: Arc<std::sync::atomic::AtomicU32>,
    /// Test hook: the periodic sync blocks this many ms inside its op.
    #[cfg(test)]
    pub sync_hold_ms: Arc<std::sync::atomic::AtomicU64>,
}

impl EngineSpec {
    pub fn new(cfg: &Config, target: usize, dir: &Path, journal_dir: Option<&Path>) -> Self {
        EngineSpec {
            target,
            dir: dir.to_path_buf(),
            journal_dir: journal_dir.unwrap_or(dir).to_path_buf(),
            mode: cfg.mode,
            threads: cfg.threads,
            record_size: cfg.record_size(),
            segment_size: cfg.segment_size.0,
            sync: cfg.sync,
            rate: cfg.rate,
            thread_rate: cfg.thread_rate,
            disk_budget: cfg.disk_budget.0,
            commit_interval: cfg.commit_interval.0,
            journal_size: cfg.journal_size.0,
            #[cfg(test)]
            hold: Arc::new(AtomicBool::new(false)),
            #[cfg(test)]
            panic_thread: Arc::new(std::sync::atomic::AtomicU32::new(u32::MAX)),
            #[cfg(test)]
            sync_hold_ms: Arc::default(),
        }
    }
}

/// A thread's in-flight slot, for the watchdog.
#[derive(Clone, Debug)]
pub struct WatchSlot {
    pub target: usize,
    pub thread: u32,
    pub inflight: Arc<InFlight>,
}

/// Running threads of one target.
pub struct Engine {
    stop: Arc<AtomicBool>,
    /// Threads wait for it before their first op (`start_held`).
    go: Arc<AtomicBool>,
    handles: Vec<JoinHandle<()>>,
    pub slots: Vec<WatchSlot>,
    /// Folders of this engine alone, removed once its threads are done.
    remove_dirs: Vec<PathBuf>,
}

/// Everything a writer thread shares with its engine.
struct ThreadCtx {
    spec: EngineSpec,
    thread: u32,
    timing: Timing,
    handover: Handover,
    inflight: Arc<InFlight>,
    stop: Arc<AtomicBool>,
    go: Arc<AtomicBool>,
}

/// What every thread of one engine starts from.
struct Shared<'a> {
    spec: &'a EngineSpec,
    timing: Timing,
    handover: &'a Handover,
    stop: Arc<AtomicBool>,
    go: Arc<AtomicBool>,
}

impl Shared<'_> {
    fn thread(&self, thread: u32, inflight: Arc<InFlight>) -> ThreadCtx {
        ThreadCtx {
            spec: self.spec.clone(),
            thread,
            timing: self.timing,
            handover: self.handover.clone(),
            inflight,
            stop: self.stop.clone(),
            go: self.go.clone(),
        }
    }
}

/// The commitlog shapes share one log; buffered writers each append to
/// their own files, as independent write() streams do.
fn open_logs(spec: &EngineSpec, kind: LogKind) -> io::Result<Vec<Arc<SegmentLog>>> {
    let sync_on = spec.sync != SyncPolicy::None;
    let n_logs = if kind == LogKind::Buffered {
        spec.threads
    } else {
        1
    };
    (0..n_logs)
        .map(|i| {
            let prefix = if n_logs > 1 {
                format!("w{i}-")
            } else {
                String::new()
            };
            let budget = spec.disk_budget / n_logs as u64;
            SegmentLog::create(&spec.dir, &prefix, kind, spec.segment_size, budget, sync_on)
                .map(Arc::new)
        })
        .collect()
}

/// The target cannot hold the engine's first segment (ENOSPC or EDQUOT
/// while creating it): the session backs off and retries, as writers do
/// when a later segment does not fit.
#[derive(Debug, thiserror::Error)]
#[error(
    "target full: {} free, one {mode} segment takes {} (use a smaller --segment-size or --disk-budget, or free space)",
    free.map_or("?".into(), |f| ByteSize(f).to_string()),
    ByteSize(*segment)
)]
pub struct TargetFull {
    pub mode: Mode,
    pub free: Option<u64>,
    pub segment: u64,
}

fn target_full(spec: &EngineSpec, e: io::Error) -> anyhow::Error {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => TargetFull {
            mode: spec.mode,
            free: segments::free_bytes(&spec.dir),
            segment: spec.segment_size,
        }
        .into(),
        _ => e.into(),
    }
}

impl Engine {
    /// Checks the target can take this mode, then starts the threads.
    pub fn start(spec: &EngineSpec, timing: Timing, handover: Handover) -> anyhow::Result<Engine> {
        let eng = Engine::start_held(spec, timing, handover)?;
        eng.release();
        Ok(eng)
    }

    /// Like `start`, but the threads only learn their kernel ids and wait
    /// for `release`: the session narrows tracing to them first, so their
    /// first ops are traced too (else the first stalls had no evidence).
    pub fn start_held(
        spec: &EngineSpec,
        timing: Timing,
        handover: Handover,
    ) -> anyhow::Result<Engine> {
        if matches!(spec.mode, Mode::Direct | Mode::Journal) {
            let dir = if spec.mode == Mode::Journal {
                &spec.journal_dir
            } else {
                &spec.dir
            };
            check_o_direct(dir)?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let go = Arc::new(AtomicBool::new(false));
        let mut eng = Engine {
            stop: stop.clone(),
            go: go.clone(),
            handles: Vec::new(),
            slots: Vec::new(),
            remove_dirs: Vec::new(),
        };
        let sh = Shared {
            spec,
            timing,
            handover: &handover,
            stop,
            go,
        };
        match spec.mode {
            Mode::Journal => eng.start_journal(&sh)?,
            mode => eng.start_log(&sh, mode)?,
        }
        Ok(eng)
    }

    /// A watched thread's context: its in-flight slot joins the watchdog's.
    fn ctx(&mut self, sh: &Shared, thread: u32) -> ThreadCtx {
        let inflight = Arc::new(InFlight::default());
        self.slots.push(WatchSlot {
            target: sh.spec.target,
            thread,
            inflight: inflight.clone(),
        });
        sh.thread(thread, inflight)
    }

    /// Journal mode: writers into the O_DIRECT journal, the committer and
    /// the appliers (background like the kernel's flusher: not timed, not
    /// watched).
    fn start_journal(&mut self, sh: &Shared) -> anyhow::Result<()> {
        let spec = sh.spec;
        let shared = Arc::new(journal::Journal::create(spec)?);
        for t in 0..spec.threads {
            let c = self.ctx(sh, t);
            let w = journal::JournalWriter::new(shared.clone(), spec, sh.stop.clone());
            self.spawn(format!("ss-w{}-{t}", spec.target), c, move |c| {
                writer_loop(c, w)
            });
        }
        let c = self.ctx(sh, spec.threads);
        let committer = shared.clone();
        self.spawn(format!("ss-commit{}", spec.target), c, move |c| {
            journal::committer_loop(c, committer)
        });
        for a in 0..journal::APPLIERS {
            let c = sh.thread(spec.threads + 1 + a, Arc::new(InFlight::default()));
            let j = shared.clone();
            self.spawn(format!("ss-apply{}-{a}", spec.target), c, move |c| {
                journal::applier_loop(c, j, a)
            });
        }
        Ok(())
    }

    /// The segment-log modes: writers and, with a periodic sync, the sync
    /// thread (its id is the thread count).
    fn start_log(&mut self, sh: &Shared, mode: Mode) -> anyhow::Result<()> {
        let spec = sh.spec;
        let kind = match mode {
            Mode::Mmap => LogKind::Mmap,
            Mode::Buffered => LogKind::Buffered,
            _ => LogKind::Direct,
        };
        let logs = open_logs(spec, kind).map_err(|e| target_full(spec, e))?;
        for t in 0..spec.threads {
            let c = self.ctx(sh, t);
            let log = logs[t as usize % logs.len()].clone();
            let w = LogWriter::new(log, kind, spec.record_size, t);
            self.spawn(format!("ss-w{}-{t}", spec.target), c, move |c| {
                writer_loop(c, w)
            });
        }
        if let SyncPolicy::Periodic(period) = spec.sync {
            let c = self.ctx(sh, spec.threads);
            self.spawn(format!("ss-sync{}", spec.target), c, move |c| {
                periodic_sync_loop(c, logs, period)
            });
        }
        Ok(())
    }

    fn spawn<F>(&mut self, name: String, ctx: ThreadCtx, body: F)
    where
        F: FnOnce(&ThreadCtx) + Send + 'static,
    {
        let h = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                ctx.inflight.set_tid_to_current();
                while !ctx.go.load(Acquire) && !ctx.stop.load(Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&ctx)));
                if let Err(p) = res {
                    // It died inside an op: without this the watchdog would
                    // report that op as a stall growing forever.
                    ctx.inflight.leave();
                    let what = p
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    report(
                        &ctx,
                        EventKind::WriterError,
                        format!("thread {} panicked: {what}", ctx.thread),
                    );
                }
            })
            .expect("spawn writer thread");
        self.handles.push(h);
    }

    /// Removes `dirs` (folders made for this engine alone) when it is dropped.
    pub fn remove_on_drop(&mut self, dirs: Vec<PathBuf>) {
        self.remove_dirs = dirs;
    }

    /// All threads have returned (after `request_stop`): dropping it now
    /// does not wait.
    pub fn is_finished(&self) -> bool {
        self.handles.iter().all(JoinHandle::is_finished)
    }

    /// Lets held threads begin (see `start_held`).
    pub fn release(&self) {
        self.go.store(true, Release);
    }

    /// Asks every thread to stop (they finish their current op).
    pub fn request_stop(&self) {
        self.stop.store(true, Release);
    }

    /// Stops and joins all threads; their last batches are sent on the way out.
    pub fn stop(mut self) {
        self.request_stop();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.request_stop();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
        for d in &self.remove_dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn report(ctx: &ThreadCtx, kind: EventKind, message: String) {
    let _ = ctx.handover.tx.send(crate::model::msg::Msg::Event {
        target: ctx.spec.target,
        thread: Some(ctx.thread),
        t_ns: ctx.timing.clock.now_ns(),
        kind,
        message,
    });
}

/// Refuses a directory whose filesystem rejects O_DIRECT, with a clear message.
fn check_o_direct(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(".odirect-probe");
    let res = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT | libc::O_NOFOLLOW)
        .open(&probe);
    let _ = std::fs::remove_file(&probe);
    match res {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let target = dir.parent().unwrap_or(dir);
            let fs = crate::source::mounts::describe(target).fs;
            Err(UsageError::new(format!(
                "{}: {fs} refuses O_DIRECT, which direct and journal modes need (use mmap or buffered there)",
                target.display()
            ))
            .into())
        }
        Err(e) => Err(anyhow::anyhow!(
            "cannot create files in {}: {e}",
            dir.display()
        )),
    }
}

/// One write path, as seen by the common writer loop.
pub(crate) trait Workload: Send {
    /// Writes one record. Returns the op kind to book it as (journal mode
    /// turns a write that waited for room into `JournalWait`). `start_ns`
    /// is when the call began (for the in-flight marker).
    fn write(&mut self, rec: &mut Recorder, start_ns: u64) -> io::Result<OpKind>;
    /// Work after the op is acknowledged (journal apply); not in its latency.
    fn after_ack(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// The sync op of `every:N`.
    fn sync(&mut self) -> io::Result<()>;
}

/// Exponential back-off after ENOSPC, up to 1 s, waking early on stop.
fn back_off(ctx: &ThreadCtx, step: &mut u32) {
    let ms = (10u64 << (*step).min(7)).min(1000);
    *step += 1;
    sleep_unless_stopped(ctx, Duration::from_millis(ms));
}

fn sleep_unless_stopped(ctx: &ThreadCtx, d: Duration) {
    let end = std::time::Instant::now() + d;
    while !ctx.stop.load(Relaxed) {
        let now = std::time::Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

/// Rate limiting: when each op is meant to start (no coordinated
/// omission: latency counts from the intended start).
struct Pace {
    period_ns: u64,
    intended: u64,
}

impl Pace {
    fn new(ctx: &ThreadCtx, now: u64) -> Pace {
        let period_ns = if ctx.spec.thread_rate > 0 {
            (1e9 / ctx.spec.thread_rate as f64) as u64
        } else if ctx.spec.rate > 0 {
            (1e9 * ctx.spec.threads as f64 / ctx.spec.rate as f64) as u64
        } else {
            0
        };
        Pace {
            period_ns,
            intended: now,
        }
    }

    /// Begins the next op: waits for its slot when rate-limited. Returns
    /// the start its latency counts from (the intended one when
    /// rate-limited; the call's own start is `rec.call_start()`).
    #[inline]
    fn begin(&mut self, ctx: &ThreadCtx, rec: &mut Recorder) -> u64 {
        if self.period_ns == 0 {
            return rec.begin(OpKind::Write);
        }
        let now = rec.now_ns();
        if self.intended > now {
            sleep_unless_stopped(ctx, Duration::from_nanos(self.intended - now));
        }
        let s = self.intended;
        self.intended += self.period_ns;
        rec.begin_at(s, rec.now_ns(), OpKind::Write)
    }
}

/// What a writer does after an op failed.
enum AfterError {
    /// The target is full: back off and go on.
    Retry,
    Stop,
}

/// A failed op: a full target backs off (one event per episode), anything
/// else stops the thread with an event.
#[cold]
fn write_failed(
    ctx: &ThreadCtx,
    rec: &mut Recorder,
    e: &io::Error,
    full_step: &mut u32,
) -> AfterError {
    rec.inflight.leave();
    if ctx.stop.load(Relaxed) {
        return AfterError::Stop;
    }
    if e.raw_os_error() == Some(libc::ENOSPC) || e.raw_os_error() == Some(libc::EDQUOT) {
        if *full_step == 0 {
            rec.event(
                EventKind::TargetFull,
                format!("target full ({e}); thread {} backing off", ctx.thread),
            );
        }
        back_off(ctx, full_step);
        return AfterError::Retry;
    }
    rec.event(
        EventKind::WriterError,
        format!("thread {} stopped: {e}", ctx.thread),
    );
    AfterError::Stop
}

/// `--sync every:N`: the writer syncs itself after every N records.
fn sync_now<W: Workload>(rec: &mut Recorder, w: &mut W) {
    let s = rec.begin(OpKind::Sync);
    match w.sync() {
        Ok(()) => rec.end(s, OpKind::Sync, 0),
        Err(e) => {
            rec.inflight.leave();
            rec.event(EventKind::WriterError, format!("sync failed: {e}"));
        }
    }
}

fn writer_loop<W: Workload>(ctx: &ThreadCtx, mut w: W) {
    let mut rec = Recorder::new(
        ctx.spec.target,
        ctx.thread,
        &ctx.timing,
        ctx.handover.clone(),
        ctx.inflight.clone(),
    );
    let every = match ctx.spec.sync {
        SyncPolicy::Every(n) => n,
        _ => 0,
    };
    let mut pace = Pace::new(ctx, rec.now_ns());
    let mut since_sync = 0u64;
    let mut full_step = 0u32;
    let rs = ctx.spec.record_size;
    while !ctx.stop.load(Relaxed) {
        let start = pace.begin(ctx, &mut rec);
        #[cfg(test)]
        test_hooks(ctx);
        let call = rec.call_start();
        let res = w.write(&mut rec, call).and_then(|kind| {
            rec.end(start, kind, rs);
            w.after_ack()
        });
        if let Err(e) = res {
            match write_failed(ctx, &mut rec, &e, &mut full_step) {
                AfterError::Retry => {
                    pace.intended = rec.now_ns();
                    continue;
                }
                AfterError::Stop => return,
            }
        }
        full_step = 0;
        if every > 0 {
            since_sync += 1;
            if since_sync >= every {
                since_sync = 0;
                sync_now(&mut rec, &mut w);
            }
        }
    }
}

/// Tests hold a writer inside its op, or make one panic.
#[cfg(test)]
fn test_hooks(ctx: &ThreadCtx) {
    while ctx.spec.hold.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
    }
    if ctx.spec.panic_thread.load(Relaxed) == ctx.thread {
        panic!("test hook: writer {} panics", ctx.thread);
    }
}

/// Cassandra's periodic commitlog service: sync everything every period.
fn periodic_sync_loop(ctx: &ThreadCtx, logs: Vec<Arc<SegmentLog>>, period: Duration) {
    let mut rec = Recorder::new(
        ctx.spec.target,
        ctx.thread,
        &ctx.timing,
        ctx.handover.clone(),
        ctx.inflight.clone(),
    );
    loop {
        sleep_unless_stopped(ctx, period);
        if ctx.stop.load(Relaxed) {
            break;
        }
        let s = rec.begin(OpKind::Sync);
        #[cfg(test)]
        std::thread::sleep(Duration::from_millis(ctx.spec.sync_hold_ms.load(Relaxed)));
        match logs.iter().try_for_each(|l| l.sync_all()) {
            Ok(()) => rec.end(s, OpKind::Sync, 0),
            Err(e) => {
                rec.inflight.leave();
                rec.event(EventKind::WriterError, format!("periodic sync failed: {e}"));
            }
        }
    }
}

/// mmap, buffered and direct: records into the shared segment log.
struct LogWriter {
    log: Arc<SegmentLog>,
    record: Vec<u8>,
    /// Direct mode: records packed into an aligned block, written when full.
    block: Option<(AlignedBuf, usize)>,
}

impl LogWriter {
    fn new(log: Arc<SegmentLog>, kind: LogKind, record_size: u64, thread: u32) -> Self {
        let record = vec![b'a' + (thread % 26) as u8; record_size as usize];
        let block = (kind == LogKind::Direct).then(|| {
            let len = (record_size.max(DIRECT_ALIGN)).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
            (AlignedBuf::new(len as usize, DIRECT_ALIGN as usize), 0)
        });
        LogWriter { log, record, block }
    }
}

impl Workload for LogWriter {
    fn write(&mut self, rec: &mut Recorder, start: u64) -> io::Result<OpKind> {
        let me = rec.thread();
        let on_roll = || rec.inflight.enter(start, OpKind::SegmentWait);
        let done = match &mut self.block {
            None => self.log.append(&self.record, me, on_roll)?,
            Some((buf, fill)) => {
                let rs = self.record.len();
                let mut done = Appended::default();
                if *fill + rs > buf.len() {
                    done = self.log.append(buf.as_slice(), me, on_roll)?;
                    *fill = 0;
                }
                buf.as_mut_slice()[*fill..*fill + rs].copy_from_slice(&self.record);
                *fill += rs;
                done
            }
        };
        if let Some(sibling) = done.behind {
            rec.behind(sibling);
        }
        Ok(if done.synced {
            OpKind::SegmentWait
        } else {
            OpKind::Write
        })
    }

    fn sync(&mut self) -> io::Result<()> {
        self.log.sync_all()
    }
}

#[cfg(test)]
mod tests;
