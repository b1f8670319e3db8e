//! What `run --format jsonl` printed, read as a recording: a person saves
//! stdout first and asks `report` about it. The printer's lines are the
//! recording's without what only replay needs, so each is mapped into the
//! recording's line and read by the same `Builder`:
//!
//! * no header: targets are named by their lines' `target` (path) and `fs`,
//!   observed processes by their lines' `pid` and `comm`; the workload's
//!   settings other than mode and threads are not known.
//! * no `index` or `interval_s`: an interval is the lines of one `t_s`, its
//!   length the time since the previous one; stall lines follow their
//!   interval's lines (the printer writes them so).
//! * no histograms: latency percentiles cannot be merged over a span, so
//!   the report leaves them out (each interval's line has its own, not
//!   what a segment's are made of).
//! * rounded figures: `bytes` from `mib_per_s` (3 decimals), a stall's
//!   start and length to the µs (`t_s` to the ms).
//! * no raw kernel samples: the kernel figures the lines carry (dirty,
//!   writeback, thresholds, PSI, each target's device) are taken as they
//!   are.

use super::{read_line, Builder, Damage, Header, Recording, FORMAT, VERSION};
use crate::config::{Config, Mode};
use crate::model::kernel::{DevInterval, KernelInterval};
use crate::model::observed::Watched;
use crate::model::snapshot::TargetMeta;
use serde_json::{json, Value};
use std::io::BufRead;

/// The line types `run --format jsonl` prints.
const PRINTED: [&str; 5] = ["interval", "observed", "stall", "event", "summary"];

/// Whether a first line is the printer's (not a recording's header).
pub(super) fn is_printed(first: &Value) -> bool {
    first.get("format").is_none()
        && first
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| PRINTED.contains(&t))
}

/// What `report` says about a file read this way.
pub const NOTE: &str = "this is `run --format jsonl` output, not a recording: latency percentiles are left out (its lines hold each interval's, not the histograms a span's are merged from) and rates come from rounded figures; `stallscope run --record FILE` (beside --format jsonl, or alone) keeps everything";

/// Maps the printer's lines onto the recording's, one at a time.
struct Mapper {
    b: Builder,
    /// End of each interval seen, in order: an interval's index is its
    /// place here.
    times: Vec<f64>,
}

impl Mapper {
    /// The index of the interval ending at `t_s` (a new one when later
    /// than the last) and its length.
    fn interval(&mut self, t_s: f64) -> (usize, f64) {
        if self.times.last().is_none_or(|&l| t_s > l + 1e-9) {
            self.times.push(t_s);
        }
        let i = self
            .times
            .iter()
            .rposition(|&t| (t - t_s).abs() < 1e-9)
            .unwrap_or(self.times.len() - 1);
        let prev = if i == 0 { 0.0 } else { self.times[i - 1] };
        (i, t_s - prev)
    }

    /// The index of a target named by its path, added when new.
    fn target(&mut self, v: &Value) -> usize {
        let path = v["target"].as_str().unwrap_or("?");
        let targets = &mut self.b.header.targets;
        if let Some(i) = targets.iter().position(|t| t.path == path) {
            return i;
        }
        targets.push(TargetMeta {
            path: path.into(),
            fs: v["fs"].as_str().unwrap_or("?").into(),
            device: "?".into(),
            mount_options: String::new(),
        });
        if let (Some(Ok(mode)), Some(threads)) = (
            v.get("mode")
                .map(|m| serde_json::from_value::<Mode>(m.clone())),
            v["threads"].as_u64(),
        ) {
            let c = &mut self.b.header.config;
            (c.mode, c.threads) = (mode, threads as u32);
        }
        targets.len() - 1
    }

    /// The kernel figures an interval or observed line carries, into its
    /// interval (a target's device into its slot).
    fn kernel(&mut self, index: usize, v: &Value, target: Option<usize>) {
        let n = self.b.header.targets.len();
        let s = self.b.at(index as u64);
        let k = s.kernel.get_or_insert_with(|| KernelInterval {
            dirty_kib: v["dirty_kib"].as_u64(),
            writeback_kib: v["writeback_kib"].as_u64(),
            dirty_thresh_kib: v["dirty_thresh_kib"].as_u64(),
            dirty_bg_thresh_kib: v["dirty_bg_thresh_kib"].as_u64(),
            nr_dirty: None,
            nr_writeback: None,
            dirtied_pages: None,
            written_pages: None,
            pgmajfault: None,
            psi_io_some_pct: v["psi_io_some_pct"].as_f64(),
            psi_io_full_pct: v["psi_io_full_pct"].as_f64(),
            devs: Vec::new(),
        });
        k.devs.resize(n, None);
        if let Some(t) = target {
            k.devs[t] = serde_json::from_value::<DevInterval>(v["dev"].clone()).ok();
        }
        if s.wb_starts.is_none() {
            s.wb_starts = serde_json::from_value(v["wb_starts"].clone()).unwrap_or(None);
        }
    }

    /// One printed line, as the recording's line it stands for.
    fn line(&mut self, mut v: Value) -> Result<(), String> {
        let ty = v["type"].as_str().unwrap_or("").to_string();
        let t_s = v["t_s"].as_f64();
        let extra = match ty.as_str() {
            "interval" => {
                let (index, len) = self.interval(t_s.ok_or("an interval line without t_s")?);
                let target = self.target(&v);
                self.kernel(index, &v, Some(target));
                let mib = v["mib_per_s"].as_f64().unwrap_or(0.0);
                json!({"index": index, "target_index": target, "interval_s": len,
                    "bytes": (mib * len * 1048576.0).round() as u64, "active": true,
                    "hist": "", "sync_hist": ""})
            }
            "observed" => {
                let (index, len) = self.interval(t_s.ok_or("an observed line without t_s")?);
                self.kernel(index, &v, None);
                let pid = v["pid"].as_u64().unwrap_or(0) as u32;
                let watched = &mut self.b.header.observed;
                if !watched.iter().any(|w| w.pid == pid) {
                    let comm = v["comm"].as_str().unwrap_or("?").into();
                    watched.push(Watched { pid, comm });
                }
                json!({"index": index, "interval_s": len})
            }
            "stall" => self.stall(&v),
            // The printer's own process events are not the recording's
            // kind of event; nothing the report draws is in them.
            "event" if v.get("pid").is_some() => return Ok(()),
            "event" => json!({"index": self.times.len().saturating_sub(1),
                "target_index": self.target(&v),
                "t_ns": (t_s.unwrap_or(0.0) * 1e9).round() as u64}),
            _ => json!({}),
        };
        super::merge(&mut v, extra);
        let bytes = serde_json::to_vec(&v).map_err(|e| e.to_string())?;
        self.b.line(&bytes)
    }

    /// A stall line's index (the interval whose lines it follows), exact
    /// times from the rounded ones, and its call for the reader.
    fn stall(&mut self, v: &Value) -> Value {
        let ns = |key: &str, per: f64| (v[key].as_f64().unwrap_or(0.0) * per).round() as u64;
        let mut extra = json!({"index": self.times.len().saturating_sub(1),
            "start_ns": ns("t_s", 1e9), "dur_ns": ns("duration_ms", 1e6)});
        if v.get("thread").is_some() {
            super::merge(&mut extra, json!({"target_index": self.target(v)}));
        }
        if v.get("blocked_ms").is_some() {
            super::merge(&mut extra, json!({"blocked_ns": ns("blocked_ms", 1e6)}));
        }
        if let Some(name) = v["syscall"].as_str() {
            let call = json!({"name": name, "file": v["file"], "bytes": v["bytes"]});
            super::merge(&mut extra, json!({ "call": call }));
        }
        extra
    }
}

/// Reads the printer's lines from `r` (the first already in `first`).
pub(super) fn read(first: Value, r: &mut dyn BufRead) -> Recording {
    let header = Header {
        format: FORMAT.into(),
        version: VERSION,
        tool_version: "?".into(),
        host: "?".into(),
        kernel: "?".into(),
        start_unix_s: 0.0,
        config: Config::default(),
        interval_s: 0.0,
        page_kib: 4,
        targets: Vec::new(),
        tracing: None,
        proc_start: None,
        observed: Vec::new(),
        vm: None,
    };
    let mut m = Mapper {
        b: Builder::new(header),
        times: Vec::new(),
    };
    if let Err(reason) = m.line(first) {
        m.b.skipped.push(Damage { line: 1, reason });
    }
    let mut buf = Vec::new();
    for line in 2u64.. {
        let complete = match read_line(r, &mut buf) {
            Ok(None) => break,
            Ok(Some(c)) => c,
            Err(e) => {
                let reason = format!("unreadable from here: {e}");
                m.b.truncated = Some(Damage { line, reason });
                break;
            }
        };
        if !complete {
            let reason = "the file ends inside this line (cut off)".into();
            m.b.truncated = Some(Damage { line, reason });
            break;
        }
        let res = serde_json::from_slice(&buf)
            .map_err(|e| format!("not JSON: {e}"))
            .and_then(|v| m.line(v));
        if let Err(reason) = res {
            m.b.skipped.push(Damage { line, reason });
        }
    }
    m.b.header.interval_s = m.times.first().copied().unwrap_or(0.0);
    let mut rec = m.b.finish();
    rec.printed = true;
    rec
}
