//! `stallscope advise` and `trial`: the commands over the advice engine
//! (`crate::advice`: diagnosis, machine, catalog, cards): `cmd` the
//! command's entry, `json` its JSON output; `trial` (the lab trial of one
//! change: A/A, then interleaved A/B runs, a verdict with its interval,
//! and the recipe; `trial --observe` on the live server); `tries`
//! (`--try`: the cards the lab can apply, tried one after the other on a
//! lab shaped like the recording).

pub mod cmd;
pub mod json;
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
