//! /proc and /sys: dirty-page state, writeback progress, IO pressure and the
//! target's block device, sampled once per interval.
//!
//! [`ProcSampler`] records raw counters only; the pure [`derive`] turns two
//! samples into deltas and rates, so a live run and a replay of recorded
//! samples share one code path. Every reader takes a [`ProcRoot`], so the
//! parsers are tested on fixture trees (`tests/fixtures/proc/<case>/{proc,sys}`).
//! A field the kernel does not provide is `None`, never 0.
//!
//! Which parser where:
//! - `/proc/diskstats`: `procfs::DiskStat::from_line`, a pure line parser that
//!   already handles the 14-, 18- (discards, 4.18) and 20-field (flushes, 5.5)
//!   layouts. A line it rejects (the pre-2.6.25 four-counter partition lines)
//!   gives `None` rather than misread numbers.
//! - Everything else is hand-parsed. procfs's `Meminfo` makes some twenty keys
//!   mandatory (one absent key would lose `Dirty` too) and builds a map per
//!   read; its vmstat reader is hard-wired to `/proc/vmstat`; its `IoPressure`
//!   fails unless both lines parse and takes them by position, not by label;
//!   bdi and sysctl files are single numbers.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::kernel::{Device, DiskStat, MemInfo, ProcSample, Psi, VmStat};
use crate::source::mounts;
use crate::source::mounts::Mount;

/// Where /proc and /sys live; tests point these at fixture dirs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcRoot {
    pub proc: PathBuf,
    pub sys: PathBuf,
}

impl Default for ProcRoot {
    fn default() -> Self {
        ProcRoot {
            proc: PathBuf::from("/proc"),
            sys: PathBuf::from("/sys"),
        }
    }
}

impl ProcRoot {
    /// A tree holding `proc/` and `sys/` side by side (the fixture layout).
    pub fn under(dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        ProcRoot {
            proc: dir.join("proc"),
            sys: dir.join("sys"),
        }
    }
}

// ---------------------------------------------------------------- meminfo

/// Parses meminfo text; unknown keys are ignored.
pub fn parse_meminfo(text: &str) -> MemInfo {
    let mut m = MemInfo::default();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let slot = match key {
            "Dirty" => &mut m.dirty_kib,
            "Writeback" => &mut m.writeback_kib,
            _ => continue,
        };
        *slot = rest.split_whitespace().next().and_then(|v| v.parse().ok());
    }
    m
}

pub fn read_meminfo(root: &ProcRoot) -> io::Result<MemInfo> {
    Ok(parse_meminfo(&std::fs::read_to_string(
        root.proc.join("meminfo"),
    )?))
}

// ----------------------------------------------------------------- vmstat

/// Parses vmstat text; unknown keys are ignored.
pub fn parse_vmstat(text: &str) -> VmStat {
    let mut v = VmStat::default();
    for line in text.lines() {
        let Some((key, val)) = line.split_once(' ') else {
            continue;
        };
        let slot = match key {
            "nr_dirty" => &mut v.nr_dirty,
            "nr_writeback" => &mut v.nr_writeback,
            "nr_dirty_threshold" => &mut v.nr_dirty_threshold,
            "nr_dirty_background_threshold" => &mut v.nr_dirty_background_threshold,
            "nr_dirtied" => &mut v.nr_dirtied,
            "nr_written" => &mut v.nr_written,
            "pgfault" => &mut v.pgfault,
            "pgmajfault" => &mut v.pgmajfault,
            _ => continue,
        };
        *slot = val.trim().parse().ok();
    }
    v
}

pub fn read_vmstat(root: &ProcRoot) -> io::Result<VmStat> {
    Ok(parse_vmstat(&std::fs::read_to_string(
        root.proc.join("vmstat"),
    )?))
}

// -------------------------------------------------------------------- PSI

/// Parses pressure text; lines are matched by their label, other lines and
/// keys are ignored.
pub fn parse_psi(text: &str) -> Psi {
    let mut p = Psi::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let slot = match words.next() {
            Some("some") => &mut p.some_total_us,
            Some("full") => &mut p.full_total_us,
            _ => continue,
        };
        *slot = words
            .find_map(|kv| kv.strip_prefix("total="))
            .and_then(|v| v.parse().ok());
    }
    p
}

/// `Ok(None)` when the kernel has no PSI: the file is absent (before 4.20, or
/// CONFIG_PSI=n) or refuses reads (booted with `psi=0`: EOPNOTSUPP).
pub fn read_psi(root: &ProcRoot) -> io::Result<Option<Psi>> {
    match std::fs::read_to_string(root.proc.join("pressure/io")) {
        Ok(text) => Ok(Some(parse_psi(&text))),
        Err(e) if psi_absent(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

fn psi_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::EOPNOTSUPP)
}

// -------------------------------------------------------------- diskstats

/// The line for device `name` (an exact name match: `loop1` is not `loop10`).
pub fn parse_diskstat(text: &str, name: &str) -> Option<DiskStat> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(name))?;
    let d = procfs::DiskStat::from_line(line).ok()?;
    Some(DiskStat {
        name: d.name,
        reads_completed: Some(d.reads),
        sectors_read: Some(d.sectors_read),
        ms_reading: Some(d.time_reading),
        writes_completed: Some(d.writes),
        writes_merged: Some(d.writes_merged),
        sectors_written: Some(d.sectors_written),
        ms_writing: Some(d.time_writing),
        in_flight: Some(d.in_progress),
        io_ticks_ms: Some(d.time_in_progress),
        weighted_ms: Some(d.weighted_time_in_progress),
        discards_completed: d.discards,
        flushes_completed: d.flushes,
        ms_flushing: d.time_flushing,
    })
}

/// `Ok(None)` when the device has no line (it went away).
pub fn read_diskstat(root: &ProcRoot, name: &str) -> io::Result<Option<DiskStat>> {
    let text = std::fs::read_to_string(root.proc.join("diskstats"))?;
    Ok(parse_diskstat(&text, name))
}

// ------------------------------------------------------- bdi and sysctls

/// The single number in a sysfs or sysctl file.
pub fn parse_value(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

fn read_value(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()
        .as_deref()
        .and_then(parse_value)
}

/// Per-device writeback limits from /sys/class/bdi/MAJ:MIN/. `strict_limit`
/// (3.16) and `max_bytes` (6.2) are missing on older kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BdiSettings {
    pub strict_limit: Option<u64>,
    pub max_ratio: Option<u64>,
    pub max_bytes: Option<u64>,
    pub min_ratio: Option<u64>,
    /// From the disk's `queue/stable_writes` when present: since 5.9 the bdi
    /// file always reads 0 (and logs a deprecation warning).
    pub stable_pages_required: Option<u64>,
    pub read_ahead_kb: Option<u64>,
}

/// The bdi settings governing `dev`: the whole disk's, since partitions share
/// their disk's bdi (loop and dm devices have their own). Err when there is no
/// bdi directory for it; missing files inside it are `None`.
pub fn read_bdi(root: &ProcRoot, dev: &Device) -> io::Result<BdiSettings> {
    let disk = dev.disk.as_deref().unwrap_or(&dev.name);
    let disk_dir = root.sys.join("block").join(disk);
    let (major, minor) = bdi_numbers(root, dev)?;
    let dir = root.sys.join(format!("class/bdi/{major}:{minor}"));
    if !dir.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{}: no such bdi", dir.display()),
        ));
    }
    Ok(BdiSettings {
        strict_limit: read_value(&dir.join("strict_limit")),
        max_ratio: read_value(&dir.join("max_ratio")),
        max_bytes: read_value(&dir.join("max_bytes")),
        min_ratio: read_value(&dir.join("min_ratio")),
        stable_pages_required: read_value(&disk_dir.join("queue/stable_writes"))
            .or_else(|| read_value(&dir.join("stable_pages_required"))),
        read_ahead_kb: read_value(&dir.join("read_ahead_kb")),
    })
}

/// The bdi name tracefs events carry for `dev` ("MAJ:MIN" of the whole disk).
pub fn bdi_name(root: &ProcRoot, dev: &Device) -> io::Result<String> {
    let (major, minor) = bdi_numbers(root, dev)?;
    Ok(format!("{major}:{minor}"))
}

fn bdi_numbers(root: &ProcRoot, dev: &Device) -> io::Result<(u32, u32)> {
    let Some(disk) = dev.disk.as_deref() else {
        return Ok((dev.major, dev.minor));
    };
    let disk_dir = root.sys.join("block").join(disk);
    let text = std::fs::read_to_string(disk_dir.join("dev"))?;
    parse_dev_numbers(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}/dev: not MAJ:MIN", disk_dir.display()),
        )
    })
}

/// The global dirty limits, /proc/sys/vm/dirty_*. A `*_bytes` of 0 means the
/// matching `*_ratio` is in force.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirtySysctls {
    pub dirty_ratio: Option<u64>,
    pub dirty_bytes: Option<u64>,
    pub dirty_background_ratio: Option<u64>,
    pub dirty_background_bytes: Option<u64>,
    pub dirty_expire_centisecs: Option<u64>,
    pub dirty_writeback_centisecs: Option<u64>,
}

/// Err when /proc/sys/vm is not there at all; a missing file is `None`.
pub fn read_dirty_sysctls(root: &ProcRoot) -> io::Result<DirtySysctls> {
    let dir = root.proc.join("sys/vm");
    if !dir.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{}: not found", dir.display()),
        ));
    }
    let v = |name: &str| read_value(&dir.join(name));
    Ok(DirtySysctls {
        dirty_ratio: v("dirty_ratio"),
        dirty_bytes: v("dirty_bytes"),
        dirty_background_ratio: v("dirty_background_ratio"),
        dirty_background_bytes: v("dirty_background_bytes"),
        dirty_expire_centisecs: v("dirty_expire_centisecs"),
        dirty_writeback_centisecs: v("dirty_writeback_centisecs"),
    })
}

// ------------------------------------------------------- device resolution

/// The device holding `path`: canonicalizes it, then [`resolve_canonical`].
pub fn resolve_device(root: &ProcRoot, path: &Path) -> Result<Device, String> {
    let canon = path
        .canonicalize()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    resolve_canonical(root, &canon)
}

/// As [`resolve_device`] for a path that is already canonical (it need not
/// exist here, which lets tests use a fixture's mount points).
pub fn resolve_canonical(root: &ProcRoot, canonical: &Path) -> Result<Device, String> {
    let m = mounts::lookup(&root.proc, canonical)
        .ok_or_else(|| format!("{}: no mount found", canonical.display()))?;
    device_for_mount(root, &m)
}

/// Maps a mount's MAJ:MIN to its kernel name (sysfs `uevent`, else the
/// diskstats line with those numbers) and finds the disk of a partition.
pub fn device_for_mount(root: &ProcRoot, m: &Mount) -> Result<Device, String> {
    let (major, minor) = (m.major, m.minor);
    if major == 0 {
        // Anonymous device numbers: tmpfs, proc, overlay, nfs; btrfs gives
        // every subvolume one, hiding its (possibly several) disks.
        return Err(if m.fs_type == "btrfs" {
            format!(
                "btrfs reports anonymous device 0:{minor} for {}, not its block device ({})",
                m.mount_point.display(),
                m.source
            )
        } else {
            format!(
                "{} has no block device ({} is device 0:{minor})",
                m.fs_type,
                m.mount_point.display()
            )
        });
    }
    let dev_dir = root.sys.join(format!("dev/block/{major}:{minor}"));
    let name = std::fs::read_to_string(dev_dir.join("uevent"))
        .ok()
        .and_then(|t| uevent_devname(&t).map(str::to_owned))
        .or_else(|| {
            let text = std::fs::read_to_string(root.proc.join("diskstats")).ok()?;
            diskstats_name(&text, major, minor).map(str::to_owned)
        })
        .ok_or_else(|| {
            format!(
                "{} ({} on {}): block device {major}:{minor} not found in sysfs or diskstats",
                m.mount_point.display(),
                m.fs_type,
                m.source
            )
        })?;
    let disk = if dev_dir.join("partition").exists() {
        disk_of_partition(&root.sys, &name)
    } else {
        None
    };
    Ok(Device {
        major,
        minor,
        name,
        disk,
    })
}

fn uevent_devname(text: &str) -> Option<&str> {
    text.lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(str::trim)
        .filter(|n| !n.is_empty())
}

fn diskstats_name(text: &str, major: u32, minor: u32) -> Option<&str> {
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        let ma: u32 = w.next()?.parse().ok()?;
        let mi: u32 = w.next()?.parse().ok()?;
        let name = w.next()?;
        (ma == major && mi == minor).then_some(name)
    })
}

/// `<sys>/block` lists whole disks only, each with a subdirectory per
/// partition. Unlike following the `dev/block` symlink to its parent, this
/// works the same on real sysfs and on fixture trees made of plain dirs.
fn disk_of_partition(sys: &Path, part: &str) -> Option<String> {
    std::fs::read_dir(sys.join("block"))
        .ok()?
        .flatten()
        .find(|e| e.path().join(part).is_dir())
        .and_then(|e| e.file_name().into_string().ok())
}

fn parse_dev_numbers(text: &str) -> Option<(u32, u32)> {
    let (ma, mi) = text.trim().split_once(':')?;
    Some((ma.parse().ok()?, mi.parse().ok()?))
}

// ---------------------------------------------------------------- sampler

/// Reads every source once per [`sample`](Self::sample), into one reused
/// buffer, with the paths built up front.
pub struct ProcSampler {
    devices: Vec<Option<Device>>,
    meminfo: PathBuf,
    vmstat: PathBuf,
    psi: PathBuf,
    diskstats: PathBuf,
    buf: String,
}

impl ProcSampler {
    pub fn new(root: ProcRoot, devices: Vec<Option<Device>>) -> Self {
        ProcSampler {
            devices,
            meminfo: root.proc.join("meminfo"),
            vmstat: root.proc.join("vmstat"),
            psi: root.proc.join("pressure/io"),
            diskstats: root.proc.join("diskstats"),
            // vmstat is the largest file, ~6 KiB on 6.18.
            buf: String::with_capacity(16 * 1024),
        }
    }

    /// The devices sampled, one per target.
    pub fn devices(&self) -> &[Option<Device>] {
        &self.devices
    }

    /// One full pass over every source. A source that cannot be read gives
    /// `None` fields; sampling never fails.
    pub fn sample(&mut self, t_ns: u64) -> ProcSample {
        let mem = match load(&mut self.buf, &self.meminfo) {
            Ok(()) => parse_meminfo(&self.buf),
            Err(_) => MemInfo::default(),
        };
        let vm = match load(&mut self.buf, &self.vmstat) {
            Ok(()) => parse_vmstat(&self.buf),
            Err(_) => VmStat::default(),
        };
        let psi = match load(&mut self.buf, &self.psi) {
            Ok(()) => Some(parse_psi(&self.buf)),
            Err(_) => None,
        };
        let have_disks = self.devices.iter().any(Option::is_some)
            && load(&mut self.buf, &self.diskstats).is_ok();
        let disks = self
            .devices
            .iter()
            .map(|d| {
                let d = d.as_ref().filter(|_| have_disks)?;
                parse_diskstat(&self.buf, &d.name)
            })
            .collect();
        ProcSample {
            t_ns,
            mem,
            vm,
            psi,
            disks,
        }
    }
}

/// Replaces `buf`'s contents with the file's, keeping its capacity.
fn load(buf: &mut String, path: &Path) -> io::Result<()> {
    buf.clear();
    File::open(path)?.read_to_string(buf).map(drop)
}

// ------------------------------------------------------------- derivation

/// The page size in KiB (vmstat counts pages); 4 if sysconf fails.
pub fn page_kib() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if bytes >= 1024 {
        bytes as u64 / 1024
    } else {
        4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::derive::derive;
    use crate::model::kernel::KernelInterval;

    fn fx(case: &str) -> ProcRoot {
        ProcRoot::under(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/proc")
                .join(case),
        )
    }

    const CASES: [&str; 3] = ["linux-6.18", "older-kernel", "extra-fields"];

    fn dev(major: u32, minor: u32, name: &str, disk: Option<&str>) -> Device {
        Device {
            major,
            minor,
            name: name.into(),
            disk: disk.map(Into::into),
        }
    }

    #[test]
    fn meminfo_on_every_case() {
        for case in CASES {
            let m = read_meminfo(&fx(case)).unwrap();
            // The extra-fields case has `DirtyFuture:` right after `Dirty:`.
            assert_eq!(m.dirty_kib, Some(280), "{case}");
            assert_eq!(m.writeback_kib, Some(491_520), "{case}");
        }
        let m = parse_meminfo("MemTotal: 100 kB\nWritebackTmp: 7 kB\nDirty: x kB\n");
        assert_eq!(m, MemInfo::default(), "absent or garbled is None, not 0");
    }

    #[test]
    fn vmstat_on_every_case() {
        let full = VmStat {
            nr_dirty: Some(70),
            nr_writeback: Some(122_880),
            nr_dirty_threshold: Some(1_215_553),
            nr_dirty_background_threshold: Some(607_034),
            nr_dirtied: Some(5_583_177),
            nr_written: Some(3_756_736),
            pgfault: Some(12_756_619),
            pgmajfault: Some(4340),
        };
        assert_eq!(read_vmstat(&fx("linux-6.18")).unwrap(), full);
        assert_eq!(read_vmstat(&fx("extra-fields")).unwrap(), full);
        let old = VmStat {
            nr_dirty_threshold: None,
            nr_dirty_background_threshold: None,
            nr_dirtied: None,
            nr_written: None,
            ..full
        };
        assert_eq!(read_vmstat(&fx("older-kernel")).unwrap(), old);
    }

    #[test]
    fn psi_present_absent_and_extra_lines() {
        let want = Psi {
            some_total_us: Some(41_800_781),
            full_total_us: Some(31_366_415),
        };
        assert_eq!(read_psi(&fx("linux-6.18")).unwrap(), Some(want));
        // A leading unknown line and a trailing `max=` key are ignored.
        assert_eq!(read_psi(&fx("extra-fields")).unwrap(), Some(want));
        assert_eq!(read_psi(&fx("older-kernel")).unwrap(), None);
        let only_some = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n");
        assert_eq!(only_some.some_total_us, Some(5));
        assert_eq!(only_some.full_total_us, None);
    }

    #[test]
    fn diskstats_20_18_and_14_fields() {
        let vda = DiskStat {
            name: "vda".into(),
            reads_completed: Some(57_070),
            sectors_read: Some(5_720_030),
            ms_reading: Some(38_123),
            writes_completed: Some(106_821),
            writes_merged: Some(31_453),
            sectors_written: Some(37_785_984),
            ms_writing: Some(348_861),
            in_flight: Some(0),
            io_ticks_ms: Some(24_824),
            weighted_ms: Some(397_080),
            discards_completed: Some(11_288),
            flushes_completed: Some(8619),
            ms_flushing: Some(499),
        };
        assert_eq!(
            read_diskstat(&fx("linux-6.18"), "vda").unwrap(),
            Some(vda.clone())
        );
        // A trailing unknown number is ignored.
        assert_eq!(
            read_diskstat(&fx("extra-fields"), "vda").unwrap(),
            Some(vda.clone())
        );
        let old = read_diskstat(&fx("older-kernel"), "vda").unwrap().unwrap();
        let want_old = DiskStat {
            discards_completed: None,
            flushes_completed: None,
            ms_flushing: None,
            ..vda
        };
        assert_eq!(old, want_old);
        let sda1 = read_diskstat(&fx("older-kernel"), "sda1").unwrap().unwrap();
        assert_eq!(sda1.sectors_written, Some(3_301_120));
        assert_eq!(sda1.in_flight, Some(2));
        // 18 fields: discards but no flushes.
        let t18 = "   8 0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n";
        let d = parse_diskstat(t18, "sda").unwrap();
        assert_eq!(
            (d.discards_completed, d.flushes_completed),
            (Some(12), None)
        );
        // Exact names only; a malformed line is None, not zeros.
        let t = " 7 10 loop10 1 2 3 4 5 6 7 8 9 10 11\n 3 1 hda1 35486 38030 38030 38030\n";
        assert_eq!(parse_diskstat(t, "loop1"), None);
        assert!(parse_diskstat(t, "loop10").is_some());
        assert_eq!(parse_diskstat(t, "hda1"), None);
    }

    #[test]
    fn bdi_of_disk_partition_and_loop() {
        let root = fx("linux-6.18");
        let vda = read_bdi(&root, &dev(254, 0, "vda", None)).unwrap();
        assert_eq!(
            vda,
            BdiSettings {
                strict_limit: Some(0),
                max_ratio: Some(100),
                max_bytes: Some(4_978_929_664),
                min_ratio: Some(0),
                stable_pages_required: Some(0),
                read_ahead_kb: Some(8192),
            }
        );
        // 259:0 has no bdi of its own: the partition uses loop0's (7:0).
        let part = read_bdi(&root, &dev(259, 0, "loop0p1", Some("loop0"))).unwrap();
        assert_eq!(part.read_ahead_kb, Some(2560));
        let loop1 = read_bdi(&root, &dev(7, 1, "loop1", None)).unwrap();
        assert_eq!(loop1.max_bytes, Some(4_978_929_664));
        assert!(read_bdi(&root, &dev(8, 16, "sdb", None)).is_err());

        let old = fx("older-kernel");
        let sda = read_bdi(&old, &dev(8, 1, "sda1", Some("sda"))).unwrap();
        assert_eq!(
            sda,
            BdiSettings {
                strict_limit: None,
                max_ratio: Some(100),
                max_bytes: None,
                min_ratio: Some(0),
                stable_pages_required: Some(0),
                read_ahead_kb: Some(128),
            }
        );
        let extra = read_bdi(&fx("extra-fields"), &dev(254, 0, "vda", None)).unwrap();
        assert_eq!(extra, vda);
    }

    #[test]
    fn bdi_prefers_queue_stable_writes() {
        let dir = tempfile::tempdir().unwrap();
        let root = ProcRoot::under(dir.path());
        let bdi = root.sys.join("class/bdi/8:16");
        let queue = root.sys.join("block/sdb/queue");
        std::fs::create_dir_all(&bdi).unwrap();
        std::fs::create_dir_all(&queue).unwrap();
        std::fs::write(bdi.join("stable_pages_required"), "0\n").unwrap();
        let sdb = dev(8, 16, "sdb", None);
        assert_eq!(
            read_bdi(&root, &sdb).unwrap().stable_pages_required,
            Some(0)
        );
        std::fs::write(queue.join("stable_writes"), "1\n").unwrap();
        assert_eq!(
            read_bdi(&root, &sdb).unwrap().stable_pages_required,
            Some(1)
        );
    }

    #[test]
    fn dirty_sysctls() {
        let want = DirtySysctls {
            dirty_ratio: Some(20),
            dirty_bytes: Some(0),
            dirty_background_ratio: Some(10),
            dirty_background_bytes: Some(0),
            dirty_expire_centisecs: Some(3000),
            dirty_writeback_centisecs: Some(500),
        };
        for case in CASES {
            assert_eq!(read_dirty_sysctls(&fx(case)).unwrap(), want, "{case}");
        }
        assert!(read_dirty_sysctls(&ProcRoot::under("/nonexistent")).is_err());
    }

    #[test]
    fn resolves_disk_loop_partition_and_fallback() {
        let root = fx("linux-6.18");
        // "/" exists everywhere; the fixture's mountinfo puts ext4 on vda there.
        assert_eq!(
            resolve_device(&root, Path::new("/")),
            Ok(dev(254, 0, "vda", None))
        );
        let at = |p: &str| resolve_canonical(&root, Path::new(p));
        assert_eq!(at("/var/tmp/x"), Ok(dev(254, 0, "vda", None)));
        assert_eq!(at("/var/tmp/fx-mnt/loop/d"), Ok(dev(7, 1, "loop1", None)));
        assert_eq!(
            at("/var/tmp/fx-mnt/part/d"),
            Ok(dev(259, 0, "loop0p1", Some("loop0")))
        );
        // 7:3 has no sysfs entry in the fixture: named from diskstats.
        assert_eq!(at("/var/tmp/sslab/mnt/f"), Ok(dev(7, 3, "loop3", None)));

        let old = fx("older-kernel");
        assert_eq!(
            resolve_canonical(&old, Path::new("/data/db")),
            Ok(dev(8, 1, "sda1", Some("sda")))
        );
        assert!(resolve_device(&root, Path::new("/nonexistent/stallscope")).is_err());
    }

    #[test]
    fn anonymous_devices_are_refused() {
        let root = fx("linux-6.18");
        let e = resolve_canonical(&root, Path::new("/dev/shm/x")).unwrap_err();
        assert!(e.starts_with("tmpfs has no block device"), "{e}");
        assert!(!e.contains('\n'));
        let e = resolve_canonical(&root, Path::new("/proc/1")).unwrap_err();
        assert!(e.starts_with("proc has no block device"), "{e}");
        let btrfs = Mount {
            id: 1,
            major: 0,
            minor: 61,
            mount_point: "/mnt/b".into(),
            fs_type: "btrfs".into(),
            source: "/dev/loop3".into(),
            options: String::new(),
        };
        let e = device_for_mount(&root, &btrfs).unwrap_err();
        assert!(e.contains("btrfs") && e.contains("/dev/loop3"), "{e}");
    }

    #[test]
    fn sampler_on_fixtures() {
        let mut s = ProcSampler::new(
            fx("linux-6.18"),
            vec![
                Some(dev(254, 0, "vda", None)),
                None,
                Some(dev(7, 9, "loop9", None)),
            ],
        );
        let a = s.sample(7);
        assert_eq!(a.t_ns, 7);
        assert_eq!(a.mem.dirty_kib, Some(280));
        assert_eq!(a.vm.nr_dirtied, Some(5_583_177));
        assert_eq!(a.psi.unwrap().full_total_us, Some(31_366_415));
        assert_eq!(a.disks.len(), 3);
        assert_eq!(a.disks[0].as_ref().unwrap().flushes_completed, Some(8619));
        assert_eq!((&a.disks[1], &a.disks[2]), (&None, &None));
        assert_eq!(s.sample(7), a, "a second pass over the reused buffer");

        let mut old = ProcSampler::new(
            fx("older-kernel"),
            vec![Some(dev(8, 1, "sda1", Some("sda")))],
        );
        let o = old.sample(1);
        assert_eq!(o.psi, None);
        assert_eq!(o.vm.nr_dirty_threshold, None);
        assert_eq!(o.disks[0].as_ref().unwrap().flushes_completed, None);

        let mut none = ProcSampler::new(ProcRoot::under("/nonexistent"), vec![None]);
        let n = none.sample(1);
        assert_eq!((n.mem, n.vm, n.psi), Default::default());
    }

    fn disk(
        sectors: u64,
        writes: u64,
        ms_w: u64,
        ticks: u64,
        inflight: u64,
        flushes: Option<u64>,
    ) -> DiskStat {
        DiskStat {
            name: "vda".into(),
            reads_completed: Some(0),
            sectors_read: Some(0),
            ms_reading: Some(0),
            writes_completed: Some(writes),
            writes_merged: Some(0),
            sectors_written: Some(sectors),
            ms_writing: Some(ms_w),
            in_flight: Some(inflight),
            io_ticks_ms: Some(ticks),
            weighted_ms: Some(0),
            discards_completed: None,
            flushes_completed: flushes,
            ms_flushing: None,
        }
    }

    fn sample(t_s: u64, psi: (u64, u64), vm: (u64, u64, u64), d: Option<DiskStat>) -> ProcSample {
        ProcSample {
            t_ns: t_s * 1_000_000_000,
            mem: MemInfo {
                dirty_kib: Some(1000 + t_s),
                writeback_kib: Some(10),
            },
            vm: VmStat {
                nr_dirty: Some(250),
                nr_writeback: Some(3),
                nr_dirty_threshold: Some(1000),
                nr_dirty_background_threshold: Some(500),
                nr_dirtied: Some(vm.0),
                nr_written: Some(vm.1),
                pgfault: Some(0),
                pgmajfault: Some(vm.2),
            },
            psi: Some(Psi {
                some_total_us: Some(psi.0),
                full_total_us: Some(psi.1),
            }),
            disks: vec![d, None],
        }
    }

    #[test]
    fn derive_figures() {
        let a = sample(
            10,
            (1_000_000, 500_000),
            (100, 50, 7),
            Some(disk(8192, 100, 1000, 2000, 0, Some(40))),
        );
        let b = sample(
            11,
            (1_250_000, 600_000),
            (356, 150, 9),
            Some(disk(8192 + 2048, 120, 1200, 2500, 3, Some(45))),
        );
        let k = derive(&a, &b, 4);
        assert_eq!(k.dirty_kib, Some(1011));
        assert_eq!(k.writeback_kib, Some(10));
        assert_eq!(k.dirty_thresh_kib, Some(4000));
        assert_eq!(k.dirty_bg_thresh_kib, Some(2000));
        assert_eq!((k.nr_dirty, k.nr_writeback), (Some(250), Some(3)));
        assert_eq!(k.dirtied_pages, Some(256));
        assert_eq!(k.written_pages, Some(100));
        assert_eq!(k.pgmajfault, Some(2));
        assert_eq!(k.psi_io_some_pct, Some(25.0));
        assert_eq!(k.psi_io_full_pct, Some(10.0));
        assert_eq!(k.devs.len(), 2);
        assert_eq!(k.devs[1], None);
        let d = k.devs[0].as_ref().unwrap();
        assert_eq!(d.name, "vda");
        assert_eq!(d.write_mib_per_s, 1.0);
        assert_eq!(d.util_pct, 50.0);
        assert_eq!(d.inflight, 3);
        assert_eq!(d.w_await_ms, 10.0);
        assert_eq!(d.flushes, Some(5));

        // Half a second: rates double, util clamps at 100.
        let mut h = b.clone();
        h.t_ns = a.t_ns + 500_000_000;
        h.disks[0] = Some(disk(8192 + 2048, 100, 1000, 2000 + 900, 0, None));
        let k = derive(&a, &h, 4);
        let d = k.devs[0].as_ref().unwrap();
        assert_eq!(d.write_mib_per_s, 2.0);
        assert_eq!(d.util_pct, 100.0);
        assert_eq!(d.w_await_ms, 0.0, "no writes");
        assert_eq!(d.flushes, None);
        assert_eq!(k.psi_io_some_pct, Some(50.0));
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(serde_json::from_str::<KernelInterval>(&json).unwrap(), k);
    }

    #[test]
    fn derive_unknowns_wraps_and_resets() {
        let a = sample(
            1,
            (100, 0),
            (10, 10, 10),
            Some(disk(1000, 10, u64::from(u32::MAX) - 99, 5, 0, None)),
        );
        // Counters going back: vm and PSI deltas unknown; the device's ms
        // fields wrapped at 32 bits but its 64-bit counters moved on.
        let b = sample(
            2,
            (50, 0),
            (5, 20, 10),
            Some(disk(1000, 20, 100, 5, 0, None)),
        );
        let k = derive(&a, &b, 4);
        assert_eq!(k.dirtied_pages, None);
        assert_eq!(k.written_pages, Some(10));
        assert_eq!(k.psi_io_some_pct, None);
        assert_eq!(k.psi_io_full_pct, Some(0.0));
        assert_eq!(
            k.devs[0].as_ref().unwrap().w_await_ms,
            20.0,
            "200 ms over 10 writes"
        );
        // The device was re-created: no figures for it this interval.
        let c = sample(3, (50, 0), (5, 20, 10), Some(disk(10, 1, 1, 1, 0, None)));
        assert_eq!(derive(&b, &c, 4).devs[0], None);
        // Zero-length interval: deltas yes, rates no.
        let k = derive(&b, &b, 4);
        assert_eq!(k.written_pages, Some(0));
        assert_eq!((k.psi_io_some_pct, k.devs[0].clone()), (None, None));
        // Missing fields stay missing.
        let k = derive(&ProcSample::default(), &ProcSample::default(), 4);
        assert_eq!(
            (k.dirty_kib, k.dirty_thresh_kib, k.psi_io_some_pct),
            (None, None, None)
        );
        assert!(k.devs.is_empty());
    }

    #[test]
    fn live_sample_smoke() {
        let root = ProcRoot::default();
        let device = resolve_device(&root, Path::new("/var/tmp"));
        eprintln!("/var/tmp device: {device:?}");
        let mut s = ProcSampler::new(root, vec![device.ok()]);
        let a = s.sample(0);
        assert!(a.mem.dirty_kib.is_some(), "{a:?}");
        assert!(a.vm.nr_dirty.is_some(), "{a:?}");
        let b = s.sample(1_000_000);
        let k = derive(&a, &b, page_kib());
        assert!(k.dirty_kib.is_some());
        assert!(page_kib() >= 4);
    }
}
