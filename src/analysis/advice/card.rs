//! One proposal: a change, where it applies, what it costs, where it is
//! documented, which kernels have it, and how far the lab can vouch for it.

use super::outcome::Outcome;
use super::treatment::Treatment;
use serde::{Deserialize, Serialize};

/// Where a change applies; narrower is preferred.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Application,
    Mount,
    Device,
    Global,
}

/// How far the lab can vouch for a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fidelity {
    /// Tried in the lab; the card carries the before/after.
    Verified,
    /// The lab shows the direction, not the size.
    Direction,
    /// Needs the real hardware.
    NotTestable,
}

/// One card.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    /// In words: `vm.dirty_background_bytes 64M → 16M`.
    pub change: String,
    /// The sysctl's name or the sysfs file's path for kernel knobs; the
    /// option or setting's name otherwise.
    pub knob: String,
    pub from: Option<String>,
    /// Exactly what to write there.
    pub to: String,
    pub scope: Scope,
    pub fidelity: Fidelity,
    pub tradeoff: String,
    pub source: String,
    /// The cause it addresses (`dirty_throttle`, `sync`, …).
    pub cause: String,
    /// Whose stalls it is for ("mmap writers on /mnt/ext4 (ext4, 7:0)",
    /// "postgres (pid 42)"), when the catalog knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Why it does not apply here, when it does not (kernel too old, knob
    /// absent); such a card is still shown, marked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    /// What a trial applies, when the lab can try it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub treatment: Option<Treatment>,
    /// A trial's result (`--try`); `Verified` only with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

impl Proposal {
    /// A trial's outcome makes a card `verified`: the only way to that
    /// tag, so it never comes without its numbers.
    pub fn verify(&mut self, outcome: Outcome) {
        self.fidelity = Fidelity::Verified;
        self.outcome = Some(outcome);
    }
}
