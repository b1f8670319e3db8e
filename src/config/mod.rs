//! The workload configuration: defaults, the TOML file over them, the command
//! line over that (`Config::layered`), then one `validate` pass. Every other
//! module reads a validated `Config` and never re-checks it.

pub mod preset;

use crate::base::error::UsageError;
use crate::base::units::{ByteSize, Dur};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// Which real system's write path the writers imitate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Cassandra's legacy commitlog: shared mmap'd sparse segments, memcpy, msync.
    Mmap,
    /// The FileChannel path: write() per record, fdatasync.
    Buffered,
    /// Cassandra 5's direct commitlog: O_DIRECT, records packed into aligned blocks.
    Direct,
    /// Ceph FileStore: O_DIRECT journal ack, buffered apply, syncfs commits.
    Journal,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Mmap, Mode::Buffered, Mode::Direct, Mode::Journal];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Mmap => "mmap",
            Mode::Buffered => "buffered",
            Mode::Direct => "direct",
            Mode::Journal => "journal",
        }
    }

    /// The record size a mode uses when none is given: the seed's 818-byte
    /// mutation, or rados bench's 4 MiB object in journal mode.
    pub fn default_record_size(self) -> u64 {
        match self {
            Mode::Journal => 4 << 20,
            _ => 818,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When the log is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum SyncPolicy {
    /// A sync thread syncs everything written every period (Cassandra's periodic service).
    Periodic(Duration),
    /// Each writer syncs after every N of its own records.
    Every(u64),
    /// Never sync; the kernel writes back on its own.
    None,
}

impl FromStr for SyncPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("invalid sync policy '{s}' (use periodic:10s, every:N or none)");
        match s.split_once(':') {
            None if s == "none" => Ok(SyncPolicy::None),
            Some(("periodic", d)) => {
                let d: Dur = d.parse().map_err(|_| bad())?;
                if d.0.is_zero() {
                    return Err(format!("sync period in '{s}' must be above zero"));
                }
                Ok(SyncPolicy::Periodic(d.0))
            }
            Some(("every", n)) => match n.parse::<u64>() {
                Ok(0) | Err(_) => Err(bad()),
                Ok(n) => Ok(SyncPolicy::Every(n)),
            },
            _ => Err(bad()),
        }
    }
}

impl TryFrom<String> for SyncPolicy {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl fmt::Display for SyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncPolicy::Periodic(d) => write!(f, "periodic:{}", Dur(*d)),
            SyncPolicy::Every(n) => write!(f, "every:{n}"),
            SyncPolicy::None => f.write_str("none"),
        }
    }
}

impl From<SyncPolicy> for String {
    fn from(p: SyncPolicy) -> String {
        p.to_string()
    }
}

/// Output of the headless printer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Table,
    Jsonl,
}

/// Everything a run needs. Field names are the config file's keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Directories to write under; empty means a scratch dir under $TMPDIR or /var/tmp.
    pub targets: Vec<PathBuf>,
    pub mode: Mode,
    pub threads: u32,
    /// None: the mode's default (818 B, or 4 MiB in journal mode).
    pub record_size: Option<ByteSize>,
    pub segment_size: ByteSize,
    pub sync: SyncPolicy,
    /// Ops per second over all threads of a target; 0 = unthrottled.
    pub rate: u64,
    /// Ops per second of each thread (like a client's round trip per op in
    /// rados bench); 0 = off. Scales with --threads, unlike `rate`.
    pub thread_rate: u64,
    pub disk_budget: ByteSize,
    /// None: until stopped.
    pub duration: Option<Dur>,
    pub interval: Dur,
    pub stall_threshold: Dur,
    pub commit_interval: Dur,
    pub journal_dir: Option<PathBuf>,
    pub journal_size: ByteSize,
    pub format: Format,
    /// Accept a target that is a symlink (resolved once, at start).
    pub follow_symlinks: bool,
    /// Processes to observe by pid; with no `targets`, no writers run.
    pub observe: Vec<u32>,
    /// Processes to observe by name (comm or argv[0]), resolved at start.
    pub observe_name: Vec<String>,
    /// How often observed processes' threads are sampled.
    pub observe_every: Dur,
    /// How observed threads' blocks are timed: `auto` (the scheduler's
    /// events when root, else sampled) or `sampled` (always the sampler:
    /// less tracing cost, ± one period).
    pub observe_timing: ObserveTiming,
    /// Wake-up chains: `auto` (as root, with scheduler timing, observed
    /// threads asleep in S are followed to the thread that woke them, so
    /// a thread waiting for another one's fsync is a stall) or `off`
    /// (only the observed threads' own kernel waits count; cheaper).
    pub chains: Chains,
    /// Call boundaries: `auto` (as root, with scheduler timing, the entry
    /// and exit of observed threads' write-path system calls bound each
    /// stall to one call) or `off` (no system-call event at all: the
    /// kernel then takes no thread's system calls through its tracing
    /// path, the cheapest observation that still times blocks exactly).
    pub call_bounds: CallBounds,
}

/// See `Config::call_bounds`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CallBounds {
    #[default]
    Auto,
    Off,
}

/// See `Config::chains`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Chains {
    #[default]
    Auto,
    Off,
}

/// See `Config::observe_timing`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ObserveTiming {
    #[default]
    Auto,
    Sampled,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            targets: Vec::new(),
            mode: Mode::Mmap,
            threads: 4,
            record_size: None,
            segment_size: ByteSize(32 << 20),
            sync: SyncPolicy::Periodic(Duration::from_secs(10)),
            rate: 0,
            thread_rate: 0,
            disk_budget: ByteSize(1 << 30),
            duration: None,
            interval: Dur(Duration::from_secs(1)),
            stall_threshold: Dur(Duration::from_millis(100)),
            commit_interval: Dur(Duration::from_secs(5)),
            journal_dir: None,
            journal_size: ByteSize(256 << 20),
            format: Format::Table,
            follow_symlinks: false,
            observe: Vec::new(),
            observe_name: Vec::new(),
            observe_every: Dur(Duration::from_millis(50)),
            observe_timing: ObserveTiming::Auto,
            chains: Chains::Auto,
            call_bounds: CallBounds::Auto,
        }
    }
}

/// Upper bounds that keep a typo from taking a machine down.
pub const MAX_THREADS: u32 = 1024;
pub const MAX_SEGMENT: u64 = 64 << 30;
pub const DIRECT_ALIGN: u64 = 4096;

impl Config {
    /// Reads a TOML config file; unknown keys and bad values name the key and line.
    pub fn from_file(path: &Path) -> Result<Config, UsageError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| UsageError::new(format!("cannot read config {}: {e}", path.display())))?;
        Self::from_toml(&text).map_err(|m| UsageError::new(format!("{}: {m}", path.display())))
    }

    /// Parses TOML text; the error is one line with the line number.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        toml::from_str(text).map_err(|e: toml::de::Error| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let msg = e.message().replace('\n', " ");
            match line {
                Some(l) => format!("line {l}: {msg}"),
                None => msg,
            }
        })
    }

    /// Whether observe mode is on (then no default target is added).
    pub fn observing(&self) -> bool {
        !self.observe.is_empty() || !self.observe_name.is_empty()
    }

    pub fn record_size(&self) -> u64 {
        self.record_size
            .map(|b| b.0)
            .unwrap_or_else(|| self.mode.default_record_size())
    }

    /// Checks ranges and combinations; the message names the option and value.
    pub fn validate(&self) -> Result<(), UsageError> {
        let err = |m: String| Err(UsageError::new(m));
        if self.threads == 0 || self.threads > MAX_THREADS {
            return err(format!(
                "--threads {} is out of range (1..={MAX_THREADS})",
                self.threads
            ));
        }
        if self.segment_size.0 < DIRECT_ALIGN || self.segment_size.0 > MAX_SEGMENT {
            return err(format!(
                "--segment-size {} is out of range (4KiB..=64GiB)",
                self.segment_size
            ));
        }
        let rs = self.record_size();
        if rs == 0 {
            return err("--record-size 0: a record must hold at least one byte".into());
        }
        let limit = if self.mode == Mode::Journal {
            self.journal_size.0 / 2
        } else {
            self.segment_size.0
        };
        if rs > limit {
            let what = if self.mode == Mode::Journal {
                "half the journal (--journal-size)"
            } else {
                "the segment (--segment-size)"
            };
            return err(format!(
                "--record-size {} is larger than {what}: {}",
                ByteSize(rs),
                ByteSize(limit)
            ));
        }
        if self.disk_budget.0 < 2 * self.segment_size.0 && self.mode != Mode::Journal {
            return err(format!(
                "--disk-budget {} must hold at least two segments of {}",
                self.disk_budget, self.segment_size
            ));
        }
        if self.interval.0 < Duration::from_millis(10)
            || self.interval.0 > Duration::from_secs(3600)
        {
            return err(format!(
                "--interval {} is out of range (10ms..=1h)",
                self.interval
            ));
        }
        if self.observe_every.0 < Duration::from_millis(5) || self.observe_every.0 > self.interval.0
        {
            return err(format!(
                "--observe-every {} is out of range (5ms..=--interval {})",
                self.observe_every, self.interval
            ));
        }
        if self.stall_threshold.0 < Duration::from_millis(1) {
            return err(format!(
                "--stall-threshold {} is below 1ms",
                self.stall_threshold
            ));
        }
        if self.commit_interval.0.is_zero() {
            return err("--commit-interval must be above zero".into());
        }
        if self.journal_size.0 < 2 * DIRECT_ALIGN || self.journal_size.0 > MAX_SEGMENT {
            return err(format!(
                "--journal-size {} is out of range (8KiB..=64GiB)",
                self.journal_size
            ));
        }
        if matches!(self.duration, Some(d) if d.0.is_zero()) {
            return err("--duration must be above zero".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_equals_defaults() {
        let text = include_str!("../../config.example.toml");
        let parsed = Config::from_toml(text).unwrap();
        assert_eq!(parsed, Config::default());
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let e = Config::from_toml("threads = 2\n\nbogus_key = 1\n").unwrap_err();
        assert!(e.contains("bogus_key"), "{e}");
        assert!(e.contains("line 3"), "{e}");
    }

    #[test]
    fn bad_values_in_file() {
        let e = Config::from_toml("segment_size = \"10x\"\n").unwrap_err();
        assert!(e.contains("10x") && e.contains("line 1"), "{e}");
        let e = Config::from_toml("mode = \"fsync\"\n").unwrap_err();
        assert!(e.contains("fsync"), "{e}");
    }

    #[test]
    fn sync_policy_parses() {
        assert_eq!("none".parse::<SyncPolicy>(), Ok(SyncPolicy::None));
        assert_eq!("every:8".parse::<SyncPolicy>(), Ok(SyncPolicy::Every(8)));
        assert_eq!(
            "periodic:250ms".parse::<SyncPolicy>(),
            Ok(SyncPolicy::Periodic(Duration::from_millis(250)))
        );
        for bad in [
            "every:0",
            "every:x",
            "periodic:0s",
            "sometimes",
            "periodic:10x",
        ] {
            assert!(bad.parse::<SyncPolicy>().is_err(), "{bad}");
        }
    }

    #[test]
    fn validation_names_the_value() {
        let mut c = Config {
            record_size: Some(ByteSize(0)),
            ..Config::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--record-size 0"));
        c.record_size = Some(ByteSize(64 << 20));
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("64MiB") && e.contains("segment"), "{e}");
        c.record_size = None;
        c.threads = 0;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--threads 0"));
        c.threads = 4;
        c.segment_size = ByteSize(1 << 60);
        assert!(c.validate().unwrap_err().to_string().contains("1EiB") || c.validate().is_err());
        assert!(Config::default().validate().is_ok());
    }

    #[test]
    fn journal_defaults_to_four_mib_records() {
        let c = Config {
            mode: Mode::Journal,
            ..Config::default()
        };
        assert_eq!(c.record_size(), 4 << 20);
        assert!(c.validate().is_ok());
    }
}
