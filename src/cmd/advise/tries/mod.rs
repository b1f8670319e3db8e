//! `advise --try`: the cards the lab can apply, tried one after the other
//! by the trial engine (`trial::try_charted`) on a lab shaped like the
//! recording, against the recorded workload of our writers; each tried
//! card becomes `verified` with its outcome.
//!
//! `pick` which cards (and their treatments aimed at the lab's device),
//! `shape` whether the lab is shaped like the recording and the `lab up`
//! command that makes one, `workload` the recorded configuration as `run`
//! options. Everything is checked before the first run: the cards, the
//! lab's shape, root.

pub mod pick;
pub mod shape;
pub mod workload;

use super::trial::{progress, svg, try_charted, TrialOptions, WithArgs, Workload, MIN_PAIRS};
use crate::analysis::advice::card::Proposal;
use crate::analysis::advice::diagnosis::{Diagnosis, Stalled, Subject};
use crate::base::error::UsageError;
use crate::cmd::lab::cap::{cap_words, lab_cap};
use crate::cmd::lab::down::is_mountpoint;
use crate::cmd::lab::guards::DirtyLimits;
use crate::cmd::lab::state::LabState;
use crate::config::Config;
use crate::source::proc::{resolve_device, ProcRoot};
use serde::Serialize;
use shape::{LabFs, LabView, Wanted};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How `--try` runs.
#[derive(Clone, Debug)]
pub struct TryOptions {
    /// `--card N`: only these (numbered from 1 as the text numbers them).
    pub cards: Vec<usize>,
    /// `--svg FILE`: each tried card's before/after chart (`chart_path`).
    pub svg: Option<PathBuf>,
    /// The trial's options; its `target` picks the lab's filesystem.
    pub trial: TrialOptions,
    /// The command line's `run` option parser, for a write-path card.
    pub with_args: WithArgs,
}

/// What `--try` did, for the outputs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TryReport {
    /// Where the cards were tried, in words.
    pub lab: Option<String>,
    /// The cards tried, by number.
    pub tried: Vec<usize>,
    pub not_tried: Vec<NotTried>,
    /// Why nothing was tried, when nothing was; why a server's cards were
    /// not. One line each.
    pub notes: Vec<String>,
    /// Stopped by Ctrl-C or SIGTERM; the cards after stayed untried.
    pub interrupted: bool,
    /// `--svg`: the before/after charts written, by card.
    pub charts: Vec<Chart>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Chart {
    pub card: usize,
    pub path: PathBuf,
}

/// Where card `n`'s chart goes: `svg` itself when one card is tried,
/// else `svg` with `-cardN` before its extension (`cl.svg` → `cl-card2.svg`).
pub fn chart_path(svg: &Path, n: usize, several: bool) -> PathBuf {
    if !several {
        return svg.to_path_buf();
    }
    let stem = svg
        .file_stem()
        .map_or_else(|| "chart".to_string(), |s| s.to_string_lossy().into_owned());
    let name = match svg.extension() {
        Some(e) => format!("{stem}-card{n}.{}", e.to_string_lossy()),
        None => format!("{stem}-card{n}"),
    };
    svg.with_file_name(name)
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NotTried {
    pub card: usize,
    pub why: String,
}

/// `--pairs` below the minimum is bad input, said before anything is read.
pub fn check_pairs(pairs: usize) -> Result<(), UsageError> {
    if pairs < MIN_PAIRS {
        return Err(UsageError::new(format!(
            "--pairs {pairs} is too few (at least {MIN_PAIRS}: fewer cannot bound a median's interval)"
        )));
    }
    Ok(())
}

/// Tries the cards of `d` (`cards`, as `catalog::propose` ranked them) on
/// the lab, `recorded` being the recording's configuration. A card tried
/// is `verified`; the report says what was not and why. Bad input (a card
/// that cannot be tried, no lab or one of another shape, not root) is an
/// error before any run.
pub fn try_cards(
    recorded: &Config,
    d: &Diagnosis,
    cards: &mut [Proposal],
    o: &TryOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<TryReport> {
    check_pairs(o.trial.pairs)?;
    if let Some(p) = &o.svg {
        crate::cmd::outfile::check_dir(p)?;
    }
    let mut report = TryReport::default();
    let servers: Vec<String> = d
        .subjects
        .iter()
        .filter_map(|s| match &s.who {
            Stalled::Server { comm, pid, .. } => Some(format!("{comm} (pid {pid})")),
            Stalled::Writers { .. } => None,
        })
        .collect();
    let writers = d
        .subjects
        .iter()
        .any(|s| matches!(s.who, Stalled::Writers { .. }));
    if !writers {
        report.notes.push(format!(
            "nothing tried: the recording is of an observed server, {}: {}",
            servers.join(", "),
            pick::SERVER_NOTE
        ));
        return Ok(report);
    }
    if !servers.is_empty() {
        report.notes.push(format!(
            "the cards for {} are not tried: {}",
            servers.join(", "),
            pick::SERVER_NOTE
        ));
    }
    let chosen = pick::select(cards, d, &o.cards).map_err(UsageError::new)?;
    if chosen.is_empty() {
        report.notes.push(
            "nothing tried: no card for our writers carries a change the lab can apply here".into(),
        );
        return Ok(report);
    }
    let subjects: Vec<&Subject> = chosen.iter().map(|(_, s)| *s).collect();
    let want = shape::wanted(d, &subjects, recorded.disk_budget.0);
    let Some(lab) = read_lab(&o.trial)? else {
        return Err(misshapen(&want, &o.trial, false, &[]).into());
    };
    let target = o.trial.target.as_deref().map(canonical);
    let mut plan: Vec<(usize, &Subject, LabFs)> = Vec::new();
    for (n, s) in &chosen {
        let fs = s.place.as_ref().map_or("", |p| p.fs.as_str());
        match shape::choose(&want, fs, &lab, target.as_deref()) {
            Ok(m) => plan.push((*n, *s, m.clone())),
            Err(wrong) => return Err(misshapen(&want, &o.trial, true, &wrong).into()),
        }
    }
    crate::cmd::lab::checks::need_root("advise --try")?;
    report.lab = Some(lab_words(&plan, &lab, &want));
    run_plan(recorded, cards, &plan, o, stop, progress, &mut report);
    Ok(report)
}

/// Each planned card's trial, one after the other, and its chart.
fn run_plan(
    recorded: &Config,
    cards: &mut [Proposal],
    plan: &[(usize, &Subject, LabFs)],
    o: &TryOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
    report: &mut TryReport,
) {
    let runs = 2 + 2 * o.trial.pairs as u32;
    let numbers: Vec<String> = plan.iter().map(|p| p.0.to_string()).collect();
    eprintln!(
        "stallscope: trying card{} {}: each an A/A pair and {} A/B pairs",
        if plan.len() == 1 { "" } else { "s" },
        numbers.join(", "),
        o.trial.pairs
    );
    let mut per_card: Option<Duration> = o.trial.run_secs.map(|r| r * runs);
    for (i, (n, s, m)) in plan.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            report.interrupted = true;
            break;
        }
        let card = &cards[n - 1];
        let config = workload::config_of(recorded, s);
        let w = Workload {
            args: workload::run_args(&config),
            config,
            with_args: Some(o.with_args),
        };
        let treatment = pick::aimed_at_lab(card.treatment.as_ref().expect("picked with one"));
        let t = TrialOptions {
            target: Some(m.mount.clone()),
            ..o.trial.clone()
        };
        let left = plan.len() - i - 1;
        let after = match per_card {
            Some(d) if left > 0 => format!(", then ~{}", progress::short(d * left as u32)),
            _ => String::new(),
        };
        let head = format!("card {n} ({}/{}{after}) ", i + 1, plan.len());
        let started = Instant::now();
        let r = try_charted(&w, &treatment, &t, stop, &mut |l| {
            progress(&format!("{head}{l}"))
        });
        match r {
            Ok(c) => {
                if let Some(p) = &o.svg {
                    let path = chart_path(p, *n, plan.len() > 1);
                    match svg::write(&path, &c.outcome, &c.treatment, &c.a, &c.b) {
                        Ok(()) => report.charts.push(Chart { card: *n, path }),
                        Err(e) => report.notes.push(format!("card {n}'s chart: {e:#}")),
                    }
                }
                cards[n - 1].verify(c.outcome);
                report.tried.push(*n);
                per_card = Some(started.elapsed());
            }
            Err(_) if stop.load(Ordering::Relaxed) => {
                report.interrupted = true;
                break;
            }
            Err(e) => report.not_tried.push(NotTried {
                card: *n,
                why: format!("the trial failed: {e:#}"),
            }),
        }
    }
}

/// The lab as it is now, None when there is none at `o.lab_dir`.
fn read_lab(o: &TrialOptions) -> anyhow::Result<Option<LabView>> {
    let Some(st) = LabState::load(&o.lab_dir)? else {
        return Ok(None);
    };
    let mut mounts = Vec::new();
    for (fs, mount, _) in st.mounts() {
        if !is_mountpoint(&mount) {
            continue;
        }
        let Ok(dev) = resolve_device(&ProcRoot::default(), &mount) else {
            continue;
        };
        mounts.push(LabFs {
            fs,
            cap: lab_cap(&st, dev.major, dev.minor),
            mount: canonical(&mount),
        });
    }
    Ok(Some(LabView {
        dir: o.lab_dir.clone(),
        mounts,
        dirty: DirtyLimits::read()?,
    }))
}

fn canonical(p: &std::path::Path) -> std::path::PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// No lab, or one of another shape: what is wrong and the command that
/// makes one shaped like the recording.
fn misshapen(w: &Wanted, o: &TrialOptions, up: bool, wrong: &[String]) -> UsageError {
    let cmd = shape::lab_up_command(w, &o.lab_dir, up);
    let dir = o.lab_dir.display();
    UsageError::new(if up {
        format!(
            "the lab at {dir} is not shaped like the recording: {}. Make one that is (as root):\n  {cmd}",
            wrong.join("; ")
        )
    } else {
        format!("no lab at {dir}; make one shaped like the recording (as root):\n  {cmd}")
    })
}

/// "xfs at /var/tmp/stallscope-lab/mnt/xfs, capped at 20MiB/s, ...".
fn lab_words(plan: &[(usize, &Subject, LabFs)], lab: &LabView, w: &Wanted) -> String {
    let mut seen: Vec<&LabFs> = Vec::new();
    for (_, _, m) in plan {
        if !seen.contains(&m) {
            seen.push(m);
        }
    }
    let fs: Vec<String> = seen
        .iter()
        .map(|m| format!("{} at {}, {}", m.fs, m.mount.display(), cap_words(m.cap)))
        .collect();
    let dirty = {
        let d = &lab.dirty;
        let one = |b: u64, r: u64, name: &str| {
            if b > 0 {
                format!("vm.{name}_bytes {}", crate::base::units::ByteSize(b))
            } else {
                format!("vm.{name}_ratio {r}")
            }
        };
        format!(
            "; {}, {}",
            one(d.dirty_bytes, d.dirty_ratio, "dirty"),
            one(d.background_bytes, d.background_ratio, "dirty_background")
        )
    };
    let rate = w.rate_mib.map_or(String::new(), |r| {
        format!(" (recorded writeback {r:.1} MiB/s)")
    });
    format!("{}{rate}{dirty}", fs.join(", "))
}

/// The report as text, after the cards: where they were tried, then the
/// notes, one line each (wrapped at 80 columns).
pub fn render_text(r: &TryReport, pairs: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    if let Some(l) = &r.lab {
        let tried: Vec<String> = r.tried.iter().map(|n| n.to_string()).collect();
        let what = match tried.len() {
            0 => "no card tried".to_string(),
            1 => format!("card {}", tried[0]),
            _ => format!("cards {}", tried.join(", ")),
        };
        lines.push(format!(
            "--try: {what} in the lab ({pairs} A/B pairs after an A/A pair each) on {l}"
        ));
    }
    lines.extend(r.notes.iter().map(|n| format!("--try: {n}")));
    lines.extend(r.charts.iter().map(|c| {
        format!(
            "--try: card {}'s before/after chart: {}",
            c.card,
            c.path.display()
        )
    }));
    lines.extend(
        r.not_tried
            .iter()
            .map(|n| format!("--try: card {} not tried: {}", n.card, n.why)),
    );
    if r.interrupted {
        lines.push("--try: interrupted; the cards after the last tried were not tried, and everything the trials changed is back".into());
    }
    if lines.is_empty() {
        return String::new();
    }
    let body: Vec<String> = lines
        .iter()
        .map(|l| crate::analysis::advice::text::wrap(l, 2))
        .collect();
    format!("\n{}\n", body.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_chart_is_the_file_named_several_are_numbered_by_card() {
        let p = Path::new("/tmp/out/cl.svg");
        assert_eq!(chart_path(p, 2, false), p);
        assert_eq!(chart_path(p, 2, true), Path::new("/tmp/out/cl-card2.svg"));
        assert_eq!(chart_path(Path::new("cl"), 3, true), Path::new("cl-card3"));
    }

    #[test]
    fn the_text_names_each_chart_written() {
        let r = TryReport {
            lab: Some("xfs at /lab".into()),
            tried: vec![1, 2],
            charts: vec![Chart {
                card: 2,
                path: "cl-card2.svg".into(),
            }],
            notes: vec!["card 1's chart: /nowhere/cl-card1.svg: No such file".into()],
            ..TryReport::default()
        };
        let t = render_text(&r, 6);
        assert!(
            t.contains("card 2's before/after chart: cl-card2.svg"),
            "{t}"
        );
        assert!(t.contains("card 1's chart: /nowhere"), "{t}");
    }
}
