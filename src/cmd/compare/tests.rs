//! The compare's tests: the plan, the table, the chart's overlay and
//! title, and whole compares on tmpfs (and ramfs as root).

use super::one_run::failed;
use super::plan::{check, plan, record_path, slug, Variant};
use super::svg::{dirty_of, empty_like, overlay, title};
use super::table::{ms, winner, COLS};
use super::*;
use crate::base::units::{ByteSize, Dur};
use crate::model::cause::{Attribution, Evidence};
use crate::model::ops::{new_histogram, OpKind};
use crate::model::snapshot::{TargetInterval, TargetMeta};
use crate::model::stall::{Blocked, Stall};
use std::path::Path;

fn meta(fs: &str) -> TargetMeta {
    TargetMeta {
        path: String::new(),
        fs: fs.into(),
        device: String::new(),
        mount_options: String::new(),
    }
}

fn variant(n: usize, target: &str, fs: &str, mode: Mode, threads: u32) -> Variant {
    Variant {
        n,
        target: target.into(),
        meta: meta(fs),
        mode,
        threads,
    }
}

/// A finished run with these figures (latency in µs).
fn ran(n: usize, ops_s: f64, lat: [u64; 4], stalls: u64, stall_ms: f64, zero: usize) -> RunResult {
    let v = variant(n, "/mnt/x", "xfs", Mode::Mmap, 4);
    RunResult {
        error: None,
        median_ops_per_s: ops_s,
        median_mib_per_s: ops_s / 1000.0,
        lat: LatSummary {
            p50: lat[0],
            p99: lat[1],
            p999: lat[2],
            max: lat[3],
            ..LatSummary::default()
        },
        stalls,
        stall_ms,
        top_cause: (stalls > 0).then_some(Cause::Sync),
        zero_intervals: zero,
        ..failed(&v, String::new())
    }
}

#[test]
fn table_has_a_row_per_run_and_a_verdict_per_column() {
    let results = vec![
        ran(1, 11234.0, [10, 1_000, 5_000, 9_000], 3, 1500.0, 2),
        ran(2, 20_500.0, [20, 500, 6_000, 9_000], 0, 0.0, 0),
        failed(
            &variant(3, "/mnt/r", "ramfs", Mode::Direct, 4),
            "ramfs refuses O_DIRECT".into(),
        ),
    ];
    let t = render_table(&results);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 6, "header, 3 runs, verdict, note:\n{t}");
    assert!(
        lines[0].starts_with("run") && lines[0].ends_with("top cause"),
        "{t}"
    );
    assert!(lines[1].starts_with("#1 xfs /mnt/x · mmap × 4"), "{t}");
    assert!(
        lines[1].contains("11234") && lines[1].ends_with("sync"),
        "{t}"
    );
    assert!(lines[2].ends_with(" -"), "no stall, no cause:\n{t}");
    assert!(lines[3].contains("failed: ramfs refuses O_DIRECT"), "{t}");
    let verdict: Vec<&str> = lines[4].split_whitespace().collect();
    assert_eq!(
        verdict,
        ["verdict", "#2", "#2", "#1", "#2", "#1", "tie", "#2", "#2", "#2"],
        "ops, MiB, p50, p99, p99.9, max, stalls, stalled, 0-ops:\n{t}"
    );
    // Figures are right-aligned under their headers.
    let end_of = |line: &str, word: &str| {
        line.find(word)
            .map(|i| line[..i].chars().count() + word.len())
    };
    assert_eq!(end_of(lines[0], "ops/s"), end_of(lines[1], "11234"), "{t}");
    assert_eq!(end_of(lines[0], "ops/s"), end_of(lines[2], "20500"), "{t}");
    assert_eq!(end_of(lines[0], "ops/s"), end_of(lines[4], "#2"), "{t}");
}

#[test]
fn verdict_names_every_winner_of_a_partial_tie() {
    let results = vec![
        ran(1, 100.0, [5, 5, 5, 5], 0, 0.0, 0),
        ran(2, 50.0, [5, 9, 9, 9], 1, 200.0, 0),
        ran(3, 100.0, [6, 9, 9, 9], 1, 200.0, 1),
    ];
    assert_eq!(winner(&COLS[0], &results), "#1 #3");
    assert_eq!(winner(&COLS[2], &results), "#1 #2");
    assert_eq!(winner(&COLS[8], &results), "#1 #2");
    assert_eq!(winner(&COLS[0], &results[..1]), "#1", "one run wins alone");
    let none = [failed(&variant(1, "/x", "?", Mode::Mmap, 1), "no".into())];
    assert_eq!(winner(&COLS[0], &none), "-");
}

#[test]
fn milliseconds_keep_the_digits_that_matter() {
    assert_eq!(ms(2), "0.002");
    assert_eq!(ms(1_234), "1.23");
    assert_eq!(ms(12_345), "12.3");
    assert_eq!(ms(4_012_000), "4012");
}

#[test]
fn recordings_are_named_per_run() {
    let v = variant(2, "/var/tmp/lab/mnt/xfs", "xfs", Mode::Mmap, 32);
    assert_eq!(v.file_tag(), "-2-xfs-mmap-32t");
    let w = variant(1, "/dev/shm/tmp.Ab3", "tmpfs", Mode::Buffered, 2);
    assert_eq!(w.file_tag(), "-1-tmpfs-tmp.Ab3-buffered-2t");
    let h = variant(1, "/tmp/.tmpXy", "ext4", Mode::Mmap, 2);
    assert_eq!(h.file_tag(), "-1-ext4-tmpXy-mmap-2t");
    let tag = "-1-x";
    assert_eq!(
        record_path(Path::new("night.jsonl"), tag),
        Path::new("night-1-x.jsonl")
    );
    assert_eq!(
        record_path(Path::new("/r/night.jsonl.zst"), tag),
        Path::new("/r/night-1-x.jsonl.zst")
    );
    assert_eq!(record_path(Path::new("night"), tag), Path::new("night-1-x"));
    assert_eq!(
        record_path(Path::new(".hidden"), tag),
        Path::new(".hidden-1-x")
    );
    assert_eq!(slug("a b/c·d"), "a-b-c-d");
}

#[test]
fn plan_is_target_major_and_numbered() {
    let opts = CompareOptions {
        base: Config {
            targets: vec!["/a".into(), "/b".into()],
            ..Config::default()
        },
        modes: vec![Mode::Mmap, Mode::Buffered, Mode::Mmap],
        threads: vec![1, 4],
        each: Duration::from_secs(1),
        record: None,
        svg: None,
        drain: Drain::default(),
    };
    let p: Vec<(usize, String, Mode, u32)> = plan(&opts)
        .into_iter()
        .map(|v| (v.n, v.target.display().to_string(), v.mode, v.threads))
        .collect();
    let want = [
        ("/a", Mode::Mmap, 1),
        ("/a", Mode::Mmap, 4),
        ("/a", Mode::Buffered, 1),
        ("/a", Mode::Buffered, 4),
        ("/b", Mode::Mmap, 1),
        ("/b", Mode::Mmap, 4),
        ("/b", Mode::Buffered, 1),
        ("/b", Mode::Buffered, 4),
    ];
    assert_eq!(p.len(), want.len(), "duplicate mode dropped");
    for (i, (got, w)) in p.iter().zip(want).enumerate() {
        assert_eq!(
            (got.0, got.1.as_str(), got.2, got.3),
            (i + 1, w.0, w.1, w.2)
        );
    }
    let empty = CompareOptions {
        modes: vec![],
        threads: vec![],
        ..opts
    };
    assert_eq!(
        plan(&empty).len(),
        2,
        "no variants: the base mode and threads"
    );
}

#[test]
fn bad_input_is_refused_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let opts = |targets: Vec<PathBuf>| CompareOptions {
        base: Config {
            targets,
            ..Config::default()
        },
        modes: vec![],
        threads: vec![],
        each: Duration::from_secs(1),
        record: None,
        svg: None,
        drain: Drain::default(),
    };
    let err = |o: CompareOptions| check(&o, &plan(&o)).unwrap_err().0;
    assert!(err(opts(vec![d.clone(), d.join(".")])).contains("given twice"));
    assert!(err(opts(vec![d.join("missing")])).contains("missing"));
    let zero_threads = CompareOptions {
        threads: vec![2, 0],
        ..opts(vec![d.clone()])
    };
    assert!(err(zero_threads).contains("--threads 0"));
    let no_dir = CompareOptions {
        svg: Some(d.join("nope/out.svg")),
        ..opts(vec![d.clone()])
    };
    assert!(err(no_dir).contains("not a directory"));
    let taken = CompareOptions {
        record: Some(d.join("r.jsonl")),
        ..opts(vec![d.clone()])
    };
    let tag = plan(&taken)[0].file_tag();
    std::fs::write(d.join(format!("r{tag}.jsonl")), "").unwrap();
    assert!(err(taken).contains("already exists"));
    let fine = opts(vec![d.clone()]);
    assert!(check(&fine, &plan(&fine)).is_ok());
}

fn interval(ops: u64) -> TargetInterval {
    TargetInterval {
        target: 0,
        active: true,
        mode: Mode::Mmap,
        threads: 2,
        ops,
        bytes: ops * 818,
        hist: new_histogram(),
        sync_hist: new_histogram(),
        stalls: 0,
        minflt: 0,
        majflt: 0,
        bdp: None,
        wb_waits: None,
        failed: false,
    }
}

fn snapshot(index: u64, ops: u64, stall: bool) -> Snapshot {
    let stalls = stall.then(|| Stall {
        ev: Blocked::writer(0, 1, OpKind::Write, index * 1_000_000_000 + 10, 200_000_000),
        why: Attribution::high(Cause::DirtyThrottle, Evidence::default()),
    });
    Snapshot {
        targets: vec![interval(ops)],
        stalls: stalls.into_iter().collect(),
        ..empty_like(&Snapshot {
            index,
            t_s: index as f64 + 1.0,
            interval_s: 1.0,
            targets: vec![],
            stalls: vec![],
            kernel: None,
            raw: None,
            wb_starts: None,
            in_progress: vec![],
            events: vec![],
            observed: Vec::new(),
        })
    }
}

#[test]
fn overlay_puts_run_i_at_target_i_on_one_time_axis() {
    let mut a = ran(1, 1.0, [1; 4], 0, 0.0, 0);
    a.snapshots = vec![snapshot(0, 10, false), snapshot(1, 11, false)];
    let mut b = ran(2, 1.0, [1; 4], 1, 200.0, 0);
    b.snapshots = vec![
        snapshot(0, 20, false),
        snapshot(1, 0, true),
        snapshot(2, 5, false),
    ];
    let m = overlay(&[&a, &b]);
    assert_eq!(m.len(), 3);
    assert_eq!(m[0].t_s, 1.0);
    let ops: Vec<(usize, u64)> = m[1].targets.iter().map(|t| (t.target, t.ops)).collect();
    assert_eq!(ops, [(0, 11), (1, 0)]);
    assert_eq!(
        m[1].stalls[0].ev.who.target(),
        Some(1),
        "the stall follows its run"
    );
    assert_eq!(m[2].targets.len(), 1, "a longer run goes on alone");
    assert!(m.iter().all(|s| s.kernel.is_none()));
}

#[test]
fn title_names_the_workload_and_its_variants() {
    let opts = CompareOptions {
        base: Config::default(),
        modes: vec![Mode::Mmap, Mode::Buffered],
        threads: vec![2],
        each: Duration::from_secs(20),
        record: None,
        svg: None,
        drain: Drain::default(),
    };
    assert_eq!(
        title(&opts),
        "compare: mmap, buffered × 2 threads, 818B records, sync periodic:10s, 20s each"
    );
    let rados = CompareOptions {
        modes: vec![Mode::Journal],
        threads: vec![1, 4],
        ..opts
    };
    assert_eq!(
        title(&rados),
        "compare: journal × 1, 4 threads, 4MiB records, commit every 5s, 20s each"
    );
}

/// Scratch folders this process left under `dir`.
fn leftovers(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(crate::source::scratch::PREFIX))
        .collect()
}

#[test]
fn each_runs_dirty_memory_is_its_snapshots_kernel_figure_in_mib() {
    let at = |t_s: f64, dirty_kib: Option<u64>| Snapshot {
        t_s,
        kernel: Some(crate::model::kernel::KernelInterval {
            dirty_kib,
            writeback_kib: None,
            dirty_thresh_kib: None,
            dirty_bg_thresh_kib: None,
            nr_dirty: None,
            nr_writeback: None,
            dirtied_pages: None,
            written_pages: None,
            pgmajfault: None,
            psi_io_some_pct: None,
            psi_io_full_pct: None,
            devs: Vec::new(),
        }),
        ..Snapshot::default()
    };
    let snaps = [at(1.0, Some(2048)), at(2.0, None), Snapshot::default()];
    assert_eq!(
        dirty_of(&snaps),
        vec![(1.0, Some(2.0)), (2.0, None), (0.0, None)]
    );
}

#[test]
fn compares_two_tmpfs_dirs_in_two_modes() {
    let a = tempfile::tempdir_in("/dev/shm").unwrap();
    let b = tempfile::tempdir_in("/dev/shm").unwrap();
    let out = tempfile::tempdir().unwrap();
    let svg = out.path().join("cmp.svg");
    let opts = CompareOptions {
        base: Config {
            targets: vec![a.path().into(), b.path().into()],
            segment_size: ByteSize(4 << 20),
            disk_budget: ByteSize(64 << 20),
            ..Config::default()
        },
        modes: vec![Mode::Mmap, Mode::Buffered],
        threads: vec![2],
        each: Duration::from_secs(2),
        record: Some(out.path().join("cmp.jsonl")),
        svg: Some(svg.clone()),
        drain: Drain::default(),
    };
    let mut said = Vec::new();
    let stop = AtomicBool::new(false);
    let results = run_compare(&opts, &stop, &mut |m| said.push(m.to_string())).unwrap();
    assert_eq!(results.len(), 4);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.n, i + 1);
        assert!(r.error.is_none(), "{r:?}");
        assert!(r.ops > 0 && r.median_ops_per_s > 0.0, "{}", r.label);
        assert!(r.snapshots.len() >= 2, "{}", r.label);
        assert_eq!(r.fs, "tmpfs");
    }
    assert_eq!(results[1].mode, Mode::Buffered);
    assert_eq!(
        results[2].target,
        a.path()
            .to_path_buf()
            .with_file_name(b.path().file_name().unwrap())
    );
    let table = render_table(&results);
    eprintln!("{table}");
    let runs = table.lines().filter(|l| l.starts_with('#')).count();
    assert_eq!(runs, 4, "{table}");
    assert!(table.lines().any(|l| l.starts_with("verdict")), "{table}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("compare: mmap, buffered"));
    // The runs sampled the kernel's dirty memory: the dirty panel draws
    // it per run (the merged view has no kernel figures of its own).
    assert!(results.iter().all(|r| r
        .snapshots
        .iter()
        .any(|s| s.kernel.as_ref().is_some_and(|k| k.dirty_kib.is_some()))));
    assert!(text.contains("Dirty during each run"));
    assert!(!text.contains("no kernel counters"));
    let recordings = std::fs::read_dir(out.path()).unwrap().count() - 1;
    assert_eq!(recordings, 4, "one recording per run");
    assert!(said.iter().any(|m| m.starts_with("[4/4]")), "{said:?}");
    assert!(leftovers(a.path()).is_empty() && leftovers(b.path()).is_empty());
}

#[test]
fn a_stop_drops_the_run_in_progress_and_keeps_the_finished_ones() {
    let a = tempfile::tempdir_in("/dev/shm").unwrap();
    let opts = CompareOptions {
        base: Config {
            targets: vec![a.path().into()],
            segment_size: ByteSize(4 << 20),
            disk_budget: ByteSize(64 << 20),
            ..Config::default()
        },
        modes: vec![Mode::Buffered],
        threads: vec![1, 2],
        each: Duration::from_secs(1),
        record: None,
        svg: None,
        drain: Drain::default(),
    };
    let stop = AtomicBool::new(false);
    let mut on_second = |m: &str| {
        if m.starts_with("[2/2]") {
            stop.store(true, Ordering::Relaxed);
        }
    };
    let results = run_compare(&opts, &stop, &mut on_second).unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].threads, 1);
    assert!(leftovers(a.path()).is_empty());
}

/// A ramfs on a fresh directory (ramfs refuses O_DIRECT); unmounted on drop.
struct Ramfs(tempfile::TempDir);

impl Drop for Ramfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

#[test]
fn a_mode_the_filesystem_refuses_is_a_failed_row_and_the_compare_goes_on() {
    if !crate::base::testenv::require_root("compare_refused_mode") {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "ramfs", "stallscope-test"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(ok.success(), "mount ramfs");
    let ram = Ramfs(dir);
    let opts = CompareOptions {
        base: Config {
            targets: vec![ram.0.path().into()],
            segment_size: ByteSize(1 << 20),
            disk_budget: ByteSize(8 << 20),
            ..Config::default()
        },
        modes: vec![Mode::Direct, Mode::Buffered],
        threads: vec![1],
        each: Duration::from_secs(1),
        record: None,
        svg: None,
        drain: Drain::default(),
    };
    let stop = AtomicBool::new(false);
    let results = run_compare(&opts, &stop, &mut |_| {}).unwrap();
    assert_eq!(results.len(), 2);
    let why = results[0].error.as_deref().unwrap_or_default();
    assert!(why.contains("O_DIRECT"), "{:?}", results[0]);
    assert!(
        results[1].error.is_none() && results[1].ops > 0,
        "{:?}",
        results[1]
    );
    let table = render_table(&results);
    assert!(
        table.contains("#1 ramfs") && table.contains("failed:"),
        "{table}"
    );
    let verdict = table.lines().find(|l| l.starts_with("verdict")).unwrap();
    assert!(verdict.contains("#2") && !verdict.contains("#1"), "{table}");
    assert!(leftovers(ram.0.path()).is_empty());
}

/// A manual end-to-end compare on real targets, e.g. after `lab up`:
/// `STALLSCOPE_COMPARE="/mnt/a /mnt/b" STALLSCOPE_PRESET=rados-bench
/// STALLSCOPE_EACH=20s cargo test --release --lib compare::tests::manual
/// -- --ignored --nocapture`.
#[test]
#[ignore]
fn manual() {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let preset = crate::config::preset::load(
        &env("STALLSCOPE_PRESET").unwrap_or("cassandra-commitlog".into()),
    )
    .unwrap();
    let each: Dur = env("STALLSCOPE_EACH")
        .unwrap_or("10s".into())
        .parse()
        .unwrap();
    let opts = CompareOptions {
        base: Config {
            targets: env("STALLSCOPE_COMPARE")
                .map(|t| t.split_whitespace().map(PathBuf::from).collect())
                .unwrap_or_default(),
            ..preset.config.clone()
        },
        modes: preset.modes.clone(),
        threads: preset.threads.clone(),
        each: each.0,
        record: env("STALLSCOPE_RECORD").map(PathBuf::from),
        svg: env("STALLSCOPE_SVG").map(PathBuf::from),
        drain: Drain::targets(),
    };
    let stop = AtomicBool::new(false);
    let results = run_compare(&opts, &stop, &mut |m| eprintln!("{m}")).unwrap();
    println!("{}", render_table(&results));
}
