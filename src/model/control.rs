//! What the person asks the running writers to do, from the dashboard.
//! The UI turns keys into `Action`s; those that concern the writers become
//! a `Control` for the runner, which applies it between intervals.

use crate::config::Mode;
use std::path::PathBuf;

#[derive(Clone, Debug, PartialEq)]
pub enum Control {
    /// Stop (true) or resume (false) the writers; the sampling goes on.
    Pause(bool),
    /// Move the writers to target i (they drain and restart there).
    SwitchTarget(usize),
    SetMode(Mode),
    SetThreads(u32),
    /// Add a target directory at runtime (validated by the runner).
    AddTarget(PathBuf),
    /// Recording on/off.
    Record(bool),
    Quit,
}

/// Something the runner tells the UI besides snapshots.
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    /// A control was applied; the chart marks it at `t_s`.
    Applied { t_s: f64, what: String },
    /// A control was refused (bad target path...), shown in the UI.
    Refused(String),
    /// A target was added: its index and description.
    TargetAdded(usize, crate::model::snapshot::TargetMeta),
    /// A worker thread failed or panicked.
    WorkerError(String),
}
