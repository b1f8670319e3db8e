//! A lab (`stallscope lab up`) of a root test, in a temp folder under
//! /var/tmp, taken down on drop (`lab down --force`, which also removes
//! what a killed stallscope left in tracefs). One lab at a time in a test
//! process: on cgroup v2 every lab caps in the one group `stallscope-lab`,
//! and two would each record the other's dirty limits as the originals.

use stallscope::cmd::lab::guards::DirtyLimits;
use stallscope::cmd::lab::state::{LabState, Step};
use stallscope::source::cgroup::{device_numbers, join_for_targets, CgroupJoin};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

static ONE_LAB: Mutex<()> = Mutex::new(());

pub struct TempLab {
    pub dir: PathBuf,
    _base: tempfile::TempDir,
    _one: MutexGuard<'static, ()>,
}

/// One filesystem of a lab, as `lab up` made it.
#[derive(Clone, Debug)]
pub struct LabFs {
    pub mount: PathBuf,
    /// The loop device, `/dev/loopN`.
    pub device: String,
    pub major: u32,
    pub minor: u32,
}

impl TempLab {
    /// `lab up` with `args` (besides `--dir`); panics with its stderr if
    /// it fails.
    pub fn up(args: &[&str]) -> TempLab {
        let one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
        let base = tempfile::tempdir_in("/var/tmp").unwrap();
        let dir = base.path().join("lab");
        super::run_ok(
            super::bin()
                .args(["lab", "up"])
                .args(args)
                .arg("--dir")
                .arg(&dir),
        );
        TempLab {
            dir,
            _base: base,
            _one: one,
        }
    }

    fn state(&self) -> LabState {
        LabState::load(&self.dir)
            .unwrap()
            .expect("the lab's state file")
    }

    /// The lab's filesystem of type `fstype`, from its state file.
    pub fn fs(&self, fstype: &str) -> LabFs {
        let (_, mount, device) = self
            .state()
            .mounts()
            .into_iter()
            .find(|(fs, _, _)| fs == fstype)
            .unwrap_or_else(|| panic!("no {fstype} in the lab at {}", self.dir.display()));
        let (major, minor) = device_numbers(&mount).expect("the lab mount's device");
        LabFs {
            mount,
            device,
            major,
            minor,
        }
    }

    /// On cgroup v2, where only the processes in the lab's group are
    /// capped: this test process joins the group (as `stallscope run`
    /// does for its targets), so what it writes and every process it
    /// starts from now on (servers, loads) are capped, as everyone is by
    /// the v1 root throttle. Back where it was on drop. None on v1, or
    /// when the lab caps nothing; panics when it caps in a v2 group this
    /// process could not join.
    pub fn join(&self, fs: &LabFs) -> Option<CgroupJoin> {
        let joined = join_for_targets(std::slice::from_ref(&fs.mount));
        if let Some(group) = self.state().group() {
            assert!(
                joined.is_some(),
                "this test process could not join the lab's group {}",
                group.display()
            );
        }
        joined
    }
}

/// The lab's cap on one device and its dirty limits lifted until dropped,
/// then set back as the lab made them: the cap on v1's root blkio throttle
/// or in v2's io.max of the lab's group, the dirty limits as they were
/// before `lab up`. For work before what a test measures (loading a
/// database), done as before any lab: at full speed, under the machine's
/// own dirty limits.
pub struct Lifted {
    file: PathBuf,
    back: String,
    dirty: Option<DirtyLimits>,
}

impl TempLab {
    /// Lifts the lab's cap on `fs` and its dirty limits (see [`Lifted`]).
    pub fn lifted(&self, fs: &LabFs) -> Lifted {
        use stallscope::source::cgroup;
        let (key, st) = (format!("{}:{}", fs.major, fs.minor), self.state());
        let (file, lift, back) = match st.group() {
            Some(group) => {
                let file = group.join("io.max");
                let text = std::fs::read_to_string(&file).unwrap();
                let cap = cgroup::io_max_wbps(&text, fs.major, fs.minor).expect("a cap");
                (file, format!("{key} wbps=max"), format!("{key} wbps={cap}"))
            }
            None => {
                let cap = stallscope::cmd::lab::guards::blkio_cap(fs.major, fs.minor).unwrap();
                let file = PathBuf::from(stallscope::cmd::lab::guards::BLKIO_WRITE_BPS);
                (file, format!("{key} 0"), format!("{key} {cap}"))
            }
        };
        let before_lab = st.steps.iter().find_map(|s| match s {
            Step::Dirty { original, .. } => Some(original.clone()),
            _ => None,
        });
        let dirty = before_lab.map(|original| {
            let lab = DirtyLimits::read().unwrap();
            original.write().unwrap();
            lab
        });
        std::fs::write(&file, lift).unwrap();
        Lifted { file, back, dirty }
    }
}

impl Drop for Lifted {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.file, &self.back) {
            eprintln!("could not set the lab's cap back ({}): {e}", self.back);
        }
        if let Some(d) = &self.dirty {
            if let Err(e) = d.write() {
                eprintln!("could not set the lab's dirty limits back: {e}");
            }
        }
    }
}

impl Drop for TempLab {
    fn drop(&mut self) {
        let _ = super::bin()
            .args(["lab", "down", "--force", "--dir"])
            .arg(&self.dir)
            .output();
    }
}
