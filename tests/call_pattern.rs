//! The write pattern captured while observing (`calls` on `observed`
//! lines) against the kernel's own accounting of the observed process:
//! its /proc/PID/io `syscw` (write-family system calls) and `wchar`
//! (bytes they wrote), read by the process itself before and after its
//! work, and the calls it made by its own count. Root: the syscall events
//! are traced only with the scheduler's timing.

mod common;

use common::observer::Observer;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

/// The observed program: its main thread named "work" opens a file, waits
/// for "go", then 25 rounds of 8 × write(4096) + 2 × pwrite(65536) and a
/// sync (fdatasync in the first 20, fsync after), while a thread named
/// "side" (it sleeps half a second first: a thread's calls count once
/// stallscope knows the thread and its name) makes 10 writes of 512
/// bytes to a file of its own; reads its /proc/self/io around the work; on
/// "report" prints the figures (after the observer stopped: printing is a
/// write).
const PROGRAM: &str = r#"
import os, sys, json, ctypes, threading, time
libc = ctypes.CDLL(None)
def io():
    d = dict(l.split(": ") for l in open("/proc/self/io").read().splitlines())
    return int(d["syscw"]), int(d["wchar"])
def side():
    libc.prctl(15, b"side")
    time.sleep(0.5)
    for _ in range(10):
        os.write(sfd, b"s" * 512)
libc.prctl(15, b"work")
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
sfd = os.open(sys.argv[1] + ".side", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
sys.stdin.readline()
w0, b0 = io()
t = threading.Thread(target=side)
t.start()
for i in range(25):
    for _ in range(8):
        os.write(fd, b"a" * 4096)
    for _ in range(2):
        os.pwrite(fd, b"b" * 65536, 1 << 24)
    (os.fdatasync if i < 20 else os.fsync)(fd)
t.join()
w1, b1 = io()
sys.stdin.readline()
print(json.dumps({"syscw": w1 - w0, "wchar": b1 - b0}), flush=True)
"#;

#[test]
fn captured_calls_match_the_kernels_count_of_the_process() {
    let test = "captured_calls_match_the_kernels_count_of_the_process";
    if !common::need_root_with(test, &["python3"]) {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let file = dir.path().join("data");
    let mut child = Command::new("python3")
        .args(["-c", PROGRAM])
        .arg(&file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let mut obs = Observer::start(&["--observe", &pid, "--duration", "6s"]);
    obs.wait_attached(20);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "go").unwrap();
    let out = obs.stop(false);
    assert!(out.success, "stallscope failed: {}", out.stderr);
    writeln!(stdin, "report").unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(child.wait().unwrap().success());
    let kernel: Value = serde_json::from_str(&line).expect("the program's figures");

    let calls: Vec<&Value> = out
        .of("observed")
        .filter(|l| l["pid"].as_u64() == Some(u64::from(child.id())))
        .map(|l| &l["calls"])
        .collect();
    assert!(
        !calls.is_empty() && calls.iter().all(|c| c.is_object()),
        "no calls: {calls:?}"
    );
    let sum = |f: &dyn Fn(&Value) -> u64| -> u64 { calls.iter().map(|c| f(c)).sum() };
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let writes = sum(&|c| n(&c["writes"]));
    let bytes = sum(&|c| n(&c["write_bytes"]));
    eprintln!("captured: {writes} writes, {bytes} bytes; the kernel: {kernel}");
    assert_eq!(
        writes,
        n(&kernel["syscw"]),
        "write calls vs /proc/PID/io syscw"
    );
    assert_eq!(bytes, n(&kernel["wchar"]), "bytes vs /proc/PID/io wchar");
    // And the program's own count: 200 of 4 KiB, 50 of 64 KiB, 10 of 512
    // bytes by "side", the rest by "work".
    assert_eq!(sum(&|c| n(&c["write_size_log2"]["12"])), 200);
    assert_eq!(sum(&|c| n(&c["write_size_log2"]["9"])), 10);
    assert_eq!(sum(&|c| n(&c["threads"]["side"]["writes"])), 10);
    assert_eq!(sum(&|c| n(&c["threads"]["side"]["write_bytes"])), 5120);
    assert_eq!(sum(&|c| n(&c["threads"]["work"]["writes"])), 250);
    assert_eq!(
        sum(&|c| n(&c["threads"]["work"]["syncs"]["fsync"]["calls"])),
        5
    );
    assert_eq!(sum(&|c| n(&c["write_size_log2"]["16"])), 50);
    let sync = |call: &str, f: &str| sum(&|c| n(&c["syncs"][call][f]));
    assert_eq!(sync("fdatasync", "calls"), 20);
    assert_eq!(sync("fsync", "calls"), 5);
    // Each sync flushed its round: 8 × 4096 + 2 × 65536 bytes.
    let round = 8 * 4096 + 2 * 65536;
    assert_eq!(sync("fdatasync", "bytes_before"), 20 * round);
    assert_eq!(sync("fsync", "bytes_before"), 5 * round);
    let bucket = (round as f64).log2().ceil() as u64;
    assert_eq!(
        sum(&|c| n(&c["syncs"]["fdatasync"]["bytes_before_log2"][bucket.to_string()])),
        20
    );
    assert!(sum(&|c| n(&c["files"])) >= 1);
}
