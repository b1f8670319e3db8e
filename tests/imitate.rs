//! `stallscope imitate`: a program of ours observed, imitated from its
//! recording, the imitation observed the same way, and the gate between
//! the two recordings; and a program writing through mmap stores, which
//! no imitation of calls can follow, failing the gate. Root (the calls
//! are captured with the scheduler's timing).

mod common;

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A steady server: thread "wal" writes 8 KiB 40 times a second with an
/// fdatasync every 10th, thread "ckpt" 256 KiB 4 times a second with an
/// fsync after each second's four, until killed.
const STEADY: &str = r#"
import os, sys, ctypes, threading, time
libc = ctypes.CDLL(None)
def wal():
    libc.prctl(15, b"wal")
    fd = os.open(sys.argv[1] + ".wal", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    i = 0
    while True:
        os.write(fd, b"w" * 8192)
        i += 1
        if i % 10 == 0:
            os.fdatasync(fd)
        time.sleep(0.025)
def ckpt():
    libc.prctl(15, b"ckpt")
    fd = os.open(sys.argv[1] + ".ckpt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    while True:
        for _ in range(4):
            os.pwrite(fd, b"c" * 262144, 0)
            time.sleep(0.25)
        os.fsync(fd)
threading.Thread(target=wal, daemon=True).start()
threading.Thread(target=ckpt, daemon=True).start()
time.sleep(3600)
"#;

/// A server that dirties 16 MiB a second of a shared file mapping (fresh
/// pages, so each store dirties one) and writes 4 KiB through write()
/// once every two seconds: more dirtied than its few calls could explain.
const MAPPER: &str = r#"
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
size = 1 << 30
os.ftruncate(fd, size)
m = mmap.mmap(fd, size)
log = os.open(sys.argv[1] + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
off = 0
while True:
    for _ in range(32):
        for p in range(off, off + (1 << 20), 4096):
            m[p] = 1
        off = (off + (1 << 20)) % size
        time.sleep(0.0625)
    os.write(log, b"l" * 4096)
"#;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn python(program: &str, file: &Path) -> Killed {
    Killed(
        Command::new("python3")
            .args(["-c", program])
            .arg(file)
            .spawn()
            .expect("python3"),
    )
}

/// Observes `pid` for `secs` into `rec`.
fn record(pid: u32, secs: u32, rec: &Path) {
    common::run_ok(common::bin().args([
        "run",
        "--observe",
        &pid.to_string(),
        "--duration",
        &format!("{secs}s"),
        "--format",
        "jsonl",
        "--record",
        rec.to_str().unwrap(),
    ]));
}

/// Runs `program` on `file`, records it for `secs` into `rec`, stops it.
fn record_program(program: &str, file: &Path, secs: u32, rec: &Path) {
    let server = python(program, file);
    // Threads younger than the observer's first look are missed.
    std::thread::sleep(Duration::from_millis(800));
    record(server.0.id(), secs, rec);
}

fn gate(server: &Path, imitation: &Path) -> Value {
    let out = common::run_ok(common::bin().args([
        "imitate",
        server.to_str().unwrap(),
        "--check",
        imitation.to_str().unwrap(),
        "--json",
    ]));
    serde_json::from_slice(&out.stdout).expect("the gate as JSON")
}

#[test]
fn an_imitation_does_what_the_server_did_by_the_same_observer() {
    let test = "an_imitation_does_what_the_server_did_by_the_same_observer";
    if !common::need_root_with(test, &["python3"]) {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let server_rec = dir.path().join("server.rec");
    record_program(STEADY, &dir.path().join("data"), 8, &server_rec);
    let files = dir.path().join("imitation");
    std::fs::create_dir(&files).unwrap();
    let imitation = common::bin()
        .args(["imitate", server_rec.to_str().unwrap(), "--loop", "--dir"])
        .arg(&files)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let imit_rec = dir.path().join("imit.rec");
    record(imitation.id(), 8, &imit_rec);
    // SAFETY: a child of ours, still running.
    unsafe { libc::kill(imitation.id() as i32, libc::SIGINT) };
    let out = imitation.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "imitate failed: {err}");
    assert!(err.contains(" plays python3/ckpt"), "{err}");
    assert!(err.contains(" plays python3/wal"), "{err}");
    assert!(err.contains("of plan so far"), "no progress line: {err}");
    assert_eq!(
        std::fs::read_dir(&files).unwrap().count(),
        0,
        "the imitation left its files behind"
    );

    let g = gate(&server_rec, &imit_rec);
    eprintln!("{}", serde_json::to_string_pretty(&g["input"]).unwrap());
    let input = g["input"].as_array().unwrap();
    // Each role three figures, all within the band: ckpt, wal (and `?`
    // when a thread made calls before the observer knew its name).
    for role in ["python3/ckpt", "python3/wal"] {
        let of: Vec<&Value> = input
            .iter()
            .filter(|c| c["what"].as_str().unwrap().starts_with(&format!("{role} ")))
            .collect();
        assert_eq!(of.len(), 3, "{role}: {g}");
    }
    for c in input {
        assert_eq!(c["pass"], true, "{c}");
    }
    assert_eq!(g["pass"], true, "{g}");
    let cannot = g["cannot"].as_array().unwrap();
    assert!(
        cannot
            .iter()
            .all(|c| c.as_str().unwrap().starts_with("dominant cause")),
        "{cannot:?}"
    );
}

#[test]
fn a_server_writing_through_mmap_fails_the_gate() {
    let test = "a_server_writing_through_mmap_fails_the_gate";
    if !common::need_root_with(test, &["python3"]) {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let rec = dir.path().join("mapper.rec");
    record_program(MAPPER, &dir.path().join("map"), 6, &rec);
    let g = gate(&rec, &rec);
    assert_eq!(g["pass"], false, "{g}");
    let cannot = g["cannot"][0].as_str().unwrap_or_default();
    assert!(cannot.contains("mmap stores"), "{g}");
    let text = common::run_ok(common::bin().args([
        "imitate",
        rec.to_str().unwrap(),
        "--check",
        rec.to_str().unwrap(),
    ]));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("not verified"), "{text}");
}
