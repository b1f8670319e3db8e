//! `stallscope lab up | down | status`: loop-backed filesystems on one disk,
//! a write cap on their devices and optional lower dirty limits, so
//! writeback matters on a small VM. Every change is recorded in the state
//! file first (see `state`), undone in reverse by `down`, and undone at once
//! when `up` fails halfway.

use super::guards::{blkio_cap, sh, DirtyLimits, BLKIO_WRITE_BPS};
use super::state::{LabState, Step};
use crate::base::error::UsageError;
use crate::base::units::ByteSize;
use std::path::{Path, PathBuf};

pub const DEFAULT_DIR: &str = "/var/tmp/stallscope-lab";

#[derive(Clone, Debug)]
pub struct UpOptions {
    pub fs: Vec<String>,
    pub size: ByteSize,
    pub dir: PathBuf,
    /// Bytes per second; 0 = no cap.
    pub cap: ByteSize,
    pub dirty_bytes: Option<ByteSize>,
    pub dirty_background_bytes: Option<ByteSize>,
    pub stable_writes: bool,
}

fn need_root(what: &str) -> Result<(), UsageError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(UsageError::new(format!(
            "lab {what} needs root (loop devices, mounts, sysctls)"
        )));
    }
    Ok(())
}

/// The Debian package that ships mkfs for `fs`.
pub fn mkfs_package(fs: &str) -> &'static str {
    match fs {
        "ext4" => "e2fsprogs",
        "xfs" => "xfsprogs",
        "btrfs" => "btrfs-progs",
        _ => "?",
    }
}

fn have(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

/// Checks everything that can be checked before touching the system.
fn preflight(o: &UpOptions) -> Result<(), UsageError> {
    need_root("up")?;
    if o.fs.is_empty() {
        return Err(UsageError::new(
            "--fs needs at least one of ext4, xfs, btrfs",
        ));
    }
    for fs in &o.fs {
        if !["ext4", "xfs", "btrfs"].contains(&fs.as_str()) {
            return Err(UsageError::new(format!(
                "--fs {fs}: use ext4, xfs or btrfs"
            )));
        }
        let mkfs = format!("mkfs.{fs}");
        if !have(&mkfs) {
            return Err(UsageError::new(format!(
                "{mkfs} not found: apt-get install {}",
                mkfs_package(fs)
            )));
        }
    }
    if o.size.0 < (256 << 20) {
        return Err(UsageError::new(format!(
            "--size {} is below 256MiB",
            o.size
        )));
    }
    if let (Some(d), Some(b)) = (o.dirty_bytes, o.dirty_background_bytes) {
        if b.0 >= d.0 {
            return Err(UsageError::new(format!(
                "--dirty-background-bytes {b} must be below --dirty-bytes {d}"
            )));
        }
    }
    let parent = o
        .dir
        .ancestors()
        .find(|a| a.is_dir())
        .unwrap_or(Path::new("/"));
    let need = o.size.0 * o.fs.len() as u64;
    let avail = crate::source::writer::segments::free_bytes(parent).unwrap_or(u64::MAX);
    if avail < need {
        return Err(UsageError::new(format!(
            "{} has {} free; {} filesystems of {} need {}",
            parent.display(),
            ByteSize(avail / (1 << 20) * (1 << 20)),
            o.fs.len(),
            o.size,
            ByteSize(need)
        )));
    }
    Ok(())
}

/// How a write cap can be applied here, or why not.
pub fn cap_method() -> Result<&'static str, String> {
    if Path::new(BLKIO_WRITE_BPS).exists() {
        return Ok("cgroup v1 blkio throttle on the root group");
    }
    let ctl = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").unwrap_or_default();
    if ctl.split_whitespace().any(|c| c == "io") {
        return Err("cgroup v2 has the io controller, but io.max cannot be set on the root group; run stallscope in a child cgroup with io.max instead".into());
    }
    Err("neither cgroup v1 blkio nor the cgroup v2 io controller is available".into())
}

/// `lab up`. Safe to run twice: an intact lab is reported, not rebuilt.
pub fn up(o: &UpOptions) -> anyhow::Result<()> {
    preflight(o)?;
    if let Some(st) = LabState::load(&o.dir)? {
        let intact =
            !st.mounts().is_empty() && st.mounts().iter().all(|(_, m, _)| is_mountpoint(m));
        if intact {
            eprintln!(
                "stallscope: the lab at {} is already up; nothing changed",
                o.dir.display()
            );
            print!("{}", status_text(&o.dir, &st));
            return Ok(());
        }
        return Err(UsageError::new(format!(
            "a lab at {} was not torn down (state file present); run `stallscope lab down --dir {}` first",
            o.dir.display(),
            o.dir.display()
        ))
        .into());
    }
    std::fs::create_dir_all(o.dir.join("mnt"))?;
    let mut st = LabState {
        version: 1,
        pid: std::process::id(),
        steps: Vec::new(),
        cap_method: None,
    };
    st.save(&o.dir)?;
    match build(o, &mut st) {
        Ok(()) => {
            print!("{}", status_text(&o.dir, &st));
            Ok(())
        }
        Err(e) => {
            eprintln!("stallscope: lab up failed ({e:#}); undoing what was done");
            let _ = undo(&o.dir, st);
            Err(e)
        }
    }
}

fn build(o: &UpOptions, st: &mut LabState) -> anyhow::Result<()> {
    for fs in &o.fs {
        let dev = loop_device(o, st, fs)?;
        mount_fs(o, st, fs, &dev)?;
        if o.stable_writes {
            stable_writes(o, st, &dev)?;
        }
        if o.cap.0 > 0 {
            cap_device(o, st, &dev)?;
        }
    }
    if let Some(d) = o.dirty_bytes {
        let original = DirtyLimits::read()?;
        st.push(&o.dir, Step::Dirty { original })?;
        let bg = o.dirty_background_bytes.map_or(d.0 / 4, |b| b.0);
        DirtyLimits {
            dirty_bytes: d.0,
            dirty_ratio: 0,
            background_bytes: bg,
            background_ratio: 0,
        }
        .write()?;
    }
    Ok(())
}

/// A sparse image of the lab's size attached to a loop device (direct
/// I/O, so the loop file does not double-cache); each step recorded first.
fn loop_device(o: &UpOptions, st: &mut LabState, fs: &str) -> anyhow::Result<String> {
    let dir = &o.dir;
    let image = dir.join(format!("{fs}.img"));
    st.push(
        dir,
        Step::Image {
            path: image.clone(),
        },
    )?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&image)?;
    f.set_len(o.size.0)?;
    drop(f);
    st.push(
        dir,
        Step::Loop {
            image: image.clone(),
            device: None,
        },
    )?;
    let dev = sh(
        "losetup",
        &["--direct-io=on", "-f", "--show", &image.to_string_lossy()],
    )?;
    st.amend_last(
        dir,
        Step::Loop {
            image,
            device: Some(dev.clone()),
        },
    )?;
    Ok(dev)
}

/// mkfs on the loop device, mounted under DIR/mnt/<fs>.
fn mount_fs(o: &UpOptions, st: &mut LabState, fs: &str, dev: &str) -> anyhow::Result<()> {
    let force = if fs == "ext4" { "-F" } else { "-f" };
    eprintln!("stallscope: mkfs.{fs} on {dev} ({})", o.size);
    sh(&format!("mkfs.{fs}"), &["-q", force, dev])?;
    let mnt = o.dir.join("mnt").join(fs);
    std::fs::create_dir_all(&mnt)?;
    st.push(
        &o.dir,
        Step::Mount {
            device: dev.to_string(),
            mount: mnt.clone(),
            fs: fs.to_string(),
        },
    )?;
    sh("mount", &[dev, &mnt.to_string_lossy()])?;
    Ok(())
}

/// Turns on stable pages for the device (rewrites wait for writeback).
fn stable_writes(o: &UpOptions, st: &mut LabState, dev: &str) -> anyhow::Result<()> {
    let name = dev.trim_start_matches("/dev/");
    let path = PathBuf::from(format!("/sys/block/{name}/queue/stable_writes"));
    let original = std::fs::read_to_string(&path)?.trim().to_string();
    st.push(
        &o.dir,
        Step::Sysfs {
            path: path.clone(),
            original,
        },
    )?;
    std::fs::write(&path, "1")?;
    Ok(())
}

/// Caps the device's writes (cgroup v1 blkio throttle on the root group).
fn cap_device(o: &UpOptions, st: &mut LabState, dev: &str) -> anyhow::Result<()> {
    let method = cap_method().map_err(|why| UsageError::new(format!("--cap {}: {why}", o.cap)))?;
    st.cap_method = Some(method.to_string());
    let (major, minor) = dev_numbers(dev)?;
    let original = blkio_cap(major, minor)?;
    st.push(
        &o.dir,
        Step::BlkioCap {
            major,
            minor,
            original,
        },
    )?;
    std::fs::write(BLKIO_WRITE_BPS, format!("{major}:{minor} {}", o.cap.0))?;
    Ok(())
}

fn dev_numbers(dev: &str) -> anyhow::Result<(u32, u32)> {
    let t = sh("stat", &["-L", "-c", "%t:%T", dev])?;
    let (a, b) = t
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("stat {dev}: {t}"))?;
    Ok((u32::from_str_radix(a, 16)?, u32::from_str_radix(b, 16)?))
}

fn is_mountpoint(p: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    crate::source::mounts::parse_mountinfo(&text)
        .iter()
        .any(|m| m.mount_point == p)
}

/// Undoes every step in reverse; keeps going past failures and reports them.
fn undo(dir: &Path, mut st: LabState) -> anyhow::Result<()> {
    let mut failures = Vec::new();
    while let Some(step) = st.steps.pop() {
        if let Err(e) = undo_step(&step) {
            failures.push(format!("{step:?}: {e}"));
            // Keep the step so a later `lab down` can retry it.
            st.steps.insert(0, step);
        }
    }
    if failures.is_empty() {
        let _ = std::fs::remove_file(LabState::path(dir));
        let _ = std::fs::remove_dir(dir.join("mnt"));
        let _ = std::fs::remove_dir(dir);
        Ok(())
    } else {
        st.save(dir)?;
        anyhow::bail!("could not undo: {}", failures.join("; "))
    }
}

fn undo_step(step: &Step) -> anyhow::Result<()> {
    match step {
        Step::Dirty { original } => original.write()?,
        Step::BlkioCap {
            major,
            minor,
            original,
        } => std::fs::write(BLKIO_WRITE_BPS, format!("{major}:{minor} {original}"))?,
        Step::Sysfs { path, original } => {
            if path.exists() {
                std::fs::write(path, original)?
            }
        }
        Step::Mount { mount, .. } => {
            if is_mountpoint(mount) {
                sh("umount", &[&mount.to_string_lossy()])?;
            }
            let _ = std::fs::remove_dir(mount);
        }
        Step::Loop { image, device } => {
            // The device may be unknown if we died right after losetup.
            let devs = match device {
                Some(d) => vec![d.clone()],
                None => loops_of(image),
            };
            for d in devs {
                if sh("losetup", &[&d]).is_ok() {
                    sh("losetup", &["-d", &d])?;
                }
            }
        }
        Step::Image { path } => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        },
    }
    Ok(())
}

/// Loop devices backed by `image` (losetup -j).
fn loops_of(image: &Path) -> Vec<String> {
    sh("losetup", &["-j", &image.to_string_lossy()])
        .map(|out| {
            out.lines()
                .filter_map(|l| l.split(':').next().map(str::to_string))
                .filter(|d| !d.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// `lab down`: restores everything `up` changed. Fine to run with no lab.
pub fn down(dir: &Path) -> anyhow::Result<()> {
    need_root("down")?;
    match LabState::load(dir)? {
        None => {
            eprintln!("stallscope: no lab at {}; nothing to do", dir.display());
            Ok(())
        }
        Some(st) => {
            let n = st.steps.len();
            undo(dir, st)?;
            eprintln!(
                "stallscope: lab at {} is down ({n} changes undone)",
                dir.display()
            );
            Ok(())
        }
    }
}

/// `lab status`.
pub fn status(dir: &Path) -> anyhow::Result<()> {
    match LabState::load(dir)? {
        None => println!("no lab at {}", dir.display()),
        Some(st) => print!("{}", status_text(dir, &st)),
    }
    Ok(())
}

fn status_text(dir: &Path, st: &LabState) -> String {
    let mut s = format!(
        "lab at {} (state file {})\n",
        dir.display(),
        LabState::path(dir).display()
    );
    for (fs, mnt, dev) in st.mounts() {
        let up = if is_mountpoint(&mnt) {
            "mounted"
        } else {
            "NOT mounted"
        };
        let cap = dev_numbers(&dev)
            .ok()
            .and_then(|(a, b)| blkio_cap(a, b).ok())
            .filter(|&c| c > 0)
            .map_or("no cap".to_string(), |c| {
                format!("capped at {}/s", ByteSize(c))
            });
        s += &format!("  {fs:<6} {} on {dev}, {up}, {cap}\n", mnt.display());
    }
    if let Some(m) = &st.cap_method {
        s += &format!("  cap via {m}\n");
    }
    if st.steps.iter().any(|s| matches!(s, Step::Dirty { .. })) {
        if let Ok(d) = DirtyLimits::read() {
            s += &format!(
                "  vm.dirty_bytes={} vm.dirty_background_bytes={} (restored by `lab down`)\n",
                d.dirty_bytes, d.background_bytes
            );
        }
    }
    s
}

/// The lab's mount points, for `compare --lab`.
pub fn lab_targets(dir: &Path) -> Result<Vec<PathBuf>, UsageError> {
    let st = LabState::load(dir)
        .map_err(|e| UsageError::new(e.to_string()))?
        .ok_or_else(|| {
            UsageError::new(format!(
                "no lab at {}; run `stallscope lab up` first",
                dir.display()
            ))
        })?;
    let m: Vec<PathBuf> = st
        .mounts()
        .into_iter()
        .map(|(_, m, _)| m)
        .filter(|m| is_mountpoint(m))
        .collect();
    if m.is_empty() {
        return Err(UsageError::new(format!(
            "the lab at {} has no mounted filesystem",
            dir.display()
        )));
    }
    Ok(m)
}
