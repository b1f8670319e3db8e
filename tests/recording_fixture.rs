//! Recordings made by an earlier build (v0.1.0, 2026-12-03, before the
//! data path was restructured) still read back and report as that build
//! reported them, byte for byte, with two reviewed changes of 2026-12-04:
//! the SVG draws stall lanes instead of markers (since then with a strip
//! per cause, overlapping stalls merged; regenerated and reviewed as a PNG
//! on the svg-lanes branch), and the interval that
//! build wrote past the run's end (ops that finished while the writers
//! stopped: 2 ops, a 30 ms p50, a drop to nothing on the chart) is folded
//! into the last whole interval, as runs do now — the observe fixture's
//! 6.0 s run reports 6 intervals, not 7; and (2026-12-05) an observed
//! process's line says the wall time any thread was stalled, clipped to
//! the span, beside the thread time, and lists time by thread name; and
//! (2026-12-06) every stall filed in the span counts in every output, from
//! one list: the SVG legend counts whole stalls by cause as the text and
//! the summary do (dirty_throttle 64 (21.9 s) = the writers' 53 + dd's 11,
//! sync 2 (11.4 s), where it had 60 and 5.2 s, clipped and missing those
//! that began outside the span), an observed process's stalls are no
//! longer dots in the write-latency panel, the text shows ops/s and MiB/s
//! as totals over the time active with the median beside them, and the
//! CSV has a row per observed process and, after the old columns, `pid`,
//! `stall_ms` and `stall_ms_<cause>`. One fixture has
//! writers and an observed process with stalls of both (capped lab ext4,
//! root, tracing), the other the dashboard's runtime markers.

mod common;

use std::path::Path;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/recording")
        .join(name)
}

fn report_matches(recording: &str, stem: &str, svg: bool) {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("r.csv");
    let svg_path = dir.path().join("r.svg");
    let mut cmd = common::bin();
    cmd.arg("report")
        .arg(fixture(recording))
        .arg("--csv")
        .arg(&csv);
    if svg {
        cmd.arg("--svg").arg(&svg_path);
    }
    let out = common::run_ok(&mut cmd);
    let want = std::fs::read_to_string(fixture(&format!("{stem}.report.txt"))).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), want, "report text");
    let want = std::fs::read_to_string(fixture(&format!("{stem}.report.csv"))).unwrap();
    assert_eq!(std::fs::read_to_string(&csv).unwrap(), want, "report CSV");
    if svg {
        let want = std::fs::read_to_string(fixture(&format!("{stem}.report.svg"))).unwrap();
        assert!(
            std::fs::read_to_string(&svg_path).unwrap() == want,
            "report SVG differs from the reviewed one"
        );
    }
}

#[test]
fn a_v0_1_0_recording_has_no_interval_past_its_end() {
    let rec =
        stallscope::sink::recording::read(&fixture("observe-and-writers-v0.1.0.jsonl")).unwrap();
    let end = rec.summary.as_ref().unwrap()["duration_s"]
        .as_f64()
        .unwrap();
    let last = rec.snapshots.last().unwrap();
    assert!(
        (last.t_s - end).abs() < 1e-6,
        "last interval ends at {} for a {end} s run",
        last.t_s
    );
    let ops: u64 = rec
        .snapshots
        .iter()
        .flat_map(|s| &s.targets)
        .map(|t| t.ops)
        .sum();
    assert_eq!(
        ops,
        rec.summary.as_ref().unwrap()["ops"].as_u64().unwrap(),
        "nothing lost"
    );
}

#[test]
fn a_v0_1_0_recording_with_writer_and_observed_stalls_reports_identically() {
    report_matches(
        "observe-and-writers-v0.1.0.jsonl",
        "observe-and-writers",
        true,
    );
}

#[test]
fn a_v0_1_0_dashboard_recording_with_markers_reports_identically() {
    report_matches("dashboard-markers-v0.1.0.jsonl", "dashboard-markers", false);
}

#[test]
fn its_stalls_read_back_as_one_list_of_writers_and_observed_threads() {
    let rec =
        stallscope::sink::recording::read(&fixture("observe-and-writers-v0.1.0.jsonl")).unwrap();
    let stalls: Vec<_> = rec.snapshots.iter().flat_map(|s| &s.stalls).collect();
    let ours = stalls
        .iter()
        .filter(|s| s.ev.who.target().is_some())
        .count();
    let observed = stalls.iter().filter(|s| s.ev.who.pid().is_some()).count();
    // The v0.1.0 run printed 58 stalls of ours and 11 of the observed dd.
    assert_eq!((ours, observed), (58, 11));
    assert!(stalls.iter().all(|s| s.ev.dur_ns.is_some()));
    let kinds: Vec<&str> =
        stallscope::sink::recording::read(&fixture("dashboard-markers-v0.1.0.jsonl"))
            .unwrap()
            .markers
            .iter()
            .map(|m| m.kind.as_str())
            .collect();
    assert_eq!(
        kinds,
        [
            "recording_start",
            "pause",
            "resume",
            "mode_change",
            "target_switch",
            "thread_change"
        ]
    );
}

/// Builds before 2026-12-04 wrote `.zst` with zstd's C library; they are
/// read with a pure-Rust decoder now and must report as the plain file.
#[test]
fn a_zstd_recording_of_an_older_build_reports_as_the_plain_one() {
    let plain = fixture("observe-and-writers-v0.1.0.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let zst = dir.path().join("old.jsonl.zst");
    let bytes = std::fs::read(&plain).unwrap();
    std::fs::write(&zst, zstd::encode_all(&bytes[..], 3).unwrap()).unwrap();
    let report = |p: &Path| {
        let out = common::run_ok(common::bin().arg("report").arg(p));
        out.stdout
    };
    assert_eq!(report(&zst), report(&plain));
}

/// New compressed recordings are gzip; `.zst` is refused with the reason.
#[test]
fn recording_to_zst_is_refused_and_gz_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::bin()
        .args(["run", "--duration", "1s", "--threads", "1", "--record"])
        .arg(dir.path().join("r.jsonl.zst"))
        .arg("--target")
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(".gz") && err.contains("still replay"), "{err}");
    let gz = dir.path().join("r.jsonl.gz");
    let out = common::bin()
        .args(["run", "--duration", "2s", "--threads", "1", "--record"])
        .arg(&gz)
        .arg("--target")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let head = std::fs::read(&gz).unwrap();
    assert_eq!(&head[..2], &[0x1f, 0x8b], "gzip");
    let out = common::bin().arg("report").arg(&gz).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("ints"), "{text}");
}
