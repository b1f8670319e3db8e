//! The binary as a person runs it: the issue's must-show commands, bad input,
//! and cleanup on signals.

mod common;

use common::{bin, need_root};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".stallscope-"))
        .collect()
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect()
}

#[test]
fn jsonl_run_in_every_mode_leaves_nothing_behind() {
    // mmap and buffered on tmpfs and ext4; direct and journal on ext4.
    // Each run gets its own directory: they run side by side.
    let runs = [
        ("mmap", "/dev/shm"),
        ("buffered", "/dev/shm"),
        ("mmap", "/var/tmp"),
        ("buffered", "/var/tmp"),
        ("direct", "/var/tmp"),
        ("journal", "/var/tmp"),
    ];
    let dirs: Vec<_> = runs
        .iter()
        .map(|(_, base)| tempfile::tempdir_in(base).unwrap())
        .collect();
    let children: Vec<_> = runs
        .iter()
        .zip(&dirs)
        .map(|((mode, _), dir)| {
            let dir = dir.path();
            let child = bin()
                .args(["run", "--mode", mode, "--threads", "4", "--duration", "5s"])
                .args(["--format", "jsonl", "--target"])
                .arg(dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (mode, dir, child)
        })
        .collect();
    for (mode, dir, child) in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ls = lines(&out);
        let intervals: Vec<&Value> = ls.iter().filter(|l| l["type"] == "interval").collect();
        assert!(
            intervals.len() >= 4,
            "{mode}: {} interval lines",
            intervals.len()
        );
        for l in &intervals {
            for f in [
                "t_s",
                "target",
                "fs",
                "mode",
                "threads",
                "ops",
                "ops_per_s",
                "mib_per_s",
                "stalls",
            ] {
                assert!(!l[f].is_null(), "{mode}: interval lacks {f}: {l}");
            }
            for f in ["mean", "p50", "p95", "p99", "p999", "max"] {
                assert!(l["lat_us"][f].is_number(), "{mode}: lat_us.{f}");
            }
            assert_eq!(l["mode"], *mode);
            assert_eq!(l["threads"], 4);
        }
        assert!(
            intervals.iter().any(|l| l["ops"].as_u64().unwrap() > 0),
            "{mode}: wrote nothing"
        );
        let sums: Vec<&Value> = ls.iter().filter(|l| l["type"] == "summary").collect();
        assert_eq!(sums.len(), 1, "{mode}: one summary");
        for f in ["duration_s", "ops", "mib_per_s", "stalls", "stall_ms"] {
            assert!(sums[0][f].is_number(), "{mode}: summary lacks {f}");
        }
        assert!(sums[0]["lat_us"]["p999"].is_number());
        // The summary's ops are the whole run's: at least the interval lines' sum.
        let sum_ops: u64 = intervals.iter().map(|l| l["ops"].as_u64().unwrap()).sum();
        assert!(sums[0]["ops"].as_u64().unwrap() >= sum_ops);
        assert!(
            leftovers(dir).is_empty(),
            "{mode}: left {:?}",
            leftovers(dir)
        );
    }
}

fn expect_usage_error(args: &[&str], needle: &str, dir: &Path) {
    let out = bin().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(
        err.contains(needle),
        "{args:?}: stderr lacks {needle:?}: {err}"
    );
    assert!(leftovers(dir).is_empty(), "{args:?} left files");
}

#[test]
fn bad_input_is_one_line_exit_2_and_nothing_left() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().to_str().unwrap();
    let file = t.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let missing = t.path().join("missing");
    let cfg = t.path().join("bad.toml");
    std::fs::write(&cfg, "threads = 2\nthreadz = 3\n").unwrap();
    let short = ["run", "--duration", "1s", "--target"];
    expect_usage_error(
        &[&short[..], &[missing.to_str().unwrap()]].concat(),
        "does not exist",
        t.path(),
    );
    expect_usage_error(
        &[&short[..], &[file.to_str().unwrap()]].concat(),
        "not a directory",
        t.path(),
    );
    expect_usage_error(
        &[&short[..], &[d, "--record-size", "0"]].concat(),
        "--record-size 0",
        t.path(),
    );
    expect_usage_error(
        &[&short[..], &[d, "--record-size", "64MiB"]].concat(),
        "64MiB",
        t.path(),
    );
    expect_usage_error(
        &[&short[..], &[d, "--mode", "fsync"]].concat(),
        "fsync",
        t.path(),
    );
    expect_usage_error(
        &[&short[..], &[d, "--segment-size", "10x"]].concat(),
        "10x",
        t.path(),
    );
    expect_usage_error(
        &["run", "--duration", "10x", "--target", d],
        "10x",
        t.path(),
    );
    expect_usage_error(
        &["--config", cfg.to_str().unwrap(), "run", "--target", d],
        "threadz",
        t.path(),
    );
    // The config error names the line too.
    let out = bin()
        .args(["--config", cfg.to_str().unwrap(), "run"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 2"));
    // One line, not a backtrace or a wall of help.
    let out = bin()
        .args([&short[..], &[d, "--record-size", "0"]].concat())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim().lines().count(),
        1
    );
}

#[test]
fn direct_on_a_filesystem_without_o_direct_is_refused() {
    if !need_root("direct_on_a_filesystem_without_o_direct_is_refused") {
        return;
    }
    // tmpfs accepts O_DIRECT since Linux 6.6; ramfs still refuses it.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let ok = Command::new("mount")
        .args(["-t", "ramfs", "ssramfs"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(ok.success());
    let out = bin()
        .args(["run", "--mode", "direct", "--duration", "1s", "--target"])
        .arg(dir.path())
        .output()
        .unwrap();
    let left = leftovers(dir.path());
    Command::new("umount").arg(dir.path()).status().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ramfs refuses O_DIRECT"), "{err}");
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn signals_stop_cleanly_with_summary_and_no_scratch() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let t = tempfile::tempdir().unwrap();
        let child = bin()
            .args(["run", "--mode", "mmap", "--format", "jsonl", "--target"])
            .arg(t.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Wait until the scratch folder exists, then signal.
        let start = Instant::now();
        while leftovers(t.path()).is_empty() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(leftovers(t.path()).len(), 1, "scratch exists while running");
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, sig) };
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "signal {sig}: {:?}", out.status);
        let ls = lines(&out);
        assert!(
            ls.iter().any(|l| l["type"] == "summary"),
            "signal {sig}: summary printed"
        );
        assert!(
            leftovers(t.path()).is_empty(),
            "signal {sig}: scratch removed"
        );
    }
}

#[test]
fn stale_scratch_of_a_dead_run_is_removed_with_a_message() {
    let t = tempfile::tempdir().unwrap();
    let stale = t.path().join(".stallscope-4194311");
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("seg-000000.log"), b"x").unwrap();
    let out = bin()
        .args(["run", "--duration", "1s", "--mode", "buffered", "--target"])
        .arg(t.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("removed stale scratch"));
    assert!(!stale.exists());
}

#[test]
fn default_target_says_which_filesystem() {
    let t = tempfile::tempdir().unwrap();
    let out = bin()
        .args(["run", "--duration", "1s", "--mode", "buffered"])
        .env("TMPDIR", t.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no --target given") && err.contains(t.path().to_str().unwrap()),
        "{err}"
    );
    assert!(err.contains(" on "), "names fs and device: {err}");
    assert!(leftovers(t.path()).is_empty());
}

#[test]
fn probe_reports_a_verdict_per_target() {
    let t = tempfile::tempdir_in("/dev/shm").unwrap();
    let out = bin()
        .args(["probe", "--target"])
        .arg(t.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "kernel",
        "scheduler timing",
        "page waits",
        "PSI",
        "cgroup layout",
        "verdict",
        "tmpfs",
    ] {
        assert!(text.contains(needle), "probe lacks {needle}: {text}");
    }
    let out = bin()
        .args(["probe", "--target", "/nonexistent/x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn without_root_trace_fields_are_null_and_said_once() {
    if !need_root("without_root_trace_fields_are_null_and_said_once") {
        return;
    }
    // Drop to nobody for the run; the target must be writable by it.
    let t = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::set_permissions(
        t.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_stallscope"))
        .args([
            "run",
            "--mode",
            "buffered",
            "--duration",
            "2s",
            "--format",
            "jsonl",
        ])
        .arg("--target")
        .arg(t.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        err.matches("kernel tracing unavailable").count(),
        1,
        "{err}"
    );
    assert!(err.contains("not root"), "{err}");
    let ls = lines(&out);
    let iv: Vec<&Value> = ls.iter().filter(|l| l["type"] == "interval").collect();
    assert!(!iv.is_empty());
    for l in iv {
        assert!(
            l["bdp"].is_null() && l["wb_waits"].is_null(),
            "unknown, not zero: {l}"
        );
        assert!(l["dirty_kib"].is_u64(), "proc counters still there: {l}");
    }
    assert!(leftovers(t.path()).is_empty());
}

#[test]
fn a_symlinked_target_needs_follow_symlinks() {
    let real = tempfile::tempdir().unwrap();
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("t");
    std::os::unix::fs::symlink(real.path(), &link).unwrap();
    let out = bin()
        .args(["run", "--duration", "1s", "--mode", "buffered", "--target"])
        .arg(&link)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--follow-symlinks"));
    let out = bin()
        .args([
            "run",
            "--duration",
            "1s",
            "--mode",
            "buffered",
            "--follow-symlinks",
            "--target",
        ])
        .arg(&link)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(leftovers(real.path()).is_empty());
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link itself is untouched"
    );
}

#[test]
fn absurd_values_are_refused() {
    for args in [
        &["run", "--threads", "1000000000000000"][..],
        &["run", "--segment-size", "1EiB"],
        &["run", "--threads", "0"],
        &["run", "--interval", "0s"],
        &["run", "--journal-size", "1KiB", "--mode", "journal"],
    ] {
        let out = bin().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error"), "{args:?}: {err}");
    }
}

/// A tmpfs of `size` mounted on a temp dir, unmounted on drop.
struct SmallTmpfs(tempfile::TempDir);

impl SmallTmpfs {
    fn new(size: &str) -> SmallTmpfs {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "sstmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(ok.success());
        SmallTmpfs(dir)
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// Defect: the default (mmap) mode died on a target with less room than
/// one segment with a bare "No space left on device", and took the other
/// targets with it.
#[test]
fn a_target_too_full_for_one_segment_is_named_and_the_others_go_on() {
    if !need_root("a_target_too_full_for_one_segment_is_named_and_the_others_go_on") {
        return;
    }
    let full = SmallTmpfs::new("2m");
    let out = bin()
        .args(["run", "--duration", "1s", "--target"])
        .arg(full.0.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let path = full.0.path().display().to_string();
    for want in [path.as_str(), "target full", "2MiB free", "--segment-size"] {
        assert!(err.contains(want), "{want}: {err}");
    }
    assert!(leftovers(full.0.path()).is_empty());

    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let out = bin()
        .args(["run", "--duration", "2s", "--format", "jsonl", "--target"])
        .arg(shm.path())
        .arg("--target")
        .arg(full.0.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let event = lines
        .iter()
        .find(|l| {
            l["type"] == "event"
                && l["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("backing off"))
        })
        .unwrap_or_else(|| panic!("a backing-off event: {lines:?}"));
    assert!(
        event["message"].as_str().unwrap().contains(&path),
        "{event}"
    );
    let shm_ops: u64 = lines
        .iter()
        .filter(|l| l["type"] == "interval" && l["target"] == shm.path().display().to_string())
        .map(|l| l["ops"].as_u64().unwrap())
        .sum();
    assert!(shm_ops > 0, "the other target went on");
}

/// The small defects of a first session: a near-miss subcommand, an
/// inverted report span, a bad value in a config file, a read-only target
/// given to probe.
#[test]
fn small_mistakes_get_precise_answers() {
    let out = bin().arg("rn").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("a similar subcommand exists: 'run'"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("stallscope.toml");
    std::fs::write(&cfg, "threads = 0\n").unwrap();
    let out = bin()
        .arg("--config")
        .arg(&cfg)
        .args(["run", "--duration", "1s", "--target"])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("{}: threads = 0 is out of range", cfg.display())),
        "{err}"
    );
    // The same value on the command line is the command line's.
    let out = bin()
        .args(["run", "--threads", "0", "--duration", "1s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--threads 0 is out of range") && !err.contains(".toml"),
        "{err}"
    );

    let rec = dir.path().join("r.jsonl");
    let out = bin()
        .args(["run", "--duration", "2s", "--threads", "1", "--record"])
        .arg(&rec)
        .arg("--target")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = bin()
        .arg("report")
        .arg(&rec)
        .args(["--from", "10s", "--to", "5s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--from 10s is not before --to 5s"), "{err}");
}

#[test]
fn probe_gives_a_read_only_target_its_verdict() {
    if !need_root("probe_gives_a_read_only_target_its_verdict") {
        return;
    }
    let ro = tempfile::tempdir_in("/var/tmp").unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m,ro", "ssro"])
        .arg(ro.path())
        .status()
        .unwrap();
    assert!(ok.success());
    let out = bin().arg("probe").arg("--target").arg(ro.path()).output();
    Command::new("umount").arg(ro.path()).status().unwrap();
    let out = out.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("writers cannot run here (observe mode still works)"),
        "{text}"
    );
}

/// The subcommands a person can type, from clap's own tree.
fn subcommands() -> Vec<String> {
    use clap::CommandFactory;
    stallscope::cli::Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect()
}

fn stdout_of(args: &[&str]) -> String {
    String::from_utf8(common::run_ok(bin().args(args)).stdout).unwrap()
}

#[test]
fn completions_know_every_subcommand_and_bash_parses_them() {
    let subs = subcommands();
    assert!(subs.len() >= 9, "{subs:?}");
    let bash = stdout_of(&["completions", "bash"]);
    let zsh = stdout_of(&["completions", "zsh"]);
    let fish = stdout_of(&["completions", "fish"]);
    assert!(zsh.starts_with("#compdef stallscope"), "{zsh:.200}");
    for s in &subs {
        assert!(bash.contains(&format!("stallscope,{s})")), "bash lacks {s}");
        assert!(zsh.contains(&format!("'{s}:")), "zsh lacks {s}");
        assert!(fish.contains(&format!("-a \"{s}\"")), "fish lacks {s}");
    }
    let mut sh = Command::new("bash")
        .arg("-n")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut sh.stdin.take().unwrap(), bash.as_bytes()).unwrap();
    assert!(sh.wait().unwrap().success(), "bash -n refused the script");
}

#[test]
fn the_man_page_is_roff_and_names_every_subcommand() {
    let man = stdout_of(&["man"]);
    let lines: Vec<&str> = man.lines().collect();
    let th = lines
        .iter()
        .position(|l| l.starts_with(".TH stallscope 1 "));
    let th = th.unwrap_or_else(|| panic!("no .TH line:\n{man:.300}"));
    assert!(
        lines[..th].iter().all(|l| l.starts_with('.')),
        "only requests before .TH"
    );
    assert_eq!(lines[th + 1], ".SH NAME");
    assert_eq!(
        lines[th + 2],
        r"stallscope \- Live diagnosis of write stalls on Linux",
        "NAME is one line"
    );
    let subs_at = lines.iter().position(|l| *l == ".SH SUBCOMMANDS").unwrap();
    let section = lines[subs_at..].join("\n");
    for s in subcommands() {
        let s = s.replace('-', r"\-");
        assert!(
            section.contains(&format!(r"stallscope\-{s}(1)")),
            "{s} missing"
        );
    }
}

#[test]
fn help_says_how_to_install_completions_and_the_man_page() {
    let help = stdout_of(&["--help"]);
    assert!(help.contains("stallscope completions bash|zsh|fish, stallscope man"));
    let help = stdout_of(&["completions", "--help"]);
    assert!(
        help.contains("bash-completion/completions/stallscope"),
        "{help}"
    );
    let help = stdout_of(&["man", "--help"]);
    assert!(help.contains("man -l -"), "{help}");
}

/// `advise`: a missing, a non-recording and an empty file are bad input
/// (exit 2, one line naming the file).
#[test]
fn advise_refuses_bad_input_with_exit_2() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("missing.jsonl");
    let garbage = t.path().join("garbage.jsonl");
    std::fs::write(&garbage, b"not json at all\n").unwrap();
    let empty = t.path().join("empty.jsonl");
    std::fs::write(&empty, b"").unwrap();
    for (f, why) in [
        (&missing, "missing.jsonl"),
        (&garbage, "garbage.jsonl"),
        (&empty, "empty.jsonl"),
    ] {
        let out = bin().arg("advise").arg(f).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{why}: {err}");
        assert!(err.contains(why), "{why}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(out.stdout.is_empty());
    }
    let out = bin()
        .args(["advise", "--format", "yaml"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

const ADVISE_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recording/observe-and-writers-v0.1.0.jsonl"
);

#[test]
fn advise_prints_the_issues_json() {
    let fixture = ADVISE_FIXTURE;
    let out = bin()
        .args(["advise", fixture, "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cards = v["proposals"].as_array().unwrap();
    assert!(cards.len() >= 5, "{v}");
    for c in cards {
        for k in [
            "change", "knob", "from", "to", "scope", "fidelity", "tradeoff", "source", "verdict",
            "before", "after", "interval",
        ] {
            assert!(c.get(k).is_some(), "{k} missing: {c}");
        }
        for k in ["verdict", "before", "after", "interval"] {
            assert!(c[k].is_null(), "not tried, so {k} is null: {c}");
        }
        assert!(c["to"].is_string() && c["knob"].is_string());
        let f = c["fidelity"].as_str().unwrap();
        assert!(["direction", "not-testable"].contains(&f), "{c}");
        assert!(
            ["application", "mount", "device", "global"].contains(&c["scope"].as_str().unwrap())
        );
    }
    // The device limit, with the exact bytes to write.
    let dev = cards
        .iter()
        .find(|c| c["knob"] == "/sys/class/bdi/7:0/max_bytes")
        .expect("a device card");
    assert!(dev["to"].as_str().unwrap().parse::<u64>().unwrap() >= 4 << 20);
}

/// The text, and what `run --format jsonl` printed.
#[test]
fn advise_reads_recordings_and_printed_output() {
    let fixture = ADVISE_FIXTURE;
    let t = tempfile::tempdir().unwrap();

    let text = bin().args(["advise", fixture]).output().unwrap();
    let s = String::from_utf8_lossy(&text.stdout);
    assert!(s.starts_with("stallscope advise"), "{s}");
    assert!(
        s.contains("dirty_throttle: 21.91 s of stall time in 64 stalls"),
        "{s}"
    );
    assert!(s.contains("--sync periodic:2s → periodic:1s"), "{s}");

    // What `run --format jsonl` printed reads too, with a note; its sync
    // policy is not known, so no card changes it.
    let printed = t.path().join("printed.jsonl");
    let all = std::fs::read_to_string(fixture).unwrap();
    let lines: Vec<&str> = all
        .lines()
        .filter(|l| !l.contains(r#""type":"header""#) && !l.contains(r#""type":"kernel""#))
        .collect();
    std::fs::write(&printed, lines.join("\n")).unwrap();
    let out = common::run_ok(bin().arg("advise").arg(&printed));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a recording"));
    assert!(
        s.contains("dirty_throttle: 21.91 s of stall time in 64 stalls"),
        "{s}"
    );
    assert!(!s.contains("--sync"), "{s}");
}

/// The fixture as a recording of an observed server alone: no targets, so
/// no writers, only dd's stalls.
fn observed_only(dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(ADVISE_FIXTURE).unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["type"] == "header" {
                v["targets"] = Value::Array(Vec::new());
                v["config"]["targets"] = Value::Array(Vec::new());
            }
            v.to_string()
        })
        .collect();
    let f = dir.join("observed.jsonl");
    std::fs::write(&f, lines.join("\n") + "\n").unwrap();
    f
}

/// `advise --try`'s bad input, all before any lab work or root: too few
/// pairs, a chart in a folder that is not there, no lab (with the `lab up` command that makes one shaped like
/// the recording), `--card` without `--try` or naming a card that cannot
/// be tried.
#[test]
fn advise_try_refuses_bad_input_with_exit_2() {
    let t = tempfile::tempdir().unwrap();
    let nolab = t.path().join("nolab");
    let run = |extra: &[&str]| {
        let out = bin()
            .args(["advise", ADVISE_FIXTURE, "--try", "--lab-dir"])
            .arg(&nolab)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.stdout,
        )
    };
    let (code, err, out) = run(&["--pairs", "3"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--pairs 3 is too few (at least 6"), "{err}");
    assert!(out.is_empty());

    // The chart's folder is checked before the minutes of trials.
    let (code, err, out) = run(&["--svg", "/nonexistent-dir/cl.svg"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("/nonexistent-dir is not a directory"), "{err}");
    assert!(out.is_empty());
    let out = bin()
        .args(["advise", ADVISE_FIXTURE, "--svg", "x.svg"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "--svg needs --try");

    let (code, err, out) = run(&[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("no lab at {}", nolab.display())),
        "{err}"
    );
    // The recorded target: ext4, its device wrote back at about 20 MiB/s
    // (the fixture's lab cap), dirty thresholds 64 MiB and 16 MiB.
    let cmd = err
        .lines()
        .find(|l| l.trim_start().starts_with("stallscope lab up"))
        .unwrap_or_else(|| panic!("no lab up command: {err}"));
    assert_eq!(
        cmd.trim(),
        format!(
            "stallscope lab up --dir {} --fs ext4 --cap 20MiB --dirty-bytes 64MiB --dirty-background-bytes 16MiB",
            nolab.display()
        )
    );
    assert!(out.is_empty(), "nothing tried, nothing printed");

    // Card 1 is the observed dd's own setting.
    let (code, err, _) = run(&["--card", "1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--card 1 cannot be tried"), "{err}");
    assert!(err.contains("dd (pid 7150)"), "{err}");
    let (code, err, _) = run(&["--card", "99"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--card 99"), "{err}");

    let out = bin()
        .args(["advise", ADVISE_FIXTURE, "--card", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "--card needs --try");
}

/// An observed server's recording: nothing is tried (and no lab is
/// needed), one line says why, every card keeps its fidelity.
#[test]
fn advise_try_on_an_observed_server_says_why_nothing_is_tried() {
    let t = tempfile::tempdir().unwrap();
    let f = observed_only(t.path());
    let nolab = t.path().join("nolab");
    let out = bin()
        .arg("advise")
        .arg(&f)
        .args(["--try", "--lab-dir"])
        .arg(&nolab)
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let why: Vec<&str> = s
        .lines()
        .filter(|l| l.contains("not implemented"))
        .collect();
    assert_eq!(why.len(), 1, "one line (wrapped once at most): {s}");
    assert!(
        s.contains("--try: nothing tried: the recording is of an observed server, dd (pid 7150)"),
        "{s}"
    );
    assert!(!s.contains("verified"), "{s}");

    let out = bin()
        .arg("advise")
        .arg(&f)
        .args(["--try", "--format", "json", "--lab-dir"])
        .arg(&nolab)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cards = v["proposals"].as_array().unwrap();
    assert!(!cards.is_empty(), "{v}");
    for c in cards {
        assert_ne!(c["fidelity"], "verified", "{c}");
        assert!(c["verdict"].is_null() && c["before"].is_null(), "{c}");
    }
    let notes = v["try"]["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{v}");
    assert!(
        notes[0].as_str().unwrap().contains("imitating a server"),
        "{v}"
    );
    assert_eq!(v["try"]["tried"], Value::Array(Vec::new()));
}

#[test]
fn advise_help_teaches_try_with_an_example() {
    let help = stdout_of(&["advise", "--help"]);
    for want in [
        "--try",
        "--pairs",
        "--card",
        "stallscope advise cl.jsonl --try --pairs 6 --run-secs 20",
        "stallscope lab up",
        "verified",
    ] {
        assert!(help.contains(want), "{want}: {help}");
    }
}

#[test]
fn observe_name_wait_attaches_when_the_process_appears() {
    // A copy of sleep under a name nothing else on the machine has.
    let t = tempfile::tempdir().unwrap();
    let name = format!("ss-wait-{}", std::process::id() % 100_000);
    let exe = t.path().join(&name);
    std::fs::copy("/bin/sleep", &exe).unwrap();
    let observer = bin()
        .args(["run", "--observe-name", &name, "--wait", "--duration", "2s"])
        .args(["--format", "jsonl"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Started first, as one does while waiting for a stall: it must wait.
    std::thread::sleep(Duration::from_millis(700));
    let mut late = Command::new(&exe).arg("6").spawn().unwrap();
    let out = observer.wait_with_output().unwrap();
    let _ = late.kill();
    let _ = late.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("waiting for a process named {name} to start")),
        "{err}"
    );
    let pid = u64::from(late.id());
    let seen = lines(&out)
        .iter()
        .filter(|l| l["type"] == "observed" && l["pid"] == pid)
        .count();
    assert!(seen >= 1, "no observed line for pid {pid}: {err}");
    // Without a process to observe, --wait is a usage error.
    expect_usage_error(
        &["run", "--wait", "--duration", "1s"],
        "--wait waits for",
        t.path(),
    );
}
