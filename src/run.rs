//! One run, without any UI: prepare the targets, start the engines and the
//! watchdog, fold their messages into snapshots once per interval and hand
//! them to a `Sink`, then stop everything and clean up on every exit path
//! (the scratch folders are `Drop` guards).

use crate::aggregate::{Aggregator, TargetState};
use crate::config::{Config, Mode};
use crate::error::UsageError;
use crate::kernel::proc::{self as kproc, Device, ProcRoot, ProcSampler};
use crate::kernel::trace::TraceSession;
use crate::measure::{Clock, Handover, Msg, Timing};
use crate::mounts;
use crate::output::Sink;
use crate::scratch::Scratch;
use crate::snapshot::{Summary, TargetMeta};
use crate::watchdog::Watchdog;
use crate::writer::{Engine, EngineSpec};
use crossbeam::channel::{bounded, unbounded, RecvTimeoutError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
}

/// The default target: $TMPDIR, else /var/tmp.
pub fn default_target() -> PathBuf {
    std::env::var_os("TMPDIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
}

/// Filesystem, device and mount options of a directory.
pub fn describe(path: &Path) -> TargetMeta {
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let m = mounts::lookup(Path::new("/proc"), &canon);
    TargetMeta {
        path: path.display().to_string(),
        fs: m
            .as_ref()
            .map(|m| m.fs_type.clone())
            .unwrap_or_else(|| "?".into()),
        device: m
            .as_ref()
            .map(|m| format!("{} ({}:{})", m.source, m.major, m.minor))
            .unwrap_or_else(|| "?".into()),
        mount_options: m.map(|m| m.options).unwrap_or_default(),
    }
}

/// Validates every target and creates the scratch folders. On error, the
/// folders already made are removed as the guards drop.
pub fn prepare(cfg: &Config) -> Result<Prepared, UsageError> {
    let mut paths = cfg.targets.clone();
    if paths.is_empty() {
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
    Ok(Prepared { targets, journal })
}

/// Runs the workload until `duration` or until `stop` is set, feeding `sink`.
pub fn run(cfg: &Config, stop: &AtomicBool, sink: &mut dyn Sink) -> anyhow::Result<Summary> {
    cfg.validate()?;
    let prepared = prepare(cfg)?;
    run_prepared(cfg, &prepared, stop, sink)
}

pub fn run_prepared(
    cfg: &Config,
    prepared: &Prepared,
    stop: &AtomicBool,
    sink: &mut dyn Sink,
) -> anyhow::Result<Summary> {
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
    let metas: Vec<TargetMeta> = prepared.targets.iter().map(|t| t.meta.clone()).collect();
    let state = TargetState {
        mode: cfg.mode,
        threads: cfg.threads,
        active: true,
    };
    let mut agg = Aggregator::new(timing.interval.as_nanos() as u64, vec![state; metas.len()]);
    let watchdog = Watchdog::start(clock, timing.threshold, tx.clone());
    let mut engines = Vec::new();
    for (i, t) in prepared.targets.iter().enumerate() {
        let jdir = prepared.journal.as_ref().map(|s| s.path());
        let spec = EngineSpec::new(cfg, i, t.scratch.path(), jdir);
        engines.push(Engine::start(&spec, timing, handover.clone())?);
    }
    let slots: Vec<_> = engines.iter().flat_map(|e| e.slots.clone()).collect();
    watchdog.set_slots(slots.clone());
    drop(tx);

    // Kernel side: /proc every interval, tracefs events when we can.
    let devices: Vec<Option<Device>> = prepared
        .targets
        .iter()
        .map(|t| t.device.clone().ok())
        .collect();
    let mut sampler = ProcSampler::new(ProcRoot::default(), devices.clone());
    let page_kib = kproc::page_kib();
    let mut prev_sample = sampler.sample(clock.now_ns());
    let mut trace = start_trace(&slots, &devices, &mut agg);
    sink.begin(&metas)?;

    let end_ns = cfg.duration.map(|d| d.0.as_nanos() as u64);
    let interval_ns = timing.interval.as_nanos() as u64;
    let mut sink_err = None;
    let mut next_boundary = interval_ns;
    loop {
        let now = clock.now_ns();
        if stop.load(Ordering::Relaxed) || end_ns.is_some_and(|e| now >= e) {
            break;
        }
        if now >= next_boundary {
            // The kernel's view of the interval that just ended.
            let cur = sampler.sample(now);
            let index = (now / interval_ns).saturating_sub(1);
            agg.fold_kernel(index, kproc::derive(&prev_sample, &cur, page_kib));
            prev_sample = cur;
            next_boundary = (now / interval_ns + 1) * interval_ns;
        }
        if let Some(t) = trace.as_mut() {
            for ev in t.drain() {
                agg.fold_trace(clock.from_mono(ev.t_mono_ns), ev.tid, ev.kind);
            }
        }
        let next_tick = ((now / interval_ns) + 1) * interval_ns + crate::aggregate::GRACE_NS;
        let mut wait = Duration::from_nanos(next_tick.min(next_boundary).saturating_sub(now));
        if let Some(e) = end_ns {
            wait = wait.min(Duration::from_nanos(e.saturating_sub(now)));
        }
        match rx.recv_timeout(wait.min(Duration::from_millis(100))) {
            Ok(m) => {
                agg.fold(m);
                for m in rx.try_iter().take(10_000) {
                    agg.fold(m);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        for h in agg.recycled.drain(..) {
            let _ = spare_tx.try_send(h);
        }
        for s in agg.tick(clock.now_ns()) {
            if let Err(e) = sink.snapshot(&s) {
                sink_err = Some(e);
            }
        }
        if sink_err.is_some() {
            break;
        }
    }
    let end = end_ns.map_or(clock.now_ns(), |e| e.min(clock.now_ns()));
    // The kernel's view of the last (possibly partial) interval.
    let cur = sampler.sample(clock.now_ns());
    let last = (next_boundary / interval_ns).saturating_sub(1);
    agg.fold_kernel(last, kproc::derive(&prev_sample, &cur, page_kib));
    for e in &engines {
        e.request_stop();
    }
    for e in engines {
        e.stop();
    }
    drop(watchdog);
    drop(handover);
    for m in rx.try_iter() {
        agg.fold(m);
    }
    if let Some(t) = trace.as_mut() {
        for ev in t.drain() {
            agg.fold_trace(clock.from_mono(ev.t_mono_ns), ev.tid, ev.kind);
        }
    }
    drop(trace);
    let (tail, summary) = agg.finish(end);
    if let Some(e) = sink_err {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Ok(summary);
        }
        return Err(e.into());
    }
    for s in tail {
        sink.snapshot(&s)?;
    }
    sink.summary(&summary)?;
    Ok(summary)
}

/// Starts tracing filtered to our writer threads and the targets' devices,
/// or says once why it cannot (the trace fields are then null, not zero).
fn start_trace(
    slots: &[crate::writer::WatchSlot],
    devices: &[Option<Device>],
    agg: &mut Aggregator,
) -> Option<TraceSession> {
    // Threads publish their kernel id as they start; give them a moment.
    let t0 = std::time::Instant::now();
    while slots.iter().any(|s| s.inflight.tid() == 0) && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(2));
    }
    let tids: Vec<u32> = slots
        .iter()
        .map(|s| s.inflight.tid())
        .filter(|&t| t != 0)
        .collect();
    for s in slots {
        agg.set_tid(s.inflight.tid(), s.target, s.thread);
    }
    let session = TraceSession::start(None).and_then(|t| {
        let bdis: Vec<String> = devices
            .iter()
            .flatten()
            .filter_map(|d| kproc::bdi_name(&ProcRoot::default(), d).ok())
            .collect();
        t.set_filters(&tids, &bdis)?;
        Ok(t)
    });
    match session {
        Ok(t) => {
            agg.set_tracing(true);
            Some(t)
        }
        Err(why) => {
            eprintln!(
                "stallscope: kernel tracing unavailable ({why}); throttle and writeback-wait fields are null and causes come from counters (low confidence)"
            );
            None
        }
    }
}
