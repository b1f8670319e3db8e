//! tracefs writeback events (root only): which writer threads the kernel made
//! sleep in `balance_dirty_pages`, which waited on a page under writeback, and
//! why the flusher started writing.
//!
//! Everything happens in a private instance `instances/stallscope-<pid>`, never
//! in the global buffer, so other tracing users are left alone. The text of
//! `trace_pipe` is parsed by pure functions ([`parse_line`], [`parse_lost`]) that
//! are tested on lines captured on a real kernel (`tests/fixtures/trace/`).
//!
//! Units (include/trace/events/writeback.h): `pause`, `paused`, `period` are
//! jiffies converted with `* 1000 / HZ`, i.e. milliseconds with jiffy
//! granularity; `limit`, `setpoint`, `dirty` are pages. With `trace_clock=mono`
//! the timestamp column is CLOCK_MONOTONIC, the clock of [`mono_now_ns`].

use crate::model::kernel::{Comm, TraceEvent, TraceKind};
use crate::source::sched_raw::{parse_page, SchedFormat, WAIT_EVENT};
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Instance names are `stallscope-<pid>`, so a killed run's leftover is recognisable.
pub const INSTANCE_PREFIX: &str = "stallscope-";
/// Where tracefs lives on current kernels (and where we mount it if needed).
pub const DEFAULT_TRACEFS: &str = "/sys/kernel/tracing";
/// The `writeback` events we enable, in this order.
pub const EVENTS: [&str; 3] = [
    "balance_dirty_pages",
    "folio_wait_writeback",
    "writeback_start",
];
/// The scheduler's events that time every block of an observed thread
/// exactly (`enable_sched`).
/// sched_waking, not sched_wakeup: it runs in the waker's own context (a
/// wakeup queued to another CPU is reported there, in whatever task runs).
pub const SCHED_EVENTS: [&str; 2] = ["sched_switch", "sched_waking"];
/// Per-CPU ring buffer of our instance: enough for a few seconds of throttling
/// events from filtered writers between drains, small next to RAM.
pub const BUFFER_SIZE_KB: u32 = 1024;
/// Per-CPU ring buffer of the scheduler's instance: with wake-up chains a
/// busy server makes 60 k events a second (~4 MB/s) between drains.
pub const SCHED_BUFFER_KB: u32 = 4096;
/// At most this much is read per `drain` call, so a flood cannot stall the caller.
const DRAIN_MAX_BYTES: usize = 8 << 20;
const TRACEFS_MAGIC: u64 = 0x7472_6163;

/// CLOCK_MONOTONIC now, in ns: the clock of trace timestamps under trace_clock=mono.
/// Longest thread-id filter we write (the kernel refuses a page or more).
const MAX_FILTER_BYTES: usize = 3500;

pub fn mono_now_ns() -> u64 {
    crate::base::clock::mono_ns()
}

/// Parses one line of `trace_pipe` in the default text format, e.g.
/// `  dd-12927  [000] .....  1221.221672: balance_dirty_pages: bdi 7:2: limit=...`.
/// None for other events, `LOST` notices and anything malformed.
pub fn parse_line(line: &str) -> Option<TraceEvent> {
    let line = line.trim_end_matches(['\n', '\r']);
    if let Some(ev) = parse_sched(line) {
        return Some(ev);
    }
    // The earliest `: <event>: ` splits header from payload; a task name (at
    // most 15 bytes) is too short to contain one.
    let (at, event) = EVENTS
        .iter()
        .filter_map(|e| line.find(&format!(": {e}: ")).map(|i| (i, *e)))
        .min()?;
    let (tid, t_mono_ns) = parse_header(&line[..at])?;
    let payload = &line[at + event.len() + 4..];
    let (bdi, fields) = payload.strip_prefix("bdi ")?.split_once(": ")?;
    let bdi = bdi.to_string();
    let get = |key: &str| {
        fields
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    };
    let num = |key: &str| get(key)?.parse::<u64>().ok();
    let int = |key: &str| get(key)?.parse::<i64>().ok();
    let kind = match event {
        "balance_dirty_pages" => TraceKind::BalanceDirtyPages {
            bdi,
            limit: num("limit")?,
            setpoint: num("setpoint")?,
            dirty: num("dirty")?,
            pause_ms: int("pause")?,
            paused_ms: num("paused")?,
            period_ms: num("period")?,
        },
        "folio_wait_writeback" => TraceKind::WaitWriteback {
            bdi,
            ino: num("ino")?,
            index: num("index")?,
        },
        _ => TraceKind::WritebackStart {
            bdi,
            reason: get("reason")?.to_string(),
            nr_pages: int("nr_pages")?,
        },
    };
    Some(TraceEvent {
        t_mono_ns,
        tid,
        kind,
    })
}

/// A sched_switch into D or S, or a sched_waking / sched_wakeup. Names
/// may hold spaces: a value runs to the next ` key=`.
fn parse_sched(line: &str) -> Option<TraceEvent> {
    let between = |p: &str, from: &str, to: &str| -> Option<String> {
        let start = p.find(from)? + from.len();
        let end = start + p[start..].find(to)?;
        Some(p[start..end].to_string())
    };
    if let Some(at) = line.find(": sched_switch: ") {
        let (_, t) = parse_header(&line[..at])?;
        let p = &line[at + 16..];
        let state = between(p, " prev_state=", " ==> ")?;
        let sleep = if state.contains('D') {
            false
        } else if state.starts_with('S') {
            true
        } else {
            return None;
        };
        return Some(TraceEvent {
            t_mono_ns: t,
            tid: between(p, " prev_pid=", " ")?.parse().ok()?,
            kind: TraceKind::SchedBlock {
                comm: Comm::new(&between(p, "prev_comm=", " prev_pid=")?),
                sleep,
            },
        });
    }
    let at = line
        .find(": sched_waking: ")
        .or_else(|| line.find(": sched_wakeup: "))?;
    let header = &line[..at];
    let (waker, t) = parse_header(header)?;
    let p = &line[at + 16..];
    Some(TraceEvent {
        t_mono_ns: t,
        tid: between(p, " pid=", " ")?.parse().ok()?,
        kind: TraceKind::SchedWake {
            waker,
            waker_comm: task_name(header).unwrap_or_default(),
            irq: in_hardirq(header),
        },
    })
}

/// Whether the event ran in a hardware interrupt: the irq-info column
/// after the CPU (`d.h2.`) has `h` (or `H`, hardirq in softirq) third.
fn in_hardirq(header: &str) -> bool {
    let Some(after_cpu) = header.rsplit_once("] ").map(|(_, r)| r) else {
        return false;
    };
    let mut tokens = after_cpu.split_whitespace();
    match (tokens.next(), tokens.next()) {
        (Some(flags), Some(_ts)) if flags.len() >= 4 => {
            matches!(flags.as_bytes()[2], b'h' | b'H')
        }
        _ => false,
    }
}

/// The task name of a header (`  postgres-1234  [001] ...`).
fn task_name(header: &str) -> Option<String> {
    let task = header.trim_start().split(" [").next()?.trim_end();
    let task = task.split(" (").next()?;
    Some(task.rsplit_once('-')?.0.to_string())
}

/// The count of a `CPU:1 [LOST 300 EVENTS]` notice: the ring buffer overran
/// and that many events are missing, so a quiet spell is not proof of calm.
pub fn parse_lost(line: &str) -> Option<u64> {
    let rest = line.trim().strip_prefix("CPU:")?;
    let (_, rest) = rest.split_once(" [LOST ")?;
    rest.strip_suffix(" EVENTS]")?.parse().ok()
}

/// `task-pid [(tgid)] [cpu] [flags] secs.frac` → (pid, ns). Parsed from the
/// right because task names may contain spaces, dashes and brackets.
fn parse_header(h: &str) -> Option<(u32, u64)> {
    let h = h.trim_end();
    let (rest, ts) = h.rsplit_once(char::is_whitespace)?;
    let t = parse_timestamp(ts)?;
    let cpu_at = rest.rmatch_indices('[').map(|(i, _)| i).find(|&i| {
        let after = &rest[i + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0
            && after[digits..].starts_with(']')
            && after[digits + 1..]
                .chars()
                .next()
                .is_none_or(char::is_whitespace)
    })?;
    let mut task = rest[..cpu_at].trim_end();
    if task.ends_with(')') {
        // options/record-tgid adds `(  tgid)` after task-pid.
        task = task[..task.rfind('(')?].trim_end();
    }
    let (_, pid) = task.rsplit_once('-')?;
    Some((pid.parse().ok()?, t))
}

/// `1221.181003` (seconds, any fraction up to ns) → nanoseconds.
fn parse_timestamp(ts: &str) -> Option<u64> {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, ""));
    if secs.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let frac_ns = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32)
    };
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

/// A private tracefs instance with the writeback events enabled; torn down
/// (events off, instance removed, tracefs unmounted if we mounted it) on drop.
pub struct TraceSession {
    root: PathBuf,
    instance: PathBuf,
    mounted_by_us: bool,
    pipe: Option<File>,
    partial: Vec<u8>,
    /// The text pipe's read buffer, kept between drains.
    chunk: Vec<u8>,
    lost: u64,
    /// The scheduler's events are on (`enable_sched`).
    sched: bool,
    /// Sleeps in S are traced too (`enable_sched(true)`).
    chains: bool,
    /// The scheduler's events, in an instance of their own read raw.
    raw: Option<RawSched>,
    /// The watched threads' page waits are recorded with the scheduler's
    /// raw events (`set_sched_filter` turned them on), not as text.
    raw_waits: bool,
    /// Raw events past the moment the last drain began: another CPU's
    /// buffer may still get older ones.
    held: Vec<TraceEvent>,
}

/// The instance the scheduler's events go to, read as binary pages per CPU
/// (`source::sched_raw`): no text formatting for the most frequent events.
struct RawSched {
    instance: PathBuf,
    cpus: Vec<File>,
    fmt: SchedFormat,
    page: Vec<u8>,
}

impl TraceSession {
    /// Needs root. Mounts tracefs at `tracefs_root` (default
    /// /sys/kernel/tracing) if it is not there, removes instances of dead
    /// stallscope runs, creates `instances/stallscope-<pid>` with
    /// trace_clock=mono and enables the writeback events. Err is a one-line reason.
    pub fn start(tracefs_root: Option<&Path>) -> Result<TraceSession, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        let root = tracefs_root.unwrap_or(Path::new(DEFAULT_TRACEFS));
        // Several stallscope runs may share a tracefs one of them mounted:
        // a marker file says so, and the last one out unmounts it.
        let marker = mount_marker(root);
        let mounted_by_us = if is_tracefs(root) {
            marker.exists()
        } else {
            mount_tracefs(root)
                .map_err(|e| format!("tracefs not available (mount {}: {e})", root.display()))?;
            let _ = fs::write(&marker, root.as_os_str().as_bytes());
            true
        };
        // From here on Drop undoes whatever was done, on every error path.
        let mut s = TraceSession {
            root: root.to_path_buf(),
            instance: root.join("instances").join(instance_name()),
            mounted_by_us,
            pipe: None,
            partial: Vec::new(),
            chunk: Vec::new(),
            lost: 0,
            sched: false,
            chains: false,
            raw: None,
            raw_waits: false,
            held: Vec::new(),
        };
        for name in remove_stale_instances(root) {
            crate::base::error::note!(
                "stallscope: removed tracefs instance {name} left by a dead run"
            );
        }
        for e in EVENTS {
            if !root.join("events/writeback").join(e).is_dir() {
                return Err(format!("event writeback:{e} missing on this kernel"));
            }
        }
        fs::create_dir(&s.instance).map_err(|e| {
            format!(
                "tracefs not available (create {}: {e})",
                s.instance.display()
            )
        })?;
        s.write("trace_clock", "mono")?;
        s.write("buffer_size_kb", &BUFFER_SIZE_KB.to_string())?;
        for e in EVENTS {
            s.write(&format!("events/writeback/{e}/enable"), "1")?;
        }
        let pipe = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(s.instance.join("trace_pipe"))
            .map_err(|e| format!("tracefs not available (open trace_pipe: {e})"))?;
        s.pipe = Some(pipe);
        Ok(s)
    }

    /// Restricts balance_dirty_pages and folio_wait_writeback to our
    /// writer threads `writers` and the observed threads `observed`, and
    /// writeback_start to the devices `bdis` (bdi names as the events print
    /// them, e.g. "7:1"; the whole disk's, not a partition's). Observed
    /// threads' page waits come with the scheduler's raw events instead,
    /// once `set_sched_filter` has turned those on (call it first). No
    /// thread at all matches none; no bdi, every one. May be called again
    /// at any time.
    pub fn set_filters(
        &self,
        writers: &[u32],
        observed: &[u32],
        bdis: &[String],
    ) -> Result<(), String> {
        if let Some(bad) = bdis.iter().find(|b| b.contains(['"', '\\', '\n'])) {
            return Err(format!("bad bdi name {bad:?}"));
        }
        let by_tid = |tids: &[u32]| {
            // Paused, no one watched: match nothing rather than everything.
            let none = [u32::MAX];
            let tids = if tids.is_empty() { &none[..] } else { tids };
            let f = tids
                .iter()
                .map(|t| format!("common_pid == {t}"))
                .collect::<Vec<_>>()
                .join(" || ");
            // The kernel takes a filter of less than a page; a process with
            // hundreds of threads (observe mode) is matched in user space
            // instead: the aggregator drops events of threads it does not know.
            if f.len() >= MAX_FILTER_BYTES {
                String::new()
            } else {
                f
            }
        };
        let all: Vec<u32> = writers.iter().chain(observed).copied().collect();
        self.set_filter("balance_dirty_pages", &by_tid(&all))?;
        let waiters = if self.raw_waits { writers } else { &all[..] };
        self.set_filter("folio_wait_writeback", &by_tid(waiters))?;
        let field = self.bdi_field("writeback_start");
        let by_bdi = bdis
            .iter()
            .map(|b| format!("{field} == \"{b}\""))
            .collect::<Vec<_>>()
            .join(" || ");
        self.set_filter("writeback_start", &by_bdi)
    }

    /// Everything traced as text since the last call, parsed, appended to
    /// `out`; never blocks (the pipe is O_NONBLOCK, EAGAIN means nothing
    /// new). A partial last line waits for the next call.
    fn drain_text(&mut self, out: &mut Vec<TraceEvent>) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        self.chunk.resize(64 << 10, 0);
        let mut total = 0;
        while total < DRAIN_MAX_BYTES {
            match pipe.read(&mut self.chunk) {
                Ok(0) => break,
                Ok(n) => {
                    total += n;
                    self.partial.extend_from_slice(&self.chunk[..n]);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break, // EAGAIN: caught up
            }
        }
        let Some(last_nl) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        for line in String::from_utf8_lossy(&self.partial[..=last_nl]).lines() {
            if let Some(ev) = parse_line(line) {
                out.push(ev);
            } else if let Some(n) = parse_lost(line) {
                self.lost += n;
            }
        }
        self.partial.drain(..=last_nl);
    }

    /// What `drain_into` gives, in a new vector.
    pub fn drain(&mut self) -> Vec<TraceEvent> {
        let mut out = Vec::new();
        self.drain_into(&mut out);
        out
    }

    /// Replaces `out` with what `drain_text` gives and the scheduler's raw
    /// events up to the moment this call began (later ones wait for the
    /// next call, when every CPU's buffer has its events up to then), by
    /// time. The caller keeps `out` between calls, and this session its
    /// own buffers: at tens of thousands of events a second, buffers
    /// allocated anew each time cost more in page faults than the parsing.
    pub fn drain_into(&mut self, out: &mut Vec<TraceEvent>) {
        out.clear();
        self.drain_text(out);
        let Some(raw) = self.raw.as_mut() else {
            return;
        };
        let began = mono_now_ns();
        // `held` starts with the events the last call kept back.
        let evs = &mut self.held;
        for f in &mut raw.cpus {
            let mut pages = 0;
            // At most ~8 MiB a call, so a flood cannot stall the caller.
            while pages < DRAIN_MAX_BYTES / 4096 {
                match f.read(&mut raw.page) {
                    Ok(0) => break,
                    Ok(n) => {
                        pages += 1;
                        self.lost += parse_page(&raw.page[..n], &raw.fmt, evs);
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => break, // EAGAIN: caught up
                }
            }
        }
        evs.sort_by_key(|e| e.t_mono_ns);
        let split = evs.partition_point(|e| e.t_mono_ns <= began);
        let text = out.len();
        out.extend(evs.drain(..split));
        if text > 0 {
            out.sort_by_key(|e| e.t_mono_ns);
        }
    }

    /// Times every block of the threads named by `set_sched_filter`:
    /// sched_switch into D and sched_waking; with `chains` also every
    /// sleep in S, so that a thread waiting for another one is seen and
    /// its waker named. (No stacktrace trigger: the kernel formatting a
    /// stack per block into trace_pipe doubled our CPU; the /proc
    /// sampler's stacks name the waits.) Err when this kernel lacks the
    /// events; the session then keeps the /proc sampler's timing.
    pub fn enable_sched(&mut self, chains: bool) -> Result<(), String> {
        for e in SCHED_EVENTS {
            if !self.root.join("events/sched").join(e).is_dir() {
                return Err(format!("event sched:{e} missing on this kernel"));
            }
        }
        self.raw = Some(self.start_raw()?);
        self.sched = true;
        self.chains = chains;
        self.set_sched_filter(&[])
    }

    /// A second instance for the scheduler's events and its per-CPU raw
    /// pipes. Err leaves nothing behind.
    fn start_raw(&self) -> Result<RawSched, String> {
        let instance = self.root.join("instances").join(instance_name());
        fs::create_dir(&instance).map_err(|e| format!("create {}: {e}", instance.display()))?;
        let mut raw = RawSched {
            instance,
            cpus: Vec::new(),
            fmt: SchedFormat::default(),
            page: vec![0u8; 4096],
        };
        let setup = |raw: &mut RawSched| -> Result<(), String> {
            write_file(&raw.instance, "trace_clock", "mono")?;
            write_file(
                &raw.instance,
                "buffer_size_kb",
                &SCHED_BUFFER_KB.to_string(),
            )?;
            raw.fmt = SchedFormat::read(&raw.instance.join("events"))?;
            let per_cpu = fs::read_dir(raw.instance.join("per_cpu"))
                .map_err(|e| format!("read per_cpu: {e}"))?;
            for cpu in per_cpu.flatten() {
                let f = OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(cpu.path().join("trace_pipe_raw"))
                    .map_err(|e| format!("open {}: {e}", cpu.path().display()))?;
                raw.cpus.push(f);
            }
            Ok(())
        };
        if let Err(e) = setup(&mut raw) {
            raw.close();
            return Err(e);
        }
        Ok(raw)
    }

    /// Restricts the scheduler's events to threads `tids` (an empty list:
    /// none, the events off). May be called again at any time.
    pub fn set_sched_filter(&mut self, tids: &[u32]) -> Result<(), String> {
        if !self.sched {
            return Ok(());
        }
        let or = |field: &str| {
            tids.iter()
                .map(|t| format!("{field} == {t}"))
                .collect::<Vec<_>>()
                .join(" || ")
        };
        let (prev, woken) = (or("prev_pid"), or("pid"));
        let waits = self.raw.as_ref().is_some_and(|r| r.fmt.wait.is_some());
        if prev.len() + 20 >= MAX_FILTER_BYTES {
            return Err(format!(
                "{} threads are too many for a scheduler filter: blocking times stay sampled",
                tids.len()
            ));
        }
        // 2 is D (TASK_UNINTERRUPTIBLE), 1 is S (TASK_INTERRUPTIBLE).
        let states = if self.chains { 3 } else { 2 };
        let switch = format!("prev_state & {states} && ({prev})");
        let Some(raw) = self.raw.as_ref() else {
            return Ok(());
        };
        let at = &raw.instance;
        if tids.is_empty() {
            for e in SCHED_EVENTS {
                write_file(at, &format!("events/sched/{e}/enable"), "0")?;
            }
            if waits {
                write_file(at, &format!("events/{WAIT_EVENT}/enable"), "0")?;
            }
            self.raw_waits = false;
            return Ok(());
        }
        // The instance's pid list first: a bitmap test that drops the
        // machine's other switches and wakeups before any filter runs
        // (switches in or out of a listed task, wakings of one pass it;
        // the filters below keep exactly ours).
        let pids: String = tids.iter().map(|t| format!("{t} ")).collect();
        write_file(at, "set_event_pid", pids.trim_end())?;
        write_file(at, "events/sched/sched_switch/filter", &switch)?;
        write_file(at, "events/sched/sched_waking/filter", &woken)?;
        for e in SCHED_EVENTS {
            write_file(at, &format!("events/sched/{e}/enable"), "1")?;
        }
        // Page waits in the waiter's context: the pid list is their filter.
        if waits {
            write_file(at, &format!("events/{WAIT_EVENT}/enable"), "1")?;
        }
        self.raw_waits = waits;
        Ok(())
    }

    /// Whether sleeps in S are traced too (wake-up chains).
    pub fn chains(&self) -> bool {
        self.sched && self.chains
    }

    /// Whether the scheduler's events time blocks (see `enable_sched`).
    pub fn sched(&self) -> bool {
        self.sched
    }

    /// Events the kernel dropped because the buffer overran (sum of LOST notices).
    pub fn lost_events(&self) -> u64 {
        self.lost
    }

    pub fn instance_path(&self) -> &Path {
        &self.instance
    }

    /// Writes `value` to a file of our instance; Err names the file.
    fn write(&self, file: &str, value: &str) -> Result<(), String> {
        write_file(&self.instance, file, value)
    }

    /// Writing "0" is how the kernel clears a filter.
    fn set_filter(&self, event: &str, expr: &str) -> Result<(), String> {
        let expr = if expr.is_empty() { "0" } else { expr };
        self.write(&format!("events/writeback/{event}/filter"), expr)
            .map_err(|e| format!("writeback:{event} filter rejected ({e})"))
    }

    /// The event's bdi name field: `name` on current kernels, `bdi` on some.
    fn bdi_field(&self, event: &str) -> &'static str {
        let format = fs::read_to_string(
            self.instance
                .join("events/writeback")
                .join(event)
                .join("format"),
        )
        .unwrap_or_default();
        if format.contains("char bdi[") {
            "bdi"
        } else {
            "name"
        }
    }
}

impl Drop for TraceSession {
    fn drop(&mut self) {
        // An open trace_pipe keeps the instance busy: close it first.
        self.pipe = None;
        if self.instance.is_dir() {
            for e in EVENTS {
                let _ = self.write(&format!("events/writeback/{e}/enable"), "0");
            }
            if let Some(raw) = self.raw.take() {
                raw.close();
            }
            if let Err(e) = fs::remove_dir(&self.instance) {
                crate::base::error::note!(
                    "stallscope: cannot remove tracefs instance {}: {e}",
                    self.instance.display()
                );
            }
        }
        if self.mounted_by_us && !other_live_instances(&self.root, &self.instance) {
            // Marker first: a run starting now must not take our marker for
            // one it may rely on (it would be left with a mount nobody owns).
            let marker = mount_marker(&self.root);
            let _ = fs::remove_file(&marker);
            if let Err(e) = umount(&self.root) {
                let _ = fs::write(&marker, self.root.as_os_str().as_bytes());
                crate::base::error::note!(
                    "stallscope: cannot unmount tracefs at {}: {e}",
                    self.root.display()
                );
            }
        }
    }
}

impl RawSched {
    /// Pipes closed, events off, the instance removed.
    fn close(mut self) {
        self.cpus.clear();
        for e in SCHED_EVENTS {
            let _ = write_file(&self.instance, &format!("events/sched/{e}/enable"), "0");
        }
        let _ = write_file(&self.instance, &format!("events/{WAIT_EVENT}/enable"), "0");
        if let Err(e) = fs::remove_dir(&self.instance) {
            crate::base::error::note!(
                "stallscope: cannot remove tracefs instance {}: {e}",
                self.instance.display()
            );
        }
    }
}

/// Writes `value` to `file` of `instance`; Err names the file.
fn write_file(instance: &Path, file: &str, value: &str) -> Result<(), String> {
    let path = instance.join(file);
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| format!("tracefs write {value:?} to {}: {e}", path.display()))
}

/// Removes `instances/stallscope-<pid>` whose pid no longer runs (a killed
/// run's leftover, which would otherwise trace forever); returns their names.
pub fn remove_stale_instances(tracefs_root: &Path) -> Vec<String> {
    let Ok(dir) = fs::read_dir(tracefs_root.join("instances")) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = instance_pid(&name) else {
            continue;
        };
        if pid <= 0 || pid_alive(pid) {
            continue;
        }
        clear_triggers(&entry.path());
        if fs::remove_dir(entry.path()).is_ok() {
            removed.push(name);
        }
    }
    removed.sort();
    removed
}

/// Removes every trigger a dead run left on its instance's sched_switch
/// (they keep the instance from being removed).
fn clear_triggers(instance: &Path) {
    let file = instance.join("events/sched/sched_switch/trigger");
    let Ok(text) = fs::read_to_string(&file) else {
        return;
    };
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let t = line.split(" [").next().unwrap_or(line).trim();
        let _ = fs::write(&file, format!("!{t}"));
    }
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// The file that says a stallscope run mounted tracefs at `root`.
fn mount_marker(root: &Path) -> PathBuf {
    let tag: String = root
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    PathBuf::from(format!("/run/stallscope-tracefs{tag}.mounted"))
}

/// `stallscope-<pid>`, and `stallscope-<pid>.<n>` for a second session in
/// the same process (tests run several at once).
fn instance_name() -> String {
    static SESSIONS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let pid = std::process::id();
    match SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
        0 => format!("{INSTANCE_PREFIX}{pid}"),
        n => format!("{INSTANCE_PREFIX}{pid}.{n}"),
    }
}

/// The pid in an instance name of ours.
fn instance_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(INSTANCE_PREFIX)?;
    rest.split('.').next()?.parse().ok()
}

/// True if another live stallscope session (another run, or another in
/// this process) still has an instance under `root` besides `own`.
fn other_live_instances(root: &Path, own: &Path) -> bool {
    fs::read_dir(root.join("instances"))
        .map(|rd| {
            rd.flatten().any(|e| {
                e.path() != own
                    && e.file_name()
                        .to_str()
                        .and_then(instance_pid)
                        .is_some_and(pid_alive)
            })
        })
        .unwrap_or(false)
}

fn is_tracefs(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid C string and a zeroed statfs to fill.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as u64 == TRACEFS_MAGIC
    }
}

fn mount_tracefs(path: &Path) -> std::io::Result<()> {
    let target = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: valid C strings; tracefs takes no data.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A plain umount: it fails (EBUSY) rather than detach if someone else is using it.
fn umount(path: &Path) -> std::io::Result<()> {
    let target = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(target.as_ptr(), 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    /// Root tests that touch tracefs run one at a time.
    static LOCK: Mutex<()> = Mutex::new(());

    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/trace")
            .join(name);
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn parse_all(name: &str) -> Vec<TraceEvent> {
        fixture(name)
            .lines()
            .map(|l| parse_line(l).unwrap_or_else(|| panic!("unparsed: {l}")))
            .collect()
    }

    #[test]
    fn balance_dirty_pages_lines() {
        let evs = parse_all("balance_dirty_pages.txt");
        assert_eq!(evs.len(), 11);
        assert_eq!(
            evs[1],
            TraceEvent {
                t_mono_ns: 1_221_221_672_000,
                tid: 12927,
                kind: TraceKind::BalanceDirtyPages {
                    bdi: "7:2".into(),
                    limit: 16384,
                    setpoint: 13312,
                    dirty: 10425,
                    pause_ms: 20,
                    paused_ms: 0,
                    period_ms: 20,
                },
            }
        );
        // A rate-limited pass that did not sleep has a negative pause.
        assert!(matches!(
            &evs[4].kind,
            TraceKind::BalanceDirtyPages { pause_ms: -4, paused_ms: 204, period_ms: 0, bdi, .. }
                if bdi == "254:0"
        ));
        assert!(matches!(
            &evs[10].kind,
            TraceKind::BalanceDirtyPages {
                pause_ms: 80,
                paused_ms: 84,
                ..
            }
        ));
    }

    #[test]
    fn task_names_with_spaces_dashes_and_unknown() {
        let evs = parse_all("balance_dirty_pages.txt");
        // "opt 49wlkyrk6tw-12937", "lto cgu.3-13068", "<...>-12945", "ss-w0-0-13091"
        assert_eq!(evs[5].tid, 12937);
        assert_eq!(evs[6].tid, 13068);
        assert_eq!(evs[7].tid, 12945);
        assert_eq!(evs[8].tid, 13091);
        let kw = "    kworker/u8:2-flush-7:1-123 [001] ...1.  5.5: writeback_start: \
                  bdi 7:1: sb_dev 0:0 nr_pages=1 sync_mode=0 kupdate=0 range_cyclic=1 \
                  background=1 reason=background cgroup_ino=1";
        let ev = parse_line(kw).unwrap();
        assert_eq!((ev.tid, ev.t_mono_ns), (123, 5_500_000_000));
        // record-tgid output and a bracket in the task name.
        let tgid = "  a [x]-b-77 (     70) [003] d..1. 1.000001: folio_wait_writeback: \
                    bdi 8:0: ino=5 index=6";
        let ev = parse_line(tgid).unwrap();
        assert_eq!((ev.tid, ev.t_mono_ns), (77, 1_000_001_000));
    }

    #[test]
    fn folio_wait_writeback_lines() {
        let evs = parse_all("folio_wait_writeback.txt");
        assert_eq!(evs.len(), 10);
        assert_eq!(
            evs[3],
            TraceEvent {
                t_mono_ns: 1_233_085_385_000,
                tid: 13062,
                kind: TraceKind::WaitWriteback {
                    bdi: "7:2".into(),
                    ino: 12,
                    index: 0,
                },
            }
        );
        assert!(evs
            .iter()
            .all(|e| matches!(e.kind, TraceKind::WaitWriteback { .. })));
    }

    #[test]
    fn writeback_start_lines() {
        let evs = parse_all("writeback_start.txt");
        let reasons: Vec<&str> = evs
            .iter()
            .map(|e| match &e.kind {
                TraceKind::WritebackStart { reason, .. } => reason.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            reasons,
            [
                "background",
                "background",
                "periodic",
                "periodic",
                "sync",
                "sync",
                "sync",
                "fs_free_space"
            ]
        );
        assert_eq!(
            evs[0].kind,
            TraceKind::WritebackStart {
                bdi: "254:0".into(),
                reason: "background".into(),
                nr_pages: i64::MAX,
            }
        );
        assert_eq!(evs[0].tid, 6683);
    }

    #[test]
    fn sleeps_in_s_and_d_and_who_woke_them() {
        let evs = parse_all("sched.txt");
        let kinds: Vec<_> = evs.iter().map(|e| (e.tid, e.kind.clone())).collect();
        let wake = |waker: u32, comm: &str, irq| TraceKind::SchedWake {
            waker,
            waker_comm: comm.into(),
            irq,
        };
        assert_eq!(
            kinds,
            [
                (
                    27574,
                    TraceKind::SchedBlock {
                        comm: "python3".into(),
                        sleep: true
                    }
                ),
                // A timer expiring on an idle CPU: in a hardware interrupt.
                (27574, wake(0, "<idle>", true)),
                // A thread waking another one from its own context.
                (27533, wake(27574, "python3", false)),
                (
                    13330,
                    TraceKind::SchedBlock {
                        comm: "dd".into(),
                        sleep: false
                    }
                ),
            ]
        );
    }

    #[test]
    fn other_lines_are_not_events() {
        let text = fixture("other.txt");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.iter().all(|l| parse_line(l).is_none()));
        assert_eq!(parse_lost(lines[0]), Some(300));
        assert_eq!(parse_lost(lines[1]), None);
        for bad in [
            "",
            "# tracer: nop",
            "  dd-1 [000] ..... 1.0: balance_dirty_pages: bdi 7:2: limit=x",
            "  dd-x [000] ..... 1.0: folio_wait_writeback: bdi 7:2: ino=1 index=2",
            "  dd-1 ..... 1.0: folio_wait_writeback: bdi 7:2: ino=1 index=2",
            "  dd-1 [000] ..... 1.0: folio_wait_writeback: ino=1 index=2",
        ] {
            assert_eq!(parse_line(bad), None, "{bad}");
        }
    }

    #[test]
    fn stream_parses_whatever_the_chunking() {
        let text = fixture("stream.txt");
        let whole: Vec<TraceEvent> = text.lines().filter_map(parse_line).collect();
        assert_eq!(whole.len(), text.lines().count());
        // drain's line assembly, fed in awkward chunk sizes.
        for chunk in [1, 7, 4096] {
            let mut partial = Vec::new();
            let mut got = Vec::new();
            for piece in text.as_bytes().chunks(chunk) {
                partial.extend_from_slice(piece);
                if let Some(nl) = partial.iter().rposition(|&b| b == b'\n') {
                    let done: Vec<u8> = partial.drain(..=nl).collect();
                    got.extend(
                        String::from_utf8_lossy(&done)
                            .lines()
                            .filter_map(parse_line),
                    );
                }
            }
            assert_eq!(got, whole, "chunk {chunk}");
        }
    }

    #[test]
    fn events_round_trip_through_json() {
        for ev in parse_all("writeback_start.txt") {
            let s = serde_json::to_string(&ev).unwrap();
            assert_eq!(serde_json::from_str::<TraceEvent>(&s).unwrap(), ev);
        }
    }

    #[test]
    fn stale_instances_of_dead_pids_are_removed() {
        let root = tempfile::tempdir().unwrap();
        let inst = root.path().join("instances");
        fs::create_dir(&inst).unwrap();
        // 4194311 exceeds the largest pid_max (2^22), so it is never alive.
        let ours = format!("{INSTANCE_PREFIX}{}", std::process::id());
        for name in [
            "stallscope-4194311",
            "stallscope-4194311.2",
            &ours,
            "stallscope-1",
            "stallscope-x",
            "other",
        ] {
            fs::create_dir(inst.join(name)).unwrap();
        }
        assert_eq!(
            remove_stale_instances(root.path()),
            ["stallscope-4194311", "stallscope-4194311.2"]
        );
        let mut left: Vec<String> = fs::read_dir(&inst)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = vec![
            ours,
            "other".into(),
            "stallscope-1".into(),
            "stallscope-x".into(),
        ];
        want.sort();
        assert_eq!(left, want);
        assert!(remove_stale_instances(&root.path().join("missing")).is_empty());
    }

    /// One read: a filter file answers only the first read (it returns 0 once
    /// the offset is non-zero), and read_to_string's first read is 32 bytes.
    fn read_filter(path: &Path) -> String {
        let mut buf = vec![0u8; 4096];
        let n = File::open(path).unwrap().read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).trim().to_string()
    }

    /// How many tracefs mounts sit at `path` (mountinfo field 5 is the mount point).
    fn tracefs_mounts(path: &str) -> usize {
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.split_whitespace().nth(4) == Some(path) && l.contains(" - tracefs "))
            .count()
    }

    /// Dirties a few MiB in a fresh dir and syncfs()es it from this thread.
    fn dirty_and_syncfs(dir: &Path) {
        let mut f = File::create(dir.join("data")).unwrap();
        let block = vec![0x5a_u8; 1 << 20];
        for _ in 0..4 {
            f.write_all(&block).unwrap();
        }
        drop(f);
        let d = File::open(dir).unwrap();
        // SAFETY: a valid open fd.
        assert_eq!(
            unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&d)) },
            0
        );
    }

    /// Drains until `want` matches an event or 5 s pass; returns all drained.
    fn drain_until(s: &mut TraceSession, want: impl Fn(&TraceEvent) -> bool) -> Vec<TraceEvent> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut all = Vec::new();
        while Instant::now() < deadline {
            all.extend(s.drain());
            if all.iter().any(&want) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        all
    }

    #[test]
    fn session_traces_syncfs_and_cleans_up() {
        if !crate::base::testenv::require_root("session_traces_syncfs_and_cleans_up") {
            return;
        }
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mounts_before = tracefs_mounts(DEFAULT_TRACEFS);
        let mut s = TraceSession::start(None).expect("start trace session");
        let inst = s.instance_path().to_path_buf();
        assert!(inst.is_dir());
        let clock = fs::read_to_string(inst.join("trace_clock")).unwrap();
        assert!(clock.contains("[mono]"), "{clock}");

        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        s.set_filters(&[tid], &[], &[]).unwrap();
        let filter = read_filter(&inst.join("events/writeback/folio_wait_writeback/filter"));
        assert_eq!(filter, format!("common_pid == {tid}"));
        let _ = s.drain(); // what came before the filter

        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let t0 = mono_now_ns();
        dirty_and_syncfs(dir.path());
        let is_sync = |e: &TraceEvent| matches!(&e.kind, TraceKind::WritebackStart { reason, .. } if reason == "sync");
        let evs = drain_until(&mut s, is_sync);
        let sync = evs
            .iter()
            .find(|e| is_sync(e))
            .expect("a writeback_start reason=sync");
        assert!(sync.t_mono_ns >= t0 && sync.t_mono_ns <= mono_now_ns());
        // Throttling and writeback waits are only ours (syncfs waits on writeback).
        for e in &evs {
            if !matches!(e.kind, TraceKind::WritebackStart { .. }) {
                assert_eq!(e.tid, tid, "{e:?}");
            }
        }

        // Restrict writeback_start to the bdi we just saw: others drop out.
        let TraceKind::WritebackStart { bdi, .. } = &sync.kind else {
            unreachable!()
        };
        let bdis = vec![bdi.clone(), "7:99".to_string()];
        s.set_filters(&[tid], &[1], &bdis).unwrap();
        let filter = read_filter(&inst.join("events/writeback/writeback_start/filter"));
        assert_eq!(filter, format!("name == \"{bdi}\" || name == \"7:99\""));
        let _ = s.drain();
        dirty_and_syncfs(dir.path());
        let evs = drain_until(&mut s, is_sync);
        assert!(evs.iter().any(is_sync));
        for e in &evs {
            if let TraceKind::WritebackStart { bdi: b, .. } = &e.kind {
                assert!(bdis.contains(b), "{e:?}");
            }
        }
        assert!(s.set_filters(&[], &[], &["bad\"".into()]).is_err());

        drop(s);
        assert!(!inst.exists(), "instance left behind");
        assert_eq!(tracefs_mounts(DEFAULT_TRACEFS), mounts_before);
        if mounts_before == 0 {
            // The instance must be gone from the kernel too, not just unmounted.
            mount_tracefs(Path::new(DEFAULT_TRACEFS)).unwrap();
            let still = inst.exists();
            umount(Path::new(DEFAULT_TRACEFS)).unwrap();
            assert!(!still, "instance survives in the kernel");
        }
    }

    #[test]
    fn session_start_refuses_a_missing_root() {
        if !crate::base::testenv::require_root("session_start_refuses_a_missing_root") {
            return;
        }
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let err = TraceSession::start(Some(Path::new("/nonexistent/stallscope-tracefs")))
            .err()
            .expect("no tracefs there");
        assert!(err.starts_with("tracefs not available"), "{err}");
    }
}
