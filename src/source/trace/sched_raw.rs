//! The scheduler's events read in the kernel's own binary form
//! (`per_cpu/cpuN/trace_pipe_raw`) rather than as text. With wake-up chains
//! every sleep of every watched thread is two events (pgbench -c 8: some
//! 60 k a second); formatting each as a line in the kernel and parsing it
//! back cost more than the rest of stallscope. Raw pages are copied out
//! and decoded here: a fixed record layout read at offsets the event's
//! `format` file gives.
//!
//! The same instance records `folio_wait_writeback` of the watched
//! threads (its pid list filters it too): a busy database waits on pages
//! under writeback a thousand times a second, and as text those waits cost
//! stallscope more than all its scheduler events.
//!
//! And the entry and exit of the watched threads' write-path system calls
//! (`syscalls:sys_enter_<call>`, `sys_exit_<call>`, one event per call so
//! that the kernel tests a bit, not a filter, for every other call), which
//! bound an observed thread's stall to one call.
//!
//! Page layout (`events/header_page`, read by [`PageLayout`]): u64
//! timestamp, then commit (bytes of data, 8 bytes on 64-bit kernels; bit
//! 31 = events were lost before it, bit 30 = their count is stored after
//! the data), then the events, each a u32 header (`type_len`: 5 bits,
//! `time_delta`: 27 bits; `events/header_event`). A page is the kernel's
//! page (64 KiB on some arm64) or, from 6.8, a sub-buffer of the size the
//! instance was given: header_page says which.

use crate::model::kernel::{Comm, TraceEvent, TraceKind};
use rustc_hash::FxHashMap as HashMap;
use std::path::Path;

/// The system calls a write can block in for writeback or the journal:
/// their entry and exit bound an observed thread's stall. `close` and the
/// renames are here for ext4's auto_da_alloc (a close or rename after a
/// truncate flushes the file). Those this kernel has events for are used.
pub const WRITE_PATH_CALLS: [&str; 19] = [
    "write",
    "pwrite64",
    "writev",
    "pwritev",
    "pwritev2",
    "fsync",
    "fdatasync",
    "msync",
    "sync_file_range",
    "syncfs",
    "sync",
    "fallocate",
    "ftruncate",
    "io_submit",
    "io_uring_enter",
    "close",
    "rename",
    "renameat",
    "renameat2",
];

/// One syscall event's record: which call, entry or exit, and where its
/// fd, byte count (the write family's `count`) and return value are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SysEvent {
    pub call: Comm,
    pub enter: bool,
    pub fd: Option<Field>,
    pub count: Option<Field>,
    pub ret: Option<Field>,
    /// A futex's `uaddr`.
    pub addr: Option<Field>,
}

impl SysEvent {
    /// From the text of `syscalls/sys_{enter,exit}_<call>/format`.
    pub fn parse(text: &str, call: &str, enter: bool) -> Option<(u16, SysEvent)> {
        let (id, fs) = parse_format(text)?;
        let get = |name: &str| fs.iter().find(|(n, _)| n == name).map(|(_, f)| *f);
        Some((
            id,
            SysEvent {
                call: Comm::new(call),
                enter,
                fd: get("fd").filter(|_| enter),
                count: get("count").filter(|_| enter),
                ret: get("ret").filter(|_| !enter),
                addr: get("uaddr").filter(|_| enter),
            },
        ))
    }

    /// `sys_enter_futex` under `events`, when there and not hidden: where
    /// a thread sleeps in S (its futex word), for wake-up chains.
    pub fn read_futex(events: &Path, hidden: &[String]) -> Option<(u16, SysEvent)> {
        if hidden.iter().any(|h| h == "syscalls:sys_enter_futex") {
            return None;
        }
        let text = std::fs::read_to_string(events.join("syscalls/sys_enter_futex/format")).ok()?;
        SysEvent::parse(&text, "futex", true).filter(|(_, e)| e.addr.is_some())
    }

    /// The events of `WRITE_PATH_CALLS` under `events` (tracefs's or an
    /// instance's `events/`), by id, with the names of the event
    /// directories (`syscalls/sys_enter_write`); calls without both events
    /// (or named in `hidden` as `syscalls:sys_enter_<call>`) are left out.
    pub fn read_all(events: &Path, hidden: &[String]) -> (HashMap<u16, SysEvent>, Vec<String>) {
        let mut by_id = HashMap::default();
        let mut dirs = Vec::new();
        for call in WRITE_PATH_CALLS {
            let pair: Option<Vec<(u16, SysEvent)>> = [true, false]
                .into_iter()
                .map(|enter| {
                    let name = format!("sys_{}_{call}", if enter { "enter" } else { "exit" });
                    if hidden.contains(&format!("syscalls:{name}")) {
                        return None;
                    }
                    let text =
                        std::fs::read_to_string(events.join("syscalls").join(&name).join("format"))
                            .ok()?;
                    SysEvent::parse(&text, call, enter)
                })
                .collect();
            if let Some(pair) = pair {
                for (id, ev) in pair {
                    let dir = format!(
                        "syscalls/sys_{}_{call}",
                        if ev.enter { "enter" } else { "exit" }
                    );
                    dirs.push(dir);
                    by_id.insert(id, ev);
                }
            }
        }
        (by_id, dirs)
    }
}

/// `type_len` values with a meaning of their own.
const TYPE_PADDING: u32 = 29;
const TYPE_TIME_EXTEND: u32 = 30;
const TYPE_TIME_STAMP: u32 = 31;
const TS_SHIFT: u32 = 27;
/// `common_flags`: the event ran in a hardware interrupt.
const FLAG_HARDIRQ: u8 = 0x08;
const MISSED_EVENTS: u64 = 1 << 31;
const MISSED_STORED: u64 = 1 << 30;

/// Where a raw page's commit word and data are, and how long a page is,
/// from `events/header_page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageLayout {
    pub commit: Field,
    /// Offset of the first event.
    pub data: usize,
    /// Bytes per page (or sub-buffer): what one read returns at most.
    pub size: usize,
}

impl PageLayout {
    /// From the text of `events/header_page`.
    pub fn parse(text: &str) -> Option<PageLayout> {
        let fields = format_fields_at(text);
        let get = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, f)| *f);
        let (commit, data) = (get("commit")?, get("data")?);
        (commit.size == 4 || commit.size == 8).then_some(PageLayout {
            commit,
            data: data.offset,
            size: data.offset + data.size,
        })
    }
}

impl Default for PageLayout {
    /// x86_64's: 4 KiB pages, an 8-byte commit word.
    fn default() -> Self {
        PageLayout {
            commit: Field { offset: 8, size: 8 },
            data: 16,
            size: 4096,
        }
    }
}

/// One field of an event record: where it is and how wide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Field {
    pub offset: usize,
    pub size: usize,
}

/// Where sched_switch's and sched_waking's fields are, from their format
/// files (they differ between kernels: `prev_state` grew from int to long).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedFormat {
    pub switch_id: u16,
    pub waking_id: u16,
    pub prev_comm: Field,
    pub prev_pid: Field,
    pub prev_state: Field,
    pub woken_pid: Field,
    /// folio_wait_writeback, when this kernel has it.
    pub wait: Option<WaitFormat>,
    /// How prev_state says S and D on this kernel.
    pub states: StateBits,
    /// The write-path system calls' entry and exit events, by id.
    pub sys: HashMap<u16, SysEvent>,
    /// sched_process_fork's id and where its `child_pid` is.
    pub fork: Option<(u16, Field)>,
}

/// prev_state's bits for a sleep in S and in D. Kernels record S as 0x1
/// and D as 0x2, except 4.14 to 4.19 (and their stable and distribution
/// kernels that did not take the fix, RHEL 8's 4.18 among them), which
/// record `1 << task_state_index`: S as 0x2, D as 0x4, and 0x1 for a
/// running task that calls schedule(). `TraceSession` checks which by
/// watching a thread of its own sleep in S (`from_sleep`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateBits {
    pub sleep: u64,
    pub disk: u64,
}

impl Default for StateBits {
    fn default() -> Self {
        StateBits { sleep: 1, disk: 2 }
    }
}

impl StateBits {
    /// The 4.14-4.19 encoding.
    pub const SHIFTED: StateBits = StateBits { sleep: 2, disk: 4 };

    /// What the kernel's release (`4.18.0-147.el8.x86_64`) suggests, when
    /// no sleep could be watched.
    pub fn guess(release: &str) -> StateBits {
        let mut n = release
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|x| x.parse::<u32>().ok());
        match (n.next(), n.next()) {
            (Some(4), Some(m)) if (14..20).contains(&m) => StateBits::SHIFTED,
            _ => StateBits::default(),
        }
    }

    /// From the state a sleep in S was recorded with, read as this
    /// encoding's: S means the usual bits, D the shifted ones.
    pub fn from_sleep(seen_as_sleep: bool) -> StateBits {
        if seen_as_sleep {
            StateBits::default()
        } else {
            StateBits::SHIFTED
        }
    }

    /// Both bits, for the kernel's filter.
    pub fn mask(&self) -> u64 {
        self.sleep | self.disk
    }
}

/// Where folio_wait_writeback's fields are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitFormat {
    pub id: u16,
    /// The bdi's name (`name`, or `bdi` on some kernels), NUL-padded.
    pub bdi: Field,
    pub ino: Field,
    pub index: Field,
}

impl WaitFormat {
    /// From the text of its `format` file.
    pub fn parse(text: &str) -> Option<WaitFormat> {
        let (id, fs) = parse_format(text)?;
        let get = |name: &str| fs.iter().find(|(n, _)| n == name).map(|(_, f)| *f);
        Some(WaitFormat {
            id,
            bdi: get("name").or_else(|| get("bdi"))?,
            ino: get("ino")?,
            index: get("index")?,
        })
    }
}

impl SchedFormat {
    /// From the text of the two `format` files.
    pub fn parse(switch: &str, waking: &str) -> Option<SchedFormat> {
        let (switch_id, sw) = parse_format(switch)?;
        let (waking_id, wk) = parse_format(waking)?;
        let get = |fs: &[(String, Field)], name: &str| {
            fs.iter().find(|(n, _)| n == name).map(|(_, f)| *f)
        };
        Some(SchedFormat {
            switch_id,
            waking_id,
            prev_comm: get(&sw, "prev_comm")?,
            prev_pid: get(&sw, "prev_pid")?,
            prev_state: get(&sw, "prev_state")?,
            woken_pid: get(&wk, "pid")?,
            wait: None,
            states: StateBits::default(),
            sys: HashMap::default(),
            fork: None,
        })
    }

    /// From an instance's (or tracefs's) `events/sched/*/format`, and
    /// the page wait's format when this kernel has one (`wait`: its name
    /// under `events/writeback/`).
    pub fn read(events: &Path, wait: Option<&str>) -> Result<SchedFormat, String> {
        let read = |e: &str| {
            std::fs::read_to_string(events.join("sched").join(e).join("format"))
                .map_err(|err| format!("read sched:{e} format: {err}"))
        };
        let mut f = SchedFormat::parse(&read("sched_switch")?, &read("sched_waking")?)
            .ok_or_else(|| "unexpected sched_switch/sched_waking format".to_string())?;
        f.fork = std::fs::read_to_string(events.join("sched/sched_process_fork/format"))
            .ok()
            .and_then(|t| {
                let (id, fs) = parse_format(&t)?;
                let child = fs.iter().find(|(n, _)| n == "child_pid")?.1;
                Some((id, child))
            });
        f.wait = wait
            .and_then(|w| {
                std::fs::read_to_string(events.join("writeback").join(w).join("format")).ok()
            })
            .and_then(|t| WaitFormat::parse(&t));
        Ok(f)
    }
}

/// `ID: 372` and every `field:<type> <name>[N]; offset:O; size:S;`.
fn parse_format(text: &str) -> Option<(u16, Vec<(String, Field)>)> {
    let id = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("ID:"))?
        .trim()
        .parse()
        .ok()?;
    Some((id, format_fields_at(text)))
}

/// Every `field:<type> <name>[N]; offset:O; size:S;` (also header_page's
/// `field: u64 timestamp;`).
fn format_fields_at(text: &str) -> Vec<(String, Field)> {
    text.lines()
        .filter_map(|l| {
            let mut decl = None;
            let mut offset = None;
            let mut size = None;
            for part in l.split(';').map(str::trim) {
                if let Some(d) = part.strip_prefix("field:") {
                    let name = d.trim().rsplit(' ').next()?;
                    decl = Some(name.split('[').next()?.to_string());
                } else if let Some(o) = part.strip_prefix("offset:") {
                    offset = o.parse().ok();
                } else if let Some(s) = part.strip_prefix("size:") {
                    size = s.parse().ok();
                }
            }
            Some((
                decl?,
                Field {
                    offset: offset?,
                    size: size?,
                },
            ))
        })
        .collect()
}

fn le(b: &[u8], at: usize, size: usize) -> Option<u64> {
    let bytes = b.get(at..at + size)?;
    Some(
        bytes
            .iter()
            .rev()
            .fold(0u64, |acc, &x| (acc << 8) | u64::from(x)),
    )
}

/// Decodes one page read from `trace_pipe_raw` into `out`; returns how
/// many events the kernel says were lost before it (0 if none, 1 when it
/// only says "some").
pub fn parse_page(
    page: &[u8],
    layout: &PageLayout,
    fmt: &SchedFormat,
    out: &mut Vec<TraceEvent>,
) -> u64 {
    let c = layout.commit;
    let (Some(mut ts), Some(commit)) = (le(page, 0, 8), le(page, c.offset, c.size)) else {
        return 0;
    };
    let len = (commit & !(MISSED_EVENTS | MISSED_STORED)) as usize;
    let end = (layout.data + len).min(page.len());
    let lost = if commit & MISSED_STORED != 0 {
        le(page, end, c.size).unwrap_or(1)
    } else {
        u64::from(commit & MISSED_EVENTS != 0)
    };
    let mut at = layout.data;
    while at + 4 <= end {
        let Some(h) = le(page, at, 4) else { break };
        let (type_len, delta) = ((h & 31) as u32, h >> 5);
        let array = le(page, at + 4, 4);
        match type_len {
            TYPE_PADDING => {
                if delta == 0 {
                    break; // the rest of the page is empty
                }
                ts += delta;
                at += 4 + array.unwrap_or(0) as usize;
            }
            TYPE_TIME_EXTEND => {
                ts += (array.unwrap_or(0) << TS_SHIFT) + delta;
                at += 8;
            }
            TYPE_TIME_STAMP => {
                let abs = (array.unwrap_or(0) << TS_SHIFT) | delta;
                // Its upper bits are the page's.
                ts = (ts & !((1u64 << 59) - 1)) | abs;
                at += 8;
            }
            data => {
                ts += delta;
                // Up to 28 words: the length is in the header; beyond, in
                // `array` (counting itself) and the record follows it.
                let (body, n) = if data == 0 {
                    let Some(n) = array else { break };
                    (at + 8, (n as usize).saturating_sub(4))
                } else {
                    (at + 4, data as usize * 4)
                };
                if let Some(rec) = page.get(body..(body + n).min(end)) {
                    decode(rec, ts, fmt, out);
                }
                at = body + n.div_ceil(4) * 4;
            }
        }
    }
    lost
}

/// One record: a switch into D or S of a watched thread, its waking, or
/// its wait on a page under writeback.
fn decode(rec: &[u8], ts: u64, fmt: &SchedFormat, out: &mut Vec<TraceEvent>) {
    let Some(ty) = le(rec, 0, 2) else { return };
    let field = |f: Field| le(rec, f.offset, f.size);
    if ty == u64::from(fmt.switch_id) {
        let (Some(state), Some(pid)) = (field(fmt.prev_state), field(fmt.prev_pid)) else {
            return;
        };
        let sleep = if state & fmt.states.disk != 0 {
            false
        } else if state & fmt.states.sleep != 0 {
            true
        } else {
            return;
        };
        let name = rec
            .get(fmt.prev_comm.offset..fmt.prev_comm.offset + fmt.prev_comm.size)
            .unwrap_or_default();
        out.push(TraceEvent {
            t_mono_ns: ts,
            tid: pid as u32,
            kind: TraceKind::SchedBlock {
                comm: Comm::from_bytes(name),
                sleep,
            },
        });
    } else if ty == u64::from(fmt.waking_id) {
        let (Some(flags), Some(waker), Some(pid)) =
            (le(rec, 2, 1), le(rec, 4, 4), field(fmt.woken_pid))
        else {
            return;
        };
        out.push(TraceEvent {
            t_mono_ns: ts,
            tid: pid as u32,
            kind: TraceKind::SchedWake {
                waker: waker as u32,
                // Not in the record (the text form looks it up); the
                // chains need the tid only.
                waker_comm: String::new(),
                irq: flags as u8 & FLAG_HARDIRQ != 0,
            },
        });
    } else if let Some((_, child)) = fmt.fork.filter(|(id, _)| ty == u64::from(*id)) {
        let (Some(parent), Some(child)) = (le(rec, 4, 4), field(child)) else {
            return;
        };
        out.push(TraceEvent {
            t_mono_ns: ts,
            tid: parent as u32,
            kind: TraceKind::Fork {
                child: child as u32,
            },
        });
    } else if let Some(s) = u16::try_from(ty).ok().and_then(|t| fmt.sys.get(&t)) {
        decode_sys(rec, ts, s, out);
    } else if let Some(w) = fmt.wait.as_ref().filter(|w| ty == u64::from(w.id)) {
        let (Some(pid), Some(ino), Some(index)) = (le(rec, 4, 4), field(w.ino), field(w.index))
        else {
            return;
        };
        let bdi = Comm::from_bytes(
            rec.get(w.bdi.offset..w.bdi.offset + w.bdi.size)
                .unwrap_or_default(),
        );
        out.push(TraceEvent {
            t_mono_ns: ts,
            tid: pid as u32,
            kind: TraceKind::WaitWriteback {
                bdi: bdi.to_string(),
                ino,
                index,
            },
        });
    }
}

/// A write-path call's entry or exit, or a futex wait's entry.
fn decode_sys(rec: &[u8], ts: u64, s: &SysEvent, out: &mut Vec<TraceEvent>) {
    let field = |f: Field| le(rec, f.offset, f.size);
    let kind = if s.enter {
        TraceKind::SysEnter {
            call: s.call,
            // An fd is an int in an unsigned long: its low half.
            fd: s.fd.and_then(field).map(|v| i64::from(v as u32 as i32)),
            bytes: s.count.and_then(field),
            addr: s.addr.and_then(field),
        }
    } else {
        TraceKind::SysExit {
            call: s.call,
            ret: s.ret.and_then(field).map_or(0, |v| v as i64),
        }
    };
    let Some(pid) = le(rec, 4, 4) else { return };
    out.push(TraceEvent {
        t_mono_ns: ts,
        tid: pid as u32,
        kind,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `format` file: its name, id and fields after the common ones.
    macro_rules! format_file {
        ($name:literal, $id:literal, $fields:literal) => {
            concat!(
                "name: ",
                $name,
                "\nID: ",
                $id,
                "\nformat:\n",
                "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n",
                "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n",
                "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n",
                "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n",
                $fields
            )
        };
    }

    const SWITCH_FORMAT: &str = format_file!(
        "sched_switch",
        "372",
        "\
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n\nprint fmt: \"prev_comm=%s\""
    );
    const WAKING_FORMAT: &str = format_file!(
        "sched_waking",
        "375",
        "\
\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n\
\tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;\n"
    );

    const WAIT_FORMAT: &str = format_file!(
        "folio_wait_writeback",
        "1008",
        "\
\tfield:char name[32];\toffset:8;\tsize:32;\tsigned:0;\n\
\tfield:ino_t ino;\toffset:40;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long index;\toffset:48;\tsize:8;\tsigned:0;\n"
    );

    fn fmt() -> SchedFormat {
        SchedFormat {
            wait: WaitFormat::parse(WAIT_FORMAT),
            ..SchedFormat::parse(SWITCH_FORMAT, WAKING_FORMAT).unwrap()
        }
    }

    fn wait(pid: u32, bdi: &str, ino: u64, index: u64) -> Vec<u8> {
        let mut r = vec![0u8; 56];
        r[0..2].copy_from_slice(&1008u16.to_le_bytes());
        r[4..8].copy_from_slice(&pid.to_le_bytes());
        r[8..8 + bdi.len()].copy_from_slice(bdi.as_bytes());
        r[40..48].copy_from_slice(&ino.to_le_bytes());
        r[48..56].copy_from_slice(&index.to_le_bytes());
        r
    }

    fn switch(pid: u32, state: u64, comm: &str) -> Vec<u8> {
        let mut r = vec![0u8; 64];
        r[0..2].copy_from_slice(&372u16.to_le_bytes());
        r[4..8].copy_from_slice(&pid.to_le_bytes());
        r[8..8 + comm.len()].copy_from_slice(comm.as_bytes());
        r[24..28].copy_from_slice(&pid.to_le_bytes());
        r[32..40].copy_from_slice(&state.to_le_bytes());
        r
    }

    fn waking(waker: u32, pid: u32, flags: u8) -> Vec<u8> {
        let mut r = vec![0u8; 36];
        r[0..2].copy_from_slice(&375u16.to_le_bytes());
        r[2] = flags;
        r[4..8].copy_from_slice(&waker.to_le_bytes());
        r[24..28].copy_from_slice(&pid.to_le_bytes());
        r
    }

    /// A page as the kernel lays it out: events with time deltas.
    fn page(ts: u64, events: &[(u32, Vec<u8>)], missed: u64) -> Vec<u8> {
        let mut data = Vec::new();
        for (delta, rec) in events {
            if *delta >= 1 << TS_SHIFT {
                // A time extend first, then the event with no delta.
                let h = TYPE_TIME_EXTEND | ((delta & ((1 << TS_SHIFT) - 1)) << 5);
                data.extend_from_slice(&h.to_le_bytes());
                data.extend_from_slice(&(delta >> TS_SHIFT).to_le_bytes());
                push(&mut data, 0, rec);
            } else {
                push(&mut data, *delta, rec);
            }
        }
        let mut p = vec![0u8; 4096];
        p[0..8].copy_from_slice(&ts.to_le_bytes());
        p[8..16].copy_from_slice(&(data.len() as u64 | missed).to_le_bytes());
        p[16..16 + data.len()].copy_from_slice(&data);
        p
    }

    fn push(data: &mut Vec<u8>, delta: u32, rec: &[u8]) {
        let words = rec.len().div_ceil(4);
        if words <= 28 {
            let h = words as u32 | (delta << 5);
            data.extend_from_slice(&h.to_le_bytes());
        } else {
            data.extend_from_slice(&(delta << 5).to_le_bytes());
            data.extend_from_slice(&(rec.len() as u32 + 4).to_le_bytes());
        }
        data.extend_from_slice(rec);
        data.resize(data.len().div_ceil(4) * 4, 0);
    }

    #[test]
    fn the_format_files_give_the_offsets() {
        let f = fmt();
        assert_eq!((f.switch_id, f.waking_id), (372, 375));
        let w = f.wait.clone().expect("folio_wait_writeback");
        assert_eq!((w.id, w.bdi.offset, w.bdi.size), (1008, 8, 32));
        assert_eq!((w.ino.offset, w.index.offset), (40, 48));
        let old_kernel = WAIT_FORMAT.replace("char name[32]", "char bdi[32]");
        assert_eq!(WaitFormat::parse(&old_kernel), Some(w));
        assert_eq!(
            f.prev_state,
            Field {
                offset: 32,
                size: 8
            }
        );
        assert_eq!(
            f.prev_comm,
            Field {
                offset: 8,
                size: 16
            }
        );
        assert_eq!(
            f.woken_pid,
            Field {
                offset: 24,
                size: 4
            }
        );
    }

    #[test]
    fn a_page_of_switches_and_wakings_decodes_with_its_times() {
        let p = page(
            1_000_000,
            &[
                (10, switch(42, 1, "postgres")),
                (500, waking(0, 42, 0x08 | 0x01)),
                (7, switch(43, 2, "rocksdb:high")),
                (3, switch(44, 0x100, "preempted")),
                (2, wait(43, "7:0", 12, 345)),
                // Far apart: a time extend carries the delta.
                (300_000_000, waking(43, 44, 0)),
            ],
            0,
        );
        let mut out = Vec::new();
        assert_eq!(parse_page(&p, &PageLayout::default(), &fmt(), &mut out), 0);
        let got: Vec<(u64, u32, TraceKind)> = out
            .into_iter()
            .map(|e| (e.t_mono_ns, e.tid, e.kind))
            .collect();
        let wake = |waker, irq| TraceKind::SchedWake {
            waker,
            waker_comm: String::new(),
            irq,
        };
        assert_eq!(
            got,
            [
                (
                    1_000_010,
                    42,
                    TraceKind::SchedBlock {
                        comm: "postgres".into(),
                        sleep: true
                    }
                ),
                (1_000_510, 42, wake(0, true)),
                (
                    1_000_517,
                    43,
                    TraceKind::SchedBlock {
                        comm: "rocksdb:high".into(),
                        sleep: false
                    }
                ),
                // The preempted switch is left out but its delta counts.
                (
                    1_000_522,
                    43,
                    TraceKind::WaitWriteback {
                        bdi: "7:0".into(),
                        ino: 12,
                        index: 345
                    }
                ),
                (301_000_522, 44, wake(43, false)),
            ]
        );
    }

    const SYS_ENTER_WRITE: &str = format_file!(
        "sys_enter_write",
        "840",
        "\
\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\
\tfield:unsigned int fd;\toffset:16;\tsize:8;\tsigned:0;\n\
\tfield:const char * buf;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:size_t count;\toffset:32;\tsize:8;\tsigned:0;\n"
    );
    const SYS_EXIT_WRITE: &str = format_file!(
        "sys_exit_write",
        "839",
        "\
\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\
\tfield:long ret;\toffset:16;\tsize:8;\tsigned:1;\n"
    );

    #[test]
    fn a_write_s_entry_and_exit_decode_with_fd_bytes_and_return() {
        let mut f = fmt();
        for (text, enter) in [(SYS_ENTER_WRITE, true), (SYS_EXIT_WRITE, false)] {
            let (id, ev) = SysEvent::parse(text, "write", enter).unwrap();
            f.sys.insert(id, ev);
        }
        let mut enter = vec![0u8; 40];
        enter[..2].copy_from_slice(&840u16.to_le_bytes());
        enter[4..8].copy_from_slice(&77u32.to_le_bytes());
        enter[8..12].copy_from_slice(&1i32.to_le_bytes());
        enter[16..24].copy_from_slice(&5u64.to_le_bytes());
        enter[32..40].copy_from_slice(&(4u64 << 20).to_le_bytes());
        let mut exit = vec![0u8; 24];
        exit[..2].copy_from_slice(&839u16.to_le_bytes());
        exit[4..8].copy_from_slice(&77u32.to_le_bytes());
        exit[16..24].copy_from_slice(&(-28i64).to_le_bytes());
        let p = page(1_000, &[(10, enter), (2_000, exit)], 0);
        let mut out = Vec::new();
        parse_page(&p, &PageLayout::default(), &f, &mut out);
        let got: Vec<(u64, u32, TraceKind)> = out
            .into_iter()
            .map(|e| (e.t_mono_ns, e.tid, e.kind))
            .collect();
        let call = Comm::new("write");
        assert_eq!(
            got,
            [
                (
                    1_010,
                    77,
                    TraceKind::SysEnter {
                        call,
                        fd: Some(5),
                        bytes: Some(4 << 20),
                        addr: None,
                    }
                ),
                (3_010, 77, TraceKind::SysExit { call, ret: -28 }),
            ]
        );
    }

    #[test]
    fn lost_events_padding_and_long_records() {
        let mut long = switch(42, 2, "x");
        long.resize(200, 0); // longer than 28 words: length in array[0]
        let mut p = page(5, &[(1, long)], MISSED_EVENTS);
        let mut out = Vec::new();
        assert_eq!(parse_page(&p, &PageLayout::default(), &fmt(), &mut out), 1);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].t_mono_ns, 6);
        // Padding with no delta ends the page whatever follows.
        let pad = (TYPE_PADDING).to_le_bytes();
        p[16..20].copy_from_slice(&pad);
        out.clear();
        parse_page(&p, &PageLayout::default(), &fmt(), &mut out);
        assert!(out.is_empty());
        // Garbage never panics.
        for n in [0, 3, 15, 16, 17, 100] {
            parse_page(&vec![0xff; n], &PageLayout::default(), &fmt(), &mut out);
        }
    }

    #[test]
    fn the_shifted_states_of_4_14_to_4_19_are_read_as_such() {
        assert_eq!(
            StateBits::guess("4.18.0-147.el8.x86_64"),
            StateBits::SHIFTED
        );
        assert_eq!(StateBits::guess("4.19.0-27-amd64"), StateBits::SHIFTED);
        assert_eq!(StateBits::guess("4.20.0"), StateBits::default());
        assert_eq!(StateBits::guess("5.4.0-150-generic"), StateBits::default());
        assert_eq!(StateBits::guess("6.1.0-27-amd64"), StateBits::default());
        // A sleep in S seen as D says the kernel shifts.
        assert_eq!(StateBits::from_sleep(false), StateBits::SHIFTED);
        assert_eq!(StateBits::SHIFTED.mask(), 6);
    }
}
