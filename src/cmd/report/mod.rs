//! `stallscope report`: a recording's snapshots turned into a text summary per
//! target and (mode, threads) segment, a CSV of every interval, and an SVG
//! chart to attach to a mailing-list post.
//!
//! Rates and percentiles come from the same functions the live run uses
//! (`TargetInterval::rates`, `LatSummary::of` on merged histograms), so the
//! report agrees with the run's own summary for the same span.
//!
//! What the three formats draw from (the span, the segments, their stalls
//! by cause) is `analysis::span`, which `advise` reads too, so they cannot
//! disagree; each format is a module of its own: `text`, `csv`, `svg`.

pub use crate::analysis::span::{interval_of, median, summarize, totals, ReportInput, Segment};

mod csv;
mod svg;
mod text;

pub use csv::render_csv;
pub use svg::{render_before_after, render_svg, BeforeAfter, RunTrace, ShownRun};
pub use text::render_text;

#[cfg(test)]
pub(crate) mod tests;
