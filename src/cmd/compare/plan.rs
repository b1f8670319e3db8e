//! The runs a compare makes, in order, and the checks made before the first.

use super::CompareOptions;
use crate::base::error::UsageError;
use crate::base::units::Dur;
use crate::config::{Config, Mode};
use crate::model::snapshot::TargetMeta;
use crate::session as run;
use std::path::{Path, PathBuf};

/// One planned run.
#[derive(Clone, Debug)]
pub(super) struct Variant {
    pub(super) n: usize,
    pub(super) target: PathBuf,
    /// The target's filesystem and device, read once at planning.
    pub(super) meta: TargetMeta,
    pub(super) mode: Mode,
    pub(super) threads: u32,
}

impl Variant {
    pub(super) fn label(&self) -> String {
        format!(
            "{} {} · {} × {}",
            self.meta.fs,
            self.target.display(),
            self.mode,
            self.threads
        )
    }

    pub(super) fn config(&self, opts: &CompareOptions) -> Config {
        Config {
            targets: vec![self.target.clone()],
            mode: self.mode,
            threads: self.threads,
            duration: Some(Dur(opts.each)),
            ..opts.base.clone()
        }
    }

    /// `-<n>-<fs>[-<dir>]-<mode>-<threads>t`: unique per run and safe in a
    /// file name.
    pub(super) fn file_tag(&self) -> String {
        let dir = self
            .target
            .file_name()
            .map(|d| slug(&d.to_string_lossy()))
            .filter(|d| !d.is_empty() && *d != slug(&self.meta.fs));
        let mut parts = vec![self.n.to_string(), slug(&self.meta.fs)];
        parts.extend(dir);
        parts.push(self.mode.to_string());
        parts.push(format!("{}t", self.threads));
        format!("-{}", parts.join("-"))
    }
}

/// Letters, digits, `.` and `_`; anything else becomes one `-`.
pub(super) fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches(['-', '.']).to_string()
}

/// `FILE` with `tag` before its extension (`.jsonl.zst` counts as one).
pub(super) fn record_path(file: &Path, tag: &str) -> PathBuf {
    let name = file
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let (stem, zst) = match name.strip_suffix(".zst") {
        Some(s) => (s, ".zst"),
        None => (name.as_str(), ""),
    };
    let (base, ext) = match stem.rfind('.').filter(|&i| i > 0) {
        Some(i) => stem.split_at(i),
        None => (stem, ""),
    };
    file.with_file_name(format!("{base}{tag}{ext}{zst}"))
}

pub(super) fn dedup<T: PartialEq + Clone>(v: &[T], default: T) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in v {
        if !out.contains(x) {
            out.push(x.clone());
        }
    }
    if out.is_empty() {
        out.push(default);
    }
    out
}

/// The targets as given, or the default one.
fn targets(opts: &CompareOptions) -> Vec<PathBuf> {
    if opts.base.targets.is_empty() {
        vec![run::default_target()]
    } else {
        opts.base.targets.clone()
    }
}

/// Target-major: every mode and thread count on the first target, then
/// the next, so the runs of one filesystem sit together in the table.
pub(super) fn plan(opts: &CompareOptions) -> Vec<Variant> {
    let modes = dedup(&opts.modes, opts.base.mode);
    let threads = dedup(&opts.threads, opts.base.threads);
    let mut out = Vec::new();
    for target in &targets(opts) {
        let meta = crate::source::mounts::describe(target);
        for &mode in &modes {
            for &threads in &threads {
                out.push(Variant {
                    n: out.len() + 1,
                    target: target.clone(),
                    meta: meta.clone(),
                    mode,
                    threads,
                });
            }
        }
    }
    out
}

/// Everything that would make a later run fail for a reason the person
/// can fix, checked before the first run rather than minutes into it.
pub(super) fn check(opts: &CompareOptions, plan: &[Variant]) -> Result<(), UsageError> {
    if opts.each.is_zero() {
        return Err(UsageError::new("--each must be above zero"));
    }
    let mut seen = Vec::new();
    for t in targets(opts) {
        crate::source::scratch::check_target(&t)?;
        let canon = std::fs::canonicalize(&t).unwrap_or_else(|_| t.clone());
        if seen.contains(&canon) {
            let msg = format!("target {} is given twice", t.display());
            return Err(UsageError::new(msg));
        }
        seen.push(canon);
    }
    for v in plan {
        v.config(opts)
            .validate()
            .map_err(|e| UsageError::new(format!("{} × {}: {e}", v.mode, v.threads)))?;
        if let Some(file) = &opts.record {
            run::check_record_path(&record_path(file, &v.file_tag()))?;
        }
    }
    if let Some(svg) = &opts.svg {
        crate::cmd::outfile::check_dir(svg)?;
    }
    Ok(())
}
