//! After a trial's last run: its runs → the two sides' figures, the
//! verdict on the chosen measure, where stall time moved, and notes on
//! what the figures cannot vouch for.

use super::figures::{combine, open_loop, RunFigures};
use super::setup::Trial;
use super::verdict::{decide, moved, Decision, Rules};
use super::{Measure, Side, TrialOptions, MIN_OPS};
use crate::analysis::advice::outcome::{Figures, Outcome};

/// The outcome of `runs` (side, pair, figures) made by `t` (pair 0 is the
/// A/A pair; the other pairs have one A and one B each).
pub fn outcome(t: &Trial, o: &TrialOptions, runs: &[(Side, usize, RunFigures)]) -> Outcome {
    let m = o.measure;
    let threshold_ms = t.cfg_a.stall_threshold.0.as_secs_f64() * 1e3;
    let floor = m.floor(threshold_ms);
    let aa: Vec<f64> = runs
        .iter()
        .filter(|(_, p, _)| *p == 0)
        .map(|(_, _, f)| m.of(f))
        .collect();
    let pairs: Vec<(f64, f64)> = (1..=o.pairs)
        .filter_map(|p| {
            let of = |side: Side| {
                runs.iter()
                    .find(|(s, q, _)| *s == side && *q == p)
                    .map(|(_, _, f)| m.of(f))
            };
            Some((of(Side::A)?, of(Side::B)?))
        })
        .collect();
    let d = decide(
        (
            aa.first().copied().unwrap_or(0.0),
            aa.get(1).copied().unwrap_or(0.0),
        ),
        &pairs,
        &Rules::new(floor),
    );
    let side = |s: Side| -> Vec<RunFigures> {
        runs.iter()
            .filter(|(x, _, _)| *x == s)
            .map(|(_, _, f)| f.clone())
            .collect()
    };
    let before = combine(&side(Side::A), open_loop(&t.cfg_a));
    let after = combine(&side(Side::B), open_loop(&t.cfg_b));
    Outcome {
        recipe: t.recipe.clone(),
        notes: notes(t, runs),
        ..judged(&d, m, before, after, threshold_ms)
    }
}

/// The outcome of decision `d` on measure `m` between the two sides'
/// figures, with where stall time moved; no recipe or notes yet (the lab
/// trial's and the live trial's differ).
pub(super) fn judged(
    d: &Decision,
    m: Measure,
    before: Figures,
    after: Figures,
    threshold_ms: f64,
) -> Outcome {
    let moved = moved(
        &before.stall_ms_per_gib,
        &after.stall_ms_per_gib,
        threshold_ms,
    );
    Outcome {
        verdict: d.verdict,
        measure: format!("ln(B/A) of {}", m.name()),
        difference: d.difference,
        interval: d.interval,
        noise: d.noise,
        pairs_lower: d.lower,
        pairs_higher: d.higher,
        before,
        after,
        moved,
        recipe: String::new(),
        notes: Vec::new(),
    }
}

fn notes(t: &Trial, runs: &[(Side, usize, RunFigures)]) -> Vec<String> {
    let mut n = Vec::new();
    if !open_loop(&t.cfg_a) {
        n.push(
            "closed loop: no --rate, so each op starts when the last ended and p99/p99.9 leave out the ops a blocked writer never started; give the workload a --rate for open-loop latency"
                .to_string(),
        );
    }
    let short = runs.iter().filter(|(_, _, f)| f.ops < MIN_OPS).count();
    if short > 0 {
        let least = runs.iter().map(|(_, _, f)| f.ops).min().unwrap_or(0);
        n.push(format!(
            "{short} of {} runs did fewer than {MIN_OPS} ops (least {least}): their p99.9 rests on few ops",
            runs.len()
        ));
    }
    n
}
