//! The workload's options (run, watch, the dashboard). Every one is an
//! `Option` so it only overrides the config file when given;
//! `WorkloadArgs::apply` layers it, `layered` puts it over the preset and
//! the file.

use crate::base::units::{ByteSize, Dur};
use crate::config::{Config, Format, Mode, SyncPolicy};
use clap::Args;
use std::path::PathBuf;

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

    /// Run an imitation of the server observed in this recording (`stallscope imitate REC --loop`, its files under the first --target) and observe it in its place: the server's write pattern replayed in the lab, shown and judged as the server was.
    #[arg(long, value_name = "RECORDING", conflicts_with_all = ["observe", "observe_name"])]
    pub imitate: Option<PathBuf>,

    /// Observe every process with this name (comm or argv[0], e.g. java, ceph-osd), resolved at start.
    #[arg(long, value_name = "NAME")]
    pub observe_name: Vec<String>,

    /// With --observe-name or --observe: wait for the process to appear instead of failing (a line on stderr says what is awaited; Ctrl-C stops). Start stallscope first, then the server.
    #[arg(long)]
    pub wait: bool,

    /// How often observed threads are sampled from /proc [default: 50ms; as root, with the scheduler's events timing blocks, 200ms or this if slower].
    #[arg(long, value_name = "DUR", allow_hyphen_values = true)]
    pub observe_every: Option<Dur>,

    /// How observed threads' blocks are timed: auto (the scheduler's events, exact, when root) or sampled (/proc every --observe-every) [default: auto].
    #[arg(long, value_name = "HOW")]
    pub observe_timing: Option<crate::config::ObserveTiming>,

    /// Wake-up chains: auto (root: a thread asleep waiting for another one, e.g. on a lock held across an fsync, is a stall, with the chain of threads down to the kernel wait) or off (only threads' own kernel waits; less tracing cost) [default: auto].
    #[arg(long, value_name = "HOW")]
    pub chains: Option<crate::config::Chains>,

    /// Call boundaries: auto (root: each observed thread's stall bounded by its write-path system call, entry to exit, with the call named) or off (no system-call events: blocks are bounded by the scheduler's events alone, and the kernel's syscall tracing path stays off for every process; the cheapest exact timing) [default: auto].
    #[arg(long, value_name = "HOW")]
    pub call_bounds: Option<crate::config::CallBounds>,

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
        if let Some(v) = self.call_bounds {
            cfg.call_bounds = v;
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
