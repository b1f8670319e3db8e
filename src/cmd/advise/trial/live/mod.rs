//! `trial --observe`: a change tried on the live server. One observing
//! session runs throughout; the knob is flipped for B windows and put
//! back for A windows on the same running server, an A/A pair first and
//! then A/B pairs in alternating order, each window judged by the
//! observed processes' own stalls (`windows::figures`) with the lab
//! trial's verdict rule (`verdict::decide`).
//!
//! Load drifts on a live server (clients come and go, a batch job
//! starts). Three things guard against it: windows side by side (a slow
//! drift moves both windows of a pair alike and cancels in their ratio),
//! the alternating order (a drift that favours the second window of a
//! pair favours A and B equally often), and the A/A band (a verdict needs
//! a change beyond what two untreated windows differ by). What those
//! cannot absorb, a step in load, shows in the server's own write rate:
//! `windows::load_changed` then refuses a verdict (`inconclusive`).
//!
//! Nothing global beyond the knob itself: no sync, no dropped caches, no
//! lab; the observing session is the guest `run --observe` is.

pub mod knobs;
pub mod show;
pub mod windows;

use super::figures::{combine, RunFigures};
use super::verdict::{decide, Rules};
use super::{resolve, Measure, Side, MIN_PAIRS};
use crate::analysis::advice::outcome::{Outcome, Verdict};
use crate::analysis::advice::treatment::Setting;
use crate::base::error::UsageError;
use crate::config::Config;
use crate::model::snapshot::{Snapshot, Summary, TargetMeta};
use crate::session::{prepare, Placement, Session};
use crate::sink::Sink;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use windows::Window;

/// How a live trial runs.
#[derive(Clone, Debug)]
pub struct LiveOptions {
    pub settings: Vec<Setting>,
    pub pairs: usize,
    /// Each window's length; by default `windows::length` of the stall
    /// cycle a warm-up shows.
    pub window: Option<Duration>,
    pub measure: Measure,
    /// A path on the server's filesystem: `{bdi}` is its device. By
    /// default the first observed process's working directory
    /// (PostgreSQL's is its data directory).
    pub device_of: Option<PathBuf>,
}

/// One window as the JSON lists it: wall-clock bounds in seconds since
/// the epoch, so the server's own log can be lined up with them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WindowRow {
    pub side: &'static str,
    pub pair: usize,
    pub start_unix: f64,
    /// Figures count from here (`windows::settle_for` after the flip).
    pub measured_from_unix: f64,
    pub end_unix: f64,
    /// The verdict's measure in this window.
    pub measure: f64,
    pub stalls: u64,
    pub stall_ms_per_gib: f64,
    pub max_stall_ms: f64,
    /// Seconds in which one of the server's threads was in a stall.
    pub stall_s: f64,
    /// The server's own write rate (its /proc io write_bytes), MiB/s.
    pub write_mib_s: f64,
}

/// A finished live trial.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LiveOutcome {
    #[serde(flatten)]
    pub outcome: Outcome,
    /// "1234 (postgres)", each process observed at the start.
    pub observed: Vec<String>,
    pub window_s: f64,
    pub settle_s: f64,
    /// How the window length was chosen.
    pub window_why: String,
    /// Why no verdict was given, when the load moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<String>,
    pub windows: Vec<WindowRow>,
}

/// Keeps the session's snapshots.
#[derive(Default)]
struct Keep {
    snaps: Vec<Snapshot>,
}

impl Sink for Keep {
    fn begin(&mut self, _t: &[TargetMeta]) -> std::io::Result<()> {
        Ok(())
    }
    fn snapshot(&mut self, s: &Snapshot) -> std::io::Result<()> {
        self.snaps.push(s.clone());
        Ok(())
    }
    fn summary(&mut self, _s: &Summary) -> std::io::Result<()> {
        Ok(())
    }
}

/// What is checked before the server is touched.
struct Ready {
    settings: Vec<Setting>,
    held: knobs::Held,
    recipe: String,
    observed: Vec<String>,
    device: String,
}

fn ready(cfg: &Config, o: &LiveOptions) -> anyhow::Result<Ready> {
    if o.pairs < MIN_PAIRS {
        let msg = format!("--pairs {} is too few (at least {MIN_PAIRS})", o.pairs);
        return Err(UsageError::new(msg).into());
    }
    if o.measure == Measure::P999 {
        return Err(UsageError::new(
            "--measure p999: a live server's call latencies under the stall threshold are not kept; judge on stall, max or zero",
        )
        .into());
    }
    if o.settings.is_empty() {
        return Err(UsageError::new("a live trial needs a change: --setting KNOB=VALUE").into());
    }
    if let Some(w) = o.window.filter(|w| *w < windows::FLOOR) {
        let msg = format!(
            "--window {w:?} is shorter than {:?}: a window must hold whole stall cycles",
            windows::FLOOR
        );
        return Err(UsageError::new(msg).into());
    }
    for s in &o.settings {
        knobs::check_kind(s)?;
    }
    crate::cmd::lab::checks::need_root("live trials")?;
    let watched =
        crate::source::observe::resolve(Path::new("/proc"), &cfg.observe, &cfg.observe_name)?;
    let first = watched.first().ok_or_else(|| {
        UsageError::new("a live trial needs --observe PID or --observe-name NAME")
    })?;
    let (settings, device) = if o.settings.iter().any(names_device) {
        let (bdi, device) = device_of(first.pid, o.device_of.as_deref())?;
        (resolve(&o.settings, &bdi), device)
    } else {
        (
            o.settings.clone(),
            "the whole machine (sysctls)".to_string(),
        )
    };
    // Held::new checks each resolved setting (its file is there).
    let held = knobs::Held::new(&settings, crate::knob::Registry::machine())?;
    let recipe = knobs::recipe(&settings)?;
    Ok(Ready {
        settings,
        held,
        recipe,
        observed: watched
            .iter()
            .map(|w| format!("{} ({})", w.pid, w.comm))
            .collect(),
        device,
    })
}

/// Whether `s` names the server's device by `{bdi}`.
fn names_device(s: &Setting) -> bool {
    matches!(s, Setting::Sysfs { path, .. } if path.to_string_lossy().contains("{bdi}"))
}

/// The server's device: under `on`, else under the working directory of
/// `pid` (PostgreSQL's is its data directory). Its `MAJ:MIN`, and words
/// for a person.
fn device_of(pid: u32, on: Option<&Path>) -> anyhow::Result<(String, String)> {
    let on = match on {
        Some(p) => p.to_path_buf(),
        None => std::fs::read_link(format!("/proc/{pid}/cwd")).map_err(|e| {
            UsageError::new(format!(
                "{{bdi}}: the working directory of {pid}: {e}; name a path on the server's filesystem with --target"
            ))
        })?,
    };
    let dev = crate::source::proc::resolve_device(&Default::default(), &on).map_err(|e| {
        UsageError::new(format!(
            "{{bdi}}: the server's device ({}): {e}; name a path on its filesystem with --target",
            on.display()
        ))
    })?;
    let bdi = format!("{}:{}", dev.major, dev.minor);
    let words = format!("{} ({bdi}, under {})", dev.name, on.display());
    Ok((bdi, words))
}

/// Runs the live trial of `o` on the server `cfg` observes (observe mode,
/// no targets); see the module doc. `stop` (Ctrl-C, SIGTERM) ends it with
/// the knob put back. `progress` gets lines to keep (`true`: the plan)
/// and lines that the next one replaces.
pub fn run(
    cfg: &Config,
    o: &LiveOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str, bool),
) -> anyhow::Result<LiveOutcome> {
    let mut r = ready(cfg, o)?;
    let mut s = Session::start(cfg, prepare(cfg)?, Placement::All)?;
    crate::session::print_notes(&mut s);
    let (t0_run, t0_unix) = (s.now_ns(), unix_now());
    let unix = |ns: u64| t0_unix + (ns as f64 - t0_run as f64) / 1e9;
    let mut keep = Keep::default();
    keep.begin(&s.metas())?;
    let threshold_ms = cfg.stall_threshold.0.as_secs_f64() * 1e3;
    let (len, window_why) = window_length(&mut s, &mut keep, o.window, stop, progress)?;
    let plan = windows::plan(s.now_ns(), len, o.pairs);
    let settle = windows::settle_for(len);
    let plan_line = format!(
        "{} windows of {} s ({window_why}; the first {} s of each not counted), about {} min; in each B window: {} on {}",
        plan.len(),
        len.as_secs(),
        settle.as_secs(),
        (plan.len() as u64 * len.as_secs()).div_ceil(60),
        r.settings
            .iter()
            .map(knobs::describe)
            .collect::<Vec<_>>()
            .join(", "),
        r.device
    );
    progress(&plan_line, true);
    for l in r
        .recipe
        .lines()
        .take_while(|l| !l.starts_with("# permanent"))
    {
        progress(l, true);
    }
    for (i, w) in plan.iter().enumerate() {
        let head = format!(
            "[window {}/{} {}{}]",
            i + 1,
            plan.len(),
            if w.pair == 0 { "A/A " } else { "" },
            side_name(w.side)
        );
        if w.side == Side::B {
            r.held.apply()?;
        }
        let done = drive(&mut s, &mut keep, w.end_ns, stop, &mut |left| {
            // The windows are fixed on the run clock: what is left is exact.
            let later = len * (plan.len() - i - 1) as u32;
            let eta = Duration::from_secs(left) + later;
            let line = format!(
                "{head} {left} s left, ~{} in all",
                super::progress::short(eta)
            );
            progress(&line, false)
        });
        if w.side == Side::B {
            r.held.put_back()?;
        }
        done?;
    }
    s.finish(None, Some(&mut keep))?;
    Ok(conclude(
        &keep.snaps,
        &plan,
        o,
        threshold_ms,
        &unix,
        r,
        len,
        window_why,
    ))
}

/// The window length: as given, or `windows::length` of the stall cycle
/// a warm-up (kept in `keep`, not judged) shows; and why, in words.
fn window_length(
    s: &mut Session,
    keep: &mut Keep,
    given: Option<Duration>,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str, bool),
) -> anyhow::Result<(Duration, String)> {
    if let Some(w) = given {
        return Ok((w, "as given (--window)".to_string()));
    }
    let warm = windows::WARM_UP;
    progress(
        &format!(
            "warm-up: {} s observing the server as it is, to measure its cycle",
            warm.as_secs()
        ),
        true,
    );
    let end = s.now_ns() + warm.as_nanos() as u64;
    drive(s, keep, end, stop, &mut |left| {
        progress(&format!("[warm-up] {left} s left"), false)
    })?;
    let c = windows::cycle(&keep.snaps);
    let why = match c {
        Some(c) => format!(
            "whole cycles of {:.0} s, the warm-up's (its stalls and writes), at least {} and {} s",
            c.as_secs_f64(),
            windows::CYCLES,
            windows::FLOOR.as_secs()
        ),
        None => format!(
            "the floor, {} s: the warm-up showed no cycle up to {} s (--window for a longer one)",
            windows::FLOOR.as_secs(),
            windows::WARM_UP.as_secs() / 2
        ),
    };
    Ok((windows::length(c, windows::FLOOR), why))
}

/// Steps the session until `end_ns` on its clock; an error when stopped
/// or when every observed process is gone.
fn drive(
    s: &mut Session,
    keep: &mut Keep,
    end_ns: u64,
    stop: &AtomicBool,
    tell: &mut dyn FnMut(u64),
) -> anyhow::Result<()> {
    let mut told = Instant::now();
    while s.now_ns() < end_ns {
        if stop.load(Ordering::Relaxed) {
            anyhow::bail!("interrupted; the trial's knobs are back");
        }
        s.step(Some(end_ns), keep)?;
        if keep
            .snaps
            .last()
            .is_some_and(|x| !x.observed.is_empty() && x.observed.iter().all(|p| !p.alive))
        {
            anyhow::bail!("the observed server exited; the trial's knobs are back");
        }
        if told.elapsed() >= Duration::from_secs(1) {
            told = Instant::now();
            tell(end_ns.saturating_sub(s.now_ns()).div_ceil(1_000_000_000));
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn conclude(
    snaps: &[Snapshot],
    plan: &[Window],
    o: &LiveOptions,
    threshold_ms: f64,
    unix: &dyn Fn(u64) -> f64,
    r: Ready,
    len: Duration,
    window_why: String,
) -> LiveOutcome {
    let m = o.measure;
    let figs: Vec<RunFigures> = plan.iter().map(|w| windows::figures(snaps, w)).collect();
    let rates: Vec<(Side, usize, f64)> = plan
        .iter()
        .zip(&figs)
        .map(|(w, f)| (w.side, w.pair, f.mib_per_s))
        .collect();
    let load = windows::load_changed(&rates);
    let of = |side: Side, pair: usize| {
        plan.iter()
            .zip(&figs)
            .find(|(w, _)| w.side == side && w.pair == pair)
            .map(|(_, f)| m.of(f))
    };
    let aa: Vec<f64> = plan
        .iter()
        .zip(&figs)
        .filter(|(w, _)| w.pair == 0)
        .map(|(_, f)| m.of(f))
        .collect();
    let pairs: Vec<(f64, f64)> = (1..=o.pairs)
        .filter_map(|p| Some((of(Side::A, p)?, of(Side::B, p)?)))
        .collect();
    let d = decide(
        (
            aa.first().copied().unwrap_or(0.0),
            aa.get(1).copied().unwrap_or(0.0),
        ),
        &pairs,
        &Rules::new(m.floor(threshold_ms)),
    );
    let side = |s: Side| -> Vec<RunFigures> {
        plan.iter()
            .zip(&figs)
            .filter(|(w, _)| w.side == s)
            .map(|(_, f)| f.clone())
            .collect()
    };
    let (before, after) = (
        combine(&side(Side::A), false),
        combine(&side(Side::B), false),
    );
    let windows = rows(plan, &figs, m, unix);
    let notes = notes(threshold_ms, len, &r.device);
    LiveOutcome {
        outcome: Outcome {
            verdict: if load.is_some() {
                Verdict::Inconclusive
            } else {
                d.verdict
            },
            recipe: r.recipe.clone(),
            notes,
            ..super::conclude::judged(&d, m, before, after, threshold_ms)
        },
        observed: r.observed.clone(),
        window_s: len.as_secs_f64(),
        settle_s: windows::settle_for(len).as_secs_f64(),
        window_why,
        load,
        windows,
    }
}

/// What the figures cannot vouch for, and where the knobs are held.
fn notes(threshold_ms: f64, len: Duration, device: &str) -> Vec<String> {
    vec![
        format!(
            "judged by the observed server's own stalls (at least {threshold_ms:.0} ms) over each window's last {} s; p99 and p99.9 are not measured on a live server (its calls under the threshold are not kept)",
            (len - windows::settle_for(len)).as_secs()
        ),
        format!(
            "the knobs are held in stallscope's registry while a B window lasts (on {device}); a killed trial's are put back by the next stallscope run as root"
        ),
    ]
}

/// Each window's row for the JSON and the text.
fn rows(
    plan: &[Window],
    figs: &[RunFigures],
    m: Measure,
    unix: &dyn Fn(u64) -> f64,
) -> Vec<WindowRow> {
    plan.iter()
        .zip(figs)
        .map(|(w, f)| WindowRow {
            side: side_name(w.side),
            pair: w.pair,
            start_unix: unix(w.start_ns),
            measured_from_unix: unix(w.measured_from_ns),
            end_unix: unix(w.end_ns),
            measure: m.of(f),
            stalls: f.ops,
            stall_ms_per_gib: f.stall_total(),
            max_stall_ms: f.max_stall_ms,
            stall_s: f.zero_s,
            write_mib_s: f.mib_per_s,
        })
        .collect()
}

fn side_name(s: Side) -> &'static str {
    match s {
        Side::A => "A",
        Side::B => "B",
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
