//! What a trial of one proposal found: figures of A (as recorded) and B
//! (with the change), the verdict and its interval.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// improved / no_change / worse, decided on the median paired difference
/// and its bootstrap 95 % interval against the A/A noise band, and on the
/// pairs' signs (`trial::verdict`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Improved,
    NoChange,
    Worse,
    /// No verdict: the live server's load moved between windows
    /// (`trial::live`); never from a lab trial.
    Inconclusive,
}

/// One side's figures, medians over its runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Stall time per GiB written, by cause, ms/GiB.
    pub stall_ms_per_gib: BTreeMap<String, f64>,
    /// From the intended start of each op (open loop), ms.
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// The median over runs of each run's longest stall, ms.
    pub max_stall_ms: f64,
    /// Achieved over offered throughput, 0..1 (1 when not rate-limited).
    pub achieved_share: f64,
    pub mib_per_s: f64,
    /// Peak Dirty+Writeback, KiB: the data at risk.
    pub peak_dirty_kib: u64,
    /// Seconds the writers ran without finishing a write (throughput 0).
    #[serde(default)]
    pub zero_s: f64,
    pub runs: usize,
    /// Whether p99/p99.9 count from each op's intended start (a
    /// rate-limited workload); without a rate the writers are closed loop
    /// and the tail is understated.
    #[serde(default)]
    pub open_loop: bool,
}

/// A finished trial.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub verdict: Verdict,
    /// What the verdict was decided on (`stall_ms_per_gib`, `p999_ms`).
    pub measure: String,
    /// Median paired difference B − A of `measure`, and its 95 % interval
    /// (the trial's `measure` is a log ratio, `ln(B/A) of …`: −0.69 is a
    /// halving).
    pub difference: f64,
    pub interval: (f64, f64),
    /// The A/A pair's difference: the noise band the verdict stands against.
    pub noise: f64,
    /// A/B pairs with B lower than A, and higher (the sign test's counts).
    #[serde(default)]
    pub pairs_lower: usize,
    #[serde(default)]
    pub pairs_higher: usize,
    pub before: Figures,
    pub after: Figures,
    /// Where stall time moved to another cause, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved: Option<String>,
    /// The commands to rerun the trial by hand, and the revert.
    pub recipe: String,
    /// What the figures cannot vouch for (closed-loop latency, runs with
    /// fewer than 10 000 ops), in words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Figures {
    /// All stall time per GiB written, every cause (+ 0.0: an empty sum
    /// is -0.0, which prints as "-0").
    pub fn stall_total(&self) -> f64 {
        self.stall_ms_per_gib.values().sum::<f64>() + 0.0
    }
}
