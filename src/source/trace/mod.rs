//! tracefs events (root only): which threads the kernel made sleep in
//! `balance_dirty_pages`, which waited on a page under writeback, why the
//! flusher started writing, and (observe mode) the scheduler's switches
//! and wakeups that time every block of a watched thread.
//!
//! Everything happens in private instances `instances/stallscope-<pid>`,
//! never in the global buffer, so other tracing users are left alone
//! (`instance`). Each event is optional (`features`): a kernel without one
//! loses only the evidence it gives. The writeback events come as text
//! (`text`), the scheduler's as binary pages (`sched_raw`).

mod features;
mod instance;
mod mount;
pub mod sched_raw;
mod text;

pub use features::{hidden_from_env, Check, EventSpec, TraceFeatures, HIDE_ENV};
pub use instance::remove_stale_instances;
pub use text::{parse_line, parse_lost};

use crate::model::kernel::TraceEvent;
use crate::model::kernel::TraceKind;
use crate::source::trace::sched_raw::{parse_page, PageLayout, SchedFormat, StateBits, SysEvent};
use instance::{instance_name, write_file};
use mount::{is_tracefs, mount_ours, unmount_if_unused};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Instance names are `stallscope-<pid>`, so a killed run's leftover is recognisable.
pub const INSTANCE_PREFIX: &str = "stallscope-";
/// Where tracefs lives on current kernels (and where we mount it if needed).
pub const DEFAULT_TRACEFS: &str = "/sys/kernel/tracing";
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

/// Where a watched thread sleeps in S, and the waits it keeps of it.
const FUTEX_EVENT: &str = "syscalls/sys_enter_futex";
const FORK_EVENT: &str = "sched/sched_process_fork";
/// FUTEX_WAIT (0) and FUTEX_WAIT_BITSET (9), with FUTEX_PRIVATE_FLAG (128)
/// and FUTEX_CLOCK_REALTIME (256): a filter compares, it cannot mask.
const FUTEX_WAITS: &str = "op == 0 || op == 9 || op == 128 || op == 137 || op == 265 || op == 393";

/// Longest thread-id filter we write (the kernel refuses a page or more).
const MAX_FILTER_BYTES: usize = 3500;

/// What `tidy` put back.
#[derive(Debug, Default)]
pub struct Tidied {
    /// Instances of dead runs removed.
    pub removed: Vec<String>,
    /// tracefs was unmounted: a dead run had mounted it and nothing uses it.
    pub unmounted: bool,
}

/// Puts back what killed stallscope runs left at the tracefs `root`: their
/// instances (named for their pid, `instance`) and a mount one of them
/// made that nothing uses any more (`mount`). A run does it as it starts
/// and ends; `lab down` does it so that a killed run needs no later run.
/// Does nothing where tracefs is not mounted (an instance left there
/// stays in the kernel until the next run mounts tracefs and removes it).
pub fn tidy(root: &Path) -> Result<Tidied, String> {
    if !is_tracefs(root) {
        return Ok(Tidied::default());
    }
    let removed = remove_stale_instances(root);
    let unmounted = unmount_if_unused(root)?;
    Ok(Tidied { removed, unmounted })
}

/// CLOCK_MONOTONIC now, in ns: the clock of trace timestamps under trace_clock=mono.
pub fn mono_now_ns() -> u64 {
    crate::base::clock::mono_ns()
}

/// A private tracefs instance with the writeback events enabled; torn down
/// (events off, instance removed, tracefs unmounted if a stallscope run
/// mounted it and nothing uses it any more) on drop.
pub struct TraceSession {
    root: PathBuf,
    instance: PathBuf,
    pipe: Option<File>,
    partial: Vec<u8>,
    /// The text pipe's read buffer, kept between drains.
    chunk: Vec<u8>,
    lost: u64,
    /// The scheduler's events are on (`enable_sched`).
    sched: bool,
    /// Sleeps in S are traced too (`enable_sched(true, _)`).
    chains: bool,
    /// The scheduler's events, in an instance of their own read raw.
    raw: Option<RawSched>,
    /// The watched threads' page waits are recorded with the scheduler's
    /// raw events (`set_sched_filter` turned them on), not as text.
    raw_waits: bool,
    /// Raw events past the moment the last drain began: another CPU's
    /// buffer may still get older ones.
    held: Vec<TraceEvent>,
    /// Which events this kernel has (by its names), and why not.
    features: TraceFeatures,
}

/// The instance the scheduler's events go to, read as binary pages per CPU
/// (`sched_raw`): no text formatting for the most frequent events.
struct RawSched {
    instance: PathBuf,
    cpus: Vec<File>,
    fmt: SchedFormat,
    layout: PageLayout,
    page: Vec<u8>,
    /// The page wait recorded here, `writeback/<its name>`, if any.
    wait_event: Option<String>,
    /// The write-path calls' entry and exit events recorded here
    /// (`syscalls/sys_enter_write`, …): none when this kernel lacks them.
    sys_events: Vec<String>,
    /// `syscalls/sys_enter_futex` when this kernel has it: with wake-up
    /// chains, where each sleep in S is (the futex word).
    futex_event: bool,
}

impl TraceSession {
    /// Needs root. Mounts tracefs at `tracefs_root` (default
    /// /sys/kernel/tracing) if it is not there, removes instances of dead
    /// stallscope runs, creates `instances/stallscope-<pid>` with
    /// trace_clock=mono and enables the writeback events this kernel has
    /// (`features` says which are missing, and why). Err is a one-line
    /// reason tracing cannot start at all.
    pub fn start(tracefs_root: Option<&Path>) -> Result<TraceSession, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        let root = tracefs_root.unwrap_or(Path::new(DEFAULT_TRACEFS));
        // Several stallscope runs may share a tracefs one of them mounted:
        // the last one out unmounts it (`mount`).
        if !is_tracefs(root) {
            mount_ours(root)
                .map_err(|e| format!("tracefs not available (mount {}: {e})", root.display()))?;
        }
        // From here on Drop undoes whatever was done, on every error path.
        let mut s = TraceSession {
            root: root.to_path_buf(),
            instance: root.join("instances").join(instance_name()),
            pipe: None,
            partial: Vec::new(),
            chunk: Vec::new(),
            lost: 0,
            sched: false,
            chains: false,
            raw: None,
            raw_waits: false,
            held: Vec::new(),
            features: TraceFeatures::detect(&root.join("events"), &hidden_from_env()),
        };
        for name in remove_stale_instances(root) {
            crate::base::error::note!(
                "stallscope: removed tracefs instance {name} left by a dead run"
            );
        }
        fs::create_dir(&s.instance).map_err(|e| {
            format!(
                "tracefs not available (create {}: {e})",
                s.instance.display()
            )
        })?;
        s.write("trace_clock", "mono")?;
        s.write("buffer_size_kb", &BUFFER_SIZE_KB.to_string())?;
        for e in s.features.writeback_events() {
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
        let f = &self.features;
        if let Ok(e) = f.throttle {
            self.set_filter(e, &by_tid(&all))?;
        }
        if let Ok(e) = f.page_wait {
            let waiters = if self.raw_waits { writers } else { &all[..] };
            self.set_filter(e, &by_tid(waiters))?;
        }
        if let Ok(e) = f.flusher {
            let field = self.bdi_field(e);
            let by_bdi = bdis
                .iter()
                .map(|b| format!("{field} == \"{b}\""))
                .collect::<Vec<_>>()
                .join(" || ");
            self.set_filter(e, &by_bdi)?;
        }
        Ok(())
    }

    /// Which events this kernel has, and why the others are missing.
    pub fn features(&self) -> &TraceFeatures {
        &self.features
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
            while pages < DRAIN_MAX_BYTES / raw.layout.size {
                match f.read(&mut raw.page) {
                    Ok(0) => break,
                    Ok(n) => {
                        pages += 1;
                        self.lost += parse_page(&raw.page[..n], &raw.layout, &raw.fmt, evs);
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
    /// With `calls` the write-path system calls' entry and exit too (and,
    /// with chains, the futex waits); without, no system-call event is on.
    pub fn enable_sched(&mut self, chains: bool, calls: bool) -> Result<(), String> {
        self.features.sched()?;
        let mut raw = self.start_raw(calls)?;
        raw.fmt.states = raw.calibrate_states();
        self.raw = Some(raw);
        self.sched = true;
        self.chains = chains;
        self.set_sched_filter(&[])
    }

    /// How this kernel's sched_switch says S and D (see `StateBits`).
    pub fn state_bits(&self) -> Option<StateBits> {
        self.raw.as_ref().map(|r| r.fmt.states)
    }

    /// A second instance for the scheduler's events and its per-CPU raw
    /// pipes. Err leaves nothing behind.
    fn start_raw(&self, calls: bool) -> Result<RawSched, String> {
        let instance = self.root.join("instances").join(instance_name());
        fs::create_dir(&instance).map_err(|e| format!("create {}: {e}", instance.display()))?;
        let mut raw = RawSched {
            instance,
            cpus: Vec::new(),
            fmt: SchedFormat::default(),
            layout: PageLayout::default(),
            page: Vec::new(),
            wait_event: None,
            sys_events: Vec::new(),
            futex_event: false,
        };
        let wait = self.features.page_wait.as_ref().ok().copied();
        let setup = |raw: &mut RawSched| -> Result<(), String> {
            write_file(&raw.instance, "trace_clock", "mono")?;
            // A listed task's forks join the pid list from their first
            // moment (older kernels may lack the option: then the sampler
            // adds them, as before).
            let _ = write_file(&raw.instance, "options/event-fork", "1");
            write_file(
                &raw.instance,
                "buffer_size_kb",
                &SCHED_BUFFER_KB.to_string(),
            )?;
            let events = raw.instance.join("events");
            raw.fmt = SchedFormat::read(&events, wait)?;
            if calls && self.features.calls.is_ok() {
                let hidden = features::hidden_from_env();
                let (sys, dirs) = SysEvent::read_all(&events, &hidden);
                raw.fmt.sys = sys;
                raw.sys_events = dirs;
                if let Some((id, ev)) = SysEvent::read_futex(&events, &hidden) {
                    raw.fmt.sys.insert(id, ev);
                    raw.futex_event = true;
                }
            }
            raw.wait_event = raw
                .fmt
                .wait
                .as_ref()
                .and(wait)
                .map(|w| format!("writeback/{w}"));
            // The instance's own page (6.8 sub-buffers are per instance).
            raw.layout =
                features::read_header_page(&events).or_else(|_| self.features.page.clone())?;
            raw.page = vec![0u8; raw.layout.size];
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
        // Tasks forked after this filter (a backend forked per
        // connection) have higher ids: `> max` lets their events through
        // from their first moment, the pid list (which event-fork grows at
        // each fork of a listed task) keeping everyone else's out.
        let max = tids.iter().max().copied().unwrap_or(0);
        let or = |field: &str| {
            let mut any: Vec<String> = tids.iter().map(|t| format!("{field} == {t}")).collect();
            any.push(format!("{field} > {max}"));
            any.join(" || ")
        };
        let (prev, woken) = (or("prev_pid"), or("pid"));
        let wait_event = self.raw.as_ref().and_then(|r| r.wait_event.clone());
        let sys_events = self
            .raw
            .as_ref()
            .map(|r| r.sys_events.clone())
            .unwrap_or_default();
        let futex = self.raw.as_ref().is_some_and(|r| r.futex_event) && self.chains;
        let fork = self.raw.as_ref().is_some_and(|r| r.fmt.fork.is_some());
        if prev.len() + 20 >= MAX_FILTER_BYTES {
            return Err(format!(
                "{} threads are too many for a scheduler filter: blocking times stay sampled",
                tids.len()
            ));
        }
        let Some(raw) = self.raw.as_ref() else {
            return Ok(());
        };
        // D (TASK_UNINTERRUPTIBLE), and S (TASK_INTERRUPTIBLE) with chains,
        // in this kernel's encoding.
        let bits = raw.fmt.states;
        let states = if self.chains { bits.mask() } else { bits.disk };
        let switch = format!("prev_state & {states} && ({prev})");
        let at = &raw.instance;
        if tids.is_empty() {
            for e in SCHED_EVENTS {
                write_file(at, &format!("events/sched/{e}/enable"), "0")?;
            }
            if let Some(w) = &wait_event {
                write_file(at, &format!("events/{w}/enable"), "0")?;
            }
            for e in &sys_events {
                write_file(at, &format!("events/{e}/enable"), "0")?;
            }
            if fork {
                write_file(at, &format!("events/{FORK_EVENT}/enable"), "0")?;
            }
            if futex {
                write_file(at, &format!("events/{FUTEX_EVENT}/enable"), "0")?;
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
        if let Some(w) = &wait_event {
            write_file(at, &format!("events/{w}/enable"), "1")?;
        }
        // System calls in the caller's context too: entry and exit of
        // the listed threads' write-path calls.
        for e in &sys_events {
            write_file(at, &format!("events/{e}/enable"), "1")?;
        }
        // Futex waits only (FUTEX_WAIT, FUTEX_WAIT_BITSET, private or
        // not): the word a thread sleeps on tells a wait for work from a
        // wait for a result (`fold::chains`).
        // Forks of listed tasks: the new task is known to the fold at once.
        if fork {
            let _ = write_file(at, &format!("events/{FORK_EVENT}/enable"), "1");
        }
        // Optional: without it every sleep is judged as before.
        if futex {
            let _ = write_file(at, &format!("events/{FUTEX_EVENT}/filter"), FUTEX_WAITS)
                .and_then(|()| write_file(at, &format!("events/{FUTEX_EVENT}/enable"), "1"));
        }
        self.raw_waits = wait_event.is_some();
        Ok(())
    }

    /// Whether sleeps in S are traced too (wake-up chains).
    pub fn chains(&self) -> bool {
        self.sched && self.chains
    }

    /// Whether the write-path system calls' entries and exits are traced
    /// (`enable_sched` with `calls`, on a kernel that has their events).
    pub fn calls(&self) -> bool {
        self.raw.as_ref().is_some_and(|r| !r.sys_events.is_empty())
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
            for e in self.features.writeback_events() {
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
        if let Err(e) = unmount_if_unused(&self.root) {
            crate::base::error::note!("stallscope: {e}");
        }
    }
}

impl RawSched {
    /// Watches a thread of ours sleep in S (nanosleep) and reads how
    /// sched_switch recorded it: as S on most kernels, as D on those that
    /// shift the state (4.14-4.19). Falls back on the kernel's release
    /// when no switch was seen. Leaves the events off.
    fn calibrate_states(&mut self) -> StateBits {
        let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let guess = StateBits::guess(release.trim());
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tx.send(unsafe { libc::gettid() } as u32);
            let _ = go_rx.recv();
            for _ in 0..3 {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        let Ok(tid) = rx.recv() else {
            return guess;
        };
        let at = &self.instance;
        let on = write_file(at, "set_event_pid", &tid.to_string())
            .and_then(|()| {
                write_file(
                    at,
                    "events/sched/sched_switch/filter",
                    &format!("prev_state & 7 && prev_pid == {tid}"),
                )
            })
            .and_then(|()| write_file(at, "events/sched/sched_switch/enable", "1"));
        let _ = go_tx.send(());
        let _ = sleeper.join();
        let _ = write_file(at, "events/sched/sched_switch/enable", "0");
        if on.is_err() {
            return guess;
        }
        let mut evs = Vec::new();
        for f in &mut self.cpus {
            while let Ok(n) = f.read(&mut self.page) {
                if n == 0 {
                    break;
                }
                parse_page(&self.page[..n], &self.layout, &self.fmt, &mut evs);
            }
        }
        evs.iter()
            .find_map(|e| match &e.kind {
                TraceKind::SchedBlock { sleep, .. } if e.tid == tid => {
                    Some(StateBits::from_sleep(*sleep))
                }
                _ => None,
            })
            .unwrap_or(guess)
    }

    /// Pipes closed, events off, the instance removed.
    fn close(mut self) {
        self.cpus.clear();
        for e in SCHED_EVENTS {
            let _ = write_file(&self.instance, &format!("events/sched/{e}/enable"), "0");
        }
        if let Some(w) = &self.wait_event {
            let _ = write_file(&self.instance, &format!("events/{w}/enable"), "0");
        }
        for e in &self.sys_events {
            let _ = write_file(&self.instance, &format!("events/{e}/enable"), "0");
        }
        if self.futex_event {
            let _ = write_file(&self.instance, &format!("events/{FUTEX_EVENT}/enable"), "0");
        }
        if self.fmt.fork.is_some() {
            let _ = write_file(&self.instance, &format!("events/{FORK_EVENT}/enable"), "0");
        }
        if let Err(e) = fs::remove_dir(&self.instance) {
            crate::base::error::note!(
                "stallscope: cannot remove tracefs instance {}: {e}",
                self.instance.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mount::{mount_tracefs, umount};
    use super::*;
    use crate::model::kernel::TraceKind;
    use std::fs::File;
    use std::io::{Read, Write};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    /// Root tests that touch tracefs run one at a time.
    static LOCK: Mutex<()> = Mutex::new(());

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
    fn the_scheduler_s_state_encoding_is_read_off_a_sleep_of_our_own() {
        let test = "the_scheduler_s_state_encoding_is_read_off_a_sleep_of_our_own";
        if !crate::base::testenv::require_root(test) {
            return;
        }
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = TraceSession::start(None).expect("start trace session");
        s.enable_sched(true, true).expect("scheduler events");
        // This kernel (6.x) records S as 0x1: a sleep seen as D would say 0x2.
        assert_eq!(s.state_bits(), Some(StateBits::default()));
    }

    #[test]
    fn a_thread_s_fdatasync_and_futex_wait_are_recorded_with_their_fd_and_word() {
        let test = "a_thread_s_fdatasync_and_futex_wait_are_recorded_with_their_fd_and_word";
        if !crate::base::testenv::require_root(test) {
            return;
        }
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = TraceSession::start(None).expect("start trace session");
        s.enable_sched(true, true).expect("scheduler events");
        let tid = unsafe { libc::gettid() } as u32;
        s.set_sched_filter(&[tid]).unwrap();
        let _ = s.drain();
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join("f")).unwrap();
        f.sync_data().unwrap();
        // A condvar's timed wait: a futex wait (FUTEX_WAIT_BITSET).
        let pair = (Mutex::new(()), std::sync::Condvar::new());
        let g = pair.0.lock().unwrap();
        let _ = pair.1.wait_timeout(g, Duration::from_millis(5)).unwrap();
        let evs = drain_until(&mut s, |e| {
            matches!(&e.kind, TraceKind::SysEnter { addr: Some(_), .. })
        });
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        assert!(
            evs.iter().any(|e| matches!(&e.kind,
                TraceKind::SysEnter { call, fd: Some(x), .. } if call.as_str() == "fdatasync" && *x == i64::from(fd))),
            "fdatasync's entry with its fd: {evs:?}"
        );
        assert!(
            evs.iter().any(|e| matches!(&e.kind,
                TraceKind::SysExit { call, ret: 0 } if call.as_str() == "fdatasync")),
            "and its exit: {evs:?}"
        );
        assert!(
            evs.iter()
                .any(|e| matches!(&e.kind, TraceKind::SysEnter { addr: Some(a), .. } if *a != 0)),
            "the futex wait's word (the filter passed FUTEX_WAIT_BITSET|PRIVATE): {evs:?}"
        );
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
