//! The charts' stall lanes: per target (then per observed process) a row of
//! spans, each a stall from its start to its end, coloured by cause — so a
//! 13 s pause reads as 13 s and 500 throttle sleeps as a band, not as 500
//! markers. Pure: the SVG (`report`, `compare`) only draws what this says.

use crate::model::cause::Cause;
use crate::model::snapshot::cause_totals;
use crate::model::stall::{Stall, Who};

/// One stall clipped to the chart's span, seconds since the start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StallSpan {
    pub from_s: f64,
    pub to_s: f64,
    pub cause: Cause,
}

/// Who a lane is for.
#[derive(Clone, Debug, PartialEq)]
pub enum LaneOf {
    Target(usize),
    /// An observed process's threads of one name (`None`: its other
    /// threads, or all of them when none stalled).
    Threads(u32, Option<String>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Lane {
    pub of: LaneOf,
    /// What the chart writes left of it.
    pub name: String,
    /// By start time.
    pub spans: Vec<StallSpan>,
}

/// An observed process gets a lane for each of its this many most stalled
/// thread names (a writer, its flush thread, its compaction thread…).
pub const THREAD_LANES: usize = 4;

/// A lane for each target (named by `targets`) and for each observed
/// process in `procs` (pid, name) one per most stalled thread name, holding
/// every one of `stalls` (the span's: `ReportInput::stalls`) clipped to
/// `[x0, x1]`. A stall that began after `x1` (an op the writers started as
/// the run stopped) is a sliver at the end, never left out: the lanes show
/// every stall the summary counts.
pub fn stall_lanes(
    stalls: &[&Stall],
    targets: &[String],
    procs: &[(u32, String)],
    x0: f64,
    x1: f64,
) -> Vec<Lane> {
    let mut lanes: Vec<Lane> = targets
        .iter()
        .enumerate()
        .map(|(t, name)| Lane {
            of: LaneOf::Target(t),
            name: name.clone(),
            spans: Vec::new(),
        })
        .collect();
    for (pid, comm) in procs {
        lanes.extend(thread_lanes(stalls, *pid, comm, procs.len() > 1));
    }
    for st in stalls {
        let of = match &st.ev.who {
            Who::Writer { target, .. } => LaneOf::Target(*target),
            Who::Process {
                pid, thread_comm, ..
            } => {
                let named = LaneOf::Threads(*pid, Some(thread_comm.clone()));
                if lanes.iter().any(|l| l.of == named) {
                    named
                } else {
                    LaneOf::Threads(*pid, None)
                }
            }
        };
        if let Some(l) = lanes.iter_mut().find(|l| l.of == of) {
            let (from, to) = span_of(st);
            l.spans.push(StallSpan {
                from_s: from.clamp(x0, x1),
                to_s: to.clamp(x0, x1),
                cause: st.why.cause,
            });
        }
    }
    for l in &mut lanes {
        l.spans.sort_by(|a, b| a.from_s.total_cmp(&b.from_s));
    }
    lanes
}

/// A process's lanes: its `THREAD_LANES` most stalled thread names, then
/// one for the rest (or one for all when none stalled).
fn thread_lanes(stalls: &[&Stall], pid: u32, comm: &str, with_pid: bool) -> Vec<Lane> {
    let mut by_name: Vec<(String, f64)> = Vec::new();
    for st in stalls {
        if let Who::Process {
            pid: p,
            thread_comm,
            ..
        } = &st.ev.who
        {
            if *p != pid {
                continue;
            }
            let secs = st.ev.dur() as f64 / 1e9;
            match by_name.iter_mut().find(|(n, _)| n == thread_comm) {
                Some(e) => e.1 += secs,
                None => by_name.push((thread_comm.clone(), secs)),
            }
        }
    }
    by_name.sort_by(|a, b| b.1.total_cmp(&a.1));
    let prefix = if with_pid {
        format!("{pid} ")
    } else {
        String::new()
    };
    let rest = by_name.len() > THREAD_LANES || by_name.is_empty();
    let mut lanes: Vec<Lane> = by_name
        .into_iter()
        .take(THREAD_LANES)
        .map(|(name, _)| Lane {
            of: LaneOf::Threads(pid, Some(name.clone())),
            name: format!("{prefix}{name}"),
            spans: Vec::new(),
        })
        .collect();
    if rest {
        lanes.push(Lane {
            of: LaneOf::Threads(pid, None),
            name: if lanes.is_empty() {
                format!("{prefix}{comm}")
            } else {
                format!("{prefix}other threads")
            },
            spans: Vec::new(),
        });
    }
    lanes
}

fn span_of(st: &Stall) -> (f64, f64) {
    let from = st.ev.start_ns as f64 / 1e9;
    (from, from + st.ev.dur() as f64 / 1e9)
}

/// Per cause of `stalls` (the span's): how many stalls it headlines and
/// its time by shares (s), in `Cause::ALL` order — the lanes' legend,
/// tallied by `cause_totals` like the text and the summary, so they agree
/// (whole stalls, not their clipped bars).
pub fn cause_legend(stalls: &[&Stall]) -> Vec<(Cause, u64, f64)> {
    let totals = cause_totals(stalls.iter().copied());
    Cause::ALL
        .iter()
        .filter_map(|c| totals.get(c).map(|t| (*c, t.count, t.ms / 1e3)))
        .collect()
}

/// A lane as the chart draws it: per cause present (in `Cause::ALL`
/// order) its spans, overlapping ones merged into one `(from_s, to_s)` —
/// 500 throttle sleeps of four threads become one band, and each cause
/// gets its own strip of the lane, so a long sync under them stays whole.
pub fn bands(lane: &Lane) -> Vec<(Cause, Vec<(f64, f64)>)> {
    Cause::ALL
        .iter()
        .filter_map(|&c| {
            let mut out: Vec<(f64, f64)> = Vec::new();
            // `lane.spans` is by start, so one pass merges.
            for s in lane.spans.iter().filter(|s| s.cause == c) {
                match out.last_mut() {
                    Some(last) if s.from_s <= last.1 => last.1 = last.1.max(s.to_s),
                    _ => out.push((s.from_s, s.to_s)),
                }
            }
            (!out.is_empty()).then_some((c, out))
        })
        .collect()
}

/// The chart colour of a cause (RGB), the same in every SVG and close to
/// the dashboard's terminal colours.
pub fn cause_rgb(c: Cause) -> (u8, u8, u8) {
    match c {
        Cause::DirtyThrottle => (214, 39, 40),
        Cause::WritebackWait => (190, 60, 190),
        Cause::Sync => (235, 160, 0),
        Cause::JournalFull => (0, 170, 190),
        Cause::Device => (40, 90, 200),
        Cause::Fault => (60, 160, 60),
        Cause::AppDelay => (140, 86, 75),
        Cause::Unknown => (150, 150, 150),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cause::{Attribution, Evidence};
    use crate::model::ops::OpKind;
    use crate::model::stall::Blocked;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("#{i}")).collect()
    }

    fn stall(who: Who, start_s: f64, dur_s: f64, cause: Cause) -> Stall {
        Stall {
            ev: Blocked {
                who,
                op: OpKind::Write,
                start_ns: (start_s * 1e9) as u64,
                dur_ns: Some((dur_s * 1e9) as u64),
                stack: None,
                call: None,
                blocked_ns: None,
                behind: None,
            },
            why: Attribution::high(cause, Evidence::default()),
        }
    }

    #[test]
    fn stalls_become_spans_in_their_own_lane_clipped_to_the_span() {
        let w = |target| Who::Writer { target, thread: 0 };
        let stalls = [
            stall(w(0), 5.0, 13.0, Cause::Sync),
            stall(w(1), 20.0, 0.2, Cause::DirtyThrottle),
            stall(w(0), 58.0, 4.0, Cause::DirtyThrottle),
            stall(w(0), 90.0, 1.0, Cause::Sync),
        ];
        let all: Vec<&Stall> = stalls.iter().collect();
        let lanes = stall_lanes(&all, &names(2), &[], 0.0, 60.0);
        assert_eq!(lanes.len(), 2);
        let l0 = &lanes[0].spans;
        assert_eq!(l0.len(), 3, "every stall given is in its lane");
        assert_eq!((l0[0].from_s, l0[0].to_s), (5.0, 18.0), "13 s long");
        assert_eq!(
            (l0[1].from_s, l0[1].to_s),
            (58.0, 60.0),
            "clipped at the end"
        );
        assert_eq!(
            (l0[2].from_s, l0[2].to_s),
            (60.0, 60.0),
            "one begun after the end is a sliver at the end"
        );
        assert_eq!(lanes[1].spans.len(), 1, "target 1's stall in its lane");
        let legend = cause_legend(&all);
        assert_eq!(legend[0].0, Cause::DirtyThrottle);
        assert_eq!(legend[0].1, 2);
        assert!(
            (legend[1].2 - 14.0).abs() < 1e-9,
            "sync: whole stalls, as the summary counts them"
        );
    }

    #[test]
    fn overlapping_stalls_merge_per_cause_and_each_cause_keeps_its_band() {
        let w = |thread| Who::Writer { target: 0, thread };
        // Four threads throttled in turn, overlapping, from 1 s to ~6 s,
        // while thread 4 is in a 10 s sync; a later throttle apart.
        let mut stalls: Vec<Stall> = (0..20)
            .map(|i| {
                stall(
                    w(i % 4),
                    1.0 + f64::from(i) * 0.25,
                    0.4,
                    Cause::DirtyThrottle,
                )
            })
            .collect();
        stalls.push(stall(w(4), 2.0, 10.0, Cause::Sync));
        stalls.push(stall(w(0), 20.0, 0.2, Cause::DirtyThrottle));
        let all: Vec<&Stall> = stalls.iter().collect();
        let lanes = stall_lanes(&all, &names(1), &[], 0.0, 30.0);
        assert_eq!(lanes[0].spans.len(), 22, "every stall is a span");
        let b = bands(&lanes[0]);
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!(b[0].0, Cause::DirtyThrottle);
        let throttle = &b[0].1;
        assert_eq!(
            throttle.len(),
            2,
            "one band, then the one apart: {throttle:?}"
        );
        assert!((throttle[0].0 - 1.0).abs() < 1e-9);
        assert!((throttle[0].1 - (1.0 + 19.0 * 0.25 + 0.4)).abs() < 1e-6);
        assert_eq!(b[1].0, Cause::Sync);
        assert_eq!(b[1].1.len(), 1);
        assert!(
            (b[1].1[0].1 - b[1].1[0].0 - 10.0).abs() < 1e-6,
            "the sync whole"
        );
        let legend = cause_legend(&all);
        assert_eq!(legend[0].1, 21, "the legend counts stalls, not bands");
    }

    #[test]
    fn an_observed_process_gets_a_lane_per_most_stalled_thread_name() {
        let t = |tid: u32, name: &str| Who::Process {
            pid: 7,
            comm: "db_bench".into(),
            tid,
            thread_comm: name.into(),
        };
        let mut stalls = vec![
            stall(t(1, "db_bench"), 1.0, 3.0, Cause::Sync),
            stall(t(2, "rocksdb:high"), 1.0, 2.5, Cause::Sync),
            stall(t(3, "rocksdb:low"), 5.0, 4.0, Cause::Sync),
        ];
        for (i, n) in ["a", "b", "c"].iter().enumerate() {
            stalls.push(stall(t(10 + i as u32, n), 9.0, 0.1, Cause::Fault));
        }
        let all: Vec<&Stall> = stalls.iter().collect();
        let lanes = stall_lanes(&all, &[], &[(7, "db_bench".into())], 0.0, 60.0);
        let names: Vec<&str> = lanes.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "rocksdb:low",
                "db_bench",
                "rocksdb:high",
                "a",
                "other threads"
            ]
        );
        assert_eq!(lanes[4].spans.len(), 2, "b and c share the last lane");
        // A quiet process still has its lane.
        let quiet = stall_lanes(&[], &[], &[(8, "etcd".into())], 0.0, 60.0);
        assert_eq!(quiet.len(), 1);
        assert_eq!(quiet[0].name, "etcd");
    }
}
