//! Idle servers stay quiet (#17): a real server with no client, observed
//! for 60 s with wake-up chains on, reports no stall. Its threads sleep on
//! sockets, timers and each other; none of that waits for a write, so a
//! stall here means a sleep was chained to a kernel write wait that it did
//! not wait for. Each server starts fresh and settles first (its start-up
//! writes flushed: a checkpoint where it has one, then `sync`), so a real
//! write of its own does not show up as a false alarm. Root only.

mod common;

use common::observer::Observer;
use serde_json::Value;
use std::time::Duration;

/// These servers run one at a time (each settles, then is observed alone).
static ONE_SERVER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How long each server is observed.
const OBSERVE: &str = "60s";

fn sync_and_settle(secs: u64) {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::thread::sleep(Duration::from_secs(secs));
}

/// Observes `pid` (and what it forks) for 60 s with chains on; returns
/// the observed-process lines seen and the stall lines.
fn observe_idle(name: &str, pid: u32) -> (usize, Vec<Value>) {
    let mut obs = Observer::start(&[
        "--observe",
        &pid.to_string(),
        "--stall-threshold",
        "20ms",
        "--chains",
        "auto",
        "--duration",
        OBSERVE,
    ]);
    obs.wait_attached(30);
    let out = obs.stop(false);
    assert!(out.success, "stallscope: {}", out.stderr);
    let observed = out.of("observed").count();
    let stalls: Vec<Value> = out.of("stall").cloned().collect();
    eprintln!(
        "idle {name} (pid {pid}): {observed} observed-process lines, {} stalls\n{}",
        stalls.len(),
        out.stderr.trim()
    );
    (observed, stalls)
}

/// Waits until the server's WAL insert position has not moved for
/// `quiet` (at most `max`); returns how long that took.
fn wal_settled(pg: &common::pg::PgServer, quiet: Duration, max: Duration) -> Duration {
    let t0 = std::time::Instant::now();
    let lsn = || pg.query("SELECT pg_current_wal_insert_lsn()");
    let (mut last, mut since) = (lsn(), std::time::Instant::now());
    while since.elapsed() < quiet {
        assert!(
            t0.elapsed() < max,
            "PostgreSQL's WAL still moves after {max:?} (at {last})"
        );
        std::thread::sleep(Duration::from_secs(1));
        let now = lsn();
        if now != last {
            (last, since) = (now, std::time::Instant::now());
        }
    }
    t0.elapsed()
}

#[test]
fn an_idle_postgres_under_observation_reports_no_stalls() {
    let test = "an_idle_postgres_under_observation_reports_no_stalls";
    if !common::need_root(test) {
        return;
    }
    if !common::pg::have_postgres() {
        common::skip(
            test,
            "PostgreSQL or pgbench missing (apt-get install postgresql)",
        );
        return;
    }
    let _one = ONE_SERVER.lock().unwrap_or_else(|e| e.into_inner());
    // A fresh cluster, nothing loaded. Autovacuum's launcher runs and
    // sleeps, but starts no worker in the window: a worker's start and its
    // pg_database update are real WAL writes, and on the capped lab their
    // fdatasyncs are real stalls of the worker and of the launcher waiting
    // for it to start (a CI run saw 11 at the minute mark).
    let lab = common::pg::PgLab::start(20, 0);
    lab.server
        .psql("ALTER SYSTEM SET autovacuum_naptime = '1h'");
    lab.server.query("SELECT pg_reload_conf()");
    lab.server.psql("CHECKPOINT");
    // After a checkpoint the background writer logs one standby snapshot
    // within 15 s, which the WAL writer flushes with fdatasync: a real
    // write (an earlier idle test saw it as a 120 ms stall). Settled is
    // when the WAL has not moved for longer than that.
    let settled = wal_settled(
        &lab.server,
        Duration::from_secs(16),
        Duration::from_secs(60),
    );
    sync_and_settle(2);
    eprintln!("idle postgres: WAL quiet after {settled:.1?}");
    let lsn = || lab.server.query("SELECT pg_current_wal_insert_lsn()");
    let before = lsn();
    let (observed, stalls) = observe_idle("postgres", lab.server.pid());
    let after = lsn();
    drop(lab);
    // PostgreSQL's own account that it was idle: a WAL record written in
    // the window is a real write, and its stall would be no false alarm.
    assert_eq!(
        before, after,
        "PostgreSQL wrote WAL while observed: not idle, the test proves nothing"
    );
    // The postmaster and its ~5 auxiliary processes, once a second.
    assert!(
        observed >= 55 * 5,
        "the observer saw the server's processes: {observed} lines"
    );
    assert!(stalls.is_empty(), "an idle PostgreSQL stalled: {stalls:#?}");
}

#[test]
fn an_idle_etcd_under_observation_reports_no_stalls() {
    let test = "an_idle_etcd_under_observation_reports_no_stalls";
    if !common::need_root(test) {
        return;
    }
    if !common::have("etcd") {
        common::skip(test, "etcd missing (apt-get install etcd-server)");
        return;
    }
    let _one = ONE_SERVER.lock().unwrap_or_else(|e| e.into_inner());
    // On a lab ext4 like the other servers' data (the cap does not matter
    // to a server that writes nothing).
    let Some(lab) = common::capped(test, "ext4", 20) else {
        return;
    };
    let etcd = common::etcd::Etcd::start(&lab.fs.mount.join("etcd"));
    sync_and_settle(5);
    let (observed, stalls) = observe_idle("etcd", etcd.pid());
    assert!(etcd.healthy(), "etcd is still up after the observation");
    drop(etcd);
    drop(lab);
    // One process, once a second.
    assert!(observed >= 55, "the observer saw etcd: {observed} lines");
    assert!(stalls.is_empty(), "an idle etcd stalled: {stalls:#?}");
}
