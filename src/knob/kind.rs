//! The knobs, each with how its value is read and written. Paths are part
//! of a knob, so tests use plain files standing in for /proc/sys and /sys.

use crate::base::units::ByteSize;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// Where the vm sysctls are.
pub const VM: &str = "/proc/sys/vm";
/// The root blkio group's write throttle (cgroup v1).
pub const BLKIO_WRITE_BPS: &str = "/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device";

/// The vm dirty limits' sysctls, bytes and ratio of each pair.
const DIRTY: [&str; 4] = [
    "vm.dirty_bytes",
    "vm.dirty_ratio",
    "vm.dirty_background_bytes",
    "vm.dirty_background_ratio",
];

/// The vm dirty limits. Writing `*_bytes` zeroes the matching `*_ratio` and
/// vice versa, so both of a pair are saved and the non-zero one restored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirtyLimits {
    pub dirty_bytes: u64,
    pub dirty_ratio: u64,
    pub background_bytes: u64,
    pub background_ratio: u64,
}

fn read_text(p: &Path) -> io::Result<String> {
    std::fs::read_to_string(p)
        .map(|t| t.trim().to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("reading {}: {e}", p.display())))
}

fn write_text(p: &Path, text: &str) -> io::Result<()> {
    std::fs::write(p, text).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing \"{text}\" to {}: {e}", p.display()),
        )
    })
}

fn read_u64(p: &Path) -> io::Result<u64> {
    read_text(p)?
        .parse()
        .map_err(|e| io::Error::other(format!("{}: {e}", p.display())))
}

impl DirtyLimits {
    /// This machine's.
    pub fn read() -> io::Result<DirtyLimits> {
        Self::read_in(Path::new(VM))
    }

    /// From the files in `dir` (/proc/sys/vm, or a test's stand-ins).
    pub fn read_in(dir: &Path) -> io::Result<DirtyLimits> {
        let v = |n: &str| read_u64(&dir.join(n));
        Ok(DirtyLimits {
            dirty_bytes: v("dirty_bytes")?,
            dirty_ratio: v("dirty_ratio")?,
            background_bytes: v("dirty_background_bytes")?,
            background_ratio: v("dirty_background_ratio")?,
        })
    }

    pub fn write(&self) -> io::Result<()> {
        self.write_in(Path::new(VM))
    }

    /// The non-zero one of each pair (the ratio when both are 0).
    pub fn write_in(&self, dir: &Path) -> io::Result<()> {
        let w = |n: &str, v: u64| write_text(&dir.join(n), &v.to_string());
        // Background first when lowering, so it never exceeds the hard limit.
        if self.background_bytes > 0 {
            w("dirty_background_bytes", self.background_bytes)?;
        } else {
            w("dirty_background_ratio", self.background_ratio)?;
        }
        if self.dirty_bytes > 0 {
            w("dirty_bytes", self.dirty_bytes)
        } else {
            w("dirty_ratio", self.dirty_ratio)
        }
    }

    /// These limits with sysctl `name` (one of the four) set to `value`
    /// and the other of its pair zeroed, as the kernel does; None for
    /// another name.
    pub fn with(&self, name: &str, value: u64) -> Option<DirtyLimits> {
        let mut d = self.clone();
        match name {
            "vm.dirty_bytes" => (d.dirty_bytes, d.dirty_ratio) = (value, 0),
            "vm.dirty_ratio" => (d.dirty_bytes, d.dirty_ratio) = (0, value),
            "vm.dirty_background_bytes" => (d.background_bytes, d.background_ratio) = (value, 0),
            "vm.dirty_background_ratio" => (d.background_bytes, d.background_ratio) = (0, value),
            _ => return None,
        }
        Some(d)
    }

    /// The one of each pair in force: "vm.dirty_bytes=268435456
    /// vm.dirty_background_bytes=67108864".
    pub fn describe(&self) -> String {
        let pair = |bytes: u64, ratio: u64, b: &str, r: &str| {
            if bytes > 0 {
                format!("vm.{b}={bytes}")
            } else {
                format!("vm.{r}={ratio}")
            }
        };
        format!(
            "{} {}",
            pair(
                self.dirty_bytes,
                self.dirty_ratio,
                "dirty_bytes",
                "dirty_ratio"
            ),
            pair(
                self.background_bytes,
                self.background_ratio,
                "dirty_background_bytes",
                "dirty_background_ratio"
            )
        )
    }
}

/// `/proc/sys/vm/dirty_bytes` for `vm.dirty_bytes`.
pub fn sysctl_path(name: &str) -> PathBuf {
    Path::new("/proc/sys").join(name.replace('.', "/"))
}

/// The cap a v1 throttle file (`MAJ:MIN BPS` lines) sets; 0 for none.
pub fn v1_wbps(text: &str, major: u32, minor: u32) -> u64 {
    let key = format!("{major}:{minor}");
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

/// One knob. Two changes to the same knob are two holds on one entry of
/// the registry, so a knob is named the same way by everyone who changes
/// it (the constructors below).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Knob {
    /// The four vm dirty limits in `dir` (/proc/sys/vm) as one knob:
    /// writing one of a bytes/ratio pair zeroes the other.
    Dirty { dir: PathBuf },
    /// A plain file (/proc/sys/…, /sys/…); its value is its trimmed text.
    File { path: PathBuf },
    /// The v1 blkio write cap of one device in a throttle file.
    Blkio {
        file: PathBuf,
        major: u32,
        minor: u32,
    },
    /// A controller in a v2 cgroup.subtree_control file, on or off.
    Controller { file: PathBuf, name: String },
}

/// A knob's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Value {
    Dirty(DirtyLimits),
    /// A plain file's trimmed text.
    Text(String),
    /// Text written to another file that sets the knob's (a bdi's
    /// `max_bytes` sets its `max_ratio_fine`, which is read back).
    Via {
        file: PathBuf,
        text: String,
    },
    /// A write cap, bytes/s; 0 for none.
    Bps(u64),
    /// A controller enabled or not.
    On(bool),
}

impl Knob {
    /// This machine's vm dirty limits.
    pub fn dirty() -> Knob {
        Knob::Dirty { dir: VM.into() }
    }

    /// A sysctl by name: the dirty limits are one knob, others their file.
    pub fn sysctl(name: &str) -> Knob {
        if DIRTY.contains(&name) {
            Knob::dirty()
        } else {
            Knob::file(&sysctl_path(name))
        }
    }

    /// A plain file, by its real path (a /sys/class link and its target
    /// are one knob).
    pub fn file(path: &Path) -> Knob {
        Knob::File {
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
        }
    }

    /// The root blkio group's write cap on MAJ:MIN.
    pub fn blkio(major: u32, minor: u32) -> Knob {
        Knob::Blkio {
            file: BLKIO_WRITE_BPS.into(),
            major,
            minor,
        }
    }

    /// Controller `name` in the subtree_control `file`.
    pub fn controller(file: &Path, name: &str) -> Knob {
        Knob::Controller {
            file: file.to_path_buf(),
            name: name.to_string(),
        }
    }

    /// The file the knob is read from (whether it is still there).
    pub fn file_path(&self) -> &Path {
        match self {
            Knob::Dirty { dir } => dir,
            Knob::File { path } => path,
            Knob::Blkio { file, .. } | Knob::Controller { file, .. } => file,
        }
    }

    pub fn read(&self) -> io::Result<Value> {
        Ok(match self {
            Knob::Dirty { dir } => Value::Dirty(DirtyLimits::read_in(dir)?),
            Knob::File { path } => Value::Text(read_text(path)?),
            Knob::Blkio { file, major, minor } => {
                Value::Bps(v1_wbps(&read_text(file)?, *major, *minor))
            }
            Knob::Controller { file, name } => {
                Value::On(read_text(file)?.split_whitespace().any(|c| c == name))
            }
        })
    }

    pub fn write(&self, v: &Value) -> io::Result<()> {
        match (self, v) {
            (Knob::Dirty { dir }, Value::Dirty(d)) => d.write_in(dir),
            (Knob::File { path }, Value::Text(t)) => write_text(path, t),
            (Knob::File { .. }, Value::Via { file, text }) => write_text(file, text),
            (Knob::Blkio { file, major, minor }, Value::Bps(b)) => {
                write_text(file, &format!("{major}:{minor} {b}"))
            }
            (Knob::Controller { file, name }, Value::On(on)) => {
                write_text(file, &format!("{}{name}", if *on { '+' } else { '-' }))
            }
            (k, v) => Err(io::Error::other(format!(
                "{}: a value of another kind ({v:?})",
                k.name()
            ))),
        }
    }

    /// Its name for messages: "vm dirty limits", "vm.dirty_expire_centisecs",
    /// a path, "blkio write cap on 7:3", "controller io in …".
    pub fn name(&self) -> String {
        match self {
            Knob::Dirty { dir } if dir == Path::new(VM) => "vm dirty limits".into(),
            Knob::Dirty { dir } => format!("dirty limits in {}", dir.display()),
            Knob::File { path } => match path.strip_prefix("/proc/sys") {
                Ok(rel) => rel.to_string_lossy().replace('/', "."),
                Err(_) => path.display().to_string(),
            },
            Knob::Blkio { major, minor, .. } => format!("blkio write cap on {major}:{minor}"),
            Knob::Controller { file, name } => {
                format!("controller {name} in {}", file.display())
            }
        }
    }

    /// The knob at `v`: "vm.dirty_ratio=20 vm.dirty_background_ratio=10",
    /// "/sys/…/strict_limit=1", "blkio write cap on 7:3=none".
    pub fn show(&self, v: &Value) -> String {
        match v {
            Value::Dirty(d) => d.describe(),
            Value::Via { file, text } => format!("{}={text}", file.display()),
            v => format!("{}={}", self.name(), v.text()),
        }
    }
}

impl Value {
    /// The value alone: "1", "20MiB/s", "none", "on", the dirty limits.
    pub fn text(&self) -> String {
        match self {
            Value::Dirty(d) => d.describe(),
            Value::Text(t) => t.clone(),
            Value::Via { file, text } => format!("{text} (written to {})", file.display()),
            Value::Bps(0) => "none".into(),
            Value::Bps(b) => format!("{}/s", ByteSize(*b)),
            Value::On(on) => (if *on { "on" } else { "off" }).into(),
        }
    }
}
