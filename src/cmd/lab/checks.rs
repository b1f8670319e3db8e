//! What `lab up` checks before it changes anything: root, the mkfs tools,
//! the options, stable_writes support, a way to cap, and room on the disk
//! for what the sparse images will really hold.

use super::cap::{self, CapMethod};
use super::UpOptions;
use crate::base::error::UsageError;
use crate::base::units::ByteSize;
use std::path::Path;

pub fn need_root(what: &str) -> Result<(), UsageError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(UsageError::new(format!(
            "lab {what} needs root (loop devices, mounts, sysctls, cgroups)"
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

/// The kernel's major.minor from its release string ("6.1.0-13-amd64").
pub fn kernel_version(release: &str) -> (u32, u32) {
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// What the images can really take on the host disk: sparse, they grow to
/// what is written, which a run keeps within its disk budget, plus the
/// filesystem's own metadata (journal, log); never more than their size.
pub fn image_need(size: u64, disk_budget: u64) -> u64 {
    size.min(disk_budget + size / 32 + (64 << 20))
}

/// Every check, before anything is made. Returns how the cap will be
/// applied (None for `--cap 0`) and the warnings to print.
pub fn preflight(o: &UpOptions) -> Result<(Option<CapMethod>, Vec<String>), UsageError> {
    need_root("up")?;
    check_options(o)?;
    if o.stable_writes && !stable_writes_supported(Path::new("/sys/block")) {
        return Err(UsageError::new(format!(
            "--stable-writes needs queue/stable_writes, which kernels have from 5.10 on; this one is {}",
            kernel_release()
        )));
    }
    let method = if o.cap.0 > 0 {
        let m = cap::detect().map_err(|why| {
            UsageError::new(format!("--cap {}: {why}; --cap 0 for no cap", o.cap))
        })?;
        if let CapMethod::V2 { root, .. } = &m {
            let g = root.join(crate::source::cgroup::LAB_GROUP);
            // The group of this very lab is no obstacle: `up` on an intact
            // lab reports it and changes nothing.
            let ours = super::state::LabState::load(&o.dir)
                .ok()
                .flatten()
                .is_some_and(|st| st.group() == Some(g.as_path()));
            if g.exists() && !ours {
                return Err(UsageError::new(format!(
                    "cgroup {} exists already (an earlier lab, or made by hand): `lab down`, or rmdir it",
                    g.display()
                )));
            }
        }
        Some(m)
    } else {
        None
    };
    check_space(o)?;
    let warnings = method.as_ref().map_or(Vec::new(), |m| {
        cap::writeback_warnings(m, &o.fs, kernel_version(&kernel_release()))
    });
    Ok((method, warnings))
}

fn check_options(o: &UpOptions) -> Result<(), UsageError> {
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
    Ok(())
}

/// Whether this kernel has queue/stable_writes (any block device shows it).
fn stable_writes_supported(sys_block: &Path) -> bool {
    std::fs::read_dir(sys_block).is_ok_and(|rd| {
        rd.filter_map(Result::ok)
            .any(|e| e.path().join("queue/stable_writes").exists())
    })
}

fn check_space(o: &UpOptions) -> Result<(), UsageError> {
    let parent = o
        .dir
        .ancestors()
        .find(|a| a.is_dir())
        .unwrap_or(Path::new("/"));
    let Some((total, avail)) = crate::source::writer::segments::size_and_free(parent) else {
        return Ok(());
    };
    let mib = |b: u64| ByteSize(b / (1 << 20) * (1 << 20));
    if o.size.0 > total {
        return Err(UsageError::new(format!(
            "--size {} is more than the whole filesystem holding {} ({} in all, {} free)",
            o.size,
            parent.display(),
            mib(total),
            mib(avail)
        )));
    }
    let budget = crate::config::Config::default().disk_budget.0;
    let need = image_need(o.size.0, budget) * o.fs.len() as u64;
    if avail < need {
        return Err(UsageError::new(format!(
            "{} has {} free; {} sparse images of {} need about {} (what a run writes, --disk-budget {} each, plus metadata)",
            parent.display(),
            mib(avail),
            o.fs.len(),
            o.size,
            mib(need),
            ByteSize(budget)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version("6.1.0-13-amd64"), (6, 1));
        assert_eq!(kernel_version("4.18.0-553.el8_10.x86_64"), (4, 18));
        assert_eq!(kernel_version("?"), (0, 0));
    }

    #[test]
    fn sparse_images_need_what_a_run_writes_not_their_size() {
        let gib = 1u64 << 30;
        // Two 4 GiB filesystems, a 1 GiB budget: about 2.5 GiB, not 8.
        let need = 2 * image_need(4 * gib, gib);
        assert_eq!(need, 2 * (gib + (128 << 20) + (64 << 20)));
        assert_eq!(
            image_need(512 << 20, gib),
            512 << 20,
            "never above the size"
        );
    }

    #[test]
    fn stable_writes_support_is_seen_on_any_device() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("sda/queue")).unwrap();
        assert!(!stable_writes_supported(t.path()), "4.19: no such file");
        std::fs::write(t.path().join("sda/queue/stable_writes"), "0\n").unwrap();
        assert!(stable_writes_supported(t.path()));
    }
}
