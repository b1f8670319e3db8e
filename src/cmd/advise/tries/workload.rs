//! The recorded workload as a trial runs it: the recording header's
//! configuration with the write path and thread count the writers last ran
//! (the dashboard can change them mid-run), nothing observed, and the
//! `run` options that make it (for the recipe). Pure.

use crate::analysis::advice::diagnosis::{Stalled, Subject};
use crate::config::Config;

/// The configuration `subject`'s writers ran with, out of `recorded`.
pub fn config_of(recorded: &Config, subject: &Subject) -> Config {
    let mut c = Config {
        observe: Vec::new(),
        observe_name: Vec::new(),
        duration: None,
        ..recorded.clone()
    };
    if let Stalled::Writers { mode, threads, .. } = &subject.who {
        c.mode = *mode;
        c.threads = *threads;
    }
    c
}

/// The `stallscope run` options that make `c`'s writers (not its targets
/// or duration, which the trial gives): the write path and threads always,
/// the rest when not the default.
pub fn run_args(c: &Config) -> Vec<String> {
    let d = Config::default();
    let size = |s: Option<crate::base::units::ByteSize>| s.map_or(String::new(), |s| s.to_string());
    let dir = |p: &Option<std::path::PathBuf>| {
        p.as_ref()
            .map_or(String::new(), |p| p.to_string_lossy().into_owned())
    };
    // (flag, this config's value, the default's), each as `run` reads it.
    macro_rules! shown {
        ($($flag:literal $f:ident),*) => {
            [$(($flag, c.$f.to_string(), d.$f.to_string())),*]
        };
    }
    let mut all = vec![
        ("--record-size", size(c.record_size), size(d.record_size)),
        ("--journal-dir", dir(&c.journal_dir), dir(&d.journal_dir)),
    ];
    all.extend(shown!(
        "--segment-size" segment_size,
        "--sync" sync,
        "--rate" rate,
        "--thread-rate" thread_rate,
        "--disk-budget" disk_budget,
        "--interval" interval,
        "--stall-threshold" stall_threshold,
        "--commit-interval" commit_interval,
        "--journal-size" journal_size
    ));
    let mut v: Vec<String> = vec![
        "--mode".into(),
        c.mode.to_string(),
        "--threads".into(),
        c.threads.to_string(),
    ];
    for (flag, value, default) in all {
        if value != default {
            v.push(flag.into());
            v.push(value);
        }
    }
    v
}
