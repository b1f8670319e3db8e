//! #22: the kernels our users run, from their own files. For each kernel
//! under `tests/fixtures/kernels/<version>/` (format files and stacks of
//! that version, see `SOURCES.md` there for where each comes from): the
//! events we read are found under that kernel's names, every binary record
//! we read decodes at that kernel's offsets, every text line parses, and
//! every stack of a write-path wait maps to its cause.

use stallscope::model::cause::Cause;
use stallscope::model::kernel::{TraceEvent, TraceKind};
use stallscope::source::trace::sched_raw::{parse_page, SchedFormat, StateBits};
use stallscope::source::trace::{parse_line, TraceFeatures};
use std::fs;
use std::path::{Path, PathBuf};

/// The kernels the issue names, with the page-wait event each has.
const KERNELS: [(&str, Option<&str>); 4] = [
    ("4.18", None),
    ("5.4", Some("wait_on_page_writeback")),
    ("5.15", Some("wait_on_page_writeback")),
    ("6.1", Some("folio_wait_writeback")),
];

/// How each kernel's sched_switch records a sleep in D (`prev_state`):
/// 4.18 records `1 << task_state_index` (SOURCES.md).
fn d_state(version: &str) -> u8 {
    if version == "4.18" {
        4
    } else {
        2
    }
}

fn dir(version: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kernels")
        .join(version)
}

#[test]
fn each_kernel_has_the_events_we_read_under_its_names() {
    for (v, wait) in KERNELS {
        let events = dir(v).join("events");
        assert!(events.is_dir(), "fixture {} missing", events.display());
        let f = TraceFeatures::detect(&events, &[]);
        assert_eq!(f.throttle, Ok("balance_dirty_pages"), "{v}");
        assert_eq!(f.flusher, Ok("writeback_start"), "{v}");
        assert_eq!(
            f.page_wait.as_ref().ok().copied(),
            wait,
            "{v}: {:?}",
            f.page_wait
        );
        assert!(f.sched().is_ok(), "{v}: {:?}", f.sched());
        assert_eq!(f.calls, Ok("sys_enter_fdatasync"), "{v}");
        let (sys, dirs) = stallscope::source::trace::sched_raw::SysEvent::read_all(&events, &[]);
        assert_eq!(
            dirs.len(),
            4,
            "{v}: write and fdatasync, entry and exit: {dirs:?}"
        );
        let write = sys.values().find(|e| e.enter && e.call.as_str() == "write");
        let write = write.expect("sys_enter_write");
        assert_eq!(
            (write.fd.map(|f| f.offset), write.count.map(|f| f.offset)),
            (Some(16), Some(32)),
            "{v}"
        );
        let page = f.page.as_ref().unwrap();
        assert_eq!((page.data, page.size), (16, 4096), "{v}");
        let missing = f.missing();
        match wait {
            None => {
                assert_eq!(missing.len(), 1, "{v}: {missing:?}");
                assert!(missing[0].contains("none before 5.2"), "{v}: {missing:?}");
            }
            Some(_) => assert!(missing.is_empty(), "{v}: {missing:?}"),
        }
    }
}

/// A field of a format file, read by this test's own parser: offset, size.
fn field(format: &str, name: &str) -> (usize, usize) {
    let line = format
        .lines()
        .find(|l| {
            l.trim()
                .strip_prefix("field:")
                .and_then(|d| d.split(';').next())
                .and_then(|d| d.rsplit(' ').next())
                .is_some_and(|n| n.split('[').next() == Some(name))
        })
        .unwrap_or_else(|| panic!("no field {name} in\n{format}"));
    let num = |key: &str| -> usize {
        line.split(';')
            .find_map(|p| p.trim().strip_prefix(key))
            .unwrap()
            .parse()
            .unwrap()
    };
    (num("offset:"), num("size:"))
}

fn id(format: &str) -> u16 {
    format
        .lines()
        .find_map(|l| l.strip_prefix("ID:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// One record of `format` with the given fields set (little-endian), as
/// the ring buffer stores it: a u32 header (type_len = words), the data.
fn record(format: &str, pid: u32, fields: &[(&str, &[u8])]) -> Vec<u8> {
    let end = format
        .lines()
        .filter(|l| l.trim().starts_with("field:"))
        .map(|l| {
            let name = l.trim()["field:".len()..].split(';').next().unwrap();
            let name = name.rsplit(' ').next().unwrap().split('[').next().unwrap();
            let (o, s) = field(format, name);
            o + s
        })
        .max()
        .unwrap();
    let mut data = vec![0u8; end.div_ceil(4) * 4];
    data[0..2].copy_from_slice(&id(format).to_le_bytes());
    let (po, _) = field(format, "common_pid");
    data[po..po + 4].copy_from_slice(&pid.to_le_bytes());
    for (name, bytes) in fields {
        let (o, s) = field(format, name);
        assert!(bytes.len() <= s, "{name}");
        data[o..o + bytes.len()].copy_from_slice(bytes);
    }
    let words = (data.len() / 4) as u32;
    assert!(words <= 28);
    let mut rec = (words | (10 << 5)).to_le_bytes().to_vec();
    rec.extend(data);
    rec
}

/// A page of records after the 16-byte header (timestamp, commit).
fn page(records: &[Vec<u8>]) -> Vec<u8> {
    let body: Vec<u8> = records.concat();
    let mut p = 1_000_000u64.to_le_bytes().to_vec();
    p.extend((body.len() as u64).to_le_bytes());
    p.extend(body);
    p.resize(4096, 0);
    p
}

fn read(path: PathBuf) -> String {
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn each_kernel_s_binary_records_decode_at_its_offsets() {
    for (v, wait) in KERNELS {
        let events = dir(v).join("events");
        let sw = read(events.join("sched/sched_switch/format"));
        let wk = read(events.join("sched/sched_waking/format"));
        let mut fmt = SchedFormat::read(&events, wait).unwrap_or_else(|e| panic!("{v}: {e}"));
        fmt.states = StateBits::guess(v);
        let (_, state_size) = field(&sw, "prev_state");
        let mut state = vec![0u8; state_size];
        state[0] = d_state(v);
        let mut recs = vec![
            record(
                &sw,
                4242,
                &[
                    ("prev_comm", b"postgres"),
                    ("prev_pid", &4242u32.to_le_bytes()),
                    ("prev_state", &state),
                ],
            ),
            record(&wk, 77, &[("pid", &4242u32.to_le_bytes())]),
        ];
        if let Some(w) = wait {
            let wf = read(events.join("writeback").join(w).join("format"));
            let bdi = if wf.contains(" name[") { "name" } else { "bdi" };
            recs.push(record(
                &wf,
                4242,
                &[
                    (bdi, b"7:0"),
                    ("ino", &12u64.to_le_bytes()),
                    ("index", &34u64.to_le_bytes()),
                ],
            ));
        }
        let mut out: Vec<TraceEvent> = Vec::new();
        parse_page(&page(&recs), &Default::default(), &fmt, &mut out);
        assert_eq!(out.len(), recs.len(), "{v}: {out:?}");
        assert!(
            matches!(&out[0].kind, TraceKind::SchedBlock { comm, sleep: false } if comm.to_string() == "postgres")
                && out[0].tid == 4242,
            "{v}: {:?}",
            out[0]
        );
        assert!(
            matches!(&out[1].kind, TraceKind::SchedWake { waker: 77, .. }) && out[1].tid == 4242,
            "{v}: {:?}",
            out[1]
        );
        if wait.is_some() {
            assert!(
                matches!(&out[2].kind, TraceKind::WaitWriteback { bdi, ino: 12, index: 34 } if bdi == "7:0"),
                "{v}: {:?}",
                out[2]
            );
        }
    }
}

#[test]
fn each_kernel_s_trace_pipe_lines_parse() {
    for (v, wait) in KERNELS {
        let text = read(dir(v).join("trace_pipe.txt"));
        let evs: Vec<TraceEvent> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| parse_line(l).unwrap_or_else(|| panic!("{v}: unparsed: {l}")))
            .collect();
        let has = |f: &dyn Fn(&TraceKind) -> bool| evs.iter().any(|e| f(&e.kind));
        assert!(
            has(&|k| matches!(k, TraceKind::BalanceDirtyPages { pause_ms, .. } if *pause_ms > 0)),
            "{v}"
        );
        assert!(
            has(&|k| matches!(k, TraceKind::WritebackStart { .. })),
            "{v}"
        );
        assert_eq!(
            has(&|k| matches!(k, TraceKind::WaitWriteback { .. })),
            wait.is_some(),
            "{v}"
        );
    }
}

/// The cause a stack fixture's name gives: `<cause>-<what>.txt`; for
/// `unknown`, that the stack names no cause (a lock outside a sync says
/// where, not why).
fn cause_of(name: &str) -> Option<Option<Cause>> {
    let c = name.split('-').next()?;
    if c == "unknown" {
        return Some(None);
    }
    serde_json::from_value(serde_json::Value::String(c.to_string()))
        .ok()
        .map(Some)
}

#[test]
fn each_kernel_s_write_path_stacks_map_to_their_cause() {
    let mut checked = 0;
    for (v, _) in KERNELS {
        let stacks = dir(v).join("stacks");
        let mut names: Vec<String> = fs::read_dir(&stacks)
            .unwrap_or_else(|e| panic!("{}: {e}", stacks.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".txt"))
            .collect();
        names.sort();
        assert!(names.len() >= 5, "{v}: {names:?}");
        for name in names {
            let want =
                cause_of(&name).unwrap_or_else(|| panic!("{v}/{name}: no cause in the name"));
            let text = read(stacks.join(&name));
            let compact = stallscope::source::watchdog::compact_stack(&text);
            let got = stallscope::model::cause::stack_cause(&compact);
            assert_eq!(got, want, "{v}/{name}: {compact}");
            checked += 1;
        }
    }
    eprintln!("{checked} stacks of {} kernels", KERNELS.len());
}
