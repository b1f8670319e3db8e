use super::*;
use crate::base::clock::Clock;
use crate::config::Config;
use crate::model::msg::Msg;
use crate::source::watchdog::Watchdog;
use crossbeam::channel::{bounded, unbounded, Receiver};
use std::time::Instant;

fn setup(cfg: &Config, dir: &Path) -> (EngineSpec, Timing, Handover, Receiver<Msg>) {
    let spec = EngineSpec::new(cfg, 0, dir, None);
    let timing = Timing {
        clock: Clock::new(),
        interval: Duration::from_millis(200),
        threshold: Duration::from_millis(50),
    };
    let (tx, rx) = unbounded();
    let (_stx, srx) = bounded(8);
    (spec, timing, Handover { tx, spare: srx }, rx)
}

#[test]
fn watchdog_reports_a_stall_before_the_op_returns() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        threads: 1,
        sync: SyncPolicy::None,
        ..Config::default()
    };
    let (spec, timing, handover, rx) = setup(&cfg, dir.path());
    spec.hold.store(true, Relaxed);
    let eng = Engine::start(&spec, timing, handover.clone()).unwrap();
    let wd = Watchdog::start(timing.clock, timing.threshold, handover.tx.clone());
    wd.set_slots(eng.slots.clone());
    // The writer is held inside its first op; the watchdog must speak now.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen = None;
    while Instant::now() < deadline && seen.is_none() {
        if let Ok(Msg::Blocked(b)) = rx.recv_timeout(Duration::from_millis(100)) {
            assert_eq!(b.dur_ns, None, "reported while it lasts");
            seen = Some((b.who.thread(), b.op, b.start_ns));
        }
    }
    let (thread, op, start_ns) = seen.expect("watchdog reported the held op");
    assert_eq!((thread, op), (0, OpKind::Write));
    assert!(
        spec.hold.load(Relaxed),
        "reported while the op was still blocked"
    );
    // Release: the finished op arrives as a stall event with the same start.
    spec.hold.store(false, Relaxed);
    let mut finished = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && finished.is_none() {
        if let Ok(Msg::Batch(b)) = rx.recv_timeout(Duration::from_millis(100)) {
            finished = b.stalls.into_iter().find(|s| s.start_ns == start_ns);
        }
    }
    let st = finished.expect("finished stall event");
    assert!(st.dur() >= 50_000_000);
    drop(wd);
    eng.stop();
}

#[test]
fn every_mode_writes_and_hands_over_counts() {
    for mode in Mode::ALL {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let cfg = Config {
            mode,
            threads: 2,
            record_size: (mode == Mode::Journal).then_some(crate::base::units::ByteSize(64 << 10)),
            segment_size: crate::base::units::ByteSize(1 << 20),
            disk_budget: crate::base::units::ByteSize(8 << 20),
            journal_size: crate::base::units::ByteSize(1 << 20),
            sync: SyncPolicy::Every(50),
            ..Config::default()
        };
        let (spec, timing, handover, rx) = setup(&cfg, dir.path());
        let eng = Engine::start(&spec, timing, handover).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        eng.stop();
        let (mut ops, mut hist_n, mut syncs) = (0, 0, 0);
        for m in rx.try_iter() {
            match m {
                Msg::Batch(b) => {
                    ops += b.ops;
                    hist_n += b.hist.len();
                    syncs += b.sync_hist.len();
                }
                Msg::Event { message, .. } => panic!("{mode}: unexpected event {message}"),
                _ => {}
            }
        }
        assert!(ops > 10, "{mode}: {ops} ops");
        assert_eq!(ops, hist_n, "{mode}: every op timed once");
        assert!(syncs > 0, "{mode}: sync ops timed");
        // Footprint stays within the budget (plus the journal in journal mode).
        let used: u64 = walk(dir.path());
        assert!(
            used <= (8 << 20) + (1 << 20) + (64 << 10) * 4,
            "{mode}: {used} bytes"
        );
    }
}

fn walk(p: &Path) -> u64 {
    std::fs::read_dir(p)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            if md.is_dir() {
                walk(&e.path())
            } else {
                md.len()
            }
        })
        .sum()
}

#[test]
fn a_full_target_is_an_event_not_a_crash() {
    if !crate::base::testenv::require_root("a_full_target_is_an_event_not_a_crash") {
        return;
    }
    let m = crate::base::testenv::TmpfsMount::new("2m").unwrap();
    let cfg = Config {
        mode: Mode::Buffered,
        threads: 2,
        segment_size: crate::base::units::ByteSize(1 << 20),
        disk_budget: crate::base::units::ByteSize(64 << 20),
        sync: SyncPolicy::None,
        ..Config::default()
    };
    let (spec, timing, handover, rx) = setup(&cfg, m.path());
    let eng = Engine::start(&spec, timing, handover).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    eng.stop();
    let full = rx.try_iter().any(|m| {
        matches!(m, Msg::Event { kind: EventKind::TargetFull, ref message, .. } if message.contains("target full"))
    });
    assert!(full, "ENOSPC became a target-full event");
}

#[test]
fn a_panicking_writer_is_an_error_event_and_the_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        threads: 3,
        sync: SyncPolicy::None,
        ..Config::default()
    };
    let (spec, timing, handover, rx) = setup(&cfg, dir.path());
    spec.panic_thread.store(1, Relaxed);
    let eng = Engine::start(&spec, timing, handover.clone()).unwrap();
    let wd = Watchdog::start(timing.clock, timing.threshold, handover.tx.clone());
    wd.set_slots(eng.slots.clone());
    let mut error = None;
    let mut ops_after = [0u64; 3];
    let mut stalls_of_dead = 0;
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(Msg::Event { kind, message, .. }) => {
                assert_eq!(kind, EventKind::WriterError);
                error = Some(message);
            }
            Ok(Msg::Batch(b)) if error.is_some() => ops_after[b.thread as usize] += b.ops,
            Ok(Msg::Blocked(b)) if error.is_some() && b.who.thread() == 1 => stalls_of_dead += 1,
            _ => {}
        }
    }
    drop(wd);
    eng.stop();
    let error = error.expect("an error event for the panicked writer");
    assert!(error.contains("thread 1 panicked"), "{error}");
    assert_eq!(ops_after[1], 0, "the panicked writer is gone");
    assert!(ops_after[0] > 0 && ops_after[2] > 0, "{ops_after:?}");
    assert_eq!(stalls_of_dead, 0, "its last op is not reported again");
}

/// Held threads know their kernel ids but write nothing until released
/// (the session narrows tracing to them in between).
#[test]
fn held_writers_wait_for_release_with_their_tids_known() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        threads: 2,
        sync: SyncPolicy::None,
        ..Config::default()
    };
    let (spec, timing, handover, rx) = setup(&cfg, dir.path());
    let eng = Engine::start_held(&spec, timing, handover).unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while eng.slots.iter().any(|s| s.inflight.tid() == 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        eng.slots.iter().all(|s| s.inflight.tid() != 0),
        "tids known"
    );
    std::thread::sleep(Duration::from_millis(300));
    let before: u64 = rx
        .try_iter()
        .filter_map(|m| match m {
            Msg::Batch(b) => Some(b.ops),
            _ => None,
        })
        .sum();
    assert_eq!(before, 0, "no op before release");
    eng.release();
    std::thread::sleep(Duration::from_millis(300));
    eng.stop();
    let after: u64 = rx
        .try_iter()
        .filter_map(|m| match m {
            Msg::Batch(b) => Some(b.ops),
            _ => None,
        })
        .sum();
    assert!(after > 0, "writes after release");
}

/// Open loop: a rate-limited writer held in one op for 300 ms makes one
/// stall (the held call), while the ops it started late behind it carry
/// that wait in their latency (counted from their intended start) and are
/// no stalls of their own: one stall per blocking call.
#[test]
fn a_late_op_has_its_wait_in_latency_but_is_not_a_stall() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        threads: 1,
        rate: 200,
        sync: SyncPolicy::None,
        ..Config::default()
    };
    let (spec, timing, handover, rx) = setup(&cfg, dir.path());
    let eng = Engine::start(&spec, timing, handover).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    spec.hold.store(true, Relaxed);
    std::thread::sleep(Duration::from_millis(300));
    spec.hold.store(false, Relaxed);
    std::thread::sleep(Duration::from_millis(200));
    eng.stop();
    let (mut stalls, mut slow_ops) = (Vec::new(), 0);
    for m in rx.try_iter() {
        if let Msg::Batch(b) = m {
            slow_ops += b.hist.count_between(50_000, crate::model::ops::HIST_MAX_US);
            stalls.extend(b.stalls);
        }
    }
    assert_eq!(stalls.len(), 1, "one stall, the held call: {stalls:?}");
    assert!(stalls[0].dur() >= 250_000_000, "{:?}", stalls[0]);
    // 200 ops/s held 300 ms: ~60 ops start late, each ≥ 50 ms behind.
    assert!(
        slow_ops >= 20,
        "late ops' latency from the intended start: {slow_ops}"
    );
}
