//! cgroup mechanics shared by the lab (which sets caps) and the session
//! (whose writers join the lab's capped group): which layout this machine
//! has, where a process lives, what io.max or the v1 blkio throttle says
//! about a device, and moving a process between v2 groups. Paths are
//! parameters so tests run against fake cgroup and /proc trees.

use crate::source::mounts::{self, Mount};
use std::io;
use std::path::{Path, PathBuf};

/// The v2 group the lab caps in, directly under the v2 root.
pub const LAB_GROUP: &str = "stallscope-lab";

/// How cgroups are mounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// v1 hierarchies only.
    V1,
    /// cgroup2 only (at /sys/fs/cgroup on systemd distributions).
    Unified,
    /// v1 hierarchies and a (usually controller-less) cgroup2 beside them.
    Hybrid,
    /// Nothing mounted.
    None,
}

/// What is mounted where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroups {
    pub layout: Layout,
    /// Where cgroup2 is mounted.
    pub v2_root: Option<PathBuf>,
    /// Where the v1 blkio hierarchy is mounted.
    pub v1_blkio: Option<PathBuf>,
    /// Whether a v1 hierarchy holds the memory controller (then buffered
    /// writeback cannot be charged to a v2 group).
    pub v1_memory: bool,
}

impl Cgroups {
    /// From mountinfo text.
    pub fn parse(mountinfo: &str) -> Cgroups {
        let all = mounts::parse_mountinfo(mountinfo);
        let v1: Vec<&Mount> = all.iter().filter(|m| m.fs_type == "cgroup").collect();
        let has = |m: &Mount, c: &str| m.options.split(',').any(|o| o == c);
        let v2_root = all
            .iter()
            .find(|m| m.fs_type == "cgroup2")
            .map(|m| m.mount_point.clone());
        let layout = match (v2_root.is_some(), v1.is_empty()) {
            (true, true) => Layout::Unified,
            (true, false) => Layout::Hybrid,
            (false, false) => Layout::V1,
            (false, true) => Layout::None,
        };
        Cgroups {
            layout,
            v2_root,
            v1_blkio: v1
                .iter()
                .find(|m| has(m, "blkio"))
                .map(|m| m.mount_point.clone()),
            v1_memory: v1.iter().any(|m| has(m, "memory")),
        }
    }

    /// This machine's, from /proc/self/mountinfo.
    pub fn detect() -> Cgroups {
        Cgroups::parse(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
    }

    /// The v1 blkio throttle file, when blkio is on v1.
    pub fn v1_write_bps_file(&self) -> Option<PathBuf> {
        self.v1_blkio
            .as_ref()
            .map(|d| d.join("blkio.throttle.write_bps_device"))
    }

    /// The lab's v2 group directory (it may not exist).
    pub fn lab_group(&self) -> Option<PathBuf> {
        self.v2_root.as_ref().map(|r| r.join(LAB_GROUP))
    }
}

/// The v2 path (`0::/a/b`) of a /proc/PID/cgroup text.
pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_string())
}

/// The v2 cgroup directory `pid` lives in, under `v2_root`.
pub fn group_of(proc: &Path, v2_root: &Path, pid: u32) -> io::Result<PathBuf> {
    let text = std::fs::read_to_string(proc.join(pid.to_string()).join("cgroup"))?;
    let rel = parse_proc_cgroup(&text)
        .ok_or_else(|| io::Error::other(format!("pid {pid}: no cgroup v2 line")))?;
    Ok(v2_root.join(rel.trim_start_matches('/')))
}

/// The write cap an io.max text sets for MAJ:MIN; None for none or `max`.
pub fn io_max_wbps(text: &str, major: u32, minor: u32) -> Option<u64> {
    let key = format!("{major}:{minor}");
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(key.as_str()))?;
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix("wbps="))
        .and_then(|v| v.parse().ok())
}

/// The cap a v1 throttle file sets (the knob registry reads it too).
pub use crate::knob::v1_wbps;

/// The tightest io.max write cap on MAJ:MIN from `group` up to (not
/// including) `v2_root`, which has no io.max.
pub fn v2_cap_above(v2_root: &Path, group: &Path, major: u32, minor: u32) -> Option<u64> {
    group
        .ancestors()
        .take_while(|g| *g != v2_root && g.starts_with(v2_root))
        .filter_map(|g| std::fs::read_to_string(g.join("io.max")).ok())
        .filter_map(|t| io_max_wbps(&t, major, minor))
        .min()
}

/// The write cap this process's writes to MAJ:MIN meet, bytes/s: the v1
/// root throttle, else io.max on our v2 group or its ancestors, else the
/// lab's group (which `run` joins for targets it caps). None when uncapped.
pub fn write_cap(major: u32, minor: u32) -> Option<u64> {
    let cg = Cgroups::detect();
    if let Some(f) = cg.v1_write_bps_file() {
        let c = v1_wbps(
            &std::fs::read_to_string(f).unwrap_or_default(),
            major,
            minor,
        );
        if c > 0 {
            return Some(c);
        }
    }
    let root = cg.v2_root.as_ref()?;
    let own = group_of(Path::new("/proc"), root, std::process::id()).ok();
    own.and_then(|g| v2_cap_above(root, &g, major, minor))
        .or_else(|| v2_cap_above(root, &root.join(LAB_GROUP), major, minor))
}

/// Moves process `pid` (all its threads) into the v2 group directory.
pub fn move_pid(group: &Path, pid: u32) -> io::Result<()> {
    std::fs::write(group.join("cgroup.procs"), pid.to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", group.display())))
}

/// The block device numbers of the filesystem holding `path`: the mount's
/// MAJ:MIN, or for an anonymous one (btrfs) its source device's.
pub fn device_numbers(path: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let canon = std::fs::canonicalize(path).ok()?;
    let m = mounts::lookup(Path::new("/proc"), &canon)?;
    if m.major != 0 {
        return Some((m.major, m.minor));
    }
    let meta = std::fs::metadata(&m.source).ok()?;
    if !meta.file_type().is_block_device() {
        return None;
    }
    let rdev = meta.rdev();
    Some((libc::major(rdev), libc::minor(rdev)))
}

/// This process, moved into the lab's capped group for its run; moved
/// back to where it was on drop (normal end, error, Ctrl-C, unwinding).
#[derive(Debug)]
pub struct CgroupJoin {
    pub group: PathBuf,
    pub original: PathBuf,
    pid: u32,
}

impl Drop for CgroupJoin {
    fn drop(&mut self) {
        if let Err(e) = move_pid(&self.original, self.pid) {
            crate::base::error::note!("stallscope: could not move back to its cgroup: {e}");
        }
    }
}

/// Joins the lab's v2 group when its io.max caps the device of one of
/// `targets`, so our writers' buffered writes are capped as the lab says.
/// None when there is nothing to join; a failure to join is said on stderr.
pub fn join_for_targets(targets: &[PathBuf]) -> Option<CgroupJoin> {
    let root = Cgroups::detect().v2_root?;
    let devices: Vec<(u32, u32)> = targets.iter().filter_map(|t| device_numbers(t)).collect();
    match join_in(&root, Path::new("/proc"), std::process::id(), &devices) {
        Ok(j) => {
            if let Some(j) = &j {
                crate::base::error::note!(
                    "stallscope: joined cgroup {} (the lab's write cap on the targets; back to {} at the end)",
                    j.group.display(),
                    j.original.display()
                );
            }
            j
        }
        Err(e) => {
            crate::base::error::note!(
                "stallscope: the lab caps a target's device in cgroup {LAB_GROUP}, but this process could not join it ({e}); its writes are not capped"
            );
            None
        }
    }
}

/// [`join_for_targets`] over a given v2 root and /proc: joins when the lab
/// group's io.max names one of `devices` and `pid` is not in it already.
pub fn join_in(
    v2_root: &Path,
    proc: &Path,
    pid: u32,
    devices: &[(u32, u32)],
) -> io::Result<Option<CgroupJoin>> {
    let group = v2_root.join(LAB_GROUP);
    let Ok(io_max) = std::fs::read_to_string(group.join("io.max")) else {
        return Ok(None);
    };
    if !devices
        .iter()
        .any(|&(a, b)| io_max_wbps(&io_max, a, b).is_some())
    {
        return Ok(None);
    }
    let original = group_of(proc, v2_root, pid)?;
    if original == group {
        return Ok(None);
    }
    move_pid(&group, pid)?;
    Ok(Some(CgroupJoin {
        group,
        original,
        pid,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const DEBIAN12: &str = "\
22 1 254:1 / / rw,relatime - ext4 /dev/vda1 rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    #[test]
    fn layouts_from_mountinfo() {
        let h = Cgroups::parse(V1_HYBRID);
        assert_eq!(h.layout, Layout::Hybrid);
        assert_eq!(
            h.v1_blkio.as_deref(),
            Some(Path::new("/sys/fs/cgroup/blkio"))
        );
        assert_eq!(
            h.v2_root.as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        assert!(h.v1_memory);
        let d = Cgroups::parse(DEBIAN12);
        assert_eq!(d.layout, Layout::Unified);
        assert_eq!(d.v2_root.as_deref(), Some(Path::new("/sys/fs/cgroup")));
        assert_eq!(d.v1_blkio, None);
        assert!(!d.v1_memory);
        assert_eq!(
            d.lab_group().unwrap(),
            Path::new("/sys/fs/cgroup/stallscope-lab")
        );
        assert_eq!(Cgroups::parse("").layout, Layout::None);
    }

    #[test]
    fn proc_cgroup_v2_line() {
        let t = "9:name=systemd:/\n7:blkio:/\n0::/user.slice/user-0.slice/session-1.scope\n";
        assert_eq!(
            parse_proc_cgroup(t).as_deref(),
            Some("/user.slice/user-0.slice/session-1.scope")
        );
        assert_eq!(parse_proc_cgroup("7:blkio:/\n"), None);
    }

    #[test]
    fn io_max_and_v1_caps() {
        let t = "7:0 rbps=max wbps=20971520 riops=max wiops=max\n7:1 rbps=max wbps=max riops=max wiops=max\n";
        assert_eq!(io_max_wbps(t, 7, 0), Some(20 << 20));
        assert_eq!(io_max_wbps(t, 7, 1), None, "max is no cap");
        assert_eq!(io_max_wbps(t, 7, 2), None);
        assert_eq!(io_max_wbps("17:0 wbps=5\n", 7, 0), None, "whole key");
        assert_eq!(v1_wbps("7:0 52428800\n7:1 0\n", 7, 0), 50 << 20);
        assert_eq!(v1_wbps("7:0 52428800\n", 7, 10), 0);
    }

    /// A fake v2 root with the lab group capping 7:3 and a process in a
    /// nested session scope.
    fn fake() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("cg");
        let scope = root.join("user.slice/session-1.scope");
        std::fs::create_dir_all(&scope).unwrap();
        std::fs::create_dir_all(root.join(LAB_GROUP)).unwrap();
        std::fs::write(root.join(LAB_GROUP).join("io.max"), "7:3 wbps=1048576\n").unwrap();
        std::fs::write(root.join("user.slice/io.max"), "8:0 wbps=4096\n").unwrap();
        std::fs::write(scope.join("io.max"), "8:0 wbps=8192\n").unwrap();
        let proc = t.path().join("proc");
        std::fs::create_dir_all(proc.join("42")).unwrap();
        std::fs::write(proc.join("42/cgroup"), "0::/user.slice/session-1.scope\n").unwrap();
        (t, root, proc)
    }

    #[test]
    fn caps_of_a_group_and_its_ancestors() {
        let (_t, root, _) = fake();
        let scope = root.join("user.slice/session-1.scope");
        assert_eq!(v2_cap_above(&root, &scope, 8, 0), Some(4096), "tightest");
        assert_eq!(v2_cap_above(&root, &scope, 7, 3), None);
        assert_eq!(
            v2_cap_above(&root, &root.join(LAB_GROUP), 7, 3),
            Some(1 << 20)
        );
    }

    #[test]
    fn joins_the_lab_group_only_for_its_capped_devices_and_moves_back() {
        let (_t, root, proc) = fake();
        let procs = |g: &Path| std::fs::read_to_string(g.join("cgroup.procs")).unwrap_or_default();
        assert!(join_in(&root, &proc, 42, &[(8, 0)]).unwrap().is_none());
        assert_eq!(procs(&root.join(LAB_GROUP)), "");
        let j = join_in(&root, &proc, 42, &[(8, 0), (7, 3)])
            .unwrap()
            .expect("joined");
        assert_eq!(procs(&root.join(LAB_GROUP)), "42");
        let scope = root.join("user.slice/session-1.scope");
        assert_eq!(j.original, scope);
        drop(j);
        assert_eq!(procs(&scope), "42", "moved back on drop");
        // Already inside: nothing to do.
        std::fs::write(proc.join("42/cgroup"), format!("0::/{LAB_GROUP}\n")).unwrap();
        assert!(join_in(&root, &proc, 42, &[(7, 3)]).unwrap().is_none());
    }
}
