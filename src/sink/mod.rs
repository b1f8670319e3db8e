//! Consumers of snapshots: the JSONL schema (`schema`, shared by the printer
//! and the recorder), the headless printer, the recording writer and reader,
//! and the Prometheus exporter. Each is a `Sink`.

pub mod metrics;
pub mod printer;
pub mod recording;
pub mod schema;

use crate::model::marker::Marker;
use crate::model::snapshot::{Snapshot, Summary, TargetMeta};
use std::io;

/// A consumer of the run's snapshots (printer, UI, recorder).
pub trait Sink {
    fn begin(&mut self, targets: &[TargetMeta]) -> io::Result<()>;
    fn snapshot(&mut self, s: &Snapshot) -> io::Result<()>;
    fn summary(&mut self, s: &Summary) -> io::Result<()>;
    /// A runtime action (target switch, mode change…); only a recording keeps it.
    fn marker(&mut self, _m: &Marker) -> io::Result<()> {
        Ok(())
    }
}

/// Hands everything to two sinks (the printer and the recorder).
pub struct Tee<'a>(pub &'a mut dyn Sink, pub &'a mut dyn Sink);

impl Sink for Tee<'_> {
    fn begin(&mut self, targets: &[TargetMeta]) -> io::Result<()> {
        self.0.begin(targets)?;
        self.1.begin(targets)
    }
    fn snapshot(&mut self, s: &Snapshot) -> io::Result<()> {
        self.0.snapshot(s)?;
        self.1.snapshot(s)
    }
    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        self.0.summary(s)?;
        self.1.summary(s)
    }
    fn marker(&mut self, m: &Marker) -> io::Result<()> {
        self.0.marker(m)?;
        self.1.marker(m)
    }
}
