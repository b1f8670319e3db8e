//! Property-based fuzzing of the two parsers that take outside input: the
//! recording reader (`recording::read`) and the config file
//! (`Config::from_toml` + `validate`).
//!
//! Each property runs `STALLSCOPE_FUZZ_CASES` cases (default 64, a few
//! seconds in all); `scripts/fuzz.sh` runs them over and over with more.
//! A recording is read on its own thread, so a hang is a failure (not a
//! stuck test) and the memory it allocates is counted (see `Counting`).
//! A failure prints the smallest input proptest found, and writes it to
//! `$STALLSCOPE_FUZZ_SAVE/PROPERTY.EXT` when that is set (nothing is written
//! to the tree otherwise). `STALLSCOPE_FUZZ_IGNORE` skips named checks
//! (see `ignored`) to hunt for other bugs while a known one is open.
//!
//! The plain `#[test]`s beside the properties are bugs the fuzzing found,
//! pinned as fixed inputs.

use base64::Engine as _;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestError, TestRunner};
use serde_json::{json, Value};
use stallscope::config::Config;
use stallscope::sink::recording::{read, Recording, FORMAT, MAX_LINE};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, OnceLock};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Memory: a global allocator that keeps, per thread, the bytes held and the
// peak. The reader runs on a fresh thread, so that thread's peak is what one
// `read` allocated.

struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    let _ = HELD.try_with(|h| {
        let v = h.get() + delta;
        h.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every call goes straight to `System`; the bookkeeping only touches
// const-initialized thread-locals without destructors (no allocation, no
// unwinding).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            track(l.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() {
            track(l.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        track(-(l.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() {
            track(new as isize - l.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Most one `read` may hold at once. A real line is a few KiB; the line
/// buffer may reach 2 × MAX_LINE (32 MiB) while an overlong line is
/// skipped, and a histogram at hdrhistogram's widest legal bounds is ~50 MiB.
const MEM_LIMIT: isize = 96 << 20;
/// A read of a few MiB that takes longer than this is a hang.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------
// Running properties.

fn cases() -> u32 {
    std::env::var("STALLSCOPE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(64)
}

/// Checks named in `STALLSCOPE_FUZZ_IGNORE` (comma-separated: `time_order`,
/// `memory`, `message`, `long_line`) are skipped, to hunt for other bugs
/// while a known one is open.
fn ignored(check: &str) -> bool {
    std::env::var("STALLSCOPE_FUZZ_IGNORE").is_ok_and(|v| v.split(',').any(|c| c.trim() == check))
}

thread_local! {
    /// The last input a property handed to a parser, saved on failure.
    static LAST_INPUT: RefCell<Option<(Vec<u8>, String)>> = const { RefCell::new(None) };
}

fn note_input(bytes: &[u8], ext: &str) {
    LAST_INPUT.with(|l| *l.borrow_mut() = Some((bytes.to_vec(), ext.to_string())));
}

/// With `STALLSCOPE_FUZZ_SAVE=DIR`, a failing input is written to
/// `DIR/NAME.EXT`; proptest's last failure is its smallest, so the file left
/// is the one to reproduce with.
fn save_input(name: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("STALLSCOPE_FUZZ_SAVE")?);
    let (bytes, ext) = LAST_INPUT.with(|l| l.borrow().clone())?;
    std::fs::create_dir_all(&dir).ok()?;
    let path = dir.join(format!("{name}.{ext}"));
    std::fs::write(&path, bytes).ok()?;
    Some(path)
}

/// Runs `test` on `cases() / divisor` (at least 2) values of `strategy`,
/// prints how many ran and panics with the smallest failing input.
fn fuzz<S: Strategy>(
    name: &str,
    divisor: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let n = (cases() / divisor).max(2);
    let mut runner = TestRunner::new(RunnerConfig {
        cases: n,
        failure_persistence: None,
        max_shrink_time: 30_000,
        ..RunnerConfig::default()
    });
    // Cases up to the first failure (shrinking runs more, not counted).
    let ran = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let saved = RefCell::new(None);
    let result = runner.run(&strategy, |v| {
        if !failed.load(Ordering::Relaxed) {
            ran.fetch_add(1, Ordering::Relaxed);
        }
        LAST_INPUT.with(|l| *l.borrow_mut() = None);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(v))).unwrap_or_else(
            |p| {
                let why = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "?".into());
                Err(TestCaseError::fail(format!("panicked: {why}")))
            },
        );
        if r.is_err() {
            failed.store(true, Ordering::Relaxed);
            *saved.borrow_mut() = save_input(name);
        }
        r
    });
    eprintln!(
        "FUZZ {name}: {} cases run ({n} asked){}",
        ran.load(Ordering::Relaxed),
        if result.is_err() { ", FAILED" } else { "" }
    );
    let saved = saved
        .into_inner()
        .map(|p| format!("\nsaved as {}", p.display()))
        .unwrap_or_default();
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, input)) => {
            let mut shown = format!("{input:?}");
            if shown.len() > 1500 {
                let end = (0..=1500)
                    .rev()
                    .find(|&i| shown.is_char_boundary(i))
                    .unwrap();
                shown.truncate(end);
                shown.push_str(" …");
            }
            panic!("{name} failed: {why}\nminimal failing input: {shown}{saved}")
        }
        Err(e) => panic!("{name}: {e}"),
    }
}

macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($msg)+)));
        }
    };
}

// ---------------------------------------------------------------------------
// Reading a file under watch.

/// What a read produced, reduced to what the properties compare.
#[derive(Clone, Debug, PartialEq)]
struct Digest {
    snaps: Vec<Snap>,
    markers: usize,
    skipped: Vec<u64>,
    truncated: Option<u64>,
    summary: bool,
}

#[derive(Clone, Debug, PartialEq)]
struct Snap {
    index: u64,
    t_s: f64,
    interval_s: f64,
    /// (target, ops, bytes, write-latency samples) per target, in order.
    targets: Vec<(usize, u64, u64, u64)>,
    stalls: usize,
    events: usize,
    raw: bool,
}

fn digest(r: &Recording) -> Digest {
    Digest {
        snaps: r
            .snapshots
            .iter()
            .map(|s| Snap {
                index: s.index,
                t_s: s.t_s,
                interval_s: s.interval_s,
                targets: s
                    .targets
                    .iter()
                    .map(|t| (t.target, t.ops, t.bytes, t.hist.len()))
                    .collect(),
                stalls: s.stalls.len(),
                events: s.events.len(),
                raw: s.raw.is_some(),
            })
            .collect(),
        markers: r.markers.len(),
        skipped: r.skipped.iter().map(|d| d.line).collect(),
        truncated: r.truncated.as_ref().map(|d| d.line),
        summary: r.summary.is_some(),
    }
}

struct Outcome {
    result: Result<Digest, String>,
    peak: isize,
    path: String,
}

/// Reads `path` on a fresh thread; a panic, a hang or too much memory is a
/// failed case.
fn watched_read(path: &Path) -> Result<Outcome, TestCaseError> {
    let (tx, rx) = mpsc::channel();
    let p = path.to_path_buf();
    let handle = std::thread::Builder::new()
        .name("fuzz-read".into())
        .spawn(move || {
            PEAK.with(|c| c.set(0));
            HELD.with(|c| c.set(0));
            let result = read(&p).map(|r| digest(&r)).map_err(|e| format!("{e:#}"));
            let peak = PEAK.with(Cell::get);
            let _ = tx.send(Outcome {
                result,
                peak,
                path: String::new(),
            });
        })
        .expect("spawning the reader");
    match rx.recv_timeout(READ_TIMEOUT) {
        Ok(o) => {
            let _ = handle.join();
            if o.peak > MEM_LIMIT && !ignored("memory") {
                return Err(TestCaseError::fail(format!(
                    "read allocated {:.1} MiB at its peak (limit {} MiB)",
                    o.peak as f64 / f64::from(1 << 20),
                    MEM_LIMIT >> 20
                )));
            }
            Ok(o)
        }
        Err(mpsc::RecvTimeoutError::Timeout) => Err(TestCaseError::fail(format!(
            "read did not return within {READ_TIMEOUT:?} (hang)"
        ))),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let why = match handle.join() {
                Err(p) => p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "?".into()),
                Ok(()) => "reader thread ended without an answer".into(),
            };
            Err(TestCaseError::fail(format!("read panicked: {why}")))
        }
    }
}

/// A case's file (on tmpfs when there is one), removed when dropped.
struct CaseFile(tempfile::NamedTempFile);

impl CaseFile {
    fn new(bytes: &[u8], ext: &str) -> CaseFile {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let mut f = tempfile::Builder::new()
            .prefix("stallscope-fuzz-")
            .suffix(&format!(".{ext}"))
            .tempfile_in(dir)
            .expect("a temp file");
        f.write_all(bytes).expect("writing a case file");
        CaseFile(f)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

fn read_bytes(bytes: &[u8], ext: &str) -> Result<Outcome, TestCaseError> {
    note_input(bytes, ext);
    let f = CaseFile::new(bytes, ext);
    let mut o = watched_read(f.path())?;
    o.path = f.path().to_string_lossy().into_owned();
    Ok(o)
}

/// A refusal is one line that names the file.
fn check_message(o: &Outcome) -> Result<(), TestCaseError> {
    if ignored("message") {
        return Ok(());
    }
    if let Err(e) = &o.result {
        check!(
            e.contains(&o.path),
            "the error does not name the file: {e:?}"
        );
        check!(!e.contains('\n'), "the error is not one line: {e:?}");
    }
    Ok(())
}

/// Properties every successful read has, whatever the input.
fn check_structure(d: &Digest) -> Result<(), TestCaseError> {
    for s in &d.snaps {
        check!(
            s.targets.windows(2).all(|w| w[0].0 <= w[1].0),
            "snapshot {} has targets out of order: {:?}",
            s.index,
            s.targets
        );
    }
    Ok(())
}

fn check_time_order(d: &Digest) -> Result<(), TestCaseError> {
    if ignored("time_order") {
        return Ok(());
    }
    for w in d.snaps.windows(2) {
        let back = w[1].t_s < w[0].t_s;
        check!(
            !back,
            "t_s goes back from {} (interval {}) to {} (interval {}); intervals read: {:?}",
            w[0].t_s,
            w[0].index,
            w[1].t_s,
            w[1].index,
            d.snaps
                .iter()
                .map(|s| (s.index, s.t_s, s.targets.len()))
                .collect::<Vec<_>>()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The valid recording everything starts from: one short real run, made once.

struct Base {
    bytes: Vec<u8>,
    /// Where the header line ends (after its newline).
    header_end: usize,
    digest: Digest,
}

/// The base recording; made once per test process. If it cannot be made or
/// read cleanly, every property that needs it fails at once with the same
/// message (rather than running the binary again for each case).
fn base() -> &'static Base {
    static BASE: OnceLock<Result<Base, String>> = OnceLock::new();
    match BASE.get_or_init(make_base) {
        Ok(b) => b,
        Err(e) => panic!("{e}"),
    }
}

fn make_base() -> Result<Base, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let rec = dir.path().join("base.jsonl");
    let target = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        dir.path().to_path_buf()
    };
    let out = Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .args(["run", "--mode", "buffered", "--duration", "2s"])
        .args(["--interval", "200ms", "--target"])
        .arg(&target)
        .arg("--record")
        .arg(&rec)
        .output()
        .map_err(|e| format!("running stallscope: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the base recording: stallscope run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let bytes = std::fs::read(&rec).map_err(|e| format!("reading the recording: {e}"))?;
    let header_end = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("the base recording has no header line")?
        + 1;
    let r = read(&rec).map_err(|e| format!("the base recording does not read: {e:#}"))?;
    if !(r.skipped.is_empty() && r.truncated.is_none() && r.summary.is_some()) {
        let note: String = r
            .damage_note()
            .unwrap_or_else(|| "no summary".into())
            .chars()
            .take(600)
            .collect();
        return Err(format!("the base recording reads damaged: {note}"));
    }
    let digest = digest(&r);
    if digest.snaps.len() < 5 {
        return Err(format!(
            "the base recording has too few intervals: {digest:?}"
        ));
    }
    Ok(Base {
        bytes,
        header_end,
        digest,
    })
}

fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    if bytes.ends_with(b"\n") {
        v.pop();
    }
    v
}

fn join(lines: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l);
        out.push(b'\n');
    }
    out
}

// ---------------------------------------------------------------------------
// Hand-made HdrHistogram V2 blobs, so the reader's histogram decoding sees
// more than the corrupt DEFLATE streams byte flips give.

#[derive(Clone, Debug)]
struct CraftedHist {
    compressed: bool,
    /// The declared payload length; None: the true one.
    payload_len: Option<u32>,
    digits: u32,
    low: u64,
    high: u64,
    ratio: f64,
    counts: Vec<i64>,
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    (b << 16) | a
}

/// A zlib stream of stored (uncompressed) DEFLATE blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let chunks: Vec<&[u8]> = if data.is_empty() {
        vec![&[][..]]
    } else {
        data.chunks(0xffff).collect()
    };
    for (i, c) in chunks.iter().enumerate() {
        out.push(u8::from(i + 1 == chunks.len()));
        let len = c.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(c);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

impl CraftedHist {
    fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::new();
        for &c in &self.counts {
            let mut zz = ((c << 1) ^ (c >> 63)) as u64;
            loop {
                let b = (zz & 0x7f) as u8;
                zz >>= 7;
                if zz == 0 {
                    payload.push(b);
                    break;
                }
                payload.push(b | 0x80);
            }
        }
        let mut v2 = Vec::new();
        v2.extend_from_slice(&0x1c84_9313u32.to_be_bytes());
        let len = self.payload_len.unwrap_or(payload.len() as u32);
        v2.extend_from_slice(&len.to_be_bytes());
        v2.extend_from_slice(&0u32.to_be_bytes());
        v2.extend_from_slice(&self.digits.to_be_bytes());
        v2.extend_from_slice(&self.low.to_be_bytes());
        v2.extend_from_slice(&self.high.to_be_bytes());
        v2.extend_from_slice(&self.ratio.to_be_bytes());
        v2.extend_from_slice(&payload);
        if !self.compressed {
            return v2;
        }
        let z = zlib_stored(&v2);
        let mut out = Vec::new();
        out.extend_from_slice(&0x1c84_9314u32.to_be_bytes());
        out.extend_from_slice(&(z.len() as u32).to_be_bytes());
        out.extend_from_slice(&z);
        out
    }
}

/// Declared payload lengths go up to 256 MiB here (the format allows 4 GiB):
/// enough to show a reader that allocates what a file declares, without
/// making every case of a failing run take seconds.
fn crafted_hist() -> impl Strategy<Value = CraftedHist> {
    (
        any::<bool>(),
        prop_oneof![
            2 => Just(None),
            1 => (0u32..=256 << 20).prop_map(Some),
        ],
        prop_oneof![4 => 0u32..=5, 1 => any::<u32>()],
        prop_oneof![Just(1u64), 1u64..1000, any::<u64>()],
        prop_oneof![Just(60_000_000u64), Just(u64::MAX), any::<u64>()],
        prop_oneof![9 => Just(1.0f64), 1 => any::<f64>()],
        prop::collection::vec(prop_oneof![0i64..1000, -100_000i64..0, any::<i64>()], 0..48),
    )
        .prop_map(
            |(compressed, payload_len, digits, low, high, ratio, counts)| CraftedHist {
                compressed,
                payload_len,
                digits,
                low,
                high,
                ratio,
                counts,
            },
        )
}

// ---------------------------------------------------------------------------
// Mutations of the valid recording.

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop_oneof![
            Just(json!(-1)),
            Just(json!(0)),
            Just(json!(u64::MAX)),
            Just(json!(1e300)),
            Just(json!(-0.5)),
        ],
        prop_oneof![
            Just("interval"),
            Just("kernel"),
            Just("stall"),
            Just("event"),
            Just("marker"),
            Just("summary"),
            Just("header"),
            Just("buffered"),
            Just("mmap"),
            Just("write"),
            Just(""),
            Just("HISTFAAAAB"),
        ]
        .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("t_ns".to_string()),
                        Just("mem".to_string()),
                        Just("vm".to_string()),
                        Just("psi".to_string()),
                        Just("disks".to_string()),
                        Just("name".to_string()),
                        "[a-z_]{1,8}",
                    ],
                    inner
                ),
                0..4
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

#[derive(Clone, Debug)]
enum Edit {
    /// XOR one byte.
    Flip {
        at: Index,
        xor: u8,
    },
    /// Overwrite one byte, often with JSON punctuation.
    Byte {
        at: Index,
        byte: u8,
    },
    Delete {
        line: Index,
    },
    /// Copy a line right after itself.
    Repeat {
        line: Index,
    },
    /// Copy a line anywhere.
    Duplicate {
        line: Index,
        to: Index,
    },
    /// Insert a garbage line.
    Garbage {
        at: Index,
        text: Vec<u8>,
    },
    /// Set one field of a line's JSON object to a random value.
    Field {
        line: Index,
        key: Index,
        value: Value,
    },
    /// Replace an interval line's histogram with a hand-made one.
    Hist {
        line: Index,
        sync: bool,
        hist: CraftedHist,
    },
}

impl Edit {
    /// Whether the edit keeps the surviving lines in their order and values,
    /// so time cannot run backwards unless the reader makes it.
    fn keeps_order(&self) -> bool {
        matches!(
            self,
            Edit::Delete { .. } | Edit::Repeat { .. } | Edit::Garbage { .. } | Edit::Hist { .. }
        )
    }

    fn apply(&self, bytes: &mut Vec<u8>, header_end: usize) {
        // Byte edits leave the header alone (header damage has its own
        // properties); line edits work on lines after it.
        let body = bytes.len() - header_end;
        match self {
            Edit::Flip { at, xor } if body > 0 => {
                bytes[header_end + at.index(body)] ^= xor;
            }
            Edit::Byte { at, byte } if body > 0 => {
                bytes[header_end + at.index(body)] = *byte;
            }
            Edit::Flip { .. } | Edit::Byte { .. } => {}
            _ => {
                let mut ls = lines(bytes);
                if ls.len() < 2 {
                    return;
                }
                let pick = |i: &Index| 1 + i.index(ls.len() - 1);
                match self {
                    Edit::Delete { line } => {
                        ls.remove(pick(line));
                    }
                    Edit::Repeat { line } => {
                        let i = pick(line);
                        ls.insert(i + 1, ls[i].clone());
                    }
                    Edit::Duplicate { line, to } => {
                        let l = ls[pick(line)].clone();
                        let to = 1 + to.index(ls.len());
                        ls.insert(to, l);
                    }
                    Edit::Garbage { at, text } => {
                        let to = 1 + at.index(ls.len());
                        ls.insert(to, text.clone());
                    }
                    Edit::Field { line, key, value } => {
                        let i = pick(line);
                        if let Ok(Value::Object(mut m)) = serde_json::from_slice(&ls[i]) {
                            let mut keys: Vec<String> = m.keys().cloned().collect();
                            keys.push("type".into());
                            keys.push("index".into());
                            let k = keys[key.index(keys.len())].clone();
                            m.insert(k, value.clone());
                            ls[i] = serde_json::to_vec(&m).unwrap();
                        }
                    }
                    Edit::Hist { line, sync, hist } => {
                        let intervals: Vec<usize> = (1..ls.len())
                            .filter(|&i| ls[i].starts_with(br#"{"type":"interval""#))
                            .collect();
                        if intervals.is_empty() {
                            return;
                        }
                        let i = intervals[line.index(intervals.len())];
                        if let Ok(Value::Object(mut m)) = serde_json::from_slice(&ls[i]) {
                            let b64 =
                                base64::engine::general_purpose::STANDARD.encode(hist.encode());
                            let k = if *sync { "sync_hist" } else { "hist" };
                            m.insert(k.into(), Value::from(b64));
                            ls[i] = serde_json::to_vec(&m).unwrap();
                        }
                    }
                    _ => unreachable!(),
                }
                *bytes = join(&ls);
            }
        }
    }
}

fn garbage_line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        "\\PC{0,80}".prop_map(String::into_bytes),
        // A cut-off record.
        (any::<Index>()).prop_map(|i| {
            let ls = lines(&base().bytes);
            let l = &ls[1 + i.index(ls.len() - 1)];
            l[..i.index(l.len())].to_vec()
        }),
        Just(br#"{"type":"interval"}"#.to_vec()),
        Just(br#"{"type":"futuristic","index":3}"#.to_vec()),
        Just(br#"{"type":"kernel","index":18446744073709551615,"proc":{}}"#.to_vec()),
        Just(b"[]".to_vec()),
        Just(b"null".to_vec()),
        Just(Vec::new()),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<Index>(), 1u8..=255).prop_map(|(at, xor)| Edit::Flip { at, xor }),
        (
            any::<Index>(),
            prop_oneof![
                Just(b'\n'),
                Just(b'"'),
                Just(b'{'),
                Just(b'}'),
                Just(b','),
                Just(b'0'),
                Just(b'9'),
                Just(b'-'),
                Just(0u8),
                Just(0xff),
                any::<u8>()
            ]
        )
            .prop_map(|(at, byte)| Edit::Byte { at, byte }),
        any::<Index>().prop_map(|line| Edit::Delete { line }),
        any::<Index>().prop_map(|line| Edit::Repeat { line }),
        (any::<Index>(), any::<Index>()).prop_map(|(line, to)| Edit::Duplicate { line, to }),
        (any::<Index>(), garbage_line()).prop_map(|(at, text)| Edit::Garbage { at, text }),
        (any::<Index>(), any::<Index>(), json_value()).prop_map(|(line, key, value)| Edit::Field {
            line,
            key,
            value
        }),
        (any::<Index>(), any::<bool>(), crafted_hist()).prop_map(|(line, sync, hist)| Edit::Hist {
            line,
            sync,
            hist
        }),
    ]
}

#[derive(Clone, Debug)]
enum Container {
    Plain,
    /// zstd of the same bytes: must read exactly like the plain file.
    Zstd,
    /// zstd, then damaged: a flipped byte or a cut.
    ZstdDamaged {
        at: Index,
        xor: u8,
        cut: bool,
    },
}

#[derive(Clone, Debug)]
struct Mutation {
    edits: Vec<Edit>,
    /// Cut the file here (after the header).
    cut: Option<Index>,
    container: Container,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    (
        prop::collection::vec(edit(), 0..5),
        prop::option::weighted(0.4, any::<Index>()),
        prop_oneof![
            6 => Just(Container::Plain),
            2 => Just(Container::Zstd),
            1 => (any::<Index>(), 1u8..=255, any::<bool>())
                .prop_map(|(at, xor, cut)| Container::ZstdDamaged { at, xor, cut }),
        ],
    )
        .prop_map(|(edits, cut, container)| Mutation {
            edits,
            cut,
            container,
        })
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 1).expect("zstd in memory")
}

fn check_mutation(m: &Mutation) -> Result<(), TestCaseError> {
    let b = base();
    let mut bytes = b.bytes.clone();
    for e in &m.edits {
        e.apply(&mut bytes, b.header_end);
    }
    let edited = bytes.len();
    if let Some(cut) = &m.cut {
        let body = bytes.len() - b.header_end;
        bytes.truncate(b.header_end + cut.index(body + 1));
    }
    check_mutated(m, &bytes).map_err(|e| {
        let cut = match m.cut {
            Some(_) => format!(
                ", cut at byte {} ({} line {})",
                bytes.len(),
                if bytes.ends_with(b"\n") {
                    "after"
                } else {
                    "inside"
                },
                lines(&bytes).len()
            ),
            None => String::new(),
        };
        TestCaseError::fail(format!(
            "{} [the {}-byte base recording became {edited} bytes{cut}]",
            match e {
                TestCaseError::Fail(r) | TestCaseError::Reject(r) => r.message().to_string(),
            },
            b.bytes.len()
        ))
    })
}

fn check_mutated(m: &Mutation, bytes: &[u8]) -> Result<(), TestCaseError> {
    let b = base();
    let plain = read_bytes(bytes, "jsonl")?;
    let o = match &m.container {
        Container::Plain => plain,
        Container::Zstd => {
            let z = read_bytes(&zstd(bytes), "jsonl.zst")?;
            check!(
                z.result.as_ref().ok() == plain.result.as_ref().ok()
                    && z.result.is_ok() == plain.result.is_ok(),
                "zstd reads differently from plain:\n zstd {:?}\nplain {:?}",
                z.result,
                plain.result
            );
            z
        }
        Container::ZstdDamaged { at, xor, cut } => {
            let mut z = zstd(bytes);
            let i = at.index(z.len());
            if *cut {
                z.truncate(i);
            } else {
                z[i] ^= xor;
            }
            // Damaged compressed data may decode to anything: structure only.
            let o = read_bytes(&z, "jsonl.zst")?;
            if let Ok(d) = &o.result {
                check_structure(d)?;
            }
            return Ok(());
        }
    };
    let d = match o.result {
        Ok(d) => d,
        Err(e) => {
            // Only a damaged header may refuse a file, and no edit here
            // touches line 1.
            return Err(TestCaseError::fail(format!(
                "a recording with an intact header was refused: {e}"
            )));
        }
    };
    check_structure(&d)?;
    if m.edits.iter().all(Edit::keeps_order) {
        check_time_order(&d)?;
    }
    if m.edits.is_empty() {
        let orig = &b.digest;
        let n = d.snaps.len();
        let cut_mid_line = !bytes.is_empty() && bytes.last() != Some(&b'\n');
        check!(
            n <= orig.snaps.len(),
            "a cut file has more intervals ({n}) than the whole one"
        );
        check!(d.skipped.is_empty(), "a cut file skipped lines: {d:?}");
        check!(
            d.truncated.is_some() == cut_mid_line,
            "cut {} inside a line, but truncated = {:?}",
            if cut_mid_line { "is" } else { "is not" },
            d.truncated
        );
        if m.cut.is_some() && bytes.len() < b.bytes.len() {
            check!(
                d.truncated.is_some() || n < orig.snaps.len() || !d.summary,
                "a cut file reads as whole"
            );
        }
        // Every interval but the last one read is as in the whole file.
        if n > 1 {
            check!(
                d.snaps[..n - 1] == orig.snaps[..n - 1],
                "a cut file changed earlier intervals:\n  cut {:?}\nwhole {:?}",
                &d.snaps[..n - 1],
                &orig.snaps[..n - 1]
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Recording properties.

#[test]
fn recording_intact_reads_whole() {
    let b = base();
    let o = read_bytes(&b.bytes, "jsonl").unwrap();
    let d = o.result.unwrap();
    assert_eq!(d, b.digest);
    check_time_order(&d).unwrap();
    let z = read_bytes(&zstd(&b.bytes), "zst").unwrap();
    assert_eq!(z.result.unwrap(), b.digest);
}

/// Files of anything: random bytes, a valid header and then random bytes,
/// zstd's magic number and then random bytes, random text.
fn arbitrary_file() -> impl Strategy<Value = (Vec<u8>, &'static str)> {
    let header = base().bytes[..base().header_end].to_vec();
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..2048).prop_map(|b| (b, "bin")),
        prop::collection::vec(any::<u8>(), 0..2048).prop_map(move |b| {
            let mut v = header.clone();
            v.extend(b);
            (v, "jsonl")
        }),
        prop::collection::vec(any::<u8>(), 0..512).prop_map(|b| {
            let mut v = vec![0x28, 0xb5, 0x2f, 0xfd];
            v.extend(b);
            (v, "zst")
        }),
        "\\PC{0,300}".prop_map(|s| (s.into_bytes(), "txt")),
    ]
}

#[test]
fn recording_arbitrary_bytes() {
    fuzz(
        "recording_arbitrary_bytes",
        1,
        arbitrary_file(),
        |(bytes, ext)| {
            let o = read_bytes(&bytes, ext)?;
            if let Ok(d) = &o.result {
                check_structure(d)?;
            }
            Ok(())
        },
    );
}

#[test]
fn recording_mutated() {
    fuzz("recording_mutated", 1, mutation(), |m| check_mutation(&m));
}

/// Cutting a file after its header never fails the read: it loses at most
/// the interval it cut into, and says so when the cut is inside a line.
#[test]
fn recording_cut_after_header() {
    let m = any::<Index>().prop_map(|i| Mutation {
        edits: Vec::new(),
        cut: Some(i),
        container: Container::Plain,
    });
    fuzz("recording_cut_after_header", 1, m, |m| check_mutation(&m));
}

/// A file whose header says a newer major version is refused with a message
/// that says so, whatever follows the header.
#[test]
fn recording_newer_version_refused() {
    let input = (
        prop_oneof![Just(2u64), 2u64..1000, 2..=u64::MAX],
        prop::collection::vec(edit(), 0..3),
    );
    fuzz("recording_newer_version_refused", 2, input, |(v, edits)| {
        let b = base();
        let mut ls = lines(&b.bytes);
        let mut h: Value = serde_json::from_slice(&ls[0]).unwrap();
        h["version"] = json!(v);
        ls[0] = serde_json::to_vec(&h).unwrap();
        let mut bytes = join(&ls);
        let header_end = ls[0].len() + 1;
        for e in &edits {
            e.apply(&mut bytes, header_end);
        }
        match read_bytes(&bytes, "jsonl")?.result {
            Ok(_) => Err(TestCaseError::fail(format!("version {v} was read"))),
            Err(e) => {
                check!(e.contains("newer"), "version {v}: {e}");
                Ok(())
            }
        }
    });
}

/// A header whose fields hold random values: refused or read, never a
/// panic; refused when `format` is not ours.
#[test]
fn recording_header_fields() {
    let input = (
        // A header field, or (Some) a field of its config.
        any::<Index>(),
        prop::option::of(prop::sample::select(keys())),
        prop_oneof![
            json_value(),
            prop::sample::select(CONFIG_STRINGS).prop_map(Value::from),
        ],
        any::<bool>(),
    );
    fuzz(
        "recording_header_fields",
        2,
        input,
        |(key, config_key, value, drop)| {
            let b = base();
            let mut ls = lines(&b.bytes);
            let Value::Object(mut h) = serde_json::from_slice(&ls[0]).unwrap() else {
                unreachable!()
            };
            let keys: Vec<String> = h.keys().cloned().collect();
            let k = match config_key {
                Some(ck) => format!("config.{ck}"),
                None => keys[key.index(keys.len())].clone(),
            };
            let fields = match config_key {
                Some(_) => h["config"].as_object_mut().unwrap(),
                None => &mut h,
            };
            let name = k.trim_start_matches("config.");
            if drop {
                fields.remove(name);
            } else {
                fields.insert(name.to_string(), value);
            }
            let format_ok = h.get("format").and_then(Value::as_str) == Some(FORMAT);
            ls[0] = serde_json::to_vec(&h).unwrap();
            let o = read_bytes(&join(&ls), "jsonl")?;
            check_message(&o)?;
            match &o.result {
                Ok(d) => {
                    check!(
                        format_ok,
                        "a header with format {:?} was read",
                        h.get("format")
                    );
                    check_structure(d)?;
                }
                Err(e) if !format_ok => {
                    check!(e.contains("not a stallscope recording"), "{k}: {e}");
                }
                Err(_) => {}
            }
            Ok(())
        },
    );
}

/// Builds the base recording with a line of `len` bytes of `fill` inserted
/// before line `at` (1-based, after the header).
fn with_long_line(at: usize, len: usize, fill: u8) -> Vec<u8> {
    let mut ls = lines(&base().bytes);
    ls.insert(at - 1, vec![fill; len]);
    join(&ls)
}

/// Lines longer than the cap are skipped as garbage, and the line after
/// them is read: the intervals are those of the file without that line.
fn check_long_line(at: usize, len: usize, fill: u8) -> Result<(), TestCaseError> {
    let bytes = with_long_line(at, len, fill);
    let o = read_bytes(&bytes, "jsonl")?;
    let d = o
        .result
        .map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
    check!(
        d.skipped == vec![at as u64],
        "a {len}-byte line at line {at}: skipped lines {:?}, want [{at}]",
        d.skipped
    );
    check!(d.truncated.is_none(), "truncated: {:?}", d.truncated);
    check!(
        d.snaps == base().digest.snaps || ignored("long_line"),
        "a {len}-byte line at line {at} changed the intervals read \
         (MAX_LINE = {MAX_LINE}):\n  got {:?}\n want {:?}",
        d.snaps
            .iter()
            .map(|s| (s.index, s.t_s, s.targets.len(), s.raw))
            .collect::<Vec<_>>(),
        base()
            .digest
            .snaps
            .iter()
            .map(|s| (s.index, s.t_s, s.targets.len(), s.raw))
            .collect::<Vec<_>>()
    );
    Ok(())
}

#[test]
fn recording_long_lines_at_the_cap() {
    // Before line 3, the first interval line: the line after the long one
    // carries data.
    let mut failures = Vec::new();
    for len in [MAX_LINE - 1, MAX_LINE, MAX_LINE + 1, 20 << 20] {
        if let Err(e) = check_long_line(3, len, b'a') {
            failures.push(format!("{len} bytes: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn recording_long_lines() {
    let input = (
        any::<Index>(),
        prop_oneof![
            Just(MAX_LINE - 1),
            Just(MAX_LINE),
            Just(MAX_LINE + 1),
            MAX_LINE + 2..MAX_LINE + (4 << 20),
        ],
        prop_oneof![Just(b'a'), Just(b' '), Just(b'{'), Just(b'"')],
    );
    fuzz("recording_long_lines", 16, input, |(at, len, fill)| {
        let n = lines(&base().bytes).len();
        check_long_line(2 + at.index(n - 1), len, fill)
    });
}

/// A real run stopped between its `kernel` line and its `interval` lines
/// (a crash, a full disk) leaves a file cut at a line boundary. Reading it
/// must not yield an interval that ends at 0 s after ones that ended later.
#[test]
fn recording_cut_after_a_kernel_line() {
    let b = base();
    let ls = lines(&b.bytes);
    let k = (2..ls.len())
        .find(|&i| ls[i].starts_with(br#"{"type":"kernel""#))
        .expect("a second kernel line");
    let o = read_bytes(&join(&ls[..=k]), "jsonl").unwrap();
    let d = o.result.unwrap();
    check_time_order(&d).unwrap();
}

/// Some index (for a fixed case: which interval line does not matter).
fn any_index() -> Index {
    use proptest::strategy::ValueTree;
    any::<Index>()
        .new_tree(&mut TestRunner::deterministic())
        .unwrap()
        .current()
}

/// Histogram blobs declare their own payload length; the reader must not
/// allocate what a few bytes of a file declare.
#[test]
fn recording_histogram_declaring_a_huge_payload() {
    let mut failures = Vec::new();
    for compressed in [false, true] {
        let hist = CraftedHist {
            compressed,
            payload_len: Some(1 << 30),
            digits: 3,
            low: 1,
            high: 60_000_000,
            ratio: 1.0,
            counts: vec![1, 2, 3],
        };
        let e = Edit::Hist {
            line: any_index(),
            sync: false,
            hist,
        };
        let mut bytes = base().bytes.clone();
        e.apply(&mut bytes, base().header_end);
        if let Err(e) = read_bytes(&bytes, "jsonl") {
            failures.push(format!(
                "{} V2 histogram declaring a 1 GiB payload: {e}",
                if compressed { "compressed" } else { "plain" }
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A damaged zstd file is refused with a message that names it.
#[test]
fn recording_damaged_zstd_names_the_file() {
    let bytes = [0x28, 0xb5, 0x2f, 0xfd, 0, 0, b'x', b'y', b'z'];
    let o = read_bytes(&bytes, "zst").unwrap();
    assert!(o.result.is_err());
    check_message(&o).unwrap();
}

/// Whatever makes a file unreadable, the message is one line naming it.
#[test]
fn recording_errors_name_the_file() {
    let input = prop_oneof![
        arbitrary_file(),
        // A real recording, compressed, damaged near its start.
        (0usize..64, 1u8..=255, any::<bool>()).prop_map(|(at, xor, cut)| {
            let mut z = zstd(&base().bytes);
            if cut {
                z.truncate(at);
            } else {
                z[at] ^= xor;
            }
            (z, "zst")
        }),
    ];
    fuzz(
        "recording_errors_name_the_file",
        1,
        input,
        |(bytes, ext)| check_message(&read_bytes(&bytes, ext)?),
    );
}

// ---------------------------------------------------------------------------
// Config properties.

/// The config file's keys, from `Config` itself (so a new one is fuzzed
/// too), with each default value.
fn config_fields() -> &'static [(&'static str, Value)] {
    static FIELDS: OnceLock<Vec<(&'static str, Value)>> = OnceLock::new();
    FIELDS.get_or_init(|| {
        let Value::Object(m) = serde_json::to_value(Config::default()).unwrap() else {
            unreachable!()
        };
        m.into_iter()
            .map(|(k, v)| (&*Box::leak(k.into_boxed_str()), v))
            .collect()
    })
}

fn keys() -> Vec<&'static str> {
    config_fields().iter().map(|(k, _)| *k).collect()
}

fn is_key(k: &str) -> bool {
    config_fields().iter().any(|(f, _)| *f == k)
}

/// The default value of `key`, as TOML (None: the default is "unset").
fn default_value(key: &str) -> Option<String> {
    fn lit(v: &Value) -> Option<String> {
        Some(match v {
            Value::Null => return None,
            Value::String(s) => toml_str(s),
            Value::Array(a) => {
                let items: Option<Vec<String>> = a.iter().map(lit).collect();
                format!("[{}]", items?.join(", "))
            }
            Value::Object(_) => return None,
            other => other.to_string(),
        })
    }
    lit(&config_fields().iter().find(|(k, _)| *k == key)?.1)
}

/// A TOML string literal for any text.
fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Strings the config's values are parsed from: good, bad and edge ones.
const CONFIG_STRINGS: &[&str] = &[
    "10x",
    "1EiB",
    "16EiB",
    "99999999999EiB",
    "every:0",
    "every:8",
    "every:18446744073709551616",
    "periodic:0s",
    "periodic:10s",
    "periodic:0.0000001s",
    "periodic:",
    "none",
    "mmap",
    "buffered",
    "direct",
    "journal",
    "table",
    "jsonl",
    "0",
    "818",
    "4k",
    "32MiB",
    "1.5G",
    "1e99h",
    "-5s",
    "0.0000001s",
    "0.3s",
    "10ms",
    "1h",
    "3601s",
    "1µs",
    "µs",
    "",
    ".",
    "1..2k",
    "/tmp",
    "1\nx",
    "periodic:1\n0s",
];

/// Values as TOML source text: the shapes the keys take, and wrong ones.
fn toml_value() -> impl Strategy<Value = String> {
    let interesting = prop::sample::select(CONFIG_STRINGS).prop_map(toml_str);
    let scalar = prop_oneof![
        4 => interesting,
        2 => any::<i64>().prop_map(|n| n.to_string()),
        2 => prop_oneof![
            Just("-1"), Just("0"), Just("1"), Just("4"), Just("1024"), Just("1025"),
            Just("4096"), Just("4294967295"), Just("4294967296"),
            Just("9223372036854775807"), Just("18446744073709551615"),
            Just("99999999999999999999999"), Just("-9223372036854775808"),
            Just("0x10"), Just("1_000"),
        ].prop_map(String::from),
        1 => any::<f64>().prop_map(|f| format!("{f:?}")),
        1 => prop_oneof![Just("inf"), Just("-inf"), Just("nan"), Just("1e400"), Just("-0.0")]
            .prop_map(String::from),
        1 => any::<bool>().prop_map(|b| b.to_string()),
        2 => "\\PC{0,16}".prop_map(|s| toml_str(&s)),
        1 => "[0-9]{1,6}(\\.[0-9]{1,3})?(B|k|KiB|MiB|GiB|EiB|ms|s|m|h|us|x)?"
            .prop_map(|s| toml_str(&s)),
        1 => Just("1979-05-27T07:32:00Z".to_string()),
    ];
    scalar.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec(inner, 0..2).prop_map(|v| {
                let kv: Vec<String> = v
                    .iter()
                    .enumerate()
                    .map(|(i, x)| format!("k{i} = {x}"))
                    .collect();
                format!("{{{}}}", kv.join(", "))
            }),
        ]
    })
}

fn check_config_text(text: &str) -> Result<Option<Config>, TestCaseError> {
    note_input(text.as_bytes(), "toml");
    match Config::from_toml(text) {
        Err(e) => {
            check!(!e.contains('\n'), "from_toml error is not one line: {e:?}");
            check!(!e.is_empty(), "from_toml error is empty");
            Ok(None)
        }
        Ok(c) => {
            if let Err(e) = c.validate() {
                let e = e.to_string();
                check!(!e.contains('\n'), "validate error is not one line: {e:?}");
                check!(!e.is_empty(), "validate error is empty");
                return Ok(None);
            }
            Ok(Some(c))
        }
    }
}

#[test]
fn config_arbitrary_text() {
    let input = prop_oneof![
        any::<String>(),
        "[a-z_ =\"'\\[\\]{}.,:0-9#\n\t\\\\-]{0,120}",
        // Known keys in unusual syntax.
        (
            prop::sample::select(keys()),
            "[ =\"'\\[\\]{}.,0-9a-z\n-]{0,40}"
        )
            .prop_map(|(k, rest)| format!("{k}{rest}")),
    ];
    fuzz("config_arbitrary_text", 1, input, |text| {
        check_config_text(&text).map(|_| ())
    });
}

#[test]
fn config_documents() {
    let entry = (
        prop_oneof![
            8 => prop::sample::select(keys()).prop_map(String::from),
            1 => "[a-z_]{1,12}",
        ],
        toml_value(),
    );
    let input = prop::collection::vec(entry, 0..8);
    fuzz("config_documents", 1, input, |entries| {
        let text: String = entries
            .iter()
            .map(|(k, v)| format!("{k} = {v}\n"))
            .collect();
        check_config_text(&text).map(|_| ())
    });
}

fn size_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,5}(\\.[0-9]{1,6})?(B|k|KiB|MiB|GiB|TiB)?".prop_map(|s| toml_str(&s)),
        (0u64..1 << 40).prop_map(|n| n.to_string()),
    ]
}

fn dur_text() -> BoxedStrategy<String> {
    prop_oneof![
        "[0-9]{1,4}(\\.[0-9]{1,9})?(us|ms|s|m|h)?",
        // Fractions, down to below what the units can write.
        "0\\.[0-9]{1,9}(us|ms|s)?",
    ]
    .boxed()
}

/// A plausible value for `key`: the right shape, a random magnitude.
fn typed_value(key: &'static str) -> BoxedStrategy<String> {
    let path = "/[a-z]{1,8}".prop_map(|s| toml_str(&s));
    match key {
        "targets" => prop::collection::vec(path, 0..3)
            .prop_map(|v| format!("[{}]", v.join(", ")))
            .boxed(),
        "journal_dir" => path.boxed(),
        "mode" => prop::sample::select(vec!["mmap", "buffered", "direct", "journal"])
            .prop_map(toml_str)
            .boxed(),
        "format" => prop::sample::select(vec!["table", "jsonl"])
            .prop_map(toml_str)
            .boxed(),
        "threads" => (0u32..2000).prop_map(|n| n.to_string()).boxed(),
        "rate" | "thread_rate" => (0u64..1_000_000).prop_map(|n| n.to_string()).boxed(),
        "record_size" | "segment_size" | "disk_budget" | "journal_size" => size_text().boxed(),
        "sync" => prop_oneof![
            Just("none".to_string()),
            (0u64..100_000).prop_map(|n| format!("every:{n}")),
            dur_text().prop_map(|d| format!("periodic:{d}")),
        ]
        .prop_map(|s| toml_str(&s))
        .boxed(),
        "duration" | "interval" | "stall_threshold" | "commit_interval" => {
            dur_text().prop_map(|s| toml_str(&s)).boxed()
        }
        // A key added since: values of its default's type.
        _ => match config_fields()
            .iter()
            .find(|(k, _)| *k == key)
            .map(|f| &f.1)
        {
            Some(Value::Bool(_)) => any::<bool>().prop_map(|b| b.to_string()).boxed(),
            Some(Value::Number(_)) => (0u64..1_000_000).prop_map(|n| n.to_string()).boxed(),
            Some(Value::String(_)) => prop::sample::select(CONFIG_STRINGS)
                .prop_map(toml_str)
                .boxed(),
            _ => toml_value().boxed(),
        },
    }
}

/// A config that parses and validates is written (as a recording's header
/// stores it) to TOML that parses and validates again, and one more trip
/// changes nothing.
#[test]
fn config_valid_round_trips() {
    let input = prop::sample::subsequence(keys(), 1..=4)
        .prop_flat_map(|keys| {
            keys.into_iter()
                .map(|k| typed_value(k).prop_map(move |v| format!("{k} = {v}\n")))
                .collect::<Vec<_>>()
        })
        .prop_map(|lines| lines.concat());
    fuzz("config_valid_round_trips", 1, input, |text| {
        let Some(c) = check_config_text(&text)? else {
            return Ok(());
        };
        let back = toml::to_string(&c)
            .map_err(|e| TestCaseError::fail(format!("serializing {c:?}: {e}")))?;
        let again = Config::from_toml(&back).map_err(|e| {
            TestCaseError::fail(format!(
                "a valid config is written as TOML that does not read back:\n{text}\nwritten as\n{back}\nerror: {e}"
            ))
        })?;
        if let Err(e) = again.validate() {
            return Err(TestCaseError::fail(format!(
                "a valid config reads back invalid:\n{text}\nwritten as\n{back}\nerror: {e}"
            )));
        }
        check!(
            same_config(&c, &again),
            "a config changes on the way:\n{text}\nwritten as\n{back}\nreads back as {again:?}"
        );
        Ok(())
    });
}

/// Equal, but for durations, which are written in whole microseconds and
/// parsed through an f64.
fn same_config(a: &Config, b: &Config) -> bool {
    use stallscope::config::SyncPolicy;
    let near = |x: Duration, y: Duration| {
        let d = x.abs_diff(y).as_secs_f64();
        d <= 2e-6 + x.as_secs_f64() * 1e-14
    };
    let mut b = b.clone();
    for (x, y) in [
        (a.interval.0, &mut b.interval.0),
        (a.stall_threshold.0, &mut b.stall_threshold.0),
        (a.commit_interval.0, &mut b.commit_interval.0),
    ] {
        if near(x, *y) {
            *y = x;
        }
    }
    if let (Some(x), Some(y)) = (a.duration, b.duration.as_mut()) {
        if near(x.0, y.0) {
            *y = x;
        }
    }
    if let (SyncPolicy::Periodic(x), SyncPolicy::Periodic(y)) = (a.sync, &mut b.sync) {
        if near(x, *y) {
            *y = x;
        }
    }
    *a == b
}

/// How an unknown key is written, and the name the error must carry.
fn unknown_key() -> impl Strategy<Value = (String, String)> {
    let name = "[a-z][a-z0-9_-]{0,15}".prop_filter("not a real key", |k| !is_key(k));
    prop_oneof![
        name.clone().prop_map(|k| (format!("{k} = 1"), k)),
        name.clone().prop_map(|k| (format!("[{k}]\nx = 1"), k)),
        name.clone().prop_map(|k| (format!("{k}.sub = true"), k)),
        "[^\"\\\\\\p{Cc}]{1,12}"
            .prop_filter("not a real key", |k| !is_key(k))
            .prop_map(|k| (format!("{} = \"v\"", toml_str(&k)), k)),
    ]
}

/// A valid value for a key: its default, or one for keys unset by default
/// (None for one added since).
fn valid_value(key: &str) -> Option<String> {
    default_value(key).or_else(|| {
        let v = match key {
            "record_size" => "\"4KiB\"",
            "duration" => "\"1s\"",
            "journal_dir" => "\"/tmp\"",
            _ => return None,
        };
        Some(v.to_string())
    })
}

#[test]
fn config_unknown_key_is_named() {
    let input = (
        prop::sample::subsequence(keys(), 0..=keys().len()).prop_shuffle(),
        unknown_key(),
        any::<Index>(),
    );
    fuzz(
        "config_unknown_key_is_named",
        1,
        input,
        |(known, (line, name), at)| {
            let mut ls: Vec<String> = known
                .iter()
                .filter_map(|k| Some(format!("{k} = {}", valid_value(k)?)))
                .collect();
            // Tables go last: keys after a [table] header belong to it.
            let pos = if line.starts_with('[') {
                ls.len()
            } else {
                at.index(ls.len() + 1)
            };
            ls.insert(pos, line);
            let text = ls.join("\n") + "\n";
            note_input(text.as_bytes(), "toml");
            match Config::from_toml(&text) {
                Ok(c) => Err(TestCaseError::fail(format!(
                    "unknown key {name:?} accepted:\n{text}\n=> {c:?}"
                ))),
                Err(e) => {
                    check!(!e.contains('\n'), "not one line: {e:?}");
                    check!(
                        e.contains(&name),
                        "the error does not name {name:?}: {e}\n{text}"
                    );
                    Ok(())
                }
            }
        },
    );
}

/// Durations finer than a microsecond pass `validate` but are written as
/// `0us`, which reads back as zero: a recording of such a run has a header
/// its own reader refuses ("sync period ... must be above zero").
#[test]
fn config_sub_microsecond_durations_read_back() {
    let mut failures = Vec::new();
    for text in [
        "sync = \"periodic:0.5us\"\n",
        "commit_interval = \"0.1us\"\n",
    ] {
        let c = Config::from_toml(text).unwrap();
        if c.validate().is_err() {
            continue; // refused up front: fine
        }
        let back = toml::to_string(&c).unwrap();
        match Config::from_toml(&back).map(|a| a.validate().map(|()| a)) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => failures.push(format!("{text:?} reads back invalid: {e}")),
            Err(e) => failures.push(format!("{text:?} does not read back: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
