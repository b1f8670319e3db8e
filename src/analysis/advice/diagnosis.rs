//! A diagnosis as the catalog reads it: who stalled, on what, for how long
//! by cause, under which dirty limits and kernel. Plain data, made from a
//! recording here (`from_recording`, through the report's one list of the
//! span's stalls) or from the dashboard's state (`tui::app`).

use crate::config::{Mode, SyncPolicy};
use crate::model::cause::Cause;
use crate::model::snapshot::{cause_totals, merge_causes, CauseTotal, Snapshot, TargetMeta};
use crate::model::stall::{Stall, Who};
use crate::sink::recording::Recording;
use crate::source::proc::DirtySysctls;
use std::collections::BTreeMap;

/// Everything the catalog proposes from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Diagnosis {
    /// The kernel release the stalls happened under ("?" when unknown).
    pub kernel: String,
    pub host: String,
    /// What was recorded, in words ("mmap × 2 threads, …").
    pub title: String,
    pub span_s: f64,
    pub dirty: DirtyLimits,
    /// Who stalled, one per target our writers used and per observed
    /// process; those without a stall too (an honest "nothing to advise").
    pub subjects: Vec<Subject>,
}

/// The dirty limits in force: the sysctls when recorded, and the
/// thresholds the kernel computed from them (vmstat, bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DirtyLimits {
    pub sysctls: Option<DirtySysctls>,
    pub thresh_bytes: Option<u64>,
    pub bg_thresh_bytes: Option<u64>,
}

/// Whose stalls: our writers on a target, or an observed process.
#[derive(Clone, Debug, PartialEq)]
pub enum Stalled {
    Writers {
        mode: Mode,
        threads: u32,
        /// None when not known (read from `run --format jsonl` output).
        sync: Option<SyncPolicy>,
        commit_interval_s: Option<f64>,
    },
    Server {
        pid: u32,
        comm: String,
        kind: Server,
    },
}

/// The servers whose own knobs the catalog knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Postgres,
    RocksDb,
    CephOsd,
    Other,
}

impl Server {
    /// From a process's (or its threads') name.
    pub fn of(comm: &str) -> Server {
        let c = comm.to_ascii_lowercase();
        if c.starts_with("postgres") || c == "postmaster" {
            Server::Postgres
        } else if c.contains("db_bench") || c.contains("rocksdb") {
            Server::RocksDb
        } else if c.starts_with("ceph-osd") {
            Server::CephOsd
        } else {
            Server::Other
        }
    }
}

/// Where the writes went: a target's filesystem and device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Place {
    pub path: String,
    pub fs: String,
    pub mount_options: String,
    /// `MAJ:MIN` of the block device, when it has one (not tmpfs).
    pub device: Option<String>,
    /// The median write rate of the device over the intervals it wrote,
    /// MiB/s: what writeback achieved.
    pub writeback_mib_per_s: Option<f64>,
}

/// One stalled party and its stalls.
#[derive(Clone, Debug, PartialEq)]
pub struct Subject {
    pub who: Stalled,
    /// None for an observed process whose stalls named no device.
    pub place: Option<Place>,
    pub by_cause: BTreeMap<Cause, CauseTotal>,
    pub bytes: Option<u64>,
    /// How many of its sync stalls waited on the journal (their kernel
    /// stack said "journal commit").
    pub journal_waits: u64,
}

impl Subject {
    /// "writers on /mnt/ext4 (ext4, 7:0)", "postgres (pid 42) on 8:0".
    pub fn label(&self) -> String {
        let on = self.place.as_ref().map_or(String::new(), |p| {
            let dev = p.device.as_deref().unwrap_or("no device");
            if p.path.is_empty() {
                format!(" on {dev}")
            } else {
                format!(" on {} ({}, {dev})", p.path, p.fs)
            }
        });
        match &self.who {
            Stalled::Writers { mode, .. } => format!("{mode} writers{on}"),
            Stalled::Server { pid, comm, .. } => format!("{comm} (pid {pid}){on}"),
        }
    }

    pub fn stall_ms(&self) -> f64 {
        self.by_cause.values().map(|t| t.ms).sum()
    }
}

impl Diagnosis {
    /// Stall time and count by cause over every subject, largest time first.
    pub fn causes(&self) -> Vec<(Cause, CauseTotal)> {
        let mut all = BTreeMap::new();
        for s in &self.subjects {
            merge_causes(&mut all, &s.by_cause);
        }
        let mut v: Vec<(Cause, CauseTotal)> = all
            .into_iter()
            .filter(|(_, t)| t.ms > 0.0 || t.count > 0)
            .collect();
        v.sort_by(|a, b| b.1.ms.total_cmp(&a.1.ms));
        v
    }

    /// The devices named by any subject, `MAJ:MIN`.
    pub fn devices(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .subjects
            .iter()
            .filter_map(|s| s.place.as_ref()?.device.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

/// `MAJ:MIN` from a target's device text ("/dev/loop0 (7:0)"); None for
/// a filesystem without a block device (tmpfs's `0:27`).
pub fn device_numbers(device: &str) -> Option<String> {
    let inner = device.rsplit_once('(')?.1.strip_suffix(')')?;
    let (maj, min) = inner.split_once(':')?;
    let (maj, min): (u32, u32) = (maj.parse().ok()?, min.parse().ok()?);
    (maj != 0).then(|| format!("{maj}:{min}"))
}

/// A target's place, without its device's rate.
pub fn place_of(meta: &TargetMeta) -> Place {
    Place {
        path: meta.path.clone(),
        fs: meta.fs.clone(),
        mount_options: meta.mount_options.clone(),
        device: device_numbers(&meta.device),
        writeback_mib_per_s: None,
    }
}

/// The diagnosis of a whole recording: its stalls as `report` counts them
/// (`ReportInput::stalls`), its targets' devices' write rates, its dirty
/// limits.
pub fn from_recording(rec: &Recording) -> Diagnosis {
    let h = &rec.header;
    let input = crate::analysis::span::ReportInput {
        title: String::new(),
        targets: &h.targets,
        snapshots: &rec.snapshots,
        from_s: None,
        to_s: None,
        dirty_by_target: Vec::new(),
    };
    let stalls = input.stalls();
    let span_s = input.span().map_or(0.0, |(a, b)| b - a);
    let writers = |t: usize| {
        // The setting the writers last ran with on this target.
        let last = rec
            .snapshots
            .iter()
            .rev()
            .find_map(|s| s.targets.iter().find(|x| x.target == t && x.active));
        Stalled::Writers {
            mode: last.map_or(h.config.mode, |x| x.mode),
            threads: last.map_or(h.config.threads, |x| x.threads),
            // Printed lines do not say; the header's config is a default.
            sync: (!rec.printed).then_some(h.config.sync),
            commit_interval_s: (!rec.printed).then_some(h.config.commit_interval.0.as_secs_f64()),
        }
    };
    let mut subjects: Vec<Subject> = Vec::new();
    for (i, meta) in h.targets.iter().enumerate() {
        let own: Vec<&Stall> = stalls
            .iter()
            .copied()
            .filter(|s| s.ev.who.target() == Some(i))
            .collect();
        let bytes: u64 = rec
            .snapshots
            .iter()
            .flat_map(|s| s.targets.iter().filter(|x| x.target == i))
            .map(|x| x.bytes)
            .sum();
        let mut place = place_of(meta);
        place.writeback_mib_per_s = writeback_rate(&rec.snapshots, i);
        subjects.push(subject(writers(i), Some(place), &own, Some(bytes)));
    }
    for w in observed_of(rec) {
        let own: Vec<&Stall> = stalls
            .iter()
            .copied()
            .filter(|s| s.ev.who.pid() == Some(w.0))
            .collect();
        let bytes = rec
            .snapshots
            .iter()
            .flat_map(|s| s.observed.iter().filter(|o| o.pid == w.0))
            .map(|o| o.write_bytes)
            .sum::<Option<u64>>();
        let s = server_subject(w.0, w.1, &own, &subjects, bytes);
        subjects.push(s);
    }
    Diagnosis {
        kernel: h.kernel.clone(),
        host: h.host.clone(),
        title: h.workload(),
        span_s,
        dirty: limits(
            h.vm,
            rec.snapshots.iter().rev().find_map(|s| s.kernel.as_ref()),
        ),
        subjects,
    }
}

/// An observed process's subject: its device is the one most of its
/// stalls named, and a target of `known` on that device lends its
/// filesystem and writeback rate.
pub fn server_subject(
    pid: u32,
    comm: String,
    own: &[&Stall],
    known: &[Subject],
    bytes: Option<u64>,
) -> Subject {
    let place = busiest_bdi(own).map(|dev| {
        known
            .iter()
            .filter_map(|s| s.place.as_ref())
            .find(|p| p.device.as_deref() == Some(dev.as_str()))
            .cloned()
            .unwrap_or(Place {
                device: Some(dev),
                ..Place::default()
            })
    });
    let who = Stalled::Server {
        pid,
        kind: server_kind(&comm, own),
        comm,
    };
    subject(who, place, own, bytes)
}

/// The dirty limits: the recorded sysctls and the last interval's
/// thresholds (they follow free memory when set as ratios).
pub fn limits(
    sysctls: Option<DirtySysctls>,
    k: Option<&crate::model::kernel::KernelInterval>,
) -> DirtyLimits {
    DirtyLimits {
        sysctls,
        thresh_bytes: k.and_then(|k| k.dirty_thresh_kib).map(|v| v << 10),
        bg_thresh_bytes: k.and_then(|k| k.dirty_bg_thresh_kib).map(|v| v << 10),
    }
}

/// One subject from its stalls.
pub fn subject(who: Stalled, place: Option<Place>, own: &[&Stall], bytes: Option<u64>) -> Subject {
    let journal_waits = own
        .iter()
        .filter(|s| {
            s.why
                .evidence
                .wait
                .as_deref()
                .is_some_and(|w| w.contains("journal"))
        })
        .count() as u64;
    Subject {
        who,
        place,
        by_cause: cause_totals(own.iter().copied()),
        bytes,
        journal_waits,
    }
}

/// The observed processes: the header's, then any seen only in intervals
/// (joined later), by pid.
fn observed_of(rec: &Recording) -> Vec<(u32, String)> {
    let mut v: Vec<(u32, String)> = rec
        .header
        .observed
        .iter()
        .map(|w| (w.pid, w.comm.clone()))
        .collect();
    for o in rec.snapshots.iter().flat_map(|s| &s.observed) {
        if !v.iter().any(|w| w.0 == o.pid) {
            v.push((o.pid, o.comm.clone()));
        }
    }
    for st in rec.snapshots.iter().flat_map(|s| &s.stalls) {
        if let Who::Process { pid, comm, .. } = &st.ev.who {
            if !v.iter().any(|w| w.0 == *pid) {
                v.push((*pid, comm.clone()));
            }
        }
    }
    v
}

/// A server is known by its process's name or its threads' (RocksDB's
/// flush threads are `rocksdb:high`).
pub fn server_kind(comm: &str, own: &[&Stall]) -> Server {
    let by_threads = || {
        own.iter().find_map(|s| match &s.ev.who {
            Who::Process { thread_comm, .. } => {
                Some(Server::of(thread_comm)).filter(|k| *k != Server::Other)
            }
            Who::Writer { .. } => None,
        })
    };
    match Server::of(comm) {
        Server::Other => by_threads().unwrap_or(Server::Other),
        k => k,
    }
}

/// The device most of a process's stalls named (`evidence.bdi`).
pub fn busiest_bdi(own: &[&Stall]) -> Option<String> {
    let mut n: BTreeMap<&str, u64> = BTreeMap::new();
    for s in own {
        if let Some(b) = s.why.evidence.bdi.as_deref() {
            *n.entry(b).or_default() += 1;
        }
    }
    n.into_iter()
        .max_by_key(|(_, c)| *c)
        .map(|(b, _)| b.to_string())
}

/// The median write rate of target `t`'s device over the intervals in
/// which it wrote (above 0.1 MiB/s), MiB/s.
pub fn writeback_rate(snaps: &[Snapshot], t: usize) -> Option<f64> {
    writing_median(
        snaps
            .iter()
            .filter_map(|s| s.kernel.as_ref()?.devs.get(t)?.as_ref())
            .map(|d| d.write_mib_per_s),
    )
}

/// The median of the rates above 0.1 MiB/s (a device that wrote), if any.
pub fn writing_median(rates: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = rates.filter(|r| *r > 0.1).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_from_target_text() {
        assert_eq!(device_numbers("/dev/loop0 (7:0)").as_deref(), Some("7:0"));
        assert_eq!(device_numbers("/dev/sda1 (8:1)").as_deref(), Some("8:1"));
        assert_eq!(device_numbers("tmpfs (0:27)"), None);
        assert_eq!(device_numbers("loop0"), None);
    }

    #[test]
    fn servers_by_name() {
        assert_eq!(Server::of("postgres"), Server::Postgres);
        assert_eq!(Server::of("db_bench"), Server::RocksDb);
        assert_eq!(Server::of("rocksdb:high"), Server::RocksDb);
        assert_eq!(Server::of("ceph-osd"), Server::CephOsd);
        assert_eq!(Server::of("dd"), Server::Other);
    }

    #[test]
    fn the_fixture_recording_is_diagnosed() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/recording/observe-and-writers-v0.1.0.jsonl"
        );
        let rec = crate::sink::recording::read(std::path::Path::new(path)).unwrap();
        let d = from_recording(&rec);
        assert_eq!(d.kernel, "6.18.44-fc-v1147");
        assert_eq!(d.subjects.len(), 2, "{:?}", d.subjects);
        let w = &d.subjects[0];
        assert!(matches!(
            w.who,
            Stalled::Writers {
                mode: Mode::Mmap,
                ..
            }
        ));
        let p = w.place.as_ref().unwrap();
        assert_eq!((p.fs.as_str(), p.device.as_deref()), ("ext4", Some("7:0")));
        assert!(p.writeback_mib_per_s.unwrap() > 1.0, "{p:?}");
        // As the report counts them: 53 dirty_throttle (10.39 s), 2 sync
        // (11.37 s) for the writers; 11 dirty_throttle (11.52 s) for dd.
        let dt = w.by_cause[&Cause::DirtyThrottle];
        assert_eq!(dt.count, 53);
        assert!((dt.ms / 1e3 - 10.39).abs() < 0.01, "{dt:?}");
        assert!((w.by_cause[&Cause::Sync].ms / 1e3 - 11.37).abs() < 0.01);
        let dd = &d.subjects[1];
        assert!(
            matches!(&dd.who, Stalled::Server { comm, kind: Server::Other, .. } if comm == "dd")
        );
        assert_eq!(dd.by_cause[&Cause::DirtyThrottle].count, 11);
        assert_eq!(dd.bytes, Some(135 << 20), "135.0 MiB written");
        let causes = d.causes();
        assert_eq!(causes[0].0, Cause::DirtyThrottle, "{causes:?}");
        assert_eq!(d.dirty.thresh_bytes, Some(64 << 20));
    }
}
