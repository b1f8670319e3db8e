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
    /// Threads' names, from their scheduler events.
    names: HashMap<u32, Comm>,
}

/// What one returned call adds to a pattern.
enum Counted {
    Write {
        bytes: u64,
        fd: Option<i64>,
    },
    /// What the sync flushed (None: msync).
    Sync(Option<u64>),
    Other,
}

/// One returned call (its name, what it did, ms inside, whether it
/// failed) counted into a pattern and its set of fds written.
fn count(
    p: &mut CallPattern,
    fds: &mut HashSet<i64>,
    (name, what, ms, failed): &(&str, Counted, f64, bool),
) {
    if *failed {
        p.failed += 1;
    }
    match what {
        Counted::Write { bytes, fd } => {
            p.writes += 1;
            p.write_bytes += bytes;
            p.write_ms += ms;
            *p.write_size_log2.entry(log2_bucket(*bytes)).or_default() += 1;
            if let Some(fd) = fd {
                fds.insert(*fd);
            }
        }
        Counted::Sync(flushed) => {
            let s = p.syncs.entry((*name).to_string()).or_default();
            s.calls += 1;
            s.in_call_ms += ms;
            if let Some(b) = flushed {
                s.bytes_before += b;
                *s.bytes_before_log2.entry(log2_bucket(*b)).or_default() += 1;
            }
        }
        Counted::Other => *p.other.entry((*name).to_string()).or_default() += 1,
    }
}

/// One interval's pattern of one process and the fds it wrote.
#[derive(Clone, Debug, Default)]
pub struct PatternAcc {
    pub pattern: CallPattern,
    pub fds: HashSet<i64>,
    /// Each thread's part, by its name (threads of one name together).
    pub threads: HashMap<Comm, (CallPattern, HashSet<i64>)>,
}

impl PatternAcc {
    pub fn add(&mut self, o: &PatternAcc) {
        self.pattern.add(&o.pattern);
        self.fds.extend(&o.fds);
        for (name, (p, fds)) in &o.threads {
            let (mp, mfds) = self.threads.entry(*name).or_default();
            mp.add(p);
            mfds.extend(fds);
        }
    }

    /// The interval's pattern, with its count of fds written, and its
    /// threads' parts unless only threads named as the process (`comm`)
    /// made calls: that part would only repeat the whole. A lone thread of
    /// another name keeps its part, or its role would change with whether
    /// another role happened to call in the same interval.
    pub fn finish(mut self, comm: &str) -> CallPattern {
        self.pattern.files = self.fds.len() as u32;
        let only_comm = self.threads.len() <= 1 && self.threads.keys().all(|n| n.as_str() == comm);
        if !only_comm {
            self.pattern.threads = self
                .threads
                .into_iter()
                .map(|(name, (mut p, fds))| {
                    p.files = fds.len() as u32;
                    (name.as_str().to_string(), p)
                })
                .collect();
        }
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
    /// counted into `acc`, and into its thread's part there under the
    /// thread's name. An exit without its entry (the trace began inside
    /// the call) is not counted.
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
        let what = if WRITE_CALLS.contains(&name) {
            let bytes = u64::try_from(ret).unwrap_or(0);
            if let Some(fd) = open.fd {
                *self.unsynced.entry((pid, fd)).or_default() += bytes;
            }
            Counted::Write { bytes, fd: open.fd }
        } else if SYNC_CALLS.contains(&name) {
            Counted::Sync(self.flushed(pid, name, open.fd))
        } else {
            if name == "close" {
                if let Some(fd) = open.fd {
                    self.unsynced.remove(&(pid, fd));
                }
            }
            Counted::Other
        };
        let c = (name, what, ms, ret < 0);
        count(&mut acc.pattern, &mut acc.fds, &c);
        let thread = self
            .names
            .get(&tid)
            .copied()
            .unwrap_or_else(|| Comm::new("?"));
        let (p, fds) = acc.threads.entry(thread).or_default();
        count(p, fds, &c);
    }

    /// `tid`'s name (from its scheduler events), for its part of the
    /// pattern.
    pub fn name(&mut self, tid: u32, comm: Comm) {
        if self.names.get(&tid) != Some(&comm) {
            self.names.insert(tid, comm);
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
        self.names.remove(&tid);
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
        let p = acc.finish("p");
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
        let p = acc.finish("p");
        assert_eq!(p.syncs["syncfs"].bytes_before, 1500);
        assert_eq!(p.syncs["fsync"].bytes_before, 0);
        assert_eq!(p.other["close"], 1);
    }

    #[test]
    fn threads_of_two_names_get_their_own_parts() {
        let (mut t, mut acc) = (CallTracker::default(), PatternAcc::default());
        t.name(7, Comm::new("wal"));
        t.name(8, Comm::new("flush"));
        for (tid, name, fd, ret) in [
            (7, "write", 3, 100),
            (7, "fdatasync", 3, 0),
            (8, "pwrite64", 4, 8192),
            (8, "pwrite64", 5, 8192),
        ] {
            let c = Comm::new(name);
            t.enter(tid, c, Some(fd), 0);
            t.exit(1, tid, c, ret, 1_000_000, &mut acc);
        }
        let mut one = PatternAcc::default();
        t.enter(7, Comm::new("write"), Some(3), 0);
        t.exit(1, 7, Comm::new("write"), 1, 1, &mut one);
        assert!(
            one.finish("wal").threads.is_empty(),
            "the process's name: no parts"
        );
        let mut other = PatternAcc::default();
        t.enter(8, Comm::new("write"), Some(4), 0);
        t.exit(1, 8, Comm::new("write"), 1, 1, &mut other);
        assert_eq!(
            other.finish("wal").threads["flush"].writes,
            1,
            "another name: its part"
        );
        let p = acc.finish("p");
        assert_eq!((p.writes, p.files), (3, 3));
        assert_eq!(p.threads["wal"].writes, 1);
        assert_eq!(p.threads["wal"].syncs["fdatasync"].bytes_before, 100);
        assert_eq!(
            (
                p.threads["flush"].writes,
                p.threads["flush"].write_bytes,
                p.threads["flush"].files
            ),
            (2, 16384, 2)
        );
    }

    #[test]
    fn an_exit_without_its_entry_is_not_counted() {
        let (mut t, mut acc) = (CallTracker::default(), PatternAcc::default());
        t.exit(1, 7, Comm::new("write"), 4096, 5, &mut acc);
        t.enter(7, Comm::new("fsync"), Some(3), 10);
        t.exit(1, 7, Comm::new("write"), 4096, 20, &mut acc);
        assert!(acc.finish("p").is_empty());
    }
}
