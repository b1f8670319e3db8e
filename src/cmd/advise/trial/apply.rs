//! Applying a treatment for a B run, and putting everything back.
//!
//! Every change is first recorded in the lab's state file (after a
//! `Step::Trial` marker naming this process), with the value it replaces,
//! and only then made; a sysctl or sysfs knob is held in the machine's
//! registry (`crate::knob`) in this process's name, so putting it back
//! writes what is in force below it (the lab's value, or another lab's),
//! and a trial killed with SIGKILL is put back by the next stallscope run
//! as root. `Applied` restores on `restore()`, after each B run, and on
//! drop: an error, Ctrl-C or SIGTERM (the session's stop flag ends the
//! run, the trial returns, the guard drops) and a panic (unwinding drops
//! it). The next trial (`restore_left`) or `lab down` cleans up a dead
//! trial's steps; a trial still running keeps its own.
//!
//! A knob set to its current value is applied like any other (recorded,
//! written, restored): that is the placebo.

use crate::analysis::advice::treatment::Setting;
use crate::base::error::UsageError;
use crate::cmd::lab::down::{sysctl_path, undo_step};
use crate::cmd::lab::guards::sh;
use crate::cmd::lab::state::{trial_owner, Claimant, LabState, Step};
use crate::knob::{DirtyLimits, Knob, Owner, Registry, Value};
use anyhow::Context;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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

/// Whether `path` is the v1 blkio throttle file the lab caps a device
/// with: one line per device, so it is a knob per device, not a file.
pub fn is_blkio_cap(path: &Path) -> bool {
    path == Path::new(crate::knob::BLKIO_WRITE_BPS)
}

/// `MAJ:MIN BYTES` as the throttle file takes it (bytes/s, also as
/// `40MiB`; 0: no cap).
pub fn blkio_cap_value(value: &str) -> anyhow::Result<(u32, u32, u64)> {
    let bad = || {
        anyhow::anyhow!(
            "blkio cap '{value}': want MAJ:MIN BYTES_PER_S (7:0 41943040, or 7:0 40MiB)"
        )
    };
    let (dev, rate) = value.trim().split_once(' ').ok_or_else(bad)?;
    let (a, b) = dev.split_once(':').ok_or_else(bad)?;
    let rate: crate::base::units::ByteSize = rate.trim().parse().map_err(|_| bad())?;
    Ok((
        a.parse().map_err(|_| bad())?,
        b.parse().map_err(|_| bad())?,
        rate.0,
    ))
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
        // The vm dirty limits: one of a bytes/ratio pair zeroes the other,
        // so they are saved and restored as the four together.
        Setting::Sysctl { name, .. } if Knob::sysctl(name) == Knob::dirty() => Step::Dirty {
            original: DirtyLimits::read()?,
            registered: true,
        },
        Setting::Sysctl { name, .. } => Step::Sysctl {
            name: name.clone(),
            original: read(&sysctl_path(name))?,
            registered: true,
        },
        Setting::Sysfs { path, value } if is_blkio_cap(path) => {
            let (major, minor, _) = blkio_cap_value(value)?;
            let now = crate::cmd::lab::guards::blkio_cap(major, minor)?;
            Step::Sysfs {
                original: format!("{major}:{minor} {now}"),
                path: path.clone(),
                registered: true,
            }
        }
        Setting::Sysfs { path, .. } => {
            let file = restore_file(path);
            Step::Sysfs {
                original: read(&file)?,
                path: file,
                registered: true,
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

/// The knob `setting` changes and the value it sets there, for the
/// registry; None for what is not a knob (a remount, run arguments).
pub fn knob_value(setting: &Setting) -> anyhow::Result<Option<(Knob, Value)>> {
    Ok(Some(match setting {
        Setting::Sysctl { name, value } => match Knob::sysctl(name) {
            k @ Knob::Dirty { .. } => {
                let n: u64 = value
                    .trim()
                    .parse()
                    .with_context(|| format!("{name}={value}: not a number"))?;
                let d = DirtyLimits::read()?.with(name, n);
                (k, Value::Dirty(d.expect("one of the dirty limits")))
            }
            k => (k, Value::Text(value.clone())),
        },
        Setting::Sysfs { path, value } if is_blkio_cap(path) => {
            let (major, minor, bps) = blkio_cap_value(value)?;
            (Knob::blkio(major, minor), Value::Bps(bps))
        }
        Setting::Sysfs { path, value } => {
            let file = restore_file(path);
            let v = if file == *path {
                Value::Text(value.clone())
            } else {
                Value::Via {
                    file: path.clone(),
                    text: value.clone(),
                }
            };
            (Knob::file(&file), v)
        }
        Setting::MountOption { .. } | Setting::RunArgs { .. } => return Ok(None),
    }))
}

/// Makes a change that is not a knob (its step already recorded).
fn change(setting: &Setting, mount: &Path) -> anyhow::Result<()> {
    if let Setting::MountOption { option } = setting {
        let m = mount.to_string_lossy();
        sh("mount", &["-o", &format!("remount,{option}"), &m])?;
    }
    Ok(())
}

/// A treatment in force; restores on `restore()` or drop.
pub struct Applied {
    dir: PathBuf,
    knobs: Registry,
    done: bool,
}

/// Applies `settings` in order on the lab at `dir` whose filesystem is at
/// `mount`, the knobs held in `knobs`. A failure halfway restores what was
/// applied.
pub fn apply(
    dir: &Path,
    settings: &[Setting],
    mount: &Path,
    knobs: &Registry,
) -> anyhow::Result<Applied> {
    let mut st = load(dir)?;
    let by = Claimant::trial(knobs, dir);
    let Owner::Process { pid, start } = by.owner else {
        unreachable!("a trial is a process")
    };
    let start = Some(start);
    st.push(dir, Step::Trial { pid, start })?;
    let guard = Applied {
        dir: dir.to_path_buf(),
        knobs: knobs.clone(),
        done: false,
    };
    for s in settings {
        match (step_for(s, mount)?, knob_value(s)?) {
            (Some(step), Some(set)) => by.hold(&mut st, dir, step, &[set])?,
            (step, _) => {
                if let Some(step) = step {
                    st.push(dir, step)?;
                }
                change(s, mount)?;
            }
        }
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
        restore_left(&self.dir, &self.knobs).map(|_| ())
    }
}

impl Drop for Applied {
    fn drop(&mut self) {
        if !self.done {
            if let Err(e) = restore_left(&self.dir, &self.knobs) {
                eprintln!("stallscope: {e:#}");
            }
        }
    }
}

/// Undoes the steps after the last trial marker in reverse, removing each
/// from the state file once undone, then the marker: this process's own,
/// or a dead trial's (its knobs released in its name: what is in force
/// below comes back). Returns how many were undone (0: no trial's changes
/// were left). A step that cannot be undone stops it, left in the state
/// for `lab down`. Another trial still running keeps its changes: an
/// error says so.
pub fn restore_left(dir: &Path, knobs: &Registry) -> anyhow::Result<usize> {
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
    let Step::Trial { pid, start } = st.steps[mark] else {
        unreachable!("found as a marker")
    };
    let owner = trial_owner(pid, start);
    let mine = pid == std::process::id() && start.is_none_or(|_| owner == Owner::this_process());
    if !mine && running(pid, start) {
        return Err(UsageError::new(format!(
            "a trial (pid {pid}) is running on the lab at {}; its changes stay in force. Wait for it to end, or stop it, then try again",
            dir.display()
        ))
        .into());
    }
    let mut n = 0;
    while st.steps.len() > mark + 1 {
        let step = st.steps.last().cloned().expect("longer than the mark");
        undo_step(&step, false, &HashMap::new(), (knobs, &owner)).with_context(|| {
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

/// Whether the trial a marker names still runs (an older build's marker
/// has no start time: by its pid alone).
fn running(pid: u32, start: Option<u64>) -> bool {
    match start {
        Some(_) => trial_owner(pid, start).alive(),
        None => crate::knob::owner::entry(Path::new("/proc"), pid).is_some(),
    }
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

    /// A registry of the test's own.
    fn knobs(t: &tempfile::TempDir) -> Registry {
        Registry::at(t.path().join("run"))
    }

    /// A sysfs knob (a plain file here): recorded before the change, held
    /// in this process's name, restored by `restore()`, the state left as
    /// the lab had it.
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
        let reg = knobs(&t);
        let a = apply(t.path(), &set, Path::new("/"), &reg).unwrap();
        assert_eq!(std::fs::read_to_string(&knob).unwrap(), "1");
        let st = LabState::load(t.path()).unwrap().unwrap();
        assert_eq!(st.steps.len(), 3, "{:?}", st.steps);
        assert!(
            matches!(st.steps[1], Step::Trial { pid, start: Some(_) } if pid == std::process::id())
        );
        assert_eq!(
            st.steps[2],
            Step::Sysfs {
                path: knob.clone(),
                original: "0".into(),
                registered: true,
            }
        );
        let held = reg.entries().unwrap();
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].holds[0].owner, Owner::this_process());
        a.restore().unwrap();
        assert_eq!(std::fs::read_to_string(&knob).unwrap(), "0");
        assert_eq!(LabState::load(t.path()).unwrap().unwrap().steps, before);
        assert!(reg.entries().unwrap().is_empty());
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
        let reg = knobs(&t);
        let r2 = reg.clone();
        let r = std::panic::catch_unwind(move || {
            let set = [Setting::Sysfs {
                path: k.clone(),
                value: "5".into(),
            }];
            let _a = apply(&dir, &set, Path::new("/"), &r2).unwrap();
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
        drop(apply(t.path(), &placebo, Path::new("/"), &reg).unwrap());
        assert_eq!(std::fs::read_to_string(&knob).unwrap(), "100");
    }

    /// A child's pid and start time, and the child.
    fn running_child() -> (u32, u64, std::process::Child) {
        let c = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let Some(Owner::Process { pid, start }) = Owner::process(c.id()) else {
            panic!("no child")
        };
        (pid, start, c)
    }

    /// A trial of an older build killed with SIGKILL left its steps (no
    /// holds): the next one (or `lab down`) undoes exactly those, by
    /// their originals, not the lab's own.
    #[test]
    fn a_killed_trials_changes_are_undone_and_the_labs_kept() {
        let t = tempfile::tempdir().unwrap();
        let (k1, k2) = (t.path().join("a"), t.path().join("b"));
        std::fs::write(&k1, "changed-by-lab").unwrap();
        std::fs::write(&k2, "changed-by-trial").unwrap();
        let labs = Step::Sysfs {
            path: k1.clone(),
            original: "lab-original".into(),
            registered: false,
        };
        let (pid, _, mut c) = running_child();
        c.kill().unwrap();
        c.wait().unwrap();
        lab(
            t.path(),
            vec![
                labs.clone(),
                Step::Trial { pid, start: None },
                Step::Sysfs {
                    path: k2.clone(),
                    original: "trial-original".into(),
                    registered: false,
                },
            ],
        );
        let reg = knobs(&t);
        assert_eq!(restore_left(t.path(), &reg).unwrap(), 1);
        assert_eq!(std::fs::read_to_string(&k2).unwrap(), "trial-original");
        assert_eq!(std::fs::read_to_string(&k1).unwrap(), "changed-by-lab");
        assert_eq!(LabState::load(t.path()).unwrap().unwrap().steps, vec![labs]);
        assert_eq!(restore_left(t.path(), &reg).unwrap(), 0, "nothing left");
    }

    /// Another trial's changes stay while it runs (a second trial does not
    /// undo its B settings); once it is dead they go, and what the lab
    /// holds below them comes back, not the knob's original.
    #[test]
    fn a_running_trials_changes_stay_and_a_dead_ones_go() {
        let t = tempfile::tempdir().unwrap();
        let k = t.path().join("strict_limit");
        std::fs::write(&k, "0").unwrap();
        let reg = knobs(&t);
        let knob = Knob::file(&k);
        let step = Step::Sysfs {
            path: k.clone(),
            original: "0".into(),
            registered: true,
        };
        let (pid, start, mut c) = running_child();
        let steps = vec![
            step.clone(),
            Step::Trial {
                pid,
                start: Some(start),
            },
            step.clone(),
        ];
        lab(t.path(), steps.clone());
        let lab_owner = Owner::lab(t.path());
        reg.set(&knob, &Value::Text("1".into()), &lab_owner, "lab")
            .unwrap();
        let trial = Owner::Process { pid, start };
        reg.set(&knob, &Value::Text("2".into()), &trial, "trial")
            .unwrap();
        let e = restore_left(t.path(), &reg).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("a trial (pid {pid}) is running")),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&k).unwrap(), "2");
        assert_eq!(LabState::load(t.path()).unwrap().unwrap().steps, steps);
        c.kill().unwrap();
        c.wait().unwrap();
        assert_eq!(restore_left(t.path(), &reg).unwrap(), 1);
        assert_eq!(std::fs::read_to_string(&k).unwrap(), "1", "the lab's");
        assert_eq!(LabState::load(t.path()).unwrap().unwrap().steps, vec![step]);
        let held = reg.entries().unwrap();
        assert_eq!(held[0].holds.len(), 1);
        assert_eq!(held[0].holds[0].owner, lab_owner);
    }

    #[test]
    fn run_arguments_change_nothing_on_the_machine() {
        let s = Setting::RunArgs {
            args: vec!["--mode".into(), "direct".into()],
        };
        assert_eq!(step_for(&s, Path::new("/")).unwrap(), None);
        let reg = Registry::at("/nonexistent-lab/run");
        let e = apply(Path::new("/nonexistent-lab"), &[s], Path::new("/"), &reg);
        assert!(e.err().unwrap().to_string().contains("no lab at"));
    }
}
