//! `--metrics-listen`: a real `stallscope run` scraped over HTTP, its body
//! checked by `promtool check metrics` (a skip without promtool fails in CI).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A scratch target on tmpfs when there is one (fast, no disk load).
fn target_dir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        if let Ok(d) = tempfile::tempdir_in("/dev/shm") {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

/// Starts `stallscope run` with metrics on a free loopback port; returns the
/// child, the address it printed, and a receiver of the rest of stderr.
fn start_run(dir: &Path, duration: &str) -> (Child, SocketAddr, mpsc::Receiver<String>) {
    start_with(&["--target".into(), dir.display().to_string()], duration)
}

fn start_with(what: &[String], duration: &str) -> (Child, SocketAddr, mpsc::Receiver<String>) {
    let mut child = common::bin()
        .arg("run")
        .args(what)
        .args(["--duration", duration, "--format", "jsonl"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let t0 = Instant::now();
    let mut seen = Vec::new();
    while t0.elapsed() < Duration::from_secs(20) {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) else {
            continue;
        };
        if let Some(rest) = line.strip_prefix("stallscope: metrics on http://") {
            let addr = rest.strip_suffix("/metrics").expect("URL ends in /metrics");
            let addr: SocketAddr = addr.parse().expect("ADDR:PORT");
            assert_ne!(addr.port(), 0, "the real port is printed");
            assert!(addr.ip().is_loopback());
            return (child, addr, rx);
        }
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("no metrics URL on stderr; saw: {seen:?}");
}

/// A plain HTTP/1.0 GET; returns (status line, headers, body).
fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> (String, String, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

/// Sample lines as (name, labels without `le`, le, value).
fn samples(body: &str) -> Vec<(String, String, Option<String>, f64)> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let mut le = None;
            let mut kept = Vec::new();
            // Label values here hold no `",` (paths, fs names, modes).
            for kv in labels.split("\",").filter(|s| !s.is_empty()) {
                let kv = kv.trim_end_matches('"');
                match kv.strip_prefix("le=\"") {
                    Some(v) => le = Some(v.to_string()),
                    None => kept.push(kv.to_string()),
                }
            }
            kept.sort();
            (name.to_string(), kept.join(","), le, value.parse().unwrap())
        })
        .collect()
}

fn ops_of(body: &str, target: &str) -> f64 {
    let want = format!("target=\"{target}");
    samples(body)
        .iter()
        .filter(|(n, l, _, _)| n == "stallscope_ops_total" && l.contains(&want))
        .map(|s| s.3)
        .sum()
}

#[test]
fn run_serves_growing_metrics_that_promtool_accepts() {
    let dir = target_dir();
    let target = dir.path().display().to_string();
    let (child, addr, _stderr) = start_run(dir.path(), "6s");
    std::thread::sleep(Duration::from_millis(1500));
    let (status, headers, first) = get(addr, "/metrics", None);
    assert!(status.contains("200"), "{status}");
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("text/plain; version=0.0.4"),
        "{headers}"
    );
    std::thread::sleep(Duration::from_secs(2));
    let (_, _, second) = get(addr, "/metrics", None);
    let (a, b) = (ops_of(&first, &target), ops_of(&second, &target));
    assert!(b > a && a >= 0.0, "ops_total grew: {a} then {b}\n{second}");

    // The histogram: +Inf bucket equals _count, per series, and it is filled.
    let all = samples(&second);
    let counts: Vec<_> = all
        .iter()
        .filter(|s| s.0 == "stallscope_op_latency_seconds_count")
        .collect();
    assert!(!counts.is_empty(), "no latency histogram:\n{second}");
    for (_, labels, _, count) in &counts {
        let inf = all
            .iter()
            .find(|s| {
                s.0 == "stallscope_op_latency_seconds_bucket"
                    && &s.1 == labels
                    && s.2.as_deref() == Some("+Inf")
            })
            .unwrap_or_else(|| panic!("no +Inf bucket for {labels}"));
        assert_eq!(inf.3, *count, "{labels}");
    }
    assert!(counts.iter().any(|c| c.3 > 0.0), "{second}");
    for name in [
        "stallscope_written_bytes_total",
        "stallscope_stalls_total",
        "stallscope_stall_seconds_total",
        "stallscope_dirty_bytes",
        "stallscope_build_info",
    ] {
        assert!(all.iter().any(|s| s.0 == name), "{name} missing:\n{second}");
    }
    assert!(second.contains("host=\""), "{second}");
    assert!(second.contains("mode=\"mmap\""), "{second}");

    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l.contains("\"type\":\"summary\"")),
        "the printer still runs beside the metrics:\n{stdout}"
    );

    promtool_accepts("run_serves_growing_metrics_that_promtool_accepts", &second);
}

/// `promtool check metrics` (lint included) on a scrape body.
fn promtool_accepts(test: &str, body: &str) {
    if !common::have("promtool") {
        common::skip(
            &format!("{test} (promtool part)"),
            "promtool not installed (Debian package prometheus)",
        );
        return;
    }
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), body).unwrap();
    let check = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(file.path()).unwrap())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "promtool check metrics failed:\n{}{}\n--- body ---\n{body}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn observe_mode_exports_the_process_and_promtool_accepts_it() {
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = sleeper.id().to_string();
    let (child, addr, _stderr) = start_with(&["--observe".into(), pid.clone()], "3s");
    std::thread::sleep(Duration::from_millis(2200));
    let (_, _, body) = get(addr, "/metrics", None);
    let out = child.wait_with_output().unwrap();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(out.status.success(), "{:?}", out.status);
    // samples() keeps labels without their closing quote.
    let want = format!("pid=\"{pid}");
    let all = samples(&body);
    for name in [
        "stallscope_observed_uninterruptible_threads",
        "stallscope_observed_stalls_total",
        "stallscope_observed_faults_total",
    ] {
        assert!(
            all.iter().any(|s| s.0 == name && s.1.contains(&want)),
            "{name} for {pid} missing:\n{body}"
        );
    }
    promtool_accepts(
        "observe_mode_exports_the_process_and_promtool_accepts_it",
        &body,
    );
}

#[test]
fn openmetrics_when_the_scrape_asks_for_it() {
    let dir = target_dir();
    let (child, addr, _stderr) = start_run(dir.path(), "3s");
    std::thread::sleep(Duration::from_millis(1500));
    let accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    let (status, headers, body) = get(addr, "/metrics", Some(accept));
    assert!(status.contains("200"), "{status}");
    assert!(
        headers.contains("application/openmetrics-text"),
        "{headers}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(body.contains("# TYPE stallscope_op_latency_seconds histogram"));
    assert!(body.contains("# UNIT stallscope_op_latency_seconds seconds"));
    let (status, _, _) = get(addr, "/nothing", None);
    assert!(status.contains("404"), "{status}");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
}

#[test]
fn a_port_in_use_or_a_bad_address_is_a_usage_error_before_writing() {
    let dir = target_dir();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    for (arg, needle) in [(port.as_str(), "cannot listen"), (":9187", "0.0.0.0:9187")] {
        let out = common::bin()
            .args(["run", "--target"])
            .arg(dir.path())
            .args(["--duration", "2s", "--metrics-listen", arg])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{arg}: {err}");
        assert!(err.contains(needle), "{arg}: {err}");
        assert!(out.stdout.is_empty(), "{arg}: no writer ran");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{arg}: scratch left: {left:?}");
    }
}
