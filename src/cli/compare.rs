//! `stallscope compare`'s arguments.

use crate::base::units::{ByteSize, Dur};
use crate::config::{Mode, SyncPolicy};
use clap::Args;
use std::path::PathBuf;

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
    /// Do not write back the targets' dirty data (syncfs) between runs.
    #[arg(long)]
    pub no_drain: bool,
    /// Between runs, flush the whole machine (sync) and drop its clean page cache (root), not only the targets' filesystems: every process on the machine pays for it. For a machine that runs nothing else.
    #[arg(long)]
    pub drop_caches: bool,
}
