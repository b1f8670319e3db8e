//! The machine's registry of knob changes: `knobs.json` in
//! /run/stallscope (`STALLSCOPE_KNOB_DIR` elsewhere), every operation
//! under an exclusive `flock` of `knobs.lock` beside it, so processes
//! never interleave. Per knob: the true original, read by the first to
//! change it, and a stack of holds (owner, the value it set, what it is
//! for). The value in force is the top hold's, or the original when none
//! is left (then the entry goes). A hold is saved before the knob is
//! written (temp file, fsync, rename); a release or a recovery writes
//! first and saves after, so a crash between the two repeats the write,
//! never loses it. /run is emptied at boot, as the knobs are reset.

use super::kind::{Knob, Value};
use super::owner::Owner;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

pub const DEFAULT_DIR: &str = "/run/stallscope";
/// Names another directory for the registry (tests).
pub const DIR_ENV: &str = "STALLSCOPE_KNOB_DIR";
const STATE: &str = "knobs.json";
const LOCK: &str = "knobs.lock";

/// One change a live owner keeps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub owner: Owner,
    pub value: Value,
    /// e.g. "lab up --dir /var/tmp/x", "trial pid 123 on the lab at …".
    pub what: String,
}

/// A knob someone holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub knob: Knob,
    pub original: Value,
    /// Bottom first; the last is in force.
    pub holds: Vec<Hold>,
}

impl Entry {
    /// The value in force.
    pub fn effective(&self) -> &Value {
        self.holds.last().map_or(&self.original, |h| &h.value)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct State {
    version: u32,
    knobs: Vec<Entry>,
}

impl State {
    fn find(&self, knob: &Knob) -> Option<usize> {
        self.knobs.iter().position(|e| e.knob == *knob)
    }
}

/// An exclusive (or shared) flock, let go when the file closes. flock
/// locks belong to the open file, so two opens of one process exclude
/// each other too.
pub(crate) struct Lock(#[allow(dead_code)] File);

fn flock(f: &File, op: i32) -> std::io::Result<()> {
    loop {
        // SAFETY: flock on an open descriptor has no memory preconditions.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What dropping holds from an entry did.
enum Dropped {
    None,
    /// Holds below the top went; the value in force stays.
    Below,
    /// The top went and the value now in force was written; the top.
    Top(Hold),
}

/// Removes the holds `gone` picks from `e`. When the top one goes, the
/// value then in force is written first (nothing to write when the knob's
/// file is gone: its device went); a failed write leaves `e` as it was.
fn drop_from(e: &mut Entry, gone: impl Fn(&Hold) -> bool) -> anyhow::Result<Dropped> {
    let kept: Vec<Hold> = e.holds.iter().filter(|h| !gone(h)).cloned().collect();
    if kept.len() == e.holds.len() {
        return Ok(Dropped::None);
    }
    let top = e.holds.last().filter(|h| gone(h)).cloned();
    if top.is_some() {
        let now = kept.last().map_or(&e.original, |h| &h.value);
        if e.knob.file_path().exists() {
            e.knob.write(now)?;
        }
    }
    e.holds = kept;
    Ok(top.map_or(Dropped::Below, Dropped::Top))
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registry {
    dir: PathBuf,
}

impl Registry {
    pub fn at(dir: impl Into<PathBuf>) -> Registry {
        Registry { dir: dir.into() }
    }

    /// The machine's: `STALLSCOPE_KNOB_DIR`, else /run/stallscope.
    pub fn machine() -> Registry {
        let dir = std::env::var_os(DIR_ENV).filter(|d| !d.is_empty());
        Registry::at(dir.map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The state file.
    pub fn file(&self) -> PathBuf {
        self.dir.join(STATE)
    }

    /// The exclusive lock, the directory made if need be.
    pub(crate) fn lock(&self) -> anyhow::Result<Lock> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("making {}", self.dir.display()))?;
        self.open_lock(true)?
            .ok_or_else(|| anyhow::anyhow!("{} went away", self.dir.display()))
    }

    /// The lock, exclusive or shared (for a read); None when there is no
    /// registry (nothing held).
    fn open_lock(&self, exclusive: bool) -> anyhow::Result<Option<Lock>> {
        let path = self.dir.join(LOCK);
        let f = match std::fs::OpenOptions::new()
            .read(true)
            .write(exclusive)
            .create(exclusive && self.dir.is_dir())
            .truncate(false)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
        };
        let op = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        flock(&f, op).with_context(|| format!("locking {}", path.display()))?;
        Ok(Some(Lock(f)))
    }

    fn load(&self) -> anyhow::Result<State> {
        match std::fs::read_to_string(self.file()) {
            Ok(t) => serde_json::from_str(&t)
                .with_context(|| format!("{} is damaged", self.file().display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", self.file().display())),
        }
    }

    /// Temp file, fsync, rename: the file is the old one or the new one.
    fn save(&self, st: &State) -> anyhow::Result<()> {
        let tmp = self.dir.join(format!("{STATE}.tmp"));
        let st = State {
            version: 1,
            knobs: st.knobs.clone(),
        };
        let mut f = File::create(&tmp).with_context(|| format!("writing {}", tmp.display()))?;
        f.write_all(serde_json::to_string_pretty(&st)?.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.file())
            .with_context(|| format!("renaming {} into place", tmp.display()))
    }

    /// Sets `knob` to `value` for `owner` (its hold on top; a hold it had
    /// there before is replaced). Dead owners' holds go first. The hold is
    /// saved before the knob is written; a failed write takes it out again
    /// (and writes back what was in force) and returns the error.
    pub fn set(&self, knob: &Knob, value: &Value, owner: &Owner, what: &str) -> anyhow::Result<()> {
        let _l = self.lock()?;
        let mut st = self.load()?;
        let (lines, changed) = drop_dead(&mut st);
        for l in lines {
            eprintln!("stallscope: {l}");
        }
        if changed {
            self.save(&st)?;
        }
        let before = st.clone();
        let i = match st.find(knob) {
            Some(i) => i,
            None => {
                let original = knob.read()?;
                st.knobs.push(Entry {
                    knob: knob.clone(),
                    original,
                    holds: Vec::new(),
                });
                st.knobs.len() - 1
            }
        };
        let e = &mut st.knobs[i];
        let was = e.effective().clone();
        e.holds.retain(|h| h.owner != *owner);
        e.holds.push(Hold {
            owner: owner.clone(),
            value: value.clone(),
            what: what.to_string(),
        });
        self.save(&st)?;
        if let Err(err) = knob.write(value) {
            let _ = knob.write(&was);
            self.save(&before)?;
            return Err(err.into());
        }
        Ok(())
    }

    /// Drops `owner`'s hold on `knob`; when it was in force, the value
    /// below it (another owner's, else the original) is written back.
    pub fn release(&self, knob: &Knob, owner: &Owner) -> anyhow::Result<()> {
        self.drop_holds(Some(knob), owner)
    }

    /// Drops every hold of `owner`, as `release` does each.
    pub fn release_all(&self, owner: &Owner) -> anyhow::Result<()> {
        self.drop_holds(None, owner)
    }

    fn drop_holds(&self, knob: Option<&Knob>, owner: &Owner) -> anyhow::Result<()> {
        let Some(_l) = self.open_lock(true)? else {
            return Ok(());
        };
        let mut st = self.load()?;
        let mut first_error = None;
        let mut changed = false;
        for e in st.knobs.iter_mut() {
            if knob.is_some_and(|k| *k != e.knob) {
                continue;
            }
            match drop_from(e, |h| h.owner == *owner) {
                Ok(Dropped::None) => {}
                Ok(_) => changed = true,
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        st.knobs.retain(|e| !e.holds.is_empty());
        if changed {
            self.save(&st)?;
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Drops the holds of dead owners and puts the value then in force
    /// back; one line per knob put back (or that could not be).
    pub fn recover(&self) -> anyhow::Result<Vec<String>> {
        let Some(_l) = self.open_lock(true)? else {
            return Ok(Vec::new());
        };
        let mut st = self.load()?;
        let (lines, changed) = drop_dead(&mut st);
        if changed {
            self.save(&st)?;
        }
        Ok(lines)
    }

    /// Every knob held now, for `lab status`.
    pub fn entries(&self) -> anyhow::Result<Vec<Entry>> {
        let _l = self.open_lock(false)?;
        Ok(self.load()?.knobs)
    }
}

/// Drops dead owners' holds from every entry (writing what is then in
/// force), and the entries left without one: what it said, and whether
/// the state changed.
fn drop_dead(st: &mut State) -> (Vec<String>, bool) {
    let mut lines = Vec::new();
    let mut changed = false;
    for e in st.knobs.iter_mut() {
        match drop_from(e, |h| !h.owner.alive()) {
            Ok(Dropped::None) => {}
            Ok(Dropped::Below) => changed = true,
            Ok(Dropped::Top(h)) => {
                changed = true;
                lines.push(format!(
                    "put back {}, left by {} ({})",
                    e.knob.show(e.effective()),
                    h.owner.gone(),
                    h.what
                ));
            }
            Err(err) => lines.push(format!(
                "could not put back {} ({err:#}); the next stallscope run as root tries again",
                e.knob.name()
            )),
        }
    }
    st.knobs.retain(|e| !e.holds.is_empty());
    (lines, changed)
}
