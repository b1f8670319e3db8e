//! Applying a treatment for a B run, and putting everything back.
//!
//! Every change is first recorded in the lab's state file (after a
//! `Step::Trial` marker), with the value it replaces, and only then made,
//! so a trial killed with SIGKILL leaves a state from which the next trial
//! (`restore_left`) or `lab down` restores the machine. `Applied` restores
//! on `restore()`, after each B run, and on drop: an error, Ctrl-C or
//! SIGTERM (the session's stop flag ends the run, the trial returns, the
//! guard drops) and a panic (unwinding drops it).
//!
//! A knob set to its current value is applied like any other (recorded,
//! written, restored): that is the placebo.

use crate::cmd::advise::treatment::Setting;
use crate::cmd::lab::down::{sysctl_path, undo_step};
use crate::cmd::lab::guards::{sh, DirtyLimits};
use crate::cmd::lab::state::{LabState, Step};
use anyhow::Context;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The vm dirty limits: one of a bytes/ratio pair zeroes the other, so
/// they are saved and restored as the four together (`Step::Dirty`).
const DIRTY: [&str; 4] = [
    "vm.dirty_bytes",
    "vm.dirty_ratio",
    "vm.dirty_background_bytes",
    "vm.dirty_background_ratio",
];

/// The file whose original text restores `path` exactly. Writing a bdi's
/// `max_bytes` (`min_bytes`) sets its `max_ratio_fine` from the dirty
/// threshold of the moment and reading it back converts again, so the
/// bytes are not a faithful original; the fine ratio (parts per million,
/// kernel 6.2+) or else the ratio is.
pub fn restore_file(path: &Path) -> PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let ratio = match name {
        "max_bytes" => "max_ratio",
        "min_bytes" => "min_ratio",
        _ => return path.to_path_buf(),
    };
    let fine = path.with_file_name(format!("{ratio}_fine"));
    if fine.exists() {
        fine
    } else {
        path.with_file_name(ratio)
    }
}

/// The step that records what `setting` replaces, read now; `None` for a
/// setting that changes nothing on the machine (run arguments).
pub fn step_for(setting: &Setting, mount: &Path) -> anyhow::Result<Option<Step>> {
    let read = |p: &Path| -> anyhow::Result<String> {
        Ok(std::fs::read_to_string(p)
            .with_context(|| format!("reading {}", p.display()))?
            .trim()
            .to_string())
    };
    Ok(Some(match setting {
        Setting::Sysctl { name, .. } if DIRTY.contains(&name.as_str()) => Step::Dirty {
            original: DirtyLimits::read()?,
        },
        Setting::Sysctl { name, .. } => Step::Sysctl {
            name: name.clone(),
            original: read(&sysctl_path(name))?,
        },
        Setting::Sysfs { path, .. } => {
            let file = restore_file(path);
            Step::Sysfs {
                original: read(&file)?,
                path: file,
            }
        }
        Setting::MountOption { .. } => {
            let (device, options) = mount_of(mount)?;
            Step::Remount {
                device,
                mount: mount.to_path_buf(),
                options,
            }
        }
        Setting::RunArgs { .. } => return Ok(None),
    }))
}

/// The device and options `mount` is mounted with (/proc/self/mounts).
pub fn mount_of(mount: &Path) -> anyhow::Result<(String, String)> {
    let text = std::fs::read_to_string("/proc/self/mounts")?;
    let want = mount.to_string_lossy();
    text.lines()
        .rev()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() >= 4 && f[1] == want)
        .map(|f| (f[0].to_string(), f[3].to_string()))
        .ok_or_else(|| anyhow::anyhow!("{want} is not mounted"))
}

/// Makes the change (its step already recorded).
fn change(setting: &Setting, mount: &Path) -> anyhow::Result<()> {
    let write = |p: &Path, v: &str| {
        std::fs::write(p, v).with_context(|| format!("writing {v} to {}", p.display()))
    };
    match setting {
        Setting::Sysctl { name, value } => write(&sysctl_path(name), value),
        Setting::Sysfs { path, value } => write(path, value),
        Setting::MountOption { option } => {
            let m = mount.to_string_lossy();
            sh("mount", &["-o", &format!("remount,{option}"), &m])?;
            Ok(())
        }
        Setting::RunArgs { .. } => Ok(()),
    }
}

/// A treatment in force; restores on `restore()` or drop.
pub struct Applied {
    dir: PathBuf,
    done: bool,
}

/// Applies `settings` in order on the lab at `dir` whose filesystem is at
/// `mount`. A failure halfway restores what was applied.
pub fn apply(dir: &Path, settings: &[Setting], mount: &Path) -> anyhow::Result<Applied> {
    let mut st = load(dir)?;
    st.push(
        dir,
        Step::Trial {
            pid: std::process::id(),
        },
    )?;
    let guard = Applied {
        dir: dir.to_path_buf(),
        done: false,
    };
    for s in settings {
        if let Some(step) = step_for(s, mount)? {
            st.push(dir, step)?;
        }
        change(s, mount)?;
    }
    Ok(guard)
}

fn load(dir: &Path) -> anyhow::Result<LabState> {
    LabState::load(dir)?.ok_or_else(|| {
        anyhow::anyhow!("no lab at {}; run `stallscope lab up` first", dir.display())
    })
}

impl Applied {
    /// Puts everything back; an error names what is left for `lab down`.
    pub fn restore(mut self) -> anyhow::Result<()> {
        self.done = true;
        restore_left(&self.dir).map(|_| ())
    }
}

impl Drop for Applied {
    fn drop(&mut self) {
        if !self.done {
            if let Err(e) = restore_left(&self.dir) {
                eprintln!("stallscope: {e:#}");
            }
        }
    }
}

/// Undoes the steps after the last trial marker in reverse, removing each
/// from the state file once undone, then the marker. Returns how many were
/// undone (0: no trial's changes were left). A step that cannot be undone
/// stops it, left in the state for `lab down`.
pub fn restore_left(dir: &Path) -> anyhow::Result<usize> {
    let Some(mut st) = LabState::load(dir)? else {
        return Ok(0);
    };
    let Some(mark) = st
        .steps
        .iter()
        .rposition(|s| matches!(s, Step::Trial { .. }))
    else {
        return Ok(0);
    };
    let mut n = 0;
    while st.steps.len() > mark + 1 {
        let step = st.steps.last().cloned().expect("longer than the mark");
        undo_step(&step, false, &HashMap::new()).with_context(|| {
            format!(
                "could not put back {}; `stallscope lab down --dir {}` retries",
                step.describe(),
                dir.display()
            )
        })?;
        st.steps.pop();
        st.save(dir)?;
        n += 1;
    }
    st.steps.pop();
    st.save(dir)?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab(dir: &Path, steps: Vec<Step>) {
        LabState {
            version: 1,
            steps,
            ..LabState::default()
        }
        .save(dir)
        .unwrap();
    }

    #[test]
    fn bdi_bytes_are_restored_through_their_ratio() {
        let t = tempfile::tempdir().unwrap();
        let bdi = t.path();
        std::fs::write(bdi.join("max_ratio"), "100").unwrap();
        assert_eq!(restore_file(&bdi.join("max_bytes")), bdi.join("max_ratio"));
        std::fs::write(bdi.join("max_ratio_fine"), "1000000").unwrap();
        assert_eq!(
            restore_file(&bdi.join("max_bytes")),
            bdi.join("max_ratio_fine")
        );
        assert_eq!(restore_file(&bdi.join("min_bytes")), bdi.join("min_ratio"));
        assert_eq!(
            restore_file(&bdi.join("strict_limit")),
            bdi.join("strict_limit")
        );
    }

    /// A sysfs knob (a plain file here): recorded before the change,
    /// restored by `restore()`, the state left as the lab had it.
    #[test]
    fn a_setting_is_recorded_first_and_put_back() {
        let t = tempfile::tempdir().unwrap();
        let knob = t.path().join("strict_limit");
        std::fs::write(&knob, "0\n").unwrap();
        let before = vec![Step::Image {
            path: t.path().join("x.img"),
        }];
        lab(t.path(), before.clone());
        let set = [Setting::Sysfs {
            path: knob.clone(),
            value: "1".into(),
        }];
        let a = apply(t.path(), &set, Path::new("/")).unwrap();
        assert_eq!(std::fs::read_to_string(&knob).unwrap(), "1");
        let st = LabState::load(t.path()).unwrap().unwrap();
        assert_eq!(st.steps.len(), 3, "{:?}", st.steps);
        assert!(matches!(st.steps[1], Step::Trial { .. }));
        assert_eq!(
            st.steps[2],
            Step::Sysfs {
                path: knob.clone(),
                original: "0".into()
            }
        );
        a.restore().unwrap();
        assert_eq!(std::fs::read_to_string(&knob).unwrap(), "0");
        assert_eq!(LabState::load(t.path()).unwrap().unwrap().steps, before);
    }

    /// Dropped without restore (an error, Ctrl-C, a panic): put back too;
    /// the placebo (the value it has) goes through the same path.
    #[test]
    fn a_dropped_or_panicking_trial_puts_back() {
        let t = tempfile::tempdir().unwrap();
        let knob = t.path().join("max_ratio");
        std::fs::write(&knob, "100").unwrap();
        lab(t.path(), vec![]);
        let dir = t.path().to_path_buf();
        let k = knob.clone();
        let r = std::panic::catch_unwind(move || {
            let set = [Setting::Sysfs {
                path: k.clone(),
                value: "5".into(),
            }];
            let _a = apply(&dir, &set, Path::new("/")).unwrap();
            assert_eq!(std::fs::read_to_string(&k).unwrap(), "5");
            panic!("mid-run");
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read_to_string(&knob).unwrap(), "100");
        assert!(LabState::load(t.path()).unwrap().unwrap().steps.is_empty());
        let placebo = [Setting::Sysfs {
            path: knob.clone(),
            value: "100".into(),
        }];
        drop(apply(t.path(), &placebo, Path::new("/")).unwrap());
        assert_eq!(std::fs::read_to_string(&knob).unwrap(), "100");
    }

    /// A trial killed with SIGKILL left its steps: the next one (or `lab
    /// down`) undoes exactly those, not the lab's own.
    #[test]
    fn a_killed_trials_changes_are_undone_and_the_labs_kept() {
        let t = tempfile::tempdir().unwrap();
        let (k1, k2) = (t.path().join("a"), t.path().join("b"));
        std::fs::write(&k1, "changed-by-lab").unwrap();
        std::fs::write(&k2, "changed-by-trial").unwrap();
        let labs = Step::Sysfs {
            path: k1.clone(),
            original: "lab-original".into(),
        };
        lab(
            t.path(),
            vec![
                labs.clone(),
                Step::Trial { pid: 1 },
                Step::Sysfs {
                    path: k2.clone(),
                    original: "trial-original".into(),
                },
            ],
        );
        assert_eq!(restore_left(t.path()).unwrap(), 1);
        assert_eq!(std::fs::read_to_string(&k2).unwrap(), "trial-original");
        assert_eq!(std::fs::read_to_string(&k1).unwrap(), "changed-by-lab");
        assert_eq!(LabState::load(t.path()).unwrap().unwrap().steps, vec![labs]);
        assert_eq!(restore_left(t.path()).unwrap(), 0, "nothing left");
    }

    #[test]
    fn run_arguments_change_nothing_on_the_machine() {
        let s = Setting::RunArgs {
            args: vec!["--mode".into(), "direct".into()],
        };
        assert_eq!(step_for(&s, Path::new("/")).unwrap(), None);
        let e = apply(Path::new("/nonexistent-lab"), &[s], Path::new("/"));
        assert!(e.err().unwrap().to_string().contains("no lab at"));
    }
}
