//! The CSV of `report --csv`: every numeric field of every interval and
//! target, for a spreadsheet or a script to take further than the report.

use super::ReportInput;
use crate::model::kernel::{DevInterval, KernelInterval};
use crate::model::snapshot::{LatSummary, Snapshot, TargetInterval, TargetMeta};

const CSV_COLUMNS: [&str; 40] = [
    "t_s",
    "interval_s",
    "target",
    "fs",
    "mode",
    "threads",
    "active",
    "ops",
    "bytes",
    "ops_per_s",
    "mib_per_s",
    "lat_mean_us",
    "lat_p50_us",
    "lat_p95_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_max_us",
    "stalls",
    "sync_ops",
    "sync_max_ms",
    "dirty_kib",
    "writeback_kib",
    "dirty_thresh_kib",
    "dirty_bg_thresh_kib",
    "dirtied_pages",
    "written_pages",
    "psi_io_some_pct",
    "psi_io_full_pct",
    "dev_write_mib_per_s",
    "dev_util_pct",
    "dev_inflight",
    "dev_w_await_ms",
    "dev_flushes",
    "minflt",
    "majflt",
    "bdp_events",
    "bdp_pause_ms",
    "bdp_max_pause_ms",
    "wb_waits",
    "wb_starts",
];

/// One row per interval and target with every numeric field. An unknown
/// value (no kernel sample, no tracing, no device, no op to time) is an
/// empty cell, never 0.
pub fn render_csv(input: &ReportInput) -> String {
    let mut out = CSV_COLUMNS.join(",");
    out.push('\n');
    for s in input.selected() {
        for t in &s.targets {
            let cells: Vec<String> = csv_row(s, t, input.targets.get(t.target))
                .iter()
                .map(|c| csv_quote(c))
                .collect();
            out.push_str(&cells.join(","));
            out.push('\n');
        }
    }
    out
}

fn csv_row(s: &Snapshot, t: &TargetInterval, meta: Option<&TargetMeta>) -> Vec<String> {
    let r = t.rates(s.interval_s);
    let (lat, timed) = (LatSummary::of(&t.hist), !t.hist.is_empty());
    let lat_us = |v: u64| opt(timed.then_some(v));
    let k = s.kernel.as_ref();
    let kv = |f: fn(&KernelInterval) -> Option<u64>| opt(k.and_then(f));
    let dev = k
        .and_then(|k| k.devs.get(t.target))
        .and_then(Option::as_ref);
    let dv = |f: fn(&DevInterval) -> f64| opt(dev.map(|d| round(f(d), 3)));
    let bdp = |f: fn(&crate::model::snapshot::BdpStats) -> u64| opt(t.bdp.as_ref().map(f));
    let sync_max = (!t.sync_hist.is_empty()).then(|| round(t.sync_hist.max() as f64 / 1e3, 3));
    vec![
        round(s.t_s, 3).to_string(),
        round(s.interval_s, 3).to_string(),
        meta.map_or(String::new(), |m| m.path.clone()),
        meta.map_or(String::new(), |m| m.fs.clone()),
        t.mode.as_str().to_string(),
        t.threads.to_string(),
        t.active.to_string(),
        t.ops.to_string(),
        t.bytes.to_string(),
        round(r.ops_per_s, 1).to_string(),
        round(r.mib_per_s, 3).to_string(),
        opt(timed.then_some(lat.mean)),
        lat_us(lat.p50),
        lat_us(lat.p95),
        lat_us(lat.p99),
        lat_us(lat.p999),
        lat_us(lat.max),
        t.stalls.to_string(),
        t.sync_hist.len().to_string(),
        opt(sync_max),
        kv(|k| k.dirty_kib),
        kv(|k| k.writeback_kib),
        kv(|k| k.dirty_thresh_kib),
        kv(|k| k.dirty_bg_thresh_kib),
        kv(|k| k.dirtied_pages),
        kv(|k| k.written_pages),
        opt(k.and_then(|k| k.psi_io_some_pct).map(|v| round(v, 2))),
        opt(k.and_then(|k| k.psi_io_full_pct).map(|v| round(v, 2))),
        dv(|d| d.write_mib_per_s),
        dv(|d| d.util_pct),
        opt(dev.map(|d| d.inflight)),
        dv(|d| d.w_await_ms),
        opt(dev.and_then(|d| d.flushes)),
        t.minflt.to_string(),
        t.majflt.to_string(),
        bdp(|b| b.events),
        bdp(|b| b.pause_ms),
        bdp(|b| b.max_pause_ms),
        opt(t.wb_waits),
        opt(s.wb_starts.as_ref().map(|m| m.values().sum::<u64>())),
    ]
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

fn round(v: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (v * m).round() / m
}

/// RFC 4180: a field with a comma, quote or line break is quoted, its
/// quotes doubled.
fn csv_quote(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::report::tests::{input, kernel, meta, moving};
    use crate::model::snapshot::BdpStats;
    use std::collections::BTreeMap;

    /// A tiny CSV reader for the tests: quoted fields, doubled quotes.
    fn csv_fields(line: &str) -> Vec<String> {
        let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    cur.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => out.push(std::mem::take(&mut cur)),
                _ => cur.push(c),
            }
        }
        out.push(cur);
        out
    }

    #[test]
    fn csv_has_every_column_a_row_per_interval_and_target_and_empty_unknowns() {
        let targets = vec![meta("/lab/a,\"b\"", "ext4"), meta("/lab/xfs", "xfs")];
        let (_, mut snaps) = moving();
        snaps[0].kernel = Some(kernel(100 << 10));
        snaps[0].targets[0].bdp = Some(BdpStats {
            events: 3,
            pause_ms: 0,
            max_pause_ms: 0,
        });
        let csv = render_csv(&input(&targets, &snaps));
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + snaps.len() * 2);
        let header = csv_fields(lines[0]);
        for col in [
            "t_s",
            "target",
            "fs",
            "mode",
            "threads",
            "active",
            "ops",
            "ops_per_s",
            "mib_per_s",
            "lat_mean_us",
            "lat_p50_us",
            "lat_p95_us",
            "lat_p99_us",
            "lat_p999_us",
            "lat_max_us",
            "stalls",
            "sync_ops",
            "sync_max_ms",
            "dirty_kib",
            "writeback_kib",
            "dirty_thresh_kib",
            "dirty_bg_thresh_kib",
            "psi_io_some_pct",
            "psi_io_full_pct",
            "dev_write_mib_per_s",
            "dev_util_pct",
            "dev_inflight",
            "dev_w_await_ms",
            "minflt",
            "majflt",
            "bdp_events",
            "bdp_pause_ms",
            "bdp_max_pause_ms",
            "wb_waits",
        ] {
            assert!(header.iter().any(|h| h == col), "no column {col}");
        }
        let row = |i: usize| -> BTreeMap<String, String> {
            header.iter().cloned().zip(csv_fields(lines[i])).collect()
        };
        let (r0, r1) = (row(1), row(3));
        assert_eq!(csv_fields(lines[1]).len(), header.len());
        assert_eq!(r0["target"], "/lab/a,\"b\"");
        assert_eq!((r0["t_s"].as_str(), r0["ops"].as_str()), ("1", "10"));
        assert_eq!(r0["dirty_kib"], (100 << 10).to_string());
        assert_eq!(r0["psi_io_some_pct"], "12.5");
        // Unknown is empty, a measured zero is 0.
        assert_eq!(r0["psi_io_full_pct"], "");
        assert_eq!(r0["dev_util_pct"], "");
        assert_eq!(
            (r0["bdp_events"].as_str(), r0["bdp_pause_ms"].as_str()),
            ("3", "0")
        );
        assert_eq!(r0["wb_waits"], "");
        assert_eq!(
            (r0["sync_ops"].as_str(), r0["sync_max_ms"].as_str()),
            ("0", "")
        );
        assert_eq!(r1["dirty_kib"], "");
        assert_eq!(r1["bdp_events"], "");
        // The idle target timed nothing: no latency, not 0 µs.
        let idle = row(2);
        assert_eq!(
            (idle["active"].as_str(), idle["ops"].as_str()),
            ("false", "0")
        );
        assert_eq!(idle["lat_p99_us"], "");
        assert_eq!(r0["lat_max_us"], "10");
    }
}
