//! `stallscope compare`: the same workload on each target × mode × thread
//! count in turn, one run at a time so the runs do not compete for the
//! disk or the page cache, then a side-by-side table with a verdict row and
//! optionally one chart with every run on a shared time axis.
//!
//! Each run is an ordinary headless session on one target (`run::Session`);
//! its figures come from the same code as `run` and `report`: medians over
//! the run's intervals (`report::totals`), percentiles from the run's merged
//! histogram (`Summary`).
//!
//! One module per responsibility: `plan` the runs and the checks made
//! before the first, `one_run` one run and its figures (`run_config`, also
//! the advise trial's), `drain` the wait for dirty data between runs,
//! `table` the side-by-side text, `svg` the one chart of every run.

mod drain;
mod one_run;
mod plan;
mod svg;
mod table;
#[cfg(test)]
mod tests;

pub use drain::{drain, Drain};
pub use one_run::{run_config, END_SLACK_S};
pub use table::render_table;

use crate::config::{Config, Mode};
use crate::model::cause::Cause;
use crate::model::snapshot::{CauseTotal, LatSummary, Snapshot};
use one_run::{run_one, OneRun};
use plan::{check, plan, record_path};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use svg::write_svg;

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
    /// Before each run, the targets' dirty data written back (and, asked
    /// for, the machine's, with its page cache dropped), so no run pays
    /// for the previous one's data.
    pub drain: Drain,
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
        if opts.drain.on && !stop.load(Ordering::Relaxed) {
            let targets = [v.target.clone()];
            drain(
                &format!("run {}/{total}", v.n),
                &targets,
                &opts.drain,
                stop,
                progress,
            );
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
