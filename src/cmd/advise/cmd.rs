//! `stallscope advise RECORDING`: read it, diagnose it, check the knobs on
//! this machine, (`--try`) try the cards the lab can apply, print the cards
//! as text or JSON.

use super::tries::{self, TryOptions};
use super::{json, Format};
use crate::analysis::advice::machine::Machine;
use crate::analysis::advice::{catalog, diagnosis, text};
use crate::base::error::UsageError;
use crate::sink::recording::{Recording, PRINTED_NOTE};
use crate::source::proc::ProcRoot;
use std::path::Path;
use std::sync::atomic::AtomicBool;

pub fn run(file: &Path, format: Format) -> anyhow::Result<()> {
    print!("{}", advise(file, format, &ProcRoot::default())?);
    Ok(())
}

/// The output for `file`, knobs checked under `root`.
pub fn advise(file: &Path, format: Format, root: &ProcRoot) -> anyhow::Result<String> {
    let rec = read(file)?;
    let d = diagnosis::from_recording(&rec);
    let m = Machine::probe(root, &d.devices());
    let cards = catalog::propose(&d, &m);
    Ok(match format {
        Format::Text => text::render(&d, &m, &cards),
        Format::Json => json::render(&cards, None),
    })
}

/// `advise --try`: the cards, those the lab can apply tried first. What was
/// tried is printed also when a Ctrl-C stops the rest (then the error says
/// so).
pub fn run_try(
    file: &Path,
    format: Format,
    o: &TryOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    tries::check_pairs(o.trial.pairs)?;
    let rec = read(file)?;
    if rec.printed {
        return Err(UsageError::new(format!(
            "{}: --try needs a recording (--record): printed output does not keep the run's configuration",
            file.display()
        ))
        .into());
    }
    let d = diagnosis::from_recording(&rec);
    let m = Machine::probe(&ProcRoot::default(), &d.devices());
    let mut cards = catalog::propose(&d, &m);
    let report = tries::try_cards(&rec.header.config, &d, &mut cards, o, stop, progress)?;
    print!(
        "{}",
        match format {
            Format::Text =>
                text::render(&d, &m, &cards) + &tries::render_text(&report, o.trial.pairs),
            Format::Json => json::render(&cards, Some(&report)),
        }
    );
    if report.interrupted {
        anyhow::bail!(
            "interrupted after {} of the cards; everything the trials changed is back",
            report.tried.len()
        );
    }
    Ok(())
}

/// The recording, with its notes on stderr; one without intervals is bad
/// input.
fn read(file: &Path) -> anyhow::Result<Recording> {
    let rec = crate::sink::recording::read(file).map_err(|e| UsageError::new(format!("{e:#}")))?;
    if let Some(note) = rec.damage_note() {
        eprintln!("stallscope: {note}");
    }
    if rec.printed {
        eprintln!("stallscope: {}: {}", file.display(), PRINTED_NOTE);
    }
    if rec.snapshots.is_empty() {
        return Err(UsageError::new(format!(
            "{}: no intervals in the file: nothing was measured to advise from",
            file.display()
        ))
        .into());
    }
    Ok(rec)
}
