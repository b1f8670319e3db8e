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
