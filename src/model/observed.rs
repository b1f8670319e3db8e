//! Observe mode's data: the processes watched, and what one /proc sample of
//! them hands the fold (per-process counters, finished and ongoing D-state
//! runs, the thread ids the trace filter must follow).

use crate::model::stall::Blocked;

/// One process in one sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcTick {
    pub pid: u32,
    pub threads: u32,
    pub d_threads: u32,
    /// Deltas since the previous sample.
    pub minflt: u64,
    pub majflt: u64,
    /// None when /proc/PID/io cannot be read (another user's process).
    pub write_bytes: Option<u64>,
}

/// What one sample of every observed process adds to the interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObsTick {
    pub t_ns: u64,
    pub procs: Vec<ProcTick>,
    /// D-state runs that ended in this sample.
    pub stalls: Vec<Blocked>,
    /// Processes that were found gone in this sample.
    pub exited: Vec<u32>,
    /// The observed thread ids (tid → pid), when they changed.
    pub tids: Option<Vec<(u32, u32)>>,
    /// Threads' names (tid, comm) new or changed since the last sample:
    /// a thread that never blocks (a writer into the page cache) is named
    /// by no scheduler event, yet its calls belong to its role.
    pub names: Vec<(u32, String)>,
    /// Runs still going that are already past the threshold (the
    /// dashboard's STALL banner), with the best stack so far.
    pub ongoing: Vec<Blocked>,
    /// Processes found since the last sample (forked by a watched one, or
    /// new under a watched name); watched from now on.
    pub joined: Vec<Watched>,
}
/// A process being observed, resolved at start.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Watched {
    pub pid: u32,
    pub comm: String,
}

/// Which processes observe mode follows: the pids given and every process
/// with one of the names, and everything they fork, as they come and go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Follow {
    pub pids: Vec<u32>,
    pub names: Vec<String>,
}

/// How observed threads' blocks are timed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockTiming {
    /// /proc/PID/task/*/stat read every `--observe-every` (no root): a
    /// block is known to ± one period, shorter ones may be missed.
    #[default]
    Sampled,
    /// The scheduler's sched_switch and sched_waking (root): every block
    /// to the microsecond, with its kernel stack and its waker.
    Sched,
}

impl BlockTiming {
    pub fn describe(self, every: std::time::Duration) -> String {
        match self {
            BlockTiming::Sampled => format!(
                "blocking times sampled from /proc every {} ms (to within one period)",
                every.as_millis()
            ),
            BlockTiming::Sched => {
                "blocking times from the scheduler (sched_switch/sched_waking), exact".into()
            }
        }
    }
}
