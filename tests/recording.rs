//! Record → replay → report: the replayed dashboard state equals the live
//! one, report percentiles equal the run's summary, and damaged files are
//! read up to and around the damage with the line named.

mod common;

use common::bin;
use serde_json::Value;
use stallscope::base::units::Dur;
use stallscope::cmd::report::{summarize, totals, ReportInput};
use stallscope::config::{Config, Mode, SyncPolicy};
use stallscope::model::control::Control;
use stallscope::model::snapshot::{LatSummary, Snapshot, Summary, TargetMeta};
use stallscope::session::{prepare, Placement, Session};
use stallscope::sink::recording::{read, Recorder};
use stallscope::sink::schema::recorded_shares;
use stallscope::sink::Sink;
use stallscope::tui::app::{App, Header, Style};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Keeps every snapshot it is given.
#[derive(Default)]
struct Keep(Vec<Snapshot>);

impl Sink for Keep {
    fn begin(&mut self, _t: &[TargetMeta]) -> std::io::Result<()> {
        Ok(())
    }
    fn snapshot(&mut self, s: &Snapshot) -> std::io::Result<()> {
        self.0.push(s.clone());
        Ok(())
    }
    fn summary(&mut self, _s: &Summary) -> std::io::Result<()> {
        Ok(())
    }
}

fn app_for(cfg: &Config, targets: Vec<TargetMeta>) -> App {
    let header = Header {
        mode: cfg.mode,
        threads: cfg.threads,
        record_size: cfg.record_size(),
        sync: cfg.sync,
        active: 0,
        recording: false,
        tracing: Ok(()),
        replay: true,
    };
    App::new(header, targets, 120, Style::default())
}

/// A short dashboard-shaped session (two targets, a switch and a mode
/// change) recorded to `path`; returns the live snapshots.
fn record_session(
    path: &Path,
    a: &Path,
    b: &Path,
) -> (Config, Vec<TargetMeta>, Vec<Snapshot>, Summary) {
    let cfg = Config {
        targets: vec![a.to_path_buf(), b.to_path_buf()],
        threads: 2,
        sync: SyncPolicy::None,
        interval: Dur(Duration::from_millis(250)),
        ..Config::default()
    };
    let prepared = prepare(&cfg).unwrap();
    let mut s = Session::start(&cfg, prepared, Placement::One(0)).unwrap();
    let metas = s.metas();
    let mut rec = Recorder::create(path, s.recording_header()).unwrap();
    let mut keep = Keep::default();
    let steps = |s: &mut Session, rec: &mut Recorder, keep: &mut Keep, ms: u64| {
        let until = s.now_ns() + ms * 1_000_000;
        while s.now_ns() < until {
            let mut tee = stallscope::sink::Tee(keep, rec);
            s.step(None, &mut tee).unwrap();
        }
    };
    steps(&mut s, &mut rec, &mut keep, 800);
    s.apply(Control::SwitchTarget(1));
    steps(&mut s, &mut rec, &mut keep, 800);
    s.apply(Control::SetMode(Mode::Buffered));
    steps(&mut s, &mut rec, &mut keep, 800);
    let summary = {
        let mut tee = stallscope::sink::Tee(&mut keep, &mut rec);
        s.finish(None, Some(&mut tee)).unwrap()
    };
    drop(rec);
    (cfg, metas, keep.0, summary)
}

/// `s` as its recording holds it: a stall's shares are written in ms to
/// 3 decimals (a live 170.17303 is read back as 170.173), so the live side
/// is rounded by the recorder's own function before the two are compared.
fn as_recorded(s: &Snapshot) -> Snapshot {
    let mut s = s.clone();
    for st in &mut s.stalls {
        st.why.shares = recorded_shares(st);
    }
    s
}

#[test]
fn replayed_app_equals_live_app_and_report_matches_summary() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        tempfile::tempdir_in("/dev/shm").unwrap(),
        tempfile::tempdir_in("/dev/shm").unwrap(),
    );
    for name in ["s.jsonl", "s.jsonl.gz"] {
        let path = dir.path().join(name);
        let (cfg, metas, live, summary) = record_session(&path, a.path(), b.path());
        let rec = read(&path).unwrap();
        assert!(
            rec.truncated.is_none() && rec.skipped.is_empty(),
            "{:?}",
            rec.damage_note()
        );
        assert_eq!(
            rec.snapshots.len(),
            live.len(),
            "{name}: one snapshot per interval"
        );
        let mut live_app = app_for(&cfg, metas.clone());
        let mut replay_app = app_for(&cfg, rec.header.targets.clone());
        for s in &live {
            live_app.on_snapshot(&as_recorded(s));
        }
        for s in &rec.snapshots {
            replay_app.on_snapshot(s);
        }
        assert_eq!(
            live_app, replay_app,
            "{name}: replayed state differs from live"
        );
        assert!(
            live.iter().any(|s| s.kernel.is_some()),
            "kernel figures were replayed too"
        );

        // Report percentiles over the whole span equal the run's own summary.
        let input = ReportInput {
            title: "t".into(),
            targets: &rec.header.targets,
            snapshots: &rec.snapshots,
            from_s: None,
            to_s: None,
            dirty_by_target: Vec::new(),
        };
        let whole = totals(&input);
        for (t, seg) in summary.targets.iter().zip(&whole) {
            assert_eq!(seg.ops, t.ops, "{name}: ops of target {}", t.target);
            assert_eq!(
                seg.lat.unwrap_or_default(),
                LatSummary::of(&t.hist),
                "{name}: percentiles of target {}",
                t.target
            );
            assert_eq!(
                (seg.stalls, seg.stall_ns),
                (t.stalls, t.stall_ns),
                "{name}: stalls of target {}",
                t.target
            );
        }
        // The mode change and the switch make separate segments.
        let segs = summarize(&input);
        assert!(segs
            .iter()
            .any(|s| s.target == 1 && s.mode == Some(Mode::Buffered)));
        assert!(segs
            .iter()
            .any(|s| s.target == 0 && s.mode == Some(Mode::Mmap)));
    }
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

fn small_recording(dir: &Path) -> PathBuf {
    let path = dir.join("r.jsonl");
    let out = bin()
        .args([
            "run",
            "--mode",
            "buffered",
            "--duration",
            "4s",
            "--target",
            "/dev/shm",
            "--record",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

#[test]
fn truncated_and_garbage_files_are_read_around_the_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = small_recording(dir.path());
    let lines = lines_of(&path);
    let full = read(&path).unwrap();
    assert!(full.snapshots.len() >= 4);

    // Cut mid-line: everything before the cut, and the line named.
    let cut_at = lines.len() - 3;
    let mut text = lines[..cut_at].join("\n");
    text.push('\n');
    text.push_str(&lines[cut_at][..lines[cut_at].len() / 2]);
    let cut = dir.path().join("cut.jsonl");
    std::fs::write(&cut, &text).unwrap();
    let r = read(&cut).unwrap();
    let t = r.truncated.as_ref().expect("truncation noticed");
    assert_eq!(t.line as usize, cut_at + 1);
    assert!(r
        .damage_note()
        .unwrap()
        .contains(&format!("line {}", cut_at + 1)));
    assert!(!r.snapshots.is_empty());

    // One garbage line in the middle: skipped and named, the rest read.
    let mut g = lines.clone();
    g.insert(4, "\u{1}\u{2}garbage{{".to_string());
    let garbage = dir.path().join("garbage.jsonl");
    std::fs::write(&garbage, g.join("\n") + "\n").unwrap();
    let r = read(&garbage).unwrap();
    assert_eq!(r.skipped.len(), 1);
    assert_eq!(r.skipped[0].line, 5);
    assert_eq!(r.snapshots.len(), full.snapshots.len());

    // The commands say the same and still work.
    for f in [&cut, &garbage] {
        let out = common::run_ok(bin().arg("report").arg(f));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("line "), "names the line: {err}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("ops/s"));
    }
}

#[test]
fn foreign_newer_and_binary_files_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = small_recording(dir.path());
    let mut lines = lines_of(&path);
    let mut head: Value = serde_json::from_str(&lines[0]).unwrap();
    head["version"] = Value::from(2);
    lines[0] = head.to_string();
    let newer = dir.path().join("newer.jsonl");
    std::fs::write(&newer, lines.join("\n")).unwrap();
    let junk = dir.path().join("junk.bin");
    let mut f = std::fs::File::create(&junk).unwrap();
    f.write_all(
        &(0..4096u32)
            .map(|i| (i * 7919 % 251) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let other = dir.path().join("other.jsonl");
    std::fs::write(
        &other,
        "{\"type\":\"header\",\"format\":\"something-else\"}\n",
    )
    .unwrap();
    for (f, needle) in [
        (&newer, "version 2 is newer"),
        (&junk, "not a stallscope recording"),
        (&other, "something-else"),
    ] {
        let out = bin().arg("report").arg(f).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(needle), "{err}");
    }
}

#[test]
fn report_writes_svg_and_csv() {
    let dir = tempfile::tempdir().unwrap();
    let path = small_recording(dir.path());
    let (svg, csv) = (dir.path().join("o.svg"), dir.path().join("o.csv"));
    let out = bin()
        .arg("report")
        .arg(&path)
        .arg("--svg")
        .arg(&svg)
        .arg("--csv")
        .arg(&csv)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    let rows = std::fs::read_to_string(&csv).unwrap();
    let n_intervals = read(&path).unwrap().snapshots.len();
    assert_eq!(
        rows.lines().count(),
        1 + n_intervals,
        "header + one row per interval (one target)"
    );
    // A span with nothing in it is an error, not an empty report.
    let out = bin()
        .arg("report")
        .arg(&path)
        .args(["--from", "1h"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// An observed stall timed by its system call keeps its call, file, bytes
/// and blocked time through a recording, and its `bounds` is printed.
#[test]
fn a_call_bounded_stall_reads_back_with_its_call_and_file() {
    use stallscope::model::cause::{Attribution, Cause, Evidence};
    use stallscope::model::observed::Watched;
    use stallscope::model::stall::{Blocked, Call, Stall};
    use stallscope::sink::Sink;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("calls.jsonl");
    let cfg = Config::default();
    let mut header = stallscope::sink::recording::Header::new(&cfg, vec![], None, None);
    header.observed = vec![Watched {
        pid: 42,
        comm: "postgres".into(),
    }];
    let mut ev = Blocked::process((42, "postgres", 43, "walwriter"), 1_000_000, 250_000_000);
    ev.call = Some(Call {
        name: "fdatasync".into(),
        fd: Some(7),
        bytes: None,
        file: Some("/var/lib/pg/pg_wal/000000010000000000000003".into()),
    });
    ev.blocked_ns = Some(240_000_000);
    let st = Stall {
        ev,
        why: Attribution::high(Cause::Sync, Evidence::default()),
    };
    let snap = Snapshot {
        index: 0,
        t_s: 1.0,
        interval_s: 1.0,
        stalls: vec![st.clone()],
        observed: vec![stallscope::model::snapshot::ObservedInterval {
            pid: 42,
            comm: "postgres".into(),
            alive: true,
            ..Default::default()
        }],
        ..Snapshot::default()
    };
    let mut rec = Recorder::create(&path, header).unwrap();
    rec.snapshot(&snap).unwrap();
    drop(rec);
    let line = lines_of(&path)
        .into_iter()
        .find(|l| l.contains("\"type\":\"stall\""))
        .expect("a stall line");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["bounds"], "syscall");
    assert_eq!(v["syscall"], "fdatasync");
    assert_eq!(v["blocked_ms"], 240.0);
    let back = read(&path).unwrap();
    let got = &back.snapshots[0].stalls[0];
    assert_eq!(got.ev.call, st.ev.call);
    assert_eq!(got.ev.blocked_ns, Some(240_000_000));
}
