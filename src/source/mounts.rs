//! Which mount (and so which filesystem and device) a path lives on, from
//! `/proc/self/mountinfo`. The proc root is injectable so tests use fixtures.

use crate::model::snapshot::TargetMeta;
use std::path::{Path, PathBuf};

/// One line of mountinfo, the fields we use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// The mount's id (mountinfo's first field): which mount of the
    /// several a mount point may have had over time.
    pub id: u64,
    pub major: u32,
    pub minor: u32,
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub source: String,
    /// Per-mount options then superblock options, comma-joined.
    pub options: String,
}

/// Parses mountinfo text; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mount> {
    // id parent maj:min root mount_point mount_opts [optional...] - fstype source super_opts
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split(' ').collect();
    let r: Vec<&str> = right.split(' ').collect();
    if l.len() < 6 || r.len() < 2 {
        return None;
    }
    let (maj, min) = l[2].split_once(':')?;
    let super_opts = r.get(2).copied().unwrap_or("");
    Some(Mount {
        id: l[0].parse().ok()?,
        major: maj.parse().ok()?,
        minor: min.parse().ok()?,
        mount_point: PathBuf::from(unescape(l[4])),
        fs_type: r[0].to_string(),
        source: unescape(r[1]),
        options: merge_options(l[5], super_opts),
    })
}

/// Per-mount then superblock options, each once (both usually say `rw`).
fn merge_options(mount: &str, sb: &str) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for o in mount.split(',').chain(sb.split(',')) {
        if !o.is_empty() && !seen.contains(&o) {
            seen.push(o);
        }
    }
    seen.join(",")
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() + 1 && i + 4 <= b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount holding `path` (already canonical): the longest mount point that
/// is a prefix; the last such line wins, as later mounts hide earlier ones.
pub fn mount_for<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    let mut best: Option<&Mount> = None;
    for m in mounts {
        if path.starts_with(&m.mount_point) {
            let longer = best
                .is_none_or(|b| m.mount_point.as_os_str().len() >= b.mount_point.as_os_str().len());
            if longer {
                best = Some(m);
            }
        }
    }
    best
}

/// Reads `<proc_root>/self/mountinfo` and finds the mount for `path`.
pub fn lookup(proc_root: &Path, path: &Path) -> Option<Mount> {
    let text = std::fs::read_to_string(proc_root.join("self/mountinfo")).ok()?;
    let mounts = parse_mountinfo(&text);
    mount_for(&mounts, path).cloned()
}

/// Filesystem, device and mount options of a directory.
pub fn describe(path: &Path) -> TargetMeta {
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let m = lookup(Path::new("/proc"), &canon);
    TargetMeta {
        path: path.display().to_string(),
        fs: m
            .as_ref()
            .map(|m| m.fs_type.clone())
            .unwrap_or_else(|| "?".into()),
        device: m
            .as_ref()
            .map(|m| format!("{} ({}:{})", m.source, m.major, m.minor))
            .unwrap_or_else(|| "?".into()),
        mount_options: m.map(|m| m.options).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
30 22 0:25 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw,size=24683584k
41 22 7:1 / /var/tmp/lab/mnt/xfs rw,relatime - xfs /dev/loop1 rw,attr2,inode64
42 22 7:2 / /mnt/with\\040space rw - ext4 /dev/loop2 rw
43 41 7:3 / /var/tmp/lab/mnt/xfs rw - btrfs /dev/loop3 rw
garbage line
";

    #[test]
    fn parses_and_finds_longest_prefix() {
        let m = parse_mountinfo(FIXTURE);
        assert_eq!(m.len(), 5);
        let root = mount_for(&m, Path::new("/var/tmp/x")).unwrap();
        assert_eq!(
            (root.fs_type.as_str(), root.major, root.minor),
            ("ext4", 254, 0)
        );
        let shm = mount_for(&m, Path::new("/dev/shm/a/b")).unwrap();
        assert_eq!(shm.fs_type, "tmpfs");
        assert!(shm.options.contains("nosuid") && shm.options.contains("size="));
        assert_eq!(shm.options, "rw,nosuid,nodev,size=24683584k", "rw once");
        // The later mount on the same point hides the earlier one.
        let x = mount_for(&m, Path::new("/var/tmp/lab/mnt/xfs/d")).unwrap();
        assert_eq!(x.fs_type, "btrfs");
        let sp = mount_for(&m, Path::new("/mnt/with space/d")).unwrap();
        assert_eq!(sp.source, "/dev/loop2");
        // A sibling with a common string prefix is not a match.
        let s = mount_for(&m, Path::new("/dev/shmx")).unwrap();
        assert_eq!(s.fs_type, "ext4");
    }
}
