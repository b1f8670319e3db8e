//! The advice engine, shared by `advise`, `trial`, the dashboard's advice
//! panel and the reports: from a diagnosis to the changes that should
//! remove its dominant stall causes. Pure but for reading the machine.
//!
//! `card` (what one proposal is: scope, trade-off, source, version gate,
//! fidelity), `treatment` (what a trial applies, as a person would by
//! hand), `outcome` (what a trial found, and its verdict as words),
//! `diagnosis` (who stalled on what, from a recording or the dashboard),
//! `machine` (which knobs this machine has, under an injectable root),
//! `catalog` (pure: diagnosis and machine → ranked cards), `text` (the
//! cards as text). The commands that run trials are in `cmd/advise`.

pub mod card;
pub mod catalog;
pub mod diagnosis;
pub mod machine;
pub mod outcome;
pub mod text;
pub mod treatment;
