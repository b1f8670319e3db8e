//! An independent account of system calls, from the kernel, read by code
//! that shares nothing with stallscope: its own tracefs instance
//! (`stallscope-test-syscalls-<pid>`, trace_clock=mono) with
//! `raw_syscalls/sys_enter` and `sys_exit` filtered by syscall number and
//! by `set_event_pid` (with `options/event-fork`, so threads and children
//! forked later follow), paired per thread into calls with their entry and
//! exit on CLOCK_MONOTONIC. The same instance carries `sched_switch` into
//! D and `sched_wakeup`, so each call also says how long it was blocked
//! (wakeup − switch, summed; every D stretch is kept too), and `sched_process_fork`, so a thread forked
//! while tracing says when it was born.
//! Dropping it removes the instance, and unmounts tracefs if this mounted
//! it and no other instance is left (otherwise it leaves the mount to the
//! last stallscope run out, through stallscope's marker file:
//! `tracefs::release`).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::tracefs::TRACEFS;
/// What `stop` writes into the instance's marker: the reader stops there.
const STOP_MARK: &str = "stallscope-syscall-truth-stop";

/// The write-path calls by number: (name, x86_64, aarch64). aarch64 has no
/// plain `rename` (asm-generic/unistd.h); checked against <sys/syscall.h>
/// on x86_64 and asm-generic/unistd.h.
const CALLS: &[(&str, Option<i64>, Option<i64>)] = &[
    ("write", Some(1), Some(64)),
    ("pwrite64", Some(18), Some(68)),
    ("writev", Some(20), Some(66)),
    ("pwritev", Some(296), Some(70)),
    ("pwritev2", Some(328), Some(287)),
    ("fsync", Some(74), Some(82)),
    ("fdatasync", Some(75), Some(83)),
    ("msync", Some(26), Some(227)),
    ("sync_file_range", Some(277), Some(84)),
    ("syncfs", Some(306), Some(267)),
    ("sync", Some(162), Some(81)),
    ("fallocate", Some(285), Some(47)),
    ("ftruncate", Some(77), Some(46)),
    ("io_submit", Some(209), Some(2)),
    ("io_uring_enter", Some(426), Some(426)),
    ("close", Some(3), Some(57)),
    ("rename", Some(82), None),
    ("renameat", Some(264), Some(38)),
    ("renameat2", Some(316), Some(276)),
];

/// Every call name the table knows.
pub const ALL_CALLS: &[&str] = &[
    "write",
    "pwrite64",
    "writev",
    "pwritev",
    "pwritev2",
    "fsync",
    "fdatasync",
    "msync",
    "sync_file_range",
    "syncfs",
    "sync",
    "fallocate",
    "ftruncate",
    "io_submit",
    "io_uring_enter",
    "close",
    "rename",
    "renameat",
    "renameat2",
];

/// This machine's number of a call, if the table has it here.
pub fn nr_of(name: &str) -> Option<i64> {
    let (_, x86, arm) = CALLS.iter().find(|(n, ..)| *n == name)?;
    match std::env::consts::ARCH {
        "x86_64" => *x86,
        "aarch64" => *arm,
        _ => None,
    }
}

fn name_of(nr: i64) -> Option<&'static str> {
    CALLS
        .iter()
        .map(|(n, ..)| *n)
        .find(|n| nr_of(n) == Some(nr))
}

/// One finished system call of a traced thread.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub tid: u32,
    pub name: &'static str,
    /// Entry and exit, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Time in D (uninterruptible) inside the call, ns.
    pub blocked_ns: u64,
}

impl Call {
    pub fn dur_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
}

/// What the reader gathered.
#[derive(Debug, Default)]
pub struct Calls {
    pub calls: Vec<Call>,
    /// Events the ring buffer dropped (`[LOST n EVENTS]` lines and the
    /// per-CPU overrun counters); not 0 means calls may be missing.
    pub lost: u64,
    /// Exits whose entry was before tracing began, and calls still open
    /// when it stopped: not in `calls`.
    pub unpaired: u64,
    /// Threads and processes forked while tracing: tid → mono ns.
    pub born: HashMap<u32, u64>,
    /// Every D period of the traced threads, in calls or not.
    pub blocks: Vec<Block>,
}

/// One stretch in D (switch out in D → wakeup), mono ns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Block {
    pub tid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Calls {
    /// D time of thread `tid` within [from, to] (mono ns).
    pub fn blocked_in(&self, tid: u32, from: u64, to: u64) -> u64 {
        self.blocks
            .iter()
            .filter(|b| b.tid == tid)
            .map(|b| b.end_ns.min(to).saturating_sub(b.start_ns.max(from)))
            .sum()
    }
}

/// One parsed trace line.
#[derive(Debug, PartialEq)]
pub enum Ev {
    Enter {
        tid: u32,
        t_ns: u64,
        nr: i64,
    },
    Exit {
        tid: u32,
        t_ns: u64,
        nr: i64,
    },
    /// A switch out of the CPU into D of `tid`.
    Block {
        tid: u32,
        t_ns: u64,
    },
    Wake {
        tid: u32,
        t_ns: u64,
    },
    /// A fork or clone whose child is `tid`.
    Fork {
        tid: u32,
        t_ns: u64,
    },
    Lost(u64),
}

pub struct SyscallTruth {
    instance: PathBuf,
    mounted: bool,
    /// A handle on tracefs held while the instance lives: nobody can
    /// unmount it under us (umount would fail with EBUSY).
    _hold: Option<std::fs::File>,
    out: Arc<Mutex<Calls>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl SyscallTruth {
    /// Starts recording the calls `names` of the threads `pids` (tids;
    /// each thread of an existing process must be given: event-fork only
    /// follows forks and clones made from now on).
    pub fn start(pids: &[u32], names: &[&str]) -> SyscallTruth {
        let root = Path::new(TRACEFS);
        let (mounted, hold) = mount_and_hold(root);
        let instance = root
            .join("instances")
            .join(format!("stallscope-test-syscalls-{}", std::process::id()));
        std::fs::create_dir(&instance).unwrap();
        let mut t = SyscallTruth {
            instance,
            mounted,
            _hold: Some(hold),
            out: Arc::new(Mutex::new(Calls::default())),
            reader: None,
        };
        let w = |f: &str, v: &str| {
            std::fs::write(t.instance.join(f), v).unwrap_or_else(|e| panic!("write {f} = {v}: {e}"))
        };
        w("trace_clock", "mono");
        w("buffer_size_kb", "8192");
        let nrs: Vec<String> = names
            .iter()
            .filter_map(|n| nr_of(n))
            .map(|nr| format!("id == {nr}"))
            .collect();
        assert!(
            !nrs.is_empty(),
            "no known call among {names:?} on this arch"
        );
        let filter = nrs.join(" || ");
        w("events/raw_syscalls/sys_enter/filter", &filter);
        w("events/raw_syscalls/sys_exit/filter", &filter);
        w("events/sched/sched_switch/filter", "prev_state & 2");
        w("options/event-fork", "1");
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        w("set_event_pid", &list.join(" "));
        let pipe = std::fs::File::open(t.instance.join("trace_pipe")).unwrap();
        let out = t.out.clone();
        t.reader = Some(std::thread::spawn(move || read_loop(pipe, &out)));
        for e in [
            "sched/sched_switch",
            "sched/sched_wakeup",
            "sched/sched_process_fork",
            "raw_syscalls/sys_enter",
            "raw_syscalls/sys_exit",
        ] {
            w(&format!("events/{e}/enable"), "1");
        }
        t
    }

    /// Stops and returns the calls, in order of exit.
    pub fn stop(mut self) -> Calls {
        self.finish();
        std::mem::take(&mut *self.out.lock().unwrap())
    }

    fn finish(&mut self) {
        for e in ["raw_syscalls", "sched"] {
            let _ = std::fs::write(self.instance.join(format!("events/{e}/enable")), "0");
        }
        let Some(r) = self.reader.take() else {
            return;
        };
        // The marker ends the reader's blocking read, after every event
        // recorded before it.
        let _ = std::fs::write(self.instance.join("trace_marker"), format!("{STOP_MARK}\n"));
        let _ = r.join();
        self.out.lock().unwrap().lost += overruns(&self.instance);
    }
}

/// Mounts tracefs at `root` if it is not there; opens a handle on its
/// root that keeps it mounted. (mounted by us, the handle)
fn mount_and_hold(root: &Path) -> (bool, std::fs::File) {
    const TRACEFS_MAGIC: i64 = 0x7472_6163;
    let mut mounted = false;
    for _ in 0..5 {
        let hold = std::fs::File::open(root).unwrap();
        // SAFETY: a valid fd and a zeroed statfs to fill.
        let is_tracefs = unsafe {
            let mut st: libc::statfs = std::mem::zeroed();
            libc::fstatfs(std::os::fd::AsRawFd::as_raw_fd(&hold), &mut st) == 0
                && st.f_type as i64 == TRACEFS_MAGIC
        };
        // Held on tracefs from here on: nobody unmounts it under us.
        if is_tracefs {
            return (mounted, hold);
        }
        drop(hold);
        let ok = std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev", TRACEFS])
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount tracefs");
        mounted = true;
    }
    panic!("tracefs at {TRACEFS} keeps going away");
}

/// The overrun counters of the instance's per-CPU buffers, summed.
fn overruns(instance: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(instance.join("per_cpu")) else {
        return 0;
    };
    rd.flatten()
        .filter_map(|c| std::fs::read_to_string(c.path().join("stats")).ok())
        .flat_map(|s| {
            s.lines()
                .filter_map(|l| l.strip_prefix("overrun: ")?.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

fn read_loop(mut pipe: std::fs::File, out: &Mutex<Calls>) {
    let mut pair = Pairing::default();
    let mut buf = vec![0u8; 1 << 16];
    let mut partial = String::new();
    'read: loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        partial.push_str(&String::from_utf8_lossy(&buf[..n]));
        let Some(last) = partial.rfind('\n') else {
            continue;
        };
        let lines: String = partial.drain(..=last).collect();
        for l in lines.lines() {
            if l.contains(STOP_MARK) {
                break 'read;
            }
            if let Some(ev) = parse_line(l) {
                pair.add(ev);
            }
        }
    }
    let mut o = out.lock().unwrap();
    o.unpaired += pair.unpaired + pair.open.len() as u64;
    o.lost += pair.lost;
    o.calls = pair.calls;
    o.born = pair.born;
    o.blocks = pair.blocks;
}

/// Enter and exit paired per thread; D time added to the open call.
#[derive(Default)]
pub struct Pairing {
    /// tid → (nr, entry ns, blocked ns so far)
    open: HashMap<u32, (i64, u64, u64)>,
    /// tid → switch into D
    blocked_since: HashMap<u32, u64>,
    pub calls: Vec<Call>,
    pub unpaired: u64,
    pub lost: u64,
    pub born: HashMap<u32, u64>,
    pub blocks: Vec<Block>,
}

impl Pairing {
    pub fn add(&mut self, ev: Ev) {
        match ev {
            Ev::Enter { tid, t_ns, nr } => {
                if self.open.insert(tid, (nr, t_ns, 0)).is_some() {
                    self.unpaired += 1;
                }
            }
            Ev::Exit { tid, t_ns, nr } => match self.open.remove(&tid) {
                Some((n, start, blocked)) if n == nr => {
                    self.blocked_since.remove(&tid);
                    self.calls.push(Call {
                        tid,
                        name: name_of(nr).unwrap_or("?"),
                        start_ns: start,
                        end_ns: t_ns,
                        blocked_ns: blocked,
                    });
                }
                _ => self.unpaired += 1,
            },
            Ev::Block { tid, t_ns } => {
                self.blocked_since.insert(tid, t_ns);
            }
            Ev::Wake { tid, t_ns } => {
                let Some(s) = self.blocked_since.remove(&tid) else {
                    return;
                };
                self.blocks.push(Block {
                    tid,
                    start_ns: s,
                    end_ns: t_ns,
                });
                if let Some(c) = self.open.get_mut(&tid) {
                    c.2 += t_ns.saturating_sub(s);
                }
            }
            Ev::Fork { tid, t_ns } => {
                self.born.insert(tid, t_ns);
            }
            Ev::Lost(n) => self.lost += n,
        }
    }
}

/// Parses one line of trace_pipe text, e.g.
/// `  dd-29424   [001] .....  9202.625710: sys_enter: NR 1 (1, 7fa8, ...)`,
/// `  dd-29424   [001] .....  9202.625907: sys_exit: NR 1 = 1048576`,
/// `sched_switch: prev_comm=dd prev_pid=29424 ... prev_state=D ==> ...`,
/// `sched_wakeup: comm=dd pid=29424 prio=120 target_cpu=001`,
/// `sched_process_fork: comm=postgres pid=10 child_comm=postgres child_pid=11`,
/// `CPU:1 [LOST 12 EVENTS]`.
pub fn parse_line(l: &str) -> Option<Ev> {
    if let Some(i) = l.find("[LOST ") {
        let n = l[i + 6..].split(' ').next()?.parse().ok()?;
        return Some(Ev::Lost(n));
    }
    const KINDS: [&str; 5] = [
        ": sys_enter: ",
        ": sys_exit: ",
        ": sched_switch: ",
        ": sched_wakeup: ",
        ": sched_process_fork: ",
    ];
    let (k, at) = KINDS
        .iter()
        .enumerate()
        .find_map(|(k, m)| l.find(m).map(|at| (k, at)))?;
    let head = &l[..at];
    let body = &l[at + KINDS[k].len()..];
    let ts = head.rsplit(' ').next()?;
    let (s, f) = ts.split_once('.')?;
    let t_ns = s.parse::<u64>().ok()? * 1_000_000_000
        + f.parse::<u64>().ok()? * 10u64.pow(9u32.checked_sub(f.len() as u32)?);
    // The task column is `comm-tid` (the comm may hold '-' and spaces),
    // just before ` [cpu]`.
    let task = head[..head.rfind(" [")?].trim();
    let tid: u32 = task.rsplit('-').next()?.parse().ok()?;
    let nr = || -> Option<i64> {
        body.strip_prefix("NR ")?
            .split([' ', '('])
            .next()?
            .parse()
            .ok()
    };
    let field = |key: &str| -> Option<u32> {
        let p = body.find(key)? + key.len();
        body[p..].split(' ').next()?.parse().ok()
    };
    match k {
        0 => Some(Ev::Enter {
            tid,
            t_ns,
            nr: nr()?,
        }),
        1 => Some(Ev::Exit {
            tid,
            t_ns,
            nr: nr()?,
        }),
        2 => Some(Ev::Block {
            tid: field("prev_pid=")?,
            t_ns,
        }),
        3 => Some(Ev::Wake {
            tid: field(" pid=")?,
            t_ns,
        }),
        _ => Some(Ev::Fork {
            tid: field(" child_pid=")?,
            t_ns,
        }),
    }
}

/// Every thread of `pid` and of its descendants now (from /proc).
pub fn tree_tids(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in rd.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            out.push(tid);
            if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                todo.extend(c.split_whitespace().filter_map(|s| s.parse::<u32>().ok()));
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

impl Drop for SyscallTruth {
    fn drop(&mut self) {
        self.finish();
        let _ = std::fs::write(self.instance.join("set_event_pid"), "");
        self._hold = None;
        super::tracefs::release(&self.instance, self.mounted);
    }
}
