//! The cards as JSON: `{"proposals":[…]}`, each with the fields in
//! its order (`change`, `knob`, `from`, `to`, `scope`, `fidelity`,
//! `tradeoff`, `source`, `verdict`, `before`, `after`, `interval`; the
//! last four null until a trial), then `cause`, `subject`, `gate` (null
//! when it applies here) and `treatment` (every setting to write, null for
//! a server's own knob), so a script can apply a card by hand; a tried
//! card adds `trial` (the measure the verdict is on, the median ln(B/A),
//! the A/A noise band, the pairs with B lower and higher (the sign test's
//! counts), where stall time moved, notes and the recipe).
//! After `--try`, `try` says where the cards were tried and which were not,
//! and why.

use super::tries::TryReport;
use crate::analysis::advice::card::{Fidelity, Proposal, Scope};
use crate::analysis::advice::outcome::{Figures, Verdict};
use crate::analysis::advice::treatment::Treatment;
use serde::Serialize;

#[derive(Serialize)]
struct Card<'a> {
    change: &'a str,
    knob: &'a str,
    from: Option<&'a str>,
    to: &'a str,
    scope: Scope,
    fidelity: Fidelity,
    tradeoff: &'a str,
    source: &'a str,
    verdict: Option<Verdict>,
    before: Option<&'a Figures>,
    after: Option<&'a Figures>,
    interval: Option<[f64; 2]>,
    cause: &'a str,
    subject: Option<&'a str>,
    gate: Option<&'a str>,
    treatment: Option<&'a Treatment>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trial: Option<Trial<'a>>,
}

/// The rest of a trial's outcome.
#[derive(Serialize)]
struct Trial<'a> {
    measure: &'a str,
    difference: f64,
    noise: f64,
    pairs_lower: usize,
    pairs_higher: usize,
    moved: Option<&'a str>,
    notes: &'a [String],
    recipe: &'a str,
}

#[derive(Serialize)]
struct Doc<'a> {
    proposals: Vec<Card<'a>>,
    #[serde(rename = "try", skip_serializing_if = "Option::is_none")]
    tried: Option<&'a TryReport>,
}

/// One JSON document, pretty-printed, with a newline at the end.
pub fn render(cards: &[Proposal], report: Option<&TryReport>) -> String {
    let doc = Doc {
        proposals: cards
            .iter()
            .map(|c| {
                let o = c.outcome.as_ref();
                Card {
                    change: &c.change,
                    knob: &c.knob,
                    from: c.from.as_deref(),
                    to: &c.to,
                    scope: c.scope,
                    fidelity: c.fidelity,
                    tradeoff: &c.tradeoff,
                    source: &c.source,
                    verdict: o.map(|o| o.verdict),
                    before: o.map(|o| &o.before),
                    after: o.map(|o| &o.after),
                    interval: o.map(|o| [o.interval.0, o.interval.1]),
                    cause: &c.cause,
                    subject: c.subject.as_deref(),
                    gate: c.gate.as_deref(),
                    treatment: c.treatment.as_ref(),
                    trial: o.map(|o| Trial {
                        measure: &o.measure,
                        difference: o.difference,
                        noise: o.noise,
                        pairs_lower: o.pairs_lower,
                        pairs_higher: o.pairs_higher,
                        moved: o.moved.as_deref(),
                        notes: &o.notes,
                        recipe: &o.recipe,
                    }),
                }
            })
            .collect(),
        tried: report,
    };
    let mut s = serde_json::to_string_pretty(&doc).expect("cards serialize");
    s.push('\n');
    s
}
