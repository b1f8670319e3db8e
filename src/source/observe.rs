//! Observe mode: watch another process's threads without adding write load.
//!
//! A sampler thread reads /proc/PID/task/*/stat every `observe_every`
//! (default 50 ms, faster than the interval, to catch short D-state runs):
//! each thread's state, minor and major faults, and /proc/PID/io's
//! write_bytes. A run of uninterruptible sleep (D; dirty throttling sleeps
//! TASK_KILLABLE, which is D) on one thread that lasts at least the stall
//! threshold is a stall; while it lasts the thread's kernel stack is read
//! (root) or its wchan, and the aggregator attributes it with the same rules
//! as our own writers' stalls, adding the tracefs events of that thread id.
//! A run's duration is the time from its first D sample to the first sample
//! that is not D, so it is known to ± one sample period. When the
//! scheduler's events time the blocks (root), the session slows the
//! sampler down (`set_every`) and reads blocked threads' stacks itself.
//!
//! Parsing and run detection are pure; only `Observer` touches /proc.

use crate::base::clock::Clock;
use crate::base::error::UsageError;
use crate::model::cause::stack_cause;
use crate::model::msg::Msg;
use crate::model::observed::{Follow, ObsTick, ProcTick, Watched};
use crate::model::ops::OpKind;
use crate::model::stall::{Blocked, Who};
use crossbeam::channel::Sender;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// One thread as /proc/PID/task/TID/stat shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskStat {
    pub tid: u32,
    pub comm: String,
    pub state: char,
    pub minflt: u64,
    pub majflt: u64,
}

/// Parses a stat line; the comm is in parentheses and may hold spaces and
/// parentheses itself, so the fields start after the last ')'.
pub fn parse_stat(line: &str) -> Option<TaskStat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let tid = line[..open].trim().parse().ok()?;
    let comm = line.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = line[close + 1..].split_whitespace().collect();
    // state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
    Some(TaskStat {
        tid,
        comm,
        state: rest.first()?.chars().next()?,
        minflt: rest.get(7)?.parse().ok()?,
        majflt: rest.get(9)?.parse().ok()?,
    })
}

/// `write_bytes` of /proc/PID/io: bytes the process caused to be sent to
/// storage (page-cache writes count when they are dirtied).
pub fn parse_write_bytes(io: &str) -> Option<u64> {
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The processes named on the command line: pids must exist; a name
/// matches a process's comm (the kernel cuts it to 15 bytes) or the base
/// name of its argv[0]. stallscope itself is never observed.
pub fn resolve(
    proc_root: &Path,
    pids: &[u32],
    names: &[String],
) -> Result<Vec<Watched>, UsageError> {
    let me = std::process::id();
    let mut out: Vec<Watched> = Vec::new();
    for &pid in pids {
        if pid == me {
            return Err(UsageError::new(format!(
                "--observe {pid} is stallscope itself"
            )));
        }
        let comm = read_comm(proc_root, pid)
            .ok_or_else(|| UsageError::new(format!("--observe {pid}: no such process")))?;
        if !out.iter().any(|w| w.pid == pid) {
            out.push(Watched { pid, comm });
        }
    }
    for name in names {
        if name.is_empty() {
            return Err(UsageError::new(
                "--observe-name needs a process name".to_string(),
            ));
        }
        let mut found = 0;
        for pid in list_pids(proc_root) {
            if pid == me || out.iter().any(|w| w.pid == pid) {
                continue;
            }
            let Some(comm) = read_comm(proc_root, pid) else {
                continue;
            };
            if has_name(proc_root, pid, &comm, std::slice::from_ref(name)) {
                out.push(Watched { pid, comm });
                found += 1;
            }
        }
        if found == 0 {
            return Err(UsageError::new(format!(
                "--observe-name {name}: no running process has that name (--wait waits for one)"
            )));
        }
    }
    Ok(out)
}

/// What of `pids` and `names` has no running process yet, for a person
/// ("pid 123", "a process named postgres"); empty once all are there.
pub fn missing(proc_root: &Path, pids: &[u32], names: &[String]) -> Vec<String> {
    let me = std::process::id();
    let mut out: Vec<String> = pids
        .iter()
        .filter(|&&p| read_comm(proc_root, p).is_none())
        .map(|p| format!("pid {p}"))
        .collect();
    let running: Vec<(u32, String)> = list_pids(proc_root)
        .into_iter()
        .filter(|&p| p != me)
        .filter_map(|p| read_comm(proc_root, p).map(|c| (p, c)))
        .collect();
    for name in names {
        let one = std::slice::from_ref(name);
        if !running.iter().any(|(p, c)| has_name(proc_root, *p, c, one)) {
            out.push(format!("a process named {name}"));
        }
    }
    out
}

/// Waits until every process of `pids` and `names` runs, checking every
/// `every`; `say` gets one line when waiting starts. False when `stop`
/// was set first.
pub fn wait_for(
    proc_root: &Path,
    pids: &[u32],
    names: &[String],
    every: std::time::Duration,
    stop: &std::sync::atomic::AtomicBool,
    say: &mut dyn FnMut(&str),
) -> bool {
    let mut said = false;
    loop {
        let left = missing(proc_root, pids, names);
        if left.is_empty() {
            return true;
        }
        if !said {
            say(&format!(
                "waiting for {} to start (Ctrl-C to stop)",
                left.join(" and ")
            ));
            said = true;
        }
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// Whether a process's comm (cut to 15 bytes by the kernel) or the base
/// name of its argv[0] is one of `names`.
fn has_name(proc_root: &Path, pid: u32, comm: &str, names: &[String]) -> bool {
    if names
        .iter()
        .any(|n| n.chars().take(15).collect::<String>() == comm)
    {
        return true;
    }
    if names.is_empty() {
        return false;
    }
    let argv0 = std::fs::read(proc_root.join(format!("{pid}/cmdline")))
        .ok()
        .and_then(|b| {
            let first = b.split(|&c| c == 0).next()?.to_vec();
            let s = String::from_utf8_lossy(&first).to_string();
            s.rsplit('/').next().map(str::to_string)
        });
    argv0.is_some_and(|a| names.contains(&a))
}

/// Parent pid and comm from /proc/PID/stat.
fn read_parent(proc_root: &Path, pid: u32) -> Option<(u32, String)> {
    let s = std::fs::read_to_string(proc_root.join(format!("{pid}/stat"))).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s[open + 1..close].to_string();
    let ppid = s[close + 1..].split_whitespace().nth(1)?.parse().ok()?;
    Some((ppid, comm))
}

/// Finds the processes that joined since the last look: children of a
/// watched process (at any depth) and processes with a followed name.
/// Each pid is judged once; `known` remembers the verdicts.
pub struct Discover {
    proc_root: PathBuf,
    follow: Follow,
    known: HashSet<u32>,
}

impl Discover {
    pub fn new(proc_root: &Path, follow: Follow, watched: &[Watched]) -> Discover {
        let mut known: HashSet<u32> = watched.iter().map(|w| w.pid).collect();
        known.insert(std::process::id());
        Discover {
            proc_root: proc_root.to_path_buf(),
            follow,
            known,
        }
    }

    /// New processes to watch, given the ones watched now.
    pub fn scan(&mut self, watched: &[Watched]) -> Vec<Watched> {
        let mut fresh: Vec<(u32, u32, String)> = Vec::new();
        for pid in list_pids(&self.proc_root) {
            if self.known.insert(pid) {
                if let Some((ppid, comm)) = read_parent(&self.proc_root, pid) {
                    fresh.push((pid, ppid, comm));
                }
            }
        }
        let mut out: Vec<Watched> = Vec::new();
        // Parents come before children in /proc order only mostly: repeat
        // until no more join.
        loop {
            let before = out.len();
            fresh.retain(|(pid, ppid, comm)| {
                let parent_watched = watched.iter().chain(&out).any(|w| w.pid == *ppid);
                let join =
                    parent_watched || has_name(&self.proc_root, *pid, comm, &self.follow.names);
                if join {
                    out.push(Watched {
                        pid: *pid,
                        comm: comm.clone(),
                    });
                }
                !join
            });
            if out.len() == before {
                break;
            }
        }
        out
    }
}

fn read_comm(proc_root: &Path, pid: u32) -> Option<String> {
    std::fs::read_to_string(proc_root.join(format!("{pid}/comm")))
        .ok()
        .map(|s| s.trim_end().to_string())
}

fn list_pids(proc_root: &Path) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(proc_root)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

#[derive(Clone, Debug)]
struct Run {
    pid: u32,
    /// The process's and the thread's names.
    proc_comm: String,
    comm: String,
    start_ns: u64,
    stack: Option<String>,
}

impl Run {
    fn blocked(self, tid: u32, dur_ns: Option<u64>) -> Blocked {
        Blocked {
            who: Who::Process {
                pid: self.pid,
                comm: self.proc_comm,
                tid,
                thread_comm: self.comm,
            },
            op: OpKind::Blocked,
            start_ns: self.start_ns,
            dur_ns,
            stack: self.stack,
            call: None,
            blocked_ns: None,
            behind: None,
        }
    }
}

/// Turns samples of thread states into stalls (pure).
#[derive(Debug)]
pub struct DRuns {
    threshold_ns: u64,
    open: HashMap<u32, Run>,
}

impl DRuns {
    pub fn new(threshold: Duration) -> DRuns {
        DRuns {
            threshold_ns: threshold.as_nanos() as u64,
            open: HashMap::new(),
        }
    }

    /// One sample of one process: its threads and whether each is in D.
    /// Returns the runs of that process that ended (long enough to count).
    pub fn update(&mut self, p: &Watched, t_ns: u64, tasks: &[(u32, &str, bool)]) -> Vec<Blocked> {
        let pid = p.pid;
        for &(tid, comm, in_d) in tasks {
            if in_d {
                self.open.entry(tid).or_insert_with(|| Run {
                    pid,
                    proc_comm: p.comm.clone(),
                    comm: comm.to_string(),
                    start_ns: t_ns,
                    stack: None,
                });
            }
        }
        let ended: Vec<u32> = self
            .open
            .iter()
            .filter(|(tid, r)| r.pid == pid && !tasks.iter().any(|&(t, _, d)| t == **tid && d))
            .map(|(tid, _)| *tid)
            .collect();
        self.close(&ended, t_ns)
    }

    /// Every run of `pid` ends (the process exited) or all runs (at stop).
    pub fn close_all(&mut self, pid: Option<u32>, t_ns: u64) -> Vec<Blocked> {
        let tids: Vec<u32> = self
            .open
            .iter()
            .filter(|(_, r)| pid.is_none_or(|p| r.pid == p))
            .map(|(t, _)| *t)
            .collect();
        self.close(&tids, t_ns)
    }

    fn close(&mut self, tids: &[u32], t_ns: u64) -> Vec<Blocked> {
        let mut out = Vec::new();
        for tid in tids {
            let Some(r) = self.open.remove(tid) else {
                continue;
            };
            let dur_ns = t_ns.saturating_sub(r.start_ns);
            if dur_ns >= self.threshold_ns {
                out.push(r.blocked(*tid, Some(dur_ns)));
            }
        }
        out.sort_by_key(|s| s.start_ns);
        out
    }

    /// Open runs at least as long as the threshold at `t_ns` (`dur_ns` None).
    pub fn ongoing(&self, t_ns: u64) -> Vec<Blocked> {
        let mut v: Vec<Blocked> = self
            .open
            .iter()
            .filter(|(_, r)| t_ns.saturating_sub(r.start_ns) >= self.threshold_ns)
            .map(|(tid, r)| r.clone().blocked(*tid, None))
            .collect();
        v.sort_by_key(|s| (s.start_ns, s.who.thread()));
        v
    }

    /// Whether a stack read of this thread could still tell us more.
    pub fn wants_stack(&self, tid: u32) -> bool {
        self.open
            .get(&tid)
            .is_some_and(|r| r.stack.as_deref().and_then(stack_cause).is_none())
    }

    /// Keeps a stack for the open run, preferring a conclusive one.
    pub fn set_stack(&mut self, tid: u32, stack: String) {
        if let Some(r) = self.open.get_mut(&tid) {
            if r.stack.is_none() || stack_cause(&stack).is_some() {
                r.stack = Some(stack);
            }
        }
    }
}

/// Counters of one process at the previous sample.
#[derive(Clone, Debug, Default)]
struct Prev {
    faults: HashMap<u32, (u64, u64)>,
    write_bytes: Option<u64>,
}

/// Folds one process's thread stats into a tick entry, given the previous
/// counters (pure). A thread seen for the first time adds no faults: its
/// counts so far happened before we looked.
fn proc_tick(
    pid: u32,
    tasks: &[TaskStat],
    wb: Option<u64>,
    prev: &mut Prev,
    first: bool,
) -> ProcTick {
    let mut t = ProcTick {
        pid,
        threads: tasks.len() as u32,
        d_threads: tasks.iter().filter(|t| t.state == 'D').count() as u32,
        ..ProcTick::default()
    };
    let mut faults = HashMap::with_capacity(tasks.len());
    for k in tasks {
        if let Some(&(mi, ma)) = prev.faults.get(&k.tid) {
            t.minflt += k.minflt.saturating_sub(mi);
            t.majflt += k.majflt.saturating_sub(ma);
        }
        faults.insert(k.tid, (k.minflt, k.majflt));
    }
    prev.faults = faults;
    t.write_bytes = match (wb, prev.write_bytes) {
        (Some(now), Some(before)) if !first => Some(now.saturating_sub(before)),
        (Some(_), _) => Some(0),
        (None, _) => None,
    };
    prev.write_bytes = wb;
    t
}

/// The sampler thread of observe mode.
pub struct Observer {
    stop: Arc<AtomicBool>,
    /// Its period in ns (`set_every`).
    every_ns: Arc<AtomicU64>,
    handle: Option<JoinHandle<()>>,
}

impl Observer {
    pub fn start(
        watched: Vec<Watched>,
        follow: Follow,
        every: Duration,
        threshold: Duration,
        clock: Clock,
        tx: Sender<Msg>,
    ) -> Observer {
        let stop = Arc::new(AtomicBool::new(false));
        let every_ns = Arc::new(AtomicU64::new(every.as_nanos() as u64));
        let (st, ev) = (stop.clone(), every_ns.clone());
        let handle = std::thread::Builder::new()
            .name("ss-observe".into())
            .spawn(move || sample_loop(&watched, follow, &ev, threshold, clock, &tx, &st))
            .expect("spawn observer");
        Observer {
            stop,
            every_ns,
            handle: Some(handle),
        }
    }

    /// Samples every `every` from the next sample on. With the scheduler's
    /// events timing the blocks the sampler is needed only for faults,
    /// write_bytes, threads that come and go and blocks the events did not
    /// see start, which a slower pace serves as well at a quarter of the
    /// cost (the session reads the stacks of blocked threads itself).
    pub fn set_every(&self, every: Duration) {
        self.every_ns
            .store(every.as_nanos() as u64, Ordering::Relaxed);
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn read_tasks(task_dir: &Path) -> std::io::Result<Vec<TaskStat>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(task_dir)?.flatten() {
        // A thread that exits between the listing and the read is skipped.
        if let Ok(s) = std::fs::read_to_string(e.path().join("stat")) {
            if let Some(t) = parse_stat(&s) {
                out.push(t);
            }
        }
    }
    out.sort_by_key(|t| t.tid);
    Ok(out)
}

/// The observer's state between samples; `sample_once` is one pass over
/// every watched process, apart from the loop that paces it.
struct Sampler {
    proc_root: PathBuf,
    watched: Vec<Watched>,
    discover: Discover,
    next_scan_ns: u64,
    runs: DRuns,
    prev: BTreeMap<u32, Prev>,
    last_tids: Vec<(u32, u32)>,
    /// Each thread's comm as last reported (`ObsTick::names`).
    last_names: HashMap<u32, String>,
    first: bool,
}

impl Sampler {
    fn new(watched: &[Watched], follow: Follow, threshold: Duration) -> Sampler {
        let proc_root = PathBuf::from("/proc");
        Sampler {
            discover: Discover::new(&proc_root, follow, watched),
            next_scan_ns: 0,
            proc_root,
            watched: watched.to_vec(),
            runs: DRuns::new(threshold),
            prev: BTreeMap::new(),
            last_tids: Vec::new(),
            last_names: HashMap::new(),
            first: true,
        }
    }

    /// One sample of every process still alive, at `t_ns`.
    fn sample_once(&mut self, t_ns: u64) -> ObsTick {
        let mut tick = ObsTick {
            t_ns,
            ..ObsTick::default()
        };
        let scan = t_ns >= self.next_scan_ns || self.first;
        if scan {
            self.next_scan_ns = t_ns + DISCOVER_EVERY.as_nanos() as u64;
            tick.joined = self.discover.scan(&self.watched);
            self.watched.extend(tick.joined.iter().cloned());
        }
        let mut tids = Vec::new();
        for p in self.watched.clone() {
            let dir = self.proc_root.join(p.pid.to_string());
            match read_tasks(&dir.join("task")) {
                // A zombie (exited, not yet reaped by its parent) is gone too.
                Ok(tasks) if tasks.iter().any(|t| !matches!(t.state, 'Z' | 'X')) => {
                    self.sample_process(&p, &dir, &tasks, scan, &mut tick);
                    tids.extend(tasks.iter().map(|t| (t.tid, p.pid)));
                    for t in &tasks {
                        if self.last_names.get(&t.tid) != Some(&t.comm) {
                            self.last_names.insert(t.tid, t.comm.clone());
                            tick.names.push((t.tid, t.comm.clone()));
                        }
                    }
                }
                _ => {
                    self.watched.retain(|w| w.pid != p.pid);
                    tick.exited.push(p.pid);
                    tick.stalls.extend(self.runs.close_all(Some(p.pid), t_ns));
                }
            }
        }
        if tids != self.last_tids {
            let live: HashSet<u32> = tids.iter().map(|t| t.0).collect();
            self.last_names.retain(|tid, _| live.contains(tid));
            tick.tids = Some(tids.clone());
            self.last_tids = tids;
        }
        tick.ongoing = self.runs.ongoing(t_ns);
        self.first = false;
        tick
    }

    /// One process's threads: D-state runs, their stacks, faults, write_bytes.
    fn sample_process(
        &mut self,
        p: &Watched,
        dir: &Path,
        tasks: &[TaskStat],
        read_io: bool,
        tick: &mut ObsTick,
    ) {
        let states: Vec<(u32, &str, bool)> = tasks
            .iter()
            .map(|t| (t.tid, t.comm.as_str(), t.state == 'D'))
            .collect();
        tick.stalls.extend(self.runs.update(p, tick.t_ns, &states));
        for t in tasks.iter().filter(|t| t.state == 'D') {
            if self.runs.wants_stack(t.tid) {
                let base = format!("{}/task/{}", dir.display(), t.tid);
                if let Some(s) = crate::source::watchdog::task_stack(&base) {
                    self.runs.set_stack(t.tid, s);
                }
            }
        }
        let prev = self.prev.entry(p.pid).or_default();
        // Between reads write_bytes stands still (a delta of 0).
        let wb = if read_io {
            std::fs::read_to_string(dir.join("io"))
                .ok()
                .and_then(|s| parse_write_bytes(&s))
        } else {
            prev.write_bytes
        };
        tick.procs
            .push(proc_tick(p.pid, tasks, wb, prev, self.first));
    }

    /// At stop: runs still open end at the last sample (not at a new time
    /// past the run's end, which would open an interval of its own).
    fn finish(&mut self, last_t: u64) -> ObsTick {
        ObsTick {
            t_ns: last_t,
            stalls: self.runs.close_all(None, last_t),
            ..ObsTick::default()
        }
    }
}

/// How often /proc is scanned for processes that joined (a listing of
/// /proc, one stat read per pid never seen before) and /proc/PID/io is
/// read: a child that lives longer than this is caught, and write_bytes
/// needs no finer grain than an interval. Both cost the observer more than
/// the per-thread stat reads that must happen every sample.
pub const DISCOVER_EVERY: Duration = Duration::from_millis(200);

/// Samples every `every` until stopped or the receiver is gone.
fn sample_loop(
    watched: &[Watched],
    follow: Follow,
    every_ns: &AtomicU64,
    threshold: Duration,
    clock: Clock,
    tx: &Sender<Msg>,
    stop: &AtomicBool,
) {
    let mut sampler = Sampler::new(watched, follow, threshold);
    let mut next = clock.now_ns();
    let mut last_t = next;
    loop {
        if stop.load(Ordering::Relaxed) {
            let _ = tx.send(Msg::Observe(Box::new(sampler.finish(last_t))));
            return;
        }
        last_t = clock.now_ns();
        let tick = sampler.sample_once(last_t);
        if tx.send(Msg::Observe(Box::new(tick))).is_err() {
            return;
        }
        next += every_ns.load(Ordering::Relaxed);
        let now = clock.now_ns();
        if next > now {
            std::thread::sleep(Duration::from_nanos(next - now));
        } else {
            next = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32) -> Watched {
        Watched {
            pid,
            comm: format!("p{pid}"),
        }
    }

    #[test]
    fn stat_lines_with_odd_comms_parse() {
        let s = "4242 (Mutation Stage) (1)) D 1 4242 4242 0 -1 4194560 1500 0 7 0 10 5 0 0 20 0 40 0 100 0 0";
        let t = parse_stat(s).unwrap();
        assert_eq!(t.tid, 4242);
        assert_eq!(t.comm, "Mutation Stage) (1)");
        assert_eq!(t.state, 'D');
        assert_eq!((t.minflt, t.majflt), (1500, 7));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("12 (x) S 1"), None);
    }

    #[test]
    fn write_bytes_is_read_from_proc_io() {
        let io = "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 0\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
        assert_eq!(parse_write_bytes(io), Some(8192));
        assert_eq!(parse_write_bytes("rchar: 1\n"), None);
    }

    #[test]
    fn a_d_run_past_the_threshold_is_one_stall_with_its_best_stack() {
        let ms = 1_000_000;
        let mut r = DRuns::new(Duration::from_millis(100));
        assert!(r
            .update(&p(7), 0, &[(70, "w", false), (71, "x", false)])
            .is_empty());
        assert!(r
            .update(&p(7), 50 * ms, &[(70, "w", true), (71, "x", true)])
            .is_empty());
        assert!(r.wants_stack(70));
        r.set_stack(70, "io_schedule_timeout".into());
        assert!(
            r.wants_stack(70),
            "an inconclusive stack asks for another look"
        );
        r.set_stack(70, "balance_dirty_pages < fault_dirty_shared_page".into());
        assert!(!r.wants_stack(70));
        r.set_stack(70, "schedule".into());
        // 71 leaves D after 50 ms: too short. 70 stays in D for 150 ms.
        assert!(r
            .update(&p(7), 100 * ms, &[(70, "w", true), (71, "x", false)])
            .is_empty());
        let s = r.update(&p(7), 200 * ms, &[(70, "w", false), (71, "x", false)]);
        assert_eq!(s.len(), 1);
        assert_eq!(
            (s[0].who.thread(), s[0].start_ns, s[0].dur_ns),
            (70, 50 * ms, Some(150 * ms))
        );
        assert_eq!(
            s[0].who,
            Who::Process {
                pid: 7,
                comm: "p7".into(),
                tid: 70,
                thread_comm: "w".into()
            }
        );
        assert!(s[0]
            .stack
            .as_deref()
            .unwrap()
            .starts_with("balance_dirty_pages"));
    }

    #[test]
    fn runs_of_other_processes_are_not_closed_by_one_process_sample() {
        let ms = 1_000_000;
        let mut r = DRuns::new(Duration::from_millis(10));
        r.update(&p(1), 0, &[(10, "a", true)]);
        r.update(&p(2), 0, &[(20, "b", true)]);
        assert!(r.update(&p(2), 50 * ms, &[(20, "b", true)]).is_empty());
        // pid 1 exits while its thread is in D: the run ends there.
        let s = r.close_all(Some(1), 60 * ms);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].who.pid(), Some(1));
        let rest = r.close_all(None, 70 * ms);
        assert_eq!((rest.len(), rest[0].who.thread()), (1, 20));
    }

    #[test]
    fn fault_and_write_deltas_ignore_what_happened_before_we_looked() {
        let t = |tid, minflt, majflt, state| TaskStat {
            tid,
            comm: "t".into(),
            state,
            minflt,
            majflt,
        };
        let mut p = Prev::default();
        let a = proc_tick(5, &[t(1, 100, 2, 'S')], Some(4096), &mut p, true);
        assert_eq!((a.minflt, a.majflt, a.write_bytes), (0, 0, Some(0)));
        let b = proc_tick(
            5,
            &[t(1, 130, 3, 'D'), t(2, 50, 0, 'R')],
            Some(12288),
            &mut p,
            false,
        );
        assert_eq!((b.threads, b.d_threads), (2, 1));
        assert_eq!((b.minflt, b.majflt, b.write_bytes), (30, 1, Some(8192)));
        let c = proc_tick(5, &[t(2, 60, 0, 'R')], None, &mut p, false);
        assert_eq!((c.minflt, c.write_bytes), (10, None));
    }

    #[test]
    fn wait_for_returns_once_the_named_process_appears() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let names = vec!["postgres".to_string()];
        assert_eq!(
            missing(&root, &[42], &names),
            vec!["pid 42".to_string(), "a process named postgres".to_string()]
        );
        let maker = {
            let root = root.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                let d = root.join("4242");
                std::fs::create_dir_all(&d).unwrap();
                std::fs::write(d.join("cmdline"), "/usr/lib/postgresql/16/bin/postgres\0").unwrap();
                // comm last: the process is found once it is whole.
                std::fs::write(d.join("comm"), "postgres\n").unwrap();
            })
        };
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut said = Vec::new();
        let found = wait_for(
            &root,
            &[],
            &names,
            Duration::from_millis(5),
            &stop,
            &mut |l| said.push(l.to_string()),
        );
        maker.join().unwrap();
        assert!(found);
        assert_eq!(
            said,
            vec!["waiting for a process named postgres to start (Ctrl-C to stop)"]
        );
        assert!(missing(&root, &[], &names).is_empty());
        // Stopped before anything appears: false, at once.
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let other = vec!["etcd".to_string()];
        assert!(!wait_for(
            &root,
            &[],
            &other,
            Duration::from_secs(60),
            &stop,
            &mut |_| {}
        ));
    }

    #[test]
    fn resolve_finds_pids_and_names_and_refuses_unknown_ones() {
        let dir = tempfile::tempdir().unwrap();
        let mk = |pid: u32, comm: &str, argv0: &str| {
            let d = dir.path().join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(d.join("cmdline"), format!("{argv0}\0-Xmx1g\0")).unwrap();
        };
        mk(100, "java", "/usr/bin/java");
        mk(200, "ceph-osd", "/usr/bin/ceph-osd");
        mk(300, "python3", "/usr/bin/python3");
        let w = resolve(dir.path(), &[200], &["java".into()]).unwrap();
        assert_eq!(
            w,
            vec![
                Watched {
                    pid: 200,
                    comm: "ceph-osd".into()
                },
                Watched {
                    pid: 100,
                    comm: "java".into()
                }
            ]
        );
        let e = resolve(dir.path(), &[999], &[]).unwrap_err();
        assert!(e.to_string().contains("999: no such process"), "{e}");
        let e = resolve(dir.path(), &[], &["postgres".into()]).unwrap_err();
        assert!(e.to_string().contains("postgres"), "{e}");
    }
}
