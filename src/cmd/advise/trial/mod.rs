//! `--try`: one proposal tried in the lab. The workload runs as it is (A)
//! and with the treatment applied (B), one run at a time on the lab's
//! filesystem: an A/A pair first (its difference is the noise band), then
//! `pairs` A/B pairs, alternating which side goes first so a drift of the
//! machine (the disk filling, the cache warming) does not favour one side.
//! Each run is an ordinary `compare` run (`compare::run_config`), dirty
//! data drained before it. The per-run figures (`figures`) feed the
//! verdict (`verdict`); the treatment is applied and put back around each
//! B run (`apply`); the recipe (`recipe`) and the text (`show`) say it.

pub mod apply;
mod conclude;
pub mod figures;
pub mod live;
pub mod progress;
pub mod recipe;
mod setup;
pub mod show;
pub mod svg;
pub mod verdict;

use crate::analysis::advice::outcome::Outcome;
use crate::analysis::advice::treatment::{Setting, Treatment};
use crate::cmd::compare::{drain, run_config, Drain};
use crate::cmd::report::RunTrace;
use crate::config::Config;
use figures::RunFigures;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// At least this many A/B pairs (fewer cannot bound a median's interval).
pub const MIN_PAIRS: usize = 6;
pub const DEFAULT_PAIRS: usize = 8;
/// p99.9 needs this many ops per run to mean anything.
pub const MIN_OPS: u64 = 10_000;

/// Applies extra `run` arguments over a configuration (the command line's
/// parser: `cmd` sits below `cli`).
pub type WithArgs = fn(&Config, &[String]) -> anyhow::Result<Config>;

/// The workload a trial runs: our writers' configuration and the `run`
/// arguments that make it (for the recipe). Its targets are replaced by
/// the lab's filesystem.
#[derive(Clone)]
pub struct Workload {
    pub config: Config,
    pub args: Vec<String>,
    /// Needed for a treatment with `Setting::RunArgs`.
    pub with_args: Option<WithArgs>,
}

/// What the verdict is decided on; lower is better for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Measure {
    /// Stall time per GiB written, all causes.
    #[default]
    StallTime,
    P999,
    MaxStall,
    /// Seconds without a finished write: throughput at 0.
    ZeroSeconds,
}

impl Measure {
    pub fn name(self) -> &'static str {
        match self {
            Measure::StallTime => "stall_ms_per_gib",
            Measure::P999 => "p999_ms",
            Measure::MaxStall => "max_stall_ms",
            Measure::ZeroSeconds => "zero_s",
        }
    }

    pub fn of(self, f: &RunFigures) -> f64 {
        match self {
            Measure::StallTime => f.stall_total(),
            Measure::P999 => f.p999_ms,
            Measure::MaxStall => f.max_stall_ms,
            Measure::ZeroSeconds => f.zero_s,
        }
    }

    /// Below this the measure says nothing (`verdict`'s floor): one
    /// threshold-long stall per GiB, a threshold-long stall, 1 ms, 1 s.
    pub fn floor(self, threshold_ms: f64) -> f64 {
        match self {
            Measure::StallTime | Measure::MaxStall => threshold_ms,
            Measure::P999 | Measure::ZeroSeconds => 1.0,
        }
    }
}

/// How a trial runs.
#[derive(Clone, Debug)]
pub struct TrialOptions {
    pub lab_dir: PathBuf,
    /// One of the lab's mounts; the first when not given.
    pub target: Option<PathBuf>,
    pub pairs: usize,
    /// Each run's length; by default long enough to reach the dirty
    /// setpoint 3 times and to do `MIN_OPS` ops (`default_run_secs`).
    pub run_secs: Option<Duration>,
    pub measure: Measure,
    /// Before each run, the lab filesystem's dirty data written back (and,
    /// asked for, the machine's, with its page cache dropped).
    pub drain: Drain,
}

impl Default for TrialOptions {
    fn default() -> Self {
        TrialOptions {
            lab_dir: crate::cmd::lab::cmd::DEFAULT_DIR.into(),
            target: None,
            pairs: DEFAULT_PAIRS,
            run_secs: None,
            measure: Measure::default(),
            drain: Drain::targets(),
        }
    }
}

/// A or B.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

/// The runs in order, each with its pair (0 is the A/A pair): A A, then
/// A B, B A, A B, … for `pairs` pairs.
pub fn schedule(pairs: usize) -> Vec<(Side, usize)> {
    let mut v = vec![(Side::A, 0), (Side::A, 0)];
    for p in 1..=pairs {
        let (first, second) = if p % 2 == 1 {
            (Side::A, Side::B)
        } else {
            (Side::B, Side::A)
        };
        v.push((first, p));
        v.push((second, p));
    }
    v
}

/// Long enough for the dirty pool to reach its setpoint (halfway between
/// the background and the hard threshold) 3 times from empty at
/// `fill_bps`, and for `MIN_OPS` ops at `rate_ops` (0: unthrottled);
/// 10 s to 10 min.
pub fn default_run_secs(setpoint_bytes: u64, fill_bps: f64, rate_ops: u64) -> Duration {
    let fill = if fill_bps > 0.0 {
        3.0 * setpoint_bytes as f64 / fill_bps
    } else {
        0.0
    };
    let ops = if rate_ops > 0 {
        MIN_OPS as f64 * 1.1 / rate_ops as f64
    } else {
        0.0
    };
    Duration::from_secs_f64(fill.max(ops).clamp(10.0, 600.0).ceil())
}

/// Tries `treatment` against `workload` on the lab; see the module doc.
/// `stop` (Ctrl-C, SIGTERM) ends it between or within runs, with
/// everything put back; `progress` gets a line now and then.
pub fn try_proposal(
    workload: &Workload,
    treatment: &Treatment,
    o: &TrialOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Outcome> {
    try_charted(workload, treatment, o, stop, progress).map(|c| c.outcome)
}

/// A finished trial and the run of each side its chart shows
/// (`svg::write`).
pub struct Charted {
    pub outcome: Outcome,
    /// The treatment as applied: `{bdi}` filled in.
    pub treatment: Treatment,
    pub a: svg::Shown,
    pub b: svg::Shown,
}

/// `try_proposal`, keeping what the chart needs of every run (its trace,
/// not its snapshots) and picking each side's median run.
pub fn try_charted(
    workload: &Workload,
    treatment: &Treatment,
    o: &TrialOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Charted> {
    let t = setup::prepare(workload, treatment, o)?;
    let plan = schedule(o.pairs);
    let mut runs: Vec<(Side, usize, RunFigures)> = Vec::new();
    let mut traces = Vec::new();
    let started = Instant::now();
    for (i, &(side, pair)) in plan.iter().enumerate() {
        let eta = progress::eta(i, plan.len(), started.elapsed(), t.run_secs);
        let head = format!(
            "[run {}/{} {}{}, ~{} left]",
            i + 1,
            plan.len(),
            if pair == 0 { "A/A " } else { "" },
            if side == Side::A { "A" } else { "B" },
            progress::short(eta)
        );
        if o.drain.on && !stop.load(Ordering::Relaxed) {
            drain(&head, &t.cfg_a.targets, &o.drain, stop, progress);
        }
        if stop.load(Ordering::Relaxed) {
            anyhow::bail!("interrupted; everything the trial changed is back");
        }
        let (f, trace) = one_run(&t, side, &head, stop, progress)?;
        progress(&format!(
            "{head} done: {:.0} ms/GiB stalled, p99.9 {:.1} ms, {:.1} MiB/s",
            f.stall_total(),
            f.p999_ms,
            f.mib_per_s
        ));
        runs.push((side, pair, f));
        traces.push(trace);
    }
    let measured: Vec<(Side, f64)> = runs.iter().map(|(s, _, f)| (*s, o.measure.of(f))).collect();
    Ok(Charted {
        outcome: conclude::outcome(&t, o, &runs),
        treatment: Treatment {
            settings: t.settings.clone(),
        },
        a: svg::pick(&measured, &traces, Side::A, o.measure),
        b: svg::pick(&measured, &traces, Side::B, o.measure),
    })
}

/// One run of `side`: B with the treatment applied, put back after. Its
/// figures, and its trace for the chart.
fn one_run(
    t: &setup::Trial,
    side: Side,
    head: &str,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<(RunFigures, RunTrace)> {
    let (cfg, applied) = match side {
        Side::A => (&t.cfg_a, None),
        Side::B => (
            &t.cfg_b,
            Some(apply::apply(
                &t.lab_dir,
                &t.settings,
                &t.lab.mount,
                &crate::knob::Registry::machine(),
            )?),
        ),
    };
    let r = run_config(cfg, t.run_secs, head, stop, progress);
    if let Some(a) = applied {
        a.restore()?;
    }
    let r =
        r?.ok_or_else(|| anyhow::anyhow!("interrupted; everything the trial changed is back"))?;
    if let Some(e) = r.error {
        anyhow::bail!("{head}: {e}");
    }
    let f = figures::of_snapshots(&r.snapshots, 0, figures::offered_mib_per_s(cfg));
    Ok((f, svg::trace_of(&r.snapshots, t.run_secs)))
}

/// `{bdi}` in a sysfs path becomes the target's `major:minor`, so a
/// script can name the lab's device without knowing it.
pub fn resolve(settings: &[Setting], bdi: &str) -> Vec<Setting> {
    settings
        .iter()
        .map(|s| match s {
            Setting::Sysfs { path, value } => Setting::Sysfs {
                path: PathBuf::from(path.to_string_lossy().replace("{bdi}", bdi)),
                value: value.clone(),
            },
            other => other.clone(),
        })
        .collect()
}

/// Whether `p` is one of the lab's mounts.
fn lab_mount(lab_dir: &Path, p: &Path) -> bool {
    crate::cmd::lab::cmd::lab_targets(lab_dir).is_ok_and(|m| m.iter().any(|x| x == p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_starts_with_a_a_and_alternates() {
        let s = schedule(4);
        let sides: String = s
            .iter()
            .map(|(x, _)| if *x == Side::A { 'A' } else { 'B' })
            .collect();
        assert_eq!(sides, "AAABBAABBA");
        let pairs: Vec<usize> = s.iter().map(|(_, p)| *p).collect();
        assert_eq!(pairs, [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]);
        assert_eq!(schedule(8).len(), 18);
    }

    #[test]
    fn runs_are_long_enough_for_the_setpoint_and_the_ops() {
        let mib = 1u64 << 20;
        // 640 MiB setpoint filled at 20 MiB/s: 32 s, three times.
        assert_eq!(
            default_run_secs(640 * mib, 20.0 * mib as f64, 0),
            Duration::from_secs(96)
        );
        // 200 ops/s: 10 000 ops need 50 s (and a margin).
        assert_eq!(
            default_run_secs(mib, 100.0 * mib as f64, 200),
            Duration::from_secs(55)
        );
        assert_eq!(default_run_secs(0, 0.0, 0), Duration::from_secs(10));
        assert_eq!(
            default_run_secs(1 << 40, 1.0, 0),
            Duration::from_secs(600),
            "capped"
        );
    }

    #[test]
    fn the_device_placeholder_is_filled_in() {
        let s = [
            Setting::Sysfs {
                path: "/sys/class/bdi/{bdi}/max_bytes".into(),
                value: "1".into(),
            },
            Setting::Sysctl {
                name: "vm.x".into(),
                value: "{bdi}".into(),
            },
        ];
        let r = resolve(&s, "7:3");
        assert_eq!(
            r[0],
            Setting::Sysfs {
                path: "/sys/class/bdi/7:3/max_bytes".into(),
                value: "1".into()
            }
        );
        assert_eq!(r[1], s[1]);
    }

    #[test]
    fn measures_read_their_figure_and_floor() {
        let f = RunFigures {
            stall_ms_per_gib: [("sync".to_string(), 300.0), ("device".to_string(), 50.0)]
                .into_iter()
                .collect(),
            p999_ms: 7.0,
            max_stall_ms: 900.0,
            ..RunFigures::default()
        };
        assert_eq!(Measure::StallTime.of(&f), 350.0);
        assert_eq!(Measure::P999.of(&f), 7.0);
        assert_eq!(Measure::MaxStall.of(&f), 900.0);
        assert_eq!(Measure::StallTime.floor(100.0), 100.0);
        assert_eq!(Measure::P999.floor(100.0), 1.0);
        let z = RunFigures {
            zero_s: 4.0,
            ..RunFigures::default()
        };
        assert_eq!(Measure::ZeroSeconds.of(&z), 4.0);
        assert_eq!(Measure::ZeroSeconds.floor(100.0), 1.0);
    }
}
