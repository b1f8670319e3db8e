//! The kernel's knobs (a device's dirty limit, the global dirty sysctls,
//! the block queue), the filesystem's mount options and our writers' own
//! write path, per cause.

use super::{card, human, Ctx, MIB};
use crate::analysis::advice::card::{Fidelity, Proposal, Scope};
use crate::analysis::advice::diagnosis::{Stalled, Subject};
use crate::analysis::advice::machine::{bdi_path, queue_path, sysctl_path};
use crate::analysis::advice::treatment::{Setting, Treatment};
use crate::config::{Mode, SyncPolicy};
use crate::model::cause::Cause;

const VM_RST: &str = "Documentation/admin-guide/sysctl/vm.rst";
const BDI_ABI: &str = "Documentation/ABI/testing/sysfs-class-bdi";
const EXT4_RST: &str = "Documentation/admin-guide/ext4.rst";
const XFS_RST: &str = "Documentation/admin-guide/xfs.rst";
const BLOCK_ABI: &str = "Documentation/ABI/stable/sysfs-block";
const CASSANDRA: &str = "https://cassandra.apache.org/doc/latest/cassandra/managing/configuration/cass_yaml_file.html#commitlog_disk_access_mode";

/// The kernel, mount and write-path cards for one subject's stalls of one
/// cause.
pub(super) fn cards(ctx: &Ctx, cause: Cause, s: &Subject) -> Vec<Proposal> {
    let mut v = Vec::new();
    match cause {
        Cause::DirtyThrottle => {
            v.extend(device_limit(ctx, cause, s));
            v.extend(background(ctx, cause, s));
            v.extend(write_path(cause, s, &[Mode::Mmap], Mode::Buffered));
            v.extend(write_path(
                cause,
                s,
                &[Mode::Mmap, Mode::Buffered],
                Mode::Direct,
            ));
        }
        Cause::Sync => {
            v.extend(device_limit(ctx, cause, s));
            v.extend(background(ctx, cause, s));
            v.extend(dirty_bytes(ctx, cause, s));
            v.extend(smaller_syncs(cause, s));
            v.extend(ext4_commit(cause, s));
            if s.journal_waits > 0 {
                v.extend(xfs_log(cause, s));
            }
            v.extend(write_path(
                cause,
                s,
                &[Mode::Mmap, Mode::Buffered],
                Mode::Direct,
            ));
        }
        Cause::JournalFull => {
            v.extend(ext4_commit(cause, s));
            v.extend(ext4_writeback(cause, s));
            v.extend(xfs_log(cause, s));
            v.extend(smaller_syncs(cause, s));
        }
        Cause::WritebackWait | Cause::Fault => {
            v.extend(write_path(cause, s, &[Mode::Mmap], Mode::Buffered));
            v.extend(write_path(
                cause,
                s,
                &[Mode::Mmap, Mode::Buffered],
                Mode::Direct,
            ));
        }
        Cause::Device => v.extend(queue(ctx, cause, s)),
        Cause::AppDelay | Cause::Unknown => {}
    }
    v
}

fn device(ctx: &Ctx, s: &Subject) -> Option<String> {
    let dev = s.place.as_ref()?.device.as_deref()?;
    Some(ctx.m.bdi(dev).to_string())
}

fn sysfs(path: &str, value: &str) -> Setting {
    Setting::Sysfs {
        path: path.into(),
        value: value.into(),
    }
}

/// The device's own dirty limit, `max_bytes` with `strict_limit` (6.2),
/// or before 6.2 `max_ratio` of the global limit with `strict_limit`.
fn device_limit(ctx: &Ctx, cause: Cause, s: &Subject) -> Vec<Proposal> {
    let Some(bdi) = device(ctx, s) else {
        return Vec::new();
    };
    let b = ctx.budget(s);
    let max_bytes = bdi_path(&bdi, "max_bytes");
    let strict = bdi_path(&bdi, "strict_limit");
    let rate = s.place.as_ref().and_then(|p| p.writeback_mib_per_s);
    let about = rate.map_or(String::new(), |r| {
        format!(
            " (about {:.1} s at its {r:.1} MiB/s)",
            b as f64 / MIB as f64 / r
        )
    });
    let tradeoff = match cause {
        Cause::Sync => format!(
            "a sync on this device waits behind at most ~{}{about}; its writers throttle sooner, other devices keep the rest of the dirty pool",
            human(b)
        ),
        _ => format!(
            "this device's writers throttle in short pauses once it holds {} dirty{about}; less of its data at risk, other devices keep the rest of the pool",
            human(b)
        ),
    };
    let mut c = card(
        cause,
        s,
        format!("{max_bytes} → {} with strict_limit 1", human(b)),
        max_bytes.clone(),
        ctx.now(&max_bytes),
        b.to_string(),
        Scope::Device,
        tradeoff.clone(),
        BDI_ABI,
    );
    c.gate = ctx.gate(&[&max_bytes, &strict], (6, 2), "a device's max_bytes");
    c.treatment = Some(Treatment {
        settings: vec![sysfs(&max_bytes, &b.to_string()), sysfs(&strict, "1")],
    });
    let older = c.gate.is_some();
    let mut v = vec![c];
    // Before 6.2 (or without max_bytes): the same limit as a share of the
    // global one.
    if let (true, Some(t)) = (older, ctx.d.dirty.thresh_bytes.filter(|t| *t > 0)) {
        let pct = (b * 100).div_ceil(t).clamp(1, 100);
        let max_ratio = bdi_path(&bdi, "max_ratio");
        let mut c = card(
            cause,
            s,
            format!(
                "{max_ratio} → {pct} (% of the {} dirty limit) with strict_limit 1",
                human(t)
            ),
            max_ratio.clone(),
            ctx.now(&max_ratio),
            pct.to_string(),
            Scope::Device,
            format!("{tradeoff}; a share follows the global limit as memory changes"),
            BDI_ABI,
        );
        c.gate = ctx.gate(&[&max_ratio, &strict], (3, 16), "strict_limit");
        c.treatment = Some(Treatment {
            settings: vec![sysfs(&max_ratio, &pct.to_string()), sysfs(&strict, "1")],
        });
        v.push(c);
    }
    v
}

/// A sysctl's value as recorded, "0" meaning its ratio is in force; else
/// the threshold the kernel computed (vmstat): (from, in words, bytes in force).
fn recorded(
    ctx: &Ctx,
    bytes: Option<u64>,
    ratio: Option<u64>,
    eff: Option<u64>,
) -> Option<(String, String, u64)> {
    match (bytes, eff) {
        (Some(b), _) if b > 0 => Some((b.to_string(), human(b), b)),
        (Some(0), Some(e)) => {
            let r = ratio.map_or(String::new(), |r| format!("ratio {r} %, "));
            Some(("0".into(), format!("0 ({r}{} in force)", human(e)), e))
        }
        (_, Some(e)) if ctx.d.dirty.sysctls.is_none() => Some((
            e.to_string(),
            format!("{} (the threshold in force)", human(e)),
            e,
        )),
        _ => None,
    }
}

/// Lower `vm.dirty_background_bytes`: writeback starts sooner.
fn background(ctx: &Ctx, cause: Cause, s: &Subject) -> Option<Proposal> {
    let sc = ctx.d.dirty.sysctls.unwrap_or_default();
    let now = recorded(
        ctx,
        sc.dirty_background_bytes,
        sc.dirty_background_ratio,
        ctx.d.dirty.bg_thresh_bytes,
    )?;
    let to = ctx.budget(s).min(now.2 / 2 / MIB * MIB);
    let why = format!(
        "the flusher starts at {} dirty, not {}: more, smaller writes; global: also every other device's writeback, and a burst's room before it",
        human(to),
        human(now.2)
    );
    (to >= 4 * MIB).then(|| global(ctx, cause, s, "vm.dirty_background_bytes", now, to, why))
}

/// Lower `vm.dirty_bytes`: less backlog for a sync to wait behind.
fn dirty_bytes(ctx: &Ctx, cause: Cause, s: &Subject) -> Option<Proposal> {
    let sc = ctx.d.dirty.sysctls.unwrap_or_default();
    let now = recorded(
        ctx,
        sc.dirty_bytes,
        sc.dirty_ratio,
        ctx.d.dirty.thresh_bytes,
    )?;
    let to = (ctx.budget(s) * 4).min(now.2 / 2 / MIB * MIB);
    let why = format!(
        "at most {} dirty before writers throttle: a sync finds less to write, less data at risk; global: also every other writer of every device throttles sooner",
        human(to)
    );
    (to >= 8 * MIB).then(|| global(ctx, cause, s, "vm.dirty_bytes", now, to, why))
}

/// A global sysctl's card: `now` is (from, in words, bytes in force).
fn global(
    ctx: &Ctx,
    cause: Cause,
    s: &Subject,
    name: &str,
    now: (String, String, u64),
    to: u64,
    tradeoff: String,
) -> Proposal {
    let (from, words, _) = now;
    let mut c = card(
        cause,
        s,
        format!("{name} {words} → {}", human(to)),
        name.into(),
        Some(from),
        to.to_string(),
        Scope::Global,
        tradeoff,
        VM_RST,
    );
    c.gate = ctx.gate(&[&sysctl_path(name)], (2, 6), name);
    c.treatment = Some(Treatment {
        settings: vec![Setting::Sysctl {
            name: name.into(),
            value: to.to_string(),
        }],
    });
    c
}

/// Our writers with another write path (`--mode`).
fn write_path(cause: Cause, s: &Subject, from: &[Mode], to: Mode) -> Option<Proposal> {
    let Stalled::Writers { mode, .. } = &s.who else {
        return None;
    };
    if !from.contains(mode) {
        return None;
    }
    let tradeoff = match to {
        Mode::Direct => "O_DIRECT segments bypass the page cache: no dirty throttling, no backlog behind a sync, no page faults; every write waits for the device and must be block-aligned",
        _ => "write() copies each record into the page cache: no page faults that allocate blocks, no re-dirtied mapped pages waiting on writeback; a system call per record",
    };
    let mut c = card(
        cause,
        s,
        format!("write path {mode} → {to}"),
        "write path".into(),
        Some(mode.to_string()),
        to.to_string(),
        Scope::Application,
        tradeoff.into(),
        CASSANDRA,
    );
    c.treatment = Some(Treatment {
        settings: vec![Setting::RunArgs {
            args: vec!["--mode".into(), to.to_string()],
        }],
    });
    Some(c)
}

/// Our writers' syncs more often, each behind less: the periodic sync's
/// period, or journal mode's commit interval.
fn smaller_syncs(cause: Cause, s: &Subject) -> Option<Proposal> {
    let Stalled::Writers {
        mode,
        sync,
        commit_interval_s,
        ..
    } = &s.who
    else {
        return None;
    };
    let (knob, from, to, what, source) = match (mode, sync) {
        (Mode::Journal, _) if commit_interval_s.is_some_and(|c| c > 1.0) => (
            "--commit-interval",
            format!("{}s", commit_interval_s.unwrap_or_default()),
            "1s",
            "syncfs every 1 s: each commit writes back less and the journal trims sooner; more syncs, more flushes",
            "https://man7.org/linux/man-pages/man2/syncfs.2.html",
        ),
        (Mode::Journal, _) => return None,
        (_, Some(SyncPolicy::Periodic(p))) if p.as_secs_f64() > 1.0 => (
            "--sync",
            SyncPolicy::Periodic(*p).to_string(),
            "periodic:1s",
            "a sync every 1 s waits behind 1 s of writes, not the whole period's; more syncs, more device flushes (the durability window shrinks too)",
            "https://man7.org/linux/man-pages/man2/fsync.2.html",
        ),
        _ => return None,
    };
    let mut c = card(
        cause,
        s,
        format!("{knob} {from} → {to} (smaller, more frequent syncs)"),
        knob.into(),
        Some(from),
        to.into(),
        Scope::Application,
        what.into(),
        source,
    );
    c.treatment = Some(Treatment {
        settings: vec![Setting::RunArgs {
            args: vec![knob.into(), to.into()],
        }],
    });
    Some(c)
}

fn mount_opt(s: &Subject, key: &str) -> Option<String> {
    let p = s.place.as_ref()?;
    p.mount_options
        .split(',')
        .find_map(|o| o.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
}

fn fs_is(s: &Subject, fs: &str) -> bool {
    s.place.as_ref().is_some_and(|p| p.fs == fs)
}

/// ext4 `commit=1`: jbd2 commits every second, in smaller transactions.
fn ext4_commit(cause: Cause, s: &Subject) -> Option<Proposal> {
    if !fs_is(s, "ext4") {
        return None;
    }
    let now = mount_opt(s, "commit");
    if now
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|v| v <= 1)
    {
        return None;
    }
    let default = if now.is_none() { " (default)" } else { "" };
    let from = now.unwrap_or_else(|| "5".into());
    let mut c = card(
        cause,
        s,
        format!("ext4 mount option commit={from}{default} → commit=1"),
        "commit".into(),
        Some(from),
        "1".into(),
        Scope::Mount,
        "jbd2 commits every 1 s: smaller transactions, less ordered data flushed per fsync; more journal writes (remount, this mount only)".into(),
        EXT4_RST,
    );
    c.treatment = Some(Treatment {
        settings: vec![Setting::MountOption {
            option: "commit=1".into(),
        }],
    });
    Some(c)
}

/// ext4 `data=writeback`: commits stop waiting for data blocks.
fn ext4_writeback(cause: Cause, s: &Subject) -> Option<Proposal> {
    if !fs_is(s, "ext4") || mount_opt(s, "data").as_deref() == Some("writeback") {
        return None;
    }
    let from = mount_opt(s, "data").unwrap_or_else(|| "ordered".into());
    Some(card(
        cause,
        s,
        format!("ext4 mount option data={from} → data=writeback"),
        "data".into(),
        Some(from),
        "writeback".into(),
        Scope::Mount,
        "a commit no longer waits for the data its metadata points at: after a crash a file may hold stale blocks (needs a fresh mount, not a remount)".into(),
        EXT4_RST,
    ))
}

/// xfs `logbsize=256k`: bigger in-memory log buffers, fewer log waits.
fn xfs_log(cause: Cause, s: &Subject) -> Option<Proposal> {
    if !fs_is(s, "xfs") || mount_opt(s, "logbsize").as_deref() == Some("256k") {
        return None;
    }
    let from = mount_opt(s, "logbsize").unwrap_or_else(|| "32k".into());
    Some(card(
        cause,
        s,
        format!("xfs mount option logbsize={from} → logbsize=256k"),
        "logbsize".into(),
        Some(from),
        "256k".into(),
        Scope::Mount,
        "bigger log buffers: fewer, larger log writes and fewer waits for a free one; up to 2 MiB more of log in memory at risk (needs a fresh mount, not a remount)".into(),
        XFS_RST,
    ))
}

/// The block queue: not testable on a loop device.
fn queue(ctx: &Ctx, cause: Cause, s: &Subject) -> Vec<Proposal> {
    let Some(disk) = device(ctx, s) else {
        return Vec::new();
    };
    let wbt = queue_path(&disk, "wbt_lat_usec");
    let sched = queue_path(&disk, "scheduler");
    let mut a = card(
        cause,
        s,
        format!("{wbt} → 2000 (writeback throttling at 2 ms)"),
        wbt.clone(),
        ctx.now(&wbt),
        "2000".into(),
        Scope::Device,
        "background writeback is held back to keep other I/O near 2 ms: syncs and reads cut in, the dirty backlog drains slower (0 turns it off)".into(),
        BLOCK_ABI,
    );
    a.fidelity = Fidelity::NotTestable;
    a.gate = ctx.gate(&[&wbt], (4, 10), "writeback throttling");
    let mut b = card(
        cause,
        s,
        format!("{sched} → mq-deadline"),
        sched.clone(),
        ctx.now(&sched),
        "mq-deadline".into(),
        Scope::Device,
        "each request gets a deadline (writes 5 s), so writeback cannot starve a sync; less reordering for throughput than none on fast NVMe".into(),
        "Documentation/block/deadline-iosched.rst",
    );
    b.fidelity = Fidelity::NotTestable;
    b.gate = ctx.gate(&[&sched], (4, 12), "mq-deadline");
    vec![a, b]
}
