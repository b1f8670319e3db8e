//! The command line (clap): the top-level parser and the subcommand enum
//! here, each group's arguments in its own file: `workload` (run, watch
//! and the dashboard's options, layered over presets and the config file),
//! `compare`, `lab`, `advise` (advise and trial), `ui` (the dashboard's
//! drawing options), `docs` (completions and the man page).

mod advise;
mod compare;
mod docs;
mod lab;
mod ui;
mod workload;

pub use advise::{
    parse_setting, run_args, with_run_args, AdviseArgs, LabRunArgs, TrialArgs, TrialFormat,
    TrialMeasure,
};
pub use compare::CompareArgs;
pub use docs::{write_completions, write_man};
pub use lab::LabCommand;
pub use ui::UiArgs;
pub use workload::{layered, WorkloadArgs};

use crate::base::units::Dur;
use advise::{ADVISE_EXAMPLES, IMITATE_EXAMPLES, TRIAL_EXAMPLES};
use clap::{Parser, Subcommand};
use docs::{COMPLETIONS_EXAMPLES, MAN_EXAMPLES};
use std::path::PathBuf;

pub(crate) const ABOUT: &str = "Live diagnosis of write stalls on Linux.

stallscope drives its own writer threads against one or more directories,
imitating real write paths (Cassandra's mmap commitlog, buffered write(),
O_DIRECT, Ceph's journal+apply), times every op, and reports throughput,
latency percentiles and stall events per interval.";

const EXAMPLES: &str = "Examples:
  stallscope --target /mnt/xfs --target /mnt/ext4
      the live dashboard (Tab switches target, m mode, ? help)
  stallscope run --duration 30s
      mmap commitlog writers on a scratch dir under $TMPDIR or /var/tmp
  stallscope run --target /mnt/xfs --target /mnt/ext4 --mode buffered --threads 8
  stallscope run --target /data --mode journal --threads 4 --commit-interval 5s
  stallscope run --target /data --format jsonl --duration 60s > run.jsonl
  stallscope run --target /data --rate 1000 --metrics-listen 0.0.0.0:9187
      headless until stopped, Prometheus metrics at http://<host>:9187/metrics
  sudo stallscope --observe-name java
      no writers: watch a running JVM's threads (D state, throttling, faults, writes)
  sudo stallscope run --observe 4242 --format jsonl
  stallscope --config stallscope.toml run
  stallscope completions bash|zsh|fish, stallscope man
      shell completions and the man page, on stdout (see their --help)

Writers work in DIR/.stallscope-<pid>/ and remove it on exit (also on Ctrl-C,
SIGTERM and SIGHUP). Exit codes: 0 ok, 1 runtime error, 2 bad input.";

const RUN_EXAMPLES: &str = "Examples:
  stallscope run --duration 30s
      mmap commitlog writers on a scratch dir under $TMPDIR or /var/tmp
  stallscope run --target /mnt/xfs --target /mnt/ext4 --mode buffered --threads 8
  stallscope run --preset rados-bench --target /var/tmp/stallscope-lab/mnt/xfs
  stallscope run --target /data --mode journal --threads 4 --commit-interval 5s
  stallscope run --target /data --format jsonl --duration 60s > run.jsonl
  stallscope run --target /data --record run.jsonl --duration 2m
      then: stallscope replay run.jsonl, stallscope report run.jsonl --svg run.svg
  stallscope run --target /data --rate 1000 --metrics-listen 0.0.0.0:9187
      headless until stopped, Prometheus metrics at http://<host>:9187/metrics
  sudo stallscope run --observe-name postgres --duration 60s
      no writers: a running server's threads, forked processes included

Exit codes: 0 ok, 1 runtime error, 2 bad input.";

/// `watch --help`: the dashboard's keys, from the one key table.
fn dashboard_keys() -> String {
    let mut s = String::from("Keys:\n");
    for d in crate::tui::keys::KEYS
        .iter()
        .filter(|d| !d.label.is_empty())
    {
        s.push_str(&format!("  {:<11} {}\n", d.label, d.help));
    }
    s.push_str("\nExamples:\n  stallscope watch --target /mnt/xfs --target /mnt/ext4\n  sudo stallscope watch --observe-name postgres");
    s
}

#[derive(Parser, Debug)]
#[command(
    name = "stallscope",
    version,
    about = ABOUT,
    after_help = EXAMPLES
)]
pub struct Cli {
    /// TOML config file (see config.example.toml); options given here override it.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Option<Command>,

    /// With no subcommand: the dashboard, with these workload options.
    #[command(flatten)]
    pub workload: WorkloadArgs,

    #[command(flatten)]
    pub ui: UiArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the workload headless: one line per interval, then a summary.
    #[command(after_help = RUN_EXAMPLES)]
    Run(WorkloadArgs),
    /// Open the live dashboard (the same as no subcommand).
    #[command(after_help = dashboard_keys())]
    Watch {
        #[command(flatten)]
        workload: WorkloadArgs,
        #[command(flatten)]
        ui: UiArgs,
    },
    /// Replay a recording in the dashboard (space play/pause, </> speed, n/N stalls, g go to).
    Replay {
        /// A file written by --record (plain, .gz, or .zst from older builds).
        file: PathBuf,
        /// Playback speed, 1-64.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
        speed: u32,
        #[command(flatten)]
        ui: UiArgs,
    },
    /// Summarize a recording: text per target and mode, and optionally an SVG chart and a CSV.
    Report {
        /// A file written by --record (plain, .gz, or .zst from older builds).
        file: PathBuf,
        /// Write a chart (throughput, latency, dirty/writeback, stalls) as SVG.
        #[arg(long, value_name = "OUT.svg")]
        svg: Option<PathBuf>,
        /// Write one row per interval and target, every numeric field.
        #[arg(long, value_name = "OUT.csv")]
        csv: Option<PathBuf>,
        /// Only intervals ending after this time (e.g. 30s, 2m) since the start.
        #[arg(long, value_name = "T", allow_hyphen_values = true)]
        from: Option<Dur>,
        /// Only intervals ending at or before this time.
        #[arg(long, value_name = "T", allow_hyphen_values = true)]
        to: Option<Dur>,
    },
    /// Propose changes that should remove a recording's stalls, cause by cause, as cards; with --try, verify them in the lab.
    ///
    /// Each card is one change (a device's dirty limit, a dirty sysctl, a
    /// mount option, the write path, a server's own setting) with its
    /// scope (the application, this mount, this device, global), its
    /// trade-off in one line, a source (the kernel's documentation, the
    /// application's docs), the exact value to write and how, and a
    /// fidelity tag: `direction` (the lab can show which way it moves the
    /// stalls, not by how much), `not-testable` (only the real hardware
    /// can tell) or, after --try, `verified` with the trial's verdict and
    /// numbers. Causes come largest stall time first; within a cause a
    /// narrower scope comes first, and a global sysctl says what else it
    /// changes. Knobs are checked on this machine: one that is missing, or
    /// a kernel too old for it (a device's max_bytes needs Linux 6.2), is
    /// still shown, marked `not here` with the reason.
    ///
    /// --try (root) runs `trial` for each card our writers' stalls have
    /// that the lab can apply, one after the other: the recorded workload
    /// (the recording's own configuration) on the lab's filesystem, an A/A
    /// pair, then --pairs A/B pairs with the change for B. The lab must be
    /// shaped like the recording: its filesystem, a cap within 20 % of the
    /// rate the recorded device wrote back at, the recorded dirty limits;
    /// when it is not (or there is none), advise says what differs and
    /// prints the `lab up` command that makes one that is (exit 2). Each
    /// change is put back after every B run, and on Ctrl-C or SIGTERM.
    /// Cards for an observed server are not tried (imitating a server's
    /// write pattern is not implemented): they stay `direction`.
    #[command(after_help = ADVISE_EXAMPLES)]
    Advise(AdviseArgs),
    /// Run the same workload on each target x mode (x threads) in turn and print a side-by-side table.
    Compare(CompareArgs),
    /// Try one change in the lab (root, after `lab up`), or under a live server (--observe): an A/A pair, then interleaved A/B pairs, and a verdict.
    ///
    /// With --observe PID or --observe-name NAME no writers run: the
    /// knob (a runtime one only) is flipped for B windows under the
    /// running server, judged by its own stalls, and put back after each
    /// window and on any exit; a load step gives `inconclusive`.
    ///
    /// The workload's `run` options go after `--`; its target and
    /// duration are the trial's. B runs with the settings applied (each
    /// recorded in the lab's state first, put back after every B run and
    /// on Ctrl-C, SIGTERM or a panic; `lab down` puts back a killed
    /// trial's). Prints the verdict (improved, no_change, worse: the
    /// median of the pairs' ln(B/A), its bootstrap 95 % interval, the A/A
    /// noise band), both sides' figures and a recipe to redo it by hand.
    /// `advise --try` runs the same engine.
    #[command(after_help = TRIAL_EXAMPLES)]
    Trial(TrialArgs),
    /// Replay an observed server's write pattern in the lab; --check: the fidelity gate.
    ///
    /// Reads the calls a recording of `run --observe …` captured (root,
    /// call bounds on) and replays them: one thread per observed process
    /// and thread name (threads `im0`, `im1`, … one per role), each
    /// interval's writes (their sizes from the recorded histogram, adding
    /// up to the recorded bytes) and syncs (fsync, fdatasync,
    /// sync_file_range, syncfs; `sync` narrowed to syncfs) spread evenly
    /// over it, in open loop from the intended issue times: a stalled call
    /// makes the next ones late, not fewer. Files are its own, under
    /// --dir, removed on exit. It prints a line a second: how much of the
    /// schedule it has kept. Observe it as the server was observed
    /// (`run --observe PID --record IMIT.rec`), then
    /// `imitate SERVER.rec --check IMIT.rec` says whether it did what the
    /// server did (per role: writes, bytes and syncs a second within
    /// ×0.85–×1.15) and stalled as it stalled (stalls a minute and p99
    /// within ×0.5–×2, the longest within ×3, the same dominant cause),
    /// and fails when the server wrote through what it cannot replay
    /// (mmap stores: dirtied bytes over twice its write calls' bytes).
    #[command(verbatim_doc_comment, after_help = IMITATE_EXAMPLES)]
    Imitate {
        /// The server's recording (`run --observe … --record`).
        recording: PathBuf,
        /// Where the imitation's files go (a lab's mount, like the server's disk).
        #[arg(long, value_name = "DIR", required_unless_present = "check")]
        dir: Option<PathBuf>,
        /// Start over at the end, until stopped (a load for a trial).
        #[arg(long = "loop")]
        repeat: bool,
        /// Compare a recording of the imitation with the server's instead of running.
        #[arg(long, value_name = "IMITATION.rec")]
        check: Option<PathBuf>,
        /// The gate as JSON (with --check).
        #[arg(long)]
        json: bool,
    },
    /// Build, inspect or tear down loop-backed test filesystems with a write cap (root).
    #[command(subcommand)]
    Lab(LabCommand),
    /// Show what this machine lets stallscope see (tracing, PSI, devices, dirty limits) and why not.
    ///
    /// A table of features (scheduler timing, wake-up chains, throttle
    /// evidence, page waits, flusher reasons, call boundaries, PSI,
    /// per-device dirty limits, cgroup layout, write cap), each yes or no
    /// with what it is or why not, and the fix after an arrow (`run as
    /// root`, `boot with psi=1`, a newer kernel). Tracing needs root; run as
    /// root for the real answer. Then the dirty thresholds and, per target,
    /// its device, bdi settings and where throttling starts.
    ///
    /// To see what a user on an older kernel sees, hide events:
    /// STALLSCOPE_HIDE_EVENTS=writeback:folio_wait_writeback stallscope probe
    #[command(verbatim_doc_comment)]
    Probe {
        /// Directory to inspect (repeatable). Default: $TMPDIR, else /var/tmp.
        #[arg(long = "target", short = 't', value_name = "DIR")]
        targets: Vec<PathBuf>,
    },
    /// Print a shell completion script on stdout.
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout.
    #[command(after_help = MAN_EXAMPLES)]
    Man,
}

impl Cli {
    /// Workload options belong after the subcommand; given before it they
    /// would be silently ignored, so say so.
    pub fn check_placement(&self) -> Result<(), crate::base::error::UsageError> {
        if self.command.is_some() && self.workload != WorkloadArgs::default() {
            return Err(crate::base::error::UsageError::new(
                "workload options go after the subcommand, e.g. `stallscope run --threads 8`",
            ));
        }
        Ok(())
    }
}

/// Parses the command line, exiting with clap's message on bad input. A
/// misspelt subcommand that clap finds no suggestion for (`rn`) still gets
/// one when it is a single edit away from a real one.
pub fn parse_or_exit() -> Cli {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::CommandFactory;
    let mut e = match Cli::try_parse() {
        Ok(c) => return c,
        Err(e) => e,
    };
    if e.kind() == ErrorKind::InvalidSubcommand && e.get(ContextKind::SuggestedSubcommand).is_none()
    {
        if let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidSubcommand) {
            let cmd = Cli::command();
            let names: Vec<String> = cmd
                .get_subcommands()
                .map(|c| c.get_name().to_string())
                .collect();
            if let Some(best) = names.iter().find(|n| strsim::levenshtein(n, bad) == 1) {
                let best = ContextValue::Strings(vec![best.clone()]);
                e.insert(ContextKind::SuggestedSubcommand, best);
            }
        }
    }
    e.exit()
}

#[cfg(test)]
mod tests;
