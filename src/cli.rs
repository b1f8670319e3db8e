//! The command line. Every workload option is an `Option` so it only
//! overrides the config file when given; `WorkloadArgs::apply` layers it.

use crate::base::units::{ByteSize, Dur};
use crate::config::{Config, Format, Mode, SyncPolicy};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

const ABOUT: &str = "Live diagnosis of write stalls on Linux.

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

/// `stallscope compare`.
#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// A directory to compare (repeat; e.g. an ext4 and an xfs mount).
    #[arg(long = "target", short = 't', value_name = "DIR")]
    pub targets: Vec<PathBuf>,
    /// Use every filesystem that `lab up` mounted (see --lab-dir).
    #[arg(long)]
    pub lab: bool,
    /// The DIR given to lab up (with --lab).
    #[arg(long, value_name = "DIR", default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
    pub lab_dir: PathBuf,
    /// A workload preset (cassandra-commitlog, cassandra-direct, rados-bench, a .toml path) or `list`.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Write modes to run on each target, comma-separated [default: the preset's, else the workload's].
    #[arg(long = "mode", short = 'm', value_enum, value_delimiter = ',')]
    pub modes: Vec<Mode>,
    /// Thread counts to run, comma-separated, e.g. 1,4 [default: the preset's, else the workload's].
    #[arg(long = "threads", short = 'j', value_delimiter = ',')]
    pub threads: Vec<u32>,
    /// Length of each run.
    #[arg(
        long,
        value_name = "DUR",
        default_value = "30s",
        allow_hyphen_values = true
    )]
    pub each: Dur,
    /// Bytes per record.
    #[arg(long, value_name = "SIZE")]
    pub record_size: Option<ByteSize>,
    /// Size of each fresh sparse segment file [default: the preset's, else 32MiB].
    #[arg(long, value_name = "SIZE")]
    pub segment_size: Option<ByteSize>,
    /// periodic:<dur>, every:<N> or none.
    #[arg(long, value_name = "POLICY")]
    pub sync: Option<SyncPolicy>,
    /// Most bytes kept on disk per target; older segments are deleted [default: 1GiB].
    #[arg(long, value_name = "SIZE")]
    pub disk_budget: Option<ByteSize>,
    /// Journal mode: syncfs() period; also when the journal is half full [default: 5s].
    #[arg(long, value_name = "DUR", allow_hyphen_values = true)]
    pub commit_interval: Option<Dur>,
    /// Reporting interval [default: 1s].
    #[arg(long, value_name = "DUR", allow_hyphen_values = true)]
    pub interval: Option<Dur>,

    /// One recording per run: FILE with the run's number, fs, mode and threads added to its name.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// The runs overlaid on one time axis, as an SVG.
    #[arg(long, value_name = "OUT.svg")]
    pub svg: Option<PathBuf>,
    /// Do not sync, drop caches and wait for dirty data to drain between runs.
    #[arg(long)]
    pub no_drain: bool,
}

const ADVISE_EXAMPLES: &str = "Examples:
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

Advice is only as good as the diagnosis: record as root, so tracing says why
each stall happened. Nothing is changed on this machine. Exit codes: 0 ok,
1 runtime error, 2 bad input (a missing or unreadable recording).";

const LAB_UP_EXAMPLES: &str = "Examples:
  sudo stallscope lab up
      ext4 and xfs, 4GiB sparse images, writes capped at 50MiB/s
  sudo stallscope lab up --fs ext4 --cap 20MiB --dirty-bytes 256M
  sudo stallscope run --target /var/tmp/stallscope-lab/mnt/ext4 --mode buffered

On cgroup v1 the root blkio group's throttle caps every writer. On cgroup v2
the root group cannot be capped: the lab makes the group stallscope-lab
(+io +memory enabled in the root), caps the devices in its io.max, and only
processes in it are capped: `run` and the dashboard join it for lab targets;
`lab exec` and `lab adopt` put other programs there. Buffered writes are
capped only when memory is on v2 too, on ext4, btrfs and xfs (5.3+).";

const LAB_DOWN_EXAMPLES: &str = "Examples:
  sudo stallscope lab down
      names the processes using a lab mount and stops (exit 2), else undoes all
  sudo stallscope lab down --force
      stops those processes (SIGTERM, SIGKILL after 5 s), then undoes all
  sudo stallscope lab down --force --lazy
      detaches the mounts (umount -l), leaving them running; their images
      stay until they let go: run lab down again then

Ctrl-C stops it between steps; what is left stays in the state file
(`lab status` lists it) and the next `lab down` finishes it.";

const LAB_EXEC_EXAMPLES: &str = "Examples:
  sudo stallscope lab exec -- fio --name w --directory /var/tmp/stallscope-lab/mnt/ext4 --rw write --size 1G
  sudo stallscope lab exec -- su postgres -c 'pg_ctl -D /var/tmp/stallscope-lab/mnt/ext4/pg start'

Exits with the command's status. Its processes are moved back by lab down.
On cgroup v1 (the root group is capped) it just runs the command.
systemd's way: systemd-run --scope -p IOWriteBandwidthMax=\"/dev/loopN 20M\" CMD";

const LAB_ADOPT_EXAMPLES: &str = "Examples:
  sudo stallscope lab adopt $(head -1 /var/tmp/stallscope-lab/mnt/ext4/pg/postmaster.pid)
      PostgreSQL's postmaster and all its children

lab down moves each back to the cgroup it came from (those still alive).
systemd's way: systemctl set-property --runtime UNIT IOWriteBandwidthMax=\"/dev/loopN 20M\"";

#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Image files in DIR, loop devices (direct I/O), mkfs, mounts under DIR/mnt/<fs>, a write cap, optional dirty limits.
    #[command(after_help = LAB_UP_EXAMPLES)]
    Up {
        /// Filesystems to build, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "ext4,xfs")]
        fs: Vec<String>,
        /// Size of each (sparse) image; the disk needs room for what a run writes (its --disk-budget), not all of it.
        #[arg(long, default_value = "4GiB")]
        size: ByteSize,
        /// Where the images, mounts and state file go.
        #[arg(long, default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
        dir: PathBuf,
        /// Write bandwidth cap per device, per second (0 = none), e.g. 50MiB.
        #[arg(long, default_value = "50MiB", value_parser = parse_rate)]
        cap: ByteSize,
        /// Lower vm.dirty_bytes to this (restored by lab down).
        #[arg(long, value_name = "SIZE")]
        dirty_bytes: Option<ByteSize>,
        /// vm.dirty_background_bytes [default: a quarter of --dirty-bytes].
        #[arg(long, value_name = "SIZE")]
        dirty_background_bytes: Option<ByteSize>,
        /// Turn on stable_writes on the loop devices (rewriting a page under writeback waits; kernel 5.10+).
        #[arg(long)]
        stable_writes: bool,
    },
    /// Undo everything lab up changed (also after a crash), unless a process still uses the lab.
    #[command(after_help = LAB_DOWN_EXAMPLES)]
    Down {
        /// The DIR given to lab up (its state file says what to undo).
        #[arg(long, default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
        dir: PathBuf,
        /// Go on when processes use a lab mount: stop them (SIGTERM, then SIGKILL).
        #[arg(long)]
        force: bool,
        /// With --force: unmount lazily instead, leaving those processes running.
        #[arg(long, requires = "force")]
        lazy: bool,
    },
    /// What is up, and what is left to undo.
    Status {
        /// The DIR given to lab up.
        #[arg(long, default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
        dir: PathBuf,
    },
    /// Run a command under the lab's write cap (cgroup v2: in its group).
    #[command(after_help = LAB_EXEC_EXAMPLES)]
    Exec {
        /// The DIR given to lab up.
        #[arg(long, default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
        dir: PathBuf,
        /// The command and its arguments, after `--`.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "CMD"
        )]
        command: Vec<String>,
    },
    /// Put a running process and all its descendants under the lab's cap (cgroup v2: into its group).
    #[command(after_help = LAB_ADOPT_EXAMPLES)]
    Adopt {
        /// The DIR given to lab up.
        #[arg(long, default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
        dir: PathBuf,
        /// The process (e.g. PostgreSQL's postmaster).
        pid: u32,
    },
}

/// "50MiB/s" or "50MiB" (per second either way).
fn parse_rate(s: &str) -> Result<ByteSize, String> {
    s.strip_suffix("/s").unwrap_or(s).parse()
}

/// How the dashboard draws.
#[derive(Args, Debug, Clone)]
pub struct UiArgs {
    /// Most redraws per second (redraws happen only on new data or input).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=60))]
    pub fps: u32,

    /// Time span the charts show.
    #[arg(
        long,
        value_name = "DUR",
        default_value = "120s",
        allow_hyphen_values = true
    )]
    pub window: Dur,

    /// Plain ASCII: no braille or box-drawing glyphs.
    #[arg(long)]
    pub ascii: bool,

    /// No colours (also when NO_COLOR is set).
    #[arg(long)]
    pub no_color: bool,
}

impl UiArgs {
    pub fn options(&self) -> crate::tui::term::UiOptions {
        let no_color_env = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        crate::tui::term::UiOptions {
            fps: self.fps,
            window_s: self.window.0.as_secs().clamp(10, 3600),
            ascii: self.ascii,
            color: !(self.no_color || no_color_env),
        }
    }
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
    /// Propose changes that should remove a recording's stalls, cause by cause, as cards.
    ///
    /// Each card is one change (a device's dirty limit, a dirty sysctl, a
    /// mount option, the write path, a server's own setting) with its
    /// scope (the application, this mount, this device, global), its
    /// trade-off in one line, a source (the kernel's documentation, the
    /// application's docs), the exact value to write and how, and a
    /// fidelity tag: `direction` (the lab can show which way it moves the
    /// stalls, not by how much) or `not-testable` (only the real hardware
    /// can tell). Causes come largest stall time first; within a cause a
    /// narrower scope comes first, and a global sysctl says what else it
    /// changes. Knobs are checked on this machine: one that is missing, or
    /// a kernel too old for it (a device's max_bytes needs Linux 6.2), is
    /// still shown, marked `not here` with the reason.
    #[command(after_help = ADVISE_EXAMPLES)]
    Advise {
        /// A file written by --record (plain, .gz, or .zst), or what `run --format jsonl` printed.
        recording: PathBuf,
        /// text: cards grouped by cause, 80 columns; json: {"proposals":[…]} for scripts.
        #[arg(long, value_enum, default_value_t = crate::cmd::advise::Format::Text)]
        format: crate::cmd::advise::Format,
    },
    /// Run the same workload on each target x mode (x threads) in turn and print a side-by-side table.
    Compare(CompareArgs),
    /// Try one change in the lab (root, after `lab up`): an A/A pair, then interleaved A/B pairs of the workload, and a verdict.
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

const TRIAL_EXAMPLES: &str = "Examples:
  stallscope lab up --fs ext4 --cap 20MiB --dirty-bytes 1GiB
  stallscope trial --setting /sys/class/bdi/{bdi}/max_bytes=33554432 \\
      --setting /sys/class/bdi/{bdi}/strict_limit=1 --run-secs 30 -- \\
      --mode buffered --threads 1 --record-size 64KiB --sync every:1600 --rate 240
  stallscope trial --setting vm.dirty_background_bytes=16777216 --format json -- --mode buffered
  ({bdi} is the lab device's major:minor.)";

/// `stallscope trial`.
#[derive(Args, Debug, Clone)]
pub struct TrialArgs {
    /// KNOB=VALUE for B: a sysctl (vm.dirty_background_bytes=16777216) or a sysfs file (/sys/class/bdi/{bdi}/max_bytes=33554432); repeat, applied in order.
    #[arg(long = "setting", value_name = "KNOB=VALUE", value_parser = parse_setting)]
    pub settings: Vec<crate::cmd::advise::treatment::Setting>,
    /// For B, remount the lab's filesystem with this option added (e.g. commit=1); repeat.
    #[arg(long = "mount-option", value_name = "OPT")]
    pub mount_options: Vec<String>,
    /// For B, these `run` options added to the workload's (one string, e.g. "--mode direct").
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub run_args: Option<String>,
    /// A/B pairs after the A/A pair (at least 6).
    #[arg(long, default_value_t = crate::cmd::advise::trial::DEFAULT_PAIRS)]
    pub pairs: usize,
    /// Each run's length (e.g. 30, 2m) [default: the dirty setpoint reached 3 times, at least 10 000 ops].
    #[arg(long, value_name = "DUR")]
    pub run_secs: Option<Dur>,
    /// What the verdict is decided on: stall (stall time per GiB), p999, max (longest stall).
    #[arg(long, value_enum, default_value = "stall")]
    pub measure: TrialMeasure,
    /// The DIR given to lab up.
    #[arg(long, value_name = "DIR", default_value = crate::cmd::lab::cmd::DEFAULT_DIR)]
    pub lab_dir: PathBuf,
    /// Which of the lab's filesystems [default: its first].
    #[arg(long, value_name = "DIR")]
    pub target: Option<PathBuf>,
    /// Output: text, or the outcome as JSON.
    #[arg(long, value_enum, default_value = "text")]
    pub format: TrialFormat,
    /// Do not sync and wait for dirty data to drain before each run.
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TrialFormat {
    Text,
    Json,
}

/// `KNOB=VALUE`: a path (starting with `/`) is a sysfs file, else a sysctl.
pub fn parse_setting(s: &str) -> Result<crate::cmd::advise::treatment::Setting, String> {
    use crate::cmd::advise::treatment::Setting;
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

const COMPLETIONS_EXAMPLES: &str = "Install:
  stallscope completions bash > ~/.local/share/bash-completion/completions/stallscope
  stallscope completions zsh > ~/.zfunc/_stallscope    (with fpath+=~/.zfunc in ~/.zshrc)
  stallscope completions fish > ~/.config/fish/completions/stallscope.fish";

const MAN_EXAMPLES: &str = "Examples:
  stallscope man | man -l -
  sudo sh -c 'stallscope man > /usr/local/share/man/man1/stallscope.1'";

/// `stallscope completions SHELL`: the script for the whole command line.
/// Made in memory first: clap_complete panics when its writer fails (a
/// closed pipe), and an error here is the caller's to report.
pub fn write_completions(
    shell: clap_complete::Shell,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use clap::CommandFactory;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "stallscope", &mut script);
    out.write_all(&script)
}

/// `stallscope man`: the man page, its SUBCOMMANDS section naming each.
pub fn write_man(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    use clap::CommandFactory;
    // NAME is one line: the first of ABOUT; the rest is the DESCRIPTION.
    let name_line = ABOUT
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end_matches('.');
    let cmd = Cli::command().about(name_line).long_about(ABOUT);
    clap_mangen::Man::new(cmd).render(out)
}

#[derive(Args, Debug, Default, Clone, PartialEq)]
pub struct WorkloadArgs {
    /// Directory to write under (repeat for several targets). Default: $TMPDIR, else /var/tmp.
    #[arg(long = "target", short = 't', value_name = "DIR")]
    pub targets: Vec<PathBuf>,

    /// A workload preset (cassandra-commitlog, cassandra-direct, rados-bench, a .toml path) or `list`; the config file and options go over it.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,

    /// Write path to imitate.
    #[arg(long, short = 'm', value_enum)]
    pub mode: Option<Mode>,

    /// Writer threads per target [default: 4].
    #[arg(long, short = 'j')]
    pub threads: Option<u32>,

    /// Bytes per record, e.g. 818, 4KiB [default: 818, 4MiB in journal mode].
    #[arg(long, value_name = "SIZE")]
    pub record_size: Option<ByteSize>,

    /// Size of each fresh sparse segment file [default: 32MiB].
    #[arg(long, value_name = "SIZE")]
    pub segment_size: Option<ByteSize>,

    /// periodic:<dur> (a sync thread), every:<N> (each writer after N records) or none [default: periodic:10s].
    #[arg(long, value_name = "POLICY")]
    pub sync: Option<SyncPolicy>,

    /// Ops per second per target over all threads; 0 = unthrottled. Latency counts from the intended start.
    #[arg(long, value_name = "OPS")]
    pub rate: Option<u64>,

    /// Ops per second of each thread (a client's round trip per op); 0 = off.
    #[arg(long, value_name = "OPS")]
    pub thread_rate: Option<u64>,

    /// Most bytes kept on disk per target; older segments are deleted [default: 1GiB].
    #[arg(long, value_name = "SIZE")]
    pub disk_budget: Option<ByteSize>,

    /// Stop after this long, e.g. 30s, 5m [default: until Ctrl-C].
    #[arg(long, short = 'd', value_name = "DUR", allow_hyphen_values = true)]
    pub duration: Option<Dur>,

    /// Reporting interval [default: 1s].
    #[arg(long, short = 'i', value_name = "DUR", allow_hyphen_values = true)]
    pub interval: Option<Dur>,

    /// An op at least this long is a stall [default: 100ms].
    #[arg(long, value_name = "DUR", allow_hyphen_values = true)]
    pub stall_threshold: Option<Dur>,

    /// Journal mode: syncfs() period; also when the journal is half full [default: 5s].
    #[arg(long, value_name = "DUR", allow_hyphen_values = true)]
    pub commit_interval: Option<Dur>,

    /// Journal mode: put the journal under this directory (as Ceph puts it on an SSD).
    #[arg(long, value_name = "DIR")]
    pub journal_dir: Option<PathBuf>,

    /// Journal mode: size of the circular journal [default: 256MiB].
    #[arg(long, value_name = "SIZE")]
    pub journal_size: Option<ByteSize>,

    /// Output format.
    #[arg(long, short = 'f', value_enum)]
    pub format: Option<Format>,

    /// Accept a --target that is a symlink (resolved once, at start).
    #[arg(long)]
    pub follow_symlinks: bool,

    /// Observe another process's threads (repeat or comma-separate pids): D-state,
    /// faults, write_bytes, and as root dirty throttling from tracefs. Without
    /// --target, stallscope adds no write load of its own.
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pub observe: Vec<u32>,

    /// Observe every process with this name (comm or argv[0], e.g. java, ceph-osd), resolved at start.
    #[arg(long, value_name = "NAME")]
    pub observe_name: Vec<String>,

    /// How often observed threads are sampled from /proc [default: 50ms; as root, with the scheduler's events timing blocks, 200ms or this if slower].
    #[arg(long, value_name = "DUR", allow_hyphen_values = true)]
    pub observe_every: Option<Dur>,

    /// How observed threads' blocks are timed: auto (the scheduler's events, exact, when root) or sampled (/proc every --observe-every) [default: auto].
    #[arg(long, value_name = "HOW")]
    pub observe_timing: Option<crate::config::ObserveTiming>,

    /// Wake-up chains: auto (root: a thread asleep waiting for another one, e.g. on a lock held across an fsync, is a stall, with the chain of threads down to the kernel wait) or off (only threads' own kernel waits; less tracing cost) [default: auto].
    #[arg(long, value_name = "HOW")]
    pub chains: Option<crate::config::Chains>,

    /// Record the session to FILE (JSON Lines; gzip-compressed if it ends in .gz).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,

    /// Serve Prometheus metrics at http://ADDR:PORT/metrics while running.
    ///
    /// A bare port listens on loopback only (`--metrics-listen 9187` is
    /// 127.0.0.1:9187); give the address to listen elsewhere, e.g.
    /// `--metrics-listen 0.0.0.0:9187` for a Prometheus server on another
    /// host. Port 0 picks a free port; the real address is printed on stderr
    /// (`stallscope: metrics on http://.../metrics`). Off by default.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = crate::sink::metrics::parse_listen)]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

impl WorkloadArgs {
    /// Overrides `cfg` with every option that was given.
    pub fn apply(&self, cfg: &mut Config) {
        if !self.targets.is_empty() {
            cfg.targets = self.targets.clone();
        }
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f.clone() { cfg.$f = v; } )* };
        }
        set!(
            mode,
            threads,
            segment_size,
            sync,
            rate,
            disk_budget,
            interval
        );
        set!(
            stall_threshold,
            commit_interval,
            journal_size,
            format,
            thread_rate
        );
        if let Some(v) = self.record_size {
            cfg.record_size = Some(v);
        }
        if self.follow_symlinks {
            cfg.follow_symlinks = true;
        }
        if !self.observe.is_empty() {
            cfg.observe = self.observe.clone();
        }
        if !self.observe_name.is_empty() {
            cfg.observe_name = self.observe_name.clone();
        }
        if let Some(v) = self.observe_timing {
            cfg.observe_timing = v;
        }
        if let Some(v) = self.chains {
            cfg.chains = v;
        }
        if let Some(v) = self.observe_every {
            cfg.observe_every = v;
        }
        if let Some(v) = self.duration {
            cfg.duration = Some(v);
        }
        if let Some(v) = &self.journal_dir {
            cfg.journal_dir = Some(v.clone());
        }
    }
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

/// Defaults, then the preset, then the config file, then the command line;
/// validated.
pub fn layered(
    config: Option<&std::path::Path>,
    args: &WorkloadArgs,
) -> Result<Config, crate::base::error::UsageError> {
    let mut cfg = match (args.preset.as_deref(), config) {
        (Some(name), file) => crate::config::preset::load(name)?.with_config_file(file)?,
        (None, Some(p)) => Config::from_file(p)?,
        (None, None) => Config::default(),
    };
    let from_file = cfg.clone();
    args.apply(&mut cfg);
    let Err(e) = cfg.validate() else {
        return Ok(cfg);
    };
    // The same complaint about the file alone: it is the file's value.
    match config {
        Some(p) if from_file.validate().err().map(|f| f.to_string()) == Some(e.to_string()) => {
            Err(crate::base::error::UsageError::new(format!(
                "{}: {}",
                p.display(),
                as_file_key(&e.to_string())
            )))
        }
        _ => Err(e),
    }
}

/// "--segment-size 1KiB is out of range" → "segment_size = 1KiB is out of
/// range": a validation message said of a config file's key.
fn as_file_key(msg: &str) -> String {
    match msg.strip_prefix("--").and_then(|m| m.split_once(' ')) {
        Some((flag, rest)) => format!("{} = {rest}", flag.replace('-', "_")),
        None => msg.to_string(),
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
mod tests {
    use super::*;
    use std::time::Duration;

    /// Defect: `compare --help` and `lab down --help` had options with no
    /// description.
    #[test]
    fn every_option_of_every_command_says_what_it_does() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, path: &str, bare: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if id != "help" && id != "version" && a.get_help().is_none() {
                    bare.push(format!("{path} --{id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), bare);
            }
        }
        let mut bare = Vec::new();
        walk(&Cli::command(), "stallscope", &mut bare);
        assert!(bare.is_empty(), "options without help: {bare:?}");
    }

    /// Defect: presets were only for compare; run and the dashboard
    /// refused `--preset`.
    #[test]
    fn run_and_the_dashboard_take_a_preset_under_the_options() {
        let w = workload(parse(&["run", "--preset", "rados-bench"]).unwrap());
        let c = layered(None, &w).unwrap();
        assert_eq!(c.mode, Mode::Journal);
        assert_eq!(c.record_size(), 4 << 20);
        let w = workload(parse(&["run", "--preset", "rados-bench", "--threads", "3"]).unwrap());
        assert_eq!(
            layered(None, &w).unwrap().threads,
            3,
            "options over the preset"
        );
        let dash = parse(&["--preset", "cassandra-commitlog"]).unwrap();
        assert_eq!(layered(None, &dash.workload).unwrap().threads, 32);
        let bad = workload(parse(&["run", "--preset", "nope"]).unwrap());
        assert!(layered(None, &bad).is_err());
    }

    #[test]
    fn watch_help_lists_the_keys_and_run_help_runs() {
        use clap::CommandFactory;
        let mut cmd = Cli::command();
        let watch = cmd
            .find_subcommand_mut("watch")
            .unwrap()
            .render_long_help()
            .to_string();
        for k in crate::tui::keys::KEYS {
            assert!(watch.contains(k.help), "{}: {watch}", k.help);
        }
        let run = cmd
            .find_subcommand_mut("run")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(!run.contains("the live dashboard"), "{run}");
        assert!(run.contains("--preset rados-bench"), "{run}");
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("stallscope").chain(args.iter().copied()))
    }

    fn workload(cli: Cli) -> WorkloadArgs {
        match cli.command {
            Some(Command::Run(w)) => w,
            _ => panic!("not run"),
        }
    }

    #[test]
    fn cli_overrides_file_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "threads = 8\nmode = \"buffered\"\ninterval = \"2s\"\n").unwrap();
        let w = workload(parse(&["run", "--threads", "2"]).unwrap());
        let c = layered(Some(&f), &w).unwrap();
        assert_eq!(c.threads, 2, "CLI wins");
        assert_eq!(c.mode, Mode::Buffered, "file beats default");
        assert_eq!(c.interval.0, Duration::from_secs(2));
        assert_eq!(c.segment_size, Config::default().segment_size, "default");
    }

    #[test]
    fn bad_cli_values_are_refused() {
        for args in [
            &["run", "--mode", "fsync"][..],
            &["run", "--duration", "10x"],
            &["run", "--segment-size", "10x"],
            &["run", "--sync", "often"],
            &["run", "--threads", "-1"],
            &["run", "--duration", "-5s"],
        ] {
            let e = parse(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}");
            assert!(e.to_string().contains(args[2]), "{args:?}: {e}");
        }
        let e = parse(&["run", "--duration", "-5s"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot be negative"),
            "said as such, not as an unknown flag: {e}"
        );
    }

    #[test]
    fn a_zero_threshold_is_echoed_without_a_unit_it_was_not_given() {
        let w = workload(parse(&["run", "--stall-threshold", "0ms"]).unwrap());
        let e = layered(None, &w).unwrap_err().0;
        assert!(e.contains("--stall-threshold 0 is below 1ms"), "{e}");
    }

    #[test]
    fn record_size_checks_after_layering() {
        let w = workload(parse(&["run", "--record-size", "0"]).unwrap());
        assert!(layered(None, &w).unwrap_err().0.contains("--record-size 0"));
        let w = workload(parse(&["run", "--record-size", "64MiB"]).unwrap());
        assert!(layered(None, &w).unwrap_err().0.contains("segment"));
    }

    #[test]
    fn trial_settings_and_run_options_parse() {
        use crate::cmd::advise::treatment::Setting;
        assert_eq!(
            parse_setting("vm.dirty_background_bytes=16777216").unwrap(),
            Setting::Sysctl {
                name: "vm.dirty_background_bytes".into(),
                value: "16777216".into()
            }
        );
        assert_eq!(
            parse_setting("/sys/class/bdi/{bdi}/strict_limit=1").unwrap(),
            Setting::Sysfs {
                path: "/sys/class/bdi/{bdi}/strict_limit".into(),
                value: "1".into()
            }
        );
        assert!(parse_setting("vm.x").is_err());
        assert!(parse_setting("=1").is_err());
        let cli = parse(&[
            "trial",
            "--setting",
            "vm.a=1",
            "--pairs",
            "6",
            "--",
            "--mode",
            "buffered",
            "--rate",
            "200",
        ])
        .unwrap();
        let Some(Command::Trial(t)) = cli.command else {
            panic!("not trial")
        };
        assert_eq!(t.pairs, 6);
        assert_eq!(t.workload, ["--mode", "buffered", "--rate", "200"]);
        let base = Config::default();
        let c = with_run_args(&base, &t.workload).unwrap();
        assert_eq!((c.mode, c.rate), (Mode::Buffered, 200));
        assert_eq!(c.threads, base.threads, "untouched");
        let e = run_args(&["--threads".into(), "x".into()]).unwrap_err();
        assert!(e.to_string().contains("run options"), "{e}");
    }

    #[test]
    fn unknown_config_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "threads = 8\nthreadz = 3\n").unwrap();
        let e = layered(Some(&f), &WorkloadArgs::default()).unwrap_err().0;
        assert!(e.contains("threadz") && e.contains("line 2"), "{e}");
    }
}
