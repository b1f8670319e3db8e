//! stallscope: drive writers that imitate real write paths (Cassandra's
//! commitlog, Ceph's FileStore journal), time every op, and say when and why
//! writes stall. The library runs headless (`session::run`); the binary adds
//! the command line.
//!
//! The layers, bottom to top (ARCHITECTURE.md draws the data path; a test
//! keeps every `use crate::` pointing down):
//! `base` → `config` → `model` → `knob` → `source` | `fold` → `sink` → `session` →
//! `tui` | `cmd` → `cli`.

pub mod analysis;
pub mod base;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod fold;
pub mod knob;
pub mod model;
pub mod session;
pub mod sink;
pub mod source;
pub mod tui;
