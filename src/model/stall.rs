//! The one concept of a stall: a watched thread was blocked. Sources report
//! a `Blocked` (our writer's op past the threshold, or an observed thread's
//! D-state run), unfinished while it lasts; the fold explains it into a
//! `Stall`. Writers' and observed processes' stalls travel, fold, print,
//! record and draw as the same type.

use crate::model::cause::Attribution;
use crate::model::ops::OpKind;
use serde::{Deserialize, Serialize};

/// Whose thread was blocked.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Who {
    /// One of our writer threads: target index and thread number (a
    /// thread number equal to the target's thread count is its sync or
    /// commit thread).
    Writer { target: usize, thread: u32 },
    /// A thread of an observed process.
    Process {
        pid: u32,
        /// The process's name.
        comm: String,
        tid: u32,
        /// The thread's name (Java names its threads: "MutationStage-1").
        thread_comm: String,
    },
}

impl Who {
    /// The target of a writer's stall.
    pub fn target(&self) -> Option<usize> {
        match self {
            Who::Writer { target, .. } => Some(*target),
            Who::Process { .. } => None,
        }
    }
    /// The observed process of a process's stall.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Who::Process { pid, .. } => Some(*pid),
            Who::Writer { .. } => None,
        }
    }
    /// The thread as the tables show it: a writer's number, an observed
    /// thread's tid.
    pub fn thread(&self) -> u32 {
        match self {
            Who::Writer { thread, .. } => *thread,
            Who::Process { tid, .. } => *tid,
        }
    }
}

/// A watched thread blocked for at least the stall threshold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Blocked {
    pub who: Who,
    /// What it was doing: a writer's op, or `Blocked` for an observed
    /// thread (which call it made is not known).
    pub op: OpKind,
    /// On the run's clock, ns.
    pub start_ns: u64,
    /// None while it lasts.
    pub dur_ns: Option<u64>,
    /// Where the thread sat in the kernel while blocked (root: its kernel
    /// stack, else wchan), innermost first; the most telling one seen.
    pub stack: Option<String>,
    /// An observed thread's stall timed by its system call's entry and
    /// exit (root, a kernel with syscall events): which call it was.
    #[serde(default)]
    pub call: Option<Call>,
    /// Time blocked (in D) within it, ns, when the scheduler's events
    /// timed it: less than its duration by the running between blocks.
    #[serde(default)]
    pub blocked_ns: Option<u64>,
    /// Our writer's op waited behind this sibling writer (its thread
    /// number, same target): the one holding the segment roll. The fold
    /// chains the stall to the sibling's (`fold::siblings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind: Option<u32>,
}

/// The system call a stall was, from its entry and exit events.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// Its name as the kernel's events name it (`fdatasync`, `pwrite64`).
    pub name: String,
    /// Its file descriptor argument, for calls that take one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd: Option<i64>,
    /// Bytes asked, for the write family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The fd's path, read from /proc while the call was blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// How a stall's start and end were found (printed as `bounds`).
pub fn bounds_of(b: &Blocked) -> &'static str {
    match (&b.who, b.op, &b.call) {
        (Who::Writer { .. }, _, _) => "op",
        (_, OpKind::Wait, _) => "sleep",
        (_, _, Some(_)) => "syscall",
        _ => "gap",
    }
}

impl Blocked {
    /// A finished block of one of our writers (its stack comes from the
    /// watchdog's sighting of the same op, joined in the fold).
    pub fn writer(target: usize, thread: u32, op: OpKind, start_ns: u64, dur_ns: u64) -> Blocked {
        Blocked {
            who: Who::Writer { target, thread },
            op,
            start_ns,
            dur_ns: Some(dur_ns),
            stack: None,
            call: None,
            blocked_ns: None,
            behind: None,
        }
    }
    /// A finished block of an observed process's thread.
    pub fn process(who: (u32, &str, u32, &str), start_ns: u64, dur_ns: u64) -> Blocked {
        let (pid, comm, tid, thread_comm) = who;
        Blocked {
            who: Who::Process {
                pid,
                comm: comm.into(),
                tid,
                thread_comm: thread_comm.into(),
            },
            op: OpKind::Blocked,
            start_ns,
            dur_ns: Some(dur_ns),
            stack: None,
            call: None,
            blocked_ns: None,
            behind: None,
        }
    }
    /// Its duration, or for one still going its age at `now_ns`.
    pub fn dur_at(&self, now_ns: u64) -> u64 {
        self.dur_ns
            .unwrap_or_else(|| now_ns.saturating_sub(self.start_ns))
    }
    /// The duration of a finished block (0 while it lasts).
    pub fn dur(&self) -> u64 {
        self.dur_ns.unwrap_or(0)
    }
    /// The same block: same thread, same start.
    pub fn same(&self, o: &Blocked) -> bool {
        self.start_ns == o.start_ns && self.who == o.who
    }
}

/// A block and why it happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    pub ev: Blocked,
    pub why: Attribution,
}

/// The stalls going on at one moment (the dashboard's banner).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Live {
    /// When they were seen, on the run's clock.
    pub now_ns: u64,
    /// Each with `dur_ns` None and the cause as far as it is known yet.
    pub stalls: Vec<Stall>,
}

impl Live {
    /// How long a live stall has lasted so far, ms.
    pub fn age_ms(&self, s: &Stall) -> f64 {
        s.ev.dur_at(self.now_ns) as f64 / 1e6
    }
}
