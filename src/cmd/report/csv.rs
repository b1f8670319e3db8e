//! The CSV of `report --csv`: every numeric field of every interval and
//! target (then of every observed process), for a spreadsheet or a script
//! to take further than the report.

use super::ReportInput;
use crate::model::cause::Cause;
use crate::model::kernel::{DevInterval, KernelInterval};
use crate::model::snapshot::{
    cause_totals, LatSummary, ObservedInterval, Snapshot, TargetInterval, TargetMeta,
};
use crate::model::stall::Stall;

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

/// Columns after `CSV_COLUMNS` (added 2026-12-06, so scripts reading the
/// old ones by position still work): an observed process's pid, then the
/// stall time of the row's stalls, in all and by cause (by shares, as the
/// text and the summary count it, so these add up to `stall_ms`).
fn extra_columns() -> Vec<String> {
    let by_cause = Cause::ALL
        .iter()
        .map(|c| format!("stall_ms_{}", c.as_str()));
    ["pid".to_string(), "stall_ms".to_string()]
        .into_iter()
        .chain(by_cause)
        .collect()
}

/// One row per interval and target with every numeric field, then one per
/// interval and observed process (the fields that apply to it). An unknown
/// value (no kernel sample, no tracing, no device, no op to time) is an
/// empty cell, never 0. A row's stalls are those filed in its interval
/// (`ReportInput::stalls`, which ended in it), so the column adds up to
/// the text's and the summary's count.
pub fn render_csv(input: &ReportInput) -> String {
    let header: Vec<String> = CSV_COLUMNS
        .iter()
        .map(ToString::to_string)
        .chain(extra_columns())
        .collect();
    let mut out = header.join(",");
    out.push('\n');
    let mut push = |cells: Vec<String>| {
        let cells: Vec<String> = cells.iter().map(|c| csv_quote(c)).collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    };
    for s in input.selected() {
        for t in &s.targets {
            let own = filed(s, |st| st.ev.who.target() == Some(t.target));
            let mut row = csv_row(s, t, input.targets.get(t.target), own.len());
            row.extend(stall_cells(None, &own));
            push(row);
        }
        for o in &s.observed {
            let own = filed(s, |st| st.ev.who.pid() == Some(o.pid));
            let mut row = observed_row(s, o, own.len());
            row.extend(stall_cells(Some(o.pid), &own));
            push(row);
        }
    }
    out
}

/// The stalls filed in interval `s` that `pick` keeps.
fn filed(s: &Snapshot, pick: impl Fn(&Stall) -> bool) -> Vec<&Stall> {
    s.stalls.iter().filter(|st| pick(st)).collect()
}

/// The extra columns of a row: pid, then its stalls' time, all and by cause.
fn stall_cells(pid: Option<u32>, stalls: &[&Stall]) -> Vec<String> {
    let by = cause_totals(stalls.iter().copied());
    let ms = |v: f64| round(v, 3).to_string();
    let total: f64 = stalls.iter().map(|s| s.ev.dur() as f64 / 1e6).sum();
    [opt(pid), ms(total)]
        .into_iter()
        .chain(
            Cause::ALL
                .iter()
                .map(|c| ms(by.get(c).map_or(0.0, |t| t.ms))),
        )
        .collect()
}

/// The system-wide kernel columns (dirty_kib to psi_io_full_pct), the same
/// on a target's and an observed process's row.
fn system_cells(k: Option<&KernelInterval>) -> Vec<String> {
    let kv = |f: fn(&KernelInterval) -> Option<u64>| opt(k.and_then(f));
    let pct = |f: fn(&KernelInterval) -> Option<f64>| opt(k.and_then(f).map(|v| round(v, 2)));
    vec![
        kv(|k| k.dirty_kib),
        kv(|k| k.writeback_kib),
        kv(|k| k.dirty_thresh_kib),
        kv(|k| k.dirty_bg_thresh_kib),
        kv(|k| k.dirtied_pages),
        kv(|k| k.written_pages),
        pct(|k| k.psi_io_some_pct),
        pct(|k| k.psi_io_full_pct),
    ]
}

/// The last columns of `CSV_COLUMNS` (minflt to wb_starts): faults,
/// throttling and writeback waits of a target's or a process's threads.
fn thread_cells(
    s: &Snapshot,
    (minflt, majflt): (u64, u64),
    bdp: Option<&crate::model::snapshot::BdpStats>,
    wb_waits: Option<u64>,
) -> Vec<String> {
    let b = |f: fn(&crate::model::snapshot::BdpStats) -> u64| opt(bdp.map(f));
    vec![
        minflt.to_string(),
        majflt.to_string(),
        b(|b| b.events),
        b(|b| b.pause_ms),
        b(|b| b.max_pause_ms),
        opt(wb_waits),
        opt(s.wb_starts.as_ref().map(|m| m.values().sum::<u64>())),
    ]
}

/// An observed process's row in `CSV_COLUMNS`: its name for a target, its
/// writes for bytes, the system figures; what it does not have (ops,
/// latency, sync, a device of its own) empty.
fn observed_row(s: &Snapshot, o: &ObservedInterval, stalls: usize) -> Vec<String> {
    let mib = o.write_bytes.map(|b| {
        round(
            crate::model::snapshot::rates(0, b, s.interval_s).mib_per_s,
            3,
        )
    });
    let e = String::new;
    let mut row = vec![
        round(s.t_s, 3).to_string(),
        round(s.interval_s, 3).to_string(),
        format!("{} (pid {})", o.comm, o.pid),
        "observed".into(),
        e(),
        o.threads.to_string(),
        o.alive.to_string(),
        e(),
        opt(o.write_bytes),
        e(),
        opt(mib),
    ];
    // No latency (6 columns); its stalls; no sync (2).
    row.extend(std::iter::repeat_with(e).take(6));
    row.push(stalls.to_string());
    row.extend([e(), e()]);
    row.extend(system_cells(s.kernel.as_ref()));
    // No device of its own (5 columns).
    row.extend(std::iter::repeat_with(e).take(5));
    row.extend(thread_cells(
        s,
        (o.minflt, o.majflt),
        o.bdp.as_ref(),
        o.wb_waits,
    ));
    row
}

/// A target's row in `CSV_COLUMNS`, with `stalls` filed in its interval.
fn csv_row(
    s: &Snapshot,
    t: &TargetInterval,
    meta: Option<&TargetMeta>,
    stalls: usize,
) -> Vec<String> {
    let r = t.rates(s.interval_s);
    let (lat, timed) = (LatSummary::of(&t.hist), !t.hist.is_empty());
    let lat_us = |v: u64| opt(timed.then_some(v));
    let k = s.kernel.as_ref();
    let dev = k
        .and_then(|k| k.devs.get(t.target))
        .and_then(Option::as_ref);
    let dv = |f: fn(&DevInterval) -> f64| opt(dev.map(|d| round(f(d), 3)));
    let sync_max = (!t.sync_hist.is_empty()).then(|| round(t.sync_hist.max() as f64 / 1e3, 3));
    let mut row = vec![
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
        stalls.to_string(),
        t.sync_hist.len().to_string(),
        opt(sync_max),
    ];
    row.extend(system_cells(k));
    row.extend([
        dv(|d| d.write_mib_per_s),
        dv(|d| d.util_pct),
        opt(dev.map(|d| d.inflight)),
        dv(|d| d.w_await_ms),
        opt(dev.and_then(|d| d.flushes)),
    ]);
    row.extend(thread_cells(
        s,
        (t.minflt, t.majflt),
        t.bdp.as_ref(),
        t.wb_waits,
    ));
    row
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
