//! One run, without any UI: prepare the targets, start the engines and the
//! watchdog, fold their messages into snapshots once per interval and hand
//! them to a `Sink`, then stop everything and clean up on every exit path
//! (the scratch folders are `Drop` guards).

mod guest;

use crate::base::clock::Clock;
use crate::base::error::UsageError;
use crate::config::{Config, Mode};
use crate::fold::aggregate::{Aggregator, TargetState};
use crate::model::control::{Control, Notice};
use crate::model::kernel::Device;
use crate::model::msg::{Handover, Msg, Timing};
use crate::model::observed::BlockTiming;
use crate::model::snapshot::{Summary, TargetMeta};
use crate::sink::Sink;
use crate::source::mounts::describe;
use crate::source::proc as kproc;
use crate::source::proc::{ProcRoot, ProcSampler};
use crate::source::scratch::Scratch;
use crate::source::trace::TraceSession;
use crate::source::watchdog::Watchdog;
use crate::source::writer::{Engine, EngineSpec, TargetFull};
use crossbeam::channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// With scheduler timing: how often the trace is drained and blocked
/// threads' stacks are looked at (at least), and the /proc sampler's
/// slower pace (`Observer::set_every`).
const STACK_LOOK_EVERY: Duration = Duration::from_millis(50);
const SCHED_OBSERVE_EVERY: Duration = crate::source::observe::DISCOVER_EVERY;

/// A target ready to be written: its scratch folder exists.
pub struct PreparedTarget {
    pub path: PathBuf,
    pub meta: TargetMeta,
    pub scratch: Scratch,
    /// The block device behind it, or why there is none (tmpfs, btrfs).
    pub device: Result<Device, String>,
}

/// All targets of a run, plus the journal's scratch when it lives elsewhere.
pub struct Prepared {
    pub targets: Vec<PreparedTarget>,
    pub journal: Option<Scratch>,
    /// Observe mode: the processes to watch, resolved before anything starts.
    pub watched: Vec<crate::model::observed::Watched>,
    /// In the lab's capped cgroup (v2) while targets are on its devices;
    /// back where we were when the run ends.
    pub cgroup: Option<crate::source::cgroup::CgroupJoin>,
}

/// The default target: $TMPDIR, else /var/tmp.
pub fn default_target() -> PathBuf {
    std::env::var_os("TMPDIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
}

/// What observe mode follows, from the command line.
fn follow(cfg: &Config) -> crate::model::observed::Follow {
    crate::model::observed::Follow {
        pids: cfg.observe.clone(),
        names: cfg.observe_name.clone(),
    }
}

/// Validates every target and creates the scratch folders. On error, the
/// folders already made are removed as the guards drop.
pub fn prepare(cfg: &Config) -> Result<Prepared, UsageError> {
    let mut watched =
        crate::source::observe::resolve(Path::new("/proc"), &cfg.observe, &cfg.observe_name)?;
    // Their children that exist now are watched from the start.
    let mut discover =
        crate::source::observe::Discover::new(Path::new("/proc"), follow(cfg), &watched);
    let children = discover.scan(&watched);
    watched.extend(children);
    let mut paths = cfg.targets.clone();
    if paths.is_empty() && !cfg.observing() {
        let d = default_target();
        let meta = describe(&d);
        eprintln!(
            "stallscope: no --target given; writing under {} ({} on {})",
            d.display(),
            meta.fs,
            meta.device
        );
        paths.push(d);
    }
    let mut seen = Vec::new();
    let mut targets = Vec::new();
    for p in paths {
        let is_link = std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink());
        let p = if is_link && cfg.follow_symlinks {
            std::fs::canonicalize(&p)
                .map_err(|e| UsageError::new(format!("target {}: {e}", p.display())))?
        } else {
            p
        };
        let canon = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        if seen.contains(&canon) {
            return Err(UsageError::new(format!(
                "target {} is given twice",
                p.display()
            )));
        }
        seen.push(canon);
        let scratch = Scratch::create(&p)?;
        targets.push(PreparedTarget {
            meta: describe(&p),
            device: kproc::resolve_device(&ProcRoot::default(), &p),
            path: p,
            scratch,
        });
    }
    let journal = match (&cfg.journal_dir, cfg.mode) {
        (Some(j), Mode::Journal) => Some(Scratch::create(j)?),
        _ => None,
    };
    let paths: Vec<PathBuf> = targets.iter().map(|t| t.path.clone()).collect();
    Ok(Prepared {
        cgroup: crate::source::cgroup::join_for_targets(&paths),
        targets,
        journal,
        watched,
    })
}

/// Runs the workload until `duration` or until `stop` is set, feeding `sink`
/// (and a recording at `record`, when given).
pub fn run(
    cfg: &Config,
    record: Option<&Path>,
    stop: &AtomicBool,
    sink: &mut dyn Sink,
) -> anyhow::Result<Summary> {
    cfg.validate()?;
    if let Some(r) = record {
        check_record_path(r)?;
    }
    let prepared = prepare(cfg)?;
    let mut s = Session::start(cfg, prepared, Placement::All)?;
    print_notes(&mut s);
    match record {
        Some(path) => {
            let mut rec = crate::sink::recording::Recorder::create(path, s.recording_header())?;
            let mut tee = crate::sink::Tee(sink, &mut rec);
            run_session(cfg, s, stop, &mut tee)
        }
        None => run_session(cfg, s, stop, sink),
    }
}

/// A recording file must not exist yet and its folder must.
pub fn check_record_path(p: &Path) -> Result<(), UsageError> {
    if p.extension().is_some_and(|e| e == "zst") {
        return Err(UsageError::new(format!(
            "cannot record to {}: recordings are compressed as .gz now (zstd's C library doubled the build time); .zst recordings made before still replay",
            p.display()
        )));
    }
    if p.exists() {
        return Err(UsageError::new(format!(
            "recording {} already exists; choose a new name",
            p.display()
        )));
    }
    let dir = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(UsageError::new(format!(
            "cannot record to {}: {} is not a directory",
            p.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// The headless loop: every target runs its writers at once.
pub fn run_prepared(
    cfg: &Config,
    prepared: Prepared,
    stop: &AtomicBool,
    sink: &mut dyn Sink,
) -> anyhow::Result<Summary> {
    let mut s = Session::start(cfg, prepared, Placement::All)?;
    print_notes(&mut s);
    run_session(cfg, s, stop, sink)
}

/// The session's notes on stderr.
pub fn print_notes(s: &mut Session) {
    for n in s.take_notes() {
        eprintln!("stallscope: {n}");
    }
}

fn run_session(
    cfg: &Config,
    mut s: Session,
    stop: &AtomicBool,
    sink: &mut dyn Sink,
) -> anyhow::Result<Summary> {
    sink.begin(&s.metas())?;
    let end_ns = cfg.duration.map(|d| d.0.as_nanos() as u64);
    let mut sink_err = None;
    while !stop.load(Ordering::Relaxed) && end_ns.is_none_or(|e| s.now_ns() < e) {
        if let Err(e) = s.step(end_ns, sink) {
            sink_err = Some(e);
            break;
        }
    }
    let summary = s.finish(end_ns, if sink_err.is_some() { None } else { Some(sink) })?;
    match sink_err {
        Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(summary),
    }
}

/// Where the writers run: on every target at once (headless), or on one
/// active target that the person moves between (the dashboard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    All,
    One(usize),
}

/// A running measurement: writers, watchdog, samplers and the aggregator,
/// driven one `step` at a time so a UI thread can steer it between steps.
pub struct Session {
    cfg: Config,
    prepared: Prepared,
    placement: Placement,
    paused: bool,
    clock: Clock,
    timing: Timing,
    rx: Receiver<Msg>,
    tx: Sender<Msg>,
    spare_tx: Sender<hdrhistogram::Histogram<u64>>,
    handover: Handover,
    agg: Aggregator,
    watchdog: Watchdog,
    engines: Vec<Option<Engine>>,
    /// Engines asked to stop whose threads may still be in an op (a long
    /// msync): the dashboard does not wait for them; dropped once done.
    stopping: Vec<Engine>,
    /// Engines started so far: each writes in its own folder `e<N>`, so a
    /// new one never meets the files of one still stopping.
    engine_gen: u64,
    /// Per target: backing off since it was too full to start its writers,
    /// retried at this time (run clock, ns).
    full_retry: Vec<Option<(u64, String)>>,
    sampler: ProcSampler,
    /// The first raw kernel sample (a recording's header keeps it).
    pub start_sample: crate::model::kernel::ProcSample,
    trace: Option<TraceSession>,
    /// The events of one drain, kept between steps (`drain_into`).
    trace_buf: Vec<crate::model::kernel::TraceEvent>,
    /// Why tracing is unavailable, if it is.
    pub trace_error: Option<String>,
    /// What this kernel gives and lacks, in one line (`source::support`).
    pub support_line: String,
    /// Observe mode: the sampler of the watched processes and their
    /// current thread ids (tracing follows them).
    observer: Option<crate::source::observe::Observer>,
    obs_tids: Vec<u32>,
    interval_ns: u64,
    next_boundary: u64,
    last_trim_ns: u64,
    /// What to tell the person, not yet taken (see `take_notes`).
    notes: Vec<String>,
}

impl Session {
    /// Starts the sources; what a person should know about the run (no
    /// tracing, how observed threads are timed) is in `take_notes`.
    pub fn start(
        cfg: &Config,
        prepared: Prepared,
        placement: Placement,
    ) -> anyhow::Result<Session> {
        // Only observing: a guest on the server's node (before any thread
        // of ours starts, so that they all inherit it).
        let guest_note = if prepared.targets.is_empty() && !prepared.watched.is_empty() {
            guest::yield_to_the_server()
        } else {
            None
        };
        let mut s = Session::assemble(cfg, prepared, placement);
        s.notes.extend(guest_note);
        // Tracing first: the writers' first ops are traced too.
        s.start_tracing();
        s.start_engines()?;
        s.refuse_if_all_full()?;
        s.note_observing();
        Ok(s)
    }

    /// The session with its clock, channel, fold, watchdog, sampler and
    /// observer; no writers yet.
    fn assemble(cfg: &Config, prepared: Prepared, placement: Placement) -> Session {
        let clock = Clock::new();
        let timing = Timing {
            clock,
            interval: cfg.interval.0,
            threshold: cfg.stall_threshold.0,
        };
        let (tx, rx) = unbounded::<Msg>();
        let (spare_tx, spare_rx) = bounded(1024);
        let handover = Handover {
            tx: tx.clone(),
            spare: spare_rx,
        };
        let states = (0..prepared.targets.len())
            .map(|i| TargetState {
                mode: cfg.mode,
                threads: cfg.threads,
                active: placement == Placement::All || placement == Placement::One(i),
            })
            .collect();
        let interval_ns = timing.interval.as_nanos() as u64;
        let mut agg = Aggregator::new(interval_ns, states);
        let watchdog = Watchdog::start(clock, timing.threshold, tx.clone());
        let mut sampler = ProcSampler::new(ProcRoot::default(), device_list(&prepared));
        let start_sample = sampler.sample(clock.now_ns());
        agg.set_kernel_base(start_sample.clone(), kproc::page_kib());
        let engines = (0..prepared.targets.len()).map(|_| None).collect();
        let full_retry = vec![None; prepared.targets.len()];
        let observer = (!prepared.watched.is_empty()).then(|| {
            agg.set_observed(prepared.watched.clone());
            crate::source::observe::Observer::start(
                prepared.watched.clone(),
                follow(cfg),
                cfg.observe_every.0,
                timing.threshold,
                clock,
                tx.clone(),
            )
        });
        Session {
            cfg: cfg.clone(),
            prepared,
            placement,
            paused: false,
            clock,
            timing,
            rx,
            tx,
            spare_tx,
            handover,
            agg,
            watchdog,
            engines,
            stopping: Vec::new(),
            engine_gen: 0,
            full_retry,
            sampler,
            start_sample,
            trace: None,
            trace_buf: Vec::new(),
            trace_error: None,
            support_line: String::new(),
            observer,
            obs_tids: Vec::new(),
            interval_ns,
            next_boundary: interval_ns,
            last_trim_ns: 0,
            notes: Vec::new(),
        }
    }

    /// The private tracefs instance (root); observed threads are timed by
    /// the scheduler when its events are there.
    fn start_tracing(&mut self) {
        let started = TraceSession::start(None);
        // What this kernel gives, in one line (the same as `probe`'s table).
        let support = crate::source::support::gather(
            &ProcRoot::default(),
            started
                .as_ref()
                .map(|t| t.features().clone())
                .map_err(Clone::clone),
            crate::source::support::describe_cgroups(&crate::source::cgroup::Cgroups::detect()),
            None,
        )
        .support();
        self.support_line = support.one_line();
        self.notes.push(self.support_line.clone());
        match started {
            Ok(mut t) => {
                let sched_wanted = self.cfg.observe_timing == crate::config::ObserveTiming::Auto;
                let chains = self.cfg.chains == crate::config::Chains::Auto;
                let calls = self.cfg.call_bounds == crate::config::CallBounds::Auto;
                if !self.prepared.watched.is_empty() && sched_wanted {
                    match t.enable_sched(chains, calls) {
                        Ok(()) => {
                            self.agg
                                .set_sched_timing(self.timing.threshold.as_nanos() as u64, chains);
                            // STALLSCOPE_NO_CALL_PATTERN: for measuring
                            // what counting it costs (scripts/server-cost.sh).
                            if t.calls() && std::env::var_os("STALLSCOPE_NO_CALL_PATTERN").is_none()
                            {
                                self.agg.set_call_pattern();
                            }
                            if let Some(o) = &self.observer {
                                o.set_every(self.cfg.observe_every.0.max(SCHED_OBSERVE_EVERY));
                            }
                        }
                        Err(why) => self.notes.push(format!(
                            "{why}; blocking times stay sampled and wake-up chains are off"
                        )),
                    }
                } else if !self.prepared.watched.is_empty() && chains {
                    self.notes.push(
                        "wake-up chains need the scheduler's timing (--observe-timing auto): threads asleep waiting for other threads are not followed".into(),
                    );
                }
                let f = t.features();
                self.agg.set_trace_unseen(crate::fold::attribute::Unseen {
                    throttle: f.throttle.is_err(),
                    page_waits: f.page_wait.is_err(),
                    flusher: f.flusher.is_err(),
                });
                for m in f.missing() {
                    self.notes.push(format!("tracing without {m}"));
                }
                self.trace = Some(t);
                self.agg.set_tracing(true);
                self.refresh_trace_filters();
            }
            Err(why) => {
                self.notes.push(format!(
                    "kernel tracing unavailable ({why}); throttle and writeback-wait fields are null and causes come from counters (low confidence)"
                ));
                if !self.prepared.watched.is_empty()
                    && self.cfg.chains == crate::config::Chains::Auto
                {
                    self.notes.push(format!(
                        "wake-up chains need tracing ({why}): only observed threads' own kernel waits (D state) are stalls; threads asleep waiting for other threads are not followed"
                    ));
                }
                self.trace_error = Some(why);
            }
        }
    }

    /// Observe mode: what is watched, how blocks are timed, what needs root.
    fn note_observing(&mut self) {
        if self.prepared.watched.is_empty() {
            return;
        }
        let names: Vec<String> = self
            .prepared
            .watched
            .iter()
            .map(|w| format!("{} ({})", w.pid, w.comm))
            .collect();
        self.notes.push(format!(
            "observing {} and what they fork; {}{}",
            names.join(", "),
            self.agg.timing().describe(self.cfg.observe_every.0),
            if self.prepared.targets.is_empty() {
                ", no writers of our own"
            } else {
                ""
            }
        ));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            self.notes.push(
                "not root: observe mode shows D-state threads, faults and write_bytes; attributing a stall to dirty throttling needs root (tracefs events and kernel stacks), so causes are low confidence".into(),
            );
        }
    }

    /// Notes for the person running it, each once (the caller prints them,
    /// prefixed "stallscope: ").
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// The header a recording of this session starts with.
    pub fn recording_header(&self) -> crate::sink::recording::Header {
        let mut h = crate::sink::recording::Header::new(
            &self.cfg,
            self.metas(),
            self.trace_error.clone(),
            Some(self.start_sample.clone()),
        );
        h.observed = self.prepared.watched.clone();
        h
    }

    pub fn metas(&self) -> Vec<TargetMeta> {
        self.prepared
            .targets
            .iter()
            .map(|t| t.meta.clone())
            .collect()
    }

    /// Observe mode: the processes watched.
    pub fn watched(&self) -> &[crate::model::observed::Watched] {
        &self.prepared.watched
    }

    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    fn active(&self, i: usize) -> bool {
        !self.paused
            && match self.placement {
                Placement::All => true,
                Placement::One(a) => a == i,
            }
    }

    /// At the start, when no target could take its writers (all full) and
    /// nothing is observed, there is nothing to show: the error names the
    /// targets, their free space and what to change.
    fn refuse_if_all_full(&self) -> anyhow::Result<()> {
        let full: Vec<&str> = self
            .full_retry
            .iter()
            .flatten()
            .map(|(_, why)| why.as_str())
            .collect();
        let running = self.engines.iter().any(Option::is_some);
        if full.is_empty() || running || !self.prepared.watched.is_empty() {
            return Ok(());
        }
        Err(UsageError::new(full.join("; ")).into())
    }

    /// Starts writers wherever they should run and are not running. A
    /// target too full for its first segment does not stop the others: it
    /// gets an event and is retried every `FULL_RETRY_NS`.
    fn start_engines(&mut self) -> anyhow::Result<()> {
        let now = self.now_ns();
        let mut full = Vec::new();
        for i in 0..self.prepared.targets.len() {
            let want = self.active(i);
            self.agg.set_state(
                i,
                TargetState {
                    mode: self.cfg.mode,
                    threads: self.cfg.threads,
                    active: want,
                },
            );
            let backing_off = self.full_retry[i].as_ref().is_some_and(|r| r.0 > now);
            if want && self.engines[i].is_none() && !backing_off {
                let t = &self.prepared.targets[i];
                self.engine_gen += 1;
                let own = format!("e{}", self.engine_gen);
                let dir = t.scratch.path().join(&own);
                let jdir = self.prepared.journal.as_ref().map(|s| s.path().join(&own));
                let dirs: Vec<PathBuf> = std::iter::once(dir.clone()).chain(jdir.clone()).collect();
                for d in &dirs {
                    std::fs::create_dir_all(d)?;
                }
                let spec = EngineSpec::new(&self.cfg, i, &dir, jdir.as_deref());
                match Engine::start_held(&spec, self.timing, self.handover.clone()) {
                    Ok(mut eng) => {
                        eng.remove_on_drop(dirs);
                        self.engines[i] = Some(eng);
                        self.agg.clear_failed(i);
                        if self.full_retry[i].take().is_some() {
                            self.event(
                                i,
                                crate::model::msg::EventKind::Info,
                                format!("{}: room again, writers started", t.path.display()),
                            );
                        }
                    }
                    Err(e) => {
                        for d in &dirs {
                            let _ = std::fs::remove_dir_all(d);
                        }
                        if !e.is::<TargetFull>() {
                            return Err(e);
                        }
                        full.push((i, e));
                    }
                }
            }
        }
        // Trace filters name the new threads before they write.
        self.refresh_watch();
        for e in self.engines.iter().flatten() {
            e.release();
        }
        for (i, e) in full {
            let why = format!("{}: {e}", self.prepared.targets[i].path.display());
            if self.full_retry[i].is_none() {
                let kind = crate::model::msg::EventKind::TargetFull;
                self.event(i, kind, format!("{why}; backing off, retrying every 5 s"));
            }
            self.full_retry[i] = Some((now + FULL_RETRY_NS, why));
        }
        Ok(())
    }

    /// A run event of target `i`, from the session itself.
    fn event(&self, target: usize, kind: crate::model::msg::EventKind, message: String) {
        let _ = self.tx.send(Msg::Event {
            target,
            thread: None,
            t_ns: self.now_ns(),
            kind,
            message,
        });
    }

    /// Stops every engine without waiting: writers finish the op in hand
    /// (their last batch and stall still arrive), and are reaped by `step`.
    fn stop_engines(&mut self) {
        for e in self.engines.iter_mut() {
            if let Some(e) = e.take() {
                e.request_stop();
                self.stopping.push(e);
            }
        }
        self.refresh_watch();
    }

    /// Drops the stopping engines whose threads have returned.
    fn reap_stopped(&mut self) {
        let before = self.stopping.len();
        self.stopping.retain(|e| !e.is_finished());
        if self.stopping.len() != before {
            self.refresh_watch();
        }
    }

    /// Stops every engine and waits for its threads (the end of the run).
    fn stop_engines_and_wait(&mut self) {
        for e in self.engines.iter_mut().filter_map(Option::take) {
            e.request_stop();
            self.stopping.push(e);
        }
        self.stopping.clear();
        self.refresh_watch();
    }

    /// The in-flight slots of every thread that may still be in an op.
    fn slots(&self) -> Vec<crate::source::writer::WatchSlot> {
        self.engines
            .iter()
            .flatten()
            .chain(&self.stopping)
            .flat_map(|e| e.slots.clone())
            .collect()
    }

    fn refresh_watch(&mut self) {
        let slots = self.slots();
        self.watchdog.set_slots(slots);
        self.refresh_trace_filters();
    }

    /// Maps our threads' kernel ids and narrows tracing to them.
    fn refresh_trace_filters(&mut self) {
        let slots = self.slots();
        let t0 = std::time::Instant::now();
        while slots.iter().any(|s| s.inflight.tid() == 0) && t0.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(2));
        }
        for s in &slots {
            self.agg.set_tid(s.inflight.tid(), s.target, s.thread);
        }
        if let Some(t) = self.trace.as_mut() {
            let writers: Vec<u32> = slots
                .iter()
                .map(|s| s.inflight.tid())
                .filter(|&t| t != 0)
                .collect();
            let mut bdis: Vec<String> = Vec::new();
            for (i, d) in self.sampler.devices().iter().enumerate() {
                let Some(bdi) = d
                    .as_ref()
                    .and_then(|d| kproc::bdi_name(&ProcRoot::default(), d).ok())
                else {
                    continue;
                };
                self.agg.set_target_bdi(i, bdi.clone());
                bdis.push(bdi);
            }
            // The scheduler's instance first: it says whether observed
            // threads' page waits come with its raw events.
            if let Err(e) = t.set_sched_filter(&self.obs_tids) {
                eprintln!("stallscope: {e}");
            }
            if let Err(e) = t.set_filters(&writers, &self.obs_tids, &bdis) {
                eprintln!("stallscope: cannot set trace filters: {e}");
            }
        }
    }

    /// Applies a control from the dashboard between steps.
    pub fn apply(&mut self, c: Control) -> Notice {
        let t_s = self.now_ns() as f64 / 1e9;
        let applied = |what: String| Notice::Applied { t_s, what };
        match c {
            Control::Pause(p) => {
                self.paused = p;
                if p {
                    self.stop_engines();
                    for i in 0..self.prepared.targets.len() {
                        if let Some(mut st) = self.agg.state(i) {
                            st.active = false;
                            self.agg.set_state(i, st);
                        }
                    }
                    applied("writers paused".into())
                } else {
                    self.restart(applied("writers resumed".into()))
                }
            }
            Control::SwitchTarget(i) if i < self.prepared.targets.len() => {
                self.placement = Placement::One(i);
                self.stop_engines();
                let what = format!("writers moved to {}", self.prepared.targets[i].meta.path);
                self.restart(applied(what))
            }
            Control::SwitchTarget(i) => Notice::Refused(format!("no target {}", i + 1)),
            Control::SetMode(m) => {
                let old = self.cfg.mode;
                self.cfg.mode = m;
                if let Err(e) = self.cfg.validate() {
                    self.cfg.mode = old;
                    return Notice::Refused(e.to_string());
                }
                self.stop_engines();
                match self.start_engines() {
                    Ok(()) => applied(format!("mode {m}")),
                    Err(e) => {
                        self.cfg.mode = old;
                        let _ = self.start_engines();
                        Notice::Refused(format!("mode {m}: {e:#}"))
                    }
                }
            }
            Control::SetThreads(n) => {
                let old = self.cfg.threads;
                self.cfg.threads = n;
                if let Err(e) = self.cfg.validate() {
                    self.cfg.threads = old;
                    return Notice::Refused(e.to_string());
                }
                self.stop_engines();
                self.restart(applied(crate::base::text::count(n.into(), "thread")))
            }
            Control::AddTarget(p) => self.add_target(p),
            Control::Record(_) => Notice::Refused("recording is driven by the dashboard".into()),
            Control::Quit => applied("quit".into()),
        }
    }

    fn restart(&mut self, ok: Notice) -> Notice {
        match self.start_engines() {
            Ok(()) => ok,
            Err(e) => Notice::Refused(format!("{e:#}")),
        }
    }

    fn add_target(&mut self, p: PathBuf) -> Notice {
        let canon = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        if self
            .prepared
            .targets
            .iter()
            .any(|t| std::fs::canonicalize(&t.path).ok().as_ref() == Some(&canon))
        {
            return Notice::Refused(format!("target {} is already there", p.display()));
        }
        let scratch = match Scratch::create(&p) {
            Ok(s) => s,
            Err(e) => return Notice::Refused(e.to_string()),
        };
        let meta = describe(&p);
        self.prepared.targets.push(PreparedTarget {
            meta: meta.clone(),
            device: kproc::resolve_device(&ProcRoot::default(), &p),
            path: p,
            scratch,
        });
        self.engines.push(None);
        self.full_retry.push(None);
        let i = self.agg.add_target(TargetState {
            mode: self.cfg.mode,
            threads: self.cfg.threads,
            active: false,
        });
        self.sampler = ProcSampler::new(ProcRoot::default(), device_list(&self.prepared));
        if let Err(e) = self.start_engines() {
            return Notice::Refused(format!("{e:#}"));
        }
        Notice::TargetAdded(i, meta)
    }

    /// Waits for the next message or boundary (at most 100 ms), folds what
    /// arrived, samples the kernel at interval boundaries and hands every
    /// finished interval to `sink`.
    pub fn step(&mut self, end_ns: Option<u64>, sink: &mut dyn Sink) -> std::io::Result<()> {
        let now = self.now_ns();
        if !self.stopping.is_empty() {
            self.reap_stopped();
        }
        if self.full_retry.iter().flatten().any(|r| r.0 <= now) {
            if let Err(e) = self.start_engines() {
                let kind = crate::model::msg::EventKind::WriterError;
                self.event(0, kind, format!("restarting writers: {e:#}"));
            }
        }
        if now >= self.next_boundary {
            self.sample(now);
        }
        self.drain_trace();
        self.read_block_stacks();
        let next_tick =
            (now / self.interval_ns + 1) * self.interval_ns + crate::fold::aggregate::GRACE_NS;
        let mut wait = next_tick.min(self.next_boundary).saturating_sub(now);
        if let Some(e) = end_ns {
            wait = wait.min(e.saturating_sub(now));
        }
        let most = match self.agg.timing() {
            BlockTiming::Sched => STACK_LOOK_EVERY,
            BlockTiming::Sampled => Duration::from_millis(100),
        };
        match self.rx.recv_timeout(Duration::from_nanos(wait).min(most)) {
            Ok(m) => {
                self.agg.fold(m);
                for m in self.rx.try_iter().take(10_000) {
                    self.agg.fold(m);
                }
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {}
        }
        for h in self.agg.recycled.drain(..) {
            let _ = self.spare_tx.try_send(h);
        }
        if let Some(tids) = self.agg.take_observed_tids_changed() {
            self.obs_tids = tids;
            self.refresh_trace_filters();
        }
        for s in self.agg.tick(self.now_ns()) {
            sink.snapshot(&s)?;
        }
        Ok(())
    }

    /// The stalls in progress right now, for the dashboard's banner.
    pub fn live(&self) -> crate::model::stall::Live {
        self.agg.live(self.now_ns())
    }

    fn sample(&mut self, now: u64) {
        let cur = self.sampler.sample(now);
        let index = (now / self.interval_ns).saturating_sub(1);
        self.agg.fold_kernel(index, cur);
        self.next_boundary = (now / self.interval_ns + 1) * self.interval_ns;
        if now.saturating_sub(self.last_trim_ns) >= TRIM_EVERY_NS {
            self.last_trim_ns = now;
            give_back_freed_memory();
        }
    }

    /// Scheduler timing: the kernel stacks of observed threads blocked
    /// long enough to matter, read while they still wait (the events give
    /// the times, the stack names the wait).
    fn read_block_stacks(&mut self) {
        for tid in self.agg.blocks_wanting_stack(self.now_ns()) {
            // /proc/TID serves any thread, not only a process's first.
            if let Some(st) = crate::source::watchdog::task_stack(&format!("/proc/{tid}")) {
                self.agg.block_stack(tid, st);
            }
        }
        for (tid, fd) in self.agg.calls_wanting_file() {
            let link = std::fs::read_link(format!("/proc/{tid}/fd/{fd}"));
            let file = link.map_or_else(|_| String::new(), |p| p.display().to_string());
            self.agg.call_file(tid, file);
        }
    }

    fn drain_trace(&mut self) {
        // Every event up to now is in the buffers: the drain folds them all.
        let through = self.now_ns();
        if let Some(t) = self.trace.as_mut() {
            t.drain_into(&mut self.trace_buf);
            for ev in self.trace_buf.drain(..) {
                let t = self.clock.from_mono(ev.t_mono_ns);
                if let crate::model::kernel::TraceKind::Fork { child } = ev.kind {
                    if let Some((tgid, comm)) = task_of(child) {
                        self.agg.forked(ev.tid, child, tgid, &comm);
                    }
                    continue;
                }
                self.agg.fold_trace(t, ev.tid, ev.kind);
            }
            self.agg.set_trace_through(through);
        }
    }

    /// Stops the writers, folds what is left and emits the last intervals
    /// and the summary (to `sink` when given). Tracing is closed here.
    pub fn finish(
        mut self,
        end_ns: Option<u64>,
        sink: Option<&mut dyn Sink>,
    ) -> anyhow::Result<Summary> {
        let end = end_ns.map_or(self.now_ns(), |e| e.min(self.now_ns()));
        // The kernel's view of the last (possibly partial) interval.
        let cur = self.sampler.sample(self.now_ns());
        let last = (self.next_boundary / self.interval_ns).saturating_sub(1);
        self.agg.fold_kernel(last, cur);
        self.stop_engines_and_wait();
        // Its last sample ends the D-state runs still open.
        self.agg.set_end(end);
        drop(self.observer.take());
        let Session {
            rx,
            tx,
            handover,
            watchdog,
            mut agg,
            mut trace,
            clock,
            ..
        } = self;
        drop(watchdog);
        drop(handover);
        drop(tx);
        for m in rx.try_iter() {
            agg.fold(m);
        }
        if let Some(t) = trace.as_mut() {
            for ev in t.drain() {
                agg.fold_trace(clock.from_mono(ev.t_mono_ns), ev.tid, ev.kind);
            }
            if t.lost_events() > 0 {
                crate::base::error::note!(
                    "stallscope: the kernel dropped {} trace events (its buffer overran between reads): stalls and causes of those moments may be missing",
                    t.lost_events()
                );
            }
        }
        drop(trace);
        // What finished while stopping joins the last interval (the fold
        // merges it); the kernel's view is the one taken at the stop.
        let (tail, summary) = agg.finish(end);
        if let Some(sink) = sink {
            for s in tail {
                sink.snapshot(&s)?;
            }
            sink.summary(&summary)?;
        }
        Ok(summary)
    }
}

/// How often a target too full for its writers is tried again.
const FULL_RETRY_NS: u64 = 5_000_000_000;

/// How often freed heap memory is handed back to the kernel.
const TRIM_EVERY_NS: u64 = 10_000_000_000;

/// Every interval allocates and frees histograms, trace buffers and lines;
/// glibc keeps freed chunks, so a long run's resident memory would drift up
/// to its busiest moment and stay there. malloc_trim gives them back, so
/// RSS follows what is live (the soak checks it stays flat). It runs on
/// the session thread, never on a writer.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap pages; no pointers change.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn device_list(p: &Prepared) -> Vec<Option<Device>> {
    p.targets.iter().map(|t| t.device.clone().ok()).collect()
}

/// A task's process id and name from /proc (None: it is gone already).
fn task_of(tid: u32) -> Option<(u32, String)> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
    };
    Some((field("Tgid:")?.parse().ok()?, field("Name:")?))
}

#[cfg(test)]
mod tests;
