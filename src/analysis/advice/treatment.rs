//! What a trial changes: the settings of one proposal, each something a
//! person could apply by hand (the recipe prints them so).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One setting to apply for the B side of a trial.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Setting {
    /// `sysctl -w name=value` (`vm.dirty_background_bytes`).
    Sysctl { name: String, value: String },
    /// A sysfs file and the text written to it
    /// (`/sys/class/bdi/7:0/max_bytes`).
    Sysfs { path: PathBuf, value: String },
    /// Remount the target's filesystem with this option added (`commit=1`).
    MountOption { option: String },
    /// Our writers run with these arguments instead of the recorded ones
    /// (a write path change: `--mode buffered`).
    RunArgs { args: Vec<String> },
}

/// Everything one proposal changes, applied together.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Treatment {
    pub settings: Vec<Setting>,
}
