//! `trial --svg`: the trial's before/after chart. One A run and one B run,
//! each the run whose measure is the median of its side, on one time axis
//! (seconds since each started): their write latency p50/p99/p99.9 per
//! interval over their stall lanes by cause, titled with the change and
//! the verdict. The report's chart code draws it
//! (`report::render_before_after`). A trial keeps each run's `RunTrace`
//! (a few KB), never its snapshots (two histograms per interval), and
//! draws the two it picks when the last run is done.

use super::{Measure, Side};
use crate::analysis::advice::outcome::Outcome;
use crate::analysis::advice::treatment::{Setting, Treatment};
use crate::cmd::compare::END_SLACK_S;
use crate::cmd::report::{render_before_after, BeforeAfter, ReportInput, RunTrace, ShownRun};
use crate::model::snapshot::Snapshot;
use std::path::Path;
use std::time::Duration;

/// A run the chart shows: its trace and which run it was, in words.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shown {
    pub trace: RunTrace,
    /// "run 7 of 18, the median stall_ms_per_gib of A's 10"; may be empty.
    pub which: String,
}

/// A run's trace from its snapshots (its writers on target 0), up to
/// `each`: the interval of ops that finished while the writers stopped is
/// left out, as `compare`'s chart leaves it out.
pub fn trace_of(snapshots: &[Snapshot], each: Duration) -> RunTrace {
    let input = ReportInput {
        title: String::new(),
        targets: &[],
        snapshots,
        from_s: None,
        to_s: Some(each.as_secs_f64() + END_SLACK_S),
        dirty_by_target: Vec::new(),
    };
    RunTrace::of(&input, 0)
}

/// The index in `measures` of their median: the lower middle one of an
/// even count, so it is a run that was made. `None` when empty.
pub fn median_run(measures: &[f64]) -> Option<usize> {
    let mut order: Vec<usize> = (0..measures.len()).collect();
    order.sort_by(|&a, &b| measures[a].total_cmp(&measures[b]));
    order.get(measures.len().saturating_sub(1) / 2).copied()
}

/// Of the trial's runs in order (side, measure) and their traces, the run
/// of `side` the chart shows.
pub fn pick(runs: &[(Side, f64)], traces: &[RunTrace], side: Side, m: Measure) -> Shown {
    let mine: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].0 == side).collect();
    let measures: Vec<f64> = mine.iter().map(|&i| runs[i].1).collect();
    let Some(i) = median_run(&measures).map(|k| mine[k]) else {
        return Shown::default();
    };
    let name = if side == Side::A { "A" } else { "B" };
    Shown {
        trace: traces.get(i).cloned().unwrap_or_default(),
        which: format!(
            "run {} of {}, the median {} of {name}'s {}",
            i + 1,
            runs.len(),
            m.name(),
            mine.len()
        ),
    }
}

/// The change in a few words: "vm.dirty_background_bytes=16777216,
/// mount -o commit=1".
pub fn change_words(t: &Treatment) -> String {
    let words: Vec<String> = t
        .settings
        .iter()
        .map(|s| match s {
            Setting::Sysctl { name, value } => format!("{name}={value}"),
            Setting::Sysfs { path, value } => format!("{}={value}", path.display()),
            Setting::MountOption { option } => format!("mount -o {option}"),
            Setting::RunArgs { args } => format!("run {}", args.join(" ")),
        })
        .collect();
    words.join(", ")
}

/// The chart as SVG text.
pub fn render(o: &Outcome, t: &Treatment, a: &Shown, b: &Shown) -> Result<String, String> {
    let change = change_words(t);
    let verdict = format!(
        "verdict: {}",
        crate::analysis::advice::outcome::verdict_line(o)
    );
    let latency = if o.before.open_loop {
        "Write latency per interval, open loop (from each op's intended start)"
    } else {
        "Write latency per interval, closed loop (no --rate: the tail is understated)"
    };
    let key = |side: &str, what: &str, s: &Shown| {
        if s.which.is_empty() {
            format!("{side}: {what}")
        } else {
            format!("{side}: {what} ({})", s.which)
        }
    };
    let chart = BeforeAfter {
        title: format!(
            "trial: {change} — {}",
            crate::analysis::advice::outcome::verdict_word(o.verdict)
        ),
        notes: vec![verdict],
        latency: latency.to_string(),
        runs: vec![
            ShownRun {
                lane: "A".into(),
                key: key("A", "as it is", a),
                trace: &a.trace,
            },
            ShownRun {
                lane: "B".into(),
                key: key("B", "with the change", b),
                trace: &b.trace,
            },
        ],
    };
    render_before_after(&chart)
}

/// Writes the chart to `path` whole (temporary file, then rename), or
/// nothing.
pub fn write(path: &Path, o: &Outcome, t: &Treatment, a: &Shown, b: &Shown) -> anyhow::Result<()> {
    let text = render(o, t, a, b).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    crate::cmd::outfile::write_atomic(path, text.as_bytes())
}

/// `write` from the two runs' snapshots (each `each` long), for a caller
/// that kept them.
pub fn write_snapshots(
    path: &Path,
    o: &Outcome,
    t: &Treatment,
    (a, b): (&[Snapshot], &[Snapshot]),
    each: Duration,
) -> anyhow::Result<()> {
    let shown = |s| Shown {
        trace: trace_of(s, each),
        which: String::new(),
    };
    write(path, o, t, &shown(a), &shown(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::advice::outcome::{Figures, Verdict};
    use crate::cmd::report::tests::{snap, stall, ti};
    use crate::config::Mode;
    use crate::model::cause::Cause;

    /// `secs` 1 s intervals of target 0 and one more that ends 0.5 s after
    /// them (the ops that finished as the writers stopped), write latency
    /// `lat_us` each, and stalls (start s, ms, cause) filed where they end.
    fn run(secs: u64, lat_us: u64, stalls: &[(f64, u64, Cause)]) -> Vec<Snapshot> {
        let mut v: Vec<Snapshot> = (0..=secs)
            .map(|i| {
                let lat: Vec<u64> = (1..=200).map(|k| lat_us + k).collect();
                let mine = stalls
                    .iter()
                    .filter(|s| (s.0 + s.1 as f64 / 1e3).ceil() as u64 == i + 1)
                    .map(|s| stall(0, s.0, s.1, s.2))
                    .collect();
                snap(i, vec![ti(0, true, Mode::Buffered, 1, &lat)], mine)
            })
            .collect();
        let tail = v.last_mut().unwrap();
        (tail.t_s, tail.interval_s) = (secs as f64 + 0.5, 0.5);
        v
    }

    fn outcome() -> Outcome {
        Outcome {
            verdict: Verdict::Improved,
            measure: "ln(B/A) of stall_ms_per_gib".into(),
            difference: -0.7,
            interval: (-0.9, -0.5),
            noise: 0.05,
            pairs_lower: 6,
            pairs_higher: 0,
            before: Figures {
                open_loop: true,
                ..Figures::default()
            },
            after: Figures::default(),
            moved: None,
            recipe: String::new(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn the_median_run_is_one_that_was_made() {
        assert_eq!(median_run(&[5.0, 1.0, 3.0]), Some(2));
        assert_eq!(median_run(&[4.0, 1.0, 3.0, 2.0]), Some(3), "lower middle");
        assert_eq!(median_run(&[]), None);
        let runs = [
            (Side::A, 10.0),
            (Side::A, 30.0),
            (Side::A, 20.0),
            (Side::B, 5.0),
            (Side::B, 9.0),
            (Side::A, 40.0),
        ];
        let traces: Vec<RunTrace> = (0..6)
            .map(|i| RunTrace {
                span: (0.0, f64::from(i)),
                ..RunTrace::default()
            })
            .collect();
        let a = pick(&runs, &traces, Side::A, Measure::StallTime);
        assert_eq!(a.trace.span.1, 2.0, "A's 10, 20, 30, 40: the run of 20");
        assert_eq!(a.which, "run 3 of 6, the median stall_ms_per_gib of A's 4");
        let b = pick(&runs, &traces, Side::B, Measure::StallTime);
        assert_eq!(b.trace.span.1, 3.0);
        assert_eq!(
            pick(&runs[..3], &traces, Side::B, Measure::P999),
            Shown::default()
        );
    }

    #[test]
    fn a_trace_ends_with_the_run_not_with_the_ops_that_finished_after() {
        let t = trace_of(
            &run(10, 100, &[(9.8, 500, Cause::Sync)]),
            Duration::from_secs(10),
        );
        assert_eq!(t.latency.len(), 10);
        assert_eq!(t.span, (0.0, 10.0));
        assert!(
            t.spans.is_empty(),
            "a stall filed after the end is not in the span"
        );
    }

    /// The chart of two runs made from snapshots, as `trial --svg` writes it.
    #[test]
    fn the_chart_has_both_sides_lanes_the_legend_and_the_title() {
        let a = run(
            10,
            2_000,
            &[
                (2.0, 1500, Cause::DirtyThrottle),
                (6.0, 800, Cause::DirtyThrottle),
            ],
        );
        let b = run(10, 500, &[(3.0, 300, Cause::Sync)]);
        let t = Treatment {
            settings: vec![
                Setting::Sysctl {
                    name: "vm.dirty_background_bytes".into(),
                    value: "16777216".into(),
                },
                Setting::MountOption {
                    option: "commit=1".into(),
                },
            ],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trial.svg");
        let each = Duration::from_secs(10);
        write_snapshots(&path, &outcome(), &t, (&a, &b), each).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| Some(t[t.find('>')? + 1..t.find("</text>")?].trim()))
            .collect();
        let title =
            "stallscope — trial: vm.dirty_background_bytes=16777216, mount -o commit=1 — improved";
        for want in [
            title,
            "A: as it is",
            "B: with the change",
            "A",
            "B",
            "dirty_throttle 2 (2.3 s)",
            "sync 1 (0.3 s)",
            "seconds since the start of the run",
            "Throughput per interval",
        ] {
            assert!(texts.contains(&want), "{want} in {texts:?}");
        }
        assert!(texts.iter().any(|t| t.starts_with("verdict: improved")));
        assert!(texts.iter().any(|t| t.contains("open loop")));
        // Each side's throughput, p99 and p99.9 as a line across its 10
        // intervals, in its colour (A blue, B orange; the keys' samples
        // are 2 points).
        for colour in ["#1F77B4", "#FF7F0E"] {
            let long = svg
                .split("<polyline")
                .skip(1)
                .filter(|l| l.contains(&format!("stroke=\"{colour}\"")))
                .filter(|l| {
                    l.split(" points=\"").nth(1).is_some_and(|p| {
                        p.split('"').next().unwrap_or("").split_whitespace().count() >= 10
                    })
                })
                .count();
            assert_eq!(long, 3, "{colour}");
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file left");
    }

    /// Writes a sample chart (30 s runs) to `$STALLSCOPE_SAMPLE_DIR`, to
    /// look at.
    #[test]
    #[ignore]
    fn write_sample_chart() {
        let dir = std::env::var("STALLSCOPE_SAMPLE_DIR").expect("STALLSCOPE_SAMPLE_DIR");
        let throttles: Vec<(f64, u64, Cause)> = (0..12)
            .map(|i| (4.0 + f64::from(i) * 2.1, 900, Cause::DirtyThrottle))
            .chain([(12.0, 2500, Cause::Sync)])
            .collect();
        let a = run(30, 40_000, &throttles);
        let b = run(30, 3_000, &[(9.0, 120, Cause::WritebackWait)]);
        let t = Treatment {
            settings: vec![Setting::Sysfs {
                path: "/sys/class/bdi/7:0/max_bytes".into(),
                value: "33554432".into(),
            }],
        };
        let path = std::path::Path::new(&dir).join("trial-sample.svg");
        write_snapshots(&path, &outcome(), &t, (&a, &b), Duration::from_secs(30)).unwrap();
        println!("{}", path.display());
    }

    #[test]
    fn nothing_is_written_when_there_is_nothing_to_draw_or_nowhere_to_put_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trial.svg");
        let each = Duration::from_secs(10);
        let e = write_snapshots(&path, &outcome(), &Treatment::default(), (&[], &[]), each);
        assert!(e.unwrap_err().to_string().contains("no intervals"));
        let a = run(3, 100, &[]);
        let nowhere = dir.path().join("gone/trial.svg");
        assert!(
            write_snapshots(&nowhere, &outcome(), &Treatment::default(), (&a, &a), each).is_err()
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
