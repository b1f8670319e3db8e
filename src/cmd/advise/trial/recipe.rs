//! The recipe: the commands to rerun a trial by hand, A and B, and to put
//! everything back. Pure: it is given what the lab and the machine look
//! like and prints it so.

use crate::analysis::advice::treatment::Setting;
use crate::base::units::ByteSize;
use crate::cmd::lab::down::sysctl_path;
use crate::cmd::lab::guards::DirtyLimits;
use crate::cmd::lab::state::Step;
use std::fmt::Write as _;
use std::path::PathBuf;

/// What the recipe describes.
pub struct Lab {
    pub kernel: String,
    pub dir: PathBuf,
    pub fs: String,
    pub device: String,
    /// `major:minor`.
    pub dev_numbers: String,
    pub mount: PathBuf,
    pub mount_options: String,
    /// Write cap, bytes/s (0: none).
    pub cap: u64,
    /// The dirty limits the A runs see.
    pub dirty: DirtyLimits,
}

/// A shell-safe word: left bare when it is plain, else single-quoted.
pub fn quote(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

fn words(args: &[String]) -> String {
    args.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}

/// The command that applies one setting by hand.
pub fn apply_line(s: &Setting, lab: &Lab) -> Option<String> {
    Some(match s {
        Setting::Sysctl { name, value } => {
            format!("sysctl -w {}", quote(&format!("{name}={value}")))
        }
        Setting::Sysfs { path, value } => {
            format!("echo {} > {}", quote(value), quote(&path.to_string_lossy()))
        }
        Setting::MountOption { option } => format!(
            "mount -o {} {}",
            quote(&format!("remount,{option}")),
            quote(&lab.mount.to_string_lossy())
        ),
        Setting::RunArgs { .. } => return None,
    })
}

/// The commands that undo one recorded step by hand.
pub fn revert_lines(step: &Step) -> Vec<String> {
    match step {
        Step::Dirty { original: d, .. } => {
            let pair = |bytes: u64, ratio: u64, b: &str, r: &str| {
                if bytes > 0 {
                    format!("sysctl -w vm.{b}={bytes}")
                } else {
                    format!("sysctl -w vm.{r}={ratio}")
                }
            };
            vec![
                pair(
                    d.background_bytes,
                    d.background_ratio,
                    "dirty_background_bytes",
                    "dirty_background_ratio",
                ),
                pair(d.dirty_bytes, d.dirty_ratio, "dirty_bytes", "dirty_ratio"),
            ]
        }
        Step::Sysctl { name, original, .. } => {
            debug_assert!(sysctl_path(name).starts_with("/proc/sys"));
            vec![format!(
                "sysctl -w {}",
                quote(&format!("{name}={original}"))
            )]
        }
        Step::Sysfs { path, original, .. } => vec![format!(
            "echo {} > {}",
            quote(original),
            quote(&path.to_string_lossy())
        )],
        Step::Remount {
            device,
            mount,
            options,
        } => {
            let m = quote(&mount.to_string_lossy());
            vec![
                format!("umount {m}"),
                format!("mount -o {} {} {m}", quote(options), quote(device)),
            ]
        }
        _ => Vec::new(),
    }
}

/// The whole recipe. `run_a`/`run_b` are `stallscope run` arguments
/// (target and duration included); `reverts` the steps the trial records,
/// in the order it applies them.
pub fn recipe(
    lab: &Lab,
    settings: &[Setting],
    run_a: &[String],
    run_b: &[String],
    reverts: &[Step],
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# kernel {}; as root", lab.kernel);
    let mut up = format!(
        "stallscope lab up --dir {} --fs {}",
        quote(&lab.dir.to_string_lossy()),
        lab.fs
    );
    if lab.cap > 0 {
        let _ = write!(up, " --cap {}", ByteSize(lab.cap));
    }
    if lab.dirty.dirty_bytes > 0 {
        let _ = write!(up, " --dirty-bytes {}", ByteSize(lab.dirty.dirty_bytes));
        if lab.dirty.background_bytes > 0 {
            let _ = write!(
                up,
                " --dirty-background-bytes {}",
                ByteSize(lab.dirty.background_bytes)
            );
        }
    }
    let _ = writeln!(s, "{up}");
    let _ = writeln!(
        s,
        "#   {} on {} ({}), mounted {} with {}",
        lab.fs,
        lab.device,
        lab.dev_numbers,
        lab.mount.display(),
        lab.mount_options
    );
    let _ = writeln!(
        s,
        "# A (as it is), then B (the change); alternate, one at a time:"
    );
    let _ = writeln!(s, "stallscope run {}", words(run_a));
    for line in settings.iter().filter_map(|x| apply_line(x, lab)) {
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(s, "stallscope run {}", words(run_b));
    let _ = writeln!(s, "# revert:");
    for step in reverts.iter().rev() {
        for line in revert_lines(step) {
            let _ = writeln!(s, "{line}");
        }
    }
    let _ = writeln!(
        s,
        "stallscope lab down --dir {}",
        quote(&lab.dir.to_string_lossy())
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> Lab {
        Lab {
            kernel: "6.18.0".into(),
            dir: "/var/tmp/stallscope-lab".into(),
            fs: "ext4".into(),
            device: "/dev/loop0".into(),
            dev_numbers: "7:0".into(),
            mount: "/var/tmp/stallscope-lab/mnt/ext4".into(),
            mount_options: "rw,relatime".into(),
            cap: 20 << 20,
            dirty: DirtyLimits {
                dirty_bytes: 1 << 30,
                dirty_ratio: 0,
                background_bytes: 256 << 20,
                background_ratio: 0,
            },
        }
    }

    #[test]
    fn words_are_quoted_only_when_they_must_be() {
        assert_eq!(quote("--sync"), "--sync");
        assert_eq!(quote("every:1600"), "every:1600");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn the_recipe_has_the_lab_the_runs_the_change_and_the_revert() {
        let bdi = PathBuf::from("/sys/class/bdi/7:0");
        let settings = [
            Setting::Sysfs {
                path: bdi.join("max_bytes"),
                value: "33554432".into(),
            },
            Setting::Sysfs {
                path: bdi.join("strict_limit"),
                value: "1".into(),
            },
        ];
        let reverts = [
            Step::Sysfs {
                path: bdi.join("max_ratio_fine"),
                original: "1000000".into(),
                registered: true,
            },
            Step::Sysfs {
                path: bdi.join("strict_limit"),
                original: "0".into(),
                registered: true,
            },
        ];
        let run: Vec<String> = [
            "--target",
            "/var/tmp/stallscope-lab/mnt/ext4",
            "--mode",
            "buffered",
        ]
        .map(String::from)
        .to_vec();
        let r = recipe(&lab(), &settings, &run, &run, &reverts);
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(
            lines[1],
            "stallscope lab up --dir /var/tmp/stallscope-lab --fs ext4 --cap 20MiB --dirty-bytes 1GiB --dirty-background-bytes 256MiB"
        );
        assert_eq!(
            lines[4],
            "stallscope run --target /var/tmp/stallscope-lab/mnt/ext4 --mode buffered"
        );
        assert_eq!(lines[5], "echo 33554432 > /sys/class/bdi/7:0/max_bytes");
        assert_eq!(lines[6], "echo 1 > /sys/class/bdi/7:0/strict_limit");
        assert_eq!(lines[8], "# revert:");
        assert_eq!(
            lines[9], "echo 0 > /sys/class/bdi/7:0/strict_limit",
            "last first"
        );
        assert_eq!(
            lines[10],
            "echo 1000000 > /sys/class/bdi/7:0/max_ratio_fine"
        );
        assert_eq!(
            lines[11],
            "stallscope lab down --dir /var/tmp/stallscope-lab"
        );
    }

    #[test]
    fn dirty_limits_revert_as_a_pair_in_the_safe_order() {
        let step = Step::Dirty {
            original: DirtyLimits {
                dirty_bytes: 0,
                dirty_ratio: 20,
                background_bytes: 268_435_456,
                background_ratio: 0,
            },
            registered: true,
        };
        assert_eq!(
            revert_lines(&step),
            [
                "sysctl -w vm.dirty_background_bytes=268435456",
                "sysctl -w vm.dirty_ratio=20"
            ]
        );
        let remount = Step::Remount {
            device: "/dev/loop0".into(),
            mount: "/m".into(),
            options: "rw,relatime".into(),
        };
        assert_eq!(
            revert_lines(&remount),
            ["umount /m", "mount -o rw,relatime /dev/loop0 /m"]
        );
        let s = Setting::MountOption {
            option: "commit=1".into(),
        };
        assert_eq!(
            apply_line(&s, &lab()).unwrap(),
            "mount -o remount,commit=1 /var/tmp/stallscope-lab/mnt/ext4"
        );
    }
}
