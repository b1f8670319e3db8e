//! The wiring of sources into the fold, end to end without a terminal.

use crate::base::clock::Clock;
use crate::base::units::ByteSize;
use crate::config::{Config, Mode, SyncPolicy};
use crate::fold::aggregate::{Aggregator, TargetState};
use crate::model::msg::{Handover, Timing};
use crate::model::ops::OpKind;
use crate::model::snapshot::Snapshot;
use crate::source::watchdog::Watchdog;
use crate::source::writer::{Engine, EngineSpec};
use crossbeam::channel::{bounded, unbounded};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// Defect: the periodic sync thread sleeps a whole period after its op, and
/// its stall used to go out only at its next op — a period late, filed in
/// the wrong interval, with the banner counting on an op that had ended.
#[test]
#[allow(clippy::too_many_lines)]
fn a_periodic_sync_stall_lands_in_its_interval_and_the_banner_never_outlives_it() {
    const HOLD_MS: u64 = 260;
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let cfg = Config {
        mode: Mode::Buffered,
        threads: 1,
        rate: 2000,
        segment_size: ByteSize(1 << 20),
        disk_budget: ByteSize(4 << 20),
        sync: SyncPolicy::Periodic(Duration::from_millis(700)),
        ..Config::default()
    };
    let spec = EngineSpec::new(&cfg, 0, dir.path(), None);
    spec.sync_hold_ms.store(HOLD_MS, Relaxed);
    let interval_ns = 200_000_000;
    let timing = Timing {
        clock: Clock::new(),
        interval: Duration::from_nanos(interval_ns),
        threshold: Duration::from_millis(50),
    };
    let (tx, rx) = unbounded();
    let (_spare_tx, spare) = bounded(8);
    let handover = Handover {
        tx: tx.clone(),
        spare,
    };
    let mut agg = Aggregator::new(
        interval_ns,
        vec![TargetState {
            mode: cfg.mode,
            threads: 1,
            active: true,
        }],
    );
    let eng = Engine::start(&spec, timing, handover).unwrap();
    let wd = Watchdog::start(timing.clock, timing.threshold, tx);
    wd.set_slots(eng.slots.clone());

    // The oldest age the banner showed for each sync op (by its start).
    let mut banner: HashMap<u64, f64> = HashMap::new();
    let mut snaps: Vec<Snapshot> = Vec::new();
    let end = Instant::now() + Duration::from_millis(2600);
    while Instant::now() < end {
        while let Ok(m) = rx.recv_timeout(Duration::from_millis(2)) {
            agg.fold(m);
        }
        let now = timing.clock.now_ns();
        let live = agg.live(now);
        for s in live.stalls.iter().filter(|s| s.ev.op == OpKind::Sync) {
            let age = live.age_ms(s);
            let e = banner.entry(s.ev.start_ns).or_insert(0.0);
            *e = e.max(age);
        }
        snaps.extend(agg.tick(now));
    }
    drop(wd);
    eng.stop();

    let syncs: Vec<(u64, &crate::model::stall::Stall)> = snaps
        .iter()
        .flat_map(|s| s.stalls.iter().map(move |st| (s.index, st)))
        .filter(|(_, st)| st.ev.op == OpKind::Sync)
        .collect();
    assert!(
        syncs.len() >= 2,
        "two periodic syncs in 2.6 s: {}",
        syncs.len()
    );
    for (index, st) in &syncs {
        let dur_ms = st.ev.dur() as f64 / 1e6;
        let end_ns = st.ev.start_ns + st.ev.dur();
        assert_eq!(
            *index,
            end_ns / interval_ns,
            "a sync stall ending at {:.3} s is filed in the interval it ended in",
            end_ns as f64 / 1e9
        );
        assert!(
            (HOLD_MS as f64..HOLD_MS as f64 + 150.0).contains(&dur_ms),
            "the sync blocked {HOLD_MS} ms and a flush: {dur_ms:.1} ms"
        );
        if let Some(shown) = banner.get(&st.ev.start_ns) {
            assert!(
                *shown <= dur_ms + 30.0,
                "the banner showed {shown:.1} ms of a {dur_ms:.1} ms stall"
            );
        }
    }
    assert!(
        syncs
            .iter()
            .any(|(_, st)| banner.contains_key(&st.ev.start_ns)),
        "the banner showed a sync while it lasted"
    );
}
