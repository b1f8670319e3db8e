//! An observed thread's stall is exactly one system call: its start and
//! end are the call's entry and exit, and every call that kept the thread
//! blocked past the threshold is one stall. Truth comes from the kernel
//! through an independent reader (tests/common/syscall_truth.rs: its own
//! tracefs instance, raw_syscalls enter/exit paired per thread, D time from
//! sched_switch/sched_wakeup), sharing no code with stallscope.
//!
//! How a stall is matched to a call: the stall's `t_s` is on the run's
//! clock (CLOCK_MONOTONIC minus the run's start, which stallscope does not
//! print), so the offset is estimated from the data: every (stall, call)
//! pair of the same thread and name with durations within 10 % proposes
//! `call.start − t_s`; the proposal most stalls agree with (±2 ms) wins,
//! refined to the median of its agreeing pairs, and must lie between the
//! spawn of stallscope and its first `observed` line. Then a stall and a
//! call are candidates when they have the same tid and syscall name, starts
//! within max(1 ms, 10 % of the call) and durations within max(1 ms, 10 %).
//! (a) every call blocked ≥ 110 ms (the truth's D time inside it; a call
//! that long but partly runnable behind the busy CPUs, blocked less than
//! the threshold, is by definition not a stall) inside the run's window
//! (from stallscope's first `observed` line to 0.5 s before its run's
//! end) has exactly one candidate, with `bounds: "syscall"`; (b) every
//! `bounds: "syscall"` stall of the thread has exactly one candidate among
//! the calls of ≥ 90 ms; (c) at least 10 calls were required by (a), or
//! the load was too light; (d) a matched stall's `blocked_ms` is the
//! call's D time, within max(1 ms, 10 %).
//! Printed, not asserted: `bounds: "gap"` stalls against the kernel's D
//! time in their span (`gap_report`).

mod common;

use common::observer::Observer;
use common::syscall_truth::{Call, SyscallTruth};
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

const THRESHOLD_MS: f64 = 100.0;
/// A call blocked this long must be one stall.
const MUST_MS: f64 = 110.0;
/// A stall must be a call at least this long.
const MAY_MS: f64 = 90.0;
/// At least this many calls must be required, or the load was too light.
const MIN_CALLS: usize = 10;

/// The capped labs share the machine's dirty limits and disk: one test at
/// a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One `stall` line of an observed thread, as the test reads it.
#[derive(Clone, Debug)]
struct Stall {
    tid: u32,
    bounds: String,
    syscall: Option<String>,
    /// Run clock, ns (from `t_s`, printed to the ms).
    start_ns: i64,
    dur_ns: u64,
    blocked_ms: Option<f64>,
}

fn stalls_of(lines: &[Value]) -> Vec<Stall> {
    lines
        .iter()
        .filter(|l| l["type"] == "stall" && l["tid"].is_u64())
        .map(|l| Stall {
            tid: l["tid"].as_u64().unwrap() as u32,
            bounds: l["bounds"].as_str().unwrap_or("<none>").to_string(),
            syscall: l["syscall"].as_str().map(str::to_string),
            start_ns: (l["t_s"].as_f64().unwrap() * 1e9).round() as i64,
            dur_ns: (l["duration_ms"].as_f64().unwrap() * 1e6).round() as u64,
            blocked_ms: l["blocked_ms"].as_f64(),
        })
        .collect()
}

fn tol_ns(call_dur_ns: u64) -> u64 {
    (call_dur_ns / 10).max(1_000_000)
}

/// Same thread and call, durations within tolerance (the clock aside).
fn alike(s: &Stall, c: &Call) -> bool {
    s.tid == c.tid
        && s.syscall.as_deref() == Some(c.name)
        && s.dur_ns.abs_diff(c.dur_ns()) <= tol_ns(c.dur_ns())
}

/// A stall and a call that may be the same, with the run clock at mono
/// `offset` ns.
fn candidate(s: &Stall, c: &Call, offset: i64) -> bool {
    let start = s.start_ns + offset;
    alike(s, c) && (c.start_ns as i64).abs_diff(start) <= tol_ns(c.dur_ns())
}

/// The mono time of the run clock's 0, from the data (see the file's
/// comment), and how many stalls agree with it.
fn estimate_offset(stalls: &[Stall], calls: &[Call]) -> Option<(i64, usize)> {
    let pairs: Vec<(usize, i64)> = stalls
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            calls
                .iter()
                .filter(move |c| alike(s, c))
                .map(move |c| (i, c.start_ns as i64 - s.start_ns))
        })
        .collect();
    let agreeing = |o: i64| -> Vec<i64> {
        let mut best: std::collections::BTreeMap<usize, i64> = Default::default();
        for &(i, p) in &pairs {
            if p.abs_diff(o) <= 2_000_000 {
                let e = best.entry(i).or_insert(p);
                if p.abs_diff(o) < e.abs_diff(o) {
                    *e = p;
                }
            }
        }
        best.into_values().collect()
    };
    let (_, o) = pairs
        .iter()
        .map(|&(_, o)| (agreeing(o).len(), o))
        .max_by_key(|&(n, o)| (n, std::cmp::Reverse(o)))?;
    let mut agree = agreeing(o);
    agree.sort_unstable();
    Some((agree[agree.len() / 2], agree.len()))
}

/// What the comparison found; `failures` says what broke (a), (b), (d).
#[derive(Debug, Default)]
struct Matching {
    calls_long: usize,
    required: usize,
    long_not_blocked: usize,
    syscall_stalls: usize,
    other_stalls: usize,
    one_to_one: usize,
    worst_dur_err_ms: f64,
    worst_start_err_ms: f64,
    worst_blocked_err_ms: f64,
    failures: Vec<String>,
}

/// Compares the stalls of thread `tid` (None: of every thread) with the
/// truth's calls; calls count for (a) when they lie in `window` (mono ns).
fn compare(
    calls: &[Call],
    stalls: &[Stall],
    offset: i64,
    tid: Option<u32>,
    window: (u64, u64),
    born: &HashMap<u32, u64>,
) -> Matching {
    let ms = |ns: u64| ns as f64 / 1e6;
    let ours = |t: u32| tid.is_none_or(|w| w == t);
    let calls: Vec<&Call> = calls.iter().filter(|c| ours(c.tid)).collect();
    let (sys, other): (Vec<&Stall>, Vec<&Stall>) = stalls
        .iter()
        .filter(|s| ours(s.tid))
        .partition(|s| s.bounds == "syscall");
    let mut m = Matching {
        syscall_stalls: sys.len(),
        other_stalls: other.len(),
        ..Matching::default()
    };
    let inside = |c: &Call| c.start_ns >= window.0 && c.end_ns <= window.1;
    let long = |c: &Call| ms(c.dur_ns()) >= MUST_MS && inside(c);
    m.calls_long = calls.iter().filter(|c| long(c)).count();
    let must: Vec<&&Call> = calls
        .iter()
        .filter(|c| ms(c.blocked_ns) >= MUST_MS && inside(c))
        .collect();
    m.required = must.len();
    m.long_not_blocked = m.calls_long - m.required;
    // (a): each required call is exactly one stall, bounded by the call.
    for c in &must {
        let of: Vec<&Stall> = stalls.iter().filter(|s| candidate(s, c, offset)).collect();
        let ok = of.len() == 1 && of[0].bounds == "syscall";
        if !ok {
            let age = born.get(&c.tid).map_or(String::new(), |b| {
                format!(
                    ", its thread forked {:.1} ms before",
                    (c.start_ns as f64 - *b as f64) / 1e6
                )
            });
            m.failures.push(format!(
                "(a) {} of tid {} at mono {:.3} s{age}, {:.1} ms ({:.1} ms blocked): {} stalls match {:?}; \
                 nearest stalls {:?}",
                c.name,
                c.tid,
                c.start_ns as f64 / 1e9,
                ms(c.dur_ns()),
                ms(c.blocked_ns),
                of.len(),
                of,
                nearest(stalls, c, offset)
            ));
        }
    }
    // (b): each syscall stall is exactly one call of at least MAY_MS.
    for s in &sys {
        let of: Vec<&&Call> = calls
            .iter()
            .filter(|c| ms(c.dur_ns()) >= MAY_MS && candidate(s, c, offset))
            .collect();
        if of.len() != 1 {
            m.failures.push(format!(
                "(b) stall {s:?} (mono start {:.3} s) matches {} calls: {of:?}",
                (s.start_ns + offset) as f64 / 1e9,
                of.len()
            ));
            continue;
        }
        let c = of[0];
        let back = stalls.iter().filter(|t| candidate(t, c, offset)).count();
        if back == 1 {
            m.one_to_one += 1;
        }
        m.worst_dur_err_ms = m.worst_dur_err_ms.max(ms(s.dur_ns.abs_diff(c.dur_ns())));
        let st = (s.start_ns + offset) as u64;
        m.worst_start_err_ms = m.worst_start_err_ms.max(ms(st.abs_diff(c.start_ns)));
        // (d): its blocked time is the kernel's D time inside the call.
        let err = s.blocked_ms.map(|b| (b - ms(c.blocked_ns)).abs());
        m.worst_blocked_err_ms = m.worst_blocked_err_ms.max(err.unwrap_or(0.0));
        if err.is_none_or(|e| e > ms(tol_ns(c.blocked_ns))) {
            m.failures.push(format!(
                "(d) stall {s:?} says blocked_ms {:?}, the kernel {:.3} ms in D in the call",
                s.blocked_ms,
                ms(c.blocked_ns)
            ));
        }
    }
    m
}

/// The stalls of the call's thread that start nearest to it (for a
/// failure message).
fn nearest<'a>(stalls: &'a [Stall], c: &Call, offset: i64) -> Vec<&'a Stall> {
    let mut of: Vec<&Stall> = stalls.iter().filter(|s| s.tid == c.tid).collect();
    of.sort_by_key(|s| (s.start_ns + offset).abs_diff(c.start_ns as i64));
    of.truncate(2);
    of
}

fn table(name: &str, m: &Matching) {
    eprintln!(
        "{name}: calls >= {MUST_MS} ms {} (blocked >= {MUST_MS} ms: {}, long but not blocked enough: {}) | \
         stalls: {} syscall-bounded, {} other | matched one-to-one {} | worst error: duration {:.3} ms, \
         start {:.3} ms, blocked {:.3} ms",
        m.calls_long,
        m.required,
        m.long_not_blocked,
        m.syscall_stalls,
        m.other_stalls,
        m.one_to_one,
        m.worst_dur_err_ms,
        m.worst_start_err_ms,
        m.worst_blocked_err_ms
    );
}

/// Asserts (a), (b), (c) of `m` (named `name`), with the figures.
fn assert_matching(name: &str, m: &Matching) {
    assert!(
        m.failures.is_empty(),
        "{name}: {} mismatches (of {} required calls, {} syscall stalls):\n{}",
        m.failures.len(),
        m.required,
        m.syscall_stalls,
        m.failures.join("\n")
    );
    assert!(
        m.required >= MIN_CALLS,
        "{name}: the load was too light: {} calls blocked >= {MUST_MS} ms ({} >= {MUST_MS} ms long), \
         need {MIN_CALLS}",
        m.required,
        m.calls_long
    );
}

/// STALLSCOPE_TEST_KEEP=DIR keeps what stallscope printed and the truth's
/// calls (tid, name, start and end mono ns, blocked ns), to look at.
fn keep(name: &str, lines: &[Value], calls: &[Call], offset: i64) {
    let Ok(dir) = std::env::var("STALLSCOPE_TEST_KEEP") else {
        return;
    };
    let d = std::path::Path::new(&dir);
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let _ = std::fs::write(d.join(format!("{name}.stallscope.jsonl")), text);
    let mut tsv =
        format!("# run clock 0 = mono {offset} ns\ntid\tname\tstart_ns\tend_ns\tblocked_ns\n");
    for c in calls {
        tsv.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\n",
            c.tid, c.name, c.start_ns, c.end_ns, c.blocked_ns
        ));
    }
    let _ = std::fs::write(d.join(format!("{name}.truth.tsv")), tsv);
}

/// stallscope's run with the truth around it.
struct Run {
    lines: Vec<Value>,
    truth: common::syscall_truth::Calls,
    /// Mono ns at stallscope's spawn and at its first `observed` line.
    spawned: u64,
    attached: u64,
}

/// Runs `stallscope run --format jsonl ARGS` while `truth` records; once
/// it is attached, `during` runs; then it is stopped with SIGINT
/// (`interrupt`) or waited for, and the truth after it.
fn observe_with_truth(
    args: &[&str],
    truth: SyscallTruth,
    during: impl FnOnce(),
    interrupt: bool,
) -> Run {
    let spawned = mono_ns();
    let mut obs = Observer::start(args);
    obs.wait_attached(30);
    let attached = mono_ns();
    during();
    let out = obs.stop(interrupt);
    let got = truth.stop();
    assert!(out.success, "stallscope: {}", out.stderr);
    eprintln!("stallscope stderr: {}", out.stderr);
    assert_eq!(got.lost, 0, "the truth lost events");
    Run {
        lines: out.lines,
        truth: got,
        spawned,
        attached,
    }
}

/// The stalls of `run` against its truth, for the threads `tid` (None:
/// all), printed as a table (and kept, see `keep`).
fn judge(name: &str, run: &Run, tid: Option<u32>) -> Matching {
    let calls = &run.truth.calls;
    let stalls = stalls_of(&run.lines);
    let threads: std::collections::BTreeSet<u32> = calls.iter().map(|c| c.tid).collect();
    eprintln!(
        "{name} truth: {} calls of {} threads ({} unpaired at the edges); {} stalls printed",
        calls.len(),
        threads.len(),
        run.truth.unpaired,
        stalls.len()
    );
    let offset = offset_checked(&stalls, calls, run.spawned, run.attached);
    let m = compare(
        calls,
        &stalls,
        offset,
        tid,
        window(&run.lines, offset, run.attached),
        &run.truth.born,
    );
    keep(&name.replace(' ', "_"), &run.lines, calls, offset);
    table(name, &m);
    gap_report(name, run, &stalls, offset, tid);
    m
}

/// Not asserted, printed for whoever reads the run: the stalls of the
/// threads `tid` bounded by gaps between blocks (`bounds: "gap"`), the
/// kernel's D time inside each one's span (the truth keeps every D
/// stretch), and those that share D time with a traced call (its blocks
/// inside a write-path call should have made it a `syscall` stall).
fn gap_report(name: &str, run: &Run, stalls: &[Stall], offset: i64, tid: Option<u32>) {
    let gaps: Vec<&Stall> = stalls
        .iter()
        .filter(|s| s.bounds == "gap" && tid.is_none_or(|t| t == s.tid))
        .collect();
    let (mut unbacked, mut crossing) = (0, 0);
    for s in &gaps {
        let from = (s.start_ns + offset).max(0) as u64;
        let to = from + s.dur_ns;
        let d_ms = run.truth.blocked_in(s.tid, from, to) as f64 / 1e6;
        let in_calls: Vec<String> = run
            .truth
            .calls
            .iter()
            .filter(|c| c.tid == s.tid && c.start_ns < to && c.end_ns > from && c.blocked_ns > 0)
            .map(|c| {
                format!(
                    "{} at {:+.1} ms, {:.1} ms ({:.1} blocked)",
                    c.name,
                    (c.start_ns as f64 - from as f64) / 1e6,
                    c.dur_ns() as f64 / 1e6,
                    c.blocked_ns as f64 / 1e6
                )
            })
            .collect();
        let stall_blocked = s.blocked_ms.unwrap_or(s.dur_ns as f64 / 1e6);
        unbacked += usize::from(d_ms < 0.5 * stall_blocked);
        crossing += usize::from(!in_calls.is_empty());
        eprintln!(
            "  gap stall tid {} at mono {:.3} s, {:.1} ms ({stall_blocked:.1} ms blocked): the kernel saw \
             {d_ms:.1} ms in D in its span; calls in it that blocked: {in_calls:?}",
            s.tid,
            from as f64 / 1e9,
            s.dur_ns as f64 / 1e6
        );
    }
    eprintln!(
        "{name}: {} gap stalls, {unbacked} with less than half their blocked time in D by the kernel, \
         {crossing} sharing D time with a traced call",
        gaps.len()
    );
}

/// The mono window stallscope surely saw whole: from its first observed
/// line to the end of its run (summary `duration_s`) less 0.5 s.
fn window(lines: &[Value], offset: i64, attached: u64) -> (u64, u64) {
    let run_s = lines
        .iter()
        .find(|l| l["type"] == "summary")
        .and_then(|l| l["duration_s"].as_f64())
        .expect("a summary line with duration_s");
    let end = offset + ((run_s - 0.5) * 1e9) as i64;
    (attached, end.max(0) as u64)
}

/// Offset estimated and checked against the spawn/attach bounds.
fn offset_checked(stalls: &[Stall], calls: &[Call], spawned: u64, attached: u64) -> i64 {
    let sys: Vec<Stall> = stalls
        .iter()
        .filter(|s| s.bounds == "syscall")
        .cloned()
        .collect();
    let (offset, agree) = estimate_offset(&sys, calls).unwrap_or_else(|| {
        panic!(
            "no stall is like any call: {} syscall stalls of {} stalls, {} calls; first stalls {:?}",
            sys.len(),
            stalls.len(),
            calls.len(),
            stalls.iter().take(5).collect::<Vec<_>>()
        )
    });
    eprintln!(
        "run clock 0 = mono {:.6} s ({agree} of {} syscall stalls agree), {:.1} ms after spawn",
        offset as f64 / 1e9,
        sys.len(),
        (offset - spawned as i64) as f64 / 1e6
    );
    assert!(
        offset >= spawned as i64 - 2_000_000 && offset <= attached as i64,
        "the estimated run start {offset} lies between the spawn {spawned} and the first observed line {attached}"
    );
    offset
}

#[test]
fn a_log_writers_blocked_write_and_fdatasync_calls_are_each_exactly_one_stall_bounded_by_entry_and_exit(
) {
    let test = "a_log_writers_blocked_write_and_fdatasync_calls_are_each_exactly_one_stall_bounded_by_entry_and_exit";
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !common::need_root(test) {
        return;
    }
    if !common::have("cc") {
        common::skip(test, "no C compiler (apt-get install gcc)");
        return;
    }
    let Some(lab) = common::capped(test, "ext4", 16) else {
        return;
    };
    // Buffered dd kept 256 MiB dirty in the cap's queue and made each
    // fdatasync wait ~9 s behind it (4 calls in 20 s): dd competes with
    // direct I/O instead, over a preallocated file.
    let load =
        common::log_load::LogLoad::start(&lab.fs.mount, 256, "conv=notrunc oflag=direct", true, 2);
    std::thread::sleep(Duration::from_secs(2));
    let pid = load.writer_pid();
    let truth = SyscallTruth::start(
        &[pid],
        &["write", "pwrite64", "fsync", "fdatasync", "ftruncate"],
    );
    let threshold = format!("{THRESHOLD_MS}ms");
    let run = observe_with_truth(
        &[
            "--observe",
            &pid.to_string(),
            "--stall-threshold",
            &threshold,
            "--duration",
            "20s",
        ],
        truth,
        || {},
        false,
    );
    drop(load);
    drop(lab);
    let m = judge("log writer", &run, Some(pid));
    assert_matching("log writer", &m);
}

#[test]
fn the_matching_pairs_calls_and_stalls_one_to_one_and_finds_the_clock_offset() {
    let call = |name: &'static str, start_ms: u64, dur_ms: u64, blocked_ms: u64| Call {
        tid: 7,
        name,
        start_ns: start_ms * 1_000_000,
        end_ns: (start_ms + dur_ms) * 1_000_000,
        blocked_ns: blocked_ms * 1_000_000,
    };
    let base_ms = 5_000_000;
    let calls = vec![
        call("write", base_ms + 1_000, 300, 290),
        call("fdatasync", base_ms + 1_300, 600, 598),
        call("fdatasync", base_ms + 1_900, 95, 95),
        call("fdatasync", base_ms + 3_000, 150, 60),
        call("write", base_ms + 4_000, 20, 0),
    ];
    let stall = |name: &str, run_ms: i64, dur_ms: f64, blocked_ms: f64| Stall {
        tid: 7,
        bounds: "syscall".into(),
        syscall: Some(name.into()),
        start_ns: run_ms * 1_000_000,
        dur_ns: (dur_ms * 1e6) as u64,
        blocked_ms: Some(blocked_ms),
    };
    // The run started at mono base + 500 ms.
    let stalls = vec![
        stall("write", 500, 300.2, 290.1),
        stall("fdatasync", 800, 599.9, 597.8),
        stall("fdatasync", 1_400, 95.0, 95.0),
    ];
    let (off, agree) = estimate_offset(&stalls, &calls).unwrap();
    assert_eq!((off, agree), ((base_ms as i64 + 500) * 1_000_000, 3));
    let judge =
        |stalls: &[Stall]| compare(&calls, stalls, off, Some(7), (0, u64::MAX), &HashMap::new());
    let m = judge(&stalls);
    assert!(m.failures.is_empty(), "{:?}", m.failures);
    assert_eq!((m.required, m.long_not_blocked, m.one_to_one), (2, 1, 3));
    // A missing stall breaks (a), a stall of no call breaks (b), one
    // call split in two stalls breaks both, a wrong blocked time (d).
    let m = judge(&stalls[1..]);
    assert_eq!(m.failures.len(), 1, "{:?}", m.failures);
    let mut extra = stalls.clone();
    extra.push(stall("write", 3_000, 200.0, 200.0));
    assert_eq!(judge(&extra).failures.len(), 1);
    let mut split = stalls[1..].to_vec();
    split.push(stall("write", 500, 150.0, 150.0));
    split.push(stall("write", 650, 150.0, 140.0));
    let m = judge(&split);
    assert_eq!(m.failures.len(), 3, "{:?}", m.failures);
    let mut wrong = stalls.clone();
    wrong[1].blocked_ms = Some(400.0);
    let m = judge(&wrong);
    assert!(
        m.failures.len() == 1 && m.failures[0].starts_with("(d)"),
        "{:?}",
        m.failures
    );
}

#[test]
fn the_truth_reads_raw_syscall_and_scheduler_lines() {
    use common::syscall_truth::{parse_line, Ev, Pairing};
    let lines = [
        "              dd-29424   [001] .....  9202.625710: sys_enter: NR 75 (1, 7fa8ad839000, 100000, 7fa8ad9b64f0, ffffffff, 0)",
        " my-log-w r-29424   [001] d..2.  9202.625800: sched_switch: prev_comm=dd prev_pid=29424 prev_prio=120 prev_state=D ==> next_comm=swapper/1 next_pid=0 next_prio=120",
        "          <idle>-0       [000] dNh2.  9202.725800: sched_wakeup: comm=dd pid=29424 prio=120 target_cpu=001",
        "              dd-29424   [001] .....  9202.825907: sys_exit: NR 75 = 0",
        "CPU:1 [LOST 12 EVENTS]",
        "            bash-1848    [000] .....  9202.900000: sys_exit: NR 1 = 2",
        "        postgres-9001    [000] .....  9203.000001: sched_process_fork: comm=postgres pid=9001 child_comm=postgres child_pid=9550",
    ];
    let evs: Vec<Ev> = lines.iter().filter_map(|l| parse_line(l)).collect();
    assert_eq!(
        evs[0],
        Ev::Enter {
            tid: 29424,
            t_ns: 9_202_625_710_000,
            nr: 75
        }
    );
    assert_eq!(
        evs[1],
        Ev::Block {
            tid: 29424,
            t_ns: 9_202_625_800_000
        }
    );
    assert_eq!(evs[4], Ev::Lost(12));
    let mut p = Pairing::default();
    for e in evs {
        p.add(e);
    }
    assert_eq!((p.lost, p.unpaired, p.calls.len()), (12, 1, 1));
    assert_eq!(p.born.get(&9550), Some(&9_203_000_001_000));
    let got = common::syscall_truth::Calls {
        blocks: p.blocks.clone(),
        ..Default::default()
    };
    assert_eq!(p.blocks.len(), 1);
    // Half of the D stretch (9202.6258 .. 9202.7258) lies in the span.
    let t = 9_202_675_800_000;
    assert_eq!(got.blocked_in(29424, t, t + 1_000_000_000), 50_000_000);
    assert_eq!(got.blocked_in(1, 0, u64::MAX), 0);
    let c = &p.calls[0];
    assert_eq!(
        (c.tid, c.dur_ns(), c.blocked_ns),
        (29424, 200_197_000, 100_000_000)
    );
    if std::env::consts::ARCH == "x86_64" {
        assert_eq!(c.name, "fdatasync");
    }
}

/// pg_stat_wal's sync figures: (wal_sync, wal_sync_time ms, wal_write,
/// wal_write_time ms).
fn wal_stats(server: &common::pg::PgServer) -> (u64, f64, u64, f64) {
    let row =
        server.query("SELECT wal_sync, wal_sync_time, wal_write, wal_write_time FROM pg_stat_wal");
    let f: Vec<&str> = row.split('|').collect();
    assert_eq!(f.len(), 4, "pg_stat_wal: {row}");
    (
        f[0].parse().unwrap(),
        f[1].parse().unwrap(),
        f[2].parse().unwrap(),
        f[3].parse().unwrap(),
    )
}

/// Count and total ms of the truth's calls named `name`.
fn calls_named(calls: &[Call], name: &str) -> (usize, f64) {
    let of: Vec<&Call> = calls.iter().filter(|c| c.name == name).collect();
    let ms = of.iter().map(|c| c.dur_ns() as f64 / 1e6).sum();
    (of.len(), ms)
}

#[test]
fn postgres_threads_blocked_calls_under_pgbench_are_each_exactly_one_stall_bounded_by_entry_and_exit(
) {
    let test = "postgres_threads_blocked_calls_under_pgbench_are_each_exactly_one_stall_bounded_by_entry_and_exit";
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !common::need_root(test) {
        return;
    }
    if !common::pg::have_postgres() {
        common::skip(
            test,
            "PostgreSQL or pgbench missing (apt-get install postgresql)",
        );
        return;
    }
    let lab = common::pg::PgLab::start(10, 20);
    let server = &lab.server;
    server.psql("ALTER SYSTEM SET track_wal_io_timing = on");
    // Checkpoints by WAL volume too (every 32 MB), beside every 30 s: their
    // fsyncs under the cap are most of the long calls.
    server.psql("ALTER SYSTEM SET max_wal_size = '32MB'");
    server.psql("SELECT pg_reload_conf()");
    server.psql("SELECT pg_stat_reset_shared('wal')");
    let postmaster = server.pid();
    // Its children now (checkpointer, WAL writer, ...) by tid; backends
    // forked from here on follow (event-fork).
    let tids = common::syscall_truth::tree_tids(postmaster);
    let truth = SyscallTruth::start(&tids, common::syscall_truth::ALL_CALLS);
    let threshold = format!("{THRESHOLD_MS}ms");
    let mut bench = None;
    let run = observe_with_truth(
        &[
            "--observe",
            &postmaster.to_string(),
            "--stall-threshold",
            &threshold,
            "--duration",
            "120s",
        ],
        truth,
        || {
            bench = Some(server.pgbench(&["-c", "8", "-j", "2", "-T", "40"]));
            std::thread::sleep(Duration::from_millis(500));
        },
        true,
    );
    let wal = wal_stats(server);
    drop(lab);
    let bench = bench.unwrap();
    assert!(
        bench.status.success(),
        "pgbench: {}",
        String::from_utf8_lossy(&bench.stderr)
    );
    let calls = &run.truth.calls;
    let (fds, fds_ms) = calls_named(calls, "fdatasync");
    let (fs, fs_ms) = calls_named(calls, "fsync");
    eprintln!(
        "postgres: truth fdatasync {fds} calls ({fds_ms:.0} ms), fsync {fs} ({fs_ms:.0} ms); \
         pg_stat_wal: wal_sync {} ({:.0} ms), wal_write {} ({:.0} ms)",
        wal.0, wal.1, wal.2, wal.3
    );
    let m = judge("postgres", &run, None);
    assert_matching("postgres", &m);
}
