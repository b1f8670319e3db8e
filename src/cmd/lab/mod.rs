//! Reproducing stalls on one box: loop-backed filesystems, a write cap on
//! their devices and lower dirty limits (`cmd`: up and status), checked
//! before anything is made (`checks`), the cap on cgroup v1 or v2 (`cap`),
//! other programs put under it (`exec`: exec and adopt), every change
//! recorded (`state`) and undone by `down`, which first names the
//! processes holding the lab busy (`procs`); `guards` are the same changes
//! as Drop guards, for tests.

pub mod cap;
pub mod checks;
pub mod cmd;
pub mod down;
pub mod exec;
pub mod guards;
pub mod procs;
pub mod state;

use crate::base::units::ByteSize;
use std::path::PathBuf;

/// What `lab up` is asked for: `checks` judges it, `cmd` makes it.
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
