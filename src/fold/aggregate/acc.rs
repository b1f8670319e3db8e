//! What an interval being filled holds: each target's ops, latencies and
//! stalls, each observed process's samples, and their threads' counts.

use crate::fold::calls::PatternAcc;
use crate::model::cause::Cause;
use crate::model::kernel::{ProcSample, TraceKind};
use crate::model::observed::ProcTick;
use crate::model::ops::new_histogram;
use crate::model::snapshot::BdpStats;
use crate::model::stall::{Blocked, Stall};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub(super) struct Acc {
    pub(super) ops: u64,
    pub(super) bytes: u64,
    pub(super) hist: Histogram<u64>,
    pub(super) sync_hist: Histogram<u64>,
    pub(super) stalls: Vec<Blocked>,
    pub(super) counts: ThreadCounts,
}

impl Acc {
    /// Adds a later part of the same target's interval.
    pub(super) fn add(&mut self, b: Acc) {
        self.ops += b.ops;
        self.bytes += b.bytes;
        let _ = self.hist.add(&b.hist);
        let _ = self.sync_hist.add(&b.sync_hist);
        self.stalls.extend(b.stalls);
        self.counts.add(&b.counts);
    }

    pub(super) fn new() -> Acc {
        Acc {
            ops: 0,
            bytes: 0,
            hist: new_histogram(),
            sync_hist: new_histogram(),
            stalls: Vec::new(),
            counts: ThreadCounts::default(),
        }
    }
}

/// What the threads of a target or an observed process add up to over an
/// interval: their page faults and, from tracing, their throttling.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ThreadCounts {
    pub(super) minflt: u64,
    pub(super) majflt: u64,
    pub(super) bdp: BdpStats,
    pub(super) wb_waits: u64,
}

impl ThreadCounts {
    pub(super) fn add(&mut self, o: &ThreadCounts) {
        self.minflt += o.minflt;
        self.majflt += o.majflt;
        self.bdp.add(&o.bdp);
        self.wb_waits += o.wb_waits;
    }
    /// One of the threads' trace events.
    pub(super) fn add_event(&mut self, kind: &TraceKind) {
        match kind {
            TraceKind::BalanceDirtyPages { pause_ms, .. } => self.bdp.add_pause(*pause_ms),
            TraceKind::WaitWriteback { .. } => self.wb_waits += 1,
            _ => {}
        }
    }
}

/// One observed process over one interval being filled.
#[derive(Clone, Debug, Default)]
pub(super) struct ObsAcc {
    pub(super) samples: u32,
    pub(super) threads: u32,
    pub(super) d_sum: u64,
    pub(super) d_max: u32,
    pub(super) write_bytes: u64,
    /// Some sample could not read /proc/PID/io: write_bytes is unknown.
    pub(super) unreadable_io: bool,
    pub(super) exited: bool,
    /// It joined (was found) in this interval.
    pub(super) joined: bool,
    /// Scheduler-timed D time of its threads.
    pub(super) blocked_ns: u64,
    /// Their runs under the threshold by cause (stalls are added by their
    /// shares when the interval is emitted), ns.
    pub(super) blocked_by: BTreeMap<Cause, u64>,
    /// Long sleeps waiting for work held up upstream (`chains::Starved`).
    pub(super) starved_ns: u64,
    pub(super) counts: ThreadCounts,
    /// Its write-path calls that ended in the interval.
    pub(super) calls: PatternAcc,
}

impl ObsAcc {
    /// One sample of one process.
    pub(super) fn of_tick(t: &ProcTick) -> ObsAcc {
        ObsAcc {
            samples: 1,
            threads: t.threads,
            d_sum: u64::from(t.d_threads),
            d_max: t.d_threads,
            counts: ThreadCounts {
                minflt: t.minflt,
                majflt: t.majflt,
                ..ThreadCounts::default()
            },
            write_bytes: t.write_bytes.unwrap_or(0),
            unreadable_io: t.write_bytes.is_none(),
            ..ObsAcc::default()
        }
    }

    pub(super) fn add(&mut self, o: &ObsAcc) {
        self.samples += o.samples;
        self.threads = if o.samples > 0 {
            o.threads
        } else {
            self.threads
        };
        self.d_sum += o.d_sum;
        self.d_max = self.d_max.max(o.d_max);
        self.counts.add(&o.counts);
        self.unreadable_io |= o.unreadable_io;
        self.write_bytes += o.write_bytes;
        self.exited |= o.exited;
        self.joined |= o.joined;
        self.blocked_ns += o.blocked_ns;
        for (c, ns) in &o.blocked_by {
            *self.blocked_by.entry(*c).or_default() += ns;
        }
        self.starved_ns += o.starved_ns;
        self.calls.add(&o.calls);
    }
}

/// One interval being filled.
pub(super) struct Pending {
    pub(super) accs: Vec<Acc>,
    /// Observed processes by pid, and their threads' finished D-state runs.
    pub(super) observed: BTreeMap<u32, ObsAcc>,
    pub(super) obs_stalls: Vec<Blocked>,
    /// Sleeps that wake-up chains explained (already attributed).
    pub(super) chain_stalls: Vec<Stall>,
    /// The raw kernel sample taken at the interval's end.
    pub(super) raw: Option<ProcSample>,
    pub(super) wb_starts: BTreeMap<String, u64>,
}
