//! The text of `trace_pipe`: the writeback events of our own instance
//! (and the scheduler's, as the kernel prints them), parsed by pure
//! functions tested on lines captured on real kernels
//! (`tests/fixtures/trace/`, `tests/fixtures/kernels/`).
//!
//! Units (include/trace/events/writeback.h): `pause`, `paused`, `period` are
//! jiffies converted with `* 1000 / HZ`, i.e. milliseconds with jiffy
//! granularity; `limit`, `setpoint`, `dirty` are pages. With `trace_clock=mono`
//! the timestamp column is CLOCK_MONOTONIC.

use crate::model::kernel::{Comm, TraceEvent, TraceKind};

/// Every writeback event name a kernel may print: the page wait was
/// `wait_on_page_writeback` from 5.2 to 5.15.
const TEXT_EVENTS: [&str; 4] = [
    "balance_dirty_pages",
    "folio_wait_writeback",
    "wait_on_page_writeback",
    "writeback_start",
];

/// Parses one line of `trace_pipe` in the default text format, e.g.
/// `  dd-12927  [000] .....  1221.221672: balance_dirty_pages: bdi 7:2: limit=...`.
/// None for other events, `LOST` notices and anything malformed.
pub fn parse_line(line: &str) -> Option<TraceEvent> {
    let line = line.trim_end_matches(['\n', '\r']);
    if let Some(ev) = parse_sched(line) {
        return Some(ev);
    }
    // The earliest `: <event>: ` splits header from payload; a task name (at
    // most 15 bytes) is too short to contain one.
    let (at, event) = TEXT_EVENTS
        .iter()
        .filter_map(|e| line.find(&format!(": {e}: ")).map(|i| (i, *e)))
        .min()?;
    let (tid, t_mono_ns) = parse_header(&line[..at])?;
    let payload = &line[at + event.len() + 4..];
    let (bdi, fields) = payload.strip_prefix("bdi ")?.split_once(": ")?;
    let bdi = bdi.to_string();
    let get = |key: &str| {
        fields
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    };
    let num = |key: &str| get(key)?.parse::<u64>().ok();
    let int = |key: &str| get(key)?.parse::<i64>().ok();
    let kind = match event {
        "balance_dirty_pages" => TraceKind::BalanceDirtyPages {
            bdi,
            limit: num("limit")?,
            setpoint: num("setpoint")?,
            dirty: num("dirty")?,
            pause_ms: int("pause")?,
            paused_ms: num("paused")?,
            period_ms: num("period")?,
        },
        "folio_wait_writeback" | "wait_on_page_writeback" => TraceKind::WaitWriteback {
            bdi,
            ino: num("ino")?,
            index: num("index")?,
        },
        _ => TraceKind::WritebackStart {
            bdi,
            reason: get("reason")?.to_string(),
            nr_pages: int("nr_pages")?,
        },
    };
    Some(TraceEvent {
        t_mono_ns,
        tid,
        kind,
    })
}

/// A sched_switch into D or S, or a sched_waking / sched_wakeup. Names
/// may hold spaces: a value runs to the next ` key=`.
fn parse_sched(line: &str) -> Option<TraceEvent> {
    let between = |p: &str, from: &str, to: &str| -> Option<String> {
        let start = p.find(from)? + from.len();
        let end = start + p[start..].find(to)?;
        Some(p[start..end].to_string())
    };
    if let Some(at) = line.find(": sched_switch: ") {
        let (_, t) = parse_header(&line[..at])?;
        let p = &line[at + 16..];
        let state = between(p, " prev_state=", " ==> ")?;
        let sleep = if state.contains('D') {
            false
        } else if state.starts_with('S') {
            true
        } else {
            return None;
        };
        return Some(TraceEvent {
            t_mono_ns: t,
            tid: between(p, " prev_pid=", " ")?.parse().ok()?,
            kind: TraceKind::SchedBlock {
                comm: Comm::new(&between(p, "prev_comm=", " prev_pid=")?),
                sleep,
            },
        });
    }
    let at = line
        .find(": sched_waking: ")
        .or_else(|| line.find(": sched_wakeup: "))?;
    let header = &line[..at];
    let (waker, t) = parse_header(header)?;
    let p = &line[at + 16..];
    Some(TraceEvent {
        t_mono_ns: t,
        tid: between(p, " pid=", " ")?.parse().ok()?,
        kind: TraceKind::SchedWake {
            waker,
            waker_comm: task_name(header).unwrap_or_default(),
            irq: in_hardirq(header),
        },
    })
}

/// Whether the event ran in a hardware interrupt: the irq-info column
/// after the CPU (`d.h2.`) has `h` (or `H`, hardirq in softirq) third.
fn in_hardirq(header: &str) -> bool {
    let Some(after_cpu) = header.rsplit_once("] ").map(|(_, r)| r) else {
        return false;
    };
    let mut tokens = after_cpu.split_whitespace();
    match (tokens.next(), tokens.next()) {
        (Some(flags), Some(_ts)) if flags.len() >= 4 => {
            matches!(flags.as_bytes()[2], b'h' | b'H')
        }
        _ => false,
    }
}

/// The task name of a header (`  postgres-1234  [001] ...`).
fn task_name(header: &str) -> Option<String> {
    let task = header.trim_start().split(" [").next()?.trim_end();
    let task = task.split(" (").next()?;
    Some(task.rsplit_once('-')?.0.to_string())
}

/// The count of a `CPU:1 [LOST 300 EVENTS]` notice: the ring buffer overran
/// and that many events are missing, so a quiet spell is not proof of calm.
pub fn parse_lost(line: &str) -> Option<u64> {
    let rest = line.trim().strip_prefix("CPU:")?;
    let (_, rest) = rest.split_once(" [LOST ")?;
    rest.strip_suffix(" EVENTS]")?.parse().ok()
}

/// `task-pid [(tgid)] [cpu] [flags] secs.frac` → (pid, ns). Parsed from the
/// right because task names may contain spaces, dashes and brackets.
fn parse_header(h: &str) -> Option<(u32, u64)> {
    let h = h.trim_end();
    let (rest, ts) = h.rsplit_once(char::is_whitespace)?;
    let t = parse_timestamp(ts)?;
    let cpu_at = rest.rmatch_indices('[').map(|(i, _)| i).find(|&i| {
        let after = &rest[i + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0
            && after[digits..].starts_with(']')
            && after[digits + 1..]
                .chars()
                .next()
                .is_none_or(char::is_whitespace)
    })?;
    let mut task = rest[..cpu_at].trim_end();
    if task.ends_with(')') {
        // options/record-tgid adds `(  tgid)` after task-pid.
        task = task[..task.rfind('(')?].trim_end();
    }
    let (_, pid) = task.rsplit_once('-')?;
    Some((pid.parse().ok()?, t))
}

/// `1221.181003` (seconds, any fraction up to ns) → nanoseconds.
fn parse_timestamp(ts: &str) -> Option<u64> {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, ""));
    if secs.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let frac_ns = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32)
    };
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::Path;

    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/trace")
            .join(name);
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn parse_all(name: &str) -> Vec<TraceEvent> {
        fixture(name)
            .lines()
            .map(|l| parse_line(l).unwrap_or_else(|| panic!("unparsed: {l}")))
            .collect()
    }

    #[test]
    fn balance_dirty_pages_lines() {
        let evs = parse_all("balance_dirty_pages.txt");
        assert_eq!(evs.len(), 11);
        assert_eq!(
            evs[1],
            TraceEvent {
                t_mono_ns: 1_221_221_672_000,
                tid: 12927,
                kind: TraceKind::BalanceDirtyPages {
                    bdi: "7:2".into(),
                    limit: 16384,
                    setpoint: 13312,
                    dirty: 10425,
                    pause_ms: 20,
                    paused_ms: 0,
                    period_ms: 20,
                },
            }
        );
        // A rate-limited pass that did not sleep has a negative pause.
        assert!(matches!(
            &evs[4].kind,
            TraceKind::BalanceDirtyPages { pause_ms: -4, paused_ms: 204, period_ms: 0, bdi, .. }
                if bdi == "254:0"
        ));
        assert!(matches!(
            &evs[10].kind,
            TraceKind::BalanceDirtyPages {
                pause_ms: 80,
                paused_ms: 84,
                ..
            }
        ));
    }

    #[test]
    fn task_names_with_spaces_dashes_and_unknown() {
        let evs = parse_all("balance_dirty_pages.txt");
        // "opt 49wlkyrk6tw-12937", "lto cgu.3-13068", "<...>-12945", "ss-w0-0-13091"
        assert_eq!(evs[5].tid, 12937);
        assert_eq!(evs[6].tid, 13068);
        assert_eq!(evs[7].tid, 12945);
        assert_eq!(evs[8].tid, 13091);
        let kw = "    kworker/u8:2-flush-7:1-123 [001] ...1.  5.5: writeback_start: \
                  bdi 7:1: sb_dev 0:0 nr_pages=1 sync_mode=0 kupdate=0 range_cyclic=1 \
                  background=1 reason=background cgroup_ino=1";
        let ev = parse_line(kw).unwrap();
        assert_eq!((ev.tid, ev.t_mono_ns), (123, 5_500_000_000));
        // record-tgid output and a bracket in the task name.
        let tgid = "  a [x]-b-77 (     70) [003] d..1. 1.000001: folio_wait_writeback: \
                    bdi 8:0: ino=5 index=6";
        let ev = parse_line(tgid).unwrap();
        assert_eq!((ev.tid, ev.t_mono_ns), (77, 1_000_001_000));
    }

    #[test]
    fn folio_wait_writeback_lines() {
        let evs = parse_all("folio_wait_writeback.txt");
        assert_eq!(evs.len(), 10);
        assert_eq!(
            evs[3],
            TraceEvent {
                t_mono_ns: 1_233_085_385_000,
                tid: 13062,
                kind: TraceKind::WaitWriteback {
                    bdi: "7:2".into(),
                    ino: 12,
                    index: 0,
                },
            }
        );
        assert!(evs
            .iter()
            .all(|e| matches!(e.kind, TraceKind::WaitWriteback { .. })));
    }

    #[test]
    fn writeback_start_lines() {
        let evs = parse_all("writeback_start.txt");
        let reasons: Vec<&str> = evs
            .iter()
            .map(|e| match &e.kind {
                TraceKind::WritebackStart { reason, .. } => reason.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            reasons,
            [
                "background",
                "background",
                "periodic",
                "periodic",
                "sync",
                "sync",
                "sync",
                "fs_free_space"
            ]
        );
        assert_eq!(
            evs[0].kind,
            TraceKind::WritebackStart {
                bdi: "254:0".into(),
                reason: "background".into(),
                nr_pages: i64::MAX,
            }
        );
        assert_eq!(evs[0].tid, 6683);
    }

    #[test]
    fn sleeps_in_s_and_d_and_who_woke_them() {
        let evs = parse_all("sched.txt");
        let kinds: Vec<_> = evs.iter().map(|e| (e.tid, e.kind.clone())).collect();
        let wake = |waker: u32, comm: &str, irq| TraceKind::SchedWake {
            waker,
            waker_comm: comm.into(),
            irq,
        };
        assert_eq!(
            kinds,
            [
                (
                    27574,
                    TraceKind::SchedBlock {
                        comm: "python3".into(),
                        sleep: true
                    }
                ),
                // A timer expiring on an idle CPU: in a hardware interrupt.
                (27574, wake(0, "<idle>", true)),
                // A thread waking another one from its own context.
                (27533, wake(27574, "python3", false)),
                (
                    13330,
                    TraceKind::SchedBlock {
                        comm: "dd".into(),
                        sleep: false
                    }
                ),
            ]
        );
    }

    #[test]
    fn other_lines_are_not_events() {
        let text = fixture("other.txt");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.iter().all(|l| parse_line(l).is_none()));
        assert_eq!(parse_lost(lines[0]), Some(300));
        assert_eq!(parse_lost(lines[1]), None);
        for bad in [
            "",
            "# tracer: nop",
            "  dd-1 [000] ..... 1.0: balance_dirty_pages: bdi 7:2: limit=x",
            "  dd-x [000] ..... 1.0: folio_wait_writeback: bdi 7:2: ino=1 index=2",
            "  dd-1 ..... 1.0: folio_wait_writeback: bdi 7:2: ino=1 index=2",
            "  dd-1 [000] ..... 1.0: folio_wait_writeback: ino=1 index=2",
        ] {
            assert_eq!(parse_line(bad), None, "{bad}");
        }
    }

    #[test]
    fn stream_parses_whatever_the_chunking() {
        let text = fixture("stream.txt");
        let whole: Vec<TraceEvent> = text.lines().filter_map(parse_line).collect();
        assert_eq!(whole.len(), text.lines().count());
        // drain's line assembly, fed in awkward chunk sizes.
        for chunk in [1, 7, 4096] {
            let mut partial = Vec::new();
            let mut got = Vec::new();
            for piece in text.as_bytes().chunks(chunk) {
                partial.extend_from_slice(piece);
                if let Some(nl) = partial.iter().rposition(|&b| b == b'\n') {
                    let done: Vec<u8> = partial.drain(..=nl).collect();
                    got.extend(
                        String::from_utf8_lossy(&done)
                            .lines()
                            .filter_map(parse_line),
                    );
                }
            }
            assert_eq!(got, whole, "chunk {chunk}");
        }
    }

    #[test]
    fn events_round_trip_through_json() {
        for ev in parse_all("writeback_start.txt") {
            let s = serde_json::to_string(&ev).unwrap();
            assert_eq!(serde_json::from_str::<TraceEvent>(&s).unwrap(), ev);
        }
    }
}
