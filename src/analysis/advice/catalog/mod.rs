//! From a diagnosis to proposals (pure): for each cause, largest stall time
//! first, and each subject that stalled on it, the changes that should
//! remove or shrink it, each a card with its scope, trade-off, source,
//! version gate and fidelity.
//!
//! Within a cause the narrower scope comes first (the application, the
//! mount, the device, then global sysctls, whose trade-off says what else
//! they change), and a card whose gate says it does not apply here after
//! the ones that do. A card proposed for two subjects or two causes is
//! shown once, under the first.
//!
//! Fidelity is `direction` where the lab can try the change (it shows the
//! direction, not the size: a loop device is not the real disk) and
//! `not-testable` where only the real hardware can tell (the I/O
//! scheduler, writeback throttling). Only a trial (`--try`) makes a card
//! `verified`, and only with its outcome. Observed servers' own knobs are
//! `direction` and carry no treatment: the lab runs our writers, not them.
//!
//! `kernel` holds the kernel, mount and write-path cards, `servers` the
//! servers' own knobs.

use super::card::{Fidelity, Proposal, Scope};
use super::diagnosis::{Diagnosis, Subject};
use super::machine::{kernel_version, Machine};
use crate::model::cause::Cause;

mod kernel;
mod servers;
#[cfg(test)]
mod tests;

const MIB: u64 = 1 << 20;

/// What every card builder reads.
pub struct Ctx<'a> {
    pub d: &'a Diagnosis,
    pub m: &'a Machine,
    /// The recorded kernel's (major, minor), else this machine's.
    pub kernel: Option<(u32, u32)>,
}

/// The proposals for a diagnosis on this machine, ranked.
pub fn propose(d: &Diagnosis, m: &Machine) -> Vec<Proposal> {
    let ctx = Ctx {
        d,
        m,
        kernel: kernel_version(&d.kernel).or_else(|| kernel_version(&m.kernel)),
    };
    let mut out: Vec<Proposal> = Vec::new();
    for (cause, _) in d.causes() {
        let mut subjects: Vec<&Subject> = d
            .subjects
            .iter()
            .filter(|s| s.by_cause.get(&cause).is_some_and(|t| t.ms > 0.0))
            .collect();
        subjects.sort_by(|a, b| ms(b, cause).total_cmp(&ms(a, cause)));
        let mut cards: Vec<Proposal> = subjects
            .into_iter()
            .flat_map(|s| {
                let mut v = kernel::cards(&ctx, cause, s);
                v.extend(servers::cards(&ctx, cause, s));
                v
            })
            .collect();
        cards.sort_by_key(|c| (c.gate.is_some(), c.scope));
        for c in cards {
            if !out.iter().any(|o| o.knob == c.knob && o.to == c.to) {
                out.push(c);
            }
        }
    }
    out
}

fn ms(s: &Subject, cause: Cause) -> f64 {
    s.by_cause.get(&cause).map_or(0.0, |t| t.ms)
}

/// A card without gate, treatment or outcome; the builders add those.
#[allow(clippy::too_many_arguments)]
fn card(
    cause: Cause,
    s: &Subject,
    change: String,
    knob: String,
    from: Option<String>,
    to: String,
    scope: Scope,
    tradeoff: String,
    source: &str,
) -> Proposal {
    Proposal {
        change,
        knob,
        from,
        to,
        scope,
        fidelity: Fidelity::Direction,
        tradeoff,
        source: source.to_string(),
        cause: cause.as_str().to_string(),
        subject: Some(s.label()),
        gate: None,
        treatment: None,
        outcome: None,
    }
}

impl Ctx<'_> {
    /// Why a knob does not apply here: a kernel older than `need`, or a
    /// knob file missing on this machine. None when it applies.
    fn gate(&self, knobs: &[&str], need: (u32, u32), what: &str) -> Option<String> {
        if let Some(k) = self.kernel.filter(|k| *k < need) {
            return Some(format!(
                "needs Linux {}.{} or later for {what}; the stalls were on {}.{}",
                need.0, need.1, k.0, k.1
            ));
        }
        if !self.m.probed {
            return Some("not checked on this machine".into());
        }
        let missing = knobs.iter().find(|k| !self.m.has(k))?;
        let elsewhere = if self.m.is_host(&self.d.host) {
            String::new()
        } else {
            format!(
                " (checked on {}, Linux {}; recorded on {})",
                self.m.host, self.m.kernel, self.d.host
            )
        };
        Some(format!("{missing} is not on this machine{elsewhere}"))
    }

    /// What a knob holds, when the recording is from this machine.
    fn now(&self, path: &str) -> Option<String> {
        self.m
            .is_host(&self.d.host)
            .then(|| self.m.value(path).map(str::to_string))
            .flatten()
    }

    /// The dirty data a subject's device can write back in about a second
    /// (its recorded rate), at least 4 MiB, under the dirty threshold:
    /// the backlog a sync may wait behind. Whole MiB.
    fn budget(&self, s: &Subject) -> u64 {
        let rate = s.place.as_ref().and_then(|p| p.writeback_mib_per_s);
        let thresh = self.d.dirty.thresh_bytes;
        let mut b = match (rate, thresh) {
            (Some(r), _) => (r * MIB as f64) as u64,
            (None, Some(t)) => t / 8,
            (None, None) => 16 * MIB,
        };
        if let Some(t) = thresh.filter(|t| b >= *t) {
            b = t / 2;
        }
        (b / MIB).max(4) * MIB
    }
}

/// "64 MiB", "1.5 GiB", "818 B": bytes for people.
pub fn human(bytes: u64) -> String {
    let units = [(1u64 << 30, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")];
    for (m, u) in units {
        if bytes >= m {
            let v = bytes as f64 / m as f64;
            return if (v - v.round()).abs() < 0.05 {
                format!("{} {u}", v.round())
            } else {
                format!("{v:.1} {u}")
            };
        }
    }
    format!("{bytes} B")
}
