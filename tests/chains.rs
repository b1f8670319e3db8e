//! Wake-up chains on two threads of this test process: A waits on a
//! condition variable for B, which fsyncs a file on a capped loop ext4.
//! stallscope observes this process; A's sleep must be reported as a stall
//! with B in its chain and the fsync's data writeback as its root, as long
//! as A measured itself waiting. Root only (tracefs, loop devices).

mod common;

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What A and B share: B's stage, under the condition variable.
#[derive(Default)]
struct Stage {
    a_waiting: bool,
    done: bool,
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// stallscope observing this process; its JSON lines as they come.
struct Observer {
    child: std::process::Child,
    lines: mpsc::Receiver<Value>,
    err: std::thread::JoinHandle<String>,
}

impl Observer {
    fn start(extra: &[&str]) -> Observer {
        let mut child = common::bin()
            .args(["run", "--observe", &std::process::id().to_string()])
            .args(["--stall-threshold", "20ms", "--format", "jsonl"])
            .args(["--duration", "60s"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&l) {
                    let _ = tx.send(v);
                }
            }
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut se, &mut s);
            s
        });
        Observer { child, lines, err }
    }

    /// Waits for the first observed line: stallscope is attached.
    fn wait_attached(&self) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            if let Ok(v) = self.lines.recv_timeout(Duration::from_millis(200)) {
                let observed = v["type"] == "observed";
                seen.push(v);
                if observed {
                    return seen;
                }
            }
        }
        panic!("stallscope did not attach within 15 s: {seen:?}");
    }

    /// Stops it (Ctrl-C) and returns every line and its stderr.
    fn stop(mut self, mut seen: Vec<Value>) -> (Vec<Value>, String) {
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().unwrap();
        seen.extend(self.lines.iter());
        let err = self.err.join().unwrap();
        assert!(status.success(), "stallscope failed: {err}");
        (seen, err)
    }
}

#[test]
#[allow(clippy::too_many_lines)]
fn a_thread_waiting_for_another_threads_fsync_is_stalled_by_it() {
    let test = "a_thread_waiting_for_another_threads_fsync_is_stalled_by_it";
    let Some(lab) = common::capped(test, "ext4", 20) else {
        return;
    };
    let obs = Observer::start(&["--chains", "auto"]);
    let seen = obs.wait_attached();

    let stage = Arc::new((Mutex::new(Stage::default()), Condvar::new()));
    let (tids_tx, tids) = mpsc::channel();
    let file = lab.fs.mount.join("data");
    let s = stage.clone();
    let tx = tids_tx.clone();
    let b = std::thread::Builder::new()
        .name("chain-b".into())
        .spawn(move || {
            tx.send(('b', gettid())).unwrap();
            let mut f = std::fs::File::create(&file).unwrap();
            let chunk = vec![0x5au8; 1 << 20];
            for _ in 0..48 {
                f.write_all(&chunk).unwrap();
            }
            let (m, cv) = &*s;
            drop(
                cv.wait_while(m.lock().unwrap(), |st| !st.a_waiting)
                    .unwrap(),
            );
            // A is about to sleep (or asleep): let it settle, then sync.
            std::thread::sleep(Duration::from_millis(30));
            let t = Instant::now();
            f.sync_all().unwrap();
            let fsync = t.elapsed();
            m.lock().unwrap().done = true;
            cv.notify_all();
            fsync
        })
        .unwrap();
    let s = stage.clone();
    let a = std::thread::Builder::new()
        .name("chain-a".into())
        .spawn(move || {
            tids_tx.send(('a', gettid())).unwrap();
            // Long enough for stallscope to see both threads and trace them.
            std::thread::sleep(Duration::from_millis(1500));
            let (m, cv) = &*s;
            let mut st = m.lock().unwrap();
            st.a_waiting = true;
            cv.notify_all();
            let t = Instant::now();
            let st = cv.wait_while(st, |st| !st.done).unwrap();
            let waited = t.elapsed();
            drop(st);
            waited
        })
        .unwrap();
    let (mut a_tid, mut b_tid) = (0, 0);
    for (who, tid) in tids.iter().take(2) {
        if who == 'a' {
            a_tid = tid;
        } else {
            b_tid = tid;
        }
    }
    let waited = a.join().unwrap();
    let fsync = b.join().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let (lines, err) = obs.stop(seen);
    eprintln!("stallscope stderr: {err}");
    eprintln!(
        "A (tid {a_tid}) waited {:.1} ms; B (tid {b_tid}) fsync {:.1} ms",
        waited.as_secs_f64() * 1e3,
        fsync.as_secs_f64() * 1e3
    );
    assert!(
        fsync > Duration::from_millis(500),
        "the capped fsync should be slow: {fsync:?}"
    );
    let stalls: Vec<&Value> = lines.iter().filter(|l| l["type"] == "stall").collect();
    let a_stalls: Vec<&&Value> = stalls
        .iter()
        .filter(|s| s["tid"] == a_tid && s["op"] == "wait")
        .collect();
    assert_eq!(
        a_stalls.len(),
        1,
        "one waiting stall of A: {a_stalls:#?}\nall stalls: {stalls:#?}"
    );
    let st = a_stalls[0];
    eprintln!("A's stall: {st}");
    let reported = st["duration_ms"].as_f64().unwrap();
    let measured = waited.as_secs_f64() * 1e3;
    assert!(
        (reported - measured).abs() <= 0.05 * measured,
        "A's stall {reported:.1} ms vs {measured:.1} ms measured by A"
    );
    let via = st["via"].as_array().expect("a chain");
    assert_eq!(via[0]["tid"], b_tid, "first hop is B: {st}");
    assert_eq!(via[0]["comm"], "chain-b");
    let root = via.last().unwrap();
    assert_eq!(root["cause"], "sync", "{st}");
    assert_eq!(root["wait"], "data writeback", "{st}");
    assert_eq!(st["cause"], "sync", "{st}");
    assert_eq!(st["confidence"], "high", "{st}");
    let shares: f64 = st["shares"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["ms"].as_f64().unwrap())
        .sum();
    assert!(
        (shares - reported).abs() < 1.0,
        "shares add up: {shares} vs {reported}"
    );
    // B's own fsync is a stall of its own, D state, sync.
    assert!(
        stalls
            .iter()
            .any(|s| s["tid"] == b_tid && s["op"] == "blocked" && s["cause"] == "sync"),
        "B's fsync: {stalls:#?}"
    );
}
