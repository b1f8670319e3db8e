//! stallscope against a real server none of us wrote: PostgreSQL (the
//! newest installed) on a capped lab ext4, pgbench as the load, stallscope
//! started before pgbench. Truth comes from outside: pgbench's own per-second progress,
//! and the kernel's scheduler events read by an independent reader in the
//! test (tests/common/sched_truth.rs).

mod common;

use common::pg::{have_postgres, progress, PgLab};
use common::sched_truth::SchedTruth;
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The servers of these tests run one at a time: a busy one would stall
/// the idle one's disk and dirty memory (and show under its name).
static ONE_SERVER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn epoch_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
#[allow(clippy::too_many_lines)]
fn pgbench_stalls_are_observed_exactly_and_named() {
    let test = "pgbench_stalls_are_observed_exactly_and_named";
    if !common::need_root(test) {
        return;
    }
    if !have_postgres() {
        common::skip(
            test,
            "PostgreSQL or pgbench missing (apt-get install postgresql)",
        );
        return;
    }
    let _one = ONE_SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let lab = PgLab::start(10, 20);
    let postmaster = lab.server.pid();
    let truth = SchedTruth::start("postgres");
    let t0 = epoch_s();
    let ss = common::bin()
        .args(["run", "--observe-name", "postgres", "--duration", "120s"])
        .args(["--stall-threshold", "20ms", "--format", "jsonl"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ss = ss;
    // Read its output as it comes: a full pipe would block it.
    let mut so = ss.stdout.take().unwrap();
    let mut se = ss.stderr.take().unwrap();
    let read_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut so, &mut v).map(|_| v)
    });
    let read_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut se, &mut v).map(|_| v)
    });
    std::thread::sleep(Duration::from_secs(2));
    // The server's own count of its WAL syncs from here on.
    lab.server.psql("SELECT pg_stat_reset_shared('wal')");
    let bench = lab.server.pgbench(&[
        "-c",
        "8",
        "-j",
        "2",
        "-T",
        "40",
        "-P",
        "1",
        "--progress-timestamp",
    ]);
    // pgbench is done: stop stallscope as a person would (Ctrl-C), so both
    // cover the same window. The wait lets the WAL writer report its
    // figures (at most once a second).
    std::thread::sleep(Duration::from_millis(1500));
    let wal_syncs: u64 = lab
        .server
        .query("SELECT wal_sync FROM pg_stat_wal")
        .parse()
        .unwrap();
    // SAFETY: kill with a valid pid and signal.
    unsafe { libc::kill(ss.id() as i32, libc::SIGINT) };
    let status = ss.wait().unwrap();
    let out = std::process::Output {
        status,
        stdout: read_out.join().unwrap().unwrap(),
        stderr: read_err.join().unwrap().unwrap(),
    };
    let sched = truth.stop();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // STALLSCOPE_TEST_KEEP=DIR keeps what both tools printed, to look at.
    if let Ok(dir) = std::env::var("STALLSCOPE_TEST_KEEP") {
        let d = std::path::Path::new(&dir);
        let _ = std::fs::write(d.join("stallscope.jsonl"), &out.stdout);
        let _ = std::fs::write(d.join("pgbench.txt"), &bench.stderr);
        let _ = std::fs::write(d.join("t0"), t0.to_string());
        let _ = std::fs::write(d.join("stallscope.err"), &out.stderr);
    }
    assert!(out.status.success(), "stallscope: {stderr}");
    assert!(
        stderr.contains("blocking times from the scheduler"),
        "the timing mode is named: {stderr}"
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let of = |ty: &'static str| lines.iter().filter(move |l| l["type"] == ty);
    let stalls: Vec<&Value> = of("stall").collect();
    let ticks = progress(&String::from_utf8_lossy(&bench.stderr));
    assert!(
        !ticks.is_empty(),
        "pgbench progress: {}",
        String::from_utf8_lossy(&bench.stderr)
    );

    // Backends forked after stallscope started are observed: they joined,
    // and their threads' stalls are reported.
    let joined: Vec<u64> = of("event")
        .filter(|e| e["kind"] == "process_joined")
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    assert!(joined.len() >= 8, "the 8 backends joined: {joined:?}");
    let stalled_joined = stalls
        .iter()
        .filter(|s| s["pid"].as_u64().is_some_and(|p| joined.contains(&p)))
        .count();
    assert!(stalled_joined > 0, "stalls of forked backends are reported");
    assert!(stalls
        .iter()
        .all(|s| s["pid"].as_u64() != Some(u64::from(std::process::id()))));
    let _ = postmaster;

    // Each second in which pgbench committed nothing overlaps a stall.
    let zero: Vec<f64> = ticks
        .iter()
        .filter(|p| p.tps == 0.0)
        .map(|p| p.end_s)
        .collect();
    for end in &zero {
        let (lo, hi) = (end - 1.0 - t0, end - t0);
        let hit = stalls.iter().any(|s| {
            let (a, d) = (
                s["t_s"].as_f64().unwrap(),
                s["duration_ms"].as_f64().unwrap() / 1e3,
            );
            // ±0.3 s: stallscope's clock starts when the process has started.
            a < hi + 0.3 && a + d > lo - 0.3
        });
        assert!(
            hit,
            "0-tps second ending at {end} (run time {lo:.1}..{hi:.1} s) has a stall"
        );
    }

    // Durations are the scheduler's, not multiples of a 50 ms sampler.
    let durs: Vec<f64> = stalls
        .iter()
        .map(|s| s["duration_ms"].as_f64().unwrap())
        .collect();
    assert!(durs.len() >= 20, "enough stalls to judge: {}", durs.len());
    let on_grid = durs
        .iter()
        .filter(|d| (*d / 50.0 - (*d / 50.0).round()).abs() < 0.01)
        .count();
    assert!(
        (on_grid as f64) < 0.1 * durs.len() as f64,
        "{on_grid} of {} durations sit on a 50 ms grid",
        durs.len()
    );

    // Waits inside fsync/fdatasync are sync, never writeback_wait.
    let in_sync: Vec<&&Value> = stalls
        .iter()
        .filter(|s| {
            matches!(
                s["evidence"]["syscall"].as_str(),
                Some("fsync" | "fdatasync")
            )
        })
        .collect();
    assert!(
        !in_sync.is_empty(),
        "WAL flushes are seen in fdatasync/fsync"
    );
    for s in &in_sync {
        assert_eq!(s["cause"], "sync", "{s}");
    }

    // Blocked time: stallscope's per-process D time against the kernel's
    // own events summed by the independent reader, within 10 %.
    let ours_ms: f64 = of("observed")
        .filter_map(|o| o["blocked_ms"].as_f64())
        .sum();
    let truth_ms = sched.total_ns as f64 / 1e6;
    eprintln!(
        "postgres: {} stalls, {} of forked backends, {} zero-tps seconds, {on_grid} on a 50 ms grid, \
         {} in fsync/fdatasync; blocked {ours_ms:.0} ms (stallscope) vs {truth_ms:.0} ms in {} blocks (sched events)",
        stalls.len(),
        stalled_joined,
        zero.len(),
        in_sync.len(),
        sched.blocks
    );
    assert!(
        truth_ms > 1000.0,
        "the load blocked postgres in D: {truth_ms} ms"
    );
    let ratio = ours_ms / truth_ms;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "blocked time ratio {ratio:.3}"
    );

    // Waits on pages under writeback (with the scheduler's events they
    // come raw, with them): every one the kernel recorded, within 10 %
    // (threads that exit between samples may lose a few).
    let ours_waits: u64 = of("observed").filter_map(|o| o["wb_waits"].as_u64()).sum();
    eprintln!(
        "postgres: page waits {ours_waits} (stallscope) vs {} (folio_wait_writeback)",
        sched.page_waits
    );
    assert!(
        sched.page_waits >= 100,
        "the load made postgres wait on pages under writeback: {}",
        sched.page_waits
    );
    let wratio = ours_waits as f64 / sched.page_waits as f64;
    assert!((0.9..=1.1).contains(&wratio), "page wait ratio {wratio:.3}");

    // The write pattern captured (`calls`): its fdatasyncs against the
    // server's own count of WAL syncs (pg_stat_wal.wal_sync; on Linux WAL
    // is synced by fdatasync, and nothing else of PostgreSQL's calls it),
    // within 5 % (its figures are reported up to a second late).
    let ours_syncs: u64 = of("observed")
        .filter_map(|o| o["calls"]["syncs"]["fdatasync"]["calls"].as_u64())
        .sum();
    eprintln!(
        "postgres: fdatasync {ours_syncs} (stallscope) vs wal_sync {wal_syncs} (pg_stat_wal)"
    );
    assert!(wal_syncs >= 100, "pgbench synced the WAL: {wal_syncs}");
    let sratio = ours_syncs as f64 / wal_syncs as f64;
    assert!(
        (0.95..=1.05).contains(&sratio),
        "WAL sync ratio {sratio:.3}"
    );
    drop(lab);
}

/// The server's version is found, not assumed: the highest major version
/// with an initdb (numerically: 16 above 9.6), none without one.
#[test]
fn the_newest_installed_postgres_is_used() {
    let root = tempfile::tempdir().unwrap();
    assert_eq!(common::pg::newest_pg_bin(root.path()), None);
    for (v, initdb) in [("9.6", true), ("15", true), ("16", true), ("17", false)] {
        let bin = root.path().join(v).join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        if initdb {
            std::fs::write(bin.join("initdb"), "").unwrap();
        }
    }
    std::fs::create_dir_all(root.path().join("common/bin")).unwrap();
    std::fs::write(root.path().join("common/bin/initdb"), "").unwrap();
    assert_eq!(
        common::pg::newest_pg_bin(root.path()),
        Some(root.path().join("16/bin"))
    );
}

#[test]
fn progress_lines_parse() {
    let p = progress("starting vacuum...end.\nprogress: 1796320456.798 s, 782.3 tps, lat 10.2 ms stddev 4.1, 0 failed\nprogress: 1796320457.798 s, 0.0 tps, lat 0.000 ms stddev 0.000, 0 failed\n");
    assert_eq!(p.len(), 2);
    assert_eq!((p[0].end_s, p[0].tps), (1796320456.798, 782.3));
    assert_eq!(p[1].tps, 0.0);
}
