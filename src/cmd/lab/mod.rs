//! Reproducing stalls on one box: loop-backed filesystems, a write cap on
//! their devices and lower dirty limits (`cmd`), every change recorded
//! (`state`) and undone; `guards` are the same changes as Drop guards, for
//! tests.

pub mod cmd;
pub mod guards;
pub mod state;
