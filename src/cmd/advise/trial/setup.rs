//! Before a trial's first run: the lab it runs on, the A and B
//! configurations, each run's length and the recipe, everything checked
//! so that a mistake shows before minutes of runs, not after.

use super::recipe::{self, Lab};
use super::{apply, default_run_secs, figures, lab_mount, resolve, TrialOptions, Workload};
use super::{Setting, Treatment, MIN_PAIRS};
use crate::base::error::UsageError;
use crate::cmd::lab::guards::DirtyLimits;
use crate::cmd::lab::state::LabState;
use crate::config::Config;
use crate::source::proc::{read_vmstat, resolve_device, ProcRoot};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A trial ready to run.
pub struct Trial {
    pub lab_dir: PathBuf,
    pub lab: Lab,
    /// The treatment, `{bdi}` filled in.
    pub settings: Vec<Setting>,
    pub cfg_a: Config,
    pub cfg_b: Config,
    pub run_secs: Duration,
    pub recipe: String,
}

pub fn prepare(w: &Workload, t: &Treatment, o: &TrialOptions) -> anyhow::Result<Trial> {
    if o.pairs < MIN_PAIRS {
        let msg = format!("--pairs {} is too few (at least {MIN_PAIRS})", o.pairs);
        return Err(UsageError::new(msg).into());
    }
    crate::cmd::lab::checks::need_root("trials")?;
    let n = apply::restore_left(&o.lab_dir, &crate::knob::Registry::machine())?;
    if n > 0 {
        eprintln!("stallscope: put back {n} change(s) an earlier trial left (killed?)");
    }
    let lab = describe_lab(o)?;
    let settings = resolve(&t.settings, &lab.dev_numbers);
    let cfg_a = Config {
        targets: vec![lab.mount.clone()],
        ..w.config.clone()
    };
    let extra: Vec<String> = settings
        .iter()
        .filter_map(|s| match s {
            Setting::RunArgs { args } => Some(args.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let cfg_b = if extra.is_empty() {
        cfg_a.clone()
    } else {
        let with = w
            .with_args
            .ok_or_else(|| anyhow::anyhow!("this caller cannot apply run arguments"))?;
        Config {
            targets: cfg_a.targets.clone(),
            ..with(&cfg_a, &extra)?
        }
    };
    cfg_a.validate()?;
    cfg_b.validate()?;
    let run_secs = o.run_secs.unwrap_or_else(|| planned_secs(&cfg_a, lab.cap));
    let reverts = settings
        .iter()
        .filter_map(|s| apply::step_for(s, &lab.mount).transpose())
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut run_a = strip_placement(&w.args);
    run_a.extend([
        "--target".to_string(),
        lab.mount.to_string_lossy().into_owned(),
        "--duration".to_string(),
        format!("{}s", run_secs.as_secs()),
    ]);
    let run_b = with_extra(&run_a, &extra);
    let recipe = recipe::recipe(&lab, &settings, &run_a, &run_b, &reverts);
    Ok(Trial {
        lab_dir: o.lab_dir.clone(),
        lab,
        settings,
        cfg_a,
        cfg_b,
        run_secs,
        recipe,
    })
}

/// `default_run_secs` for this machine: its dirty setpoint now, filled at
/// the offered rate or else at the lab's cap (writers that outrun the cap
/// fill it at least that fast), else at 100 MiB/s.
fn planned_secs(cfg: &Config, cap: u64) -> Duration {
    let vm = read_vmstat(&ProcRoot::default()).unwrap_or_default();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let setpoint =
        (vm.nr_dirty_threshold.unwrap_or(0) + vm.nr_dirty_background_threshold.unwrap_or(0)) / 2
            * page;
    let fill = match figures::offered_mib_per_s(cfg) {
        Some(m) => m * (1u64 << 20) as f64,
        None if cap > 0 => cap as f64,
        None => 100.0 * (1u64 << 20) as f64,
    };
    let ops = if cfg.thread_rate > 0 {
        cfg.thread_rate * u64::from(cfg.threads)
    } else {
        cfg.rate
    };
    default_run_secs(setpoint, fill, ops)
}

/// The run arguments without their placement (`--target`, `--duration`),
/// which the trial gives.
pub fn strip_placement(args: &[String]) -> Vec<String> {
    without(args, &["--target", "--duration"])
}

/// B's run arguments: A's with `extra` over them. `run` refuses an option
/// given twice, so each one `extra` sets is taken out of A's first.
pub fn with_extra(run_a: &[String], extra: &[String]) -> Vec<String> {
    let set: Vec<&str> = extra
        .iter()
        .filter(|a| a.starts_with('-'))
        .map(|a| long(a.split('=').next().unwrap_or(a)))
        .collect();
    [without(run_a, &set), extra.to_vec()].concat()
}

/// `run`'s short options by their long names.
fn long(flag: &str) -> &str {
    match flag {
        "-t" => "--target",
        "-d" => "--duration",
        "-m" => "--mode",
        "-j" => "--threads",
        "-i" => "--interval",
        "-f" => "--format",
        other => other,
    }
}

/// `args` without the options named in `flags` (long names) and their
/// values, given as `--flag value`, `--flag=value` or a short alias.
fn without(args: &[String], flags: &[&str]) -> Vec<String> {
    // `run`'s options that take no value.
    const BARE: [&str; 1] = ["--follow-symlinks"];
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, _)) if a.starts_with("--") => (n, true),
            _ => (a.as_str(), false),
        };
        if !flags.contains(&long(name)) {
            out.push(a.clone());
        } else if !inline && !BARE.contains(&long(name)) {
            it.next();
        }
    }
    out
}

/// The lab's filesystem the trial runs on, and what the recipe says of it.
fn describe_lab(o: &TrialOptions) -> anyhow::Result<Lab> {
    let no_lab = || {
        UsageError::new(format!(
            "no lab at {}; run `stallscope lab up` first",
            o.lab_dir.display()
        ))
    };
    let st = LabState::load(&o.lab_dir)?.ok_or_else(no_lab)?;
    let mounts = st.mounts();
    let (fs, mount, device) = match &o.target {
        Some(t) => mounts
            .into_iter()
            .find(|(_, m, _)| same(m, t))
            .ok_or_else(|| {
                UsageError::new(format!(
                    "{} is not one of the lab's filesystems (see `stallscope lab status`)",
                    t.display()
                ))
            })?,
        None => mounts.into_iter().next().ok_or_else(no_lab)?,
    };
    if !lab_mount(&o.lab_dir, &mount) {
        let msg = format!(
            "{} is not mounted; `lab down` and `lab up` again",
            mount.display()
        );
        return Err(UsageError::new(msg).into());
    }
    let dev = resolve_device(&ProcRoot::default(), &mount).map_err(anyhow::Error::msg)?;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    Ok(Lab {
        kernel,
        dir: o.lab_dir.clone(),
        fs,
        device,
        dev_numbers: format!("{}:{}", dev.major, dev.minor),
        mount_options: apply::mount_of(&mount)?.1,
        cap: crate::cmd::lab::cap::lab_cap(&st, dev.major, dev.minor),
        mount,
        dirty: DirtyLimits::read()?,
    })
}

fn same(a: &Path, b: &Path) -> bool {
    let c = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    c(a) == c(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_is_left_to_the_trial() {
        let a: Vec<String> = [
            "--mode",
            "buffered",
            "--target",
            "/x",
            "-d",
            "5s",
            "--duration=9s",
            "--sync",
            "every:10",
            "-t",
            "/y",
            "--target=/z",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            strip_placement(&a),
            ["--mode", "buffered", "--sync", "every:10"]
        );
    }

    /// Defect: B's recipe line gave `--mode` twice, which `run` refuses.
    #[test]
    fn b_options_replace_a_options_of_the_same_name() {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = v(&[
            "-m",
            "mmap",
            "--threads",
            "32",
            "--sync=periodic:10s",
            "--follow-symlinks",
        ]);
        assert_eq!(
            with_extra(&a, &v(&["--mode", "direct", "--sync", "periodic:1s"])),
            v(&[
                "--threads",
                "32",
                "--follow-symlinks",
                "--mode",
                "direct",
                "--sync",
                "periodic:1s"
            ])
        );
        assert_eq!(with_extra(&a, &[]), a);
    }
}
