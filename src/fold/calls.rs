//! Observed threads' write-path calls counted into each process's
//! `CallPattern`, from the syscall events the scheduler's timing already
//! traces (so capturing the pattern costs the server nothing more): a
//! call counts when it returns, with the fd and entry time of its entry.
//! Across intervals it keeps, per process and fd, the bytes written since
//! that fd's previous sync: what each sync had to flush.

use crate::model::kernel::Comm;
use crate::model::pattern::{log2_bucket, CallPattern, SYNC_CALLS, WRITE_CALLS};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// A call entered and not yet returned.
#[derive(Clone, Copy, Debug)]
struct Open {
    call: Comm,
    fd: Option<i64>,
    entry_ns: u64,
}

/// The calls under way and the bytes awaiting a sync.
#[derive(Debug, Default)]
pub struct CallTracker {
    open: HashMap<u32, Open>,
    /// (pid, fd) → bytes written through it since its previous sync.
    unsynced: HashMap<(u32, i64), u64>,
}

/// One interval's pattern of one process and the fds it wrote.
#[derive(Clone, Debug, Default)]
pub struct PatternAcc {
    pub pattern: CallPattern,
    pub fds: HashSet<i64>,
}

impl PatternAcc {
    pub fn add(&mut self, o: &PatternAcc) {
        self.pattern.add(&o.pattern);
        self.fds.extend(&o.fds);
    }

    /// The interval's pattern, with its count of fds written.
    pub fn finish(mut self) -> CallPattern {
        self.pattern.files = self.fds.len() as u32;
        self.pattern
    }
}

impl CallTracker {
    /// `tid` entered `call` (its fd argument, when it takes one).
    pub fn enter(&mut self, tid: u32, call: Comm, fd: Option<i64>, t_ns: u64) {
        self.open.insert(
            tid,
            Open {
                call,
                fd,
                entry_ns: t_ns,
            },
        );
    }

    /// `tid` of process `pid` returned `ret` from `call` at `t_ns`:
    /// counted into `acc`. An exit without its entry (the trace began
    /// inside the call) is not counted.
    pub fn exit(
        &mut self,
        pid: u32,
        tid: u32,
        call: Comm,
        ret: i64,
        t_ns: u64,
        acc: &mut PatternAcc,
    ) {
        let Some(open) = self.open.remove(&tid).filter(|o| o.call == call) else {
            return;
        };
        let ms = t_ns.saturating_sub(open.entry_ns) as f64 / 1e6;
        let name = call.as_str();
        let p = &mut acc.pattern;
        if ret < 0 {
            p.failed += 1;
        }
        if WRITE_CALLS.contains(&name) {
            let bytes = u64::try_from(ret).unwrap_or(0);
            p.writes += 1;
            p.write_bytes += bytes;
            p.write_ms += ms;
            *p.write_size_log2.entry(log2_bucket(bytes)).or_default() += 1;
            if let Some(fd) = open.fd {
                acc.fds.insert(fd);
                *self.unsynced.entry((pid, fd)).or_default() += bytes;
            }
        } else if SYNC_CALLS.contains(&name) {
            let flushed = self.flushed(pid, name, open.fd);
            let s = p.syncs.entry(name.to_string()).or_default();
            s.calls += 1;
            s.in_call_ms += ms;
            if let Some(b) = flushed {
                s.bytes_before += b;
                *s.bytes_before_log2.entry(log2_bucket(b)).or_default() += 1;
            }
        } else {
            if name == "close" {
                if let Some(fd) = open.fd {
                    self.unsynced.remove(&(pid, fd));
                }
            }
            *p.other.entry(name.to_string()).or_default() += 1;
        }
    }

    /// What a sync of `fd` (or of everything) by `pid` flushed of what it
    /// wrote; the count starts again. msync's stores are not calls: None.
    fn flushed(&mut self, pid: u32, call: &str, fd: Option<i64>) -> Option<u64> {
        match (call, fd) {
            ("msync", _) => None,
            ("syncfs" | "sync", _) => {
                let mut sum = 0;
                for (k, b) in self.unsynced.iter_mut() {
                    if k.0 == pid {
                        sum += std::mem::take(b);
                    }
                }
                Some(sum)
            }
            (_, Some(fd)) => Some(self.unsynced.get_mut(&(pid, fd)).map_or(0, std::mem::take)),
            (_, None) => None,
        }
    }

    /// A process left: its fds and calls go.
    pub fn forget(&mut self, pid: u32) {
        self.unsynced.retain(|k, _| k.0 != pid);
    }

    /// A thread left.
    pub fn forget_thread(&mut self, tid: u32) {
        self.open.remove(&tid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(t: &mut CallTracker, acc: &mut PatternAcc, name: &str, fd: i64, ret: i64, at_ms: u64) {
        let c = Comm::new(name);
        t.enter(7, c, Some(fd), at_ms * 1_000_000);
        t.exit(1, 7, c, ret, (at_ms + 2) * 1_000_000, acc);
    }

    #[test]
    fn writes_count_with_their_sizes_and_each_sync_with_what_it_flushed() {
        let (mut t, mut acc) = (CallTracker::default(), PatternAcc::default());
        call(&mut t, &mut acc, "write", 3, 4096, 0);
        call(&mut t, &mut acc, "pwrite64", 3, 8192, 10);
        call(&mut t, &mut acc, "write", 4, 100, 20);
        call(&mut t, &mut acc, "fdatasync", 3, 0, 30);
        call(&mut t, &mut acc, "fdatasync", 3, 0, 40);
        call(&mut t, &mut acc, "write", 5, -28, 50);
        let p = acc.finish();
        assert_eq!(
            (p.writes, p.write_bytes, p.files, p.failed),
            (4, 12388, 3, 1)
        );
        assert_eq!(p.write_size_log2[&12], 1);
        assert_eq!(p.write_size_log2[&13], 1);
        assert_eq!(p.write_size_log2[&7], 1);
        assert_eq!(p.write_size_log2[&0], 1);
        assert!((p.write_ms - 8.0).abs() < 1e-9);
        let s = &p.syncs["fdatasync"];
        assert_eq!((s.calls, s.bytes_before), (2, 12288));
        // The first flushed 12 KiB, the second nothing.
        assert_eq!(s.bytes_before_log2[&14], 1);
        assert_eq!(s.bytes_before_log2[&0], 1);
    }

    #[test]
    fn syncfs_flushes_every_fd_and_close_forgets_one() {
        let (mut t, mut acc) = (CallTracker::default(), PatternAcc::default());
        call(&mut t, &mut acc, "write", 3, 1000, 0);
        call(&mut t, &mut acc, "write", 4, 1000, 5);
        call(&mut t, &mut acc, "close", 4, 0, 8);
        call(&mut t, &mut acc, "write", 5, 500, 9);
        call(&mut t, &mut acc, "syncfs", 3, 0, 10);
        call(&mut t, &mut acc, "fsync", 5, 0, 20);
        let p = acc.finish();
        assert_eq!(p.syncs["syncfs"].bytes_before, 1500);
        assert_eq!(p.syncs["fsync"].bytes_before, 0);
        assert_eq!(p.other["close"], 1);
    }

    #[test]
    fn an_exit_without_its_entry_is_not_counted() {
        let (mut t, mut acc) = (CallTracker::default(), PatternAcc::default());
        t.exit(1, 7, Comm::new("write"), 4096, 5, &mut acc);
        t.enter(7, Comm::new("fsync"), Some(3), 10);
        t.exit(1, 7, Comm::new("write"), 4096, 20, &mut acc);
        assert!(acc.finish().is_empty());
    }
}
