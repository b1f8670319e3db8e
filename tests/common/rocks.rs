//! db_bench (Debian's `rocksdb-tools`) for the RocksDB tests: started
//! stopped so that stallscope is attached before it writes, its writer
//! threads found, RocksDB's own stall accounting read from its output.

use super::observer::{Observed, Observer};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// db_bench, started stopped; killed on drop if still there.
pub struct DbBench {
    pid: u32,
    exited: Option<i32>,
}

impl DbBench {
    /// Starts `db_bench ARGS`, stopped before it execs (its comm already
    /// `db_bench`, so stallscope names it right); stdout and stderr go to
    /// `out`. A raw fork: std's spawn waits for the exec, which a child
    /// stopped before it never reaches.
    pub fn start_stopped(args: &[String], out: &Path) -> DbBench {
        use std::ffi::CString;
        use std::os::fd::AsRawFd;
        let args: Vec<CString> = std::iter::once("db_bench".to_string())
            .chain(args.iter().cloned())
            .map(|a| CString::new(a).unwrap())
            .collect();
        let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let log = std::fs::File::create(out).unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let (log_fd, null_fd) = (log.as_raw_fd(), null.as_raw_fd());
        // SAFETY: the child makes only async-signal-safe calls (prctl,
        // dup2, raise, execvp, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: see above.
            unsafe {
                libc::prctl(libc::PR_SET_NAME, c"db_bench".as_ptr());
                libc::dup2(null_fd, 0);
                libc::dup2(log_fd, 1);
                libc::dup2(log_fd, 2);
                libc::raise(libc::SIGSTOP);
                libc::execvp(argv[0], argv.as_ptr());
                libc::_exit(127);
            }
        }
        let b = DbBench {
            pid: pid as u32,
            exited: None,
        };
        let mut st = 0;
        // SAFETY: waitpid on our own child.
        let r = unsafe { libc::waitpid(pid, &mut st, libc::WUNTRACED) };
        assert!(
            r == pid && libc::WIFSTOPPED(st),
            "db_bench did not stop: {st:#x}"
        );
        b
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn resume(&self) {
        // SAFETY: kill with our child's pid.
        unsafe { libc::kill(self.pid as i32, libc::SIGCONT) };
    }

    /// Its exit status once it has ended (127: db_bench could not start).
    pub fn try_wait(&mut self) -> Option<i32> {
        if self.exited.is_none() {
            let mut st = 0;
            // SAFETY: waitpid on our own child.
            let r = unsafe { libc::waitpid(self.pid as i32, &mut st, libc::WNOHANG) };
            if r == self.pid as i32 && (libc::WIFEXITED(st) || libc::WIFSIGNALED(st)) {
                self.exited = Some(if libc::WIFEXITED(st) {
                    libc::WEXITSTATUS(st)
                } else {
                    128 + libc::WTERMSIG(st)
                });
            }
        }
        self.exited
    }
}

impl Drop for DbBench {
    fn drop(&mut self) {
        if self.try_wait().is_none() {
            // SAFETY: kill and reap our own child.
            unsafe {
                libc::kill(self.pid as i32, libc::SIGKILL);
                libc::waitpid(self.pid as i32, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// The `n` busiest threads named `db_bench` other than the main thread,
/// with their CPU ticks: the benchmark's writers (the timer thread, also
/// `db_bench`, hardly runs).
pub fn busiest_db_bench_threads(pid: u32, n: usize) -> Vec<(u32, u64)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut v: Vec<(u32, u64)> = tasks
        .filter_map(|t| {
            let tid: u32 = t.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
            let comm = &stat[stat.find('(')? + 1..stat.rfind(')')?];
            let f: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
            // utime, stime: fields 14 and 15 of stat, 12 and 13 after comm.
            let cpu = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
            (comm == "db_bench" && tid != pid).then_some((tid, cpu))
        })
        .collect();
    v.sort_by_key(|&(_, cpu)| std::cmp::Reverse(cpu));
    v.truncate(n);
    v
}

/// RocksDB's own figures, from db_bench's output (`--statistics` and the
/// `stats` benchmark) and the LOG.
#[derive(Debug, Default)]
pub struct RocksFigures {
    /// `rocksdb.stall.micros COUNT`, in ms.
    pub stall_ms: f64,
    /// The stats' "Cumulative stall", in ms.
    pub cumulative_ms: Option<f64>,
    /// `Stalls(count)`: level0 slowdowns, level0 stops, memtable stops,
    /// memtable slowdowns.
    pub l0_slowdowns: u64,
    pub l0_stops: u64,
    pub memtable_stops: u64,
    pub memtable_slowdowns: u64,
    /// The LOG's warnings: "Stalling writes" (slowdown), "Stopping writes".
    pub log_stalling: usize,
    pub log_stopping: usize,
    /// The fillrandom line (ops/s, MB/s).
    pub fillrandom: String,
}

pub fn parse_figures(bench: &str, log: &str) -> RocksFigures {
    let mut f = RocksFigures::default();
    for l in bench.lines() {
        if let Some(v) = l.strip_prefix("rocksdb.stall.micros COUNT : ") {
            f.stall_ms = v.trim().parse::<f64>().unwrap() / 1e3;
        } else if let Some(v) = l.strip_prefix("Cumulative stall: ") {
            // 00:00:57.566 H:M:S, 95.3 percent
            let hms: Vec<f64> = v
                .split_whitespace()
                .next()
                .unwrap()
                .split(':')
                .map(|x| x.parse().unwrap())
                .collect();
            f.cumulative_ms = Some((hms[0] * 3600.0 + hms[1] * 60.0 + hms[2]) * 1e3);
        } else if let Some(v) = l.strip_prefix("Stalls(count): ") {
            for item in v.split(", ") {
                let Some((n, what)) = item.split_once(' ') else {
                    continue;
                };
                let n = n.parse().unwrap_or(0);
                match what {
                    "level0_slowdown" => f.l0_slowdowns = n,
                    "level0_numfiles" => f.l0_stops = n,
                    "memtable_compaction" => f.memtable_stops = n,
                    "memtable_slowdown" => f.memtable_slowdowns = n,
                    _ => {}
                }
            }
        } else if l.starts_with("fillrandom") {
            f.fillrandom = l.split_whitespace().collect::<Vec<_>>().join(" ");
        }
    }
    f.log_stalling = log.matches("Stalling writes").count();
    f.log_stopping = log.matches("Stopping writes").count();
    f
}

/// Where a run's files go: `STALLSCOPE_TEST_KEEP` (kept), else a temp
/// folder that is removed when the test passes, so a green suite leaves
/// nothing in /tmp, and kept (named on stderr) when it fails, as evidence.
pub struct KeepDir {
    path: PathBuf,
    temp: Option<tempfile::TempDir>,
}

impl KeepDir {
    pub fn new(name: &str) -> KeepDir {
        if let Some(d) = std::env::var_os("STALLSCOPE_TEST_KEEP") {
            let path = PathBuf::from(d);
            std::fs::create_dir_all(&path).unwrap();
            return KeepDir { path, temp: None };
        }
        let temp = tempfile::Builder::new()
            .prefix(&format!("stallscope-{name}-"))
            .tempdir()
            .unwrap();
        KeepDir {
            path: temp.path().to_path_buf(),
            temp: Some(temp),
        }
    }
}

impl std::ops::Deref for KeepDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl Drop for KeepDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(t) = self.temp.take() {
                eprintln!("the failed run's files are kept in {}", t.keep().display());
            }
        }
    }
}

/// One db_bench run observed by stallscope, and what both printed.
pub struct Observation {
    /// db_bench's exit status.
    pub status: i32,
    pub pid: u32,
    /// Seconds from letting db_bench go to its end.
    pub bench_s: f64,
    /// Its busiest threads named `db_bench` (the writers), last seen.
    pub writers: Vec<u32>,
    pub out: Observed,
    /// db_bench's output and the database's LOG.
    pub bench_txt: String,
    pub log: String,
}

/// Runs `db_bench ARGS` (database in `db`) under `stallscope run --observe
/// PID` plus `obs_args`, with `n_writers` writer threads; keeps what both
/// printed and the LOG in `keep`. Panics when db_bench runs past `limit`.
pub fn observe_db_bench(
    db: &Path,
    args: &[String],
    obs_args: &[&str],
    n_writers: usize,
    keep: &Path,
    limit: Duration,
) -> Observation {
    let bench = DbBench::start_stopped(args, &keep.join("db_bench.txt"));
    let pid = bench.pid();
    let mut full = vec!["--observe".to_string(), pid.to_string()];
    full.extend(obs_args.iter().map(ToString::to_string));
    let full: Vec<&str> = full.iter().map(String::as_str).collect();
    let mut obs = Observer::start(&full);
    obs.wait_attached(30);
    let t0 = Instant::now();
    bench.resume();
    let mut bench = bench;
    // The writers are the busiest db_bench threads; look while they run.
    let mut writers = Vec::new();
    let status = loop {
        if let Some(st) = bench.try_wait() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(3) {
            let top = busiest_db_bench_threads(pid, n_writers);
            if top.len() == n_writers {
                writers = top.into_iter().map(|(t, _)| t).collect();
            }
        }
        assert!(
            t0.elapsed() < limit,
            "db_bench still running after {} s",
            limit.as_secs()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let bench_s = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(500));
    let out = obs.stop(true);
    let bench_txt = std::fs::read_to_string(keep.join("db_bench.txt")).unwrap();
    let log = std::fs::read_to_string(db.join("LOG")).unwrap_or_default();
    let _ = std::fs::write(keep.join("LOG"), &log);
    let _ = std::fs::write(keep.join("stallscope.jsonl"), &out.stdout);
    let _ = std::fs::write(keep.join("stallscope.err"), &out.stderr);
    Observation {
        status,
        pid,
        bench_s,
        writers,
        out,
        bench_txt,
        log,
    }
}
