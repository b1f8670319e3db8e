//! Ceph FileStore's write path, the rados bench stall: each op writes its
//! record to a circular O_DIRECT journal (the ack, and the op's latency),
//! then applies it as a buffered write to an object file. A committer calls
//! syncfs() every commit interval, or early when the journal is half full,
//! and only then trims the journal. When the journal outruns the data disk it
//! fills, and new ops wait for the commit: throughput drops to 0 for seconds.

use super::{aligned::AlignedBuf, report, sleep_unless_stopped, EngineSpec, ThreadCtx, Workload};
use crate::config::DIRECT_ALIGN;
use crate::measure::{EventKind, OpKind, Recorder};
use crossbeam::channel::{bounded, Receiver, RecvTimeoutError, Sender};
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
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
        Ok(Journal {
            file,
            size,
            head: AtomicU64::new(0),
            committed: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            kick_tx,
            kick_rx,
            objects,
        })
    }

    fn used(&self) -> u64 {
        self.head.load(Acquire) - self.committed.load(Acquire)
    }
}

/// One writer thread of journal mode.
pub struct JournalWriter {
    j: Arc<Journal>,
    buf: AlignedBuf,
    record_size: usize,
    objects: PathBuf,
    thread: u32,
    seq: u64,
    /// Objects kept per thread before the oldest is deleted (disk budget).
    keep: u64,
    /// Journal bytes the op in hand reserved (credited once applied).
    pending: u64,
    path: String,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl JournalWriter {
    pub fn new(
        j: Arc<Journal>,
        spec: &EngineSpec,
        thread: u32,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> io::Result<Self> {
        let rs = spec.record_size as usize;
        let mut buf = AlignedBuf::new(rs, DIRECT_ALIGN as usize);
        buf.as_mut_slice().fill(b'j');
        let keep = (spec.disk_budget / spec.threads as u64 / spec.record_size).max(1);
        Ok(JournalWriter {
            j,
            buf,
            record_size: rs,
            objects: spec.dir.join("objects"),
            thread,
            seq: 0,
            keep,
            pending: 0,
            path: String::with_capacity(4096),
            stop,
        })
    }

    /// Builds an object path in the reused buffer (no allocation per op).
    fn object_path(&mut self, seq: u64) -> &str {
        self.path.clear();
        let _ = write!(
            self.path,
            "{}/obj-{}-{seq}",
            self.objects.display(),
            self.thread
        );
        &self.path
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
        let seq = self.seq;
        self.seq += 1;
        let rs = self.record_size;
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.object_path(seq))?;
        f.write_all(&self.buf.as_slice()[..rs])?;
        drop(f);
        self.j.applied.fetch_add(self.pending, AcqRel);
        self.pending = 0;
        if seq >= self.keep {
            let old = seq - self.keep;
            let _ = std::fs::remove_file(self.object_path(old));
        }
        Ok(())
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
