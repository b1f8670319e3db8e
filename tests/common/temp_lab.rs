//! A lab (`stallscope lab up`) of a root test, in a temp folder under
//! /var/tmp, taken down on drop (`lab down --force`, which also removes
//! what a killed stallscope left in tracefs).

use std::path::PathBuf;

pub struct TempLab {
    pub dir: PathBuf,
    _base: tempfile::TempDir,
}

impl TempLab {
    /// `lab up` with `args` (besides `--dir`); panics with its stderr if
    /// it fails.
    pub fn up(args: &[&str]) -> TempLab {
        let base = tempfile::tempdir_in("/var/tmp").unwrap();
        let dir = base.path().join("lab");
        super::run_ok(
            super::bin()
                .args(["lab", "up"])
                .args(args)
                .arg("--dir")
                .arg(&dir),
        );
        TempLab { dir, _base: base }
    }
}

impl Drop for TempLab {
    fn drop(&mut self) {
        let _ = super::bin()
            .args(["lab", "down", "--force", "--dir"])
            .arg(&self.dir)
            .output();
    }
}
