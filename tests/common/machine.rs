//! What a lab, a trial or a test's own change may leave behind, read
//! straight from the kernel: loop devices, mounts (tracefs among them),
//! the vm dirty limits and every bdi's per-device limits. Two readings
//! compared part by part say what was not put back.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

pub const TRACING: &str = "/sys/kernel/tracing";

/// The vm dirty limits (one of a bytes/ratio pair zeroes the other).
const DIRTY: [&str; 4] = [
    "dirty_bytes",
    "dirty_ratio",
    "dirty_background_bytes",
    "dirty_background_ratio",
];
/// A bdi's limits a trial or a seed's change may write. Not `max_bytes`:
/// it is read back from the ratio and the dirty threshold of the moment.
const BDI: [&str; 3] = ["strict_limit", "max_ratio_fine", "min_ratio_fine"];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// `losetup -a`, one line a device.
    pub loops: Vec<String>,
    /// mountinfo lines without their ids (a mount made again is the same).
    pub mounts: Vec<String>,
    /// vm.dirty_* by name.
    pub dirty: BTreeMap<String, String>,
    /// Each bdi's knobs, by `major:minor`.
    pub bdis: BTreeMap<String, BTreeMap<String, String>>,
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .trim()
        .to_string()
}

impl Machine {
    pub fn now() -> Machine {
        let losetup = Command::new("losetup").arg("-a").output().unwrap().stdout;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .map(|l| l.split(' ').skip(2).collect::<Vec<_>>().join(" "))
            .collect();
        let dirty = DIRTY
            .iter()
            .map(|k| (format!("vm.{k}"), read(&Path::new("/proc/sys/vm").join(k))))
            .collect();
        let bdis = std::fs::read_dir("/sys/class/bdi")
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                let knobs = BDI
                    .iter()
                    .filter(|k| p.join(k).exists())
                    .map(|k| (k.to_string(), read(&p.join(k))))
                    .collect();
                (p.file_name().unwrap().to_string_lossy().into_owned(), knobs)
            })
            .collect();
        Machine {
            loops: String::from_utf8_lossy(&losetup)
                .lines()
                .map(str::to_string)
                .collect(),
            mounts,
            dirty,
            bdis,
        }
    }

    /// The tracefs mounts.
    pub fn tracefs(&self) -> Vec<&String> {
        self.mounts
            .iter()
            .filter(|m| m.contains(" - tracefs "))
            .collect()
    }

    /// Loop devices and mounts whose text names `dir`.
    pub fn under(&self, dir: &Path) -> Vec<&String> {
        let d = dir.to_string_lossy();
        self.loops
            .iter()
            .chain(&self.mounts)
            .filter(|l| l.contains(d.as_ref()))
            .collect()
    }

    /// Panics naming each part that differs from `before`: the lab's
    /// loop devices and mounts (under `dir`), tracefs, the dirty limits,
    /// the bdi knobs of `dev` (the lab's device), then anything else.
    pub fn assert_as(&self, before: &Machine, dir: &Path, dev: &str) {
        assert_eq!(
            self.under(dir),
            Vec::<&String>::new(),
            "the lab's loop devices and mounts are gone"
        );
        assert_eq!(
            self.tracefs(),
            before.tracefs(),
            "tracefs mounted as before"
        );
        assert_eq!(self.dirty, before.dirty, "vm dirty limits as before");
        assert_eq!(
            self.bdis.get(dev),
            before.bdis.get(dev),
            "bdi {dev}'s knobs as before"
        );
        assert_eq!(self, before, "the machine as it was");
    }
}

/// The tracefs instances of process `pid` (`stallscope-<pid>` and
/// `stallscope-<pid>.<n>`), as the kernel has them: tracefs is mounted
/// for the look if it is not, and unmounted after (an instance outlives
/// an unmount).
pub fn instances_of(pid: u32) -> Vec<String> {
    let root = Path::new(TRACING);
    let mounted_here = !root.join("instances").is_dir()
        && Command::new("mount")
            .args(["-t", "tracefs", "nodev", TRACING])
            .status()
            .unwrap()
            .success();
    let name = format!("stallscope-{pid}");
    let mut found: Vec<String> = std::fs::read_dir(root.join("instances"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| *n == name || n.starts_with(&format!("{name}.")))
        .collect();
    if mounted_here {
        assert!(
            Command::new("umount")
                .arg(TRACING)
                .status()
                .unwrap()
                .success(),
            "umount the tracefs mounted for the look"
        );
    }
    found.sort();
    found
}

/// The lab device (`major:minor`) of the mount `mnt`.
pub fn device_of(mnt: &Path) -> String {
    let out = Command::new("findmnt")
        .args(["-no", "MAJ:MIN"])
        .arg(mnt)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
