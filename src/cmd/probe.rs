//! `stallscope probe`: what this machine lets us see, and why not. Gathering
//! (`gather`) is separate from the text (`render`) so the wording is tested
//! on a fixed report.

use crate::model::snapshot::TargetMeta;
use crate::session::default_target;
use crate::source::mounts::describe;
use crate::source::proc as kproc;
use crate::source::proc::{BdiSettings, DirtySysctls, ProcRoot};
use crate::source::support::{self, Support};
use crate::source::trace::TraceSession;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One target as probed.
#[derive(Clone, Debug)]
pub struct TargetProbe {
    pub meta: TargetMeta,
    /// Kernel device name and its bdi, or why there is no block device.
    pub device: Result<(String, String), String>,
    pub bdi: Option<BdiSettings>,
    /// Write cap on the device for our writers, bytes/s (0 = none): the v1
    /// root throttle, or io.max on our cgroup, its ancestors or the lab's.
    pub cap_bps: Option<u64>,
    /// Whether our writers could work here; Err says why not.
    pub writable: Result<(), String>,
}

#[derive(Clone, Debug)]
pub struct Probe {
    pub kernel: String,
    pub root: bool,
    /// What this kernel gives, feature by feature.
    pub support: Support,
    pub sysctls: Option<DirtySysctls>,
    pub thresh_kib: Option<u64>,
    pub bg_thresh_kib: Option<u64>,
    pub dirty_kib: Option<u64>,
    pub targets: Vec<TargetProbe>,
}

pub fn gather(targets: &[PathBuf]) -> Probe {
    let root = ProcRoot::default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    // SAFETY: geteuid has no preconditions.
    let is_root = unsafe { libc::geteuid() } == 0;
    let tracing = TraceSession::start(None).map(|t| t.features().clone());
    let support = support::gather(
        &root,
        tracing,
        support::describe_cgroups(&crate::source::cgroup::Cgroups::detect()),
        Some(crate::cmd::lab::cap::detect().map(|m| m.describe())),
    )
    .support();
    let vm = kproc::read_vmstat(&root).ok();
    let page = kproc::page_kib();
    let mut paths = targets.to_vec();
    if paths.is_empty() {
        paths.push(default_target());
    }
    Probe {
        kernel,
        root: is_root,
        support,
        sysctls: kproc::read_dirty_sysctls(&root).ok(),
        thresh_kib: vm
            .as_ref()
            .and_then(|v| v.nr_dirty_threshold)
            .map(|p| p * page),
        bg_thresh_kib: vm
            .as_ref()
            .and_then(|v| v.nr_dirty_background_threshold)
            .map(|p| p * page),
        dirty_kib: kproc::read_meminfo(&root).ok().and_then(|m| m.dirty_kib),
        targets: paths.iter().map(|p| probe_target(&root, p)).collect(),
    }
}

fn probe_target(root: &ProcRoot, p: &Path) -> TargetProbe {
    let dev = kproc::resolve_device(root, p);
    let bdi = dev
        .as_ref()
        .ok()
        .and_then(|d| kproc::read_bdi(root, d).ok());
    let cap_bps = dev
        .as_ref()
        .ok()
        .map(|d| crate::source::cgroup::write_cap(d.major, d.minor).unwrap_or(0));
    TargetProbe {
        meta: describe(p),
        device: dev.and_then(|d| {
            let bdi = kproc::bdi_name(root, &d).map_err(|e| e.to_string())?;
            Ok((d.name, bdi))
        }),
        bdi,
        cap_bps,
        writable: crate::source::scratch::check_writable(p),
    }
}

fn mib(kib: u64) -> u64 {
    kib / 1024
}

fn opt(v: Option<u64>) -> String {
    v.map_or("?".into(), |v| v.to_string())
}

/// The one-line verdict for a target.
pub fn verdict(p: &Probe, t: &TargetProbe) -> String {
    let mut v = verdict_of_device(p, t);
    if let Err(why) = &t.writable {
        let _ = write!(
            v,
            "; {why}, so stallscope's writers cannot run here (observe mode still works)"
        );
    }
    v
}

fn verdict_of_device(p: &Probe, t: &TargetProbe) -> String {
    let (name, _) = match &t.device {
        Ok(d) => d.clone(),
        Err(why) => return format!("{why}; stalls here are not a disk's"),
    };
    let mut v = format!("{} on {name}", t.meta.fs);
    if let (Some(th), Some(bg)) = (p.thresh_kib, p.bg_thresh_kib) {
        let _ = write!(
            v,
            ": throttling starts at {} MiB dirty (hard limit {} MiB)",
            mib((th + bg) / 2),
            mib(th)
        );
    }
    if let Some(b) = &t.bdi {
        if b.strict_limit == Some(1) {
            v.push_str("; bdi strict_limit on");
        }
        // max_bytes mirrors max_ratio on new kernels; only a lowered ratio is news.
        if let Some(r) = b.max_ratio.filter(|&r| r < 100) {
            let _ = write!(v, "; bdi max_ratio {r}%");
        }
        if b.stable_pages_required == Some(1) {
            v.push_str("; stable writes (rewriting a page under writeback waits)");
        }
    }
    match t.cap_bps {
        Some(c) if c > 0 => {
            let _ = write!(v, "; device capped at {} MiB/s", c >> 20);
        }
        _ => v.push_str("; no write cap"),
    }
    v
}

pub fn render(p: &Probe) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "kernel      {}", p.kernel);
    let _ = writeln!(s, "root        {}", if p.root { "yes" } else { "no" });
    let _ = writeln!(
        s,
        "features    what this kernel gives (\u{2192} the fix where it lacks one)"
    );
    s.push_str(&p.support.table());
    if let Some(c) = &p.sysctls {
        let _ = writeln!(
            s,
            "vm dirty    dirty_bytes={} dirty_ratio={} background_bytes={} background_ratio={} expire={}cs writeback={}cs",
            opt(c.dirty_bytes),
            opt(c.dirty_ratio),
            opt(c.dirty_background_bytes),
            opt(c.dirty_background_ratio),
            opt(c.dirty_expire_centisecs),
            opt(c.dirty_writeback_centisecs)
        );
    }
    if let (Some(th), Some(bg)) = (p.thresh_kib, p.bg_thresh_kib) {
        let _ = writeln!(
            s,
            "thresholds  background {} MiB, throttling from {} MiB, hard limit {} MiB; dirty now {} MiB",
            mib(bg),
            mib((th + bg) / 2),
            mib(th),
            p.dirty_kib.map_or("?".into(), |d| mib(d).to_string())
        );
    }
    for t in &p.targets {
        let _ = writeln!(s);
        let _ = writeln!(s, "target      {}", t.meta.path);
        let _ = writeln!(s, "  fs        {} ({})", t.meta.fs, t.meta.mount_options);
        match &t.device {
            Ok((name, bdi)) => {
                let _ = writeln!(
                    s,
                    "  device    {name} (bdi {bdi}), mounted from {}",
                    t.meta.device
                );
            }
            Err(why) => {
                let _ = writeln!(s, "  device    none: {why}");
            }
        }
        if let Some(b) = &t.bdi {
            let _ = writeln!(
                s,
                "  bdi       strict_limit={} max_ratio={} max_bytes={} min_ratio={} stable_writes={}",
                opt(b.strict_limit),
                opt(b.max_ratio),
                opt(b.max_bytes),
                opt(b.min_ratio),
                opt(b.stable_pages_required)
            );
        }
        let _ = writeln!(s, "  verdict   {}", verdict(p, t));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Probe {
        Probe {
            kernel: "6.18.0".into(),
            root: false,
            support: support::Facts {
                kernel: "6.18.0".into(),
                tracing: Err("not root".into()),
                psi: true,
                psi_off: false,
                bdi_bytes: true,
                cgroup: "v1".into(),
                cap: Some(Ok("blkio".into())),
            }
            .support(),
            sysctls: None,
            thresh_kib: Some(256 << 10),
            bg_thresh_kib: Some(64 << 10),
            dirty_kib: Some(10 << 10),
            targets: vec![
                TargetProbe {
                    meta: TargetMeta {
                        path: "/mnt/xfs".into(),
                        fs: "xfs".into(),
                        device: "/dev/loop1 (7:1)".into(),
                        mount_options: "rw".into(),
                    },
                    device: Ok(("loop1".into(), "7:1".into())),
                    bdi: Some(BdiSettings {
                        strict_limit: Some(0),
                        max_ratio: Some(100),
                        max_bytes: Some(0),
                        min_ratio: Some(0),
                        stable_pages_required: Some(0),
                        read_ahead_kb: Some(128),
                    }),
                    cap_bps: Some(50 << 20),
                    writable: Ok(()),
                },
                TargetProbe {
                    meta: TargetMeta {
                        path: "/dev/shm".into(),
                        fs: "tmpfs".into(),
                        device: "tmpfs (0:25)".into(),
                        mount_options: "rw".into(),
                    },
                    device: Err("tmpfs has no block device".into()),
                    bdi: None,
                    cap_bps: None,
                    writable: Err(
                        "target /dev/shm is not writable: Read-only file system (os error 30)"
                            .into(),
                    ),
                },
            ],
        }
    }

    #[test]
    fn verdicts_say_where_throttling_starts() {
        let p = sample();
        assert_eq!(
            verdict(&p, &p.targets[0]),
            "xfs on loop1: throttling starts at 160 MiB dirty (hard limit 256 MiB); device capped at 50 MiB/s"
        );
        assert!(verdict(&p, &p.targets[1]).contains("tmpfs has no block device"));
        assert!(
            verdict(&p, &p.targets[1]).ends_with("Read-only file system (os error 30), so stallscope's writers cannot run here (observe mode still works)"),
            "{}",
            verdict(&p, &p.targets[1])
        );
        let text = render(&p);
        assert!(
            text.contains("scheduler timing         no   tracing off: not root"),
            "{text}"
        );
        assert!(text.contains("throttling from 160 MiB"));
    }
}
