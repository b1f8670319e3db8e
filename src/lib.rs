//! stallscope: drive writers that imitate real write paths (Cassandra's
//! commitlog, Ceph's FileStore journal), time every op, and say when and why
//! writes stall. The library runs headless (`run::run`); the binary adds the
//! command line.
//!
//! Data path: writer threads → `measure::Batch` → `aggregate::Aggregator`
//! (pure fold) → `snapshot::Snapshot` → `output::Sink` (printer, later UI and
//! recorder).

pub mod aggregate;
pub mod cli;
pub mod compare;
pub mod config;
pub mod control;
pub mod error;
pub mod kernel;
pub mod lab;
pub mod measure;
pub mod metrics;
pub mod mounts;
pub mod observe;
pub mod output;
pub mod preset;
pub mod probe;
pub mod recording;
pub mod report;
pub mod report_cmd;
pub mod run;
pub mod scratch;
pub mod snapshot;
#[cfg(test)]
mod testenv;
pub mod tui;
pub mod units;
pub mod watchdog;
pub mod writer;
