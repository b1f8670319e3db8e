//! `stallscope lab down`, and the undo that a failed `up` uses too. It
//! changes nothing while a process holds a lab mount busy (it names them),
//! unless told how to end that (`--force`: stop them; `--force --lazy`:
//! detach the mounts). The undo goes in reverse, stops between steps on
//! Ctrl-C, never removes a loop device under a kept mount nor an image
//! under a kept loop device, and leaves in the state file exactly what is
//! left, so running `down` again finishes it.

use super::cap;
use super::guards::{sh, BLKIO_WRITE_BPS};
use super::procs;
use super::state::{LabState, Step};
use crate::base::error::UsageError;
use crate::knob::{Owner, Registry};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How `down` deals with what holds the lab busy.
#[derive(Clone, Copy, Debug, Default)]
pub struct DownOptions {
    /// Go on despite processes using a lab mount.
    pub force: bool,
    /// With force: unmount lazily (they keep running) instead of stopping them.
    pub lazy: bool,
}

/// What an undo needs besides the steps.
pub struct Undo<'a> {
    pub lazy: bool,
    /// Set by SIGINT/SIGTERM: stop between steps.
    pub stop: &'a AtomicBool,
    /// Where the steps' knobs are held.
    pub knobs: &'a Registry,
}

/// How long umount is retried on EBUSY (a writer that just exited).
const UMOUNT_TRIES: u32 = 4;
const UMOUNT_WAIT: Duration = Duration::from_millis(500);
/// How long stopped processes get between SIGTERM and SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// `lab down`: restores everything `up` changed. Fine to run with no lab.
pub fn down(dir: &Path, o: DownOptions, stop: &AtomicBool) -> anyhow::Result<()> {
    super::checks::need_root("down")?;
    let knobs = Registry::machine();
    recover_knobs(&knobs);
    let Some(st) = LabState::load(dir)? else {
        eprintln!("stallscope: no lab at {}; nothing to undo", dir.display());
        tidy_tracefs();
        return Ok(());
    };
    let holders = procs::holders(Path::new("/proc"), &mounted(&st), std::process::id());
    if !holders.is_empty() {
        for h in &holders {
            eprintln!(
                "stallscope: pid {} ({}) uses the lab: {}",
                h.pid, h.comm, h.what
            );
        }
        if !o.force {
            return Err(UsageError::new(format!(
                "{} process{} use{} the lab at {}; nothing changed. Stop {}, or run `lab down --force` (SIGTERM, SIGKILL after {} s) or `lab down --force --lazy` (detach the mounts, they keep running)",
                holders.len(),
                if holders.len() == 1 { "" } else { "es" },
                if holders.len() == 1 { "s" } else { "" },
                dir.display(),
                if holders.len() == 1 { "it" } else { "them" },
                TERM_GRACE.as_secs()
            ))
            .into());
        }
        if !o.lazy {
            stop_processes(&holders, stop)?;
        }
    }
    let n = st.steps.len();
    let left = undo(
        dir,
        st,
        &Undo {
            lazy: o.lazy,
            stop,
            knobs: &knobs,
        },
    );
    tidy_tracefs();
    let left = left?;
    eprintln!(
        "stallscope: lab at {} is down ({} changes undone)",
        dir.display(),
        n - left
    );
    Ok(())
}

/// Puts back the knobs dead owners left changed (`Registry::recover`),
/// saying each; a failure is said, not fatal.
pub fn recover_knobs(knobs: &Registry) {
    match knobs.recover() {
        Ok(lines) => lines.iter().for_each(|l| eprintln!("stallscope: {l}")),
        Err(e) => eprintln!("stallscope: the knob registry: {e:#}"),
    }
}

/// Removes what killed stallscope runs (a trial killed mid-run among
/// them) left in tracefs: their instances and a mount of tracefs one of
/// them made, if nothing uses it (`source::trace::tidy`). Not a step of
/// the lab: any run may leave them, and they are found by name and marker,
/// not recorded. A failure is said, not fatal: the lab is down all the same.
fn tidy_tracefs() {
    let root = Path::new(crate::source::trace::DEFAULT_TRACEFS);
    match crate::source::trace::tidy(root) {
        Ok(t) => {
            for name in t.removed {
                eprintln!("stallscope: removed tracefs instance {name} left by a dead run");
            }
            if t.unmounted {
                eprintln!(
                    "stallscope: unmounted tracefs at {} (a stallscope run had mounted it)",
                    root.display()
                );
            }
        }
        Err(e) => eprintln!("stallscope: {e}"),
    }
}

/// SIGTERM, a grace period, SIGKILL for the rest; Ctrl-C stops waiting.
fn stop_processes(holders: &[procs::Holder], stop: &AtomicBool) -> anyhow::Result<()> {
    let proc = Path::new("/proc");
    let named: Vec<(u32, u64)> = holders
        .iter()
        .filter_map(|h| procs::entry(proc, h.pid).map(|e| (e.pid, e.start)))
        .collect();
    let alive = || -> Vec<u32> {
        named
            .iter()
            .filter(|(p, s)| procs::alive(proc, *p, *s))
            .map(|(p, _)| *p)
            .collect()
    };
    for (sig, name, wait) in [
        (libc::SIGTERM, "SIGTERM", TERM_GRACE),
        (libc::SIGKILL, "SIGKILL", Duration::from_secs(2)),
    ] {
        let pids = alive();
        if pids.is_empty() {
            return Ok(());
        }
        for &p in &pids {
            eprintln!("stallscope: {name} to pid {p}");
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(p as i32, sig) };
        }
        let t0 = Instant::now();
        while !alive().is_empty() && t0.elapsed() < wait {
            if stop.load(Ordering::Relaxed) {
                anyhow::bail!("interrupted while stopping the lab's users; nothing undone");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let left = alive();
    if left.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "pids {left:?} did not end after SIGKILL (in uninterruptible sleep?); nothing undone"
        )
    }
}

/// Whether a step must stay because a step kept after it still needs what
/// it made: a loop device under a mount, an image under a loop device, the
/// controllers under the group.
pub fn blocked_by(step: &Step, kept: &[Step]) -> Option<String> {
    kept.iter().find_map(|k| {
        let needs = match (step, k) {
            (
                Step::Loop {
                    device: Some(d), ..
                },
                Step::Mount { device, .. },
            ) => d == device,
            (Step::Image { path }, Step::Loop { image, .. }) => path == image,
            (Step::Subtree { .. }, Step::Cgroup { .. }) => true,
            _ => false,
        };
        needs.then(|| format!("kept while {} is left", k.describe()))
    })
}

/// Undoes the steps in reverse, keeping (and saving) those that failed, that
/// a kept one still needs, and all still to go when `stop` is set. Returns
/// how many are left; Err lists each problem on a line of its own.
pub fn undo(dir: &Path, mut st: LabState, u: &Undo) -> anyhow::Result<usize> {
    let moved: HashMap<u32, PathBuf> = st
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Moved { pid, from, .. } => Some((*pid, from.clone())),
            _ => None,
        })
        .collect();
    let owners = st.owners(dir);
    let mut kept: Vec<Step> = Vec::new();
    let mut problems = Vec::new();
    while let Some(step) = st.steps.pop() {
        if u.stop.load(Ordering::Relaxed) {
            st.steps.push(step);
            problems.push("interrupted".to_string());
            break;
        }
        let owner = &owners[st.steps.len()];
        let outcome = match blocked_by(&step, &kept) {
            Some(why) => Err(why),
            None => undo_step(&step, u.lazy, &moved, (u.knobs, owner))
                .map_err(|e| short(&format!("{e:#}"))),
        };
        if let Err(why) = outcome {
            problems.push(format!("{}: {why}", step.describe()));
            kept.push(step);
        }
    }
    st.steps.extend(kept.into_iter().rev());
    if st.steps.is_empty() {
        let _ = std::fs::remove_file(LabState::path(dir));
        let _ = std::fs::remove_dir(dir.join("mnt"));
        let _ = std::fs::remove_dir(dir);
        return Ok(0);
    }
    st.save(dir)?;
    anyhow::bail!(
        "{} of the lab's changes are left (see `stallscope lab status --dir {d}`; `lab down --dir {d}` again finishes them):\n  {}",
        st.steps.len(),
        problems.join("\n  "),
        d = dir.display()
    )
}

/// An error cut to one short line (a tool may print pages).
fn short(e: &str) -> String {
    let line = e.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > 200 {
        line.chars().take(200).collect::<String>() + "…"
    } else {
        line
    }
}

/// Undoes one step (see `Step` for what each undo does): a registered
/// one by releasing its knobs' holds (`by`: the registry, and the lab or
/// the trial that holds them), which writes back what is then in force.
pub fn undo_step(
    step: &Step,
    lazy: bool,
    moved: &HashMap<u32, PathBuf>,
    by: (&Registry, &Owner),
) -> anyhow::Result<()> {
    if step.registered() {
        return step.knobs().iter().try_for_each(|k| by.0.release(k, by.1));
    }
    if let Some(r) = cap::undo_v2(step, Path::new("/proc"), moved) {
        return r;
    }
    match step {
        Step::Dirty { original, .. } => original.write()?,
        Step::BlkioCap {
            major,
            minor,
            original,
            ..
        } => std::fs::write(BLKIO_WRITE_BPS, format!("{major}:{minor} {original}"))?,
        // A knob whose device is gone has nothing to restore.
        Step::Sysfs { path, original, .. } if path.exists() => std::fs::write(path, original)?,
        Step::Mount { mount, .. } => {
            if is_mountpoint(mount) {
                umount(mount, lazy)?;
            }
            let _ = std::fs::remove_dir(mount);
        }
        Step::Sysctl { name, original, .. } => std::fs::write(sysctl_path(name), original)?,
        Step::Remount {
            device,
            mount,
            options,
        } if is_mountpoint(mount) => remount_afresh(device, mount, options)?,
        Step::Loop { image, device } => detach(image, device.as_deref())?,
        Step::Image { path } => remove_image(path)?,
        _ => {}
    }
    Ok(())
}

pub use crate::knob::sysctl_path;

/// Unmounts and mounts `device` again with `options`, so every option not
/// in them is back at its default.
fn remount_afresh(device: &str, mount: &Path, options: &str) -> anyhow::Result<()> {
    umount(mount, false)?;
    sh("mount", &["-o", options, device, &mount.to_string_lossy()])?;
    Ok(())
}

/// umount(2), retried briefly on EBUSY; lazily (MNT_DETACH) when asked.
fn umount(mount: &Path, lazy: bool) -> anyhow::Result<()> {
    let c = std::ffi::CString::new(mount.as_os_str().as_encoded_bytes())?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    for i in 0..UMOUNT_TRIES {
        // SAFETY: a valid C string.
        if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            anyhow::bail!("umount: {e}");
        }
        if i + 1 < UMOUNT_TRIES {
            std::thread::sleep(UMOUNT_WAIT);
        }
    }
    anyhow::bail!(
        "umount: still busy after {UMOUNT_TRIES} tries (a process uses it: `lab down` names it)"
    )
}

/// Detaches the image's loop device(s); the device may be unknown if `up`
/// died right after losetup.
fn detach(image: &Path, device: Option<&str>) -> anyhow::Result<()> {
    let devs = match device {
        Some(d) => vec![d.to_string()],
        None => loops_of(image),
    };
    for d in devs {
        if sh("losetup", &[&d]).is_ok() {
            sh("losetup", &["-d", &d])?;
        }
    }
    Ok(())
}

/// Removes an image only when no loop device is attached to it any more (a
/// busy one detached is only marked to go when its filesystem lets go).
fn remove_image(path: &Path) -> anyhow::Result<()> {
    let attached = loops_of(path);
    if !attached.is_empty() {
        anyhow::bail!(
            "kept: still attached to {} (its filesystem is still in use)",
            attached.join(", ")
        );
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Loop devices backed by `image` (losetup -j).
fn loops_of(image: &Path) -> Vec<String> {
    sh("losetup", &["-j", &image.to_string_lossy()])
        .map(|out| {
            out.lines()
                .filter_map(|l| l.split(':').next().map(str::to_string))
                .filter(|d| !d.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The lab's mount points that are mounted now.
pub fn mounted(st: &LabState) -> Vec<PathBuf> {
    st.mounts()
        .into_iter()
        .map(|(_, m, _)| m)
        .filter(|m| is_mountpoint(m))
        .collect()
}

/// Whether every filesystem of the lab is mounted (and there is one).
pub fn intact(st: &LabState) -> bool {
    !st.mounts().is_empty() && mounted(st).len() == st.mounts().len()
}

pub fn is_mountpoint(p: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    crate::source::mounts::parse_mountinfo(&text)
        .iter()
        .any(|m| m.mount_point == p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_mount_keeps_its_loop_device_and_image() {
        let mount = Step::Mount {
            device: "/dev/loop3".into(),
            mount: "/lab/mnt/ext4".into(),
            fs: "ext4".into(),
        };
        let lp = Step::Loop {
            image: "/lab/ext4.img".into(),
            device: Some("/dev/loop3".into()),
        };
        let other = Step::Loop {
            image: "/lab/xfs.img".into(),
            device: Some("/dev/loop4".into()),
        };
        let image = Step::Image {
            path: "/lab/ext4.img".into(),
        };
        let why = blocked_by(&lp, std::slice::from_ref(&mount)).unwrap();
        assert_eq!(why, "kept while mount /lab/mnt/ext4 (/dev/loop3) is left");
        assert!(blocked_by(&other, std::slice::from_ref(&mount)).is_none());
        assert!(blocked_by(&image, &[mount.clone(), lp.clone()]).is_some());
        assert!(blocked_by(&image, &[mount, other]).is_none());
        let sub = Step::Subtree {
            file: "/cg/cgroup.subtree_control".into(),
            original: String::new(),
            added: vec!["io".into()],
            registered: true,
        };
        assert!(blocked_by(
            &sub,
            &[Step::Cgroup {
                path: "/cg/x".into()
            }]
        )
        .is_some());
    }

    #[test]
    fn errors_are_cut_to_one_short_line() {
        assert_eq!(short("a\n  b\tc"), "a b c");
        let long = "x".repeat(5000);
        assert_eq!(short(&long).chars().count(), 201);
    }

    /// Two labs hold one knob (a plain file standing in for a sysfs
    /// knob): the top one's `down` writes back the other's value, not the
    /// original; the last one's the original.
    #[test]
    fn a_labs_undo_releases_its_hold_and_leaves_another_labs_value() {
        use crate::knob::{Knob, Value};
        let t = tempfile::tempdir().unwrap();
        let knob = t.path().join("stable_writes");
        std::fs::write(&knob, "0").unwrap();
        let knobs = Registry::at(t.path().join("run"));
        let step = Step::Sysfs {
            path: knob.clone(),
            original: "0".into(),
            registered: true,
        };
        let mut labs = Vec::new();
        for (name, value) in [("a", "1"), ("b", "2")] {
            let dir = t.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            let mut st = LabState::default();
            st.save(&dir).unwrap();
            let by = super::super::state::Claimant::lab(&knobs, &dir);
            let set = (Knob::file(&knob), Value::Text(value.into()));
            by.hold(&mut st, &dir, step.clone(), &[set]).unwrap();
            labs.push((dir, st));
        }
        assert_eq!(std::fs::read_to_string(&knob).unwrap(), "2");
        let never = AtomicBool::new(false);
        let u = Undo {
            lazy: false,
            stop: &never,
            knobs: &knobs,
        };
        let (b, st_b) = labs.pop().unwrap();
        assert_eq!(undo(&b, st_b, &u).unwrap(), 0);
        assert_eq!(std::fs::read_to_string(&knob).unwrap(), "1", "a's");
        let (a, st_a) = labs.pop().unwrap();
        assert_eq!(undo(&a, st_a, &u).unwrap(), 0);
        assert_eq!(std::fs::read_to_string(&knob).unwrap(), "0");
        assert!(knobs.entries().unwrap().is_empty());
    }

    /// Non-root steps only: the state keeps exactly what is left, in order.
    #[test]
    fn an_interrupted_undo_keeps_what_is_left() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("lab");
        std::fs::create_dir_all(&dir).unwrap();
        let knob = t.path().join("knob");
        std::fs::write(&knob, "1").unwrap();
        let steps = vec![
            Step::Sysfs {
                path: knob.clone(),
                original: "0".into(),
                registered: false,
            },
            Step::Image {
                path: t.path().join("gone.img"),
            },
        ];
        let st = LabState {
            steps: steps.clone(),
            ..LabState::default()
        };
        let stop = AtomicBool::new(true);
        let knobs = Registry::at(t.path().join("run"));
        let e = undo(
            &dir,
            st.clone(),
            &Undo {
                lazy: false,
                stop: &stop,
                knobs: &knobs,
            },
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("2 of the lab's changes are left"),
            "{e}"
        );
        assert_eq!(LabState::load(&dir).unwrap().unwrap().steps, steps);
        assert_eq!(std::fs::read_to_string(&knob).unwrap(), "1", "untouched");
        let go = AtomicBool::new(false);
        assert_eq!(
            undo(
                &dir,
                st,
                &Undo {
                    lazy: false,
                    stop: &go,
                    knobs: &knobs,
                }
            )
            .unwrap(),
            0
        );
        assert_eq!(std::fs::read_to_string(&knob).unwrap(), "0");
        assert!(!dir.exists(), "state and dir removed");
    }
}
