//! `stallscope advise` and `stallscope trial`: their arguments, examples,
//! and the parsers of a trial's settings and its workload's `run` options.

use super::{Cli, Command, WorkloadArgs};
use crate::base::units::Dur;
use crate::config::Config;
use clap::{Args, Parser};
use std::path::PathBuf;

pub(super) const ADVISE_EXAMPLES: &str = "Examples:
  stallscope run --target /data --record run.jsonl --duration 2m
  stallscope advise run.jsonl
      the cards, by cause; each says what to write where, e.g.
      echo 33554432 > /sys/class/bdi/8:0/max_bytes
  stallscope advise run.jsonl --format json | jq '.proposals[] | select(.gate == null) | .treatment'
      what each card that applies here writes: sysctls, sysfs files (a device's
      max_bytes with its strict_limit), mount options, the run's own options
  sudo stallscope run --observe-name postgres --record pg.jsonl --duration 60s
  stallscope advise pg.jsonl
      PostgreSQL's own settings come as `direction`: the lab runs our writers, not it

Verified in the lab (root): record on a lab, then try the cards on it
  sudo stallscope lab up --fs xfs --cap 20MiB --dirty-bytes 256MiB
  sudo stallscope run --preset cassandra-commitlog --target /var/tmp/stallscope-lab/mnt/xfs \\
      --duration 60s --record cl.jsonl
  sudo stallscope advise cl.jsonl --try --pairs 6 --run-secs 20
      every card the lab can apply, each an A/A pair then 6 A/B pairs of 20 s
      (about 5 minutes a card); each becomes `verified` with its verdict
      (improved, no_change, worse), before/after figures, interval and recipe
  sudo stallscope advise cl.jsonl --try --card 2 --measure max --format json
      only card 2, judged on the longest stall
  sudo stallscope advise cl.jsonl --try --card 1 --card 2 --svg cl.svg
      and each card's before/after chart: cl-card1.svg, cl-card2.svg
A recording made elsewhere: advise --try says how the lab differs and prints
the `stallscope lab up` command that makes one shaped like it.

Advice is only as good as the diagnosis: record as root, so tracing says why
each stall happened. Without --try nothing is changed on this machine; with
it, each change is put back after every B run, on Ctrl-C and SIGTERM. Exit
codes: 0 ok, 1 runtime error, 2 bad input (a missing or unreadable
recording; --try: a card that cannot be tried, no lab or one of another
shape, --pairs below 6, not root).";

/// `stallscope advise`.
#[derive(Args, Debug, Clone)]
pub struct AdviseArgs {
    /// A file written by --record (plain, .gz, or .zst), or what `run --format jsonl` printed (not with --try).
    pub recording: PathBuf,
    /// text: cards grouped by cause, 80 columns; json: {"proposals":[…]} for scripts.
    #[arg(long, value_enum, default_value_t = crate::cmd::advise::Format::Text)]
    pub format: crate::cmd::advise::Format,
    /// Try each card the lab can apply (root, on a lab shaped like the recording) and mark it verified with the verdict.
    #[arg(long = "try")]
    pub try_cards: bool,
    /// With --try: only card N (as the text numbers them); repeat for several.
    #[arg(long = "card", value_name = "N", requires = "try_cards")]
    pub cards: Vec<usize>,
    /// With --try: each tried card's before/after chart (an A and a B run on one time axis); with several cards, FILE-cardN.svg each.
    #[arg(long, value_name = "FILE", requires = "try_cards")]
    pub svg: Option<PathBuf>,
    /// With --try: how each card's trial runs.
    #[command(flatten)]
    pub lab: LabRunArgs,
}

impl AdviseArgs {
    /// The options of `--try`; None without it.
    pub fn try_options(&self) -> Option<crate::cmd::advise::tries::TryOptions> {
        self.try_cards
            .then(|| crate::cmd::advise::tries::TryOptions {
                cards: self.cards.clone(),
                svg: self.svg.clone(),
                trial: self.lab.options(true),
                with_args: with_run_args,
            })
    }
}

/// How a trial runs in the lab: `trial`'s and `advise --try`'s.
#[derive(Args, Debug, Clone)]
pub struct LabRunArgs {
    /// A/B pairs after the A/A pair (at least 6).
    #[arg(long, default_value_t = crate::cmd::advise::trial::DEFAULT_PAIRS)]
    pub pairs: usize,
    /// Each run's length (e.g. 20s, 2m) [default: the dirty setpoint reached 3 times, at least 10 000 ops].
    #[arg(long, value_name = "DUR")]
    pub run_secs: Option<Dur>,
    /// What the verdict is decided on: stall (stall time per GiB), p999, max (longest stall), zero (seconds at 0 MiB/s).
    #[arg(long, value_enum, default_value = "stall")]
    pub measure: TrialMeasure,
    /// The DIR given to lab up.
    #[arg(long, value_name = "DIR", default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
    pub lab_dir: PathBuf,
    /// Which of the lab's filesystems [default: trial, its first; advise --try, the one of the recorded target's type].
    #[arg(long, value_name = "DIR")]
    pub target: Option<PathBuf>,
    /// Before each run, flush the whole machine (sync) and drop its clean page cache (root), not only the lab filesystem's dirty data: every process on the machine pays for it. For a machine that runs nothing else.
    #[arg(long)]
    pub drop_caches: bool,
}

impl LabRunArgs {
    pub fn options(&self, drain: bool) -> crate::cmd::advise::trial::TrialOptions {
        let drain = crate::cmd::compare::Drain {
            on: drain,
            machine: self.drop_caches,
        };
        crate::cmd::advise::trial::TrialOptions {
            lab_dir: self.lab_dir.clone(),
            target: self.target.clone(),
            pairs: self.pairs,
            run_secs: self.run_secs.map(|d| d.0),
            measure: self.measure.measure(),
            drain,
        }
    }
}

pub(super) const TRIAL_EXAMPLES: &str = "Examples:
  stallscope lab up --fs ext4 --cap 20MiB --dirty-bytes 1GiB
  stallscope trial --setting /sys/class/bdi/{bdi}/max_bytes=33554432 \\
      --setting /sys/class/bdi/{bdi}/strict_limit=1 --run-secs 30 -- \\
      --mode buffered --threads 1 --record-size 64KiB --sync every:1600 --rate 240
  stallscope trial --setting vm.dirty_background_bytes=16777216 --format json -- --mode buffered
  ({bdi} is the lab device's major:minor.)

On the live server (root): the knob flipped under it, judged by its own stalls
  stallscope trial --observe-name postgres \\
      --setting /sys/class/bdi/{bdi}/max_bytes=33554432 --setting /sys/class/bdi/{bdi}/strict_limit=1
      a 90 s warm-up sizes the windows from the server's cycle, then an A/A pair and
      8 A/B pairs; {bdi} is the device under the server's working directory (or
      --target PATH); the knob is put back after every B window and on any exit
  stallscope trial --observe 4242 --setting vm.dirty_background_bytes=16777216 \\
      --window 30s --pairs 6 --format json -- --stall-threshold 50ms
      the JSON lists every window with its side and start_unix/end_unix
  stallscope trial --observe-name postgres \\
      --setting '/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device=7:0 60MiB'
      a server on the lab (cgroup v1): the lab's cap for B, its own value for A
Only runtime knobs: the dirty sysctls, /sys/class/bdi/MAJ:MIN/* limits,
/sys/block/DEV/queue/wbt_lat_usec and the lab's cap. No sync, no dropped caches,
no lab set-up. A load step (the A windows' write rate moving beyond the band the
A/A pair allows) gives `inconclusive`.";

/// `stallscope trial`.
#[derive(Args, Debug, Clone)]
pub struct TrialArgs {
    /// Live trial: flip the knob under this running process (and what it forks) instead of the lab's writers; repeat for several. The workload after `--` then holds observing options (--stall-threshold, --chains).
    #[arg(long, value_name = "PID")]
    pub observe: Vec<u32>,
    /// Live trial: as --observe, every process with this name.
    #[arg(long, value_name = "NAME")]
    pub observe_name: Vec<String>,
    /// Live trial: each window's length [default: whole cycles (at least 2, and 10 s) of the server's stalls and writes in a 90 s warm-up].
    #[arg(long, value_name = "DUR")]
    pub window: Option<Dur>,
    /// KNOB=VALUE for B: a sysctl (vm.dirty_background_bytes=16777216) or a sysfs file (/sys/class/bdi/{bdi}/max_bytes=33554432); repeat, applied in order.
    #[arg(long = "setting", value_name = "KNOB=VALUE", value_parser = parse_setting)]
    pub settings: Vec<crate::analysis::advice::treatment::Setting>,
    /// For B, remount the lab's filesystem with this option added (e.g. commit=1); repeat.
    #[arg(long = "mount-option", value_name = "OPT")]
    pub mount_options: Vec<String>,
    /// For B, these `run` options added to the workload's (one string, e.g. "--mode direct").
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub run_args: Option<String>,
    #[command(flatten)]
    pub lab: LabRunArgs,
    /// Output: text, or the outcome as JSON.
    #[arg(long, value_enum, default_value = "text")]
    pub format: TrialFormat,
    /// Do not write back the lab filesystem's dirty data before each run.
    #[arg(long)]
    pub no_drain: bool,
    /// Also draw an A run and a B run (each its side's median) on one time axis: write latency p50/p99/p99.9 per interval and the stall lanes by cause.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// The workload: `stallscope run` options.
    #[arg(last = true, value_name = "RUN OPTIONS")]
    pub workload: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TrialMeasure {
    Stall,
    P999,
    Max,
    Zero,
}

impl TrialMeasure {
    pub fn measure(self) -> crate::cmd::advise::trial::Measure {
        use crate::cmd::advise::trial::Measure;
        match self {
            TrialMeasure::Stall => Measure::StallTime,
            TrialMeasure::P999 => Measure::P999,
            TrialMeasure::Max => Measure::MaxStall,
            TrialMeasure::Zero => Measure::ZeroSeconds,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TrialFormat {
    Text,
    Json,
}

/// `KNOB=VALUE`: a path (starting with `/`) is a sysfs file, else a sysctl.
pub fn parse_setting(s: &str) -> Result<crate::analysis::advice::treatment::Setting, String> {
    use crate::analysis::advice::treatment::Setting;
    let (k, v) = s
        .split_once('=')
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .ok_or_else(|| format!("'{s}' is not KNOB=VALUE"))?;
    Ok(if k.starts_with('/') {
        Setting::Sysfs {
            path: k.into(),
            value: v.to_string(),
        }
    } else {
        Setting::Sysctl {
            name: k.to_string(),
            value: v.to_string(),
        }
    })
}

/// `run` options parsed as `stallscope run` parses them.
pub fn run_args(args: &[String]) -> Result<WorkloadArgs, crate::base::error::UsageError> {
    let argv = ["stallscope", "run"]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Some(Command::Run(w)),
            ..
        }) => Ok(w),
        Ok(_) => Err(crate::base::error::UsageError::new("not run options")),
        Err(e) => Err(crate::base::error::UsageError::new(format!(
            "the workload's run options: {}",
            e.render().to_string().lines().next().unwrap_or_default()
        ))),
    }
}

/// `cfg` with `args` (run options) over it: what a trial's B runs.
pub fn with_run_args(cfg: &Config, args: &[String]) -> anyhow::Result<Config> {
    let mut c = cfg.clone();
    run_args(args)?.apply(&mut c);
    Ok(c)
}

pub(super) const IMITATE_EXAMPLES: &str = "Examples (root):
  stallscope run --observe-name postgres --record pg.rec      # the server, under its load
  stallscope lab up --fs ext4 --cap 20MiB
  stallscope imitate pg.rec --dir /var/tmp/stallscope-lab/mnt/ext4 &
  stallscope run --observe $! --record imit.rec                # the imitation, observed the same way
  stallscope imitate pg.rec --check imit.rec                   # the fidelity gate
  stallscope imitate pg.rec --dir DIR --loop                   # a steady load for `trial --observe`";
