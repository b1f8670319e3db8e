//! tracefs itself: mounting it where it is missing, and unmounting a mount
//! of ours once nothing uses it — also after the run that made it was
//! killed.
//!
//! A run that mounts tracefs writes a marker file in /run: the mount's id
//! (mountinfo's first field), then the instances the kernel already had
//! (tracefs keeps them while unmounted; they are not ours to wait for).
//! The mount is ours while the tracefs mounted at the root has that id: a
//! marker left after someone else unmounted and mounted tracefs again
//! names another mount and is ignored (and removed). Any stallscope
//! process may unmount a mount of ours — the last run out, `lab down`, a
//! run after a killed one — but only when nothing uses it: no instance
//! but those it found (a live run's, another tool's made since) and no
//! open file in it (a plain umount fails with EBUSY then). Unmounting
//! loses nothing: instances and buffers live on in the kernel, a later
//! mount shows them again. /run is a tmpfs, so no marker outlives a
//! reboot.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const TRACEFS_MAGIC: u64 = 0x7472_6163;

/// The file that says a stallscope run mounted tracefs at `root`.
fn marker(root: &Path) -> PathBuf {
    let tag: String = root
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    PathBuf::from(format!("/run/stallscope-tracefs{tag}.mounted"))
}

/// The id of the tracefs mount on top at `root`, from `mountinfo`'s text.
fn mount_id(mountinfo: &str, root: &Path) -> Option<u64> {
    crate::source::mounts::parse_mountinfo(mountinfo)
        .into_iter()
        .rev()
        .find(|m| m.mount_point == root && m.fs_type == "tracefs")
        .map(|m| m.id)
}

fn current_mount_id(root: &Path) -> Option<u64> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    mount_id(&text, root)
}

/// Whether the marker's text names the mount `id` (its first line).
fn names(text: &str, id: Option<u64>) -> bool {
    id.is_some() && text.lines().next().and_then(|l| l.trim().parse().ok()) == id
}

/// The instances under `root`, by name; None if they cannot be listed.
fn instances(root: &Path) -> Option<Vec<String>> {
    let dir = fs::read_dir(root.join("instances")).ok()?;
    Some(
        dir.flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
    )
}

/// Mounts tracefs at `root` and marks the mount as ours.
pub(super) fn mount_ours(root: &Path) -> std::io::Result<()> {
    mount_tracefs(root)?;
    mark(root);
    Ok(())
}

fn mark(root: &Path) {
    if let Some(id) = current_mount_id(root) {
        let found = instances(root).unwrap_or_default();
        let _ = fs::write(marker(root), marker_text(id, &found));
    }
}

fn marker_text(id: u64, found: &[String]) -> String {
    std::iter::once(id.to_string())
        .chain(found.iter().cloned())
        .map(|l| l + "\n")
        .collect()
}

/// Whether anything uses the tracefs at `root` that the marker `text`
/// did not find there: an instance made since. Unlistable counts as used.
fn in_use(root: &Path, text: &str) -> bool {
    let found: Vec<&str> = text.lines().skip(1).collect();
    instances(root).is_none_or(|now| now.iter().any(|n| !found.contains(&n.as_str())))
}

/// Unmounts the tracefs at `root` if a stallscope run mounted it and
/// nothing uses it (module doc). Ok(true) when it did; a stale marker
/// (naming a mount that is gone) is removed. Err says why the umount
/// failed; the marker then stays for the next one to try.
pub(super) fn unmount_if_unused(root: &Path) -> Result<bool, String> {
    let file = marker(root);
    let Ok(text) = fs::read_to_string(&file) else {
        return Ok(false);
    };
    if !names(&text, current_mount_id(root)) {
        let _ = fs::remove_file(&file);
        return Ok(false);
    }
    if in_use(root, &text) {
        return Ok(false);
    }
    // Marker first: a run starting now must not take our marker for one
    // it may rely on (it would be left with a mount nobody owns).
    let _ = fs::remove_file(&file);
    match umount(root) {
        Ok(()) => Ok(true),
        Err(e) => {
            let _ = fs::write(&file, text);
            Err(format!("cannot unmount tracefs at {}: {e}", root.display()))
        }
    }
}

pub(super) fn is_tracefs(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid C string and a zeroed statfs to fill.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as u64 == TRACEFS_MAGIC
    }
}

pub(super) fn mount_tracefs(path: &Path) -> std::io::Result<()> {
    let target = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: valid C strings; tracefs takes no data.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A plain umount: it fails (EBUSY) rather than detach if someone else is using it.
pub(super) fn umount(path: &Path) -> std::io::Result<()> {
    let target = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(target.as_ptr(), 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
46 22 0:13 / /sys/kernel/tracing rw,relatime - tracefs nodev rw
51 22 0:13 / /sys/kernel/tracing rw,relatime - tracefs nodev rw
60 22 0:40 / /sys/kernel/debug rw - debugfs debugfs rw
";

    #[test]
    fn the_mount_on_top_is_the_one_a_marker_must_name() {
        let root = Path::new("/sys/kernel/tracing");
        assert_eq!(mount_id(MOUNTINFO, root), Some(51));
        assert_eq!(mount_id(MOUNTINFO, Path::new("/sys/kernel/debug")), None);
        assert!(names("51\n", Some(51)));
        assert!(!names("46\n", Some(51)), "a mount since replaced");
        assert!(
            !names("/sys/kernel/tracing", Some(51)),
            "older builds' marker"
        );
        assert!(!names("51", None), "nothing mounted");
    }

    #[test]
    fn tracefs_is_in_use_while_an_instance_made_since_is_in_it() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        assert!(in_use(root, "7\n"), "unlistable counts as used");
        fs::create_dir_all(root.join("instances/from-boot")).unwrap();
        let text = marker_text(7, &instances(root).unwrap());
        assert_eq!(text, "7\nfrom-boot\n");
        assert!(names(&text, Some(7)));
        assert!(!in_use(root, &text), "what was there before is not a user");
        fs::create_dir(root.join("instances/perf-tool")).unwrap();
        assert!(in_use(root, &text), "another tool's instance made since");
        fs::remove_dir(root.join("instances/perf-tool")).unwrap();
        fs::create_dir(root.join("instances/stallscope-42")).unwrap();
        assert!(in_use(root, &text), "a live run's");
    }
}
