//! `stallscope advise`: from a diagnosis to the changes that should remove
//! its dominant stall causes, each a card with its scope, trade-off, source,
//! version gate and fidelity, and (`--try`) a verdict from lab trials.
//!
//! The shape: `card` (what one proposal is), `treatment` (what a trial
//! applies, as a person would by hand), `outcome` (what a trial found).
//! The catalog of proposals per cause, the outputs and the trial engine
//! build on these three.

pub mod card;
pub mod outcome;
pub mod treatment;
pub mod trial;
