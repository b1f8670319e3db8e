//! A live trial's windows (pure): their schedule on the run's clock, each
//! window's figures from the observed server's own stalls and writes, the
//! stall cycle that sizes them, and the check that the load held still.

use super::super::figures::RunFigures;
use super::super::{schedule, Side};
use crate::model::snapshot::Snapshot;
use std::time::Duration;

/// Windows are at least this long (and `--window` no shorter): two
/// cycles of a server that syncs every 5 s.
pub const FLOOR: Duration = Duration::from_secs(10);
/// Without `--window`, the server is observed this long first, as it is,
/// for its cycle (not counted in the verdict): cycles up to half of it
/// are seen (a 30 s checkpoint_timeout; PostgreSQL's default 5 min needs
/// `--window`).
pub const WARM_UP: Duration = Duration::from_secs(90);
/// Nor longer than this, whatever the cycle.
pub const LONGEST: Duration = Duration::from_secs(600);
/// A window spans at least this many whole cycles.
pub const CYCLES: u32 = 2;
/// The dirty pool's samples are smoothed over this many intervals.
const SMOOTH: usize = 5;
/// A cycle is a lag whose autocorrelation reaches this.
const MIN_R: f64 = 0.3;
/// A multiple of a shorter cycle is that cycle again unless its
/// correlation is higher by more than this.
const HARMONIC_R: f64 = 0.1;
/// The load check's narrowest band: a window's write rate within ±30 %
/// of the A window before it.
pub const MIN_LOAD_BAND: f64 = 0.262_364_264_467_491; // ln 1.3

/// One window on the run clock (ns): its side, its pair (0: the A/A
/// pair), when it starts (the knob flipped), from when it is measured
/// (after `settle`) and when it ends.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub side: Side,
    pub pair: usize,
    pub start_ns: u64,
    pub measured_from_ns: u64,
    pub end_ns: u64,
}

/// The first part of each window left out of its figures: the dirty pool
/// and the flusher take a while to follow a flipped knob. A fifth of the
/// window, at most 5 s.
pub fn settle_for(len: Duration) -> Duration {
    (len / 5).min(Duration::from_secs(5))
}

/// The windows from `first_ns`: the A/A pair, then `pairs` A/B pairs in
/// alternating order (`trial::schedule`), each `len` long.
pub fn plan(first_ns: u64, len: Duration, pairs: usize) -> Vec<Window> {
    let (len, settle) = (len.as_nanos() as u64, settle_for(len).as_nanos() as u64);
    schedule(pairs)
        .into_iter()
        .enumerate()
        .map(|(i, (side, pair))| {
            let start_ns = first_ns + i as u64 * len;
            Window {
                side,
                pair,
                start_ns,
                measured_from_ns: start_ns + settle,
                end_ns: start_ns + len,
            }
        })
        .collect()
}

/// The cycle in `snaps` (a warm-up): the period of the machine's
/// dirty+writeback pool, which every writeback stall follows (a
/// checkpoint fills it, a sync drains it), else of the server's blocked
/// time and write rate together (each scaled to unit variance). Windows
/// must span whole cycles: 10 s windows over PostgreSQL's 30 s
/// checkpoint cycle saw a checkpoint in every third window, and its p99
/// swung ×5 between windows.
pub fn cycle(snaps: &[Snapshot]) -> Option<Duration> {
    let dirty: Vec<f64> = snaps
        .iter()
        .map(|s| {
            s.kernel.as_ref().map_or(0.0, |k| {
                (k.dirty_kib.unwrap_or(0) + k.writeback_kib.unwrap_or(0)) as f64
            })
        })
        .collect();
    let every = snaps.first().map_or(1.0, |s| s.interval_s.max(0.001));
    // Only without a dirty cycle: the server's blocked time (waits under
    // the stall threshold too), else its stalls' time; and its writes.
    let of_server = || {
        let blocked: Vec<f64> = snaps
            .iter()
            .map(|s| {
                let b = s
                    .observed
                    .iter()
                    .filter_map(|o| o.blocked_ms)
                    .reduce(|a, b| a + b);
                b.unwrap_or_else(|| s.stalls.iter().map(|st| st.ev.dur() as f64 / 1e6).sum())
            })
            .collect();
        let writes: Vec<f64> = snaps
            .iter()
            .map(|s| s.observed.iter().filter_map(|o| o.write_bytes).sum::<u64>() as f64)
            .collect();
        let x: Vec<f64> = scaled(&blocked)
            .iter()
            .zip(scaled(&writes))
            .map(|(a, b)| a + b)
            .collect();
        period(&x)
    };
    period(&scaled(&rolling_median(&dirty, SMOOTH)))
        .or_else(of_server)
        .map(|lag| Duration::from_secs_f64(lag as f64 * every))
}

/// The median of each `w` values around each one (fewer at the ends): a
/// spike of one sample (a burst of WAL pages caught dirty) goes, the
/// pool's rise and fall over a checkpoint stays.
fn rolling_median(x: &[f64], w: usize) -> Vec<f64> {
    let h = w / 2;
    (0..x.len())
        .map(|i| {
            let mut v = x[i.saturating_sub(h)..(i + h + 1).min(x.len())].to_vec();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect()
}

/// `x` minus its mean, over its standard deviation; zeros when constant.
fn scaled(x: &[f64]) -> Vec<f64> {
    let n = x.len().max(1) as f64;
    let mean = x.iter().sum::<f64>() / n;
    let sd = (x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    x.iter()
        .map(|v| if sd > 0.0 { (v - mean) / sd } else { 0.0 })
        .collect()
}

/// The longest period of `x` (zero mean): among the lags (2 to half the
/// series) where its autocorrelation has a significant local maximum (at
/// least `MIN_R`, and 2.5 standard errors of a correlation over the pairs
/// that lag leaves), the largest that is not a harmonic of a shorter one
/// (near a multiple of it and no stronger). The longest, not the
/// strongest: a server that fsyncs every 3 s and checkpoints every 30 s
/// shows both, and a window of whole 30 s cycles holds whole 3 s ones.
pub fn period(x: &[f64]) -> Option<usize> {
    let energy: f64 = x.iter().map(|v| v * v).sum();
    if energy <= 0.0 || x.len() < 6 {
        return None;
    }
    let r = |lag: usize| {
        let n = x.len() - lag;
        let c: f64 = (0..n).map(|i| x[i] * x[i + lag]).sum();
        c / energy * x.len() as f64 / n as f64
    };
    let rs: Vec<f64> = (0..=x.len() / 2 + 1).map(r).collect();
    let peaks: Vec<usize> = (2..=x.len() / 2)
        .filter(|&l| {
            let sig = MIN_R.max(2.5 / ((x.len() - l) as f64).sqrt());
            rs[l] >= sig && rs[l] >= rs[l - 1] && rs[l] >= rs[l + 1]
        })
        .collect();
    let harmonic = |l: usize| {
        peaks.iter().any(|&p| {
            let k = (l as f64 / p as f64).round() as usize;
            p < l && k >= 2 && l.abs_diff(k * p) <= 1 && rs[l] <= rs[p] + HARMONIC_R
        })
    };
    peaks.iter().copied().filter(|&l| !harmonic(l)).max()
}

/// The window length: the fewest whole cycles (at least `CYCLES`) that
/// reach `floor`, at most `LONGEST`; `floor` without a cycle.
pub fn length(cycle: Option<Duration>, floor: Duration) -> Duration {
    let Some(c) = cycle.filter(|c| !c.is_zero()) else {
        return floor;
    };
    let n = (floor.as_secs_f64() / c.as_secs_f64())
        .ceil()
        .max(f64::from(CYCLES));
    c.mul_f64(n).min(LONGEST.max(floor))
}

/// One window's figures from the session's snapshots: the observed
/// processes' stalls that began in its measured part (stall time by
/// cause per GiB they wrote, the longest, and `zero_s`: the seconds in
/// which one of their threads was in a stall), their bytes written in the
/// intervals that ended in it, and their write rate as `mib_per_s`.
pub fn figures(snaps: &[Snapshot], w: &Window) -> RunFigures {
    let (from, to) = (w.measured_from_ns, w.end_ns);
    let mut f = RunFigures::default();
    let mut spans: Vec<(u64, u64)> = Vec::new();
    let mut stall_ms = std::collections::BTreeMap::<String, f64>::new();
    for s in snaps {
        let end_ns = (s.t_s * 1e9) as u64;
        if end_ns > from && end_ns <= to {
            f.bytes += s.observed.iter().filter_map(|o| o.write_bytes).sum::<u64>();
        }
        for st in &s.stalls {
            let (start, dur) = (st.ev.start_ns, st.ev.dur_ns.unwrap_or(0));
            if start < from || start >= to {
                continue;
            }
            f.ops += 1;
            let ms = dur as f64 / 1e6;
            f.max_stall_ms = f.max_stall_ms.max(ms);
            spans.push((start, start + dur));
            for sh in st.why.shares_of(ms) {
                *stall_ms.entry(sh.cause.as_str().to_string()).or_default() += sh.ms;
            }
        }
    }
    f.secs = to.saturating_sub(from) as f64 / 1e9;
    let gib = (f.bytes.max(1 << 20)) as f64 / (1u64 << 30) as f64;
    f.stall_ms_per_gib = stall_ms.into_iter().map(|(c, ms)| (c, ms / gib)).collect();
    f.mib_per_s = if f.secs > 0.0 {
        f.bytes as f64 / (1u64 << 20) as f64 / f.secs
    } else {
        0.0
    };
    f.zero_s = seconds_touched(&spans, from, to) as f64;
    f
}

/// How many whole seconds of `[from, to)` (counted from `from`) one of
/// `spans` overlaps.
fn seconds_touched(spans: &[(u64, u64)], from: u64, to: u64) -> u64 {
    let n = to.saturating_sub(from).div_ceil(1_000_000_000);
    (0..n)
        .filter(|k| {
            let (a, b) = (
                from + k * 1_000_000_000,
                (from + (k + 1) * 1_000_000_000).min(to),
            );
            spans.iter().any(|&(s, e)| s < b && e > a)
        })
        .count() as u64
}

/// Whether the server's load held still, from its own write rate per
/// window (MiB/s, in schedule order): the A/A pair's windows within
/// ±30 %, and each A window within the band of the A window before it
/// (the A/A pair's spread doubled, at least ±30 %). Only A: under a
/// closed-loop load the write rate in B is the knob's outcome, not the
/// load — a faster disk let PostgreSQL's B windows write 2400–3060 tps'
/// worth, unevenly, while its A windows held at 2000–2100 — so B held to
/// B refused a verdict on every change that works. A load that moves
/// shows in the untreated side. Why not, or None.
pub fn load_changed(rates: &[(Side, usize, f64)]) -> Option<String> {
    let floor = 0.1; // MiB/s: an idle window against an idle one is no change.
    let ln = |a: f64, b: f64| ((b + floor) / (a + floor)).ln();
    let aa: Vec<f64> = rates.iter().filter(|r| r.1 == 0).map(|r| r.2).collect();
    let drift = match aa[..] {
        [a, b, ..] => ln(a, b).abs(),
        _ => 0.0,
    };
    if drift > MIN_LOAD_BAND {
        return Some(format!(
            "load changed: the A/A windows wrote {:.1} and {:.1} MiB/s (more than ±30 % apart)",
            aa[0], aa[1]
        ));
    }
    let band = (2.0 * drift).max(MIN_LOAD_BAND);
    let name = |side: Side| if side == Side::A { "A" } else { "B" };
    for (i, &(side, _, b)) in rates.iter().enumerate() {
        if side != Side::A {
            continue;
        }
        let Some(&(_, _, a)) = rates[..i].iter().rev().find(|r| r.0 == side) else {
            continue;
        };
        if ln(a, b).abs() > band {
            return Some(format!(
                "load changed: window {} ({}) wrote {b:.1} MiB/s, the {} window before it {a:.1} (band ±{:.0} %)",
                i + 1,
                name(side),
                name(side),
                (band.exp() - 1.0) * 100.0
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cause::{Attribution, Cause, Evidence, Share};
    use crate::model::snapshot::ObservedInterval;
    use crate::model::stall::{Blocked, Stall};
    use std::time::Duration;

    const S: u64 = 1_000_000_000;

    #[test]
    fn the_plan_alternates_after_the_a_a_pair_and_settles_each_window() {
        let w = plan(10 * S, Duration::from_secs(30), 6);
        assert_eq!(w.len(), 14);
        assert_eq!((w[0].side, w[0].pair, w[1].pair), (Side::A, 0, 0));
        assert_eq!(
            (w[2].side, w[3].side, w[4].side),
            (Side::A, Side::B, Side::B)
        );
        assert_eq!(w[0].start_ns, 10 * S);
        assert_eq!(w[0].measured_from_ns, 15 * S, "5 s settle");
        assert_eq!(w[13].end_ns, 10 * S + 14 * 30 * S);
        assert_eq!(settle_for(Duration::from_secs(10)), Duration::from_secs(2));
    }

    #[test]
    fn the_cycle_is_the_dominant_period_and_windows_hold_whole_ones() {
        // A checkpoint every 30 s (3 s of heavy writes and long stalls),
        // and a small fsync stall every 3 s in between.
        let x: Vec<f64> = (0..90)
            .map(|t| {
                let ckpt = if t % 30 < 3 { 10.0 } else { 0.0 };
                let fsync = if t % 3 == 0 { 1.0 } else { 0.0 };
                ckpt + fsync
            })
            .collect();
        assert_eq!(
            period(&scaled(&x)),
            Some(30),
            "the checkpoint, not the fsync"
        );
        let mut rng = crate::cmd::advise::trial::verdict::Rng::new(7);
        let noise: Vec<f64> = (0..90).map(|_| rng.below(1000) as f64).collect();
        assert_eq!(period(&scaled(&noise)), None, "no cycle in noise");
        assert_eq!(period(&[0.0; 40]), None);
        let s = Duration::from_secs;
        assert_eq!(length(Some(s(30)), FLOOR), s(60), "two whole cycles");
        assert_eq!(length(Some(s(3)), FLOOR), s(12), "four reach the floor");
        assert_eq!(length(None, FLOOR), FLOOR);
        assert_eq!(length(Some(s(900)), FLOOR), LONGEST);
    }

    fn stall(start_s: f64, ms: f64, shares: &[(Cause, f64)]) -> Stall {
        let ev = Blocked::process(
            (1, "postgres", 1, "postgres"),
            (start_s * 1e9) as u64,
            (ms * 1e6) as u64,
        );
        let mut why = Attribution::high(shares[0].0, Evidence::default());
        why.shares = shares
            .iter()
            .map(|&(cause, ms)| Share { cause, ms })
            .collect();
        Stall { ev, why }
    }

    fn snap(t_s: f64, write_mib: u64, stalls: Vec<Stall>) -> Snapshot {
        Snapshot {
            t_s,
            interval_s: 1.0,
            stalls,
            observed: vec![ObservedInterval {
                pid: 1,
                write_bytes: Some(write_mib << 20),
                ..ObservedInterval::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_window_counts_its_measured_part_only() {
        let w = Window {
            side: Side::B,
            pair: 1,
            start_ns: 0,
            measured_from_ns: 2 * S,
            end_ns: 6 * S,
        };
        let snaps = vec![
            snap(1.0, 100, vec![stall(0.5, 900.0, &[(Cause::Sync, 900.0)])]),
            snap(2.0, 100, vec![]),
            snap(
                3.0,
                256,
                vec![stall(
                    2.5,
                    300.0,
                    &[(Cause::Sync, 200.0), (Cause::DirtyThrottle, 100.0)],
                )],
            ),
            snap(4.0, 256, vec![stall(3.9, 200.0, &[(Cause::Sync, 200.0)])]),
            snap(5.0, 256, vec![]),
            snap(6.0, 256, vec![]),
            snap(7.0, 999, vec![stall(6.5, 5000.0, &[(Cause::Sync, 5000.0)])]),
        ];
        let f = figures(&snaps, &w);
        assert_eq!(
            f.ops, 2,
            "the settle's and the next window's stalls are out"
        );
        assert_eq!(f.bytes, 4 * (256 << 20), "intervals ending at 3, 4, 5, 6 s");
        assert_eq!(f.max_stall_ms, 300.0);
        // 400 ms sync and 100 ms throttling over 1 GiB written.
        assert!((f.stall_ms_per_gib["sync"] - 400.0).abs() < 1e-9);
        assert!((f.stall_ms_per_gib["dirty_throttle"] - 100.0).abs() < 1e-9);
        assert!((f.mib_per_s - 256.0).abs() < 1e-9, "1 GiB in 4 s");
        // 2.5–2.8 s touches second 0 of the window, 3.9–4.1 s seconds 1 and 2.
        assert_eq!(f.zero_s, 3.0);
    }

    #[test]
    fn a_steady_load_passes_and_a_doubled_one_is_caught() {
        use Side::{A, B};
        let steady = [
            (A, 0, 10.0),
            (A, 0, 10.5),
            (A, 1, 9.8),
            (B, 1, 6.0),
            (B, 2, 6.2),
            (A, 2, 10.1),
        ];
        assert_eq!(
            load_changed(&steady),
            None,
            "B may write less than A: the knob's doing"
        );
        let doubled = [
            (A, 0, 10.0),
            (A, 0, 10.5),
            (A, 1, 9.8),
            (B, 1, 6.0),
            (B, 2, 12.5),
            (A, 2, 21.0),
        ];
        let why = load_changed(&doubled).expect("caught");
        assert!(
            why.starts_with("load changed: window 6 (A) wrote 21.0"),
            "{why}"
        );
        // A faster disk: B writes more, and unevenly; A holds still.
        let faster = [
            (A, 0, 10.0),
            (A, 0, 10.5),
            (A, 1, 9.8),
            (B, 1, 14.0),
            (B, 2, 20.0),
            (A, 2, 10.1),
            (A, 3, 10.3),
            (B, 3, 15.0),
        ];
        assert_eq!(load_changed(&faster), None, "B's rate is the knob's doing");
        let aa = [(A, 0, 10.0), (A, 0, 20.0), (A, 1, 20.0), (B, 1, 20.0)];
        assert!(load_changed(&aa).unwrap().contains("A/A windows"));
        let idle = [(A, 0, 0.0), (A, 0, 0.01), (A, 1, 0.0), (B, 1, 0.02)];
        assert_eq!(load_changed(&idle), None);
    }
}
