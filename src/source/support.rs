//! What this kernel gives stallscope and what it lacks, feature by
//! feature, with the reason and the fix: `probe` prints it as a table,
//! `run` and the dashboard as one line at start. Gathering reads /proc,
//! /sys and the tracefs events (`gather`); the rest is pure over `Support`.

use crate::source::cgroup::{Cgroups, Layout};
use crate::source::proc::ProcRoot;
use crate::source::trace::{TraceFeatures, HIDE_ENV};
use std::fmt::Write as _;

/// One feature: whether it works here, what it is or why not, and the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub what: &'static str,
    pub ok: bool,
    pub detail: String,
    pub fix: Option<String>,
}

/// Every feature, in the order a person reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Support {
    pub kernel: String,
    pub rows: Vec<Row>,
}

/// What was found on the machine, before it is worded.
#[derive(Clone, Debug)]
pub struct Facts {
    pub kernel: String,
    /// This kernel's events, or why tracing is off ("not root", …).
    pub tracing: Result<TraceFeatures, String>,
    /// /proc/pressure/io reads.
    pub psi: bool,
    /// /proc/pressure/io exists but reads EOPNOTSUPP (PSI built, off).
    pub psi_off: bool,
    /// bdi `max_bytes` (per-device dirty limits in bytes, 6.2+).
    pub bdi_bytes: bool,
    /// The cgroup layout, and how a write cap is applied or why not
    /// (None: not asked, as in a run, which joins the lab's cap by itself).
    pub cgroup: String,
    pub cap: Option<Result<String, String>>,
}

/// Reads what this machine gives; `tracing` is the caller's (starting a
/// trace session is the caller's business).
pub fn gather(
    root: &ProcRoot,
    tracing: Result<TraceFeatures, String>,
    cgroup: String,
    cap: Option<Result<String, String>>,
) -> Facts {
    let kernel = std::fs::read_to_string(root.proc.join("sys/kernel/osrelease"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let psi = std::fs::read_to_string(root.proc.join("pressure/io"));
    let psi_off = matches!(&psi, Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP));
    let bdi_bytes = std::fs::read_dir(root.sys.join("class/bdi"))
        .ok()
        .and_then(|mut d| d.next())
        .and_then(Result::ok)
        .is_some_and(|e| e.path().join("max_bytes").exists());
    Facts {
        kernel,
        tracing,
        psi: psi.is_ok(),
        psi_off,
        bdi_bytes,
        cgroup,
        cap,
    }
}

/// The cgroup layout in words: v2 only, v1, or both (hybrid), and where
/// the controllers that cap writes live.
pub fn describe_cgroups(cg: &Cgroups) -> String {
    let at = |p: &Option<std::path::PathBuf>| {
        p.as_ref()
            .map_or(String::new(), |p| format!(" at {}", p.display()))
    };
    match cg.layout {
        Layout::Unified => format!("v2 only (unified{})", at(&cg.v2_root)),
        Layout::Hybrid => format!(
            "hybrid: v1{}{} beside v2{}",
            if cg.v1_blkio.is_some() { " blkio" } else { "" },
            if cg.v1_memory { " memory" } else { "" },
            at(&cg.v2_root)
        ),
        Layout::V1 => format!(
            "v1 only{}",
            if cg.v1_blkio.is_some() {
                " (blkio)"
            } else {
                ""
            }
        ),
        Layout::None => "no cgroup filesystem mounted".into(),
    }
}

fn row(what: &'static str, ok: bool, detail: String, fix: Option<String>) -> Row {
    Row {
        what,
        ok,
        detail,
        fix,
    }
}

/// The fix for an event this kernel lacks or tracing that is off.
fn trace_fix(why: &str) -> String {
    if why == "not root" {
        "run as root (sudo)".into()
    } else if why.contains(HIDE_ENV) {
        format!("unset {HIDE_ENV}")
    } else if why.starts_with("tracefs not available") {
        "mount tracefs: mount -t tracefs nodev /sys/kernel/tracing".into()
    } else {
        "a newer kernel (see its history); stacks still name the wait".into()
    }
}

impl Facts {
    /// The features, worded.
    pub fn support(&self) -> Support {
        let mut rows = self.trace_rows();
        rows.push(self.psi_row());
        rows.push(row(
            "per-device dirty limits",
            self.bdi_bytes,
            if self.bdi_bytes {
                "bdi max_bytes, strict_limit".into()
            } else {
                "no bdi max_bytes/strict_limit (kernel before 6.2); max_ratio only".into()
            },
            (!self.bdi_bytes).then(|| "kernel 6.2+ for byte limits; max_ratio works before".into()),
        ));
        rows.push(row("cgroup layout", true, self.cgroup.clone(), None));
        match &self.cap {
            Some(Ok(how)) => rows.push(row("write cap", true, how.clone(), None)),
            Some(Err(why)) => rows.push(row("write cap", false, why.clone(), None)),
            None => {}
        }
        Support {
            kernel: self.kernel.clone(),
            rows,
        }
    }

    /// Scheduler timing, wake-up chains and each writeback event.
    fn trace_rows(&self) -> Vec<Row> {
        let f = match &self.tracing {
            Ok(f) => f,
            Err(why) => {
                let off = |what| {
                    row(
                        what,
                        false,
                        format!("tracing off: {why}"),
                        Some(trace_fix(why)),
                    )
                };
                return vec![
                    off("scheduler timing"),
                    off("wake-up chains"),
                    off("throttle evidence"),
                    off("page waits"),
                    off("flusher reasons"),
                    off("call boundaries"),
                ];
            }
        };
        let sched = f.sched();
        let sched_row = |what, ok_text: &str| match &sched {
            Ok(()) => row(what, true, ok_text.into(), None),
            Err(why) => row(what, false, why.clone(), Some(trace_fix(why))),
        };
        let event = |what, c: &Result<&'static str, String>, spec: &str| match c {
            Ok(name) => row(what, true, format!("writeback:{name}"), None),
            Err(why) => row(what, false, format!("{spec}: {why}"), Some(trace_fix(why))),
        };
        vec![
            sched_row("scheduler timing", "sched:sched_switch, sched:sched_waking"),
            sched_row(
                "wake-up chains",
                "sleeps in S and their wakers (observe mode)",
            ),
            event(
                "throttle evidence",
                &f.throttle,
                "writeback:balance_dirty_pages",
            ),
            event("page waits", &f.page_wait, "writeback:folio_wait_writeback"),
            event("flusher reasons", &f.flusher, "writeback:writeback_start"),
            match &f.calls {
                Ok(_) => row(
                    "call boundaries",
                    true,
                    "syscalls:sys_enter_*/sys_exit_* (a stall is one system call)".into(),
                    None,
                ),
                Err(why) => row(
                    "call boundaries",
                    false,
                    format!("syscalls:sys_enter_fdatasync: {why}; stalls are blocks < 1 ms apart"),
                    Some(trace_fix(why)),
                ),
            },
        ]
    }

    fn psi_row(&self) -> Row {
        if self.psi {
            return row("PSI", true, "/proc/pressure/io".into(), None);
        }
        let (detail, fix) = if self.psi_off {
            (
                "built but off (CONFIG_PSI_DEFAULT_DISABLED, e.g. RHEL 8, or psi=0)",
                "boot with psi=1",
            )
        } else {
            (
                "no /proc/pressure/io (kernel before 4.20 or without CONFIG_PSI)",
                "a kernel with CONFIG_PSI",
            )
        };
        row("PSI", false, detail.into(), Some(fix.into()))
    }
}

impl Support {
    /// The table `probe` prints: one line per feature, yes/no, what or
    /// why, and the fix.
    pub fn table(&self) -> String {
        let mut s = String::new();
        for r in &self.rows {
            let _ = write!(
                s,
                "  {:<24} {:<3}  {}",
                r.what,
                if r.ok { "yes" } else { "no" },
                r.detail
            );
            if let Some(fix) = &r.fix {
                let _ = write!(s, " \u{2192} {fix}");
            }
            s.push('\n');
        }
        s
    }

    /// One line for the start of a run: the kernel, then what is missing
    /// (or that nothing is).
    pub fn one_line(&self) -> String {
        let lacks: Vec<&str> = self.rows.iter().filter(|r| !r.ok).map(|r| r.what).collect();
        if lacks.is_empty() {
            format!("kernel {}: every feature available", self.kernel)
        } else {
            format!(
                "kernel {}: without {} (`stallscope probe` says why and the fix)",
                self.kernel,
                lacks.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(tracing: Result<TraceFeatures, String>) -> Facts {
        Facts {
            kernel: "4.18.0".into(),
            tracing,
            psi: false,
            psi_off: true,
            bdi_bytes: false,
            cgroup: "v2 (unified)".into(),
            cap: Some(Ok("io.max in cgroup stallscope-lab".into())),
        }
    }

    #[test]
    fn cgroup_layouts_are_told_apart() {
        let v2 = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            describe_cgroups(&Cgroups::parse(v2)),
            "v2 only (unified at /sys/fs/cgroup)"
        );
        let hybrid = "31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                      35 30 0:31 / /sys/fs/cgroup/blkio rw - cgroup cgroup rw,blkio\n\
                      36 30 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(
            describe_cgroups(&Cgroups::parse(hybrid)),
            "hybrid: v1 blkio memory beside v2 at /sys/fs/cgroup/unified"
        );
        assert_eq!(
            describe_cgroups(&Cgroups::parse("")),
            "no cgroup filesystem mounted"
        );
    }

    #[test]
    fn not_root_turns_every_trace_row_off_with_the_fix() {
        let s = facts(Err("not root".into())).support();
        let off: Vec<&Row> = s.rows.iter().filter(|r| !r.ok).collect();
        assert!(off.len() >= 7, "{s:?}");
        assert!(
            s.table().contains(
                "page waits               no   tracing off: not root \u{2192} run as root (sudo)"
            ),
            "{}",
            s.table()
        );
        assert!(
            s.table()
                .contains("PSI                      no   built but off"),
            "{}",
            s.table()
        );
        assert!(s.table().contains("\u{2192} boot with psi=1"));
        let line = s.one_line();
        assert!(
            line.starts_with("kernel 4.18.0: without scheduler timing, wake-up chains"),
            "{line}"
        );
        assert!(!line.contains("cgroup layout"), "{line}");
    }
}
