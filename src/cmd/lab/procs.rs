//! Processes as the lab needs them: who holds a lab mount busy (an fd, its
//! cwd, its root or a mapped file under it), a process and all its
//! descendants (for `lab adopt`), and whether a recorded pid is still the
//! same process. Everything reads a given /proc so tests use fake trees.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use crate::knob::owner::{alive, entry, parse_stat, ProcEntry};

/// The pids under /proc.
fn pids(proc: &Path) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    let mut v: Vec<u32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// Every live process.
pub fn table(proc: &Path) -> Vec<ProcEntry> {
    pids(proc)
        .into_iter()
        .filter_map(|p| entry(proc, p))
        .collect()
}

/// `pid` and all its descendants in `table`, parents first.
pub fn family(pid: u32, table: &[ProcEntry]) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        let children: Vec<u32> = table
            .iter()
            .filter(|e| e.ppid == parent && e.pid != parent && !out.contains(&e.pid))
            .map(|e| e.pid)
            .collect();
        out.extend(children);
        i += 1;
    }
    out
}

/// Where a process found in the lab group goes back to: its own recorded
/// origin, else its nearest recorded ancestor's (a postmaster's children
/// forked after `adopt`), else None.
pub fn origin_of(
    pid: u32,
    parent: &HashMap<u32, u32>,
    recorded: &HashMap<u32, PathBuf>,
) -> Option<PathBuf> {
    let mut p = pid;
    for _ in 0..64 {
        if let Some(o) = recorded.get(&p) {
            return Some(o.clone());
        }
        p = *parent.get(&p)?;
    }
    None
}

/// A process holding a lab mount busy, and the first thing that does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    pub comm: String,
    /// e.g. "fd 5 /var/tmp/stallscope-lab/mnt/ext4/pg/base/1/1259", "cwd …".
    pub what: String,
}

/// The processes (other than `me`) using a path under one of `mounts`.
pub fn holders(proc: &Path, mounts: &[PathBuf], me: u32) -> Vec<Holder> {
    pids(proc)
        .into_iter()
        .filter(|&p| p != me)
        .filter_map(|pid| {
            let what = use_of(&proc.join(pid.to_string()), mounts)?;
            let comm = std::fs::read_to_string(proc.join(pid.to_string()).join("comm"))
                .map(|c| c.trim().to_string())
                .unwrap_or_else(|_| "?".into());
            Some(Holder { pid, comm, what })
        })
        .collect()
}

/// How one /proc/PID uses a path under `mounts`, if it does.
fn use_of(dir: &Path, mounts: &[PathBuf]) -> Option<String> {
    let under = |p: &Path| mounts.iter().any(|m| p.starts_with(m));
    for link in ["cwd", "root"] {
        if let Ok(t) = std::fs::read_link(dir.join(link)) {
            if under(&t) {
                return Some(format!("{link} {}", t.display()));
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(dir.join("fd")) {
        let mut fds: Vec<(u32, PathBuf)> = rd
            .filter_map(|e| {
                let e = e.ok()?;
                let n = e.file_name().to_str()?.parse().ok()?;
                Some((n, std::fs::read_link(e.path()).ok()?))
            })
            .collect();
        fds.sort();
        if let Some((n, t)) = fds.into_iter().find(|(_, t)| under(t)) {
            return Some(format!("fd {n} {}", t.display()));
        }
    }
    let maps = std::fs::read_to_string(dir.join("maps")).unwrap_or_default();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| under(Path::new(p)))
        .map(|p| format!("maps {p}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn stat(pid: u32, comm: &str, ppid: u32, start: u64) -> String {
        format!("{pid} ({comm}) S {ppid} 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 {start} 1000 10 18446744073709551615")
    }

    #[test]
    fn stat_lines_with_odd_comms() {
        let e = parse_stat(&stat(7, "post master) (x", 1, 12345)).unwrap();
        assert_eq!(
            (e.pid, e.ppid, e.comm.as_str(), e.state, e.start),
            (7, 1, "post master) (x", 'S', 12345)
        );
        assert_eq!(parse_stat("7 (x) S"), None);
    }

    fn entry(pid: u32, ppid: u32) -> ProcEntry {
        ProcEntry {
            pid,
            ppid,
            comm: "p".into(),
            state: 'S',
            start: 1,
        }
    }

    #[test]
    fn a_family_is_a_process_and_all_its_descendants() {
        let t = [
            entry(1, 0),
            entry(10, 1),
            entry(11, 10),
            entry(12, 11),
            entry(13, 1),
            entry(14, 10),
        ];
        assert_eq!(family(10, &t), [10, 11, 14, 12]);
        assert_eq!(family(13, &t), [13]);
    }

    #[test]
    fn origins_come_from_the_nearest_recorded_ancestor() {
        let parent = HashMap::from([(12, 11), (11, 10), (10, 1), (20, 1)]);
        let recorded = HashMap::from([(10, PathBuf::from("/cg/a")), (11, PathBuf::from("/cg/b"))]);
        assert_eq!(origin_of(12, &parent, &recorded), Some("/cg/b".into()));
        assert_eq!(origin_of(10, &parent, &recorded), Some("/cg/a".into()));
        assert_eq!(origin_of(20, &parent, &recorded), None);
    }

    /// A fake /proc: 100 has an fd under the mount, 101 its cwd, 102 a
    /// mapped file, 103 nothing there, 104 a mount whose name only starts
    /// alike (/mnt/ext4x), 105 is us.
    #[test]
    fn holders_are_named_with_what_they_hold() {
        let t = tempfile::tempdir().unwrap();
        let proc = t.path();
        let mnt = PathBuf::from("/lab/mnt/ext4");
        for (pid, comm) in [
            (100, "postgres"),
            (101, "sleep"),
            (102, "rocks"),
            (103, "bash"),
            (104, "other"),
            (105, "me"),
        ] {
            let d = proc.join(pid.to_string());
            std::fs::create_dir_all(d.join("fd")).unwrap();
            std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
            symlink("/", d.join("root")).unwrap();
            symlink("/home", d.join("cwd")).unwrap();
            symlink("/dev/null", d.join("fd/0")).unwrap();
        }
        symlink("/lab/mnt/ext4/pg/base/1/1259", proc.join("100/fd/7")).unwrap();
        symlink(
            "/lab/mnt/ext4/pg/base/1/1260 (deleted)",
            proc.join("100/fd/12"),
        )
        .unwrap();
        std::fs::remove_file(proc.join("101/cwd")).unwrap();
        symlink("/lab/mnt/ext4/work", proc.join("101/cwd")).unwrap();
        std::fs::write(
            proc.join("102/maps"),
            "7f00-7f10 r--s 00000000 07:00 12 /lab/mnt/ext4/db/000012.sst\n7f20-7f30 r-xp 0 08:01 5 /usr/lib/libc.so.6\n",
        )
        .unwrap();
        symlink("/lab/mnt/ext4x/f", proc.join("104/fd/3")).unwrap();
        symlink("/lab/mnt/ext4/f", proc.join("105/fd/3")).unwrap();
        let h = holders(proc, &[mnt], 105);
        let lines: Vec<String> = h
            .iter()
            .map(|h| format!("{} {} {}", h.pid, h.comm, h.what))
            .collect();
        assert_eq!(
            lines,
            [
                "100 postgres fd 7 /lab/mnt/ext4/pg/base/1/1259",
                "101 sleep cwd /lab/mnt/ext4/work",
                "102 rocks maps /lab/mnt/ext4/db/000012.sst",
            ]
        );
    }
}
