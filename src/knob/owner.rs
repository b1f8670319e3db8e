//! Who holds a knob, and whether it is still there: a process, named by
//! its pid and its start time (so a reused pid is not taken for it), or a
//! lab, alive while its state file is.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A lab's state file in its directory (`cmd::lab::state`).
pub const LAB_STATE_FILE: &str = "state.json";

/// One process from /proc/PID/stat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcEntry {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub state: char,
    /// Start time in clock ticks since boot: with the pid, names a process.
    pub start: u64,
}

/// Parses a stat line (the comm may hold spaces and parentheses).
pub fn parse_stat(line: &str) -> Option<ProcEntry> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let rest: Vec<&str> = line[close + 1..].split_whitespace().collect();
    // state ppid ... starttime is field 22 of the line, 20 after the comm.
    Some(ProcEntry {
        pid: line[..open].trim().parse().ok()?,
        comm: line.get(open + 1..close)?.to_string(),
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        start: rest.get(19)?.parse().ok()?,
    })
}

/// The process `pid`, when it exists and is not a zombie.
pub fn entry(proc: &Path, pid: u32) -> Option<ProcEntry> {
    let text = std::fs::read_to_string(proc.join(pid.to_string()).join("stat")).ok()?;
    parse_stat(&text).filter(|e| e.state != 'Z')
}

/// Whether `pid` is still the process that started at `start`.
pub fn alive(proc: &Path, pid: u32, start: u64) -> bool {
    entry(proc, pid).is_some_and(|e| e.start == start)
}

/// Who holds a knob.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Owner {
    Process {
        pid: u32,
        start: u64,
    },
    /// A lab, by its directory (absolute, links resolved).
    Lab {
        dir: PathBuf,
    },
}

impl Owner {
    /// This process.
    pub fn this_process() -> Owner {
        let pid = std::process::id();
        Owner::Process {
            pid,
            start: entry(Path::new("/proc"), pid).map_or(0, |e| e.start),
        }
    }

    /// Process `pid` as it is now; None when there is none.
    pub fn process(pid: u32) -> Option<Owner> {
        entry(Path::new("/proc"), pid).map(|e| Owner::Process {
            pid,
            start: e.start,
        })
    }

    /// The lab at `dir`, named the same whichever way the path is written.
    pub fn lab(dir: &Path) -> Owner {
        let dir = std::fs::canonicalize(dir)
            .or_else(|_| std::path::absolute(dir))
            .unwrap_or_else(|_| dir.to_path_buf());
        Owner::Lab { dir }
    }

    pub fn alive(&self) -> bool {
        match self {
            Owner::Process { pid, start } => alive(Path::new("/proc"), *pid, *start),
            Owner::Lab { dir } => dir.join(LAB_STATE_FILE).exists(),
        }
    }

    /// "pid 123", "the lab at /var/tmp/x".
    pub fn describe(&self) -> String {
        match self {
            Owner::Process { pid, .. } => format!("pid {pid}"),
            Owner::Lab { dir } => format!("the lab at {}", dir.display()),
        }
    }

    /// Why it is taken for dead: "pid 123, which exited".
    pub fn gone(&self) -> String {
        match self {
            Owner::Process { pid, .. } => format!("pid {pid}, which exited"),
            Owner::Lab { dir } => format!("the lab at {}, whose state file is gone", dir.display()),
        }
    }
}
