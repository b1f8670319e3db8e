//! `stallscope compare`: the same workload on each target × mode × thread
//! count in turn, one run at a time so the runs do not compete for the
//! disk or the page cache, then a side-by-side table with a verdict row and
//! optionally one chart with every run on a shared time axis.
//!
//! Each run is an ordinary headless session on one target (`run::Session`);
//! its figures come from the same code as `run` and `report`: medians over
//! the run's intervals (`report::totals`), percentiles from the run's merged
//! histogram (`Summary`).

use crate::base::error::UsageError;
use crate::base::units::{ByteSize, Dur};
use crate::cmd::report::{render_svg, summarize, totals, ReportInput};
use crate::config::{Config, Mode};
use crate::model::cause::Cause;
use crate::model::snapshot::{
    CauseTotal, LatSummary, Snapshot, Summary, TargetInterval, TargetMeta, TargetSummary,
};
use crate::model::stall::Who;
use crate::session as run;
use crate::session::{prepare, Placement, Session};
use crate::sink::recording::Recorder;
use crate::sink::{Sink, Tee};
use crate::source::proc::{read_meminfo, ProcRoot};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What to compare and how.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// The workload (already layered: defaults < preset < config file <
    /// command line); `targets` are the targets to compare (empty: the
    /// default target).
    pub base: Config,
    /// Mode variants; empty means `[base.mode]`.
    pub modes: Vec<Mode>,
    /// Thread-count variants; empty means `[base.threads]`.
    pub threads: Vec<u32>,
    /// Length of each run.
    pub each: Duration,
    /// One recording per run: FILE with `-<n>-<fs>[-<dir>]-<mode>-<N>t`
    /// before the extension (e.g. `night-2-xfs-mmap-32t.jsonl.zst`).
    pub record: Option<PathBuf>,
    /// One chart with every run from 0 s, one colour per run.
    pub svg: Option<PathBuf>,
    /// Sync, drop the page cache (root) and wait for Dirty+Writeback to
    /// drain before each run, so no run pays for the previous one's data.
    pub drain: bool,
}

/// One run's figures, or why it could not run (`error`).
#[derive(Clone, Debug)]
pub struct RunResult {
    /// 1-based position in the compare.
    pub n: usize,
    /// e.g. "xfs /mnt/xfs · mmap × 32".
    pub label: String,
    pub target: PathBuf,
    pub fs: String,
    pub mode: Mode,
    pub threads: u32,
    /// Why the run failed (e.g. the filesystem refuses O_DIRECT); the
    /// figures below are then zero.
    pub error: Option<String>,
    pub ops: u64,
    /// Medians of the per-interval rates while the writers ran.
    pub median_ops_per_s: f64,
    pub median_mib_per_s: f64,
    /// Write latency (µs) from the run's merged histogram.
    pub lat: LatSummary,
    pub stalls: u64,
    pub stall_ms: f64,
    pub by_cause: BTreeMap<Cause, CauseTotal>,
    pub top_cause: Option<Cause>,
    /// Intervals in which no write finished although the writers ran: the
    /// rados bench "0 MB/s" signature.
    pub zero_intervals: usize,
    /// Every interval of the run, its one target at index 0.
    pub snapshots: Vec<Snapshot>,
}

/// One planned run.
#[derive(Clone, Debug)]
struct Variant {
    n: usize,
    target: PathBuf,
    /// The target's filesystem and device, read once at planning.
    meta: TargetMeta,
    mode: Mode,
    threads: u32,
}

impl Variant {
    fn label(&self) -> String {
        format!(
            "{} {} · {} × {}",
            self.meta.fs,
            self.target.display(),
            self.mode,
            self.threads
        )
    }

    fn config(&self, opts: &CompareOptions) -> Config {
        Config {
            targets: vec![self.target.clone()],
            mode: self.mode,
            threads: self.threads,
            duration: Some(Dur(opts.each)),
            ..opts.base.clone()
        }
    }

    /// `-<n>-<fs>[-<dir>]-<mode>-<threads>t`: unique per run and safe in a
    /// file name.
    fn file_tag(&self) -> String {
        let dir = self
            .target
            .file_name()
            .map(|d| slug(&d.to_string_lossy()))
            .filter(|d| !d.is_empty() && *d != slug(&self.meta.fs));
        let mut parts = vec![self.n.to_string(), slug(&self.meta.fs)];
        parts.extend(dir);
        parts.push(self.mode.to_string());
        parts.push(format!("{}t", self.threads));
        format!("-{}", parts.join("-"))
    }
}

/// Letters, digits, `.` and `_`; anything else becomes one `-`.
fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches(['-', '.']).to_string()
}

/// `FILE` with `tag` before its extension (`.jsonl.zst` counts as one).
fn record_path(file: &Path, tag: &str) -> PathBuf {
    let name = file
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let (stem, zst) = match name.strip_suffix(".zst") {
        Some(s) => (s, ".zst"),
        None => (name.as_str(), ""),
    };
    let (base, ext) = match stem.rfind('.').filter(|&i| i > 0) {
        Some(i) => stem.split_at(i),
        None => (stem, ""),
    };
    file.with_file_name(format!("{base}{tag}{ext}{zst}"))
}

fn dedup<T: PartialEq + Clone>(v: &[T], default: T) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in v {
        if !out.contains(x) {
            out.push(x.clone());
        }
    }
    if out.is_empty() {
        out.push(default);
    }
    out
}

/// The targets as given, or the default one.
fn targets(opts: &CompareOptions) -> Vec<PathBuf> {
    if opts.base.targets.is_empty() {
        vec![run::default_target()]
    } else {
        opts.base.targets.clone()
    }
}

/// Target-major: every mode and thread count on the first target, then
/// the next, so the runs of one filesystem sit together in the table.
fn plan(opts: &CompareOptions) -> Vec<Variant> {
    let modes = dedup(&opts.modes, opts.base.mode);
    let threads = dedup(&opts.threads, opts.base.threads);
    let mut out = Vec::new();
    for target in &targets(opts) {
        let meta = crate::source::mounts::describe(target);
        for &mode in &modes {
            for &threads in &threads {
                out.push(Variant {
                    n: out.len() + 1,
                    target: target.clone(),
                    meta: meta.clone(),
                    mode,
                    threads,
                });
            }
        }
    }
    out
}

/// Everything that would make a later run fail for a reason the person
/// can fix, checked before the first run rather than minutes into it.
fn check(opts: &CompareOptions, plan: &[Variant]) -> Result<(), UsageError> {
    if opts.each.is_zero() {
        return Err(UsageError::new("--each must be above zero"));
    }
    let mut seen = Vec::new();
    for t in targets(opts) {
        crate::source::scratch::check_target(&t)?;
        let canon = std::fs::canonicalize(&t).unwrap_or_else(|_| t.clone());
        if seen.contains(&canon) {
            let msg = format!("target {} is given twice", t.display());
            return Err(UsageError::new(msg));
        }
        seen.push(canon);
    }
    for v in plan {
        v.config(opts)
            .validate()
            .map_err(|e| UsageError::new(format!("{} × {}: {e}", v.mode, v.threads)))?;
        if let Some(file) = &opts.record {
            run::check_record_path(&record_path(file, &v.file_tag()))?;
        }
    }
    if let Some(svg) = &opts.svg {
        let dir = svg
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !dir.is_dir() {
            let msg = format!("{}: {} is not a directory", svg.display(), dir.display());
            return Err(UsageError::new(msg));
        }
    }
    Ok(())
}

/// Runs every variant in turn; returns one result per run (failed runs
/// included, with their reason). When `stop` is set the run in progress is
/// dropped (it is shorter than the others) and the finished ones returned.
pub fn run_compare(
    opts: &CompareOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<RunResult>> {
    let plan = plan(opts);
    check(opts, &plan)?;
    let total = plan.len();
    let mut results = Vec::new();
    for v in &plan {
        if opts.drain && !stop.load(Ordering::Relaxed) {
            drain(&format!("run {}/{total}", v.n), stop, progress);
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let head = format!(
            "[{}/{total}] {} {} × {}",
            v.n,
            v.target.display(),
            v.mode,
            v.threads
        );
        let one = OneRun {
            cfg: v.config(opts),
            variant: v,
            each: opts.each,
            record: opts.record.as_ref().map(|f| record_path(f, &v.file_tag())),
            head,
        };
        match run_one(&one, stop, progress)? {
            Some(r) => results.push(r),
            None => break,
        }
    }
    if let Some(svg) = &opts.svg {
        write_svg(opts, &results, svg, progress)?;
    }
    Ok(results)
}

// ---------------------------------------------------------------- one run

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
struct OneRun<'a> {
    cfg: Config,
    variant: &'a Variant,
    each: Duration,
    record: Option<PathBuf>,
    head: String,
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
fn run_one(
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

fn failed(v: &Variant, why: String) -> RunResult {
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
const END_SLACK_S: f64 = 1e-6;

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

// ---------------------------------------------------------------- drain

/// Dirty+Writeback below this counts as drained.
const DRAINED_KIB: u64 = 16 << 10;
/// The longest we wait for it; a disk that never drains must not hang us.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Writes dirty data back, drops the page cache when root and waits until
/// Dirty+Writeback is small, saying what is left about once a second.
pub fn drain(before: &str, stop: &AtomicBool, progress: &mut dyn FnMut(&str)) {
    let root = unsafe { libc::geteuid() } == 0;
    let caches = if root {
        ""
    } else {
        " (not root: page cache kept)"
    };
    progress(&format!("draining dirty data before {before}…{caches}"));
    // sync() blocks until the data is written: in a thread, so we can
    // report and give up after the limit.
    let (tx, rx) = crossbeam::channel::bounded::<()>(1);
    std::thread::spawn(move || {
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        let _ = tx.send(());
    });
    let t0 = Instant::now();
    let mut synced = false;
    while !stop.load(Ordering::Relaxed) {
        let left = dirty_kib();
        if synced && left.is_none_or(|k| k < DRAINED_KIB) {
            return;
        }
        if t0.elapsed() >= DRAIN_LIMIT {
            let mib = left.map_or(0, |k| k >> 10);
            let secs = DRAIN_LIMIT.as_secs();
            progress(&format!(
                "still {mib} MiB dirty after {secs} s; starting {before} anyway"
            ));
            return;
        }
        if let Some(k) = left {
            let mib = k >> 10;
            progress(&format!(
                "draining dirty data before {before}: {mib} MiB left"
            ));
        }
        if synced {
            std::thread::sleep(Duration::from_secs(1));
        } else if rx.recv_timeout(Duration::from_secs(1)).is_ok() {
            synced = true;
            if root {
                drop_page_cache(progress);
            }
        }
    }
}

/// `1` drops the clean page cache; `3` would also drop dentries and
/// inodes, which no run depends on.
fn drop_page_cache(progress: &mut dyn FnMut(&str)) {
    if let Err(e) = std::fs::write("/proc/sys/vm/drop_caches", "1") {
        progress(&format!("cannot drop the page cache: {e}"));
    }
}

fn dirty_kib() -> Option<u64> {
    let m = read_meminfo(&ProcRoot::default()).ok()?;
    Some(m.dirty_kib? + m.writeback_kib.unwrap_or(0))
}

// ---------------------------------------------------------------- table

/// Which way a column is better.
#[derive(Clone, Copy, PartialEq)]
enum Better {
    Higher,
    Lower,
}

/// A numeric column: its header, which way is better, the value compared
/// and the text shown.
struct Col {
    name: &'static str,
    better: Better,
    value: fn(&RunResult) -> f64,
    show: fn(&RunResult) -> String,
}

const COLS: [Col; 9] = [
    Col {
        name: "ops/s",
        better: Better::Higher,
        value: |r| r.median_ops_per_s,
        show: |r| format!("{:.0}", r.median_ops_per_s),
    },
    Col {
        name: "MiB/s",
        better: Better::Higher,
        value: |r| r.median_mib_per_s,
        show: |r| format!("{:.1}", r.median_mib_per_s),
    },
    Col {
        name: "p50 ms",
        better: Better::Lower,
        value: |r| r.lat.p50 as f64,
        show: |r| ms(r.lat.p50),
    },
    Col {
        name: "p99 ms",
        better: Better::Lower,
        value: |r| r.lat.p99 as f64,
        show: |r| ms(r.lat.p99),
    },
    Col {
        name: "p99.9 ms",
        better: Better::Lower,
        value: |r| r.lat.p999 as f64,
        show: |r| ms(r.lat.p999),
    },
    Col {
        name: "max ms",
        better: Better::Lower,
        value: |r| r.lat.max as f64,
        show: |r| ms(r.lat.max),
    },
    Col {
        name: "stalls",
        better: Better::Lower,
        value: |r| r.stalls as f64,
        show: |r| r.stalls.to_string(),
    },
    Col {
        name: "stalled s",
        better: Better::Lower,
        value: |r| r.stall_ms,
        show: |r| format!("{:.1}", r.stall_ms / 1e3),
    },
    Col {
        name: "0-ops ints",
        better: Better::Lower,
        value: |r| r.zero_intervals as f64,
        show: |r| r.zero_intervals.to_string(),
    },
];

/// Microseconds as milliseconds, with the digits that matter at each size.
fn ms(us: u64) -> String {
    let v = us as f64 / 1e3;
    match us {
        0..1_000 => format!("{v:.3}"),
        1_000..10_000 => format!("{v:.2}"),
        10_000..100_000 => format!("{v:.1}"),
        _ => format!("{v:.0}"),
    }
}

/// The winning runs of a column among those that ran: "#2", "#1 #3" on a
/// tie, "tie" when all are equal, "-" when none ran.
fn winner(col: &Col, results: &[RunResult]) -> String {
    let ok: Vec<&RunResult> = results.iter().filter(|r| r.error.is_none()).collect();
    let best = ok
        .iter()
        .map(|r| (col.value)(r))
        .reduce(|a, b| match col.better {
            Better::Higher => a.max(b),
            Better::Lower => a.min(b),
        });
    let Some(best) = best else {
        return "-".into();
    };
    let wins: Vec<String> = ok
        .iter()
        .filter(|r| (col.value)(r) == best)
        .map(|r| format!("#{}", r.n))
        .collect();
    if wins.len() == ok.len() && ok.len() > 1 {
        "tie".into()
    } else {
        wins.join(" ")
    }
}

/// A row per run (the run, its figures and top stall cause, or why it
/// failed), then the verdict row naming the best run per column, then what
/// the columns mean.
pub fn render_table(results: &[RunResult]) -> String {
    let mut header = vec!["run".to_string()];
    header.extend(COLS.iter().map(|c| c.name.to_string()));
    header.push("top cause".into());
    let mut rows = vec![header];
    for r in results {
        let mut row = vec![format!("#{} {}", r.n, r.label)];
        match &r.error {
            Some(e) => row.push(format!("failed: {e}")),
            None => {
                row.extend(COLS.iter().map(|c| (c.show)(r)));
                row.push(r.top_cause.map_or("-", Cause::as_str).to_string());
            }
        }
        rows.push(row);
    }
    let mut verdict = vec!["verdict".to_string()];
    verdict.extend(COLS.iter().map(|c| winner(c, results)));
    rows.push(verdict);
    let mut out = align(&rows);
    out.push_str(
        "ops/s, MiB/s: medians over the run's intervals; latency: all its writes; \
         0-ops ints: intervals without a finished write; verdict: best run per column\n",
    );
    out
}

/// The run label and the cause read left-aligned, the figures
/// right-aligned; a failed row's reason runs on past the column edges.
fn align(rows: &[Vec<String>]) -> String {
    let last = COLS.len() + 1;
    let is_reason = |row: &[String], i: usize| row.len() == 2 && i == 1;
    let mut width = vec![0; last + 1];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if !is_reason(row, i) {
                width[i] = width[i].max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let w = width[i];
            let _ = if i == 0 {
                write!(line, "{cell:<w$}")
            } else if i == last || is_reason(row, i) {
                write!(line, "  {cell}")
            } else {
                write!(line, "  {cell:>w$}")
            };
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------- SVG

/// "mmap, buffered × 2 threads, 818 B records, sync periodic:10s, 2s each".
fn title(opts: &CompareOptions) -> String {
    let modes = dedup(&opts.modes, opts.base.mode);
    let threads = dedup(&opts.threads, opts.base.threads);
    let join = |v: Vec<String>| v.join(", ");
    let sizes = dedup(
        &modes
            .iter()
            .map(|&mode| {
                Config {
                    mode,
                    ..opts.base.clone()
                }
                .record_size()
            })
            .collect::<Vec<_>>(),
        0,
    );
    let records = join(sizes.iter().map(|&b| ByteSize(b).to_string()).collect());
    // Journal mode commits on its own schedule and ignores `sync`.
    let mut how = Vec::new();
    if modes.iter().any(|&m| m != Mode::Journal) {
        how.push(format!("sync {}", opts.base.sync));
    }
    if modes.contains(&Mode::Journal) {
        how.push(format!("commit every {}", opts.base.commit_interval));
    }
    format!(
        "compare: {} × {} threads, {records} records, {}, {} each",
        join(modes.iter().map(Mode::to_string).collect()),
        join(threads.iter().map(u32::to_string).collect()),
        how.join(", "),
        Dur(opts.each)
    )
}

/// Every run's snapshot k in one snapshot k, run i as target i: the runs
/// all start at 0 s, so the chart overlays them on one time axis. The
/// kernel figures are system-wide and differ per run, so they are left out.
fn overlay(runs: &[&RunResult]) -> Vec<Snapshot> {
    let mut merged: BTreeMap<u64, Snapshot> = BTreeMap::new();
    for (i, r) in runs.iter().enumerate() {
        for s in &r.snapshots {
            let m = merged.entry(s.index).or_insert_with(|| empty_like(s));
            m.targets.extend(s.targets.iter().map(|t| TargetInterval {
                target: i,
                ..t.clone()
            }));
            m.stalls.extend(s.stalls.iter().cloned().map(|mut st| {
                st.ev.who = on_target(st.ev.who, i);
                st
            }));
            m.in_progress
                .extend(s.in_progress.iter().cloned().map(|mut p| {
                    p.who = on_target(p.who, i);
                    p
                }));
            m.events.extend(s.events.iter().cloned().map(|mut e| {
                e.target = i;
                e
            }));
        }
    }
    merged.into_values().collect()
}

fn empty_like(s: &Snapshot) -> Snapshot {
    Snapshot {
        index: s.index,
        t_s: s.t_s,
        interval_s: s.interval_s,
        ..Snapshot::default()
    }
}

/// The chart of the runs that ran; written to a temporary name and
/// renamed, so a failure leaves no half file.
fn write_svg(
    opts: &CompareOptions,
    results: &[RunResult],
    out: &Path,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let runs: Vec<&RunResult> = results.iter().filter(|r| r.error.is_none()).collect();
    if runs.is_empty() {
        progress(&format!("no run finished; {} not written", out.display()));
        return Ok(());
    }
    let metas: Vec<TargetMeta> = runs
        .iter()
        .map(|r| TargetMeta {
            path: format!(
                "#{} {} · {} × {}",
                r.n,
                r.target.display(),
                r.mode,
                r.threads
            ),
            fs: r.fs.clone(),
            device: String::new(),
            mount_options: String::new(),
        })
        .collect();
    let snapshots = overlay(&runs);
    // Up to `each`: the interval of ops that finished while the writers
    // stopped would draw a drop to 0 at the end. Stalls ending in it still
    // show, as they are looked up in every snapshot.
    let input = ReportInput {
        title: title(opts),
        targets: &metas,
        snapshots: &snapshots,
        from_s: None,
        to_s: Some(opts.each.as_secs_f64() + END_SLACK_S),
        dirty_by_target: runs.iter().map(|r| dirty_of(&r.snapshots)).collect(),
    };
    let text = render_svg(&input, &summarize(&input)).map_err(anyhow::Error::msg)?;
    let tmp = out.with_extension("stallscope-tmp");
    std::fs::write(&tmp, text).map_err(|e| anyhow::anyhow!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, out).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("{}: {e}", out.display())
    })?;
    progress(&format!("wrote {}", out.display()));
    Ok(())
}

/// One run's dirty memory, MiB at the end of each interval.
fn dirty_of(snapshots: &[Snapshot]) -> Vec<(f64, Option<f64>)> {
    snapshots
        .iter()
        .map(|s| {
            let kib = s.kernel.as_ref().and_then(|k| k.dirty_kib);
            (s.t_s, kib.map(crate::base::units::kib_to_mib))
        })
        .collect()
}

/// A writer's stall moved to run `i`'s place in the merged view.
fn on_target(who: Who, i: usize) -> Who {
    match who {
        Who::Writer { thread, .. } => Who::Writer { target: i, thread },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cause::{Attribution, Evidence};
    use crate::model::ops::{new_histogram, OpKind};
    use crate::model::stall::{Blocked, Stall};

    fn meta(fs: &str) -> TargetMeta {
        TargetMeta {
            path: String::new(),
            fs: fs.into(),
            device: String::new(),
            mount_options: String::new(),
        }
    }

    fn variant(n: usize, target: &str, fs: &str, mode: Mode, threads: u32) -> Variant {
        Variant {
            n,
            target: target.into(),
            meta: meta(fs),
            mode,
            threads,
        }
    }

    /// A finished run with these figures (latency in µs).
    fn ran(
        n: usize,
        ops_s: f64,
        lat: [u64; 4],
        stalls: u64,
        stall_ms: f64,
        zero: usize,
    ) -> RunResult {
        let v = variant(n, "/mnt/x", "xfs", Mode::Mmap, 4);
        RunResult {
            error: None,
            median_ops_per_s: ops_s,
            median_mib_per_s: ops_s / 1000.0,
            lat: LatSummary {
                p50: lat[0],
                p99: lat[1],
                p999: lat[2],
                max: lat[3],
                ..LatSummary::default()
            },
            stalls,
            stall_ms,
            top_cause: (stalls > 0).then_some(Cause::Sync),
            zero_intervals: zero,
            ..failed(&v, String::new())
        }
    }

    #[test]
    fn table_has_a_row_per_run_and_a_verdict_per_column() {
        let results = vec![
            ran(1, 11234.0, [10, 1_000, 5_000, 9_000], 3, 1500.0, 2),
            ran(2, 20_500.0, [20, 500, 6_000, 9_000], 0, 0.0, 0),
            failed(
                &variant(3, "/mnt/r", "ramfs", Mode::Direct, 4),
                "ramfs refuses O_DIRECT".into(),
            ),
        ];
        let t = render_table(&results);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 6, "header, 3 runs, verdict, note:\n{t}");
        assert!(
            lines[0].starts_with("run") && lines[0].ends_with("top cause"),
            "{t}"
        );
        assert!(lines[1].starts_with("#1 xfs /mnt/x · mmap × 4"), "{t}");
        assert!(
            lines[1].contains("11234") && lines[1].ends_with("sync"),
            "{t}"
        );
        assert!(lines[2].ends_with(" -"), "no stall, no cause:\n{t}");
        assert!(lines[3].contains("failed: ramfs refuses O_DIRECT"), "{t}");
        let verdict: Vec<&str> = lines[4].split_whitespace().collect();
        assert_eq!(
            verdict,
            ["verdict", "#2", "#2", "#1", "#2", "#1", "tie", "#2", "#2", "#2"],
            "ops, MiB, p50, p99, p99.9, max, stalls, stalled, 0-ops:\n{t}"
        );
        // Figures are right-aligned under their headers.
        let end_of = |line: &str, word: &str| {
            line.find(word)
                .map(|i| line[..i].chars().count() + word.len())
        };
        assert_eq!(end_of(lines[0], "ops/s"), end_of(lines[1], "11234"), "{t}");
        assert_eq!(end_of(lines[0], "ops/s"), end_of(lines[2], "20500"), "{t}");
        assert_eq!(end_of(lines[0], "ops/s"), end_of(lines[4], "#2"), "{t}");
    }

    #[test]
    fn verdict_names_every_winner_of_a_partial_tie() {
        let results = vec![
            ran(1, 100.0, [5, 5, 5, 5], 0, 0.0, 0),
            ran(2, 50.0, [5, 9, 9, 9], 1, 200.0, 0),
            ran(3, 100.0, [6, 9, 9, 9], 1, 200.0, 1),
        ];
        assert_eq!(winner(&COLS[0], &results), "#1 #3");
        assert_eq!(winner(&COLS[2], &results), "#1 #2");
        assert_eq!(winner(&COLS[8], &results), "#1 #2");
        assert_eq!(winner(&COLS[0], &results[..1]), "#1", "one run wins alone");
        let none = [failed(&variant(1, "/x", "?", Mode::Mmap, 1), "no".into())];
        assert_eq!(winner(&COLS[0], &none), "-");
    }

    #[test]
    fn milliseconds_keep_the_digits_that_matter() {
        assert_eq!(ms(2), "0.002");
        assert_eq!(ms(1_234), "1.23");
        assert_eq!(ms(12_345), "12.3");
        assert_eq!(ms(4_012_000), "4012");
    }

    #[test]
    fn recordings_are_named_per_run() {
        let v = variant(2, "/var/tmp/lab/mnt/xfs", "xfs", Mode::Mmap, 32);
        assert_eq!(v.file_tag(), "-2-xfs-mmap-32t");
        let w = variant(1, "/dev/shm/tmp.Ab3", "tmpfs", Mode::Buffered, 2);
        assert_eq!(w.file_tag(), "-1-tmpfs-tmp.Ab3-buffered-2t");
        let h = variant(1, "/tmp/.tmpXy", "ext4", Mode::Mmap, 2);
        assert_eq!(h.file_tag(), "-1-ext4-tmpXy-mmap-2t");
        let tag = "-1-x";
        assert_eq!(
            record_path(Path::new("night.jsonl"), tag),
            Path::new("night-1-x.jsonl")
        );
        assert_eq!(
            record_path(Path::new("/r/night.jsonl.zst"), tag),
            Path::new("/r/night-1-x.jsonl.zst")
        );
        assert_eq!(record_path(Path::new("night"), tag), Path::new("night-1-x"));
        assert_eq!(
            record_path(Path::new(".hidden"), tag),
            Path::new(".hidden-1-x")
        );
        assert_eq!(slug("a b/c·d"), "a-b-c-d");
    }

    #[test]
    fn plan_is_target_major_and_numbered() {
        let opts = CompareOptions {
            base: Config {
                targets: vec!["/a".into(), "/b".into()],
                ..Config::default()
            },
            modes: vec![Mode::Mmap, Mode::Buffered, Mode::Mmap],
            threads: vec![1, 4],
            each: Duration::from_secs(1),
            record: None,
            svg: None,
            drain: false,
        };
        let p: Vec<(usize, String, Mode, u32)> = plan(&opts)
            .into_iter()
            .map(|v| (v.n, v.target.display().to_string(), v.mode, v.threads))
            .collect();
        let want = [
            ("/a", Mode::Mmap, 1),
            ("/a", Mode::Mmap, 4),
            ("/a", Mode::Buffered, 1),
            ("/a", Mode::Buffered, 4),
            ("/b", Mode::Mmap, 1),
            ("/b", Mode::Mmap, 4),
            ("/b", Mode::Buffered, 1),
            ("/b", Mode::Buffered, 4),
        ];
        assert_eq!(p.len(), want.len(), "duplicate mode dropped");
        for (i, (got, w)) in p.iter().zip(want).enumerate() {
            assert_eq!(
                (got.0, got.1.as_str(), got.2, got.3),
                (i + 1, w.0, w.1, w.2)
            );
        }
        let empty = CompareOptions {
            modes: vec![],
            threads: vec![],
            ..opts
        };
        assert_eq!(
            plan(&empty).len(),
            2,
            "no variants: the base mode and threads"
        );
    }

    #[test]
    fn bad_input_is_refused_before_any_run() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        let opts = |targets: Vec<PathBuf>| CompareOptions {
            base: Config {
                targets,
                ..Config::default()
            },
            modes: vec![],
            threads: vec![],
            each: Duration::from_secs(1),
            record: None,
            svg: None,
            drain: false,
        };
        let err = |o: CompareOptions| check(&o, &plan(&o)).unwrap_err().0;
        assert!(err(opts(vec![d.clone(), d.join(".")])).contains("given twice"));
        assert!(err(opts(vec![d.join("missing")])).contains("missing"));
        let zero_threads = CompareOptions {
            threads: vec![2, 0],
            ..opts(vec![d.clone()])
        };
        assert!(err(zero_threads).contains("--threads 0"));
        let no_dir = CompareOptions {
            svg: Some(d.join("nope/out.svg")),
            ..opts(vec![d.clone()])
        };
        assert!(err(no_dir).contains("not a directory"));
        let taken = CompareOptions {
            record: Some(d.join("r.jsonl")),
            ..opts(vec![d.clone()])
        };
        let tag = plan(&taken)[0].file_tag();
        std::fs::write(d.join(format!("r{tag}.jsonl")), "").unwrap();
        assert!(err(taken).contains("already exists"));
        let fine = opts(vec![d.clone()]);
        assert!(check(&fine, &plan(&fine)).is_ok());
    }

    fn interval(ops: u64) -> TargetInterval {
        TargetInterval {
            target: 0,
            active: true,
            mode: Mode::Mmap,
            threads: 2,
            ops,
            bytes: ops * 818,
            hist: new_histogram(),
            sync_hist: new_histogram(),
            stalls: 0,
            minflt: 0,
            majflt: 0,
            bdp: None,
            wb_waits: None,
            failed: false,
        }
    }

    fn snapshot(index: u64, ops: u64, stall: bool) -> Snapshot {
        let stalls = stall.then(|| Stall {
            ev: Blocked::writer(0, 1, OpKind::Write, index * 1_000_000_000 + 10, 200_000_000),
            why: Attribution::high(Cause::DirtyThrottle, Evidence::default()),
        });
        Snapshot {
            targets: vec![interval(ops)],
            stalls: stalls.into_iter().collect(),
            ..empty_like(&Snapshot {
                index,
                t_s: index as f64 + 1.0,
                interval_s: 1.0,
                targets: vec![],
                stalls: vec![],
                kernel: None,
                raw: None,
                wb_starts: None,
                in_progress: vec![],
                events: vec![],
                observed: Vec::new(),
            })
        }
    }

    #[test]
    fn overlay_puts_run_i_at_target_i_on_one_time_axis() {
        let mut a = ran(1, 1.0, [1; 4], 0, 0.0, 0);
        a.snapshots = vec![snapshot(0, 10, false), snapshot(1, 11, false)];
        let mut b = ran(2, 1.0, [1; 4], 1, 200.0, 0);
        b.snapshots = vec![
            snapshot(0, 20, false),
            snapshot(1, 0, true),
            snapshot(2, 5, false),
        ];
        let m = overlay(&[&a, &b]);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].t_s, 1.0);
        let ops: Vec<(usize, u64)> = m[1].targets.iter().map(|t| (t.target, t.ops)).collect();
        assert_eq!(ops, [(0, 11), (1, 0)]);
        assert_eq!(
            m[1].stalls[0].ev.who.target(),
            Some(1),
            "the stall follows its run"
        );
        assert_eq!(m[2].targets.len(), 1, "a longer run goes on alone");
        assert!(m.iter().all(|s| s.kernel.is_none()));
    }

    #[test]
    fn title_names_the_workload_and_its_variants() {
        let opts = CompareOptions {
            base: Config::default(),
            modes: vec![Mode::Mmap, Mode::Buffered],
            threads: vec![2],
            each: Duration::from_secs(20),
            record: None,
            svg: None,
            drain: false,
        };
        assert_eq!(
            title(&opts),
            "compare: mmap, buffered × 2 threads, 818B records, sync periodic:10s, 20s each"
        );
        let rados = CompareOptions {
            modes: vec![Mode::Journal],
            threads: vec![1, 4],
            ..opts
        };
        assert_eq!(
            title(&rados),
            "compare: journal × 1, 4 threads, 4MiB records, commit every 5s, 20s each"
        );
    }

    /// Scratch folders this process left under `dir`.
    fn leftovers(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains(crate::source::scratch::PREFIX))
            .collect()
    }

    #[test]
    fn each_runs_dirty_memory_is_its_snapshots_kernel_figure_in_mib() {
        let at = |t_s: f64, dirty_kib: Option<u64>| Snapshot {
            t_s,
            kernel: Some(crate::model::kernel::KernelInterval {
                dirty_kib,
                writeback_kib: None,
                dirty_thresh_kib: None,
                dirty_bg_thresh_kib: None,
                nr_dirty: None,
                nr_writeback: None,
                dirtied_pages: None,
                written_pages: None,
                pgmajfault: None,
                psi_io_some_pct: None,
                psi_io_full_pct: None,
                devs: Vec::new(),
            }),
            ..Snapshot::default()
        };
        let snaps = [at(1.0, Some(2048)), at(2.0, None), Snapshot::default()];
        assert_eq!(
            dirty_of(&snaps),
            vec![(1.0, Some(2.0)), (2.0, None), (0.0, None)]
        );
    }

    #[test]
    fn compares_two_tmpfs_dirs_in_two_modes() {
        let a = tempfile::tempdir_in("/dev/shm").unwrap();
        let b = tempfile::tempdir_in("/dev/shm").unwrap();
        let out = tempfile::tempdir().unwrap();
        let svg = out.path().join("cmp.svg");
        let opts = CompareOptions {
            base: Config {
                targets: vec![a.path().into(), b.path().into()],
                segment_size: ByteSize(4 << 20),
                disk_budget: ByteSize(64 << 20),
                ..Config::default()
            },
            modes: vec![Mode::Mmap, Mode::Buffered],
            threads: vec![2],
            each: Duration::from_secs(2),
            record: Some(out.path().join("cmp.jsonl")),
            svg: Some(svg.clone()),
            drain: false,
        };
        let mut said = Vec::new();
        let stop = AtomicBool::new(false);
        let results = run_compare(&opts, &stop, &mut |m| said.push(m.to_string())).unwrap();
        assert_eq!(results.len(), 4);
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r.n, i + 1);
            assert!(r.error.is_none(), "{r:?}");
            assert!(r.ops > 0 && r.median_ops_per_s > 0.0, "{}", r.label);
            assert!(r.snapshots.len() >= 2, "{}", r.label);
            assert_eq!(r.fs, "tmpfs");
        }
        assert_eq!(results[1].mode, Mode::Buffered);
        assert_eq!(
            results[2].target,
            a.path()
                .to_path_buf()
                .with_file_name(b.path().file_name().unwrap())
        );
        let table = render_table(&results);
        eprintln!("{table}");
        let runs = table.lines().filter(|l| l.starts_with('#')).count();
        assert_eq!(runs, 4, "{table}");
        assert!(table.lines().any(|l| l.starts_with("verdict")), "{table}");
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg") && text.contains("compare: mmap, buffered"));
        // The runs sampled the kernel's dirty memory: the dirty panel draws
        // it per run (the merged view has no kernel figures of its own).
        assert!(results.iter().all(|r| r
            .snapshots
            .iter()
            .any(|s| s.kernel.as_ref().is_some_and(|k| k.dirty_kib.is_some()))));
        assert!(text.contains("Dirty during each run"));
        assert!(!text.contains("no kernel counters"));
        let recordings = std::fs::read_dir(out.path()).unwrap().count() - 1;
        assert_eq!(recordings, 4, "one recording per run");
        assert!(said.iter().any(|m| m.starts_with("[4/4]")), "{said:?}");
        assert!(leftovers(a.path()).is_empty() && leftovers(b.path()).is_empty());
    }

    #[test]
    fn a_stop_drops_the_run_in_progress_and_keeps_the_finished_ones() {
        let a = tempfile::tempdir_in("/dev/shm").unwrap();
        let opts = CompareOptions {
            base: Config {
                targets: vec![a.path().into()],
                segment_size: ByteSize(4 << 20),
                disk_budget: ByteSize(64 << 20),
                ..Config::default()
            },
            modes: vec![Mode::Buffered],
            threads: vec![1, 2],
            each: Duration::from_secs(1),
            record: None,
            svg: None,
            drain: false,
        };
        let stop = AtomicBool::new(false);
        let mut on_second = |m: &str| {
            if m.starts_with("[2/2]") {
                stop.store(true, Ordering::Relaxed);
            }
        };
        let results = run_compare(&opts, &stop, &mut on_second).unwrap();
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].threads, 1);
        assert!(leftovers(a.path()).is_empty());
    }

    /// A ramfs on a fresh directory (ramfs refuses O_DIRECT); unmounted on drop.
    struct Ramfs(tempfile::TempDir);

    impl Drop for Ramfs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg(self.0.path())
                .status();
        }
    }

    #[test]
    fn a_mode_the_filesystem_refuses_is_a_failed_row_and_the_compare_goes_on() {
        if !crate::base::testenv::require_root("compare_refused_mode") {
            return;
        }
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "ramfs", "stallscope-test"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(ok.success(), "mount ramfs");
        let ram = Ramfs(dir);
        let opts = CompareOptions {
            base: Config {
                targets: vec![ram.0.path().into()],
                segment_size: ByteSize(1 << 20),
                disk_budget: ByteSize(8 << 20),
                ..Config::default()
            },
            modes: vec![Mode::Direct, Mode::Buffered],
            threads: vec![1],
            each: Duration::from_secs(1),
            record: None,
            svg: None,
            drain: false,
        };
        let stop = AtomicBool::new(false);
        let results = run_compare(&opts, &stop, &mut |_| {}).unwrap();
        assert_eq!(results.len(), 2);
        let why = results[0].error.as_deref().unwrap_or_default();
        assert!(why.contains("O_DIRECT"), "{:?}", results[0]);
        assert!(
            results[1].error.is_none() && results[1].ops > 0,
            "{:?}",
            results[1]
        );
        let table = render_table(&results);
        assert!(
            table.contains("#1 ramfs") && table.contains("failed:"),
            "{table}"
        );
        let verdict = table.lines().find(|l| l.starts_with("verdict")).unwrap();
        assert!(verdict.contains("#2") && !verdict.contains("#1"), "{table}");
        assert!(leftovers(ram.0.path()).is_empty());
    }

    /// A manual end-to-end compare on real targets, e.g. after `lab up`:
    /// `STALLSCOPE_COMPARE="/mnt/a /mnt/b" STALLSCOPE_PRESET=rados-bench
    /// STALLSCOPE_EACH=20s cargo test --release --lib compare::tests::manual
    /// -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn manual() {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let preset = crate::config::preset::load(
            &env("STALLSCOPE_PRESET").unwrap_or("cassandra-commitlog".into()),
        )
        .unwrap();
        let each: Dur = env("STALLSCOPE_EACH")
            .unwrap_or("10s".into())
            .parse()
            .unwrap();
        let opts = CompareOptions {
            base: Config {
                targets: env("STALLSCOPE_COMPARE")
                    .map(|t| t.split_whitespace().map(PathBuf::from).collect())
                    .unwrap_or_default(),
                ..preset.config.clone()
            },
            modes: preset.modes.clone(),
            threads: preset.threads.clone(),
            each: each.0,
            record: env("STALLSCOPE_RECORD").map(PathBuf::from),
            svg: env("STALLSCOPE_SVG").map(PathBuf::from),
            drain: true,
        };
        let stop = AtomicBool::new(false);
        let results = run_compare(&opts, &stop, &mut |m| eprintln!("{m}")).unwrap();
        println!("{}", render_table(&results));
    }
}
