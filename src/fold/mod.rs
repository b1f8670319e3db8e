//! The pure part: the aggregator folds source messages into per-interval
//! snapshots and the summary, attribution says why a stall happened, and
//! `derive` turns raw kernel samples into rates. No threads, no clock, no
//! I/O: tests drive it with messages.

pub mod aggregate;
pub mod attribute;
pub mod blocks;
pub mod calls;
pub mod chains;
pub mod derive;
pub mod siblings;
