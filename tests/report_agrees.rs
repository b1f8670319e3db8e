//! `report`'s text, CSV and SVG and the recording's summary count the same
//! stalls, by cause, from one list. The recording is made the way the
//! dashboard makes one, through the fold and the recorder: writers on one
//! target, a switch to the other while a stall goes on (one begun in the
//! switch's interval and ending after it, one begun by the old target's
//! writers while they stopped), and a quit while a sync goes on (one begun
//! before the end, one the sync thread began after it). Builds before
//! 2026-12-06 left the first two out of the text (outside the target's one
//! active run) and the last out of the text and the SVG (begun after the
//! last interval), while the summary counted all of them.

mod common;

use serde_json::Value;
use stallscope::config::{Config, Mode};
use stallscope::fold::aggregate::{Aggregator, TargetState, GRACE_NS};
use stallscope::model::cause::Cause;
use stallscope::model::msg::{Batch, Msg};
use stallscope::model::ops::{new_histogram, OpKind};
use stallscope::model::snapshot::TargetMeta;
use stallscope::model::stall::Blocked;
use stallscope::sink::recording::{Header, Recorder};
use stallscope::sink::Sink;
use std::collections::BTreeMap;
use std::path::Path;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn meta(path: &str) -> TargetMeta {
    TargetMeta {
        path: path.into(),
        fs: "ext4".into(),
        device: "?".into(),
        mount_options: String::new(),
    }
}

/// A writer's batch of `ops` 50 µs writes in `interval`, with its stalls
/// `(op, start, duration)` in ns.
fn batch(target: usize, interval: u64, ops: u64, stalls: &[(OpKind, u64, u64)]) -> Msg {
    let mut hist = new_histogram();
    for _ in 0..ops {
        hist.record(50).unwrap();
    }
    Msg::Batch(Box::new(Batch {
        target,
        thread: 0,
        interval,
        ops,
        bytes: ops * 4096,
        hist,
        sync_hist: new_histogram(),
        stalls: stalls
            .iter()
            .map(|&(op, start, dur)| Blocked::writer(target, 0, op, start, dur))
            .collect(),
        minflt: 0,
        majflt: 0,
    }))
}

/// Folds the run and records it as the dashboard does; returns the file.
fn record(dir: &Path) -> std::path::PathBuf {
    let on = |active| TargetState {
        mode: Mode::Mmap,
        threads: 1,
        active,
    };
    let mut agg = Aggregator::new(S, vec![on(true), on(false)]);
    let cfg = Config::default();
    let path = dir.join("switch-and-quit.jsonl");
    let targets = vec![meta("/lab/a"), meta("/lab/b")];
    let mut rec = Recorder::create(&path, Header::new(&cfg, targets.clone(), None, None)).unwrap();
    rec.begin(&targets).unwrap();
    let mut out = Vec::new();
    for i in 0..3 {
        agg.fold(batch(0, i, 1000, &[]));
    }
    out.extend(agg.tick(3 * S + GRACE_NS));
    // Target 0's writer stalls from 3.2 s to 4.7 s; Tab at 3.4 s.
    agg.fold(batch(0, 3, 200, &[]));
    agg.set_state(0, on(false));
    agg.set_state(1, on(true));
    for i in 3..6 {
        agg.fold(batch(1, i, 1000, &[]));
    }
    // Its old writers, stopping, begin one more op at 3.5 s; target 1 has
    // a stall of its own.
    agg.fold(batch(0, 3, 1, &[(OpKind::Write, 3500 * MS, 300 * MS)]));
    agg.fold(batch(0, 4, 1, &[(OpKind::Write, 3200 * MS, 1500 * MS)]));
    agg.fold(batch(1, 4, 0, &[(OpKind::Write, 4200 * MS, 500 * MS)]));
    out.extend(agg.tick(6 * S + GRACE_NS));
    // `q` at 6.5 s during a sync begun at 6.45 s; the sync thread began
    // another at 6.6 s, before it saw the stop. Both end while stopping.
    agg.fold(batch(1, 6, 100, &[]));
    agg.fold(batch(
        1,
        8,
        0,
        &[
            (OpKind::Sync, 6450 * MS, 2550 * MS),
            (OpKind::Sync, 6600 * MS, 2000 * MS),
        ],
    ));
    let (tail, summary) = agg.finish(6500 * MS);
    out.extend(tail);
    for s in &out {
        rec.snapshot(s).unwrap();
    }
    rec.summary(&summary).unwrap();
    drop(rec);
    path
}

/// Count and ms by cause.
type ByCause = BTreeMap<String, (u64, f64)>;

/// `cause N (t s)` parts (and `cause t s` time within other stalls) of
/// one causes text, added into `into`.
fn add_causes_text(into: &mut ByCause, text: &str) {
    for part in text.split([',', ';']) {
        let part = part.trim().trim_start_matches("within them:").trim();
        let words: Vec<&str> = part.split_whitespace().collect();
        match words[..] {
            [cause, n, t, "s)"] => {
                let e = into.entry(cause.to_string()).or_default();
                e.0 += n.parse::<u64>().unwrap();
                e.1 += t.trim_start_matches('(').parse::<f64>().unwrap() * 1e3;
            }
            [cause, t, "s"] => {
                into.entry(cause.to_string()).or_default().1 += t.parse::<f64>().unwrap() * 1e3
            }
            [] => {}
            _ => panic!("unexpected causes part {part:?} in {text:?}"),
        }
    }
}

/// The text's segment lines (not the whole-span `all` ones): stalls and
/// causes.
fn text_by_cause(text: &str) -> (u64, ByCause) {
    let (mut n, mut by) = (0, ByCause::new());
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let segment = f.len() > 13 && f[0].ends_with('s') && f[1].ends_with('s') && f[2] != "all";
        if !segment {
            continue;
        }
        n += f[12].parse::<u64>().unwrap();
        let causes = line.split_once(&format!("{}  ", f[13])).map_or("", |x| x.1);
        add_causes_text(&mut by, causes);
    }
    (n, by)
}

/// The CSV's stalls and stall time by cause.
fn csv_by_cause(csv: &str) -> (u64, BTreeMap<String, f64>) {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let (mut n, mut by) = (0, BTreeMap::new());
    for l in lines {
        for (h, v) in header.iter().zip(l.split(',')) {
            if *h == "stalls" {
                n += v.parse::<u64>().unwrap();
            }
            if let Some(c) = h.strip_prefix("stall_ms_") {
                *by.entry(c.to_string()).or_insert(0.0) += v.parse::<f64>().unwrap();
            }
        }
    }
    (n, by)
}

/// The SVG lanes' legend: `cause N (t s)` per cause, each a text element.
fn svg_by_cause(svg: &str) -> ByCause {
    let mut by = ByCause::new();
    for text in svg.split('>').filter_map(|p| p.split('<').next()) {
        let text = text.trim();
        let first = text.split(' ').next().unwrap_or("");
        if Cause::ALL.iter().any(|c| c.as_str() == first) {
            add_causes_text(&mut by, text);
        }
    }
    by
}

/// Runs stallscope with `args`; its stdout and stderr, once it succeeded.
fn stallscope(args: &[&std::ffi::OsStr]) -> (String, String) {
    let out = common::run_ok(common::bin().args(args));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (String::from_utf8_lossy(&out.stdout).into_owned(), err)
}

#[test]
fn text_csv_svg_and_summary_count_the_same_stalls_by_cause() {
    let dir = tempfile::tempdir().unwrap();
    let path = record(dir.path());
    let (csv, svg) = (dir.path().join("r.csv"), dir.path().join("r.svg"));
    let (text, _) = stallscope(&[
        "report".as_ref(),
        path.as_ref(),
        "--csv".as_ref(),
        csv.as_ref(),
        "--svg".as_ref(),
        svg.as_ref(),
    ]);
    let rec = stallscope::sink::recording::read(&path).unwrap();
    let summary = rec.summary.unwrap();
    let want_n = summary["stalls"].as_u64().unwrap();
    let want: ByCause = summary["by_cause"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(c, v): (&String, &Value)| {
            (
                c.clone(),
                (v["count"].as_u64().unwrap(), v["ms"].as_f64().unwrap()),
            )
        })
        .collect();
    let filed: usize = rec.snapshots.iter().map(|s| s.stalls.len()).sum();
    assert_eq!(want_n, filed as u64, "the recording holds every stall");
    assert_eq!(want_n, 5, "the fixture's five stalls");

    let (n, by) = text_by_cause(&text);
    assert_eq!(n, want_n, "text:\n{text}");
    let (csv_n, csv_ms) = csv_by_cause(&std::fs::read_to_string(&csv).unwrap());
    assert_eq!(csv_n, want_n, "CSV");
    let svg_by = svg_by_cause(&std::fs::read_to_string(&svg).unwrap());
    for (cause, (count, ms)) in &want {
        let t = by.get(cause).copied().unwrap_or_default();
        assert_eq!(t.0, *count, "text count of {cause}:\n{text}");
        assert!(
            (t.1 - ms).abs() <= 5.0,
            "text time of {cause}: {} vs {ms}",
            t.1
        );
        let s = svg_by.get(cause).copied().unwrap_or_default();
        assert_eq!(s.0, *count, "SVG legend count of {cause}");
        assert!(
            (s.1 - ms).abs() <= 50.0,
            "SVG time of {cause}: {} vs {ms}",
            s.1
        );
        let c = csv_ms.get(cause).copied().unwrap_or_default();
        assert!((c - ms).abs() < 1e-3, "CSV time of {cause}: {c} vs {ms}");
    }
    assert_eq!(by.len(), want.len(), "no cause the summary lacks: {by:?}");
}

/// Sums of a CSV column over its rows.
fn csv_sum(csv: &str, col: &str) -> f64 {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let i = header.iter().position(|h| *h == col).unwrap();
    lines
        .map(|l| l.split(',').nth(i).unwrap().parse::<f64>().unwrap_or(0.0))
        .sum()
}

/// `report` reads what `run --format jsonl` printed (a person saves stdout
/// first): the same intervals, ops and stalls as the recording of the same
/// run, latencies left out with a note saying why and what keeps them.
#[test]
fn report_reads_what_run_printed_as_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let (printed, rec) = (dir.path().join("out.jsonl"), dir.path().join("rec.jsonl"));
    let args = "run -d 3s -j 1 --rate 2000 --stall-threshold 1ms --sync every:100 --format jsonl";
    let mut args: Vec<&std::ffi::OsStr> = args.split(' ').map(AsRef::as_ref).collect();
    let more: [&std::ffi::OsStr; 4] = [
        "-t".as_ref(),
        dir.path().as_ref(),
        "--record".as_ref(),
        rec.as_ref(),
    ];
    args.extend(more);
    let (stdout, _) = stallscope(&args);
    std::fs::write(&printed, &stdout).unwrap();
    let report = |file: &Path, csv: &Path| {
        let (text, note) = stallscope(&[
            "report".as_ref(),
            file.as_ref(),
            "--csv".as_ref(),
            csv.as_ref(),
        ]);
        (text, note, std::fs::read_to_string(csv).unwrap())
    };
    let (text, note, csv) = report(&printed, &dir.path().join("p.csv"));
    let (_, _, want) = report(&rec, &dir.path().join("r.csv"));
    assert!(text.contains("from `run --format jsonl` output"), "{text}");
    assert!(
        note.contains("--record FILE"),
        "says what keeps everything: {note}"
    );
    assert_eq!(
        csv.lines().count(),
        want.lines().count(),
        "one row per interval"
    );
    for col in ["ops", "stalls", "stall_ms"] {
        assert!(
            (csv_sum(&csv, col) - csv_sum(&want, col)).abs() < 1e-2,
            "{col}: {} printed, {} recorded",
            csv_sum(&csv, col),
            csv_sum(&want, col)
        );
    }
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(csv_sum(&csv, "stalls"), summary["stalls"].as_f64().unwrap());
    // Latency: unknown, not 0.
    let row = text.lines().find(|l| l.contains("s  mmap ")).unwrap();
    assert!(row.contains(" - "), "{row}");
}
