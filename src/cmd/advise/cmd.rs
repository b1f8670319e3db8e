//! `stallscope advise RECORDING`: read it, diagnose it, check the knobs on
//! this machine, print the cards as text or JSON.

use super::{catalog, diagnosis, json, text, Format};
use crate::base::error::UsageError;
use crate::cmd::advise::machine::Machine;
use crate::sink::recording::PRINTED_NOTE;
use crate::source::proc::ProcRoot;
use std::path::Path;

pub fn run(file: &Path, format: Format) -> anyhow::Result<()> {
    print!("{}", advise(file, format, &ProcRoot::default())?);
    Ok(())
}

/// The output for `file`, knobs checked under `root`.
pub fn advise(file: &Path, format: Format, root: &ProcRoot) -> anyhow::Result<String> {
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
    let d = diagnosis::from_recording(&rec);
    let m = Machine::probe(root, &d.devices());
    let cards = catalog::propose(&d, &m);
    Ok(match format {
        Format::Text => text::render(&d, &m, &cards),
        Format::Json => json::render(&cards),
    })
}
