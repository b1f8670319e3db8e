//! Whether the lab is shaped like the recording, and the `lab up` command
//! that makes one that is. A trial on a lab of another filesystem, another
//! speed or other dirty limits would try the change against stalls the
//! recording never had. Pure: the lab is read by the caller (`LabView`).
//!
//! The shape: the recorded targets' filesystems, a write cap near the rate
//! the recorded target's device wrote back at (within `CAP_TOLERANCE`),
//! and the recorded dirty sysctls (bytes as bytes; a ratio as the same
//! ratio, which is of this machine's memory; a recording without them, the
//! thresholds the kernel computed, as bytes).

use crate::analysis::advice::diagnosis::{Diagnosis, Subject};
use crate::base::units::ByteSize;
use crate::cmd::lab::guards::DirtyLimits;
use std::path::{Path, PathBuf};

/// How far the lab's cap may be from the recorded writeback rate.
pub const CAP_TOLERANCE: f64 = 0.2;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// `lab up`'s default image size.
const LAB_SIZE: u64 = 4 * GIB;

/// One of a dirty sysctl pair as recorded: its bytes, or its ratio when
/// the bytes were 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Bytes(u64),
    Ratio(u64),
}

/// The lab the recording asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Wanted {
    /// The filesystems of the targets tried, in order, each once.
    pub fs: Vec<String>,
    /// The recorded writeback rate, MiB/s; None when the recording has no
    /// device rate (no kernel samples): the cap is not checked then.
    pub rate_mib: Option<f64>,
    /// vm.dirty_bytes/ratio and vm.dirty_background_bytes/ratio; None
    /// when the recording kept neither them nor the thresholds.
    pub dirty: Option<(Limit, Limit)>,
    /// The image size the workload's disk budget needs, when above the
    /// default 4 GiB.
    pub size: Option<u64>,
}

/// One of the lab's filesystems as it is now.
#[derive(Clone, Debug, PartialEq)]
pub struct LabFs {
    pub fs: String,
    pub mount: PathBuf,
    /// Its write cap, bytes/s (0: none).
    pub cap: u64,
}

/// The lab as it is now.
#[derive(Clone, Debug, PartialEq)]
pub struct LabView {
    pub dir: PathBuf,
    /// Its mounted filesystems.
    pub mounts: Vec<LabFs>,
    pub dirty: DirtyLimits,
}

/// What the lab must be for `subjects` (the writers whose cards are
/// tried; the first one's rate is the cap), under `d`'s dirty limits.
pub fn wanted(d: &Diagnosis, subjects: &[&Subject], disk_budget: u64) -> Wanted {
    let mut fs: Vec<String> = Vec::new();
    for s in subjects {
        if let Some(p) = s.place.as_ref().filter(|p| !p.fs.is_empty()) {
            if !fs.contains(&p.fs) {
                fs.push(p.fs.clone());
            }
        }
    }
    let rate_mib = subjects
        .iter()
        .find_map(|s| s.place.as_ref()?.writeback_mib_per_s);
    let pick = |bytes: Option<u64>, ratio: Option<u64>| match (bytes, ratio) {
        (Some(b), _) if b > 0 => Some(Limit::Bytes(b)),
        (_, Some(r)) => Some(Limit::Ratio(r)),
        _ => None,
    };
    // Older recordings kept only the thresholds the kernel computed.
    let dirty = match d.dirty.sysctls {
        Some(s) => pick(s.dirty_bytes, s.dirty_ratio)
            .zip(pick(s.dirty_background_bytes, s.dirty_background_ratio)),
        None => d
            .dirty
            .thresh_bytes
            .zip(d.dirty.bg_thresh_bytes)
            .map(|(h, b)| (Limit::Bytes(h), Limit::Bytes(b))),
    };
    // Room for the budget and the filesystem's own, in whole GiB.
    let need = (disk_budget + disk_budget / 2).div_ceil(GIB) * GIB;
    Wanted {
        fs,
        rate_mib,
        dirty,
        size: (need > LAB_SIZE).then_some(need),
    }
}

/// The cap `lab up` is given: the rate in whole MiB/s, at least 1.
pub fn cap_bytes(rate_mib: f64) -> u64 {
    (rate_mib.round() as u64).max(1) * MIB
}

/// The lab's filesystem a target of `fs` is tried on (`target` when given),
/// or what is wrong with the lab, one phrase each.
pub fn choose<'a>(
    w: &Wanted,
    fs: &str,
    lab: &'a LabView,
    target: Option<&Path>,
) -> Result<&'a LabFs, Vec<String>> {
    let mut wrong = Vec::new();
    let found = match target {
        Some(t) => lab.mounts.iter().find(|m| m.mount == t),
        None => lab.mounts.iter().find(|m| m.fs == fs),
    };
    match (found, target) {
        (None, Some(t)) => wrong.push(format!("{} is not one of its filesystems", t.display())),
        (None, None) => wrong.push(format!("it has no {fs}")),
        (Some(m), _) if m.fs != fs => {
            wrong.push(format!(
                "{} is {}, the recording's target {fs}",
                m.mount.display(),
                m.fs
            ));
        }
        _ => {}
    }
    if let (Some(m), Some(r)) = (found, w.rate_mib) {
        let cap = m.cap as f64 / MIB as f64;
        if m.cap == 0 {
            wrong.push(format!(
                "{} has no write cap, the recorded device wrote back at {r:.1} MiB/s",
                m.fs
            ));
        } else if (cap - r).abs() > CAP_TOLERANCE * r {
            wrong.push(format!(
                "{} is capped at {cap:.1} MiB/s, the recorded device wrote back at {r:.1} MiB/s",
                m.fs
            ));
        }
    }
    if let Some((hard, bg)) = w.dirty {
        let l = &lab.dirty;
        let ok = |want: Limit, bytes: u64, ratio: u64| match want {
            Limit::Bytes(b) => bytes == b,
            Limit::Ratio(r) => bytes == 0 && ratio == r,
        };
        let now = |bytes: u64, ratio: u64| {
            if bytes > 0 {
                words(Limit::Bytes(bytes))
            } else {
                words(Limit::Ratio(ratio))
            }
        };
        if !ok(hard, l.dirty_bytes, l.dirty_ratio) {
            wrong.push(format!(
                "vm.dirty is {}, recorded {}",
                now(l.dirty_bytes, l.dirty_ratio),
                words(hard)
            ));
        }
        if !ok(bg, l.background_bytes, l.background_ratio) {
            wrong.push(format!(
                "vm.dirty_background is {}, recorded {}",
                now(l.background_bytes, l.background_ratio),
                words(bg)
            ));
        }
    }
    match found {
        Some(m) if wrong.is_empty() => Ok(m),
        _ => Err(wrong),
    }
}

fn words(l: Limit) -> String {
    match l {
        Limit::Bytes(b) => format!("{} bytes", ByteSize(b)),
        Limit::Ratio(r) => format!("{r} % of memory"),
    }
}

/// The `lab up` command for `w`, after a `lab down` when a lab is up.
pub fn lab_up_command(w: &Wanted, dir: &Path, lab_is_up: bool) -> String {
    let at = if dir == Path::new(crate::cmd::lab::cmd::DEFAULT_DIR) {
        String::new()
    } else {
        format!(" --dir {}", dir.display())
    };
    let mut cmd = String::new();
    if lab_is_up {
        cmd.push_str(&format!("stallscope lab down{at} && "));
    }
    let fs = if w.fs.is_empty() {
        "ext4".to_string()
    } else {
        w.fs.join(",")
    };
    cmd.push_str(&format!("stallscope lab up{at} --fs {fs}"));
    cmd.push_str(&match w.rate_mib {
        Some(r) => format!(" --cap {}", ByteSize(cap_bytes(r))),
        None => " --cap 0".to_string(),
    });
    if let Some(s) = w.size {
        cmd.push_str(&format!(" --size {}", ByteSize(s)));
    }
    // lab up sets bytes only; a ratio is this machine's default or a
    // sysctl of its own.
    if let Some((hard, bg)) = w.dirty {
        if let Limit::Bytes(b) = hard {
            cmd.push_str(&format!(" --dirty-bytes {}", ByteSize(b)));
            if let Limit::Bytes(g) = bg {
                cmd.push_str(&format!(" --dirty-background-bytes {}", ByteSize(g)));
            }
        }
        for (l, name) in [(hard, "dirty_ratio"), (bg, "dirty_background_ratio")] {
            if let Limit::Ratio(r) = l {
                cmd.push_str(&format!(" && sysctl -w vm.{name}={r}"));
            }
        }
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::advice::diagnosis::{Place, Stalled};
    use crate::config::Mode;
    use crate::source::proc::DirtySysctls;

    fn subject(fs: &str, rate: Option<f64>) -> Subject {
        Subject {
            who: Stalled::Writers {
                mode: Mode::Mmap,
                threads: 4,
                sync: None,
                commit_interval_s: None,
            },
            place: Some(Place {
                path: "/x".into(),
                fs: fs.into(),
                mount_options: String::new(),
                device: Some("7:0".into()),
                writeback_mib_per_s: rate,
            }),
            by_cause: Default::default(),
            bytes: None,
            journal_waits: 0,
        }
    }

    fn diag(dirty_bytes: u64, bg_bytes: u64) -> Diagnosis {
        Diagnosis {
            dirty: crate::analysis::advice::diagnosis::DirtyLimits {
                sysctls: Some(DirtySysctls {
                    dirty_ratio: Some(20),
                    dirty_bytes: Some(dirty_bytes),
                    dirty_background_ratio: Some(10),
                    dirty_background_bytes: Some(bg_bytes),
                    ..DirtySysctls::default()
                }),
                ..Default::default()
            },
            ..Diagnosis::default()
        }
    }

    fn lab(fs: &str, cap_mib: u64, dirty: DirtyLimits) -> LabView {
        LabView {
            dir: crate::cmd::lab::cmd::DEFAULT_DIR.into(),
            mounts: vec![LabFs {
                fs: fs.into(),
                mount: format!("/lab/mnt/{fs}").into(),
                cap: cap_mib * MIB,
            }],
            dirty,
        }
    }

    fn limits(dirty_bytes: u64, bg: u64) -> DirtyLimits {
        DirtyLimits {
            dirty_bytes,
            dirty_ratio: 0,
            background_bytes: bg,
            background_ratio: 0,
        }
    }

    #[test]
    fn a_lab_like_the_recording_is_chosen() {
        let s = subject("xfs", Some(19.6));
        let w = wanted(&diag(256 * MIB, 64 * MIB), &[&s], GIB);
        assert_eq!(w.fs, ["xfs"]);
        assert_eq!(w.size, None, "1 GiB of budget fits the default image");
        let l = lab("xfs", 20, limits(256 * MIB, 64 * MIB));
        assert_eq!(choose(&w, "xfs", &l, None).unwrap().fs, "xfs");
        assert_eq!(
            lab_up_command(&w, &l.dir, false),
            "stallscope lab up --fs xfs --cap 20MiB --dirty-bytes 256MiB --dirty-background-bytes 64MiB"
        );
    }

    #[test]
    fn each_difference_is_named() {
        let s = subject("xfs", Some(20.0));
        let w = wanted(&diag(256 * MIB, 64 * MIB), &[&s], GIB);
        let e = choose(
            &w,
            "xfs",
            &lab("ext4", 20, limits(256 * MIB, 64 * MIB)),
            None,
        )
        .unwrap_err();
        assert_eq!(e, ["it has no xfs"]);
        let e = choose(&w, "xfs", &lab("xfs", 50, limits(0, 0)), None).unwrap_err();
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(
            e[0].contains("capped at 50.0 MiB/s") && e[0].contains("20.0"),
            "{e:?}"
        );
        assert!(
            e[1].starts_with("vm.dirty is 0 % of memory, recorded 256MiB"),
            "{e:?}"
        );
        let e = choose(&w, "xfs", &lab("xfs", 0, limits(256 * MIB, 64 * MIB)), None).unwrap_err();
        assert!(e[0].contains("no write cap"), "{e:?}");
        let e = choose(
            &w,
            "xfs",
            &lab("xfs", 20, limits(256 * MIB, 64 * MIB)),
            Some(Path::new("/elsewhere")),
        )
        .unwrap_err();
        assert!(e[0].contains("/elsewhere is not one of"), "{e:?}");
        // 10 % off is near enough; 30 % is not.
        assert!(choose(
            &w,
            "xfs",
            &lab("xfs", 22, limits(256 * MIB, 64 * MIB)),
            None
        )
        .is_ok());
        assert!(choose(
            &w,
            "xfs",
            &lab("xfs", 26, limits(256 * MIB, 64 * MIB)),
            None
        )
        .is_err());
    }

    #[test]
    fn ratios_are_kept_as_ratios_and_no_rate_means_no_cap_check() {
        let s = subject("ext4", None);
        let w = wanted(&diag(0, 0), &[&s], 8 * GIB);
        assert_eq!(w.dirty, Some((Limit::Ratio(20), Limit::Ratio(10))));
        assert_eq!(w.size, Some(12 * GIB));
        let ratios = DirtyLimits {
            dirty_bytes: 0,
            dirty_ratio: 20,
            background_bytes: 0,
            background_ratio: 10,
        };
        assert!(choose(&w, "ext4", &lab("ext4", 0, ratios.clone()), None).is_ok());
        let dir = Path::new("/tmp/l");
        assert_eq!(
            lab_up_command(&w, dir, true),
            "stallscope lab down --dir /tmp/l && stallscope lab up --dir /tmp/l --fs ext4 --cap 0 --size 12GiB && sysctl -w vm.dirty_ratio=20 && sysctl -w vm.dirty_background_ratio=10"
        );
        assert_eq!(cap_bytes(0.2), MIB, "at least 1 MiB/s");
        // No sysctls kept: the thresholds in force, as bytes.
        let mut old = diag(0, 0);
        old.dirty.sysctls = None;
        old.dirty.thresh_bytes = Some(64 * MIB);
        old.dirty.bg_thresh_bytes = Some(16 * MIB);
        let w = wanted(&old, &[&s], GIB);
        assert_eq!(
            w.dirty,
            Some((Limit::Bytes(64 * MIB), Limit::Bytes(16 * MIB)))
        );
    }
}
