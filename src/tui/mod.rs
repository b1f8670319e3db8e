//! The live dashboard: `app` (plain state changed by actions and
//! snapshots), `keys` (the one key table), `ui` (drawing, pure over `&App`)
//! and `term` (the terminal and the event loop).

pub mod app;
pub mod keys;
pub mod replay;
pub mod term;
pub mod ui;
