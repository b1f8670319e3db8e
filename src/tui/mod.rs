//! The live dashboard: `app` (plain state changed by actions and
//! snapshots), `keys` (the one key table), `view` (drawing, pure over `&App`, split by screen region)
//! and `term` (the terminal and the event loop).

pub mod app;
pub mod keys;
pub mod replay;
pub mod term;
pub mod view;
