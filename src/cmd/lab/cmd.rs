//! `stallscope lab up | down | status`: loop-backed filesystems on one disk,
//! a write cap on their devices and optional lower dirty limits, so
//! writeback matters on a small VM. Every change is recorded in the state
//! file first (see `state`), undone in reverse by `down`, and undone at once
//! when `up` fails halfway. The kernel knobs among them (dirty limits,
//! stable_writes, the v1 cap, the v2 root's controllers) are held in the
//! machine's registry (`crate::knob`) in the lab's name.

use super::cap::{self, CapMethod};
use super::checks::preflight;
use super::down::{intact, is_mountpoint, mounted, undo, Undo};
use super::guards::{blkio_cap, sh, DirtyLimits};
use super::state::{Claimant, LabState, Step};
use super::UpOptions;
use crate::base::error::UsageError;
use crate::knob::{Entry, Knob, Owner, Registry, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

pub const DEFAULT_DIR: &str = "/var/tmp/stallscope-lab";

/// `lab up`. Safe to run twice: an intact lab is reported, not rebuilt.
pub fn up(o: &UpOptions) -> anyhow::Result<()> {
    let (method, warnings) = preflight(o)?;
    if let Some(st) = LabState::load(&o.dir)? {
        if intact(&st) {
            eprintln!(
                "stallscope: the lab at {} is already up; nothing changed",
                o.dir.display()
            );
            print!("{}", status_text(&o.dir, &st));
            return Ok(());
        }
        return Err(UsageError::new(format!(
            "a lab at {} was not torn down (state file present); run `stallscope lab down --dir {}` first",
            o.dir.display(),
            o.dir.display()
        ))
        .into());
    }
    for w in &warnings {
        eprintln!("stallscope: warning: {w}");
    }
    std::fs::create_dir_all(o.dir.join("mnt"))?;
    let mut st = LabState {
        version: 1,
        pid: std::process::id(),
        steps: Vec::new(),
        cap_method: method.as_ref().map(CapMethod::describe),
    };
    st.save(&o.dir)?;
    let knobs = Registry::machine();
    let by = Claimant::lab(&knobs, &o.dir);
    match build(o, method.as_ref(), &mut st, &by) {
        Ok(()) => {
            print!("{}", status_text(&o.dir, &st));
            Ok(())
        }
        Err(e) => {
            eprintln!("stallscope: lab up failed ({e:#}); undoing what was done");
            let never = AtomicBool::new(false);
            let _ = undo(
                &o.dir,
                st,
                &Undo {
                    lazy: false,
                    stop: &never,
                    knobs: &knobs,
                },
            );
            Err(e)
        }
    }
}

fn build(
    o: &UpOptions,
    method: Option<&CapMethod>,
    st: &mut LabState,
    by: &Claimant,
) -> anyhow::Result<()> {
    for fs in &o.fs {
        let dev = loop_device(o, st, fs)?;
        mount_fs(o, st, fs, &dev)?;
        if o.stable_writes {
            stable_writes(o, st, &dev, by)?;
        }
        if let Some(m) = method {
            cap_device(o, m, st, &dev, by)?;
        }
    }
    if let Some(d) = o.dirty_bytes {
        let original = DirtyLimits::read()?;
        let step = Step::Dirty {
            original,
            registered: true,
        };
        let limits = DirtyLimits {
            dirty_bytes: d.0,
            dirty_ratio: 0,
            background_bytes: o.dirty_background_bytes.map_or(d.0 / 4, |b| b.0),
            background_ratio: 0,
        };
        by.hold(st, &o.dir, step, &[(Knob::dirty(), Value::Dirty(limits))])?;
    }
    Ok(())
}

/// A sparse image of the lab's size attached to a loop device (direct
/// I/O, so the loop file does not double-cache); each step recorded first.
fn loop_device(o: &UpOptions, st: &mut LabState, fs: &str) -> anyhow::Result<String> {
    let dir = &o.dir;
    let image = dir.join(format!("{fs}.img"));
    st.push(
        dir,
        Step::Image {
            path: image.clone(),
        },
    )?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&image)?;
    f.set_len(o.size.0)?;
    drop(f);
    st.push(
        dir,
        Step::Loop {
            image: image.clone(),
            device: None,
        },
    )?;
    let dev = sh(
        "losetup",
        &["--direct-io=on", "-f", "--show", &image.to_string_lossy()],
    )?;
    st.amend_last(
        dir,
        Step::Loop {
            image,
            device: Some(dev.clone()),
        },
    )?;
    Ok(dev)
}

/// mkfs on the loop device, mounted under DIR/mnt/<fs>.
fn mount_fs(o: &UpOptions, st: &mut LabState, fs: &str, dev: &str) -> anyhow::Result<()> {
    let force = if fs == "ext4" { "-F" } else { "-f" };
    eprintln!("stallscope: mkfs.{fs} on {dev} ({})", o.size);
    sh(&format!("mkfs.{fs}"), &["-q", force, dev])?;
    let mnt = o.dir.join("mnt").join(fs);
    std::fs::create_dir_all(&mnt)?;
    st.push(
        &o.dir,
        Step::Mount {
            device: dev.to_string(),
            mount: mnt.clone(),
            fs: fs.to_string(),
        },
    )?;
    sh("mount", &[dev, &mnt.to_string_lossy()])?;
    Ok(())
}

/// Turns on stable pages for the device (rewrites wait for writeback).
fn stable_writes(o: &UpOptions, st: &mut LabState, dev: &str, by: &Claimant) -> anyhow::Result<()> {
    let name = dev.trim_start_matches("/dev/");
    let path = PathBuf::from(format!("/sys/block/{name}/queue/stable_writes"));
    let original = std::fs::read_to_string(&path)?.trim().to_string();
    let knob = Knob::file(&path);
    let step = Step::Sysfs {
        path,
        original,
        registered: true,
    };
    by.hold(st, &o.dir, step, &[(knob, Value::Text("1".into()))])
}

/// Caps the device's writes: the v1 root blkio throttle, or io.max in the
/// lab's v2 group.
fn cap_device(
    o: &UpOptions,
    m: &CapMethod,
    st: &mut LabState,
    dev: &str,
    by: &Claimant,
) -> anyhow::Result<()> {
    let (major, minor) = dev_numbers(dev)?;
    match m {
        CapMethod::V1 { .. } => {
            let step = Step::BlkioCap {
                major,
                minor,
                original: blkio_cap(major, minor)?,
                registered: true,
            };
            let cap = (Knob::blkio(major, minor), Value::Bps(o.cap.0));
            by.hold(st, &o.dir, step, &[cap])?;
        }
        CapMethod::V2 { root, .. } => {
            let group = cap::ensure_group(root, &o.dir, st, by)?;
            cap::cap_v2(&group, &o.dir, st, (major, minor), o.cap.0)?;
        }
    }
    Ok(())
}

fn dev_numbers(dev: &str) -> anyhow::Result<(u32, u32)> {
    let t = sh("stat", &["-L", "-c", "%t:%T", dev])?;
    let (a, b) = t
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("stat {dev}: {t}"))?;
    Ok((u32::from_str_radix(a, 16)?, u32::from_str_radix(b, 16)?))
}

/// `lab status`: the lab, and every knob held in the machine's registry
/// and by whom (dead owners' holds put back first, as root).
pub fn status(dir: &Path) -> anyhow::Result<()> {
    let knobs = Registry::machine();
    if super::checks::need_root("").is_ok() {
        super::down::recover_knobs(&knobs);
    }
    match LabState::load(dir)? {
        None => println!("no lab at {}", dir.display()),
        Some(st) => print!("{}", status_text(dir, &st)),
    }
    let me = Owner::lab(dir);
    print!("{}", held_text(&knobs.entries()?, Some(&me), &knobs.file()));
    Ok(())
}

/// The knobs held and by whom, the one in force last.
pub fn held_text(entries: &[Entry], me: Option<&Owner>, file: &Path) -> String {
    if entries.is_empty() {
        return format!(
            "  no knob held by stallscope (registry {})\n",
            file.display()
        );
    }
    let mut s = format!("  knobs stallscope holds (registry {}):\n", file.display());
    for e in entries {
        s += &format!("    {}, originally {}:\n", e.knob.name(), e.original.text());
        for (i, h) in e.holds.iter().enumerate() {
            let who = if Some(&h.owner) == me {
                "this lab".to_string()
            } else {
                h.owner.describe()
            };
            let top = if i + 1 == e.holds.len() {
                ", in force"
            } else {
                ""
            };
            s += &format!("      {} by {who} ({}){top}\n", h.value.text(), h.what);
        }
    }
    s
}

pub fn status_text(dir: &Path, st: &LabState) -> String {
    let mut s = format!(
        "lab at {} (state file {})\n",
        dir.display(),
        LabState::path(dir).display()
    );
    let mut devices = Vec::new();
    let mut bps = 0;
    for (fs, mnt, dev) in st.mounts() {
        let up = if is_mountpoint(&mnt) {
            "mounted"
        } else {
            "NOT mounted"
        };
        let c = dev_numbers(&dev).map_or(0, |(a, b)| cap::lab_cap(st, a, b));
        bps = bps.max(c);
        s += &format!(
            "  {fs:<6} {} on {dev}, {up}, {}\n",
            mnt.display(),
            cap::cap_words(c)
        );
        devices.push(dev);
    }
    if let Some(m) = &st.cap_method {
        s += &format!("  cap via {m}\n");
    }
    if let Some(g) = st.group() {
        if g.is_dir() && !g.join("io.max").exists() {
            // systemd may turn io off in the root when it re-realizes its units.
            s += "  io.max is gone from the group: the io controller was disabled in the root's cgroup.subtree_control (by systemd?); the cap is off\n";
        }
        if bps > 0 {
            s += &cap::systemd_hint(&devices, bps);
        }
    }
    if st.steps.iter().any(|s| matches!(s, Step::Dirty { .. })) {
        if let Ok(d) = DirtyLimits::read() {
            s += &format!(
                "  vm.dirty_bytes={} vm.dirty_background_bytes={} (restored by `lab down`)\n",
                d.dirty_bytes, d.background_bytes
            );
        }
    }
    if !intact(st) {
        s += &format!(
            "  not (fully) up; left to undo by `lab down` ({}):\n",
            st.steps.len()
        );
        for step in &st.steps {
            s += &format!("    {}\n", step.describe());
        }
    }
    s
}

/// The lab's mount points, for `compare --lab`.
pub fn lab_targets(dir: &Path) -> Result<Vec<PathBuf>, UsageError> {
    let st = LabState::load(dir)
        .map_err(|e| UsageError::new(e.to_string()))?
        .ok_or_else(|| {
            UsageError::new(format!(
                "no lab at {}; run `stallscope lab up` first",
                dir.display()
            ))
        })?;
    let m = mounted(&st);
    if m.is_empty() {
        return Err(UsageError::new(format!(
            "the lab at {} has no mounted filesystem",
            dir.display()
        )));
    }
    Ok(m)
}
