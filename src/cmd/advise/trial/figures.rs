//! One run's figures for a trial, from its snapshots (live, as `compare`
//! collects them, or read back from a recording), and one side's figures
//! as medians over its runs.
//!
//! Latency is open loop only when the workload is rate-limited
//! (`--rate`/`--thread-rate`): then each op's latency counts from when it
//! was meant to start (`source::writer`'s `Pace`), so a writer blocked for
//! a second is charged for every op it could not start in that second.
//! Without a rate the writers are closed loop (the next op starts when the
//! last one ended) and p99/p99.9 understate the tail; `Figures::open_loop`
//! says which, and the trial's text says it too.

use crate::analysis::advice::outcome::Figures;
use crate::base::units::mib;
use crate::config::Config;
use crate::model::ops::new_histogram;
use crate::model::snapshot::{cause_totals, LatSummary, Snapshot};
use std::collections::BTreeMap;
use std::path::Path;

const GIB: f64 = (1u64 << 30) as f64;

/// One run's figures.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunFigures {
    /// Stall time by cause per GiB written, ms/GiB (by shares, as every
    /// view of stall time counts it).
    pub stall_ms_per_gib: BTreeMap<String, f64>,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// The run's longest stall (write or sync), else its longest write, ms.
    pub max_stall_ms: f64,
    pub mib_per_s: f64,
    /// `rate × record size`, MiB/s, when rate-limited.
    pub offered_mib_per_s: Option<f64>,
    /// Peak Dirty+Writeback at interval ends, KiB.
    pub peak_dirty_kib: u64,
    pub ops: u64,
    pub bytes: u64,
    /// Seconds the writers ran.
    pub secs: f64,
    /// Seconds the writers ran without finishing a write (throughput 0).
    pub zero_s: f64,
}

impl RunFigures {
    /// All stall time per GiB written, every cause (+ 0.0: an empty sum
    /// is -0.0, which prints as "-0").
    pub fn stall_total(&self) -> f64 {
        self.stall_ms_per_gib.values().sum::<f64>() + 0.0
    }
}

/// What the workload offers, MiB/s: `--thread-rate` × threads or
/// `--rate`, × the record size; `None` when not rate-limited.
pub fn offered_mib_per_s(cfg: &Config) -> Option<f64> {
    let ops = if cfg.thread_rate > 0 {
        cfg.thread_rate * u64::from(cfg.threads)
    } else {
        cfg.rate
    };
    (ops > 0).then(|| mib(ops * cfg.record_size()))
}

/// Whether latency counts from the intended start (see the module doc).
pub fn open_loop(cfg: &Config) -> bool {
    cfg.rate > 0 || cfg.thread_rate > 0
}

/// The figures of `target` over the run's snapshots.
pub fn of_snapshots(snapshots: &[Snapshot], target: usize, offered: Option<f64>) -> RunFigures {
    let mut hist = new_histogram();
    let (mut ops, mut bytes, mut secs, mut longest_op) = (0u64, 0u64, 0.0f64, 0u64);
    let mut zero_s = 0.0;
    let mut peak_dirty_kib = 0;
    for s in snapshots {
        if let Some(t) = s.targets.iter().find(|t| t.target == target) {
            // Histograms of one shape: adding cannot fail.
            let _ = hist.add(&t.hist);
            longest_op = longest_op.max(t.hist.max()).max(t.sync_hist.max());
            ops += t.ops;
            bytes += t.bytes;
            if t.active {
                secs += s.interval_s;
                if t.ops == 0 {
                    zero_s += s.interval_s;
                }
            }
        }
        if let Some(k) = &s.kernel {
            let kib = k.dirty_kib.unwrap_or(0) + k.writeback_kib.unwrap_or(0);
            peak_dirty_kib = peak_dirty_kib.max(kib);
        }
    }
    let stalls: Vec<_> = snapshots
        .iter()
        .flat_map(|s| &s.stalls)
        .filter(|st| st.ev.who.target() == Some(target))
        .collect();
    let longest_stall = stalls.iter().map(|st| st.ev.dur()).max();
    let gib = bytes as f64 / GIB;
    let stall_ms_per_gib = cause_totals(stalls.iter().copied())
        .into_iter()
        .filter(|(_, t)| t.ms > 0.0)
        .map(|(c, t)| {
            (
                c.as_str().to_string(),
                if gib > 0.0 { t.ms / gib } else { 0.0 },
            )
        })
        .collect();
    let lat = LatSummary::of(&hist);
    RunFigures {
        stall_ms_per_gib,
        p99_ms: lat.p99 as f64 / 1e3,
        p999_ms: lat.p999 as f64 / 1e3,
        max_stall_ms: longest_stall.map_or(longest_op as f64 / 1e3, |ns| ns as f64 / 1e6),
        mib_per_s: if secs > 0.0 { mib(bytes) / secs } else { 0.0 },
        offered_mib_per_s: offered,
        peak_dirty_kib,
        ops,
        bytes,
        secs,
        zero_s,
    }
}

/// The first target's figures from a recording (`run --record`), offered
/// throughput from its configuration.
pub fn of_recording(path: &Path) -> anyhow::Result<(RunFigures, bool)> {
    let rec = crate::sink::recording::read(path)?;
    let cfg = &rec.header.config;
    Ok((
        of_snapshots(&rec.snapshots, 0, offered_mib_per_s(cfg)),
        open_loop(cfg),
    ))
}

/// One side's figures: the median of each figure over its runs.
pub fn combine(runs: &[RunFigures], open_loop: bool) -> Figures {
    use super::verdict::median;
    let med =
        |f: &dyn Fn(&RunFigures) -> f64| -> f64 { median(&runs.iter().map(f).collect::<Vec<_>>()) };
    let causes: std::collections::BTreeSet<&String> = runs
        .iter()
        .flat_map(|r| r.stall_ms_per_gib.keys())
        .collect();
    let stall_ms_per_gib = causes
        .into_iter()
        .map(|c| {
            let m = med(&|r| r.stall_ms_per_gib.get(c).copied().unwrap_or(0.0));
            (c.clone(), m)
        })
        .collect();
    Figures {
        stall_ms_per_gib,
        p99_ms: med(&|r| r.p99_ms),
        p999_ms: med(&|r| r.p999_ms),
        max_stall_ms: med(&|r| r.max_stall_ms),
        achieved_share: med(&|r| r.offered_mib_per_s.map_or(1.0, |o| r.mib_per_s / o)),
        mib_per_s: med(&|r| r.mib_per_s),
        peak_dirty_kib: med(&|r| r.peak_dirty_kib as f64) as u64,
        zero_s: med(&|r| r.zero_s),
        runs: runs.len(),
        open_loop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::units::ByteSize;
    use crate::config::Mode;
    use crate::model::cause::{Attribution, Cause, Evidence};
    use crate::model::kernel::KernelInterval;
    use crate::model::ops::OpKind;
    use crate::model::snapshot::TargetInterval;
    use crate::model::stall::{Blocked, Stall};

    fn interval(target: usize, ops: u64, lat_us: &[u64]) -> TargetInterval {
        let mut hist = new_histogram();
        for &v in lat_us {
            hist.record(v).unwrap();
        }
        TargetInterval {
            target,
            active: true,
            mode: Mode::Buffered,
            threads: 1,
            ops,
            bytes: ops << 20,
            hist,
            sync_hist: new_histogram(),
            stalls: 0,
            minflt: 0,
            majflt: 0,
            bdp: None,
            wb_waits: None,
            failed: false,
        }
    }

    fn kernel(dirty: u64, wb: u64) -> KernelInterval {
        KernelInterval {
            dirty_kib: Some(dirty),
            writeback_kib: Some(wb),
            ..KernelInterval::default()
        }
    }

    fn stall(target: usize, cause: Cause, ms: u64, op: OpKind) -> Stall {
        Stall {
            ev: Blocked::writer(target, 0, op, 10, ms * 1_000_000),
            why: Attribution::high(cause, Evidence::default()),
        }
    }

    /// Two 1 s intervals, 512 MiB each on target 0 (1 GiB in all): stall
    /// time per GiB is the stall time; another target's stall is not ours.
    fn run() -> Vec<Snapshot> {
        let lat: Vec<u64> = (1..=1000).collect();
        vec![
            Snapshot {
                index: 0,
                t_s: 1.0,
                interval_s: 1.0,
                targets: vec![interval(0, 512, &lat), interval(1, 9, &[5])],
                stalls: vec![
                    stall(0, Cause::Sync, 1500, OpKind::Sync),
                    stall(1, Cause::Device, 9000, OpKind::Write),
                ],
                kernel: Some(kernel(300_000, 20_000)),
                ..Snapshot::default()
            },
            Snapshot {
                index: 1,
                t_s: 2.0,
                interval_s: 1.0,
                targets: vec![interval(0, 512, &lat)],
                stalls: vec![stall(0, Cause::DirtyThrottle, 250, OpKind::Write)],
                kernel: Some(kernel(100_000, 50_000)),
                ..Snapshot::default()
            },
        ]
    }

    #[test]
    fn a_runs_figures_come_from_its_target_alone() {
        let f = of_snapshots(&run(), 0, Some(1024.0));
        assert_eq!(f.ops, 1024);
        assert_eq!(f.bytes, 1 << 30);
        let want: BTreeMap<String, f64> =
            [("sync".into(), 1500.0), ("dirty_throttle".into(), 250.0)]
                .into_iter()
                .collect();
        assert_eq!(f.stall_ms_per_gib, want);
        assert_eq!(f.stall_total(), 1750.0);
        assert_eq!(f.max_stall_ms, 1500.0, "the longest stall, a sync");
        assert_eq!(f.mib_per_s, 512.0);
        assert_eq!(f.peak_dirty_kib, 320_000, "dirty + writeback at its peak");
        assert!((f.p99_ms - 0.99).abs() < 0.01, "{}", f.p99_ms);
        assert!((f.p999_ms - 1.0).abs() < 0.01, "{}", f.p999_ms);
        assert_eq!(f.zero_s, 0.0);
    }

    /// A second the writers ran without finishing a write is throughput at
    /// zero; one they did not run (inactive) is not.
    #[test]
    fn seconds_without_a_write_are_counted() {
        let mut snaps = run();
        snaps[1].targets[0].ops = 0;
        snaps.push(Snapshot {
            index: 2,
            t_s: 3.0,
            interval_s: 1.0,
            targets: vec![TargetInterval {
                active: false,
                ..interval(0, 0, &[])
            }],
            ..Snapshot::default()
        });
        assert_eq!(of_snapshots(&snaps, 0, None).zero_s, 1.0);
    }

    #[test]
    fn with_no_stall_the_longest_op_stands_in() {
        let mut snaps = run();
        for s in &mut snaps {
            s.stalls.clear();
        }
        let f = of_snapshots(&snaps, 0, None);
        assert!(f.stall_ms_per_gib.is_empty());
        assert_eq!(format!("{:.0}", f.stall_total()), "0", "not -0");
        assert!((f.max_stall_ms - 1.0).abs() < 0.01, "{}", f.max_stall_ms);
    }

    #[test]
    fn offered_throughput_and_loop_follow_the_rate() {
        let mut cfg = Config {
            mode: Mode::Buffered,
            record_size: Some(ByteSize(1 << 20)),
            threads: 4,
            ..Config::default()
        };
        cfg.rate = 0;
        cfg.thread_rate = 0;
        assert_eq!(offered_mib_per_s(&cfg), None);
        assert!(!open_loop(&cfg));
        cfg.rate = 30;
        assert_eq!(offered_mib_per_s(&cfg), Some(30.0));
        assert!(open_loop(&cfg));
        cfg.thread_rate = 10;
        assert_eq!(offered_mib_per_s(&cfg), Some(40.0), "thread rate × threads");
    }

    #[test]
    fn a_side_is_the_median_of_its_runs() {
        let r = |stall: f64, p999: f64, mibs: f64| RunFigures {
            stall_ms_per_gib: [("sync".to_string(), stall)].into_iter().collect(),
            p999_ms: p999,
            max_stall_ms: p999 * 2.0,
            mib_per_s: mibs,
            offered_mib_per_s: Some(20.0),
            peak_dirty_kib: 100,
            ..RunFigures::default()
        };
        let mut only_b = r(10.0, 3.0, 10.0);
        only_b.stall_ms_per_gib.insert("device".into(), 90.0);
        let f = combine(&[r(100.0, 5.0, 20.0), r(300.0, 1.0, 5.0), only_b], true);
        assert_eq!(f.stall_ms_per_gib["sync"], 100.0);
        assert_eq!(f.stall_ms_per_gib["device"], 0.0, "absent counts as zero");
        assert_eq!(f.p999_ms, 3.0);
        assert_eq!(f.max_stall_ms, 6.0);
        assert_eq!(f.achieved_share, 0.5);
        assert_eq!(f.runs, 3);
        assert!(f.open_loop);
    }
}
