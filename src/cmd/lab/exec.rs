//! `lab exec -- CMD…` and `lab adopt PID`: other programs' writes under the
//! lab's cap. On cgroup v2 only processes in the lab's group are capped, so
//! `exec` starts its command there and `adopt` moves a running server there
//! with all its processes; each move is recorded (pid, start time, the
//! group it left) so `lab down` moves them back. On v1 the root group's
//! throttle caps everyone already: both say so and change nothing.

use super::procs;
use super::state::{LabState, Step};
use crate::base::error::UsageError;
use crate::source::cgroup::{self, Cgroups};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};

/// The lab's v2 group, or None after saying why nothing needs moving.
fn lab_group(dir: &Path, what: &str) -> anyhow::Result<Option<(LabState, PathBuf, PathBuf)>> {
    let st = LabState::load(dir)?.ok_or_else(|| {
        UsageError::new(format!(
            "no lab at {}; run `stallscope lab up` first",
            dir.display()
        ))
    })?;
    let Some(group) = st.group().map(Path::to_path_buf) else {
        let why = if st.cap_method.is_some() {
            "the lab caps through cgroup v1's root blkio group, which holds every process: nothing to move"
        } else {
            "the lab has no write cap (--cap 0): nothing to move"
        };
        eprintln!("stallscope: {why}; {what}");
        return Ok(None);
    };
    let root = Cgroups::detect()
        .v2_root
        .ok_or_else(|| anyhow::anyhow!("cgroup v2 is not mounted any more"))?;
    Ok(Some((st, group, root)))
}

/// `lab exec`: runs `argv` in the lab's group, returns its exit code
/// (128+N for a signal N, as a shell does).
pub fn exec(dir: &Path, argv: &[String]) -> anyhow::Result<i32> {
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| UsageError::new("lab exec needs a command: lab exec -- CMD ARGS"))?;
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args);
    let Some((mut st, group, root)) = lab_group(dir, &format!("running {prog} as is"))? else {
        return Ok(code(cmd.status()?));
    };
    super::checks::need_root("exec")?;
    let from = cgroup::group_of(Path::new("/proc"), &root, std::process::id())?;
    let procs_file = std::fs::OpenOptions::new()
        .write(true)
        .open(group.join("cgroup.procs"))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&procs_file);
    // SAFETY: between fork and exec the child only calls write(2), which is
    // async-signal-safe; "0" moves the writing process itself.
    unsafe {
        cmd.pre_exec(move || {
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| anyhow::anyhow!("{prog}: {e}"))?;
    drop(procs_file);
    let start = procs::entry(Path::new("/proc"), child.id()).map_or(0, |e| e.start);
    st.push(
        dir,
        Step::Moved {
            pid: child.id(),
            start,
            from,
        },
    )?;
    eprintln!(
        "stallscope: {prog} (pid {}) runs in {}",
        child.id(),
        group.display()
    );
    Ok(code(child.wait()?))
}

fn code(s: std::process::ExitStatus) -> i32 {
    s.code().or(s.signal().map(|n| 128 + n)).unwrap_or(1)
}

/// `lab adopt`: moves `pid` and all its descendants into the lab's group.
pub fn adopt(dir: &Path, pid: u32) -> anyhow::Result<()> {
    let proc = Path::new("/proc");
    let Some(top) = procs::entry(proc, pid) else {
        return Err(UsageError::new(format!("lab adopt {pid}: no such process")).into());
    };
    if pid <= 2 || pid == std::process::id() {
        return Err(
            UsageError::new(format!("lab adopt {pid}: not that one ({})", top.comm)).into(),
        );
    }
    let Some((mut st, group, root)) = lab_group(dir, &format!("{} stays where it is", top.comm))?
    else {
        return Ok(());
    };
    super::checks::need_root("adopt")?;
    let mut moved: Vec<u32> = Vec::new();
    // Again while it forks: a child born in the old group during the walk
    // is found on the next pass.
    for _ in 0..3 {
        let table = procs::table(proc);
        let fresh: Vec<&procs::ProcEntry> = procs::family(pid, &table)
            .into_iter()
            .filter(|p| !moved.contains(p))
            .filter_map(|p| table.iter().find(|e| e.pid == p))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for e in fresh {
            let Ok(from) = cgroup::group_of(proc, &root, e.pid) else {
                continue; // gone meanwhile
            };
            if from == group {
                moved.push(e.pid);
                continue;
            }
            st.push(
                dir,
                Step::Moved {
                    pid: e.pid,
                    start: e.start,
                    from,
                },
            )?;
            cgroup::move_pid(&group, e.pid)?;
            moved.push(e.pid);
        }
    }
    eprintln!(
        "stallscope: {} process{} of pid {pid} ({}) now in {}; `lab down` moves them back",
        moved.len(),
        if moved.len() == 1 { "" } else { "es" },
        top.comm,
        group.display()
    );
    Ok(())
}
