//! A commitlog of fresh segment files shared by all writer threads of a
//! target, as Cassandra's is: threads reserve their offset in the active
//! segment with one atomic add, write there, and the thread whose reservation
//! runs past the end rolls to a new segment. The op path takes no lock; the
//! roll (once per segment) takes a mutex, like Cassandra's segment allocation.
//!
//! Segments live in a fixed ring of slots. A thread *pins* a slot (a user
//! count) before it touches the segment's file or mapping, and a slot is only
//! torn down once it is retiring and has no users, so an mmap is never
//! unmapped under a writer that was stalled for seconds inside it.
//!
//! Old segments beyond the disk budget are deleted, but only after they were
//! synced (unless sync is off): deleting dirty pages would throw away the
//! very writeback we are here to watch. When the budget is full of unsynced
//! segments, the roll syncs the oldest itself: the writer waits, as
//! Cassandra's "waiting for segment allocation" does.

use memmap2::MmapRaw;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::Mutex;

/// How records reach a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    /// Sparse file of full length, mapped; records copied in with stores.
    Mmap,
    /// pwrite() at the reserved offset.
    Buffered,
    /// O_DIRECT pwrite of whole aligned blocks.
    Direct,
}

const FREE: u8 = 0;
const ACTIVE: u8 = 1;
const FULL: u8 = 2;
const RETIRING: u8 = 3;

struct Segment {
    file: File,
    map: Option<MmapRaw>,
    path: PathBuf,
}

struct Slot {
    state: AtomicU8,
    users: AtomicU32,
    cursor: AtomicU64,
    synced: AtomicBool,
    /// Written only while the slot is FREE, or RETIRING with no users.
    seg: UnsafeCell<Option<Segment>>,
}

// SAFETY: `seg` is only mutated under the roll mutex while no thread holds a
// pin (see `pin` and `retire`); shared access happens only under a pin.
unsafe impl Sync for Slot {}

struct RollState {
    /// Slots holding segments, oldest first (the active one last).
    live: VecDeque<usize>,
    next_seq: u64,
    /// Whether the latest roll had to sync (threads that waited on it did too).
    last_roll_synced: bool,
}

/// The shared log of one target.
pub struct SegmentLog {
    dir: PathBuf,
    /// File name prefix, so several logs can share a folder.
    prefix: String,
    kind: LogKind,
    seg_size: u64,
    /// Keep at most this many segments (the budget).
    keep: usize,
    sync_enabled: bool,
    slots: Box<[Slot]>,
    active: AtomicUsize,
    roll: Mutex<RollState>,
    /// The writer thread (its number + 1; 0: none) that holds `roll`, so a
    /// thread that has to wait for it can say whose roll it waited behind.
    roller: AtomicU32,
    bytes_on_disk: AtomicU64,
}

/// What an append did besides writing: whether it had to wait for a
/// segment sync, and behind which sibling's roll it waited, if it did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Appended {
    pub synced: bool,
    pub behind: Option<u32>,
}

/// Proof that a slot's segment cannot be torn down; released on drop.
pub struct Pin<'a> {
    slot: &'a Slot,
}

impl Drop for Pin<'_> {
    fn drop(&mut self) {
        self.slot.users.fetch_sub(1, SeqCst);
    }
}

impl Pin<'_> {
    fn seg(&self) -> &Segment {
        // SAFETY: a pinned slot is ACTIVE or FULL and its segment stays set.
        unsafe {
            (*self.slot.seg.get())
                .as_ref()
                .expect("pinned slot has a segment")
        }
    }
}

impl SegmentLog {
    /// Creates the log and its first segment in `dir` (our scratch folder).
    pub fn create(
        dir: &Path,
        prefix: &str,
        kind: LogKind,
        seg_size: u64,
        budget: u64,
        sync_enabled: bool,
    ) -> io::Result<SegmentLog> {
        let keep = ((budget / seg_size) as usize).max(2);
        let slots = (0..keep + 2)
            .map(|_| Slot {
                state: AtomicU8::new(FREE),
                users: AtomicU32::new(0),
                cursor: AtomicU64::new(0),
                synced: AtomicBool::new(false),
                seg: UnsafeCell::new(None),
            })
            .collect();
        let log = SegmentLog {
            dir: dir.to_path_buf(),
            prefix: prefix.to_string(),
            kind,
            seg_size,
            keep,
            sync_enabled,
            slots,
            active: AtomicUsize::new(0),
            roll: Mutex::new(RollState {
                live: VecDeque::new(),
                next_seq: 0,
                last_roll_synced: false,
            }),
            roller: AtomicU32::new(0),
            bytes_on_disk: AtomicU64::new(0),
        };
        {
            let mut st = log.roll.lock().expect("roll mutex");
            log.open_segment(&mut st, 0)?;
        }
        Ok(log)
    }

    pub fn segment_size(&self) -> u64 {
        self.seg_size
    }

    /// Bytes the live segments take (their logical length).
    pub fn bytes_on_disk(&self) -> u64 {
        self.bytes_on_disk.load(Relaxed)
    }

    fn pin(&self, idx: usize) -> Option<Pin<'_>> {
        let slot = &self.slots[idx];
        slot.users.fetch_add(1, SeqCst);
        let st = slot.state.load(SeqCst);
        if st == ACTIVE || st == FULL {
            Some(Pin { slot })
        } else {
            slot.users.fetch_sub(1, SeqCst);
            None
        }
    }

    /// Appends `buf` as one record (or one aligned block in direct mode),
    /// for writer thread `me`. Never splits a record over two segments.
    /// `on_roll` is called before this thread waits for a new segment (so
    /// it can say so to the watchdog). Says whether the op had to wait for
    /// a segment sync, and behind which thread's roll it waited.
    pub fn append(&self, buf: &[u8], me: u32, mut on_roll: impl FnMut()) -> io::Result<Appended> {
        let mut done = Appended::default();
        let len = buf.len() as u64;
        loop {
            let idx = self.active.load(Acquire);
            let Some(pin) = self.pin(idx) else {
                std::hint::spin_loop();
                continue;
            };
            let off = if pin.slot.state.load(Acquire) == ACTIVE {
                pin.slot.cursor.fetch_add(len, Relaxed)
            } else {
                u64::MAX - len
            };
            if off + len > self.seg_size {
                drop(pin);
                on_roll();
                let (synced, behind) = self.roll_from(idx, me)?;
                done.synced |= synced;
                done.behind = behind.or(done.behind);
                continue;
            }
            let seg = pin.seg();
            return match &seg.map {
                Some(map) => {
                    // SAFETY: [off, off+len) was reserved for us alone and lies
                    // inside the mapping, which the pin keeps alive.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            buf.as_ptr(),
                            map.as_mut_ptr().add(off as usize),
                            buf.len(),
                        )
                    };
                    Ok(done)
                }
                None => {
                    seg.file.write_all_at(buf, off)?;
                    self.bytes_on_disk.fetch_add(len, Relaxed);
                    Ok(done)
                }
            };
        }
    }

    /// Rolls to a new segment unless another thread already did. Returns
    /// whether a sync had to happen first (by us or the thread we waited
    /// on), and the thread we waited behind if the roll was taken. Once
    /// per segment, never per op: the lock and the look at `roller` cost
    /// the op path nothing.
    fn roll_from(&self, full_idx: usize, me: u32) -> io::Result<(bool, Option<u32>)> {
        let poisoned = |_| io::Error::other("roll mutex poisoned");
        let (mut st, behind) = match self.roll.try_lock() {
            Ok(st) => (st, None),
            Err(std::sync::TryLockError::WouldBlock) => {
                let holder = self.roller.load(Acquire).checked_sub(1);
                (self.roll.lock().map_err(poisoned)?, holder)
            }
            Err(std::sync::TryLockError::Poisoned(e)) => return Err(poisoned(e)),
        };
        if self.active.load(Acquire) != full_idx {
            return Ok((st.last_roll_synced, behind));
        }
        self.roller.store(me + 1, Release);
        let rolled = self.roll_locked(&mut st, full_idx);
        self.roller.store(0, Release);
        Ok((rolled?, behind))
    }

    /// The roll itself, under the roll mutex: true if it had to sync.
    fn roll_locked(&self, st: &mut RollState, full_idx: usize) -> io::Result<bool> {
        self.slots[full_idx].state.store(FULL, SeqCst);
        let next = (full_idx + 1) % self.slots.len();
        let synced = self.make_room(st, next)?;
        st.last_roll_synced = synced;
        self.open_segment(st, next)?;
        Ok(synced)
    }

    /// Retires the oldest segments until the budget and the ring have room.
    /// Returns true if it had to sync one first.
    fn make_room(&self, st: &mut RollState, next: usize) -> io::Result<bool> {
        let mut synced = false;
        loop {
            let over = st.live.len() >= self.keep;
            let ring_busy = self.slots[next].state.load(SeqCst) != FREE;
            if !over && !ring_busy {
                return Ok(synced);
            }
            let Some(&oldest) = st.live.front() else {
                return Err(io::Error::other("segment ring exhausted"));
            };
            if self.sync_enabled && !self.slots[oldest].synced.load(Acquire) {
                self.sync_slot(oldest)?;
                synced = true;
            }
            if self.retire(oldest)? {
                st.live.pop_front();
            } else {
                // A writer is still inside it (stalled); wait for it.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
    }

    /// Tears a FULL slot down if nobody uses it. Returns false if in use.
    fn retire(&self, idx: usize) -> io::Result<bool> {
        let slot = &self.slots[idx];
        slot.state.store(RETIRING, SeqCst);
        if slot.users.load(SeqCst) != 0 {
            slot.state.store(FULL, SeqCst);
            return Ok(false);
        }
        // SAFETY: RETIRING with no users: no pin exists or can be taken.
        let seg = unsafe { (*slot.seg.get()).take() };
        if let Some(seg) = seg {
            let len = self.segment_len(&seg);
            drop(seg.map);
            drop(seg.file);
            std::fs::remove_file(&seg.path)?;
            self.bytes_on_disk.fetch_sub(len, Relaxed);
        }
        slot.state.store(FREE, SeqCst);
        Ok(true)
    }

    fn segment_len(&self, seg: &Segment) -> u64 {
        seg.file
            .metadata()
            .map(|m| m.len())
            .unwrap_or(self.seg_size)
    }

    fn open_segment(&self, st: &mut RollState, idx: usize) -> io::Result<()> {
        if self.kind == LogKind::Mmap && free_bytes(&self.dir).is_some_and(|f| f < self.seg_size) {
            // A store into a sparse mapping that cannot get a block is a
            // SIGBUS, not an error: refuse the segment while we still can.
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let path = self
            .dir
            .join(format!("{}seg-{:06}.log", self.prefix, st.next_seq));
        st.next_seq += 1;
        let mut oo = OpenOptions::new();
        oo.read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
        if self.kind == LogKind::Direct {
            oo.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_DIRECT);
        }
        let file = oo.open(&path)?;
        let map = if self.kind == LogKind::Mmap {
            // A fresh sparse file: the page faults of the first stores allocate blocks.
            file.set_len(self.seg_size)?;
            self.bytes_on_disk.fetch_add(self.seg_size, Relaxed);
            Some(MmapRaw::map_raw(&file)?)
        } else {
            None
        };
        let slot = &self.slots[idx];
        debug_assert_eq!(slot.state.load(SeqCst), FREE);
        // SAFETY: the slot is FREE: no pins, and we hold the roll mutex.
        unsafe { *slot.seg.get() = Some(Segment { file, map, path }) };
        slot.cursor.store(0, SeqCst);
        slot.synced.store(false, SeqCst);
        slot.state.store(ACTIVE, SeqCst);
        st.live.push_back(idx);
        self.active.store(idx, Release);
        Ok(())
    }

    /// Makes one slot's written range durable (msync or fdatasync).
    fn sync_slot(&self, idx: usize) -> io::Result<()> {
        let Some(pin) = self.pin(idx) else {
            return Ok(());
        };
        let was_full = pin.slot.state.load(SeqCst) == FULL;
        let written = pin.slot.cursor.load(Acquire).min(self.seg_size);
        let seg = pin.seg();
        match &seg.map {
            Some(map) if written > 0 => map.flush_range(0, written as usize)?,
            Some(_) => {}
            None => seg.file.sync_data()?,
        }
        if was_full {
            pin.slot.synced.store(true, Release);
        }
        Ok(())
    }

    /// Syncs every segment written since its last sync: the sync op of
    /// `periodic` and `every:N`.
    pub fn sync_all(&self) -> io::Result<()> {
        for idx in 0..self.slots.len() {
            if !self.slots[idx].synced.load(Acquire) {
                self.sync_slot(idx)?;
            }
        }
        Ok(())
    }

    /// Number of segments currently on disk.
    pub fn live_segments(&self) -> usize {
        self.roll.lock().map(|s| s.live.len()).unwrap_or(0)
    }
}

/// Bytes an unprivileged writer can still allocate on `dir`'s filesystem.
pub(crate) fn free_bytes(dir: &Path) -> Option<u64> {
    size_and_free(dir).map(|(_, free)| free)
}

/// The whole size of `dir`'s filesystem and the bytes an unprivileged
/// writer can still allocate on it.
pub(crate) fn size_and_free(dir: &Path) -> Option<(u64, u64)> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a valid C string and a zeroed statvfs to fill.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut st) == 0)
            .then(|| (st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize))
    }
}

impl Drop for SegmentLog {
    fn drop(&mut self) {
        for slot in self.slots.iter_mut() {
            // Exclusive access: no thread can hold a pin any more.
            if let Some(seg) = slot.seg.get_mut().take() {
                drop(seg.map);
                let _ = std::fs::remove_file(&seg.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    #[test]
    fn rolls_and_keeps_budget() {
        for kind in [LogKind::Mmap, LogKind::Buffered] {
            let t = tempfile::tempdir().unwrap();
            // 4 KiB segments, budget of 3 segments, 1000-byte records: 4 per segment.
            let log = SegmentLog::create(t.path(), "", kind, 4096, 3 * 4096, false).unwrap();
            let rec = [7u8; 1000];
            for _ in 0..4 {
                log.append(&rec, 0, || {}).unwrap();
            }
            assert_eq!(files(t.path()), 1, "{kind:?}: four records fit one segment");
            log.append(&rec, 0, || {}).unwrap();
            assert_eq!(files(t.path()), 2, "{kind:?}: the fifth rolls");
            for _ in 0..40 {
                log.append(&rec, 0, || {}).unwrap();
            }
            assert!(files(t.path()) <= 3, "{kind:?}: budget holds");
            assert_eq!(log.live_segments(), files(t.path()));
            // The newest segment holds the newest records, unsplit.
            let mut names: Vec<_> = std::fs::read_dir(t.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            names.sort();
            let newest = std::fs::read(names.last().unwrap()).unwrap();
            assert!(newest[..1000].iter().all(|&b| b == 7));
            drop(log);
            assert_eq!(files(t.path()), 0, "{kind:?}: drop removes segments");
        }
    }

    #[test]
    fn concurrent_appends_all_land() {
        let t = tempfile::tempdir().unwrap();
        let log = SegmentLog::create(t.path(), "", LogKind::Mmap, 64 << 10, 1 << 30, true).unwrap();
        std::thread::scope(|s| {
            for th in 0..4u8 {
                let log = &log;
                s.spawn(move || {
                    let rec = [th + 1; 100];
                    for _ in 0..5000 {
                        log.append(&rec, 0, || {}).unwrap();
                    }
                });
            }
        });
        log.sync_all().unwrap();
        let mut total = 0usize;
        for e in std::fs::read_dir(t.path()).unwrap() {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            total += data
                .chunks(100)
                .filter(|c| c.len() == 100 && c[0] != 0)
                .count();
        }
        assert_eq!(total, 4 * 5000);
    }

    /// #25: a writer that waits for the roll another thread holds knows
    /// whose it was; one that takes the roll itself waited behind nobody.
    #[test]
    fn a_writer_waiting_for_a_sibling_s_roll_knows_which() {
        let t = tempfile::tempdir().unwrap();
        let log = SegmentLog::create(t.path(), "", LogKind::Mmap, 4096, 1 << 20, false).unwrap();
        for _ in 0..4 {
            assert_eq!(
                log.append(&[1u8; 1000], 2, || {}).unwrap(),
                Appended::default()
            );
        }
        let rolled = log.append(&[1u8; 1000], 2, || {}).unwrap();
        assert_eq!(rolled.behind, None, "it rolled itself");
        for _ in 0..3 {
            log.append(&[1u8; 1000], 2, || {}).unwrap();
        }
        // Thread 3 is rolling (it holds the mutex) when thread 1 needs to.
        let held = log.roll.lock().unwrap();
        log.roller.store(3 + 1, Release);
        let waited = std::thread::scope(|s| {
            let w = s.spawn(|| log.append(&[1u8; 1000], 1, || {}).unwrap());
            std::thread::sleep(std::time::Duration::from_millis(50));
            log.roller.store(0, Release);
            drop(held);
            w.join().unwrap()
        });
        assert_eq!(waited.behind, Some(3));
        assert_eq!(log.roller.load(Acquire), 0, "released with the roll");
    }

    #[test]
    fn unsynced_segments_are_synced_before_deletion() {
        let t = tempfile::tempdir().unwrap();
        let log = SegmentLog::create(t.path(), "", LogKind::Mmap, 4096, 2 * 4096, true).unwrap();
        for _ in 0..40 {
            log.append(&[1u8; 1000], 0, || {}).unwrap();
        }
        assert!(files(t.path()) <= 2);
    }
}
