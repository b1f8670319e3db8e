//! One run: a headless session on one target for a fixed time, its
//! snapshots kept, its figures taken the way `run` and `report` take them.

use super::plan::Variant;
use super::RunResult;
use crate::base::units::Dur;
use crate::cmd::report::{totals, ReportInput};
use crate::config::Config;
use crate::model::snapshot::{LatSummary, Snapshot, Summary, TargetMeta, TargetSummary};
use crate::session as run;
use crate::session::{prepare, Placement, Session};
use crate::sink::recording::Recorder;
use crate::sink::{Sink, Tee};
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Keeps a run's snapshots and counts its stalls for the progress line.
#[derive(Default)]
struct Collect {
    snapshots: Vec<Snapshot>,
    stalls: u64,
}

impl Sink for Collect {
    fn begin(&mut self, _targets: &[TargetMeta]) -> io::Result<()> {
        Ok(())
    }
    fn snapshot(&mut self, s: &Snapshot) -> io::Result<()> {
        self.stalls += s.stalls.len() as u64;
        self.snapshots.push(s.clone());
        Ok(())
    }
    fn summary(&mut self, _s: &Summary) -> io::Result<()> {
        Ok(())
    }
}

/// Hands `f` the collector, teed with the recorder when there is one.
fn with_sink<R>(
    col: &mut Collect,
    rec: Option<&mut Recorder>,
    f: impl FnOnce(&mut dyn Sink) -> R,
) -> R {
    match rec {
        Some(r) => f(&mut Tee(col, r)),
        None => f(col),
    }
}

/// What one run needs: its configuration (duration set), what the table
/// calls it, how long, where to record it and its progress line's head.
pub(super) struct OneRun<'a> {
    pub(super) cfg: Config,
    pub(super) variant: &'a Variant,
    pub(super) each: Duration,
    pub(super) record: Option<PathBuf>,
    pub(super) head: String,
}

/// One run of `cfg` on its first target for `each`, as compare runs each
/// of its variants, for callers that plan their own runs (the advise
/// trial). `Ok(None)`: stopped before the end; a run that cannot start is
/// a result with its `error`.
pub fn run_config(
    cfg: &Config,
    each: Duration,
    head: &str,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Option<RunResult>> {
    let target = cfg
        .targets
        .first()
        .cloned()
        .unwrap_or_else(run::default_target);
    let variant = Variant {
        n: 1,
        meta: crate::source::mounts::describe(&target),
        target: target.clone(),
        mode: cfg.mode,
        threads: cfg.threads,
    };
    let one = OneRun {
        cfg: Config {
            targets: vec![target],
            duration: Some(Dur(each)),
            ..cfg.clone()
        },
        variant: &variant,
        each,
        record: None,
        head: head.to_string(),
    };
    run_one(&one, stop, progress)
}

/// One run of `each`. `Ok(None)`: stopped before the end. A run that
/// cannot start (the filesystem refuses the mode) is a failed result; an
/// error writing the recording ends the compare.
pub(super) fn run_one(
    one: &OneRun,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Option<RunResult>> {
    let (v, head, cfg) = (one.variant, &one.head, &one.cfg);
    progress(&format!("{head}: starting"));
    let started = prepare(cfg)
        .map_err(anyhow::Error::from)
        .and_then(|p| Session::start(cfg, p, Placement::All));
    let mut s = match started {
        Ok(mut s) => {
            crate::session::print_notes(&mut s);
            s
        }
        Err(e) => {
            let why = format!("{e:#}");
            progress(&format!("{head}: failed: {why}"));
            return Ok(Some(failed(v, why)));
        }
    };
    let mut rec = match &one.record {
        Some(path) => match Recorder::create(path, s.recording_header()) {
            Ok(r) => Some(r),
            Err(e) => {
                s.finish(None, None)?;
                return Err(e.into());
            }
        },
        None => None,
    };
    let mut col = Collect::default();
    let end_ns = one.each.as_nanos() as u64;
    let mut told = Instant::now();
    let mut sink_err = None;
    with_sink(&mut col, rec.as_mut(), |sink| sink.begin(&s.metas()))?;
    while !stop.load(Ordering::Relaxed) && s.now_ns() < end_ns {
        if let Err(e) = with_sink(&mut col, rec.as_mut(), |sink| s.step(Some(end_ns), sink)) {
            sink_err = Some(e);
            break;
        }
        if told.elapsed() >= Duration::from_secs(1) {
            told = Instant::now();
            progress(&live_line(head, end_ns.saturating_sub(s.now_ns()), &col));
        }
    }
    let complete = s.now_ns() >= end_ns;
    let summary = match sink_err {
        Some(e) => {
            s.finish(Some(end_ns), None)?;
            return Err(e.into());
        }
        None => with_sink(&mut col, rec.as_mut(), |sink| {
            s.finish(Some(end_ns), Some(sink))
        })?,
    };
    if !complete {
        return Ok(None);
    }
    let r = result_of(v, one.each, &summary, col.snapshots);
    progress(&format!(
        "{head}: done, {:.0} ops/s, {} stalls",
        r.median_ops_per_s, r.stalls
    ));
    Ok(Some(r))
}

/// "[2/4] /mnt/xfs mmap × 32: 12 s left, 11234 ops/s, 3 stalls".
fn live_line(head: &str, left_ns: u64, col: &Collect) -> String {
    let left_s = left_ns.div_ceil(1_000_000_000);
    let rate = col
        .snapshots
        .last()
        .and_then(|s| s.targets.first().map(|t| t.rates(s.interval_s).ops_per_s));
    let ops = rate.map_or_else(|| "…".into(), |r| format!("{r:.0}"));
    format!(
        "{head}: {left_s} s left, {ops} ops/s, {} stalls",
        col.stalls
    )
}

pub(super) fn failed(v: &Variant, why: String) -> RunResult {
    RunResult {
        n: v.n,
        label: v.label(),
        target: v.target.clone(),
        fs: v.meta.fs.clone(),
        mode: v.mode,
        threads: v.threads,
        error: Some(why),
        ops: 0,
        median_ops_per_s: 0.0,
        median_mib_per_s: 0.0,
        lat: LatSummary::default(),
        stalls: 0,
        stall_ms: 0.0,
        by_cause: BTreeMap::new(),
        top_cause: None,
        zero_intervals: 0,
        snapshots: Vec::new(),
    }
}

/// Intervals ending more than this past `each` hold only ops that finished
/// while the writers stopped: in the summary, not in the rates or the chart.
pub const END_SLACK_S: f64 = 1e-6;

fn result_of(
    v: &Variant,
    each: Duration,
    summary: &Summary,
    snapshots: Vec<Snapshot>,
) -> RunResult {
    let each_s = each.as_secs_f64() + END_SLACK_S;
    let meta = [v.meta.clone()];
    let input = ReportInput {
        title: String::new(),
        targets: &meta,
        snapshots: &snapshots,
        from_s: None,
        to_s: Some(each_s),
        dirty_by_target: Vec::new(),
    };
    let medians = totals(&input)
        .first()
        .map_or((0.0, 0.0), |s| (s.median_ops_per_s, s.median_mib_per_s));
    let zero_intervals = input
        .selected()
        .filter_map(|s| s.targets.first())
        .filter(|t| t.active && t.ops == 0)
        .count();
    let t = summary.targets.first();
    RunResult {
        error: None,
        ops: t.map_or(0, |t| t.ops),
        median_ops_per_s: medians.0,
        median_mib_per_s: medians.1,
        lat: t.map(|t| LatSummary::of(&t.hist)).unwrap_or_default(),
        stalls: t.map_or(0, |t| t.stalls),
        stall_ms: t.map_or(0.0, |t| t.stall_ns as f64 / 1e6),
        by_cause: t.map(|t| t.by_cause.clone()).unwrap_or_default(),
        top_cause: t.and_then(TargetSummary::top_cause),
        zero_intervals,
        snapshots,
        ..failed(v, String::new())
    }
}
