//! The lab's write cap, on cgroup v1 or v2. On v1 the root blkio group's
//! throttle caps every writer, the kernel's flushers included. On v2 the
//! root group has no io.max, so the lab makes a child group (`+io +memory`
//! enabled in the root's subtree_control), caps the loop devices in its
//! io.max, and writers must be in it: `run` joins it for lab targets,
//! `lab exec` and `lab adopt` put others there. Every change is a `Step`
//! recorded before it is made; the root's controllers are knobs held in
//! the machine's registry (`crate::knob`), so one lab's `down` never turns
//! them off under another. The v2 root is a parameter so tests use a fake
//! one.

use super::procs;
use super::state::{Claimant, LabState, Step};
use crate::base::units::ByteSize;
use crate::knob::{Knob, Value};
use crate::source::cgroup::{self, Cgroups, LAB_GROUP};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// How the cap is applied here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CapMethod {
    /// The v1 blkio throttle file of the root group.
    V1 { file: PathBuf },
    /// A child group of the v2 root; `writeback` when memory is on v2 too
    /// (only then are buffered writes' writeback charged to the group).
    V2 { root: PathBuf, writeback: bool },
}

impl CapMethod {
    /// For `lab status` and the state file.
    pub fn describe(&self) -> String {
        match self {
            CapMethod::V1 { .. } => "cgroup v1 blkio throttle on the root group".into(),
            CapMethod::V2 { root, .. } => format!(
                "cgroup v2 io.max in {} (writers must be in it: run joins it, lab exec / lab adopt for others)",
                root.join(LAB_GROUP).display()
            ),
        }
    }
}

/// Picks the method from the mounts and the v2 root's cgroup.controllers.
pub fn choose(cg: &Cgroups, v2_controllers: &str) -> Result<CapMethod, String> {
    if let Some(file) = cg.v1_write_bps_file() {
        return Ok(CapMethod::V1 { file });
    }
    let Some(root) = &cg.v2_root else {
        return Err("no cgroup hierarchy with blkio (v1) or io (v2) is mounted".into());
    };
    let has = |c: &str| v2_controllers.split_whitespace().any(|x| x == c);
    if !has("io") {
        return Err(format!(
            "cgroup v2 at {} has no io controller (cgroup.controllers: \"{}\")",
            root.display(),
            v2_controllers.trim()
        ));
    }
    Ok(CapMethod::V2 {
        root: root.clone(),
        writeback: has("memory") && !cg.v1_memory,
    })
}

/// This machine's method, or why there is none.
pub fn detect() -> Result<CapMethod, String> {
    let cg = Cgroups::detect();
    let ctl = cg
        .v2_root
        .as_ref()
        .and_then(|r| std::fs::read_to_string(r.join("cgroup.controllers")).ok())
        .unwrap_or_default();
    choose(&cg, &ctl)
}

/// What the cap will not cover, one warning each: buffered writeback needs
/// memory on v2 as well, and a filesystem with cgroup writeback (xfs from
/// 5.3 on).
pub fn writeback_warnings(m: &CapMethod, fs: &[String], kernel: (u32, u32)) -> Vec<String> {
    let CapMethod::V2 { writeback, .. } = m else {
        return Vec::new();
    };
    if !writeback {
        return vec!["the memory controller is not on cgroup v2 here, so io.max caps direct I/O only: buffered writes' writeback is not capped (boot with cgroup v2 only: systemd.unified_cgroup_hierarchy=1)".into()];
    }
    fs.iter()
        .filter(|f| !(["ext4", "btrfs"].contains(&f.as_str()) || (*f == "xfs" && kernel >= (5, 3))))
        .map(|f| format!("{f} on kernel {}.{} has no cgroup writeback: its buffered writes are not capped by io.max (xfs needs 5.3)", kernel.0, kernel.1))
        .collect()
}

/// The controllers the lab needs on in the root: io and memory when the
/// root offers them. Each is held whether it is on or not (another lab
/// may have turned it on, and would turn it off at its `down`).
pub fn wanted_controllers(available: &str) -> Vec<String> {
    ["io", "memory"]
        .into_iter()
        .filter(|c| available.split_whitespace().any(|a| a == *c))
        .map(str::to_string)
        .collect()
}

/// The text written to subtree_control to enable (`+`) or disable (`-`).
pub fn subtree_text(sign: char, controllers: &[String]) -> String {
    controllers
        .iter()
        .map(|c| format!("{sign}{c}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The lab group under `root`, made (and its controllers enabled, held
/// by `by`) the first time; each change recorded in `st` first.
pub fn ensure_group(
    root: &Path,
    dir: &Path,
    st: &mut LabState,
    by: &Claimant,
) -> anyhow::Result<PathBuf> {
    let group = root.join(LAB_GROUP);
    if st.group() == Some(group.as_path()) {
        return Ok(group);
    }
    let file = root.join("cgroup.subtree_control");
    let original = std::fs::read_to_string(&file)?.trim().to_string();
    let available = std::fs::read_to_string(root.join("cgroup.controllers"))?;
    let added = wanted_controllers(&available);
    if !added.is_empty() {
        let sets: Vec<(Knob, Value)> = added
            .iter()
            .map(|c| (Knob::controller(&file, c), Value::On(true)))
            .collect();
        let step = Step::Subtree {
            file: file.clone(),
            original,
            added,
            registered: true,
        };
        by.hold(st, dir, step, &sets)?;
    }
    st.push(
        dir,
        Step::Cgroup {
            path: group.clone(),
        },
    )?;
    std::fs::create_dir(&group).map_err(|e| anyhow::anyhow!("mkdir {}: {e}", group.display()))?;
    Ok(group)
}

/// Caps MAJ:MIN's writes at `bps` in the group's io.max.
pub fn cap_v2(
    group: &Path,
    dir: &Path,
    st: &mut LabState,
    (major, minor): (u32, u32),
    bps: u64,
) -> anyhow::Result<()> {
    let file = group.join("io.max");
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    st.push(
        dir,
        Step::IoMax {
            file: file.clone(),
            major,
            minor,
            original: cgroup::io_max_wbps(&text, major, minor),
        },
    )?;
    write(&file, &format!("{major}:{minor} wbps={bps}"))
}

/// Writes a control file, naming it in the error.
fn write(file: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(file, text)
        .map_err(|e| anyhow::anyhow!("writing \"{text}\" to {}: {e}", file.display()))
}

/// Undoes a v2 step (`moved`: every pid the state records as moved, with
/// its origin, for processes found left in the group); None for others,
/// and for registered controllers, whose holds `down::undo_step` releases.
pub fn undo_v2(
    step: &Step,
    proc: &Path,
    moved: &HashMap<u32, PathBuf>,
) -> Option<anyhow::Result<()>> {
    Some(match step {
        Step::Subtree {
            file,
            added,
            registered: false,
            ..
        } => write(file, &subtree_text('-', added)),
        Step::IoMax {
            file,
            major,
            minor,
            original,
        } => {
            let v = original.map_or("max".to_string(), |v| v.to_string());
            match file.parent() {
                Some(g) if g.is_dir() => write(file, &format!("{major}:{minor} wbps={v}")),
                _ => Ok(()),
            }
        }
        Step::Moved { pid, start, from } => move_back(proc, *pid, *start, from),
        Step::Cgroup { path } => remove_group(path, proc, moved),
        _ => return None,
    })
}

/// Moves a recorded process back if it is still the same one and still in
/// the lab's group (else it left or was moved by someone else).
fn move_back(proc: &Path, pid: u32, start: u64, from: &Path) -> anyhow::Result<()> {
    if !procs::alive(proc, pid, start) {
        return Ok(());
    }
    let text =
        std::fs::read_to_string(proc.join(pid.to_string()).join("cgroup")).unwrap_or_default();
    let here = cgroup::parse_proc_cgroup(&text).unwrap_or_default();
    if here.trim_start_matches('/') != LAB_GROUP {
        return Ok(());
    }
    Ok(cgroup::move_pid(&existing(from), pid)?)
}

/// The group itself, or its nearest existing ancestor (the one a process
/// left may be gone: a systemd scope ends with its session).
fn existing(g: &Path) -> PathBuf {
    g.ancestors()
        .find(|a| a.join("cgroup.procs").exists())
        .unwrap_or(g)
        .to_path_buf()
}

/// Moves out whatever is still in the group (children born there go to
/// their recorded ancestor's group, the rest to the v2 root) and removes it.
fn remove_group(group: &Path, proc: &Path, moved: &HashMap<u32, PathBuf>) -> anyhow::Result<()> {
    if !group.is_dir() {
        return Ok(());
    }
    evacuate(group, proc, moved)?;
    // A process that just exited may keep the group busy for a moment.
    for _ in 0..10 {
        match std::fs::remove_dir(group) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(std::time::Duration::from_millis(100))
            }
            Err(e) => anyhow::bail!("rmdir {}: {e}", group.display()),
        }
    }
    anyhow::bail!("rmdir {}: still busy after 1 s", group.display())
}

/// Moves every process in `group` out: to its own or its nearest recorded
/// ancestor's origin, else to the v2 root. Returns how many moved.
pub fn evacuate(group: &Path, proc: &Path, moved: &HashMap<u32, PathBuf>) -> anyhow::Result<usize> {
    let root = group.parent().unwrap_or(Path::new("/"));
    let parent: HashMap<u32, u32> = procs::table(proc).iter().map(|e| (e.pid, e.ppid)).collect();
    let left = std::fs::read_to_string(group.join("cgroup.procs")).unwrap_or_default();
    let pids: Vec<u32> = left.lines().filter_map(|l| l.trim().parse().ok()).collect();
    for &pid in &pids {
        let to = procs::origin_of(pid, &parent, moved).map_or(root.to_path_buf(), |o| existing(&o));
        cgroup::move_pid(&to, pid)?;
    }
    Ok(pids.len())
}

/// The cap the lab put on MAJ:MIN (v2 io.max of its group, else v1), 0 for none.
pub fn lab_cap(st: &LabState, major: u32, minor: u32) -> u64 {
    if let Some(g) = st.group() {
        let t = std::fs::read_to_string(g.join("io.max")).unwrap_or_default();
        return cgroup::io_max_wbps(&t, major, minor).unwrap_or(0);
    }
    super::guards::blkio_cap(major, minor).unwrap_or(0)
}

/// systemd's way to the same cap, for a person who prefers it.
pub fn systemd_hint(devices: &[String], bps: u64) -> String {
    let rate = if bps % (1 << 20) == 0 {
        format!("{}M", bps >> 20)
    } else {
        bps.to_string()
    };
    let props: Vec<String> = devices
        .iter()
        .map(|d| format!("IOWriteBandwidthMax=\"{d} {rate}\""))
        .collect();
    format!(
        "  or systemd's way: systemctl set-property --runtime UNIT {}\n                   systemd-run --scope -p {} CMD\n",
        props.join(" "),
        props.join(" -p ")
    )
}

/// "capped at 20MiB/s" or "no cap".
pub fn cap_words(bps: u64) -> String {
    if bps == 0 {
        "no cap".into()
    } else {
        format!("capped at {}/s", ByteSize(bps))
    }
}

#[cfg(test)]
mod tests;
