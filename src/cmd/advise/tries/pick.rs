//! Which cards `--try` tries, and their treatments aimed at the lab's
//! device. Pure.
//!
//! A card is tried when it carries a treatment, applies on this machine
//! (no gate) and is for our writers: the lab runs our writers, so a
//! server's own settings, and any card for an observed server, stay
//! `direction` (imitating a server's write pattern is not implemented).

use crate::analysis::advice::card::{Fidelity, Proposal};
use crate::analysis::advice::diagnosis::{Diagnosis, Stalled, Subject};
use crate::analysis::advice::treatment::{Setting, Treatment};
use std::path::PathBuf;

/// Why a server's cards are not tried, in one line.
pub const SERVER_NOTE: &str =
    "imitating a server's write pattern is not implemented, so its cards stay `direction`";

/// The writers' subject card `c` is for, or why it cannot be tried.
pub fn triable<'a>(c: &Proposal, d: &'a Diagnosis) -> Result<&'a Subject, String> {
    let subject = d
        .subjects
        .iter()
        .find(|s| c.subject.as_deref() == Some(s.label().as_str()));
    if let Some(Subject {
        who: Stalled::Server { comm, pid, .. },
        ..
    }) = subject
    {
        return Err(format!("it is for {comm} (pid {pid}): {SERVER_NOTE}"));
    }
    if c.fidelity == Fidelity::NotTestable {
        return Err("it is not-testable: only the real hardware can tell".into());
    }
    if c.treatment.is_none() {
        return Err("it carries nothing for the lab to apply".into());
    }
    if let Some(g) = &c.gate {
        return Err(format!("it does not apply here: {g}"));
    }
    subject.ok_or_else(|| "its writers are not in the recording".into())
}

/// The cards to try, numbered from 1 as the text numbers them, each with
/// its writers: `wanted` (`--card`), every one of them or an error naming
/// the first that cannot be; else every triable card.
pub fn select<'a>(
    cards: &[Proposal],
    d: &'a Diagnosis,
    wanted: &[usize],
) -> Result<Vec<(usize, &'a Subject)>, String> {
    if wanted.is_empty() {
        return Ok(cards
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((i + 1, triable(c, d).ok()?)))
            .collect());
    }
    let mut out = Vec::new();
    for &n in wanted {
        let c = n
            .checked_sub(1)
            .and_then(|i| cards.get(i))
            .ok_or_else(|| format!("--card {n}: there are {} cards", cards.len()))?;
        let s = triable(c, d).map_err(|why| format!("--card {n} cannot be tried: {why}"))?;
        if !out.iter().any(|(m, _)| *m == n) {
            out.push((n, s));
        }
    }
    Ok(out)
}

/// `t` with the recorded device's bdi in sysfs paths replaced by `{bdi}`,
/// which the trial fills in with the lab device's.
pub fn aimed_at_lab(t: &Treatment) -> Treatment {
    const BDI: &str = "/sys/class/bdi/";
    let settings = t
        .settings
        .iter()
        .map(|s| match s {
            Setting::Sysfs { path, value } => {
                let p = path.to_string_lossy();
                let path = match p.strip_prefix(BDI).and_then(|r| r.split_once('/')) {
                    Some((_, knob)) => PathBuf::from(format!("{BDI}{{bdi}}/{knob}")),
                    None => path.clone(),
                };
                Setting::Sysfs {
                    path,
                    value: value.clone(),
                }
            }
            other => other.clone(),
        })
        .collect();
    Treatment { settings }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::advice::card::Scope;
    use crate::analysis::advice::diagnosis::{Place, Server};
    use crate::config::Mode;

    fn subject(who: Stalled) -> Subject {
        Subject {
            who,
            place: Some(Place {
                path: "/lab/xfs".into(),
                fs: "xfs".into(),
                device: Some("7:1".into()),
                ..Place::default()
            }),
            by_cause: Default::default(),
            bytes: None,
            journal_waits: 0,
        }
    }

    fn writers() -> Stalled {
        Stalled::Writers {
            mode: Mode::Mmap,
            threads: 32,
            sync: None,
            commit_interval_s: None,
        }
    }

    fn card(s: &Subject, treatment: bool) -> Proposal {
        Proposal {
            change: "x".into(),
            knob: "k".into(),
            from: None,
            to: "1".into(),
            scope: Scope::Device,
            fidelity: Fidelity::Direction,
            tradeoff: String::new(),
            source: String::new(),
            cause: "sync".into(),
            subject: Some(s.label()),
            gate: None,
            treatment: treatment.then(|| Treatment {
                settings: vec![Setting::Sysfs {
                    path: "/sys/class/bdi/7:1/max_bytes".into(),
                    value: "1".into(),
                }],
            }),
            outcome: None,
        }
    }

    #[test]
    fn only_our_writers_cards_with_a_treatment_that_applies_are_tried() {
        let w = subject(writers());
        let pg = subject(Stalled::Server {
            pid: 42,
            comm: "postgres".into(),
            kind: Server::Postgres,
        });
        let d = Diagnosis {
            subjects: vec![w.clone(), pg.clone()],
            ..Diagnosis::default()
        };
        let mut gated = card(&w, true);
        gated.gate = Some("needs Linux 6.2".into());
        let mut hw = card(&w, false);
        hw.fidelity = Fidelity::NotTestable;
        let cards = vec![
            card(&w, true),
            card(&pg, true),
            gated,
            hw,
            card(&w, false),
            card(&w, true),
        ];
        let all: Vec<usize> = select(&cards, &d, &[])
            .unwrap()
            .iter()
            .map(|x| x.0)
            .collect();
        assert_eq!(all, [1, 6]);
        let e = select(&cards, &d, &[2]).unwrap_err();
        assert!(
            e.contains("postgres (pid 42)") && e.contains(SERVER_NOTE),
            "{e}"
        );
        assert!(select(&cards, &d, &[3])
            .unwrap_err()
            .contains("needs Linux 6.2"));
        assert!(select(&cards, &d, &[4])
            .unwrap_err()
            .contains("not-testable"));
        assert!(select(&cards, &d, &[5]).unwrap_err().contains("nothing"));
        assert!(select(&cards, &d, &[7])
            .unwrap_err()
            .contains("there are 6"));
        assert!(select(&cards, &d, &[0]).is_err());
        let one = select(&cards, &d, &[6, 6]).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].1, &w);
    }

    #[test]
    fn the_recorded_device_becomes_the_labs() {
        let t = Treatment {
            settings: vec![
                Setting::Sysfs {
                    path: "/sys/class/bdi/8:16/max_bytes".into(),
                    value: "20971520".into(),
                },
                Setting::Sysfs {
                    path: "/sys/block/sda/queue/x".into(),
                    value: "1".into(),
                },
                Setting::Sysctl {
                    name: "vm.dirty_bytes".into(),
                    value: "1".into(),
                },
            ],
        };
        let a = aimed_at_lab(&t);
        assert_eq!(
            a.settings[0],
            Setting::Sysfs {
                path: "/sys/class/bdi/{bdi}/max_bytes".into(),
                value: "20971520".into()
            }
        );
        assert_eq!(a.settings[1..], t.settings[1..]);
    }
}
