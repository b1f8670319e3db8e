//! Test support: root-only tests say when they skip, and fail instead when
//! `STALLSCOPE_REQUIRE_ROOT_TESTS=1` (CI runs as root and sets it).

use std::path::Path;
use std::process::Command;

/// True if the test may go on; records why not, or panics when skips are forbidden.
pub fn require_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    skip(test, "needs root")
}

pub use crate::base::skips::skip;

/// A small tmpfs mounted on a fresh directory; unmounted and removed on drop.
pub struct TmpfsMount {
    dir: tempfile::TempDir,
}

impl TmpfsMount {
    pub fn new(size: &str) -> std::io::Result<TmpfsMount> {
        let dir = tempfile::tempdir_in("/var/tmp")?;
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "stallscope-test",
            ])
            .arg(dir.path())
            .status()?;
        if !st.success() {
            return Err(std::io::Error::other("mount tmpfs failed"));
        }
        Ok(TmpfsMount { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}
