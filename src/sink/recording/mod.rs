//! The recording format: one session as JSON Lines, written as it runs and
//! read back into the same `Snapshot`s the live dashboard consumes.
//!
//! # Format (version 1)
//!
//! UTF-8 JSON, one object per line, `type` first. A file ending in `.gz` is
//! a gzip stream of the same lines (builds before 2026-12-04 wrote zstd for
//! `.zst`; those still read). Lines are flushed every interval, so a crash
//! loses at most the interval being written.
//!
//! * `header` (first line): `format` = `"stallscope-recording"`, `version`
//!   (major; a reader refuses a newer major), `tool_version`, `host`,
//!   `kernel`, `start_unix_s`, `config` (the run's config, as in the TOML
//!   file), `interval_s`, `page_kib`, `targets` (each `path`, `fs`,
//!   `device`, `mount_options`), `tracing` (null when on, else why not),
//!   `proc_start` (the first raw kernel sample, see `kernel`), `observed`
//!   (observe mode: each watched `pid` and `comm`; absent otherwise), `vm`
//!   (the `/proc/sys/vm/dirty_*` sysctls at the start: `dirty_ratio`,
//!   `dirty_bytes`, `dirty_background_ratio`, `dirty_background_bytes`,
//!   `dirty_expire_centisecs`, `dirty_writeback_centisecs`; absent in
//!   files of builds before 2026-12-05).
//! * `kernel`, one per interval, before its `interval` lines: `index`,
//!   `t_s` (end of the interval, s since start), `proc` — raw counters:
//!   `mem{dirty_kib, writeback_kib}`, `vm{nr_dirty, nr_writeback,
//!   nr_dirty_threshold, nr_dirty_background_threshold (pages), nr_dirtied,
//!   nr_written, pgfault, pgmajfault (cumulative counts)}`, `psi{some_total_us,
//!   full_total_us}` (cumulative µs), `disks[]` per target (diskstats
//!   counters: sectors are 512 B, times ms) — and `wb_starts` (writeback
//!   started by reason in the interval; null without tracing). Rates are
//!   derived from consecutive samples by `fold::derive::derive`, live and in
//!   replay alike.
//! * `interval`, one per target per interval: every field of `stallscope
//!   run --format jsonl` (derived figures, for grep and jq) plus the raw
//!   ones replay uses: `index`, `target_index`, `interval_s`, `active`,
//!   `bytes`, `failed` (true once a writer of the target stopped on an
//!   error; absent otherwise), `hist` and `sync_hist` (write and sync latency in µs, HdrHistogram
//!   V2 serialization with DEFLATE, base64; "" when empty).
//! * `stall`: the `run` stall line (`t_s`, `duration_ms`, `thread`, `op`,
//!   `target`, `mode`, `cause`, `confidence`, `evidence`) plus `index`,
//!   `target_index`, `start_ns`, `dur_ns`.
//! * `observed` (observe mode), one per watched process per interval: as in
//!   `run --format jsonl` — `t_s`, `pid`, `comm`, `alive`, `threads`,
//!   `d_threads_max` and `d_threads_mean` (threads in D state), `samples`,
//!   `minflt`, `majflt`, `write_bytes` (null if /proc/PID/io is unreadable),
//!   `write_mib_per_s`, `bdp`, `wb_waits` (null without tracing), `stalls`
//!   and the system dirty/writeback/PSI figures — plus `index`, `interval_s`.
//! * A `stall` line with a `pid` is an observed thread's D-state run: `t_s`,
//!   `duration_ms`, `pid`, `comm`, `tid`, `thread_comm`, `op` (`blocked`),
//!   `cause`, `confidence`, `evidence`, plus `index`, `start_ns`, `dur_ns`;
//!   every stall line has `bounds` (`syscall`, `gap`, `sleep`, `op`), and
//!   one timed by its system call `syscall`, `blocked_ms`, and `call`
//!   (`name`, `fd`, `bytes`, `file`) and `blocked_ns` to read it back.
//!   `observed` lines may have `blocked_by_cause` (ms), and, when the
//!   write-path calls were traced, `calls` (`model::pattern::CallPattern`:
//!   `writes`, `write_bytes`, `write_ms`, `write_size_log2` (calls by
//!   ⌈log2 bytes⌉), `files` (fds written), `syncs` by call (`calls`,
//!   `in_call_ms`, `bytes_before` and `bytes_before_log2`: what each had to
//!   flush), `other` (calls by name), `failed`, `threads` (the same per
//!   thread name, when more than one made calls)).
//! * `event`: `t_s`, `target`, `kind` (`target_full`, `writer_error`,
//!   `info`), `message`, plus `index`, `target_index`, `t_ns`.
//! * `marker`: a runtime action: `t_s`, `kind` (`target_switch`,
//!   `mode_change`, `thread_change`, `pause`, `resume`, `recording_start`,
//!   `recording_stop`, `target_added`), `detail`; `target_added` also has
//!   `meta` (a target as in the header).
//! * `summary` (last line of a complete file): as in `run`.
//!
//! Unknown fields are ignored and unknown line types skipped, so minor
//! additions keep version 1.
//!
//! What `run --format jsonl` printed reads too (`printed`): the same lines
//! without the header and what only replay needs.

use crate::config::{Config, Mode};
use crate::model::cause::{Attribution, Cause, Confidence, Evidence, Hop, Share};
use crate::model::kernel::ProcSample;
use crate::model::marker::Marker;
use crate::model::msg::EventKind;
use crate::model::ops::{new_histogram, OpKind};
use crate::model::snapshot::{BdpStats, RunEvent, Snapshot, Summary, TargetInterval, TargetMeta};
use crate::model::stall::Stall;
use crate::model::stall::{Blocked, Who};
use crate::sink::schema::{interval_line, stall_line, summary_line};
use crate::sink::Sink;
use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

mod printed;
pub use printed::NOTE as PRINTED_NOTE;

pub const FORMAT: &str = "stallscope-recording";
pub const VERSION: u64 = 1;
/// Longer lines are damage, not data (a real line is a few KiB).
pub const MAX_LINE: usize = 16 << 20;

/// The first line of a recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u64,
    pub tool_version: String,
    pub host: String,
    pub kernel: String,
    pub start_unix_s: f64,
    pub config: Config,
    pub interval_s: f64,
    pub page_kib: u64,
    pub targets: Vec<TargetMeta>,
    pub tracing: Option<String>,
    pub proc_start: Option<ProcSample>,
    /// Observe mode: the processes watched (absent in older files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed: Vec<crate::model::observed::Watched>,
    /// The dirty sysctls (`/proc/sys/vm/dirty_*`) at the start (absent in
    /// older files): what `advise` proposes changes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<crate::source::proc::DirtySysctls>,
}

impl Header {
    pub fn new(
        cfg: &Config,
        targets: Vec<TargetMeta>,
        tracing: Option<String>,
        proc_start: Option<ProcSample>,
    ) -> Header {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "?".into())
        };
        Header {
            format: FORMAT.into(),
            version: VERSION,
            tool_version: env!("CARGO_PKG_VERSION").into(),
            host: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
            start_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            config: cfg.clone(),
            interval_s: cfg.interval.0.as_secs_f64(),
            page_kib: crate::source::proc::page_kib(),
            targets,
            observed: Vec::new(),
            tracing,
            proc_start,
            vm: crate::source::proc::read_dirty_sysctls(&crate::source::proc::ProcRoot::default())
                .ok(),
        }
    }

    /// "mmap × 4 threads, 818 B records, periodic:10s" — for titles.
    pub fn workload(&self) -> String {
        let c = &self.config;
        let observed: Vec<String> = self
            .observed
            .iter()
            .map(|w| format!("{} ({})", w.comm, w.pid))
            .collect();
        let observing = format!("observing {}", observed.join(", "));
        if self.targets.is_empty() && !observed.is_empty() {
            return format!("{observing}, no writers");
        }
        let w = format!(
            "{} × {} threads, {} records, sync {}",
            c.mode,
            c.threads,
            crate::base::units::ByteSize(c.record_size()),
            c.sync
        );
        if observed.is_empty() {
            w
        } else {
            format!("{w}; {observing}")
        }
    }
}

/// Encodes a histogram as base64 HdrHistogram V2 with DEFLATE (the
/// compressed V2 form; any HdrHistogram library reads it). An empty one is
/// an empty string.
pub fn hist_to_b64(h: &Histogram<u64>) -> String {
    use std::io::Write as _;
    if h.is_empty() {
        return String::new();
    }
    let mut plain = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut plain)
        .expect("serializing to memory");
    // The V2 compressed form, at the best zlib level (the library's own
    // serializer uses the default one; files are ~10 % smaller this way).
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&plain).expect("compressing to memory");
    let body = z.finish().expect("compressing to memory");
    let mut out = Vec::with_capacity(body.len() + 8);
    out.extend_from_slice(&(V2_DEFLATE_COOKIE | 0x10).to_be_bytes());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    base64::engine::general_purpose::STANDARD.encode(out)
}

pub fn hist_from_b64(s: &str) -> Result<Histogram<u64>, String> {
    if s.is_empty() {
        return Ok(new_histogram());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("histogram base64: {e}"))?;
    let v2 = checked_v2(&bytes)?;
    let h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut &v2[..])
        .map_err(|e| format!("histogram: {e:?}"))?;
    // Same bounds as live histograms so merges behave the same.
    let mut out = new_histogram();
    out.add(&h).map_err(|e| format!("histogram range: {e:?}"))?;
    Ok(out)
}

const V2_COOKIE: u32 = 0x1c84_9303;
const V2_DEFLATE_COOKIE: u32 = 0x1c84_9304;
/// Far above any real interval histogram (~20k buckets), far below harm.
const MAX_HIST_BYTES: usize = 4 << 20;

/// The plain V2 form of a (possibly compressed) histogram, after checking
/// that its header does not declare more than the data holds: the
/// deserializer trusts the declared payload length and would allocate it.
fn checked_v2(bytes: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let word = |b: &[u8], at: usize| -> Result<u32, String> {
        b.get(at..at + 4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
            .ok_or_else(|| "histogram: header cut short".to_string())
    };
    // The cookie's second-lowest nibble varies between implementations.
    let kind = |c: u32| c & 0xffff_ff0f;
    let inner = match kind(word(bytes, 0)?) {
        V2_DEFLATE_COOKIE => {
            let len = word(bytes, 4)? as usize;
            let body = bytes
                .get(8..8 + len)
                .ok_or("histogram: compressed length past the end")?;
            let mut out = Vec::new();
            flate2::read::ZlibDecoder::new(body)
                .take(MAX_HIST_BYTES as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| format!("histogram: {e}"))?;
            if out.len() > MAX_HIST_BYTES {
                return Err("histogram: too large".into());
            }
            out
        }
        V2_COOKIE => bytes.to_vec(),
        c => return Err(format!("histogram: unknown cookie {c:#x}")),
    };
    if kind(word(&inner, 0)?) != V2_COOKIE {
        return Err("histogram: bad inner cookie".into());
    }
    let payload = word(&inner, 4)? as usize;
    if inner.len() < 40 || payload > inner.len() - 40 {
        return Err(format!(
            "histogram: declares {payload} bytes but holds {}",
            inner.len().saturating_sub(40)
        ));
    }
    Ok(inner)
}

/// Writes a recording; a `Sink`, so it takes the same snapshots as the UI.
pub struct Recorder {
    out: Box<dyn Write + Send>,
    header: Header,
    path: PathBuf,
}

impl Recorder {
    /// Creates the file (never overwriting one) and writes the header.
    pub fn create(path: &Path, header: Header) -> io::Result<Recorder> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let out: Box<dyn Write + Send> = if path.extension().is_some_and(|e| e == "gz") {
            let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
            Box::new(BufWriter::new(gz))
        } else {
            Box::new(BufWriter::new(file))
        };
        let mut r = Recorder {
            out,
            header,
            path: path.to_path_buf(),
        };
        let mut v = serde_json::to_value(&r.header)?;
        tag(&mut v, "header");
        r.line(&v)?;
        r.out.flush()?;
        Ok(r)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn line(&mut self, v: &Value) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, v)?;
        self.out.write_all(b"\n")
    }

    pub fn marker(&mut self, m: &Marker) -> io::Result<()> {
        let mut v = serde_json::to_value(m)?;
        tag(&mut v, "marker");
        if let Some(meta) = &m.meta {
            self.header.targets.push(meta.clone());
        }
        self.line(&v)?;
        self.out.flush()
    }

    fn meta(&self, i: usize) -> TargetMeta {
        self.header
            .targets
            .get(i)
            .cloned()
            .unwrap_or_else(|| TargetMeta {
                path: format!("target {i}"),
                fs: "?".into(),
                device: "?".into(),
                mount_options: String::new(),
            })
    }
}

/// Puts `"type": ty` first in a JSON object.
fn tag(v: &mut Value, ty: &str) {
    if let Value::Object(m) = v {
        let mut out = serde_json::Map::new();
        out.insert("type".into(), Value::String(ty.into()));
        for (k, val) in std::mem::take(m) {
            if k != "type" {
                out.insert(k, val);
            }
        }
        *m = out;
    }
}

/// Disk counters `derive` does not use, left out of the file to keep it
/// small (a reader sees them as unknown).
const UNUSED_DISK: [&str; 7] = [
    "reads_completed",
    "sectors_read",
    "ms_reading",
    "writes_merged",
    "weighted_ms",
    "discards_completed",
    "ms_flushing",
];

/// Drops nulls (a missing optional field reads back as None) and unused
/// disk counters from a raw sample; array slots (one per target) stay.
fn compact_proc(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, val| !val.is_null() && !UNUSED_DISK.contains(&k.as_str()));
            m.values_mut().for_each(compact_proc);
        }
        Value::Array(a) => a.iter_mut().for_each(compact_proc),
        _ => {}
    }
}

fn merge(v: &mut Value, extra: Value) {
    if let (Value::Object(a), Value::Object(b)) = (v, extra) {
        a.extend(b);
    }
}

impl Sink for Recorder {
    fn begin(&mut self, _targets: &[TargetMeta]) -> io::Result<()> {
        Ok(())
    }

    fn marker(&mut self, m: &Marker) -> io::Result<()> {
        Recorder::marker(self, m)
    }

    fn snapshot(&mut self, s: &Snapshot) -> io::Result<()> {
        if let Some(raw) = &s.raw {
            let mut proc = serde_json::to_value(raw)?;
            compact_proc(&mut proc);
            self.line(&json!({"type": "kernel", "index": s.index, "t_s": s.t_s,
                "proc": proc, "wb_starts": s.wb_starts}))?;
        }
        for t in &s.targets {
            let meta = self.meta(t.target);
            let mut v = serde_json::to_value(interval_line(s, t, &meta))?;
            // Exact t_s (the run line rounds it), so replay sees what live saw.
            merge(
                &mut v,
                json!({"t_s": s.t_s, "index": s.index, "target_index": t.target,
                "interval_s": s.interval_s, "active": t.active, "bytes": t.bytes,
                "hist": hist_to_b64(&t.hist), "sync_hist": hist_to_b64(&t.sync_hist)}),
            );
            self.line(&v)?;
        }
        for o in &s.observed {
            let mut v = serde_json::to_value(crate::sink::schema::observed_line(s, o))?;
            merge(
                &mut v,
                json!({"t_s": s.t_s, "index": s.index,
                "interval_s": s.interval_s}),
            );
            self.line(&v)?;
        }
        for st in &s.stalls {
            self.stall(s, st)?;
        }
        for e in &s.events {
            let meta = self.meta(e.target);
            self.line(
                &json!({"type": "event", "t_s": e.t_ns as f64 / 1e9, "target": meta.path,
                "kind": e.kind, "message": e.message, "index": s.index,
                "target_index": e.target, "t_ns": e.t_ns}),
            )?;
        }
        self.out.flush()
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        let metas = self.header.targets.clone();
        let mut v = serde_json::to_value(summary_line(s, &metas))?;
        tag(&mut v, "summary");
        self.line(&v)?;
        self.out.flush()
    }
}

impl Recorder {
    /// A stall line as `run` prints it, plus exact times and where it goes.
    fn stall(&mut self, s: &Snapshot, st: &Stall) -> io::Result<()> {
        let e = &st.ev;
        let meta = e.who.target().map(|i| self.meta(i));
        let mode = e
            .who
            .target()
            .map(|i| s.targets.get(i).map_or("?", |t| t.mode.as_str()));
        let mut v = serde_json::to_value(stall_line(st, meta.as_ref().zip(mode)))?;
        let at = match e.who.target() {
            Some(t) => json!({"index": s.index, "target_index": t,
                "start_ns": e.start_ns, "dur_ns": e.dur()}),
            None => json!({"index": s.index, "start_ns": e.start_ns, "dur_ns": e.dur()}),
        };
        merge(&mut v, at);
        if let Some(c) = &e.call {
            merge(&mut v, json!({ "call": c }));
        }
        if let Some(b) = e.blocked_ns {
            merge(&mut v, json!({ "blocked_ns": b }));
        }
        self.line(&v)
    }
}

/// Where and why reading stopped early.
#[derive(Clone, Debug, PartialEq)]
pub struct Damage {
    pub line: u64,
    pub reason: String,
}

/// A recording read back.
#[derive(Clone, Debug)]
pub struct Recording {
    pub header: Header,
    pub snapshots: Vec<Snapshot>,
    pub markers: Vec<Marker>,
    /// Lines skipped as garbage (line number, why); reading went on.
    pub skipped: Vec<Damage>,
    /// Set when the file ended inside a line or could not be read further.
    pub truncated: Option<Damage>,
    /// The summary line, if the run ended cleanly.
    pub summary: Option<Value>,
    /// Read from what `run --format jsonl` printed, not a recording
    /// (`PRINTED_NOTE` says what that leaves out).
    pub printed: bool,
}

#[derive(Deserialize)]
struct IntervalIn {
    index: u64,
    target_index: usize,
    t_s: f64,
    interval_s: f64,
    #[serde(default = "yes")]
    active: bool,
    mode: Mode,
    threads: u32,
    ops: u64,
    bytes: u64,
    hist: String,
    sync_hist: String,
    stalls: u32,
    #[serde(default)]
    minflt: u64,
    #[serde(default)]
    majflt: u64,
    bdp: Option<BdpStats>,
    wb_waits: Option<u64>,
    #[serde(default)]
    failed: bool,
}

fn yes() -> bool {
    true
}

/// A stall line: a writer's (`target_index`, `thread`) or an observed
/// thread's (`pid`, `comm`, `tid`, `thread_comm`).
#[derive(Deserialize)]
struct StallIn {
    index: u64,
    target_index: Option<usize>,
    thread: Option<u32>,
    pid: Option<u32>,
    #[serde(default)]
    comm: String,
    tid: Option<u32>,
    #[serde(default)]
    thread_comm: String,
    op: OpKind,
    start_ns: u64,
    dur_ns: u64,
    cause: Cause,
    confidence: Confidence,
    #[serde(default)]
    evidence: Evidence,
    #[serde(default)]
    shares: Vec<Share>,
    #[serde(default)]
    via: Vec<Hop>,
    #[serde(default)]
    call: Option<crate::model::stall::Call>,
    #[serde(default)]
    blocked_ns: Option<u64>,
}

impl StallIn {
    fn into_stall(self) -> Result<Stall, String> {
        let who = match (self.pid, self.tid, self.target_index, self.thread) {
            (Some(pid), Some(tid), _, _) => Who::Process {
                pid,
                comm: self.comm,
                tid,
                thread_comm: self.thread_comm,
            },
            (None, _, Some(target), Some(thread)) => Who::Writer { target, thread },
            _ => {
                return Err(
                    "a stall line names neither a target and thread nor a pid and tid".into(),
                )
            }
        };
        Ok(Stall {
            ev: Blocked {
                who,
                op: self.op,
                start_ns: self.start_ns,
                dur_ns: Some(self.dur_ns),
                stack: self.evidence.kernel_stack.clone(),
                call: self.call,
                blocked_ns: self.blocked_ns,
                behind: None,
            },
            why: Attribution {
                cause: self.cause,
                confidence: self.confidence,
                evidence: self.evidence,
                shares: self.shares,
                via: self.via,
            },
        })
    }
}

/// An observed process's line: the interval's fields plus where it goes.
#[derive(Deserialize)]
struct ObservedIn {
    index: u64,
    t_s: f64,
    interval_s: f64,
    #[serde(flatten)]
    o: crate::model::snapshot::ObservedInterval,
}

#[derive(Deserialize)]
struct KernelIn {
    index: u64,
    t_s: f64,
    proc: ProcSample,
    wb_starts: Option<BTreeMap<String, u64>>,
}

#[derive(Deserialize)]
struct EventIn {
    index: u64,
    target_index: usize,
    t_ns: u64,
    kind: EventKind,
    message: String,
}

/// Opens a recording, plain, gzip or zstd (by magic number). zstd is what
/// builds before 2026-12-04 wrote for `.zst`; it is read with a pure-Rust
/// decoder.
fn open(path: &Path) -> io::Result<Box<dyn BufRead>> {
    let mut f = File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let mut magic = [0u8; 4];
    let n = f.read(&mut magic)?;
    let f = File::open(path)?;
    Ok(if n == 4 && magic == [0x28, 0xb5, 0x2f, 0xfd] {
        let dec = ruzstd::decoding::StreamingDecoder::new(f)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("zstd: {e}")))?;
        Box::new(BufReader::new(dec))
    } else if n >= 2 && magic[..2] == [0x1f, 0x8b] {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(f)))
    } else {
        Box::new(BufReader::new(f))
    })
}

/// Reads one line of at most MAX_LINE bytes. Ok(None) at the end; the bool
/// says whether the line ended with a newline (false: cut off).
fn read_line(r: &mut dyn BufRead, buf: &mut Vec<u8>) -> io::Result<Option<bool>> {
    buf.clear();
    let n = r.take(MAX_LINE as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.len() > MAX_LINE {
        // Skip the rest of an absurd line without holding it (unless its
        // newline was already read).
        let mut sink = Vec::new();
        while buf.last() != Some(&b'\n') {
            sink.clear();
            let m = r.take(1 << 20).read_until(b'\n', &mut sink)?;
            if m == 0 || sink.last() == Some(&b'\n') {
                break;
            }
        }
        buf.clear();
        buf.extend_from_slice(b"<line longer than the 16 MiB limit>");
        return Ok(Some(true));
    }
    let complete = buf.last() == Some(&b'\n');
    if complete {
        buf.pop();
    }
    Ok(Some(complete))
}

/// Reads a whole recording, stopping at a cut-off end and skipping (and
/// naming) garbage lines in between.
pub fn read(path: &Path) -> anyhow::Result<Recording> {
    read_inner(path).map_err(|e| {
        // One line, naming the file.
        let msg = format!("{e:#}").replace('\n', " ");
        let name = path.display().to_string();
        if msg.contains(&name) {
            anyhow::anyhow!(msg)
        } else {
            anyhow::anyhow!("{name}: {msg}")
        }
    })
}

fn read_inner(path: &Path) -> anyhow::Result<Recording> {
    let mut r = open(path)?;
    let mut buf = Vec::new();
    let first = read_line(&mut *r, &mut buf)
        .map_err(|e| anyhow::anyhow!("not a stallscope recording (cannot read line 1: {e})"))?;
    if first.is_none() {
        anyhow::bail!("{}: empty file, not a stallscope recording", path.display());
    }
    let head: Value = serde_json::from_slice(&buf).map_err(|_| {
        anyhow::anyhow!(
            "{}: not a stallscope recording (line 1 is not a JSON header)",
            path.display()
        )
    })?;
    if printed::is_printed(&head) {
        return Ok(printed::read(head, &mut *r));
    }
    if head.get("format").and_then(Value::as_str) != Some(FORMAT) {
        anyhow::bail!(
            "{}: not a stallscope recording (format is {}); report reads files made with `stallscope run --record FILE` (or the dashboard's --record) and what `run --format jsonl` printed",
            path.display(),
            head.get("format")
                .map_or("missing".to_string(), |f| f.to_string())
        );
    }
    let version = head.get("version").and_then(Value::as_u64).unwrap_or(0);
    if version > VERSION {
        anyhow::bail!(
            "{}: recording format version {version} is newer than this stallscope reads (version {VERSION}); upgrade stallscope",
            path.display()
        );
    }
    let header: Header = serde_json::from_value(head)
        .map_err(|e| anyhow::anyhow!("{}: bad header: {e}", path.display()))?;
    let mut b = Builder::new(header);
    let mut lineno = 1u64;
    loop {
        lineno += 1;
        let complete = match read_line(&mut *r, &mut buf) {
            Ok(None) => break,
            Ok(Some(c)) => c,
            Err(e) => {
                b.truncated = Some(Damage {
                    line: lineno,
                    reason: format!("unreadable from here: {e}"),
                });
                break;
            }
        };
        if !complete {
            b.truncated = Some(Damage {
                line: lineno,
                reason: "the file ends inside this line (cut off)".into(),
            });
            break;
        }
        if let Err(why) = b.line(&buf) {
            b.skipped.push(Damage {
                line: lineno,
                reason: why,
            });
        }
    }
    Ok(b.finish())
}

/// Groups lines by interval index into snapshots.
struct Builder {
    header: Header,
    snapshots: Vec<Snapshot>,
    markers: Vec<Marker>,
    skipped: Vec<Damage>,
    truncated: Option<Damage>,
    summary: Option<Value>,
    cur: Option<Snapshot>,
    last_raw: Option<ProcSample>,
}

impl Builder {
    fn new(header: Header) -> Builder {
        Builder {
            last_raw: header.proc_start.clone(),
            header,
            snapshots: Vec::new(),
            markers: Vec::new(),
            skipped: Vec::new(),
            truncated: None,
            summary: None,
            cur: None,
        }
    }

    /// The snapshot being built for `index` (closing the previous one).
    fn at(&mut self, index: u64) -> &mut Snapshot {
        if self.cur.as_ref().is_some_and(|s| s.index != index) {
            self.close();
        }
        self.cur.get_or_insert_with(|| Snapshot {
            index,
            ..Snapshot::default()
        })
    }

    fn close(&mut self) {
        // An interval whose lines were cut off before any target's line is
        // incomplete: leave it out rather than show a hole as zero.
        if self
            .cur
            .as_ref()
            .is_some_and(|s| s.targets.is_empty() && s.observed.is_empty())
        {
            self.cur = None;
        }
        if let Some(mut s) = self.cur.take() {
            s.targets.sort_by_key(|t| t.target);
            s.stalls.sort_by_key(|st| st.ev.start_ns);
            if let Some(raw) = &s.raw {
                if let Some(prev) = &self.last_raw {
                    s.kernel = Some(crate::fold::derive::derive(prev, raw, self.header.page_kib));
                }
                self.last_raw = Some(raw.clone());
            }
            self.snapshots.push(s);
        }
    }

    fn line(&mut self, bytes: &[u8]) -> Result<(), String> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
        let ty = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let bad = |e: serde_json::Error| format!("bad {ty} line: {e}");
        match ty.as_str() {
            "kernel" => {
                let k: KernelIn = serde_json::from_value(v).map_err(bad)?;
                let s = self.at(k.index);
                s.raw = Some(k.proc);
                s.t_s = k.t_s;
                s.wb_starts = k.wb_starts;
            }
            "interval" => {
                let i: IntervalIn = serde_json::from_value(v).map_err(bad)?;
                let t = TargetInterval {
                    target: i.target_index,
                    active: i.active,
                    mode: i.mode,
                    threads: i.threads,
                    ops: i.ops,
                    bytes: i.bytes,
                    hist: hist_from_b64(&i.hist)?,
                    sync_hist: hist_from_b64(&i.sync_hist)?,
                    stalls: i.stalls,
                    minflt: i.minflt,
                    majflt: i.majflt,
                    bdp: i.bdp,
                    wb_waits: i.wb_waits,
                    failed: i.failed,
                };
                let s = self.at(i.index);
                s.t_s = i.t_s;
                s.interval_s = i.interval_s;
                s.targets.push(t);
            }
            "observed" => {
                let o: ObservedIn = serde_json::from_value(v).map_err(bad)?;
                let s = self.at(o.index);
                s.t_s = o.t_s;
                s.interval_s = o.interval_s;
                s.observed.push(o.o);
            }
            "stall" => {
                let st: StallIn = serde_json::from_value(v).map_err(bad)?;
                let index = st.index;
                self.at(index).stalls.push(st.into_stall()?);
            }
            "event" => {
                let e: EventIn = serde_json::from_value(v).map_err(bad)?;
                self.at(e.index).events.push(RunEvent {
                    target: e.target_index,
                    t_ns: e.t_ns,
                    kind: e.kind,
                    message: e.message,
                });
            }
            "marker" => {
                let m: Marker = serde_json::from_value(v).map_err(bad)?;
                if let Some(meta) = &m.meta {
                    self.header.targets.push(meta.clone());
                }
                self.markers.push(m);
            }
            "summary" => self.summary = Some(v),
            "header" => return Err("a second header".into()),
            other => return Err(format!("unknown line type {other:?}")),
        }
        Ok(())
    }

    fn finish(mut self) -> Recording {
        self.close();
        // Older builds: intervals that begin at or after the run's end hold
        // the ops that finished while the writers stopped (see `absorb`).
        let end = self.summary.as_ref().and_then(|v| v["duration_s"].as_f64());
        while let (Some(end), [.., _, last]) = (end, &self.snapshots[..]) {
            if last.t_s - last.interval_s < end - 1e-3 {
                break;
            }
            let tail = self.snapshots.pop().expect("two snapshots");
            self.snapshots.last_mut().expect("one left").absorb(tail);
        }
        Recording {
            header: self.header,
            snapshots: self.snapshots,
            markers: self.markers,
            skipped: self.skipped,
            truncated: self.truncated,
            summary: self.summary,
            printed: false,
        }
    }
}

impl Recording {
    /// One line for the person: how much was read and where it stopped.
    pub fn damage_note(&self) -> Option<String> {
        let mut parts = Vec::new();
        for d in &self.skipped {
            parts.push(format!("skipped line {}: {}", d.line, d.reason));
        }
        if let Some(t) = &self.truncated {
            parts.push(format!(
                "stopped at line {}: {} ({} intervals read)",
                t.line,
                t.reason,
                self.snapshots.len()
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}
