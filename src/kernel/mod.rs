//! The kernel side of the picture: /proc and /sys counters sampled every
//! interval (`proc`), tracefs writeback events when root (`trace`), and the
//! pure attribution of each stall to a cause (`attribute`).

pub mod attribute;
pub mod proc;
pub mod trace;
