//! `stallscope run --observe ...` in the background for the real-server
//! tests: its JSON lines collected as they come (a full pipe would block
//! it), a wait until it is attached, a stop as a person would (Ctrl-C).
//! Dropping it kills it, so no test leaves one running.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub struct Observer {
    child: Option<Child>,
    lines: mpsc::Receiver<Value>,
    seen: Vec<Value>,
    err: Option<std::thread::JoinHandle<String>>,
    /// Every line stallscope printed (JSON or not), kept for the test.
    raw: Option<std::thread::JoinHandle<String>>,
}

/// What an observer printed: its JSON lines and stderr.
pub struct Observed {
    pub success: bool,
    pub lines: Vec<Value>,
    pub stdout: String,
    pub stderr: String,
}

impl Observed {
    /// The lines of one `type`.
    pub fn of<'a>(&'a self, ty: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.lines.iter().filter(move |l| l["type"] == ty)
    }
}

impl Observer {
    /// `stallscope run --format jsonl` plus `args`.
    pub fn start(args: &[&str]) -> Observer {
        let mut child = super::bin()
            .args(["run", "--format", "jsonl"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start stallscope");
        let out = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        let raw = std::thread::spawn(move || {
            let mut all = String::new();
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&l) {
                    let _ = tx.send(v);
                }
                all.push_str(&l);
                all.push('\n');
            }
            all
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut se, &mut s);
            s
        });
        Observer {
            child: Some(child),
            lines,
            seen: Vec::new(),
            err: Some(err),
            raw: Some(raw),
        }
    }

    /// Waits for the first `observed` line: tracing is on and the watched
    /// process's threads are known. Panics after `secs` seconds.
    pub fn wait_attached(&mut self, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if let Ok(v) = self.lines.recv_timeout(Duration::from_millis(100)) {
                let observed = v["type"] == "observed";
                self.seen.push(v);
                if observed {
                    return;
                }
            }
            if let Some(Ok(Some(st))) = self.child.as_mut().map(Child::try_wait) {
                panic!("stallscope exited ({st}) before it attached");
            }
        }
        panic!("stallscope did not attach within {secs} s: {:?}", self.seen);
    }

    /// Stops it with SIGINT (or waits for it when it ends by itself,
    /// `--duration`) and returns what it printed.
    pub fn stop(mut self, interrupt: bool) -> Observed {
        let mut child = self.child.take().unwrap();
        if interrupt {
            // SAFETY: kill with a valid pid and signal.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        }
        let status = child.wait().unwrap();
        let stdout = self.raw.take().unwrap().join().unwrap();
        let stderr = self.err.take().unwrap().join().unwrap();
        let mut lines = std::mem::take(&mut self.seen);
        lines.extend(self.lines.try_iter());
        Observed {
            success: status.success(),
            lines,
            stdout,
            stderr,
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A free TCP port on loopback (free when asked; a server started right
/// after gets it unless another process is quicker).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process's state letter from /proc/PID/stat (`T` stopped, `Z` zombie).
pub fn proc_state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 1..].trim_start().chars().next()
}
