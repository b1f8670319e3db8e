//! The scratch folder writers work in: `DIR/.stallscope-<pid>/`, created
//! exclusively with mode 0700, never through a symlink, and removed by `Drop`
//! on every exit path. Stale folders of dead runs are removed at start.

use crate::base::error::UsageError;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

pub const PREFIX: &str = ".stallscope-";

/// A scratch folder this process owns; removed when dropped.
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
    dev: u64,
    ino: u64,
}

impl Scratch {
    /// Checks `target` is a writable directory and creates our folder in it.
    pub fn create(target: &Path) -> Result<Scratch, UsageError> {
        check_target(target)?;
        remove_stale(target);
        let dir = target.join(format!("{PREFIX}{}", std::process::id()));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| UsageError::new(format!("cannot create {}: {e}", dir.display())))?;
        let md = fs::symlink_metadata(&dir)
            .map_err(|e| UsageError::new(format!("cannot stat {}: {e}", dir.display())))?;
        Ok(Scratch {
            dir,
            dev: md.dev(),
            ino: md.ino(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Removes the folder if it is still the one we made (not a planted symlink).
    pub fn remove(&self) -> io::Result<()> {
        match fs::symlink_metadata(&self.dir) {
            Ok(md) if md.is_dir() && md.dev() == self.dev && md.ino() == self.ino => {
                fs::remove_dir_all(&self.dir)
            }
            Ok(_) => Err(io::Error::other(format!(
                "{} was replaced; not touching it",
                self.dir.display()
            ))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            crate::base::error::note!("stallscope: could not remove {}: {e}", self.dir.display());
        }
    }
}

/// A target must exist, be a directory (not a symlink to one) and be writable.
pub fn check_target(target: &Path) -> Result<(), UsageError> {
    check_dir(target)?;
    check_writable(target).map_err(UsageError::new)
}

/// The target exists and is a directory (not a symlink to one).
pub fn check_dir(target: &Path) -> Result<(), UsageError> {
    let md = fs::symlink_metadata(target)
        .map_err(|e| UsageError::new(format!("target {} does not exist: {e}", target.display())))?;
    if md.file_type().is_symlink() {
        return Err(UsageError::new(format!(
            "target {} is a symlink; give the real directory or --follow-symlinks",
            target.display()
        )));
    }
    if !md.is_dir() {
        return Err(UsageError::new(format!(
            "target {} is not a directory",
            target.display()
        )));
    }
    Ok(())
}

/// We may create our folder in it; Err says why not.
pub fn check_writable(target: &Path) -> Result<(), String> {
    let c = std::ffi::CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("target {} has a NUL byte", target.display()))?;
    // SAFETY: c is a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(format!(
            "target {} is not writable: {}",
            target.display(),
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Removes `.stallscope-<pid>` folders under `target` whose process is gone.
pub fn remove_stale(target: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(rd) = fs::read_dir(target) else {
        return removed;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid_alive(pid) {
            continue;
        }
        let p = e.path();
        let is_dir = fs::symlink_metadata(&p)
            .map(|m| m.is_dir())
            .unwrap_or(false);
        let res = if is_dir {
            fs::remove_dir_all(&p)
        } else {
            fs::remove_file(&p)
        };
        match res {
            Ok(()) => {
                crate::base::error::note!(
                    "stallscope: removed stale scratch {} (pid {pid} is gone)",
                    p.display()
                );
                removed.push(p);
            }
            Err(err) => {
                crate::base::error::note!(
                    "stallscope: could not remove stale {}: {err}",
                    p.display()
                )
            }
        }
    }
    removed
}

/// True when a process with this pid exists (EPERM still means it exists).
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_private_dir_and_removes_it() {
        let t = tempfile::tempdir().unwrap();
        let s = Scratch::create(t.path()).unwrap();
        let md = fs::metadata(s.path()).unwrap();
        assert_eq!(md.mode() & 0o777, 0o700);
        fs::write(s.path().join("f"), b"x").unwrap();
        let p = s.path().to_path_buf();
        drop(s);
        assert!(!p.exists());
    }

    #[test]
    fn stale_folder_of_dead_pid_is_removed() {
        let t = tempfile::tempdir().unwrap();
        // pid_max is below 2^22 on Linux, so this pid cannot be alive.
        let stale = t.path().join(format!("{PREFIX}{}", 4_194_304 + 7));
        fs::create_dir(&stale).unwrap();
        fs::write(stale.join("seg"), b"x").unwrap();
        let live = t.path().join(format!("{PREFIX}1"));
        fs::create_dir(&live).unwrap();
        let removed = remove_stale(t.path());
        assert_eq!(removed, vec![stale.clone()]);
        assert!(!stale.exists() && live.exists());
    }

    #[test]
    fn bad_targets_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("file");
        fs::write(&f, b"x").unwrap();
        assert!(check_target(&f).unwrap_err().0.contains("not a directory"));
        let missing = t.path().join("nope");
        assert!(check_target(&missing)
            .unwrap_err()
            .0
            .contains("does not exist"));
        let link = t.path().join("link");
        std::os::unix::fs::symlink(t.path(), &link).unwrap();
        assert!(check_target(&link).unwrap_err().0.contains("symlink"));
    }

    #[test]
    fn a_replaced_scratch_is_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let victim = tempfile::tempdir().unwrap();
        fs::write(victim.path().join("precious"), b"keep").unwrap();
        let s = Scratch::create(t.path()).unwrap();
        fs::remove_dir_all(s.path()).unwrap();
        std::os::unix::fs::symlink(victim.path(), s.path()).unwrap();
        assert!(s.remove().is_err());
        assert!(victim.path().join("precious").exists());
        fs::remove_file(s.path()).unwrap();
    }
}
