//! Where measurements come from: our writer threads (`writer`), the
//! watchdog that sees their ops in flight, the /proc sampler, the tracefs
//! session, the observer of other processes, and the scratch folders,
//! mount lookups and cgroup moves they need. Sources send `model` messages; they never fold.

pub mod cgroup;
pub mod mounts;
pub mod observe;
pub mod proc;
pub mod scratch;
pub mod support;
pub mod trace;
pub mod watchdog;
pub mod writer;
