//! Reproducing stalls on one box: loop-backed filesystems, a write cap on
//! their devices and lower dirty limits, each undone by a guard.

pub mod guards;
