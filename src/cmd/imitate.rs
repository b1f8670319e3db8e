//! `stallscope imitate`: replay an observed server's write pattern (its
//! recording's captured calls, `analysis::imitation::plan`) as threads of
//! this process, in open loop from the intended issue times, on files of
//! its own under `--dir`; and `--check`, the fidelity gate of an
//! imitation's recording against the server's.
//!
//! The imitation is observed like any server (`run --observe PID`), so
//! the gate compares the same instrument's figures on both sides. Each
//! thread is named `imK` for the K-th role (a thread name holds 15
//! bytes); the gate maps the names back.
//!
//! Per op a thread sleeps to its issue time and makes one system call on
//! a buffer allocated before it starts: no lock, no allocation; its
//! counts are relaxed atomics the progress line reads.

use crate::analysis::imitation::fidelity;
use crate::analysis::imitation::plan::{Plan, Stream, SyncKind};
use anyhow::Context;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A file the imitation writes wraps to its start past this size, so a
/// looped imitation's disk use stays bounded (the server's file sizes
/// were not captured).
const FILE_WRAP: u64 = 64 << 20;
/// An op issued later than this after its intended time counts as late.
const LATE: Duration = Duration::from_millis(10);
/// A thread waiting for its next op looks at the stop flag this often.
const STOP_SLICE: Duration = Duration::from_millis(100);

pub struct Options {
    pub recording: PathBuf,
    pub dir: Option<PathBuf>,
    pub repeat: bool,
    pub check: Option<PathBuf>,
    pub json: bool,
}

pub fn imitate(o: &Options, stop: &Arc<AtomicBool>) -> anyhow::Result<()> {
    let server = crate::sink::recording::read(&o.recording)?;
    if let Some(imit) = &o.check {
        let imitation = crate::sink::recording::read(imit)?;
        let g = fidelity::gate(&server.snapshots, &imitation.snapshots);
        if o.json {
            println!("{}", serde_json::to_string_pretty(&g)?);
        } else {
            print!("{}", fidelity::text(&g));
        }
        return Ok(());
    }
    let plan = Plan::of(&server.snapshots);
    if plan.streams.is_empty() {
        return Err(crate::base::error::UsageError::new(format!(
            "{}: no observed process has captured calls to imitate (record `run --observe …` as root, call bounds on)",
            o.recording.display()
        ))
        .into());
    }
    let dir = o.dir.as_deref().ok_or_else(|| {
        crate::base::error::UsageError::new(
            "imitate needs --dir DIR (where its files go; a lab's mount)",
        )
    })?;
    run(&plan, dir, o.repeat, stop)
}

/// `run --imitate REC` and the dashboard's: the imitation as a child
/// process (`imitate REC --dir TARGET --loop`), observed in place of a
/// server; stopped (SIGINT, then killed after 5 s) on drop.
pub struct Imitation(std::process::Child);

/// Starts the imitation of `rec` for a session of `cfg` and makes it the
/// process observed: its files go under the first target (default
/// $TMPDIR, else /var/tmp), which our writers then leave alone. `quiet`
/// (the dashboard) sends its progress lines to nowhere instead of stderr.
pub fn attach(
    cfg: &mut crate::config::Config,
    rec: Option<&Path>,
    quiet: bool,
) -> anyhow::Result<Option<Imitation>> {
    let Some(rec) = rec else { return Ok(None) };
    if !cfg.observe.is_empty() || !cfg.observe_name.is_empty() {
        return Err(crate::base::error::UsageError::new(
            "--imitate observes its own imitation: leave out --observe and --observe-name",
        )
        .into());
    }
    let dir = cfg
        .targets
        .first()
        .cloned()
        .unwrap_or_else(crate::session::default_target);
    // Fail here, with the recording's name, rather than in the child.
    if Plan::of(&crate::sink::recording::read(rec)?.snapshots)
        .streams
        .is_empty()
    {
        return Err(crate::base::error::UsageError::new(format!(
            "{}: no observed process has captured calls to imitate",
            rec.display()
        ))
        .into());
    }
    let child = std::process::Command::new(std::env::current_exe()?)
        .arg("imitate")
        .arg(rec)
        .arg("--dir")
        .arg(&dir)
        .arg("--loop")
        .stderr(if quiet {
            std::process::Stdio::null()
        } else {
            std::process::Stdio::inherit()
        })
        .spawn()
        .context("starting the imitation")?;
    cfg.targets.clear();
    cfg.observe = vec![child.id()];
    // Its threads start at once; the observer's first look finds them.
    std::thread::sleep(Duration::from_millis(300));
    Ok(Some(Imitation(child)))
}

impl Drop for Imitation {
    fn drop(&mut self) {
        // SAFETY: our own child, not yet reaped.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Counts of one stream, read by the progress line.
#[derive(Default)]
struct Counts {
    writes: AtomicU64,
    bytes: AtomicU64,
    syncs: AtomicU64,
    late: AtomicU64,
}

/// The imitation's folder, removed with its files on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("stallscope: removing {}: {e}", self.0.display());
        }
    }
}

fn run(plan: &Plan, dir: &Path, repeat: bool, stop: &Arc<AtomicBool>) -> anyhow::Result<()> {
    let scratch = Scratch(dir.join(format!("stallscope-imitate-{}", std::process::id())));
    std::fs::create_dir(&scratch.0).with_context(|| format!("creating {}", scratch.0.display()))?;
    eprintln!(
        "imitating {} stream(s) of {} role(s) over {:.0} s{}; files in {}",
        plan.streams.len(),
        plan.roles().len(),
        plan.span_s,
        if repeat {
            ", repeated until stopped"
        } else {
            ""
        },
        scratch.0.display()
    );
    for r in plan.roles() {
        eprintln!("  {} plays {r}", plan.thread_name(&r));
    }
    if !plan.left_out.is_empty() {
        let v: Vec<String> = plan
            .left_out
            .iter()
            .map(|(c, n)| format!("{c} ×{n}"))
            .collect();
        eprintln!("  left out (not replayable): {}", v.join(", "));
    }
    eprintln!(
        "  observe it: stallscope run --observe {} --record IMITATION.rec",
        std::process::id()
    );
    // On a lab capped through cgroup v2, its writes must be in the lab's group.
    let _cgroup = crate::source::cgroup::join_for_targets(&[dir.to_path_buf()]);
    let t0 = Instant::now();
    let mut threads = Vec::new();
    let mut counts = Vec::new();
    for (i, s) in plan.streams.iter().enumerate() {
        let c = Arc::new(Counts::default());
        counts.push(c.clone());
        let files = open_files(&scratch.0, i, s.files.max(1))?;
        let (s, stop, span) = (s.clone(), stop.clone(), plan.span_s);
        threads.push(
            std::thread::Builder::new()
                .name(plan.thread_name(&s.role))
                .spawn(move || play(&s, &files, t0, span, repeat, &c, &stop))?,
        );
    }
    let planned = |t: f64| planned_by(plan, t);
    let mut last = Instant::now();
    while !threads.iter().all(|t| t.is_finished()) && !stop.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if last.elapsed() >= Duration::from_secs(1) {
            last = Instant::now();
            eprintln!(
                "{}",
                progress(t0.elapsed().as_secs_f64(), plan.span_s, &counts, planned)
            );
        }
    }
    stop.store(true, Relaxed);
    for t in threads {
        t.join()
            .map_err(|_| anyhow::anyhow!("an imitation thread panicked"))??;
    }
    eprintln!(
        "{}",
        progress(t0.elapsed().as_secs_f64(), plan.span_s, &counts, planned)
    );
    Ok(())
}

fn open_files(dir: &Path, stream: usize, n: u32) -> anyhow::Result<Vec<File>> {
    (0..n)
        .map(|j| {
            let p = dir.join(format!("s{stream}-f{j}"));
            OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(&p)
                .with_context(|| format!("creating {}", p.display()))
        })
        .collect()
}

/// (writes, bytes, syncs) the plan meant to have issued `t` seconds in
/// (looped plans: the rounds so far and the part of this one).
fn planned_by(plan: &Plan, t: f64) -> (f64, f64, f64) {
    let rounds = (t / plan.span_s.max(1e-9)).floor();
    let within = t - rounds * plan.span_s;
    let mut sum = (0.0, 0.0, 0.0);
    for s in plan.streams.iter().flat_map(|s| &s.steps) {
        let part = ((within - s.start_s) / s.len_s.max(1e-9)).clamp(0.0, 1.0) + rounds;
        sum.0 += part * s.write_count() as f64;
        sum.1 += part * s.write_bytes() as f64;
        sum.2 += part * s.sync_count() as f64;
    }
    sum
}

fn progress(
    t: f64,
    span: f64,
    counts: &[Arc<Counts>],
    planned: impl Fn(f64) -> (f64, f64, f64),
) -> String {
    let sum = |f: fn(&Counts) -> &AtomicU64| counts.iter().map(|c| f(c).load(Relaxed)).sum::<u64>();
    let (w, b, s, late) = (
        sum(|c| &c.writes),
        sum(|c| &c.bytes),
        sum(|c| &c.syncs),
        sum(|c| &c.late),
    );
    let (pw, pb, ps) = planned(t);
    let pct = |done: u64, plan: f64| {
        if plan < 0.5 {
            "-".to_string()
        } else {
            format!("{:.0} %", done as f64 * 100.0 / plan)
        }
    };
    format!(
        "imitate {t:.0}/{span:.0} s: writes {w} ({} of plan so far), {} MiB ({}), syncs {s} ({}), late ops {late}",
        pct(w, pw),
        b >> 20,
        pct(b, pb),
        pct(s, ps),
    )
}

/// One stream's ops, in time order, round after round while `repeat`.
fn play(
    s: &Stream,
    files: &[File],
    t0: Instant,
    span: f64,
    repeat: bool,
    c: &Counts,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let biggest = s
        .steps
        .iter()
        .flat_map(|x| x.writes.iter().map(|w| w.0))
        .max()
        .unwrap_or(1);
    let buf = vec![0x5au8; biggest as usize];
    let mut offsets = vec![0u64; files.len()];
    let (mut file, mut round) = (0usize, 0u32);
    loop {
        for step in &s.steps {
            let writes = step.write_count();
            let syncs = step.sync_count();
            let ops = writes + syncs;
            let (mut wi, mut si) = (Cursor::default(), Cursor::default());
            for j in 0..ops {
                if stop.load(Relaxed) {
                    return Ok(());
                }
                let due = round as f64 * span + step.start_s + step.len_s * j as f64 / ops as f64;
                let due = t0 + Duration::from_secs_f64(due);
                let now = Instant::now();
                if now > due + LATE {
                    c.late.fetch_add(1, Relaxed);
                }
                // In slices, so that a stop is seen within one.
                while let Some(left) = due.checked_duration_since(Instant::now()) {
                    if stop.load(Relaxed) {
                        return Ok(());
                    }
                    std::thread::sleep(left.min(STOP_SLICE));
                }
                // The syncs spread evenly among the writes.
                let is_sync = (j + 1) * syncs / ops > j * syncs / ops;
                if is_sync {
                    let kind = si.next(step.syncs.iter().map(|(k, n)| (*k, *n)));
                    sync(&files[file], kind)?;
                    c.syncs.fetch_add(1, Relaxed);
                } else {
                    let size = wi.next(step.writes.iter().copied());
                    file = (file + 1) % files.len();
                    let n = size.min(biggest) as usize;
                    files[file].write_at(&buf[..n], offsets[file])?;
                    offsets[file] = (offsets[file] + n as u64) % FILE_WRAP;
                    c.writes.fetch_add(1, Relaxed);
                    c.bytes.fetch_add(n as u64, Relaxed);
                }
            }
        }
        round += 1;
        if !repeat {
            return Ok(());
        }
    }
}

/// Walks a list of (item, count) pairs one item at a time.
#[derive(Default)]
struct Cursor {
    at: usize,
    used: u64,
}

impl Cursor {
    fn next<T: Copy + Default>(&mut self, items: impl Iterator<Item = (T, u64)>) -> T {
        let mut last = T::default();
        for (k, (item, n)) in items.enumerate() {
            last = item;
            if k == self.at {
                self.used += 1;
                if self.used >= n {
                    (self.at, self.used) = (self.at + 1, 0);
                }
                return item;
            }
        }
        last
    }
}

fn sync(f: &File, kind: SyncKind) -> std::io::Result<()> {
    match kind {
        SyncKind::Fsync => f.sync_all(),
        SyncKind::Fdatasync => f.sync_data(),
        SyncKind::SyncFileRange => {
            // SAFETY: a valid fd; offset 0, length 0 = to the end of the file.
            let r =
                unsafe { libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
            if r == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        }
        SyncKind::Syncfs => {
            // SAFETY: a valid fd: syncs the filesystem it is on, not the machine.
            if unsafe { libc::syncfs(f.as_raw_fd()) } == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_hands_out_each_item_its_count_times() {
        let items = [(10u64, 2u64), (20, 1), (30, 3)];
        let mut c = Cursor::default();
        let got: Vec<u64> = (0..7).map(|_| c.next(items.iter().copied())).collect();
        // Past the end it keeps the last one.
        assert_eq!(got, [10, 10, 20, 30, 30, 30, 30]);
    }
}
