//! The verdict of a trial, from per-run measures alone (pure): an A/A pair
//! (the baseline twice) gives the noise band, N interleaved A/B pairs give
//! paired differences; the verdict stands on their median and its
//! bootstrap 95 % interval, and on the pairs' signs.
//!
//! The signs: a percentile bootstrap of a median from 6 or 8 pairs is too
//! narrow (its resampled medians take a handful of values), so 5 pairs of
//! 6 one way can give an interval clear of zero where an exact sign test
//! gives p = 0.22; the placebo script saw a knob set to its own value
//! called `improved` (×0.86) once in 10 trials this way. So a verdict also
//! needs the pairs that moved to move its way beyond chance: the exact
//! two-sided sign test at 5 % (pairs with no difference left out), which
//! is the distribution-free 95 % interval of the median clear of zero. It
//! asks all of 6 or 8 pairs, 9 of 10, 10 of 12.
//!
//! Differences are **log ratios**, `ln(B/A)`, not `B − A`. Stall times
//! (and tail latencies) span orders of magnitude and change by factors: a
//! setting that halves them halves 200 ms/GiB and 20 s/GiB alike. An
//! absolute difference lets the pairs with the largest baseline (often
//! the ones where the disk had a bad minute) decide the median, and its
//! noise grows with the level, so one noise band cannot serve a quiet and
//! a loud workload. A log ratio is scale-free and symmetric (halving is
//! −0.69, doubling +0.69), and within a pair it cancels what both runs
//! share (the machine's state at that time). A run with no stall at all
//! would make the ratio infinite, so both sides get a `floor` added first:
//! differences below it (for stall time: one threshold-long stall per GiB)
//! mean nothing.

use std::collections::BTreeMap;

/// improved / no_change / worse, from `crate::analysis::advice::outcome`.
pub use crate::analysis::advice::outcome::Verdict;

/// How many bootstrap resamples; 10 000 keeps the 2.5 % and 97.5 %
/// quantiles of the resampled medians stable to the third digit.
pub const RESAMPLES: usize = 10_000;

/// A fixed seed: the same measures always give the same interval.
pub const SEED: u64 = 0x5747_4c4c_5343_4f50;

/// The sign test's level, two-sided.
pub const SIGN_LEVEL: f64 = 0.05;

/// The exact two-sided sign test: the chance, with no effect, that `n`
/// pairs (those that moved) split at least as unevenly as `k` one way.
pub fn sign_p(k: usize, n: usize) -> f64 {
    if n == 0 {
        return 1.0;
    }
    let k = k.min(n - k);
    // P(X ≤ k) for X ~ Bin(n, 1/2), doubled.
    let mut c = 1.0f64; // C(n, 0)
    let mut tail = 0.0;
    for i in 0..=k {
        tail += c;
        c = c * (n - i) as f64 / (i + 1) as f64;
    }
    (2.0 * tail / 2f64.powi(n as i32)).min(1.0)
}

/// `ln((b + floor) / (a + floor))`: the relative change from A to B.
pub fn log_ratio(a: f64, b: f64, floor: f64) -> f64 {
    ((b.max(0.0) + floor) / (a.max(0.0) + floor)).ln()
}

/// The median (the mean of the middle two for an even count); 0 when
/// empty. The report's, so every median in the tool is one computation.
pub fn median(v: &[f64]) -> f64 {
    crate::cmd::report::median(v.to_vec())
}

/// xorshift64* (Vigna 2014): a few lines, no dependency, good enough to
/// resample eight numbers; seeded through SplitMix64 so a zero or small
/// seed still starts from a well-mixed state.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is below 2^-50 for the
    /// counts used here.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// The percentile bootstrap 95 % interval of the median of `d`:
/// `resamples` resamples with replacement, the 2.5 % and 97.5 % quantiles
/// of their medians. `(NaN, NaN)` when `d` is empty.
pub fn bootstrap_median_ci(d: &[f64], resamples: usize, seed: u64) -> (f64, f64) {
    if d.is_empty() || resamples == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = Rng::new(seed);
    let mut buf = vec![0.0; d.len()];
    let mut medians = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        for x in &mut buf {
            *x = d[rng.below(d.len())];
        }
        medians.push(median(&buf));
    }
    medians.sort_by(f64::total_cmp);
    let at = |q: f64| medians[((q * (resamples - 1) as f64).round() as usize).min(resamples - 1)];
    (at(0.025), at(0.975))
}

/// What the verdict was decided on.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub verdict: Verdict,
    /// Median of the pairs' `ln(B/A)`.
    pub difference: f64,
    /// Its bootstrap 95 % interval.
    pub interval: (f64, f64),
    /// The noise band: `|ln(A₂/A₁)|` of the A/A pair, at least `min_effect`.
    pub noise: f64,
    /// Pairs with B below A, and above (equal ones in neither).
    pub lower: usize,
    pub higher: usize,
}

/// The rules of a decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rules {
    /// Added to both sides of every ratio (see the module doc).
    pub floor: f64,
    /// The smallest relative change worth a verdict, as a log ratio
    /// (`ln 1.1`: 10 %), so that an A/A pair that happened to agree does
    /// not make every wobble an effect.
    pub min_effect: f64,
    pub resamples: usize,
    pub seed: u64,
}

impl Rules {
    pub fn new(floor: f64) -> Rules {
        Rules {
            floor,
            min_effect: 1.1f64.ln(),
            resamples: RESAMPLES,
            seed: SEED,
        }
    }
}

/// Lower is better (stall time, latency). `aa` is the A/A pair (first,
/// second), `pairs` the A/B pairs as (A, B) whichever ran first. Improved
/// only when the whole interval is below zero, the median improvement
/// exceeds the noise band *and* the pairs went lower beyond chance (the
/// sign test); worse the same way up; else no change.
pub fn decide(aa: (f64, f64), pairs: &[(f64, f64)], r: &Rules) -> Decision {
    let d: Vec<f64> = pairs
        .iter()
        .map(|&(a, b)| log_ratio(a, b, r.floor))
        .collect();
    let difference = median(&d);
    let interval = bootstrap_median_ci(&d, r.resamples, r.seed);
    let noise = log_ratio(aa.0, aa.1, r.floor).abs().max(r.min_effect);
    let lower = d.iter().filter(|x| **x < 0.0).count();
    let higher = d.iter().filter(|x| **x > 0.0).count();
    let signs = sign_p(lower, lower + higher) <= SIGN_LEVEL;
    let verdict = if interval.1 < 0.0 && -difference > noise && signs && lower > higher {
        Verdict::Improved
    } else if interval.0 > 0.0 && difference > noise && signs && higher > lower {
        Verdict::Worse
    } else {
        Verdict::NoChange
    };
    Decision {
        verdict,
        difference,
        interval,
        noise,
        lower,
        higher,
    }
}

/// Where stall time moved: the cause with the most stall time per GiB
/// before dropped, while another rose. Both changes must exceed `floor`
/// (ms/GiB) to count. Says which and by how much.
pub fn moved(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    floor: f64,
) -> Option<String> {
    let (top, &was) = before
        .iter()
        .filter(|(_, v)| **v > 0.0)
        .max_by(|a, b| a.1.total_cmp(b.1))?;
    let now = after.get(top).copied().unwrap_or(0.0);
    if was - now <= floor {
        return None;
    }
    let (other, rose, from) = after
        .iter()
        .filter(|(c, _)| *c != top)
        .map(|(c, &v)| (c, v, before.get(c).copied().unwrap_or(0.0)))
        .filter(|(_, v, b)| v - b > floor)
        .max_by(|a, b| (a.1 - a.2).total_cmp(&(b.1 - b.2)))?;
    Some(format!(
        "stall time moved from {top} ({was:.0} → {now:.0} ms/GiB) to {other} ({from:.0} → {rose:.0} ms/GiB)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        Rules::new(1.0)
    }

    #[test]
    fn medians_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn log_ratios_are_symmetric_and_floored() {
        let half = log_ratio(200.0, 100.0, 0.0);
        let double = log_ratio(100.0, 200.0, 0.0);
        assert!((half + double).abs() < 1e-12);
        assert!((half - 0.5f64.ln()).abs() < 1e-12);
        // No stall on either side: no change, not NaN.
        assert_eq!(log_ratio(0.0, 0.0, 100.0), 0.0);
        // Stalls gone entirely: finite, and a big drop.
        let gone = log_ratio(10_000.0, 0.0, 100.0);
        assert!(gone.is_finite() && gone < -4.0, "{gone}");
        // The same factor at two scales is the same ratio.
        assert!((log_ratio(2.0, 1.0, 0.0) - log_ratio(2e6, 1e6, 0.0)).abs() < 1e-12);
    }

    #[test]
    fn the_rng_is_seeded_and_spreads() {
        let a: Vec<u64> = (0..5)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..5)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..5)
            .scan(Rng::new(8), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut r = Rng::new(0);
        let mut counts = [0u32; 8];
        for _ in 0..80_000 {
            counts[r.below(8)] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn the_interval_is_deterministic_and_holds_the_median() {
        let d = [-0.9, -0.7, -0.8, -0.6, -1.0, -0.75, -0.85, -0.65];
        let ci = bootstrap_median_ci(&d, RESAMPLES, SEED);
        assert_eq!(ci, bootstrap_median_ci(&d, RESAMPLES, SEED));
        let m = median(&d);
        assert!(ci.0 <= m && m <= ci.1, "{ci:?} {m}");
        assert!(ci.0 >= -1.0 && ci.1 <= -0.6, "{ci:?}");
        assert!(ci.1 - ci.0 > 0.05, "a real spread: {ci:?}");
        // One value: no spread at all.
        assert_eq!(bootstrap_median_ci(&[0.3], 100, 1), (0.3, 0.3));
        assert!(bootstrap_median_ci(&[], 100, 1).0.is_nan());
    }

    /// B stalls a third as long in every pair: improved, about ×0.33.
    #[test]
    fn a_clear_drop_is_improved() {
        let pairs: Vec<(f64, f64)> = (0..8)
            .map(|i| (3000.0 + 100.0 * i as f64, 1000.0 + 40.0 * i as f64))
            .collect();
        let d = decide((3000.0, 3500.0), &pairs, &rules());
        assert_eq!(d.verdict, Verdict::Improved);
        assert!((d.difference.exp() - 0.34).abs() < 0.03, "{}", d.difference);
        assert!(d.interval.1 < 0.0);
        assert!((d.noise - (3501.0f64 / 3001.0).ln()).abs() < 1e-9);
    }

    #[test]
    fn a_clear_rise_is_worse() {
        let pairs: Vec<(f64, f64)> = (0..6).map(|i| (100.0 + i as f64, 400.0)).collect();
        let d = decide((100.0, 105.0), &pairs, &rules());
        assert_eq!(d.verdict, Verdict::Worse);
        assert!(d.interval.0 > 0.0);
    }

    /// Every pair lower, but by less than the A/A pair differed: the
    /// interval alone would say improved, the noise band says no.
    #[test]
    fn a_drop_inside_the_noise_band_is_no_change() {
        let pairs: Vec<(f64, f64)> = (0..8).map(|i| (1000.0 + i as f64, 800.0)).collect();
        let d = decide((1000.0, 1600.0), &pairs, &rules());
        assert!(d.interval.1 < 0.0, "the interval is below zero");
        assert_eq!(d.verdict, Verdict::NoChange);
        // The same pairs with a quiet A/A pair are improved.
        let quiet = decide((1000.0, 1010.0), &pairs, &rules());
        assert_eq!(quiet.verdict, Verdict::Improved);
    }

    /// Half the pairs up, half down: the interval spans zero.
    #[test]
    fn mixed_pairs_are_no_change() {
        let pairs = [
            (100.0, 300.0),
            (100.0, 30.0),
            (100.0, 310.0),
            (100.0, 35.0),
            (100.0, 290.0),
            (100.0, 32.0),
        ];
        let d = decide((100.0, 101.0), &pairs, &rules());
        assert!(d.interval.0 < 0.0 && d.interval.1 > 0.0, "{:?}", d.interval);
        assert_eq!(d.verdict, Verdict::NoChange);
    }

    /// A 5 % drop is below the smallest effect worth a verdict even when
    /// the A/A pair agreed exactly.
    #[test]
    fn a_tiny_steady_drop_is_below_the_minimum_effect() {
        let pairs: Vec<(f64, f64)> = (0..8).map(|_| (1000.0, 950.0)).collect();
        let d = decide((1000.0, 1000.0), &pairs, &rules());
        assert_eq!(d.noise, 1.1f64.ln());
        assert_eq!(d.verdict, Verdict::NoChange);
    }

    #[test]
    fn the_sign_test_is_exact() {
        // All 6 one way: 2/64; 5 of 6: 2·7/64; 8 of 8: 2/256; 7 of 8: 2·9/256.
        assert!((sign_p(6, 6) - 2.0 / 64.0).abs() < 1e-12);
        assert!((sign_p(0, 6) - 2.0 / 64.0).abs() < 1e-12);
        assert!((sign_p(5, 6) - 14.0 / 64.0).abs() < 1e-12);
        assert!((sign_p(8, 8) - 2.0 / 256.0).abs() < 1e-12);
        assert!((sign_p(7, 8) - 18.0 / 256.0).abs() < 1e-12);
        assert!(sign_p(9, 10) <= SIGN_LEVEL && sign_p(8, 10) > SIGN_LEVEL);
        assert_eq!(sign_p(3, 6), 1.0);
        assert_eq!(sign_p(0, 0), 1.0);
    }

    /// 5 pairs of 6 clearly lower, one higher: the bootstrap interval of
    /// the median is clear of zero and the drop beats the noise band, but
    /// 5 of 6 is what chance gives one time in five: no change.
    #[test]
    fn five_pairs_of_six_are_not_beyond_chance() {
        let pairs = [
            (1000.0, 700.0),
            (1000.0, 720.0),
            (1000.0, 690.0),
            (1000.0, 710.0),
            (1000.0, 730.0),
            (1000.0, 1100.0),
        ];
        let d = decide((1000.0, 1010.0), &pairs, &rules());
        assert!(d.interval.1 < 0.0, "{:?}", d.interval);
        assert!(-d.difference > d.noise);
        assert_eq!((d.lower, d.higher), (5, 1));
        assert_eq!(d.verdict, Verdict::NoChange);
        // The sixth pair lower too: improved.
        let mut all = pairs;
        all[5].1 = 740.0;
        assert_eq!(
            decide((1000.0, 1010.0), &all, &rules()).verdict,
            Verdict::Improved
        );
        // Pairs with no difference do not count either way.
        let mut tied = all.to_vec();
        tied.push((1000.0, 1000.0));
        let d = decide((1000.0, 1010.0), &tied, &rules());
        assert_eq!((d.lower, d.higher, d.verdict), (6, 0, Verdict::Improved));
    }

    /// Placebo: both sides drawn from one distribution; over many seeded
    /// trials, at most 1 in 10 may say anything but no change.
    #[test]
    fn placebo_trials_mostly_say_no_change() {
        let mut rng = Rng::new(42);
        // Log-normal-ish noise: ±30 % per run.
        let mut draw = || 1000.0 * (1.0 + 0.6 * ((rng.below(1000) as f64 / 1000.0) - 0.5));
        let mut changed = 0;
        for _ in 0..200 {
            let aa = (draw(), draw());
            let pairs: Vec<(f64, f64)> = (0..8).map(|_| (draw(), draw())).collect();
            let r = Rules {
                resamples: 2000,
                ..rules()
            };
            if decide(aa, &pairs, &r).verdict != Verdict::NoChange {
                changed += 1;
            }
        }
        // The sign test alone holds it to about 1 in 100 (all 8 pairs one
        // way: 2/256), below the 5 % it is set at.
        assert!(
            changed <= 4,
            "{changed} of 200 placebo trials said a change"
        );
    }

    #[test]
    fn stall_time_moving_to_another_cause_is_said() {
        let m = |v: &[(&str, f64)]| -> BTreeMap<String, f64> {
            v.iter().map(|(k, x)| (k.to_string(), *x)).collect()
        };
        let before = m(&[("sync", 5000.0), ("dirty_throttle", 200.0)]);
        let after = m(&[("sync", 800.0), ("dirty_throttle", 2500.0)]);
        let s = moved(&before, &after, 100.0).unwrap();
        assert_eq!(
            s,
            "stall time moved from sync (5000 → 800 ms/GiB) to dirty_throttle (200 → 2500 ms/GiB)"
        );
        // A cause new in B counts from zero.
        let after = m(&[("sync", 800.0), ("device", 900.0)]);
        assert!(moved(&before, &after, 100.0)
            .unwrap()
            .contains("device (0 → 900"));
        // Dropped with nothing rising: not moved.
        let after = m(&[("sync", 800.0), ("dirty_throttle", 250.0)]);
        assert_eq!(moved(&before, &after, 100.0), None);
        // Dominant cause not down: not moved.
        let after = m(&[("sync", 5000.0), ("dirty_throttle", 2500.0)]);
        assert_eq!(moved(&before, &after, 100.0), None);
        assert_eq!(moved(&BTreeMap::new(), &after, 100.0), None);
    }
}
