//! Every type that crosses a boundary between layers: ops and the messages
//! the sources send, kernel samples and trace events, causes, the snapshot
//! and summary the fold emits, control requests and recording markers.
//! Data and its small accessors only; no I/O.

pub mod cause;
pub mod control;
pub mod kernel;
pub mod marker;
pub mod msg;
pub mod observed;
pub mod ops;
pub mod pattern;
pub mod snapshot;
pub mod stall;
