use super::*;
use crate::model::cause::Cause;
use crate::model::msg::{Batch, EventKind, Msg};
use crate::model::ops::OpKind;

const S: u64 = 1_000_000_000;

fn batch(target: usize, thread: u32, interval: u64, lats_us: &[u64]) -> Msg {
    let mut hist = new_histogram();
    for &l in lats_us {
        hist.record(l).unwrap();
    }
    Msg::Batch(Box::new(Batch {
        target,
        thread,
        interval,
        ops: lats_us.len() as u64,
        bytes: lats_us.len() as u64 * 818,
        hist,
        sync_hist: new_histogram(),
        stalls: Vec::new(),
        minflt: 0,
        majflt: 0,
    }))
}

fn agg(n: usize) -> Aggregator {
    let st = TargetState {
        mode: Mode::Mmap,
        threads: 2,
        active: true,
    };
    Aggregator::new(S, vec![st; n])
}

#[test]
fn a_writer_that_dies_mid_op_leaves_no_stall_in_progress() {
    let mut a = agg(1);
    for thread in [0, 1] {
        a.fold(Msg::Blocked(Blocked {
            who: Who::Writer { target: 0, thread },
            op: OpKind::Write,
            start_ns: S / 2,
            dur_ns: None,
            stack: None,
            call: None,
            blocked_ns: None,
            behind: None,
        }));
    }
    assert_eq!(a.live(S).stalls.len(), 2);
    a.fold(Msg::Event {
        target: 0,
        thread: Some(1),
        t_ns: S,
        kind: EventKind::WriterError,
        message: "thread 1 panicked".into(),
    });
    let live = a.live(2 * S).stalls;
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].ev.who.thread(), 0, "the other writer's stall stays");
}

#[test]
#[allow(clippy::too_many_lines)]
fn observed_ticks_fold_into_per_process_intervals_and_attributed_stalls() {
    use crate::model::observed::{ObsTick, ProcTick};
    let mut a = agg(0);
    a.set_observed(vec![Watched {
        pid: 9,
        comm: "java".into(),
    }]);
    a.set_tracing(true);
    let tick = |t_ns: u64, d: u32, stalls: Vec<Blocked>| {
        Msg::Observe(Box::new(ObsTick {
            t_ns,
            procs: vec![ProcTick {
                pid: 9,
                threads: 3,
                d_threads: d,
                minflt: 5,
                majflt: 1,
                write_bytes: Some(4096),
            }],
            stalls,
            exited: vec![],
            tids: Some(vec![(90, 9), (91, 9)]),
            names: vec![],
            ongoing: vec![],
            joined: vec![],
        }))
    };
    a.fold(tick(S / 4, 2, vec![]));
    assert_eq!(a.take_observed_tids_changed(), Some(vec![90, 91]));
    assert_eq!(a.take_observed_tids_changed(), None);
    // Thread 91 throttled for 300 ms: two trace events, then the run ends.
    for (t, pause) in [(S / 4, 200), (S / 4 + 200_000_000, 100)] {
        a.fold_trace(
            t,
            91,
            TraceKind::BalanceDirtyPages {
                bdi: "7:0".into(),
                limit: 65536,
                setpoint: 50000,
                dirty: 70000,
                pause_ms: pause,
                paused_ms: 0,
                period_ms: 0,
            },
        );
    }
    let run = Blocked {
        who: Who::Process {
            pid: 9,
            comm: "java".into(),
            tid: 91,
            thread_comm: "MutationStage".into(),
        },
        op: OpKind::Blocked,
        start_ns: S / 4,
        dur_ns: Some(300_000_000),
        stack: Some("io_schedule_timeout < balance_dirty_pages".into()),
        call: None,
        blocked_ns: None,
        behind: None,
    };
    // While it lasts, the banner shows it with its cause so far.
    let mut so_far = run.clone();
    so_far.dur_ns = None;
    a.fold(Msg::Observe(Box::new(ObsTick {
        t_ns: S / 4 + 200_000_000,
        ongoing: vec![so_far],
        ..ObsTick::default()
    })));
    let live = a.live(S / 2);
    assert_eq!(live.stalls.len(), 1);
    let l = &live.stalls[0];
    assert_eq!((l.ev.who.pid(), l.ev.who.thread()), (Some(9), 91));
    assert_eq!(live.age_ms(l), 250.0);
    assert_eq!(l.why.cause, crate::model::cause::Cause::DirtyThrottle);
    a.fold(tick(S / 2, 0, vec![run]));
    assert!(
        a.live(S / 2).stalls.is_empty(),
        "ended runs leave the banner"
    );
    let (snaps, summary) = a.finish(S);
    assert_eq!(snaps.len(), 1);
    let o = &snaps[0].observed[0];
    assert_eq!((o.samples, o.d_threads_max, o.d_threads_mean), (2, 2, 1.0));
    assert_eq!((o.minflt, o.majflt, o.write_bytes), (10, 2, Some(8192)));
    assert_eq!(o.bdp.unwrap().pause_ms, 300);
    assert_eq!(o.stalls, 1);
    let st = &snaps[0].stalls[0];
    assert_eq!((st.ev.who.pid(), st.ev.who.thread()), (Some(9), 91));
    assert_eq!(st.why.cause, crate::model::cause::Cause::DirtyThrottle);
    assert_eq!(st.why.evidence.pause_ms, Some(300));
    assert_eq!(snaps[0].stalls.len(), 1, "the observed thread's only");
    assert_eq!(summary.observed[0].stalls, 1);
    assert_eq!(summary.observed[0].write_bytes, Some(8192));
}

#[test]
fn merged_count_equals_ops_done() {
    let mut a = agg(2);
    let mut done = 0;
    for i in 0..5u64 {
        for th in 0..3 {
            let lats: Vec<u64> = (1..=(10 + i * th as u64)).collect();
            done += lats.len() as u64;
            a.fold(batch((th % 2) as usize, th, i, &lats));
        }
    }
    let snaps = a.tick(5 * S + GRACE_NS);
    assert_eq!(snaps.len(), 5);
    let per_interval: u64 = snaps
        .iter()
        .flat_map(|s| s.targets.iter())
        .map(|t| t.hist.len())
        .sum();
    assert_eq!(per_interval, done);
    let (_, sum) = a.finish(5 * S + GRACE_NS);
    assert_eq!(sum.ops(), done);
    assert_eq!(sum.merged().len(), done);
}

#[test]
fn waits_for_grace_then_emits_in_order() {
    let mut a = agg(1);
    a.fold(batch(0, 0, 0, &[100]));
    assert!(a.tick(S).is_empty(), "not before the grace period");
    let s = a.tick(S + GRACE_NS);
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].index, s[0].t_s), (0, 1.0));
    assert_eq!(s[0].targets[0].ops, 1);
    // An empty interval is still emitted (zero throughput is the news).
    let s = a.tick(3 * S + GRACE_NS);
    assert_eq!(s.len(), 2);
    assert_eq!(s[1].targets[0].ops, 0);
}

#[test]
fn late_batch_joins_oldest_open_interval() {
    let mut a = agg(1);
    a.tick(3 * S + GRACE_NS);
    a.fold(batch(0, 0, 1, &[5, 6]));
    let s = a.tick(4 * S + GRACE_NS);
    assert_eq!(s[0].index, 3);
    assert_eq!(s[0].targets[0].ops, 2);
}

#[test]
fn stall_in_progress_until_it_finishes() {
    let mut a = agg(1);
    a.fold(Msg::Blocked(Blocked {
        who: Who::Writer {
            target: 0,
            thread: 1,
        },
        op: OpKind::Write,
        start_ns: S / 2,
        dur_ns: None,
        stack: None,
        call: None,
        blocked_ns: None,
        behind: None,
    }));
    let s = a.tick(S + GRACE_NS);
    assert_eq!(s[0].in_progress.len(), 1);
    let mut m = batch(0, 1, 2, &[2_500_000]);
    if let Msg::Batch(b) = &mut m {
        b.stalls
            .push(Blocked::writer(0, 1, OpKind::Write, S / 2, 2 * S));
    }
    a.fold(m);
    let s = a.tick(3 * S + GRACE_NS);
    assert_eq!(s[1].stalls.len(), 1);
    assert_eq!(s[1].targets[0].stalls, 1);
    assert!(s[1].in_progress.is_empty());
    let (_, sum) = a.finish(3 * S + GRACE_NS);
    assert_eq!(sum.stalls(), 1);
    assert_eq!(sum.stall_ns(), 2 * S);
}

#[test]
fn a_partial_tail_is_emitted_with_its_length() {
    let mut a = agg(1);
    a.fold(batch(0, 0, 0, &[10]));
    a.fold(batch(0, 0, 1, &[10, 20]));
    let (snaps, sum) = a.finish(S + S / 10);
    assert_eq!(snaps.len(), 2);
    assert!((snaps[1].interval_s - 0.1).abs() < 1e-9);
    let in_snaps: u64 = snaps.iter().map(|s| s.targets[0].ops).sum();
    assert_eq!(in_snaps, sum.ops());
}

/// Defect: ops that finished while the writers stopped were an interval
/// of their own past the end (a `31.0` row after `--duration 30s`,
/// charted as a drop to nothing).
#[test]
fn ops_finished_while_stopping_join_the_last_interval() {
    let mut a = agg(1);
    for i in 0..3 {
        a.fold(batch(0, 0, i, &[10; 50]));
    }
    a.fold(batch(0, 0, 3, &[10, 20]));
    a.fold(batch(0, 0, 4, &[30]));
    let (snaps, sum) = a.finish(3 * S);
    assert_eq!(snaps.len(), 3, "a 3-interval run has 3 intervals");
    let last = snaps.last().unwrap();
    assert!((last.t_s - 3.0 * S as f64 / 1e9).abs() < 1e-9);
    assert!((last.interval_s - S as f64 / 1e9).abs() < 1e-9);
    assert_eq!(last.targets[0].ops, 53);
    let in_snaps: u64 = snaps.iter().map(|s| s.targets[0].ops).sum();
    assert_eq!(in_snaps, sum.ops());
}

/// Observed process 9 timed by the scheduler with chains: its writer
/// (90) and flush thread (91); one /proc sample per interval so that the
/// intervals show it.
fn rocks(a: &mut Aggregator) {
    use crate::model::observed::{ObsTick, ProcTick};
    a.set_observed(vec![Watched {
        pid: 9,
        comm: "db_bench".into(),
    }]);
    a.set_tracing(true);
    a.set_sched_timing(20_000_000, true);
    for i in 0..3 {
        a.fold(Msg::Observe(Box::new(ObsTick {
            t_ns: i * S + S / 2,
            procs: vec![ProcTick {
                pid: 9,
                threads: 2,
                ..ProcTick::default()
            }],
            tids: (i == 0).then(|| vec![(90, 9), (91, 9)]),
            ..ObsTick::default()
        })));
    }
}

/// `n` timer steps of 1 ms of thread 90 from `t`, 50 µs apart; the time
/// after the last.
fn delay_steps(a: &mut Aggregator, mut t: u64, n: u32) -> u64 {
    for _ in 0..n {
        a.fold_trace(
            t,
            90,
            TraceKind::SchedBlock {
                comm: "db_bench".into(),
                sleep: true,
            },
        );
        t += 1_000_000;
        a.fold_trace(
            t,
            90,
            TraceKind::SchedWake {
                waker: 0,
                waker_comm: String::new(),
                irq: true,
            },
        );
        t += 50_000;
    }
    t
}

/// The flush thread in D from `from` to `to`.
fn flush_wait(a: &mut Aggregator, from: u64, to: u64) {
    a.fold_trace(
        from,
        91,
        TraceKind::SchedBlock {
            comm: "rocksdb:high".into(),
            sleep: false,
        },
    );
    a.fold_trace(
        to,
        91,
        TraceKind::SchedWake {
            waker: 0,
            waker_comm: String::new(),
            irq: true,
        },
    );
}

fn app_delay_ms(o: &crate::model::snapshot::ObservedInterval) -> f64 {
    o.blocked_by_cause
        .get(&Cause::AppDelay)
        .copied()
        .unwrap_or(0.0)
}

#[test]
fn short_delay_runs_count_as_blocked_time_in_the_interval_they_end_in() {
    let mut a = agg(0);
    rocks(&mut a);
    flush_wait(&mut a, S / 10, 2 * S);
    // Three runs of 3 steps (3.1 ms each) 10 ms apart in interval 0, one
    // across the boundary into interval 1: none is a stall.
    let mut t = S / 2;
    for _ in 0..3 {
        t = delay_steps(&mut a, t, 3) + 10_000_000;
    }
    delay_steps(&mut a, S - 1_500_000, 3);
    // A run of 30 steps (31.45 ms) is a stall, counted by its duration.
    delay_steps(&mut a, S + S / 2, 30);
    let (snaps, summary) = a.finish(2 * S + S / 2);
    let delays: Vec<f64> = snaps.iter().map(|s| app_delay_ms(&s.observed[0])).collect();
    assert!((delays[0] - 3.0 * 3.1).abs() < 1e-6, "{delays:?}");
    assert!((delays[1] - (3.1 + 31.45)).abs() < 1e-6, "{delays:?}");
    let stalls: Vec<&Stall> = snaps.iter().flat_map(|s| &s.stalls).collect();
    let delay_stalls: Vec<&&Stall> = stalls
        .iter()
        .filter(|s| s.why.cause == Cause::AppDelay)
        .collect();
    assert_eq!(delay_stalls.len(), 1, "{stalls:?}");
    assert_eq!(delay_stalls[0].why.evidence.timer_sleeps, Some(30));
    let total = summary.observed[0].blocked_by[&Cause::AppDelay];
    assert_eq!(total, 4 * 3_100_000 + 31_450_000);
}

#[test]
fn delay_runs_are_judged_as_of_the_trace_events_folded() {
    let mut a = agg(0);
    rocks(&mut a);
    flush_wait(&mut a, S / 10, 2 * S);
    // 60 steps; the session ticks every 10 ms of steps but its clock runs
    // 40 ms ahead of the events it has drained.
    let mut t = S / 2;
    for _ in 0..6 {
        t = delay_steps(&mut a, t, 10);
        a.set_trace_through(t);
        a.tick(t + 40_000_000);
    }
    let (snaps, _) = a.finish(S + S / 2);
    let delay_stalls: Vec<&Stall> = snaps
        .iter()
        .flat_map(|s| &s.stalls)
        .filter(|s| s.why.cause == Cause::AppDelay)
        .collect();
    assert_eq!(delay_stalls.len(), 1, "one run, not cut at each tick");
    assert_eq!(delay_stalls[0].why.evidence.timer_sleeps, Some(60));
}

/// #25: a write fault throttled for a moment, then waiting seconds for
/// btrfs's writeback. The watchdog's first stack is the throttle's; the
/// ones it reads while the op lasts are the writeback wait's, and the
/// stall is named by the wait most of them were in (it was `unknown`).
#[test]
fn a_long_writer_stall_is_named_by_the_wait_most_of_its_stacks_were_in() {
    let mut a = agg(1);
    let throttle = "balance_dirty_pages < balance_dirty_pages_ratelimited_flags < \
                    fault_dirty_shared_page < do_fault < handle_mm_fault < page_fault";
    let wb = "folio_wait_writeback < btrfs_page_mkwrite < do_page_mkwrite < do_wp_page < \
              handle_mm_fault < page_fault";
    let preempted = "irqentry_exit_to_user_mode < page_fault";
    let seen = |stack: &str| {
        Msg::Blocked(Blocked {
            who: Who::Writer {
                target: 0,
                thread: 1,
            },
            op: OpKind::Write,
            start_ns: S / 10,
            dur_ns: None,
            stack: Some(stack.into()),
            call: None,
            blocked_ns: None,
            behind: None,
        })
    };
    a.set_tracing(true);
    a.fold(seen(throttle));
    assert_eq!(a.live(S / 5).stalls[0].why.cause, Cause::DirtyThrottle);
    for st in [wb, preempted, wb, preempted, wb, preempted] {
        a.fold(seen(st));
    }
    let live = a.live(S / 2);
    assert_eq!(live.stalls.len(), 1, "one op, however many reports");
    assert_eq!(
        live.stalls[0].why.cause,
        Cause::WritebackWait,
        "in the banner"
    );
    let mut done = batch(0, 1, 0, &[]);
    if let Msg::Batch(b) = &mut done {
        b.stalls
            .push(Blocked::writer(0, 1, OpKind::Write, S / 10, 7_900_000_000));
    }
    a.fold(done);
    let (snaps, _) = a.finish(9 * S);
    let stall = snaps
        .iter()
        .flat_map(|s| &s.stalls)
        .next()
        .expect("the stall");
    assert_eq!(stall.why.cause, Cause::WritebackWait);
    assert_eq!(stall.why.confidence, crate::model::cause::Confidence::High);
    assert!(stall.why.evidence.kernel_stack.as_deref() == Some(wb));
}

/// #25 item 9: thread 1 waited 4 s on the roll thread 0 held while it
/// synced the oldest segment. Chained whether the holder's stall is filed
/// in the same interval or is still going on when the waiter's is.
#[test]
fn a_writer_behind_a_sibling_s_roll_is_chained_to_its_stall() {
    let stalled = |thread: u32, op: OpKind, start: u64, dur: u64, behind: Option<u32>| {
        let mut b = Blocked::writer(0, thread, op, start, dur);
        b.behind = behind;
        let mut m = batch(0, thread, 0, &[]);
        if let Msg::Batch(bt) = &mut m {
            bt.stalls.push(b);
        }
        m
    };
    for holder_done_first in [true, false] {
        let mut a = agg(1);
        if holder_done_first {
            a.fold(stalled(0, OpKind::SegmentWait, S / 10, 4 * S, None));
        } else {
            a.fold(Msg::Blocked(Blocked {
                who: Who::Writer {
                    target: 0,
                    thread: 0,
                },
                op: OpKind::SegmentWait,
                start_ns: S / 10,
                dur_ns: None,
                stack: None,
                call: None,
                blocked_ns: None,
                behind: None,
            }));
        }
        a.fold(stalled(1, OpKind::Write, S / 5, 4 * S - S / 10, Some(0)));
        let (snaps, _) = a.finish(5 * S);
        let waiter = snaps
            .iter()
            .flat_map(|s| &s.stalls)
            .find(|s| s.ev.who.thread() == 1)
            .expect("the waiter's stall");
        let why = &waiter.why;
        assert_eq!(
            (why.cause, why.confidence),
            (Cause::Sync, crate::model::cause::Confidence::High),
            "holder done first: {holder_done_first}"
        );
        assert_eq!(
            why.chain_brief().as_deref(),
            Some("\u{2190} thread 0 msync (recycling a segment)")
        );
    }
}

/// A thread that never blocks (a writer into the page cache) is named by
/// no scheduler event: its calls take the name its /proc sample showed.
#[test]
fn a_thread_named_only_by_its_sample_keeps_its_calls_under_its_name() {
    use crate::model::observed::{ObsTick, ProcTick};
    let mut a = agg(0);
    a.set_observed(vec![Watched {
        pid: 9,
        comm: "python3".into(),
    }]);
    a.set_tracing(true);
    a.set_call_pattern();
    a.fold(Msg::Observe(Box::new(ObsTick {
        t_ns: S / 4,
        procs: vec![ProcTick {
            pid: 9,
            threads: 1,
            ..ProcTick::default()
        }],
        tids: Some(vec![(90, 9), (91, 9)]),
        names: vec![(90, "work".into()), (91, "side".into())],
        ..ObsTick::default()
    })));
    for (i, tid) in [90, 90, 90, 91].into_iter().enumerate() {
        let t = S / 2 + i as u64 * 1_000_000;
        let write = crate::model::kernel::Comm::new("write");
        let enter = TraceKind::SysEnter {
            call: write,
            fd: Some(3),
            bytes: Some(4096),
            addr: None,
        };
        a.fold_trace(t, tid, enter);
        a.fold_trace(
            t + 10_000,
            tid,
            TraceKind::SysExit {
                call: write,
                ret: 4096,
            },
        );
    }
    let (snaps, _) = a.finish(S);
    let calls = snaps[0].observed[0].calls.as_ref().expect("calls counted");
    assert_eq!(calls.writes, 4);
    assert_eq!(calls.threads.get("work").map(|p| p.writes), Some(3));
    assert_eq!(calls.threads.get("side").map(|p| p.writes), Some(1));
}
