//! The one chart of every run on a shared time axis, drawn by the report's
//! SVG code from the runs overlaid as targets of one view.

use super::one_run::END_SLACK_S;
use super::plan::dedup;
use super::{CompareOptions, RunResult};
use crate::base::units::{ByteSize, Dur};
use crate::cmd::report::{render_svg, summarize, ReportInput};
use crate::config::{Config, Mode};
use crate::model::snapshot::{Snapshot, TargetInterval, TargetMeta};
use crate::model::stall::Who;
use std::collections::BTreeMap;
use std::path::Path;

/// "mmap, buffered × 2 threads, 818 B records, sync periodic:10s, 2s each".
pub(super) fn title(opts: &CompareOptions) -> String {
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
pub(super) fn overlay(runs: &[&RunResult]) -> Vec<Snapshot> {
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

pub(super) fn empty_like(s: &Snapshot) -> Snapshot {
    Snapshot {
        index: s.index,
        t_s: s.t_s,
        interval_s: s.interval_s,
        ..Snapshot::default()
    }
}

/// The chart of the runs that ran; written to a temporary name and
/// renamed, so a failure leaves no half file.
pub(super) fn write_svg(
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
    crate::cmd::outfile::write_atomic(out, text.as_bytes())?;
    progress(&format!("wrote {}", out.display()));
    Ok(())
}

/// One run's dirty memory, MiB at the end of each interval.
pub(super) fn dirty_of(snapshots: &[Snapshot]) -> Vec<(f64, Option<f64>)> {
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
