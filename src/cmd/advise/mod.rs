//! `stallscope advise`: from a diagnosis to the changes that should remove
//! its dominant stall causes, each a card with its scope, trade-off, source,
//! version gate and fidelity, and (`--try`) a verdict from lab trials.
//!
//! The shape: `card` (what one proposal is), `treatment` (what a trial
//! applies, as a person would by hand), `outcome` (what a trial found);
//! `diagnosis` (who stalled on what, from a recording or the dashboard),
//! `machine` (which knobs this machine has), `catalog` (pure: diagnosis
//! and machine → ranked cards), the outputs `text` and `json`, and `cmd`
//! the command's entry; `trial` (the lab trial of one change: A/A, then
//! interleaved A/B runs, a verdict with its interval, and the recipe);
//! `tries` (`--try`: the cards the lab can apply, tried one after the
//! other on a lab shaped like the recording).

pub mod card;
pub mod catalog;
pub mod cmd;
pub mod diagnosis;
pub mod json;
pub mod machine;
pub mod outcome;
pub mod text;
pub mod treatment;
pub mod trial;
pub mod tries;

/// `advise --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[cfg(test)]
mod tests;
