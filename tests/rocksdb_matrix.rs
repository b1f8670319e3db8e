//! stallscope against RocksDB's own stall counter across configurations
//! (issue #23): db_bench fillrandom on a loop ext4 capped at 20 MiB/s
//! (dirty limits 256M/64M), one cell per WAL on/off × a user write-rate
//! limit or none × 1 or 4 writer threads × level-0 triggers that make
//! slowdowns or stops dominate. In every cell the time stallscope says the
//! writers were held back by RocksDB must be within 10 % of
//! `rocksdb.stall.micros`.
//!
//! What is compared. RocksDB adds to `rocksdb.stall.micros` the time the
//! write group's leader spends in `DelayWrite`: sleeping 1 ms at a time on
//! a slowdown, waiting on a condition variable until a flush or compaction
//! is done on a stop. One leader at a time, so the counter is wall time;
//! the writers queued behind the leader wait too and are not counted
//! again. stallscope's side is therefore the writers' waits that RocksDB
//! made, joined over the writer threads (wall time, not thread time):
//! their stalls whose cause is `app_delay` (slowdown steps) or whose wake-up
//! chain goes through a background thread (`rocksdb:high` or
//! `rocksdb:low`: a stop until the flush or compaction is done), plus the
//! runs of slowdown steps too short to be stalls (the process's
//! `blocked_by_cause.app_delay` beyond its `app_delay` stalls: blocked time
//! without a place in time, added whole). Left out, and shown: the writers'
//! other waits (a WAL `write` throttled by the kernel's dirty limits, a
//! writer waiting for a sibling that is throttled so) and db_bench's own
//! sleeps for `--benchmark_write_rate_limit` (a timed wait of up to 100 ms
//! woken by its timer, or a writer woken by the limiter's leader, which was
//! in no kernel wait: neither is a stall, so no chain counts them); neither
//! is in RocksDB's counter.
//!
//! CI runs three cells that between them take every value of each factor
//! (25 s of db_bench each); `STALLSCOPE_ROCKS_MATRIX=full` runs all 16
//! (`scripts/rocksdb-matrix.sh`, which prints the table for docs/observing-servers.md).
//! `STALLSCOPE_ROCKS_CELL_S` sets each cell's db_bench duration,
//! `STALLSCOPE_ROCKS_CELLS` (comma-separated parts of cell names such as
//! `wal-on_limit-off_4w_slowdowns`) picks cells. Each
//! cell's files are kept in a folder named on stderr
//! (`STALLSCOPE_TEST_KEEP` to choose it).

mod common;

use common::observer::Observed;
use common::rocks::{observe_db_bench, parse_figures, KeepDir, RocksFigures};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

/// db_bench's `--benchmark_write_rate_limit` in the cells with a user
/// limit, bytes/s: above what flush and compaction keep up with on the
/// capped disk (about 9 MB/s), so that RocksDB still stalls, and far under
/// what db_bench writes between stalls, so that it sleeps in its limiter
/// too. (5 MiB/s kept RocksDB from stalling at all.)
const RATE_LIMIT: u64 = 12 << 20;
/// RocksDB's delayed write rate in the slowdown cells (2 MiB/s): low
/// enough that the flush keeps up and the writer is slowed, not stopped.
const DELAYED_RATE: u64 = 2 << 20;
/// A cell whose RocksDB stall time is under this is shown, not judged
/// (half a second is still some 500 delay steps).
const MIN_STALL_MS: f64 = 500.0;
const TOLERANCE: f64 = 0.10;

#[derive(Clone, Copy, Debug)]
struct Cell {
    wal: bool,
    limit: bool,
    writers: u32,
    /// Level-0 (and memtable) triggers that make stops dominate, else
    /// slowdowns.
    stops: bool,
}

impl Cell {
    fn all() -> Vec<Cell> {
        let mut v = Vec::new();
        for wal in [true, false] {
            for limit in [false, true] {
                for writers in [1, 4] {
                    for stops in [false, true] {
                        v.push(Cell {
                            wal,
                            limit,
                            writers,
                            stops,
                        });
                    }
                }
            }
        }
        v
    }

    /// Three cells that take every value of each factor.
    fn ci() -> Vec<Cell> {
        let c = |wal, limit, writers, stops| Cell {
            wal,
            limit,
            writers,
            stops,
        };
        vec![
            c(true, false, 1, false),
            c(false, true, 4, true),
            c(false, false, 4, false),
        ]
    }

    fn name(&self) -> String {
        format!(
            "wal-{}_limit-{}_{}w_{}",
            if self.wal { "on" } else { "off" },
            if self.limit { "on" } else { "off" },
            self.writers,
            if self.stops { "stops" } else { "slowdowns" }
        )
    }

    fn args(&self, db: &Path, secs: u64) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--benchmarks=fillrandom,stats".into(),
            format!("--threads={}", self.writers),
            format!("--disable_wal={}", u8::from(!self.wal)),
            "--write_buffer_size=16777216".into(),
            "--level0_file_num_compaction_trigger=2".into(),
            "--level0_slowdown_writes_trigger=4".into(),
            "--max_background_jobs=1".into(),
            "--statistics".into(),
            "--value_size=1000".into(),
            "--num=1000000000".into(),
            format!("--duration={secs}"),
            format!("--db={}", db.display()),
        ];
        if self.stops {
            // Stopped at 4 level-0 files (no slowdown before it) and at
            // 2 memtables.
            a.push("--level0_stop_writes_trigger=4".into());
            a.push("--max_write_buffer_number=2".into());
        } else {
            // Slowed at 4 level-0 files and at 5 memtables, never stopped
            // by level 0, slowed enough that the flush keeps up.
            a.push("--level0_stop_writes_trigger=1000".into());
            a.push("--max_write_buffer_number=6".into());
            a.push(format!("--delayed_write_rate={DELAYED_RATE}"));
        }
        if self.limit {
            a.push(format!("--benchmark_write_rate_limit={RATE_LIMIT}"));
        }
        a
    }
}

/// One cell's figures: RocksDB's and stallscope's.
struct Outcome {
    cell: Cell,
    rocks: RocksFigures,
    bench_s: f64,
    held: Held,
    keep: std::path::PathBuf,
}

/// stallscope's side of a cell.
#[derive(Debug, Default)]
struct Held {
    /// The writers' RocksDB waits joined over the writer threads, ms.
    held_ms: f64,
    /// The same added up over the threads (thread time), ms.
    held_thread_ms: f64,
    /// Of `held_ms`: `app_delay` stalls, short delay runs, chained stops.
    delay_ms: f64,
    short_ms: f64,
    stop_ms: f64,
    /// The writers' other stalls (not made by RocksDB), thread time, ms.
    other_ms: f64,
    /// `app_delay` stalls of threads other than the writers, ms.
    stray_delay_ms: f64,
}

impl Outcome {
    fn ratio(&self) -> f64 {
        self.held.held_ms / self.rocks.stall_ms
    }

    fn judged(&self) -> bool {
        self.rocks.stall_ms >= MIN_STALL_MS
    }

    fn within(&self) -> bool {
        (self.ratio() - 1.0).abs() <= TOLERANCE
    }
}

fn background(comm: Option<&str>) -> bool {
    matches!(comm, Some("rocksdb:high" | "rocksdb:low"))
}

/// A stall RocksDB made: a slowdown, or a wait whose chain goes through a
/// flush or compaction thread.
fn rocksdb_made(s: &Value) -> bool {
    s["cause"] == "app_delay"
        || s["via"]
            .as_array()
            .is_some_and(|hops| hops.iter().any(|h| background(h["comm"].as_str())))
}

/// The `app_delay` share of a stall, ms.
fn delay_share(s: &Value) -> f64 {
    s["shares"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|sh| sh["cause"] == "app_delay")
        .filter_map(|sh| sh["ms"].as_f64())
        .sum()
}

/// Total length of the union of `[start, end)` spans.
fn union_ms(mut spans: Vec<(f64, f64)>) -> f64 {
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut cur: Option<(f64, f64)> = None;
    for (s, e) in spans {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    total + cur.map_or(0.0, |(s, e)| e - s)
}

/// stallscope's side of one cell from what it printed.
fn measure(out: &Observed, pid: u32, writers: &BTreeSet<u32>) -> Held {
    let stalls: Vec<&Value> = out
        .of("stall")
        .filter(|s| s["pid"].as_u64() == Some(u64::from(pid)))
        .collect();
    let is_writer = |s: &Value| {
        s["tid"]
            .as_u64()
            .is_some_and(|t| writers.contains(&(t as u32)))
    };
    let dur = |s: &Value| s["duration_ms"].as_f64().unwrap_or(0.0);
    let mine: Vec<&Value> = stalls.iter().copied().filter(|s| is_writer(s)).collect();
    let made: Vec<&Value> = mine.iter().copied().filter(|s| rocksdb_made(s)).collect();
    let delay_ms: f64 = made.iter().map(|s| delay_share(s)).sum();
    let stop_ms: f64 = made.iter().map(|s| dur(s) - delay_share(s)).sum();
    let other_ms: f64 = mine
        .iter()
        .filter(|s| !rocksdb_made(s))
        .map(|s| dur(s))
        .sum();
    let stray_delay_ms: f64 = stalls
        .iter()
        .filter(|s| !is_writer(s))
        .map(|s| delay_share(s))
        .sum();
    // The process's app_delay time beyond its app_delay stalls: the
    // short runs.
    let blocked_delay: f64 = out
        .of("observed")
        .filter(|o| o["pid"].as_u64() == Some(u64::from(pid)))
        .filter_map(|o| o["blocked_by_cause"]["app_delay"].as_f64())
        .sum();
    let all_delay: f64 = stalls.iter().map(|s| delay_share(s)).sum();
    let short_ms = (blocked_delay - all_delay).max(0.0);
    let spans: Vec<(f64, f64)> = made
        .iter()
        .map(|s| {
            let t = s["t_s"].as_f64().unwrap_or(0.0) * 1e3;
            (t, t + dur(s))
        })
        .collect();
    Held {
        held_ms: union_ms(spans) + short_ms,
        held_thread_ms: made.iter().map(|s| dur(s)).sum::<f64>() + short_ms,
        delay_ms,
        short_ms,
        stop_ms,
        other_ms,
        stray_delay_ms,
    }
}

fn run_cell(cell: Cell, mount: &Path, keep_root: &Path, secs: u64) -> Outcome {
    let keep = keep_root.join(cell.name());
    std::fs::create_dir_all(&keep).unwrap();
    let db = mount.join("rocks");
    let _ = std::fs::remove_dir_all(&db);
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    let obs_args = ["--stall-threshold", "20ms", "--chains", "auto"];
    let n = cell.writers as usize;
    let limit = Duration::from_secs(secs * 4 + 30);
    let run = observe_db_bench(&db, &cell.args(&db, secs), &obs_args, n, &keep, limit);
    let (status, pid, bench_s, out) = (run.status, run.pid, run.bench_s, run.out);
    let (bench_txt, log) = (run.bench_txt, run.log);
    let writers: BTreeSet<u32> = run.writers.into_iter().collect();
    let _ = std::fs::write(keep.join("writers.txt"), format!("{writers:?}\n"));
    let _ = std::fs::remove_dir_all(&db);
    assert_eq!(status, 0, "db_bench ({}): {bench_txt}", cell.name());
    assert!(out.success, "stallscope ({}): {}", cell.name(), out.stderr);
    assert_eq!(
        writers.len(),
        cell.writers as usize,
        "the writer threads were seen"
    );
    Outcome {
        cell,
        rocks: parse_figures(&bench_txt, &log),
        bench_s,
        held: measure(&out, pid, &writers),
        keep,
    }
}

/// The matrix as a Markdown table (for docs/observing-servers.md).
fn table(outs: &[Outcome]) -> String {
    let mut t = String::from(
        "| WAL | user limit | writers | L0 triggers | RocksDB slowdowns / stops | `stall.micros` s | stallscope writers held s | ratio | within 10 % | `app_delay` s (short runs) | stops via flush/compaction s | thread time s | writers' other stalls s |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for o in outs {
        let c = &o.cell;
        let verdict = match (o.judged(), o.within()) {
            (false, _) => "(too little stall)",
            (true, true) => "yes",
            (true, false) => "**no**",
        };
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} / {} | {:.1} | {:.1} | {:.3} | {} | {:.1} ({:.2}) | {:.1} | {:.1} | {:.1} |\n",
            if c.wal { "on" } else { "off" },
            if c.limit { "12 MiB/s" } else { "none" },
            c.writers,
            if c.stops { "stops" } else { "slowdowns" },
            o.rocks.l0_slowdowns + o.rocks.memtable_slowdowns,
            o.rocks.l0_stops + o.rocks.memtable_stops,
            o.rocks.stall_ms / 1e3,
            o.held.held_ms / 1e3,
            o.ratio(),
            verdict,
            (o.held.delay_ms + o.held.short_ms) / 1e3,
            o.held.short_ms / 1e3,
            o.held.stop_ms / 1e3,
            o.held.held_thread_ms / 1e3,
            o.held.other_ms / 1e3,
        ));
    }
    t
}

#[test]
fn rocksdb_matrix_writers_held_time_matches_stall_micros() {
    let test = "rocksdb_matrix_writers_held_time_matches_stall_micros";
    if !common::need_root(test) {
        return;
    }
    if !common::have("db_bench") {
        common::skip(test, "db_bench missing (apt-get install rocksdb-tools)");
        return;
    }
    let full = std::env::var("STALLSCOPE_ROCKS_MATRIX").is_ok_and(|v| v == "full");
    let secs: u64 = std::env::var("STALLSCOPE_ROCKS_CELL_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(25);
    let only = std::env::var("STALLSCOPE_ROCKS_CELLS").unwrap_or_default();
    let cells: Vec<Cell> = if full { Cell::all() } else { Cell::ci() }
        .into_iter()
        .filter(|c| only.split(',').any(|o| c.name().contains(o)))
        .collect();
    let Some(lab) = common::capped(test, "ext4", 20) else {
        return;
    };
    let keep = KeepDir::new("rocksdb-matrix");
    let mut outs = Vec::new();
    for (i, cell) in cells.iter().enumerate() {
        eprintln!("cell {}/{}: {}", i + 1, cells.len(), cell.name());
        let o = run_cell(*cell, &lab.fs.mount, &keep, secs);
        eprintln!(
            "  {:.1} s: stall.micros {:.1} s, writers held {:.1} s (ratio {:.3}); app_delay stalls of other threads {:.1} s; files in {}",
            o.bench_s,
            o.rocks.stall_ms / 1e3,
            o.held.held_ms / 1e3,
            o.ratio(),
            o.held.stray_delay_ms / 1e3,
            o.keep.display()
        );
        outs.push(o);
    }
    drop(lab);
    let t = table(&outs);
    eprintln!(
        "\nRocksDB db_bench fillrandom, {secs} s a cell, ext4 capped at 20 MiB/s (dirty 256M/64M); files in {}\n\n{t}",
        keep.display()
    );
    let _ = std::fs::write(keep.join("matrix.md"), &t);
    let missed: Vec<String> = outs
        .iter()
        .filter(|o| o.judged() && !o.within())
        .map(|o| format!("{} ({:.3})", o.cell.name(), o.ratio()))
        .collect();
    assert!(
        missed.is_empty(),
        "cells outside ±10 %: {missed:?}; files in {}",
        keep.display()
    );
    assert!(
        outs.iter().any(Outcome::judged),
        "no cell stalled RocksDB enough to judge"
    );
}

#[test]
fn union_of_spans() {
    assert_eq!(union_ms(vec![]), 0.0);
    assert_eq!(union_ms(vec![(0.0, 10.0), (5.0, 20.0), (30.0, 31.0)]), 21.0);
    assert_eq!(union_ms(vec![(30.0, 31.0), (0.0, 10.0), (2.0, 3.0)]), 11.0);
}

#[test]
fn cells_cover_every_value_of_each_factor() {
    assert_eq!(Cell::all().len(), 16);
    let ci = Cell::ci();
    assert!(ci.iter().any(|c| c.wal) && ci.iter().any(|c| !c.wal));
    assert!(ci.iter().any(|c| c.limit) && ci.iter().any(|c| !c.limit));
    assert!(ci.iter().any(|c| c.writers == 1) && ci.iter().any(|c| c.writers == 4));
    assert!(ci.iter().any(|c| c.stops) && ci.iter().any(|c| !c.stops));
}
