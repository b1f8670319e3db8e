//! Ceph FileStore's write path, the rados bench stall: each op writes its
//! record to a circular O_DIRECT journal (the ack, and the op's latency)
//! and hands the apply — a buffered write to an object file — to a small
//! pool of applier threads (FileStore's op threads). A committer calls
//! syncfs() every commit interval, or early when the journal is half full,
//! and only then trims the journal. When the journal outruns the data disk it
//! fills, and new ops wait for the commit: throughput drops to 0 for seconds.

use super::{aligned::AlignedBuf, report, sleep_unless_stopped, EngineSpec, ThreadCtx, Workload};
use crate::config::DIRECT_ALIGN;
use crate::model::msg::EventKind;
use crate::model::ops::OpKind;
use crate::source::writer::recorder::Recorder;
use crossbeam::channel::{bounded, Receiver, RecvTimeoutError, Sender};
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The journal and its accounting, shared by writers and the committer.
pub struct Journal {
    file: File,
    size: u64,
    /// Bytes ever reserved in the journal.
    head: AtomicU64,
    /// Bytes ever trimmed by a commit.
    committed: AtomicU64,
    /// Bytes whose apply finished (trimmable after the next syncfs).
    applied: AtomicU64,
    kick_tx: Sender<()>,
    kick_rx: Receiver<()>,
    /// Acked ops waiting to be applied (their journal bytes).
    apply_tx: Sender<u64>,
    apply_rx: Receiver<u64>,
    /// Where the objects live; syncfs() is called on this directory's filesystem.
    objects: File,
}

impl Journal {
    pub fn create(spec: &EngineSpec) -> io::Result<Journal> {
        let size = spec.journal_size / DIRECT_ALIGN * DIRECT_ALIGN;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_DIRECT | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(spec.journal_dir.join("journal"))?;
        // Ceph preallocates its journal; a sparse one would add allocation cost.
        // SAFETY: valid fd; fallocate failure is tolerated (set_len fallback).
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size as libc::off_t) } != 0 {
            file.set_len(size)?;
        }
        std::fs::create_dir(spec.dir.join("objects"))?;
        let objects = File::open(spec.dir.join("objects"))?;
        let (kick_tx, kick_rx) = bounded(1);
        // Outstanding applies are bounded by the journal itself; this bound
        // only keeps the channel from allocating.
        let slots =
            (size / spec.record_size.max(DIRECT_ALIGN)) as usize + spec.threads as usize + 1;
        let (apply_tx, apply_rx) = bounded(slots);
        Ok(Journal {
            file,
            size,
            head: AtomicU64::new(0),
            committed: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            kick_tx,
            kick_rx,
            apply_tx,
            apply_rx,
            objects,
        })
    }

    fn used(&self) -> u64 {
        self.head.load(Acquire) - self.committed.load(Acquire)
    }
}

/// One writer thread of journal mode: reserves journal space, writes the
/// record there with O_DIRECT (the ack) and queues the apply.
pub struct JournalWriter {
    j: Arc<Journal>,
    buf: AlignedBuf,
    /// Journal bytes the op in hand reserved (credited once applied).
    pending: u64,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl JournalWriter {
    pub fn new(
        j: Arc<Journal>,
        spec: &EngineSpec,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        let mut buf = AlignedBuf::new(spec.record_size as usize, DIRECT_ALIGN as usize);
        buf.as_mut_slice().fill(b'j');
        JournalWriter {
            j,
            buf,
            pending: 0,
            stop,
        }
    }
}

impl Workload for JournalWriter {
    fn write(&mut self, rec: &mut Recorder, start_ns: u64) -> io::Result<OpKind> {
        let len = self.buf.len() as u64;
        let size = self.j.size;
        let mut kind = OpKind::Write;
        let off = loop {
            let h = self.j.head.load(Acquire);
            let off = h % size;
            // A record never wraps: skip the tail if it does not fit.
            let need = if off + len > size {
                size - off + len
            } else {
                len
            };
            if h + need - self.j.committed.load(Acquire) > size {
                if kind == OpKind::Write {
                    kind = OpKind::JournalWait;
                    rec.inflight.enter(start_ns, OpKind::JournalWait);
                }
                let _ = self.j.kick_tx.try_send(());
                if self.stop.load(Relaxed) {
                    return Err(io::Error::from(io::ErrorKind::Interrupted));
                }
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            if self
                .j
                .head
                .compare_exchange(h, h + need, AcqRel, Acquire)
                .is_ok()
            {
                self.pending = need;
                break if off + len > size { 0 } else { off };
            }
        };
        if self.j.used() > size / 2 {
            let _ = self.j.kick_tx.try_send(());
        }
        self.j.file.write_all_at(self.buf.as_slice(), off)?;
        Ok(kind)
    }

    fn after_ack(&mut self) -> io::Result<()> {
        // The apply happens on an applier thread; the journal space is
        // trimmed only once it is applied and committed.
        self.j
            .apply_tx
            .send(std::mem::take(&mut self.pending))
            .map_err(|_| io::Error::other("appliers are gone"))
    }

    fn sync(&mut self) -> io::Result<()> {
        syncfs(&self.j.objects)
    }
}

fn syncfs(dir: &File) -> io::Result<()> {
    // SAFETY: valid fd.
    if unsafe { libc::syncfs(dir.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Commits every interval or when kicked: syncfs(), then trims the journal.
pub(super) fn committer_loop(ctx: &ThreadCtx, j: Arc<Journal>) {
    let mut rec = Recorder::new(
        ctx.spec.target,
        ctx.thread,
        &ctx.timing,
        ctx.handover.clone(),
        ctx.inflight.clone(),
    );
    let period = ctx.spec.commit_interval;
    let mut last = Instant::now();
    while !ctx.stop.load(Relaxed) {
        let wait = period
            .saturating_sub(last.elapsed())
            .min(Duration::from_millis(50));
        match j.kick_rx.recv_timeout(wait) {
            Ok(()) => {}
            Err(RecvTimeoutError::Timeout) if last.elapsed() >= period => {}
            Err(_) => continue,
        }
        last = Instant::now();
        let applied = j.applied.load(Acquire);
        let s = rec.begin(OpKind::Sync);
        match syncfs(&j.objects) {
            Ok(()) => {
                rec.end(s, OpKind::Sync, 0);
                j.committed.fetch_max(applied, AcqRel);
            }
            Err(e) => {
                rec.inflight.leave();
                report(ctx, EventKind::WriterError, format!("syncfs failed: {e}"));
                sleep_unless_stopped(ctx, Duration::from_millis(500));
            }
        }
    }
}

/// FileStore's op threads: apply acked ops as buffered writes to object files.
pub const APPLIERS: u32 = 2;

/// One applier: writes each acked record to a new object file, deletes the
/// oldest beyond its share of the disk budget, credits the journal bytes.
pub(super) fn applier_loop(ctx: &ThreadCtx, j: Arc<Journal>, id: u32) {
    let spec = &ctx.spec;
    let rs = spec.record_size as usize;
    let data = vec![b'j'; rs];
    let keep = (spec.disk_budget / APPLIERS as u64 / spec.record_size).max(1);
    let dir = spec.dir.join("objects");
    let mut path = String::with_capacity(4096);
    fn name<'a>(path: &'a mut String, dir: &std::path::Path, id: u32, seq: u64) -> &'a str {
        path.clear();
        let _ = write!(path, "{}/obj-a{id}-{seq}", dir.display());
        path
    }
    let mut seq = 0u64;
    while !ctx.stop.load(Relaxed) {
        let need = match j.apply_rx.recv_timeout(Duration::from_millis(50)) {
            Ok(n) => n,
            Err(_) => continue,
        };
        let res = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(name(&mut path, &dir, id, seq))
            .and_then(|mut f| f.write_all(&data));
        if let Err(e) = res {
            report(ctx, EventKind::WriterError, format!("applier {id}: {e}"));
            sleep_unless_stopped(ctx, Duration::from_millis(500));
        }
        j.applied.fetch_add(need, AcqRel);
        if seq >= keep {
            let _ = std::fs::remove_file(name(&mut path, &dir, id, seq - keep));
        }
        seq += 1;
    }
}
