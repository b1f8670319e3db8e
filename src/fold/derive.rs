//! Pure: two raw kernel samples become one interval's levels, deltas and
//! rates. The one derivation used live and in replay.

use crate::model::kernel::{DevInterval, DiskStat, KernelInterval, ProcSample};

/// Pure: levels, deltas and rates between two samples. `page_kib` is the page
/// size in KiB (4 on x86_64). A counter that went back gives `None`.
pub fn derive(prev: &ProcSample, cur: &ProcSample, page_kib: u64) -> KernelInterval {
    let dt_ns = cur.t_ns.checked_sub(prev.t_ns).filter(|&d| d > 0);
    let pct = |a: Option<u64>, b: Option<u64>| -> Option<f64> {
        let us = delta(a, b)? as f64;
        Some((us * 100.0 / (dt_ns? as f64 / 1e3)).min(100.0))
    };
    let (psi_some, psi_full) = match (prev.psi, cur.psi) {
        (Some(p), Some(c)) => (
            pct(p.some_total_us, c.some_total_us),
            pct(p.full_total_us, c.full_total_us),
        ),
        _ => (None, None),
    };
    let kib = |pages: Option<u64>| pages.map(|p| p.saturating_mul(page_kib));
    KernelInterval {
        dirty_kib: cur.mem.dirty_kib,
        writeback_kib: cur.mem.writeback_kib,
        dirty_thresh_kib: kib(cur.vm.nr_dirty_threshold),
        dirty_bg_thresh_kib: kib(cur.vm.nr_dirty_background_threshold),
        nr_dirty: cur.vm.nr_dirty,
        nr_writeback: cur.vm.nr_writeback,
        dirtied_pages: delta(prev.vm.nr_dirtied, cur.vm.nr_dirtied),
        written_pages: delta(prev.vm.nr_written, cur.vm.nr_written),
        pgmajfault: delta(prev.vm.pgmajfault, cur.vm.pgmajfault),
        psi_io_some_pct: psi_some,
        psi_io_full_pct: psi_full,
        devs: cur
            .disks
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let p = prev.disks.get(i)?.as_ref()?;
                dev_interval(p, c.as_ref()?, dt_ns?)
            })
            .collect(),
    }
}

fn dev_interval(p: &DiskStat, c: &DiskStat, dt_ns: u64) -> Option<DevInterval> {
    if p.name != c.name {
        return None;
    }
    // 64-bit counters: going back means the device was re-created.
    let sectors = delta(p.sectors_written, c.sectors_written)?;
    let writes = delta(p.writes_completed, c.writes_completed)?;
    let ms_writing = delta_ms(p.ms_writing, c.ms_writing)?;
    let ticks = delta_ms(p.io_ticks_ms, c.io_ticks_ms)?;
    let dt_ms = dt_ns as f64 / 1e6;
    Some(DevInterval {
        name: c.name.clone(),
        write_mib_per_s: round3(sectors as f64 * 512.0 / (1u64 << 20) as f64 / (dt_ms / 1e3)),
        util_pct: round3((ticks as f64 * 100.0 / dt_ms).min(100.0)),
        inflight: c.in_flight.unwrap_or(0),
        w_await_ms: if writes == 0 {
            0.0
        } else {
            round3(ms_writing as f64 / writes as f64)
        },
        flushes: delta(p.flushes_completed, c.flushes_completed),
    })
}

/// Three decimals are plenty for rates and keep the JSON short.
fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// `b - a`, or `None` when either is unknown or the counter went back.
fn delta(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    b?.checked_sub(a?)
}

/// Like [`delta`] for the diskstats ms fields, which the kernel prints as
/// 32-bit and so wrap: a decrease within 32 bits is a wrap, not a reset.
fn delta_ms(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    let (a, b) = (a?, b?);
    match b.checked_sub(a) {
        Some(d) => Some(d),
        None => {
            let (a, b) = (u32::try_from(a).ok()?, u32::try_from(b).ok()?);
            Some(u64::from(b.wrapping_sub(a)))
        }
    }
}
