//! The bottom layer: units and their parsing, the error types, the run's
//! clock, fitting text into a width. Imports nothing else of ours.

pub mod clock;
pub mod error;
pub mod skips;
#[cfg(test)]
pub(crate) mod testenv;
pub mod text;
pub mod units;
