//! Observe mode's data: the processes watched, and what one /proc sample of
//! them hands the fold (per-process counters, finished and ongoing D-state
//! runs, the thread ids the trace filter must follow).

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
    pub stalls: Vec<ObsStall>,
    /// Processes that were found gone in this sample.
    pub exited: Vec<u32>,
    /// The observed thread ids (tid → pid), when they changed.
    pub tids: Option<Vec<(u32, u32)>>,
    /// Runs still going that are already past the threshold (the
    /// dashboard's STALL banner), with the best stack so far.
    pub ongoing: Vec<ObsStall>,
}
/// A finished D-state run of one observed thread.
#[derive(Clone, Debug, PartialEq)]
pub struct ObsStall {
    pub pid: u32,
    pub tid: u32,
    /// The thread's name (Java names its threads: "MutationStage-1").
    pub thread_comm: String,
    pub start_ns: u64,
    pub dur_ns: u64,
    /// The most telling kernel stack seen during the run.
    pub stack: Option<String>,
}

impl ObsStall {
    /// As a stall event: `OBSERVED` target, the tid as the thread.
    pub fn event(&self) -> crate::model::ops::StallEvent {
        crate::model::ops::StallEvent {
            target: crate::model::snapshot::OBSERVED,
            thread: self.tid,
            op: crate::model::ops::OpKind::Blocked,
            start_ns: self.start_ns,
            dur_ns: self.dur_ns,
        }
    }
}
/// A process being observed, resolved at start.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Watched {
    pub pid: u32,
    pub comm: String,
}
