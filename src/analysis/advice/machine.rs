//! What this machine has of the knobs the catalog proposes: which sysctl
//! and sysfs files exist, what they hold now, and its kernel. Read once,
//! from a root that tests point at a fixture tree, so the catalog itself
//! stays pure.

use crate::source::proc::ProcRoot;
use std::collections::BTreeMap;

/// The knob files looked at, by the path a person would write to
/// (`/proc/sys/vm/dirty_bytes`, `/sys/class/bdi/7:0/max_bytes`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Machine {
    /// This machine's kernel release ("?" when unreadable).
    pub kernel: String,
    pub host: String,
    /// Each knob file found, with its content now (trimmed).
    pub knobs: BTreeMap<String, String>,
    /// A device (`8:1`) whose bdi is another one's (`8:0`): partitions
    /// share their disk's.
    pub bdi_of: BTreeMap<String, String>,
    /// False for a `Machine` nobody probed (the dashboard before it was
    /// told): the gates say "not checked" rather than "absent".
    pub probed: bool,
}

/// The global sysctls the catalog proposes.
pub const SYSCTLS: &[&str] = &["vm.dirty_bytes", "vm.dirty_background_bytes"];
/// The per-device knobs, in `/sys/class/bdi/MAJ:MIN/`.
pub const BDI_KNOBS: &[&str] = &["max_bytes", "strict_limit", "max_ratio", "min_bytes"];

/// The block queue's knobs, in `/sys/dev/block/MAJ:MIN/queue/` of a disk.
pub const QUEUE_KNOBS: &[&str] = &["wbt_lat_usec", "scheduler"];

/// `vm.dirty_bytes` → `/proc/sys/vm/dirty_bytes`.
pub fn sysctl_path(name: &str) -> String {
    format!("/proc/sys/{}", name.replace('.', "/"))
}

/// `/sys/class/bdi/7:0/max_bytes`.
pub fn bdi_path(bdi: &str, knob: &str) -> String {
    format!("/sys/class/bdi/{bdi}/{knob}")
}

/// `/sys/dev/block/7:0/queue/wbt_lat_usec` (a disk's, not a partition's).
pub fn queue_path(disk: &str, knob: &str) -> String {
    format!("/sys/dev/block/{disk}/queue/{knob}")
}

impl Machine {
    /// Reads the sysctls and, for each device (`MAJ:MIN`), its bdi's knobs
    /// under `root` (a partition's are its disk's).
    pub fn probe(root: &ProcRoot, devices: &[String]) -> Machine {
        let read = |p: std::path::PathBuf| std::fs::read_to_string(p).ok();
        let mut m = Machine {
            kernel: read(root.proc.join("sys/kernel/osrelease"))
                .map_or_else(|| "?".into(), |s| s.trim().to_string()),
            host: read(root.proc.join("sys/kernel/hostname"))
                .map_or_else(|| "?".into(), |s| s.trim().to_string()),
            probed: true,
            ..Machine::default()
        };
        for name in SYSCTLS {
            let rel = format!("sys/{}", name.replace('.', "/"));
            if let Some(v) = read(root.proc.join(rel)) {
                m.knobs.insert(sysctl_path(name), v.trim().to_string());
            }
        }
        for dev in devices {
            let bdi = bdi_dir(root, dev);
            if bdi != *dev {
                m.bdi_of.insert(dev.clone(), bdi.clone());
            }
            for knob in BDI_KNOBS {
                let file = root.sys.join(format!("class/bdi/{bdi}/{knob}"));
                if let Some(v) = read(file) {
                    m.knobs.insert(bdi_path(&bdi, knob), v.trim().to_string());
                }
            }
            for knob in QUEUE_KNOBS {
                let file = root.sys.join(format!("dev/block/{bdi}/queue/{knob}"));
                if let Some(v) = read(file) {
                    m.knobs.insert(queue_path(&bdi, knob), v.trim().to_string());
                }
            }
        }
        m
    }

    /// Whether the knob file (as a person writes it) is here.
    pub fn has(&self, path: &str) -> bool {
        self.knobs.contains_key(path)
    }

    /// Its content now, if it is here.
    pub fn value(&self, path: &str) -> Option<&str> {
        self.knobs.get(path).map(String::as_str)
    }

    /// The bdi of a device: its own, or its disk's for a partition.
    pub fn bdi<'a>(&'a self, dev: &'a str) -> &'a str {
        self.bdi_of.get(dev).map_or(dev, String::as_str)
    }

    /// Whether `host` (a recording's) is this machine: then what its knobs
    /// hold here is what they held there.
    pub fn is_host(&self, host: &str) -> bool {
        self.probed && host != "?" && host == self.host
    }
}

/// A device's bdi directory name: its own when `/sys/class/bdi/MAJ:MIN`
/// is there, else its disk's (`/sys/dev/block/MAJ:MIN/partition` marks a
/// partition; its parent's `dev` names the disk).
fn bdi_dir(root: &ProcRoot, dev: &str) -> String {
    if root.sys.join(format!("class/bdi/{dev}")).is_dir() {
        return dev.to_string();
    }
    let part = root.sys.join(format!("dev/block/{dev}"));
    if part.join("partition").exists() {
        if let Ok(d) = std::fs::read_to_string(part.join("../dev")) {
            return d.trim().to_string();
        }
    }
    dev.to_string()
}

/// The kernel's (major, minor) from a release string ("6.1.0-13-amd64");
/// None when it does not start with one ("?").
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_sysctls_and_bdi_knobs_under_a_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = ProcRoot::under(dir.path());
        let w = |rel: &str, v: &str| {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v).unwrap();
        };
        w("proc/sys/kernel/osrelease", "6.2.0-test\n");
        w("proc/sys/kernel/hostname", "lab\n");
        w("proc/sys/vm/dirty_bytes", "0\n");
        w("sys/class/bdi/7:0/max_bytes", "1073741824\n");
        let m = Machine::probe(&root, &["7:0".into(), "8:1".into()]);
        assert_eq!(m.kernel, "6.2.0-test");
        assert_eq!(m.value("/proc/sys/vm/dirty_bytes"), Some("0"));
        assert!(!m.has("/proc/sys/vm/dirty_background_bytes"));
        assert_eq!(m.value("/sys/class/bdi/7:0/max_bytes"), Some("1073741824"));
        assert!(!m.has("/sys/class/bdi/7:0/strict_limit"));
        assert!(m.is_host("lab") && !m.is_host("other") && !m.is_host("?"));
        assert_eq!(m.bdi("8:1"), "8:1", "no partition mark: its own");
    }

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version("6.1.0-13-amd64"), Some((6, 1)));
        assert_eq!(kernel_version("5.15.0"), Some((5, 15)));
        assert_eq!(kernel_version("?"), None);
        assert_eq!(kernel_version(""), None);
    }
}
