//! What a live trial may change, holding it, and the recipe that makes
//! it permanent. Only knobs the kernel takes at runtime and gives back
//! unchanged: the dirty sysctls and a device's bdi limits and writeback
//! throttle latency. A remount or our writers' options would restart or
//! replace the server: those are for the lab.
//!
//! The knobs are held in the machine's registry (`crate::knob`) in this
//! process's name: each B window sets them, its end releases them (what
//! was in force below comes back), and a trial killed with SIGKILL is put
//! back by the next stallscope run as root.

use super::super::apply::{blkio_cap_value, is_blkio_cap, knob_value, step_for};
use super::super::recipe::{quote, revert_lines};
use crate::analysis::advice::treatment::Setting;
use crate::base::error::UsageError;
use crate::knob::{Knob, Owner, Registry, Value};
use std::fmt::Write as _;
use std::path::Path;

/// The sysctls a live trial may flip.
const SYSCTLS: [&str; 6] = [
    "vm.dirty_bytes",
    "vm.dirty_background_bytes",
    "vm.dirty_ratio",
    "vm.dirty_background_ratio",
    "vm.dirty_expire_centisecs",
    "vm.dirty_writeback_centisecs",
];
/// A device's writeback knobs in /sys/class/bdi/MAJ:MIN/.
const BDI_FILES: [&str; 7] = [
    "max_bytes",
    "min_bytes",
    "strict_limit",
    "max_ratio",
    "min_ratio",
    "max_ratio_fine",
    "min_ratio_fine",
];

/// Whether `s` can be flipped under a running server and its file is
/// there; the reason if not.
pub fn check(s: &Setting) -> Result<(), UsageError> {
    check_kind(s)?;
    match s {
        Setting::Sysfs { path, .. } if !path.exists() => Err(UsageError::new(format!(
            "{}: no such file on this kernel",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Whether `s` is a knob a live trial may flip (its path may still hold
/// `{bdi}`); the reason if not.
pub fn check_kind(s: &Setting) -> Result<(), UsageError> {
    let refuse = |why: String| Err(UsageError::new(why));
    match s {
        Setting::Sysctl { name, .. } if SYSCTLS.contains(&name.as_str()) => Ok(()),
        Setting::Sysctl { name, .. } => refuse(format!(
            "{name}: a live trial flips only the dirty sysctls ({})",
            SYSCTLS.join(", ")
        )),
        Setting::Sysfs { path, .. } => {
            let parts: Vec<&str> = path
                .iter()
                .map(|p| p.to_str().unwrap_or(""))
                .collect();
            let ok = match parts[..] {
                ["/", "sys", "class", "bdi", _, f] => BDI_FILES.contains(&f),
                ["/", "sys", "block", _, "queue", "wbt_lat_usec"] => true,
                _ => is_blkio_cap(path),
            };
            if !ok {
                return refuse(format!(
                    "{}: a live trial flips only /sys/class/bdi/MAJ:MIN/{{{}}}, /sys/block/DEV/queue/wbt_lat_usec and (a lab's cap, v1) {}",
                    path.display(),
                    BDI_FILES.join(","),
                    crate::knob::BLKIO_WRITE_BPS
                ));
            }
            Ok(())
        }
        Setting::MountOption { option } => refuse(format!(
            "--mount-option {option}: a remount under a running server is not a flip of a knob; try it in the lab (trial without --observe)"
        )),
        Setting::RunArgs { .. } => refuse(
            "--run-args change stallscope's own writers; a live trial changes only the kernel under the server"
                .into(),
        ),
    }
}

/// The B side's knobs, held while a B window lasts.
pub struct Held {
    registry: Registry,
    owner: Owner,
    set: Vec<(Knob, Value, String)>,
    on: bool,
}

impl Held {
    /// The knobs and values of `settings` (checked), against what is in
    /// force now.
    pub fn new(settings: &[Setting], registry: Registry) -> anyhow::Result<Held> {
        let mut set = Vec::new();
        for s in settings {
            check(s)?;
            if let Some((k, v)) = knob_value(s)? {
                set.push((k, v, format!("live trial: {}", describe(s))));
            }
        }
        Ok(Held {
            registry,
            owner: Owner::this_process(),
            set,
            on: false,
        })
    }

    /// Sets every knob (a B window begins).
    pub fn apply(&mut self) -> anyhow::Result<()> {
        self.on = true;
        for (k, v, what) in &self.set {
            self.registry.set(k, v, &self.owner, what)?;
        }
        Ok(())
    }

    /// Puts every knob back, last first (a B window ends).
    pub fn put_back(&mut self) -> anyhow::Result<()> {
        for (k, _, _) in self.set.iter().rev() {
            self.registry.release(k, &self.owner)?;
        }
        self.on = false;
        Ok(())
    }
}

impl Drop for Held {
    /// An error, Ctrl-C, SIGTERM, a panic or the server exiting mid-window.
    fn drop(&mut self) {
        if self.on {
            if let Err(e) = self.registry.release_all(&self.owner) {
                eprintln!("stallscope: putting the trial's knobs back: {e:#}");
            }
        }
    }
}

/// `name=value` as a person writes it.
pub fn describe(s: &Setting) -> String {
    match s {
        Setting::Sysctl { name, value } => format!("{name}={value}"),
        Setting::Sysfs { path, value } => format!("{}={value}", path.display()),
        Setting::MountOption { option } => format!("mount option {option}"),
        Setting::RunArgs { args } => args.join(" "),
    }
}

/// By hand: what a B window writes, how to undo it, and how to make it
/// permanent (a sysctl.d file; a udev rule for a device's knobs, which
/// the kernel forgets at boot and when the device comes back).
pub fn recipe(settings: &[Setting]) -> anyhow::Result<String> {
    let mut s = String::from("# a B window, by hand (as root):\n");
    for x in settings {
        match x {
            Setting::Sysctl { name, value } => {
                let _ = writeln!(s, "sysctl -w {}", quote(&format!("{name}={value}")));
            }
            Setting::Sysfs { path, value } => {
                let value = match is_blkio_cap(path) {
                    true => {
                        let (major, minor, bps) = blkio_cap_value(value)?;
                        format!("{major}:{minor} {bps}")
                    }
                    false => value.clone(),
                };
                let _ = writeln!(
                    s,
                    "echo {} > {}",
                    quote(&value),
                    quote(&path.to_string_lossy())
                );
            }
            _ => {}
        }
    }
    if settings
        .iter()
        .any(|x| matches!(x, Setting::Sysfs { path, .. } if is_blkio_cap(path)))
    {
        let _ = writeln!(
            s,
            "# the blkio write cap is a lab's stand-in for the disk's speed: nothing to make permanent (a faster device is what it stands for)"
        );
    }
    let _ = writeln!(s, "# undo (the values now):");
    for x in settings.iter().rev() {
        if let Some(step) = step_for(x, Path::new("/"))? {
            for l in revert_lines(&step) {
                let _ = writeln!(s, "{l}");
            }
        }
    }
    let sysctls: Vec<String> = settings
        .iter()
        .filter_map(|x| match x {
            Setting::Sysctl { name, value } => Some(format!("{name} = {value}")),
            _ => None,
        })
        .collect();
    if !sysctls.is_empty() {
        let _ = writeln!(
            s,
            "# permanent: /etc/sysctl.d/90-stallscope.conf, then `sysctl --system`"
        );
        for l in sysctls {
            let _ = writeln!(s, "{l}");
        }
    }
    for (subsystem, kernel, attrs) in udev_rules(settings) {
        let _ = writeln!(
            s,
            "# permanent: /etc/udev/rules.d/90-stallscope.rules, then `udevadm control --reload && udevadm trigger`"
        );
        let attrs: Vec<String> = attrs
            .iter()
            .map(|(a, v)| format!("ATTR{{{a}}}=\"{v}\""))
            .collect();
        let _ = writeln!(
            s,
            "ACTION==\"add|change\", SUBSYSTEM==\"{subsystem}\", KERNEL==\"{kernel}\", {}",
            attrs.join(", ")
        );
    }
    Ok(s)
}

/// One udev rule per device: (subsystem, kernel name, attributes in the
/// order given).
type Rule = (&'static str, String, Vec<(String, String)>);

fn udev_rules(settings: &[Setting]) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    for x in settings {
        let Setting::Sysfs { path, value } = x else {
            continue;
        };
        let parts: Vec<String> = path
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let (subsystem, kernel, attr) = match parts.iter().map(String::as_str).collect::<Vec<_>>()[..]
        {
            ["/", "sys", "class", "bdi", dev, f] => ("bdi", dev.to_string(), f.to_string()),
            ["/", "sys", "block", dev, "queue", f] => {
                ("block", dev.to_string(), format!("queue/{f}"))
            }
            _ => continue,
        };
        match rules.iter_mut().find(|r| r.0 == subsystem && r.1 == kernel) {
            Some(r) => r.2.push((attr, value.clone())),
            None => rules.push((subsystem, kernel, vec![(attr, value.clone())])),
        }
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sysfs(p: &str, v: &str) -> Setting {
        Setting::Sysfs {
            path: p.into(),
            value: v.into(),
        }
    }

    #[test]
    fn only_runtime_knobs_pass() {
        let ok = Setting::Sysctl {
            name: "vm.dirty_background_bytes".into(),
            value: "1".into(),
        };
        assert!(check(&ok).is_ok());
        let swap = Setting::Sysctl {
            name: "vm.swappiness".into(),
            value: "1".into(),
        };
        assert!(check(&swap)
            .unwrap_err()
            .to_string()
            .contains("only the dirty sysctls"));
        let sched = sysfs("/sys/block/vda/queue/scheduler", "none");
        assert!(check(&sched)
            .unwrap_err()
            .to_string()
            .contains("wbt_lat_usec"));
        let mount = Setting::MountOption {
            option: "commit=1".into(),
        };
        assert!(check(&mount).unwrap_err().to_string().contains("lab"));
        let missing = sysfs("/sys/class/bdi/999:999/strict_limit", "1");
        assert!(check(&missing)
            .unwrap_err()
            .to_string()
            .contains("no such file"));
    }

    #[test]
    fn a_device_s_knobs_become_one_udev_rule() {
        let s = [
            sysfs("/sys/class/bdi/7:0/max_bytes", "33554432"),
            sysfs("/sys/class/bdi/7:0/strict_limit", "1"),
            sysfs("/sys/block/loop0/queue/wbt_lat_usec", "2000"),
        ];
        let r = udev_rules(&s);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].0, r[0].1.as_str()), ("bdi", "7:0"));
        assert_eq!(r[0].2[1], ("strict_limit".to_string(), "1".to_string()));
        assert_eq!(r[1].2[0].0, "queue/wbt_lat_usec");
    }

    #[test]
    fn a_lab_s_blkio_cap_is_a_knob_of_one_device() {
        let cap = sysfs(crate::knob::BLKIO_WRITE_BPS, "7:3 40MiB");
        assert!(check_kind(&cap).is_ok());
        assert_eq!(blkio_cap_value("7:3 40MiB").unwrap(), (7, 3, 40 << 20));
        assert_eq!(blkio_cap_value(" 8:16 0 ").unwrap(), (8, 16, 0));
        for bad in ["7:3", "7 3 40", "a:b 1", "7:3 fast"] {
            let e = blkio_cap_value(bad).unwrap_err().to_string();
            assert!(e.contains("MAJ:MIN BYTES_PER_S"), "{bad}: {e}");
        }
        let (k, v) = knob_value(&cap).unwrap().unwrap();
        assert_eq!(k, Knob::blkio(7, 3));
        assert_eq!(v, Value::Bps(40 << 20));
    }
}
