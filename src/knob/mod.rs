//! The one owner of every kernel knob stallscope changes: a machine-wide
//! registry (`registry`) of who changed which knob (`kind`: the vm dirty
//! limits as one knob, a plain /proc/sys or /sys file, the v1 blkio write
//! cap of a device, a v2 controller in a subtree_control file) to what,
//! over the true original. Owners (`owner`) are processes (pid and start
//! time) and labs (alive while their state file is); a dead owner's
//! change is put back by the next stallscope run as root, and a live
//! owner's value is never undone by another's release. Imports only
//! `base`.

pub mod kind;
pub mod owner;
pub mod registry;

pub use kind::{sysctl_path, v1_wbps, DirtyLimits, Knob, Value, BLKIO_WRITE_BPS, VM};
pub use owner::Owner;
pub use registry::{Entry, Hold, Registry};

#[cfg(test)]
mod tests;
