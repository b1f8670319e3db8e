//! stallscope against RocksDB (Debian's `rocksdb-tools` db_bench), issue
//! #17's scenario: fillrandom with one writer thread, WAL off, 16 MiB
//! memtables x 2, level0 triggers 2/4/8 and one background job, on a loop
//! ext4 capped at 20 MiB/s with dirty limits 256M/64M. The flush and
//! compaction threads (`rocksdb:high`, `rocksdb:low`) wait in fsync for
//! writeback while the writer sleeps in S: stopped until the flush is done,
//! or slowed down in 1 ms timer steps. Truth is RocksDB's own accounting
//! (`rocksdb.stall.micros`, the stats' "Cumulative stall"): the writer's
//! stall time reported by stallscope must be within 20 % of it, and the
//! writer's stalls must lead to a background thread's kernel wait.
//!
//! db_bench is started stopped (SIGSTOP before exec), so it writes nothing
//! before stallscope is attached; it is let go once stallscope prints its
//! first observed line. What both printed is kept in a folder named on
//! stderr (or `STALLSCOPE_TEST_KEEP`), with a recording for
//! `stallscope report FILE --svg`.

mod common;

use common::rocks::{observe_db_bench, parse_figures, KeepDir};
use serde_json::Value;
use std::time::Duration;

/// How long db_bench runs fillrandom (its --duration, seconds).
const BENCH_S: u64 = 60;

/// Causes that are a kernel wait on the write path (not `app_delay`,
/// not `unknown`).
const KERNEL_WAITS: [&str; 6] = [
    "sync",
    "writeback_wait",
    "dirty_throttle",
    "journal_full",
    "device",
    "fault",
];

fn ms(s: &Value) -> f64 {
    s["duration_ms"].as_f64().unwrap_or(0.0)
}

/// Whether a stall's chain goes through a RocksDB background thread that
/// was in a kernel write-path wait.
fn through_background_kernel_wait(s: &Value) -> bool {
    s["via"].as_array().is_some_and(|hops| {
        hops.iter().any(|h| {
            matches!(h["comm"].as_str(), Some("rocksdb:high" | "rocksdb:low"))
                && h["cause"]
                    .as_str()
                    .is_some_and(|c| KERNEL_WAITS.contains(&c))
        })
    })
}

#[test]
#[allow(clippy::too_many_lines)]
fn rocksdb_writer_stalls_match_rocksdbs_own_accounting() {
    let test = "rocksdb_writer_stalls_match_rocksdbs_own_accounting";
    if !common::need_root(test) {
        return;
    }
    if !common::have("db_bench") {
        common::skip(test, "db_bench missing (apt-get install rocksdb-tools)");
        return;
    }
    let Some(lab) = common::capped(test, "ext4", 20) else {
        return;
    };
    let keep = KeepDir::new("rocksdb");
    let db = lab.fs.mount.join("rocks");
    let args: Vec<String> = [
        "--benchmarks=fillrandom,stats".to_string(),
        "--threads=1".into(),
        "--disable_wal=1".into(),
        "--write_buffer_size=16777216".into(),
        "--max_write_buffer_number=2".into(),
        "--level0_file_num_compaction_trigger=2".into(),
        "--level0_slowdown_writes_trigger=4".into(),
        "--level0_stop_writes_trigger=8".into(),
        "--max_background_jobs=1".into(),
        "--statistics".into(),
        "--value_size=1000".into(),
        "--num=1000000000".into(),
        format!("--duration={BENCH_S}"),
        format!("--db={}", db.display()),
    ]
    .into();
    let rec = keep.join("stallscope.rec.jsonl");
    let rec_arg = rec.to_string_lossy().to_string();
    let obs_args = [
        "--stall-threshold",
        "20ms",
        "--chains",
        "auto",
        "--record",
        &rec_arg,
    ];
    let limit = Duration::from_secs(BENCH_S * 3);
    let run = observe_db_bench(&db, &args, &obs_args, 1, &keep, limit);
    let (status, bench_s, out) = (run.status, run.bench_s, run.out);
    let (bench_txt, log) = (run.bench_txt, run.log);
    let writer = run.writers.first().copied();
    let svg = keep.join("rocksdb.svg");
    let report = common::bin()
        .args(["report", &rec.to_string_lossy(), "--svg"])
        .arg(&svg)
        .output()
        .unwrap();
    let _ = std::fs::write(keep.join("report.txt"), &report.stdout);
    drop(lab);
    assert_eq!(status, 0, "db_bench: {bench_txt}");
    assert!(out.success, "stallscope: {}", out.stderr);
    assert!(
        report.status.success(),
        "report: {}",
        String::from_utf8_lossy(&report.stderr)
    );
    let writer = writer.expect("the writer thread was seen");
    let rocks = parse_figures(&bench_txt, &log);

    let stalls: Vec<&Value> = out.of("stall").collect();
    let mine: Vec<&Value> = stalls
        .iter()
        .copied()
        .filter(|s| s["tid"].as_u64() == Some(u64::from(writer)))
        .collect();
    let writer_ms: f64 = mine.iter().map(|s| ms(s)).sum();
    let chained = mine
        .iter()
        .filter(|s| through_background_kernel_wait(s))
        .count();
    let share = |cause: &str| -> f64 {
        mine.iter()
            .flat_map(|s| s["shares"].as_array().into_iter().flatten())
            .filter(|sh| sh["cause"] == cause)
            .filter_map(|sh| sh["ms"].as_f64())
            .sum()
    };
    let by_thread = |name: &str| -> (usize, f64) {
        let v: Vec<&&Value> = stalls.iter().filter(|s| s["thread_comm"] == name).collect();
        (v.len(), v.iter().map(|s| ms(s)).sum())
    };
    let (high_n, high_ms) = by_thread("rocksdb:high");
    let (low_n, low_ms) = by_thread("rocksdb:low");
    let ratio = writer_ms / rocks.stall_ms;
    let cum = rocks
        .cumulative_ms
        .map_or("?".into(), |c| format!("{:.1}", c / 1e3));
    eprintln!(
        "\nRocksDB db_bench on a 20 MiB/s ext4 (dirty 256M/64M), {bench_s:.1} s, writer thread {writer} (db_bench)\n\
         {:<44} {:>12} {:>12}\n\
         {:<44} {:>12.1} {:>12.1}   ratio {ratio:.3}\n\
         {:<44} {:>12} {:>12.1}\n\
         {:<44} {:>12} {:>12.1}\n\
         {:<44} {:>12} {:>12}\n\
         {:<44} {:>12} {:>12}\n\
         {:<44} {:>12} {:>12}\n\
         {:<44} {:>12} {:>12}\n\
         {:<44} {:>12} {:>12.1}\n\
         {:<44} {:>12} {:>12.1}\n\
         fillrandom: {}\nfiles: {}  (chart: {})\n",
        "",
        "RocksDB",
        "stallscope",
        "writer stalled, s (stall.micros | sum of stalls)",
        rocks.stall_ms / 1e3,
        writer_ms / 1e3,
        "  Cumulative stall, s | of which app_delay",
        cum,
        share("app_delay") / 1e3,
        "  | of which kernel waits via other threads",
        "",
        KERNEL_WAITS.iter().map(|c| share(c)).sum::<f64>() / 1e3,
        "level0 slowdowns | memtable stops (Stalls(count))",
        rocks.l0_slowdowns,
        rocks.memtable_stops,
        "level0 stops | memtable slowdowns",
        rocks.l0_stops,
        rocks.memtable_slowdowns,
        "LOG: 'Stalling writes' | 'Stopping writes'",
        rocks.log_stalling,
        rocks.log_stopping,
        "writer stalls (lines) | through rocksdb:high/low",
        mine.len(),
        chained,
        "rocksdb:high stalls | s",
        high_n,
        high_ms / 1e3,
        "rocksdb:low stalls | s",
        low_n,
        low_ms / 1e3,
        rocks.fillrandom,
        keep.display(),
        svg.display(),
    );
    assert!(
        rocks.stall_ms > 5_000.0,
        "the scenario stalls RocksDB: {} ms",
        rocks.stall_ms
    );
    assert!(
        (0.8..=1.2).contains(&ratio),
        "writer stall {writer_ms:.0} ms vs rocksdb.stall.micros {:.0} ms (ratio {ratio:.3}); files in {}",
        rocks.stall_ms,
        keep.display()
    );
    assert!(
        chained > 0,
        "a writer stall leads to rocksdb:high/low in a kernel wait; files in {}",
        keep.display()
    );
}

#[test]
fn rocksdb_figures_parse() {
    let bench = "fillrandom   :     144.795 micros/op 6906 ops/sec 60.380 seconds 416999 operations;    6.7 MB/s\n\
        Stalls(count): 13 level0_slowdown, 13 level0_slowdown_with_compaction, 0 level0_numfiles, 0 level0_numfiles_with_compaction, 0 stop for pending_compaction_bytes, 0 slowdown for pending_compaction_bytes, 23 memtable_compaction, 0 memtable_slowdown, interval 31 total count\n\
        Cumulative stall: 00:01:57.566 H:M:S, 95.3 percent\n\
        rocksdb.l0.num.files.stall.micros COUNT : 0\n\
        rocksdb.stall.micros COUNT : 57566232\n";
    let log = "x [WARN] Stalling writes because we have 4 level-0 files\n\
        x [WARN] Stopping writes because we have 2 immutable memtables\n\
        x [WARN] Stopping writes because we have 2 immutable memtables\n";
    let f = parse_figures(bench, log);
    assert!((f.stall_ms - 57566.232).abs() < 1e-6);
    assert_eq!(f.cumulative_ms, Some(117_566.0));
    assert_eq!((f.l0_slowdowns, f.l0_stops), (13, 0));
    assert_eq!((f.memtable_stops, f.memtable_slowdowns), (23, 0));
    assert_eq!((f.log_stalling, f.log_stopping), (1, 2));
    assert!(f.fillrandom.starts_with("fillrandom : 144.795 micros/op"));
}
