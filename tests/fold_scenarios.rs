//! Scenario tests for the fold: message sequences kept as fixture files
//! (`tests/fixtures/fold/*.json`) are fed to the aggregator exactly as a
//! run feeds it, and what it emits (snapshots, live stalls, the summary)
//! must equal the reviewed snapshot in `tests/snapshots/`. A change to the
//! fold shows up as a diff of what a person would see, not as a broken
//! unit test of an internal. `cargo insta review` (or INSTA_UPDATE=always)
//! accepts a new snapshot after reading it.

use serde::Deserialize;
use serde_json::{json, Value};
use stallscope::config::Mode;
use stallscope::fold::aggregate::{Aggregator, TargetState};
use stallscope::model::kernel::{ProcSample, TraceKind};
use stallscope::model::msg::{Batch, Msg};
use stallscope::model::observed::{ObsTick, ProcTick, Watched};
use stallscope::model::ops::{new_histogram, OpKind};
use stallscope::model::snapshot::{LatSummary, Snapshot, Summary};
use stallscope::model::stall::{Blocked, Stall, Who};

const MS: u64 = 1_000_000;

#[derive(Deserialize)]
struct Scenario {
    interval_ms: u64,
    #[serde(default)]
    tracing: bool,
    targets: Vec<Target>,
    #[serde(default)]
    watch: Vec<Watched>,
    /// Observed threads timed by the scheduler, with this stall threshold.
    sched_threshold_ms: Option<u64>,
    /// With scheduler timing: wake-up chains on.
    #[serde(default)]
    chains: bool,
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Target {
    mode: Mode,
    threads: u32,
}

/// One message or action, in the order a run would produce it.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Step {
    /// A writer's kernel thread id.
    Tid {
        tid: u32,
        target: usize,
        thread: u32,
    },
    KernelBase {
        sample: ProcSample,
    },
    Kernel {
        index: u64,
        sample: ProcSample,
    },
    Trace {
        t_ms: u64,
        tid: u32,
        event: TraceKind,
    },
    /// A trace event at a microsecond (the scheduler's are that exact).
    TraceUs {
        t_us: u64,
        tid: u32,
        event: TraceKind,
    },
    Batch(BatchIn),
    /// The watchdog sees a writer's op blocked past the threshold.
    Blocked {
        target: usize,
        thread: u32,
        op: OpKind,
        start_ms: u64,
        stack: Option<String>,
    },
    Observe(ObserveIn),
    /// What the dashboard's banner would get at this time.
    Live {
        at_ms: u64,
    },
    Tick {
        at_ms: u64,
    },
    Finish {
        at_ms: u64,
    },
}

#[derive(Deserialize)]
struct BatchIn {
    target: usize,
    thread: u32,
    interval: u64,
    lat_us: Vec<u64>,
    #[serde(default)]
    sync_us: Vec<u64>,
    bytes_per_op: u64,
    #[serde(default)]
    stalls: Vec<StallIn>,
}

#[derive(Deserialize)]
struct StallIn {
    op: OpKind,
    start_ms: u64,
    dur_ms: u64,
}

#[derive(Deserialize)]
struct ObserveIn {
    t_ms: u64,
    #[serde(default)]
    procs: Vec<ProcIn>,
    #[serde(default)]
    stalls: Vec<RunIn>,
    #[serde(default)]
    ongoing: Vec<RunIn>,
    tids: Option<Vec<(u32, u32)>>,
    #[serde(default)]
    joined: Vec<Watched>,
}

#[derive(Deserialize)]
struct ProcIn {
    pid: u32,
    threads: u32,
    d_threads: u32,
    minflt: u64,
    majflt: u64,
    write_bytes: Option<u64>,
}

/// A D-state run of an observed thread; `dur_ms` absent while it lasts.
#[derive(Deserialize)]
struct RunIn {
    pid: u32,
    comm: String,
    tid: u32,
    thread_comm: String,
    start_ms: u64,
    dur_ms: Option<u64>,
    stack: Option<String>,
}

impl RunIn {
    fn blocked(self) -> Blocked {
        Blocked {
            who: Who::Process {
                pid: self.pid,
                comm: self.comm,
                tid: self.tid,
                thread_comm: self.thread_comm,
            },
            op: OpKind::Blocked,
            start_ns: self.start_ms * MS,
            dur_ns: self.dur_ms.map(|d| d * MS),
            stack: self.stack,
            call: None,
            blocked_ns: None,
            behind: None,
        }
    }
}

fn batch(b: BatchIn) -> Msg {
    let mut hist = new_histogram();
    for &l in &b.lat_us {
        hist.record(l).unwrap();
    }
    let mut sync_hist = new_histogram();
    for &l in &b.sync_us {
        sync_hist.record(l).unwrap();
    }
    let stalls = b
        .stalls
        .iter()
        .map(|s| Blocked::writer(b.target, b.thread, s.op, s.start_ms * MS, s.dur_ms * MS))
        .collect();
    Msg::Batch(Box::new(Batch {
        target: b.target,
        thread: b.thread,
        interval: b.interval,
        ops: b.lat_us.len() as u64,
        bytes: b.lat_us.len() as u64 * b.bytes_per_op,
        hist,
        sync_hist,
        stalls,
        minflt: 0,
        majflt: 0,
    }))
}

fn observe(o: ObserveIn) -> Msg {
    Msg::Observe(Box::new(ObsTick {
        t_ns: o.t_ms * MS,
        procs: o
            .procs
            .into_iter()
            .map(|p| ProcTick {
                pid: p.pid,
                threads: p.threads,
                d_threads: p.d_threads,
                minflt: p.minflt,
                majflt: p.majflt,
                write_bytes: p.write_bytes,
            })
            .collect(),
        stalls: o.stalls.into_iter().map(RunIn::blocked).collect(),
        exited: vec![],
        tids: o.tids,
        names: vec![],
        ongoing: o.ongoing.into_iter().map(RunIn::blocked).collect(),
        joined: o.joined,
    }))
}

fn who(w: &Who) -> Value {
    match w {
        Who::Writer { target, thread } => json!({"target": target, "thread": thread}),
        Who::Process {
            pid,
            comm,
            tid,
            thread_comm,
        } => {
            json!({"pid": pid, "comm": comm, "tid": tid, "thread_comm": thread_comm})
        }
    }
}

fn stall(s: &Stall) -> Value {
    json!({
        "who": who(&s.ev.who),
        "op": s.ev.op,
        "start_ms": s.ev.start_ns as f64 / 1e6,
        "dur_ms": s.ev.dur_ns.map(|d| d as f64 / 1e6),
        "cause": s.why.cause,
        "confidence": s.why.confidence,
        "evidence": s.why.evidence,
        "shares": s.why.shares,
        "via": s.why.via,
    })
}

/// What a person would read of a snapshot (histograms as percentiles).
fn snapshot(s: &Snapshot) -> Value {
    json!({
        "index": s.index,
        "t_s": s.t_s,
        "interval_s": s.interval_s,
        "targets": s.targets.iter().map(|t| json!({
            "target": t.target, "mode": t.mode, "threads": t.threads, "ops": t.ops,
            "bytes": t.bytes, "lat_us": LatSummary::of(&t.hist), "sync_us": LatSummary::of(&t.sync_hist),
            "stalls": t.stalls, "bdp": t.bdp, "wb_waits": t.wb_waits,
        })).collect::<Vec<_>>(),
        "kernel": s.kernel.as_ref().map(|k| json!({"dirty_kib": k.dirty_kib,
            "writeback_kib": k.writeback_kib, "dirty_thresh_kib": k.dirty_thresh_kib,
            "dirty_bg_thresh_kib": k.dirty_bg_thresh_kib})),
        "stalls": s.stalls.iter().map(stall).collect::<Vec<_>>(),
        "in_progress": s.in_progress.iter().map(|b| json!({"who": who(&b.who), "op": b.op,
            "start_ms": b.start_ns as f64 / 1e6})).collect::<Vec<_>>(),
        "observed": s.observed,
    })
}

fn summary(s: &Summary) -> Value {
    json!({
        "duration_s": s.duration_s,
        "ops": s.ops(),
        "stalls": s.stalls(),
        "stall_ms": s.stall_ns() as f64 / 1e6,
        "by_cause": s.by_cause(),
        "observed": s.observed.iter().map(|o| json!({"pid": o.pid, "comm": o.comm,
            "stalls": o.stalls, "stall_ms": o.stall_ns as f64 / 1e6, "by_cause": o.by_cause,
            "write_bytes": o.write_bytes})).collect::<Vec<_>>(),
    })
}

/// Feeds a scenario to a new aggregator; everything it emitted, in order.
fn run(name: &str) -> Vec<Value> {
    let path = format!(
        "{}/tests/fixtures/fold/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let sc: Scenario = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let states = sc
        .targets
        .iter()
        .map(|t| TargetState {
            mode: t.mode,
            threads: t.threads,
            active: true,
        })
        .collect();
    let mut agg = Aggregator::new(sc.interval_ms * MS, states);
    agg.set_tracing(sc.tracing);
    if !sc.watch.is_empty() {
        agg.set_observed(sc.watch);
    }
    if let Some(t) = sc.sched_threshold_ms {
        agg.set_sched_timing(t * MS, sc.chains);
    }
    let mut out = Vec::new();
    for step in sc.steps {
        match step {
            Step::Tid {
                tid,
                target,
                thread,
            } => agg.set_tid(tid, target, thread),
            Step::KernelBase { sample } => agg.set_kernel_base(sample, 4),
            Step::Kernel { index, sample } => agg.fold_kernel(index, sample),
            Step::Trace { t_ms, tid, event } => agg.fold_trace(t_ms * MS, tid, event),
            Step::TraceUs { t_us, tid, event } => agg.fold_trace(t_us * 1000, tid, event),
            Step::Batch(b) => agg.fold(batch(b)),
            Step::Blocked {
                target,
                thread,
                op,
                start_ms,
                stack,
            } => agg.fold(Msg::Blocked(Blocked {
                who: Who::Writer { target, thread },
                op,
                start_ns: start_ms * MS,
                dur_ns: None,
                stack,
                call: None,
                blocked_ns: None,
                behind: None,
            })),
            Step::Observe(o) => agg.fold(observe(o)),
            Step::Live { at_ms } => {
                let live = agg.live(at_ms * MS);
                out.push(
                    json!({"live_at_ms": at_ms, "stalls": live.stalls.iter().map(|s| {
                    let mut v = stall(s);
                    v["age_ms"] = json!(live.age_ms(s));
                    v
                }).collect::<Vec<_>>()}),
                );
            }
            Step::Tick { at_ms } => {
                out.extend(
                    agg.tick(at_ms * MS)
                        .iter()
                        .map(|s| json!({"snapshot": snapshot(s)})),
                );
            }
            Step::Finish { at_ms } => {
                let (snaps, sum) = agg.finish(at_ms * MS);
                out.extend(snaps.iter().map(|s| json!({"snapshot": snapshot(s)})));
                out.push(json!({"summary": summary(&sum)}));
                return out;
            }
        }
    }
    out
}

#[test]
fn a_throttled_writer() {
    insta::assert_json_snapshot!(run("throttled_writer"));
}

#[test]
fn a_sync_stall() {
    insta::assert_json_snapshot!(run("sync_stall"));
}

#[test]
fn an_observed_d_state_run() {
    insta::assert_json_snapshot!(run("observed_d_run"));
}

#[test]
fn a_stall_in_progress_at_the_end_of_an_interval() {
    insta::assert_json_snapshot!(run("in_progress_at_interval_end"));
}

#[test]
fn an_observed_fsync_timed_by_the_scheduler() {
    insta::assert_json_snapshot!(run("sched_timed_fsync"));
}

/// A backend asleep on a lock while another one is in fdatasync: with
/// chains, its sleep is a stall whose chain names the other backend's
/// wait; a thread woken by the client (not watched) is not stalled.
#[test]
fn a_sleep_waiting_for_an_fsync_is_a_chained_stall() {
    insta::assert_json_snapshot!(run("chained_wait"));
}

/// A thread outside the watched process (a kernel thread) wakes a watched
/// one: not explained the first time, but traced from then on, so its D
/// wait explains the next sleep; its own waits are never stalls.
#[test]
fn a_waker_outside_the_watched_process_is_traced_from_its_first_wakeup() {
    insta::assert_json_snapshot!(run("chained_waker"));
}
