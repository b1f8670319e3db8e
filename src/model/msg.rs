//! The messages on the one channel into the fold: writers' batches, the
//! watchdog's and observer's blocked threads, events; and the clock,
//! periods and hand-over channels every source thread shares.

use crate::base::clock::Clock;
use crate::model::observed::ObsTick;
use crate::model::stall::Blocked;
use crossbeam::channel::{Receiver, Sender};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One thread's measurements over part of one interval.
#[derive(Debug)]
pub struct Batch {
    pub target: usize,
    pub thread: u32,
    /// Index of the interval its ops finished in.
    pub interval: u64,
    pub ops: u64,
    pub bytes: u64,
    /// Latency of write ops, µs.
    pub hist: Histogram<u64>,
    /// Latency of sync ops, µs.
    pub sync_hist: Histogram<u64>,
    /// Ops of this batch that took at least the stall threshold.
    pub stalls: Vec<Blocked>,
    /// Page faults of this thread since its previous batch (getrusage).
    pub minflt: u64,
    pub majflt: u64,
}

/// Messages from writer, sync and watchdog threads to the aggregator.
#[derive(Debug)]
pub enum Msg {
    Batch(Box<Batch>),
    /// The watchdog saw an op older than the threshold that has not
    /// returned (`dur_ns` None, with the thread's kernel stack).
    Blocked(Blocked),
    /// One sample of the observed processes (observe mode).
    Observe(Box<ObsTick>),
    /// Something a person should see: disk full, a failed thread.
    Event {
        target: usize,
        /// The writer thread it is about, when it is about one (a thread
        /// that died mid-op has no stall in progress any more).
        thread: Option<u32>,
        t_ns: u64,
        kind: EventKind,
        message: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    TargetFull,
    WriterError,
    Info,
}

/// The clock and periods every thread of a run shares.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub clock: Clock,
    pub interval: Duration,
    pub threshold: Duration,
}

/// Where a thread hands its batches, and where emptied histograms come back.
#[derive(Clone, Debug)]
pub struct Handover {
    pub tx: Sender<Msg>,
    pub spare: Receiver<Histogram<u64>>,
}
