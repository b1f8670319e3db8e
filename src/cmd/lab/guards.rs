//! Changes to the system that must be put back: sysctls, a blkio write cap,
//! a loop-backed filesystem. Each is a guard that restores the original on
//! drop (normal exit, error, or unwinding), so a test or a run that dies
//! halfway leaves the machine as it found it.

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

/// The vm dirty limits. Writing `*_bytes` zeroes the matching `*_ratio` and
/// vice versa, so both of a pair are saved and the non-zero one restored.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DirtyLimits {
    pub dirty_bytes: u64,
    pub dirty_ratio: u64,
    pub background_bytes: u64,
    pub background_ratio: u64,
}

const VM: &str = "/proc/sys/vm";

fn read_u64(p: &Path) -> io::Result<u64> {
    fs::read_to_string(p)?
        .trim()
        .parse()
        .map_err(|e| io::Error::other(format!("{}: {e}", p.display())))
}

impl DirtyLimits {
    pub fn read() -> io::Result<DirtyLimits> {
        let v = |n: &str| read_u64(&Path::new(VM).join(n));
        Ok(DirtyLimits {
            dirty_bytes: v("dirty_bytes")?,
            dirty_ratio: v("dirty_ratio")?,
            background_bytes: v("dirty_background_bytes")?,
            background_ratio: v("dirty_background_ratio")?,
        })
    }

    pub fn write(&self) -> io::Result<()> {
        let w = |n: &str, v: u64| fs::write(Path::new(VM).join(n), v.to_string());
        // Background first when lowering, so it never exceeds the hard limit.
        if self.background_bytes > 0 {
            w("dirty_background_bytes", self.background_bytes)?;
        } else {
            w("dirty_background_ratio", self.background_ratio)?;
        }
        if self.dirty_bytes > 0 {
            w("dirty_bytes", self.dirty_bytes)
        } else {
            w("dirty_ratio", self.dirty_ratio)
        }
    }
}

/// Sets dirty limits in bytes; restores the originals on drop.
pub struct DirtyGuard {
    original: DirtyLimits,
}

impl DirtyGuard {
    pub fn set_bytes(dirty: u64, background: u64) -> io::Result<DirtyGuard> {
        let original = DirtyLimits::read()?;
        let g = DirtyGuard { original };
        DirtyLimits {
            dirty_bytes: dirty,
            dirty_ratio: 0,
            background_bytes: background,
            background_ratio: 0,
        }
        .write()?;
        Ok(g)
    }
}

impl Drop for DirtyGuard {
    fn drop(&mut self) {
        if let Err(e) = self.original.write() {
            eprintln!("stallscope: could not restore dirty limits: {e}");
        }
    }
}

pub const BLKIO_WRITE_BPS: &str = "/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device";

/// The cgroup v1 write cap of one device, as read from the throttle file.
pub fn blkio_cap(major: u32, minor: u32) -> io::Result<u64> {
    let text = fs::read_to_string(BLKIO_WRITE_BPS)?;
    Ok(crate::source::cgroup::v1_wbps(&text, major, minor))
}

/// A write-bandwidth cap on a device through the root blkio cgroup (v1),
/// which also slows the kernel's own writeback; restored on drop.
pub struct BlkioCap {
    major: u32,
    minor: u32,
    original: u64,
}

impl BlkioCap {
    pub fn set(major: u32, minor: u32, bytes_per_s: u64) -> io::Result<BlkioCap> {
        let original = blkio_cap(major, minor)?;
        let g = BlkioCap {
            major,
            minor,
            original,
        };
        fs::write(BLKIO_WRITE_BPS, format!("{major}:{minor} {bytes_per_s}"))?;
        Ok(g)
    }
}

impl Drop for BlkioCap {
    fn drop(&mut self) {
        let v = format!("{}:{} {}", self.major, self.minor, self.original);
        if let Err(e) = fs::write(BLKIO_WRITE_BPS, v) {
            eprintln!("stallscope: could not restore the blkio cap: {e}");
        }
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
