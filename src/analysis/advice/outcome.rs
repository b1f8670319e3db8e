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

/// A log ratio as a factor: ln(B/A) −0.69 is `×0.50`.
pub fn factor(l: f64) -> String {
    times(l.exp())
}

/// A ratio as a factor, `×0.37`; below 0.1 with three decimals (`×0.005`)
/// so that a hundredfold drop does not read `×0.00`.
pub fn times(r: f64) -> String {
    if r < 0.1 {
        format!("×{r:.3}")
    } else {
        format!("×{r:.2}")
    }
}

/// The verdict, its factor and interval, and the noise band, in one line.
pub fn verdict_line(o: &Outcome) -> String {
    format!(
        "{}  {} {} (95 % interval {} … {}), noise band ±{:.0} % (A/A pair, at least 10 %){}",
        verdict_word(o.verdict),
        o.measure,
        factor(o.difference),
        factor(o.interval.0),
        factor(o.interval.1),
        (o.noise.exp() - 1.0) * 100.0,
        split_within_chance(o).unwrap_or_default()
    )
}

/// Where the interval and the noise band alone would have given a
/// verdict but the pairs' split kept it at no_change, that split (the
/// sign test in `verdict`), so the verdict does not read as a slip.
fn split_within_chance(o: &Outcome) -> Option<String> {
    let clear = o.interval.1 < 0.0 || o.interval.0 > 0.0;
    if o.verdict != Verdict::NoChange || !clear || o.difference.abs() <= o.noise {
        return None;
    }
    let (way, n) = if o.difference < 0.0 {
        ("lower", o.pairs_lower)
    } else {
        ("higher", o.pairs_higher)
    };
    let moved = o.pairs_lower + o.pairs_higher;
    Some(format!(
        "; B {way} in only {n} of {moved} pairs: within chance (sign test, 5 %)"
    ))
}

pub fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Improved => "improved",
        Verdict::NoChange => "no_change",
        Verdict::Worse => "worse",
        Verdict::Inconclusive => "inconclusive",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_factors_keep_their_digits() {
        assert_eq!(times(0.0046), "×0.005");
        assert_eq!(times(0.37), "×0.37");
        assert_eq!(factor(2f64.ln()), "×2.00");
    }
}
