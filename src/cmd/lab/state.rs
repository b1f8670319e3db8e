//! What `lab up` changed, persisted step by step so `lab down` can undo it
//! in reverse, also after a crash or a SIGKILL halfway through. Each step
//! is written to the state file *before* the change it records is made
//! (for a change to an existing setting: with the original value), and the
//! file is replaced atomically. A step that changes a kernel knob is also
//! a hold in the machine's registry (`crate::knob`), in the lab's name or
//! a trial's (`registered`), and its undo releases that hold; a step of an
//! older build (no hold) is undone by writing its original back.

use crate::knob::{Knob, Owner, Registry, Value};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// Its presence keeps the lab alive as an owner of knobs.
pub const STATE_FILE: &str = crate::knob::owner::LAB_STATE_FILE;

/// One change, with what is needed to undo it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// A sparse image file we created.
    Image { path: PathBuf },
    /// A loop device attached to an image (device known once attached).
    Loop {
        image: PathBuf,
        device: Option<String>,
    },
    /// A filesystem mounted (recorded before mount; undo tolerates "not mounted").
    Mount {
        device: String,
        mount: PathBuf,
        fs: String,
    },
    /// A cgroup v1 blkio write cap and the value it had.
    BlkioCap {
        major: u32,
        minor: u32,
        original: u64,
        /// Held in the knob registry (false: a step of an older build).
        #[serde(default)]
        registered: bool,
    },
    /// The dirty limits as they were.
    Dirty {
        original: crate::knob::DirtyLimits,
        #[serde(default)]
        registered: bool,
    },
    /// A sysfs knob (e.g. queue/stable_writes) and its original text.
    Sysfs {
        path: PathBuf,
        original: String,
        #[serde(default)]
        registered: bool,
    },
    /// Controllers the lab needs on in a v2 cgroup.subtree_control file
    /// (`added`: each held in the registry; by an older build: those it
    /// enabled, undone by disabling them again).
    Subtree {
        file: PathBuf,
        original: String,
        added: Vec<String>,
        #[serde(default)]
        registered: bool,
    },
    /// A v2 cgroup we created (undone: processes left in it moved out, rmdir).
    Cgroup { path: PathBuf },
    /// A v2 io.max write cap and the one it had (None: no cap).
    IoMax {
        file: PathBuf,
        major: u32,
        minor: u32,
        original: Option<u64>,
    },
    /// A process moved into the lab's group (`lab exec`, `lab adopt`): its
    /// start time (so a reused pid is not moved) and the group it left.
    Moved { pid: u32, start: u64, from: PathBuf },
    /// The steps after this one are an advise trial's (process `pid`,
    /// started at `start`; None from an older build): undone by the trial
    /// after each run, or, when it died, by the next trial or `lab down`.
    /// Undoing the marker itself changes nothing.
    Trial {
        pid: u32,
        #[serde(default)]
        start: Option<u64>,
    },
    /// A sysctl (`/proc/sys/NAME` with dots as slashes) and its original
    /// text. The vm dirty limits are recorded as `Dirty` instead: writing
    /// one of a bytes/ratio pair zeroes the other.
    Sysctl {
        name: String,
        original: String,
        #[serde(default)]
        registered: bool,
    },
    /// A filesystem remounted with another option; undone by mounting it
    /// afresh with the options it had (a remount cannot unset an option
    /// the original list leaves at its default, such as ext4's `commit=`).
    Remount {
        device: String,
        mount: PathBuf,
        options: String,
    },
}

impl Step {
    /// A short line for messages and `lab status` (never a whole struct).
    pub fn describe(&self) -> String {
        match self {
            Step::Image { path } => format!("image {}", path.display()),
            Step::Loop { image, device } => format!(
                "loop device {} for {}",
                device.as_deref().unwrap_or("?"),
                image.display()
            ),
            Step::Mount { mount, device, .. } => {
                format!("mount {} ({device})", mount.display())
            }
            Step::BlkioCap { major, minor, .. } => format!("blkio write cap on {major}:{minor}"),
            Step::Dirty { .. } => "vm dirty limits".to_string(),
            Step::Sysfs { path, .. } => format!("sysfs {}", path.display()),
            Step::Subtree { file, added, .. } => {
                format!("+{} in {}", added.join(" +"), file.display())
            }
            Step::Cgroup { path } => format!("cgroup {}", path.display()),
            Step::IoMax {
                file, major, minor, ..
            } => format!("io.max on {major}:{minor} in {}", file.display()),
            Step::Moved { pid, from, .. } => {
                format!("pid {pid} moved from cgroup {}", from.display())
            }
            Step::Trial { pid, .. } => {
                format!("an advise trial's changes (pid {pid}) from here")
            }
            Step::Sysctl { name, original, .. } => format!("sysctl {name} (was {original})"),
            Step::Remount { mount, options, .. } => {
                format!("remount of {} (options were {options})", mount.display())
            }
        }
    }
}

impl Step {
    /// Whether the step's change is a hold in the knob registry.
    pub fn registered(&self) -> bool {
        matches!(
            self,
            Step::BlkioCap {
                registered: true,
                ..
            } | Step::Dirty {
                registered: true,
                ..
            } | Step::Sysfs {
                registered: true,
                ..
            } | Step::Subtree {
                registered: true,
                ..
            } | Step::Sysctl {
                registered: true,
                ..
            }
        )
    }

    /// The knobs the step changes, as the registry names them.
    pub fn knobs(&self) -> Vec<Knob> {
        match self {
            Step::BlkioCap { major, minor, .. } => vec![Knob::blkio(*major, *minor)],
            Step::Dirty { .. } => vec![Knob::dirty()],
            Step::Sysfs { path, .. } => vec![Knob::file(path)],
            Step::Sysctl { name, .. } => vec![Knob::sysctl(name)],
            Step::Subtree { file, added, .. } => {
                added.iter().map(|c| Knob::controller(file, c)).collect()
            }
            _ => Vec::new(),
        }
    }
}

/// The owner a trial marker names: its process.
pub fn trial_owner(pid: u32, start: Option<u64>) -> Owner {
    Owner::Process {
        pid,
        start: start.unwrap_or(0),
    }
}

/// Who changes knobs for the steps it records, in the machine's registry:
/// a lab (its directory) or a trial (its process).
pub struct Claimant<'a> {
    pub knobs: &'a Registry,
    pub owner: Owner,
    /// What the holds are for, as `lab status` shows them.
    pub what: String,
}

impl<'a> Claimant<'a> {
    /// The lab at `dir` (which exists).
    pub fn lab(knobs: &'a Registry, dir: &Path) -> Claimant<'a> {
        Claimant {
            knobs,
            owner: Owner::lab(dir),
            what: format!("lab up --dir {}", dir.display()),
        }
    }

    /// This process, a trial on the lab at `dir`.
    pub fn trial(knobs: &'a Registry, dir: &Path) -> Claimant<'a> {
        Claimant {
            knobs,
            owner: Owner::this_process(),
            what: format!(
                "trial pid {} on the lab at {}",
                std::process::id(),
                dir.display()
            ),
        }
    }

    /// Records `step` (a registered one) durably, then sets its knobs:
    /// killed in between, the step's undo finds no hold and changes
    /// nothing.
    pub fn hold(
        &self,
        st: &mut LabState,
        dir: &Path,
        step: Step,
        sets: &[(Knob, Value)],
    ) -> anyhow::Result<()> {
        debug_assert!(step.registered());
        st.push(dir, step)?;
        for (k, v) in sets {
            self.knobs.set(k, v, &self.owner, &self.what)?;
        }
        Ok(())
    }
}

/// The state file's contents.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LabState {
    pub version: u32,
    pub pid: u32,
    pub steps: Vec<Step>,
    /// How the write cap was applied (for `lab status`).
    pub cap_method: Option<String>,
}

impl LabState {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(STATE_FILE)
    }

    pub fn load(dir: &Path) -> io::Result<Option<LabState>> {
        match std::fs::read_to_string(Self::path(dir)) {
            Ok(t) => serde_json::from_str(&t)
                .map(Some)
                .map_err(|e| io::Error::other(format!("{}: {e}", Self::path(dir).display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes the file atomically (temp + fsync + rename).
    pub fn save(&self, dir: &Path) -> io::Result<()> {
        use std::io::Write;
        let tmp = dir.join(format!("{STATE_FILE}.tmp"));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(serde_json::to_string_pretty(self)?.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, Self::path(dir))
    }

    /// Records a step durably before the change is made.
    pub fn push(&mut self, dir: &Path, step: Step) -> io::Result<()> {
        self.steps.push(step);
        self.save(dir)
    }

    /// Updates the last step (e.g. the loop device once known).
    pub fn amend_last(&mut self, dir: &Path, step: Step) -> io::Result<()> {
        if let Some(last) = self.steps.last_mut() {
            *last = step;
        }
        self.save(dir)
    }

    /// Who holds each step's knobs: the lab at `dir`, or for the steps
    /// after a trial marker that trial.
    pub fn owners(&self, dir: &Path) -> Vec<Owner> {
        let mut owner = Owner::lab(dir);
        self.steps
            .iter()
            .map(|s| {
                if let Step::Trial { pid, start } = s {
                    owner = trial_owner(*pid, *start);
                }
                owner.clone()
            })
            .collect()
    }

    /// The v2 group the lab caps in, when it does.
    pub fn group(&self) -> Option<&Path> {
        self.steps.iter().find_map(|s| match s {
            Step::Cgroup { path } => Some(path.as_path()),
            _ => None,
        })
    }

    /// The mounted filesystems: (fs, mount point, device).
    pub fn mounts(&self) -> Vec<(String, PathBuf, String)> {
        self.steps
            .iter()
            .filter_map(|s| match s {
                Step::Mount { device, mount, fs } => {
                    Some((fs.clone(), mount.clone(), device.clone()))
                }
                _ => None,
            })
            .collect()
    }
}
