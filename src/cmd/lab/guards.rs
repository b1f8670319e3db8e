//! Changes to the system that must be put back: the dirty limits, a blkio
//! write cap, a loop-backed filesystem. Each is a guard that puts it back
//! on drop (normal exit, error, or unwinding); the knobs are held in the
//! machine's registry (`crate::knob`) in the test process's name, so
//! another holder's value is never undone and a test killed before its
//! guards drop is put back by the next stallscope run as root.

use crate::knob::{Knob, Owner, Registry, Value};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs a command, turning a failure into an error that names it.
pub fn sh(cmd: &str, args: &[&str]) -> io::Result<String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("{cmd}: {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub use crate::knob::{DirtyLimits, BLKIO_WRITE_BPS};

/// The cgroup v1 write cap of one device, as read from the throttle file.
pub fn blkio_cap(major: u32, minor: u32) -> io::Result<u64> {
    match Knob::blkio(major, minor).read()? {
        Value::Bps(b) => Ok(b),
        v => Err(io::Error::other(format!("blkio cap read as {v:?}"))),
    }
}

/// A knob this (test) process holds in the machine's registry
/// (`crate::knob`), released on drop. Killed before it drops, the next
/// stallscope run as root puts the knob back: the hold names this
/// process, which is gone.
struct Held {
    knobs: Registry,
    knob: Knob,
    owner: Owner,
}

impl Held {
    fn set(knob: Knob, value: Value, what: &str) -> io::Result<Held> {
        let (knobs, owner) = (Registry::machine(), Owner::this_process());
        let what = format!("test pid {} ({what})", std::process::id());
        knobs
            .set(&knob, &value, &owner, &what)
            .map_err(|e| io::Error::other(format!("{e:#}")))?;
        Ok(Held { knobs, knob, owner })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Err(e) = self.knobs.release(&self.knob, &self.owner) {
            eprintln!("stallscope: could not put back {}: {e:#}", self.knob.name());
        }
    }
}

/// Sets dirty limits in bytes; puts back what was in force on drop.
pub struct DirtyGuard {
    _held: Held,
}

impl DirtyGuard {
    pub fn set_bytes(dirty: u64, background: u64) -> io::Result<DirtyGuard> {
        let limits = DirtyLimits {
            dirty_bytes: dirty,
            dirty_ratio: 0,
            background_bytes: background,
            background_ratio: 0,
        };
        let held = Held::set(Knob::dirty(), Value::Dirty(limits), "DirtyGuard")?;
        Ok(DirtyGuard { _held: held })
    }
}

/// A write-bandwidth cap on a device through the root blkio cgroup (v1),
/// which also slows the kernel's own writeback; put back on drop.
pub struct BlkioCap {
    _held: Held,
}

impl BlkioCap {
    pub fn set(major: u32, minor: u32, bytes_per_s: u64) -> io::Result<BlkioCap> {
        let knob = Knob::blkio(major, minor);
        let held = Held::set(knob, Value::Bps(bytes_per_s), "BlkioCap")?;
        Ok(BlkioCap { _held: held })
    }
}

/// A filesystem on a loop device backed by an image file, mounted; torn
/// down (unmount, detach, delete image) on drop.
pub struct LoopFs {
    pub image: PathBuf,
    pub device: String,
    pub mount: PathBuf,
    pub major: u32,
    pub minor: u32,
    mounted: bool,
}

impl LoopFs {
    /// `fs` is ext4, xfs or btrfs; `size` in bytes (the image is sparse).
    pub fn create(dir: &Path, fs_type: &str, size: u64) -> io::Result<LoopFs> {
        fs::create_dir_all(dir)?;
        let image = dir.join(format!("{fs_type}.img"));
        let f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&image)?;
        f.set_len(size)?;
        drop(f);
        let img = image.to_string_lossy().into_owned();
        let device = match sh("losetup", &["--direct-io=on", "-f", "--show", &img]) {
            Ok(d) => d,
            Err(e) => {
                let _ = fs::remove_file(&image);
                return Err(e);
            }
        };
        let mut lf = LoopFs {
            image,
            device: device.clone(),
            mount: dir.join("mnt").join(fs_type),
            major: 7,
            minor: 0,
            mounted: false,
        };
        let rdev = sh("stat", &["-L", "-c", "%t:%T", &device])?;
        let (ma, mi) = rdev.split_once(':').unwrap_or(("7", "0"));
        lf.major = u32::from_str_radix(ma, 16).unwrap_or(7);
        lf.minor = u32::from_str_radix(mi, 16).unwrap_or(0);
        let mkfs = format!("mkfs.{fs_type}");
        let force = match fs_type {
            "ext4" => "-F",
            _ => "-f",
        };
        sh(&mkfs, &["-q", force, &device])?;
        fs::create_dir_all(&lf.mount)?;
        sh("mount", &[&device, &lf.mount.to_string_lossy()])?;
        lf.mounted = true;
        Ok(lf)
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            if let Err(e) = sh("umount", &[&self.mount.to_string_lossy()]) {
                eprintln!("stallscope: {e}");
            }
            let _ = fs::remove_dir(&self.mount);
        }
        if let Err(e) = sh("losetup", &["-d", &self.device]) {
            eprintln!("stallscope: {e}");
        }
        let _ = fs::remove_file(&self.image);
    }
}
