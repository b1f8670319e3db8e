//! Named workloads (`--preset NAME`): a description, `Config` keys and the
//! variants `compare` runs. The shipped ones are TOML files in
//! `assets/presets/`, embedded with `include_str!` so the binary finds them
//! from any directory; a path to a TOML file of the same shape works too.
//!
//! Layering is defaults < preset < config file < command line. A config
//! file parses into a whole `Config` (defaults filled in), which cannot say
//! which keys it set, so `Preset::with_config_file` merges the TOML tables
//! instead; the command line then goes on top as usual.

use crate::base::error::UsageError;
use crate::config::{Config, Mode};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::path::Path;

/// The shipped presets: (name, TOML text).
const SHIPPED: [(&str, &str); 3] = [
    (
        "cassandra-commitlog",
        include_str!("../../assets/presets/cassandra-commitlog.toml"),
    ),
    (
        "cassandra-direct",
        include_str!("../../assets/presets/cassandra-direct.toml"),
    ),
    (
        "rados-bench",
        include_str!("../../assets/presets/rados-bench.toml"),
    ),
];

/// A parsed, validated preset.
#[derive(Clone, Debug, PartialEq)]
pub struct Preset {
    pub name: String,
    pub description: String,
    /// Defaults with the preset's `[config]` keys over them.
    pub config: Config,
    /// `compare` variants; empty means the config's own mode / thread count.
    pub modes: Vec<Mode>,
    pub threads: Vec<u32>,
    /// The `[config]` table as written, for layering a config file over it.
    table: toml::Table,
}

/// The file's shape; `C` is `Config` (typed, so errors name the line) or
/// the raw table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetFile<C> {
    description: String,
    #[serde(default)]
    config: C,
    #[serde(default)]
    compare: CompareTable,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompareTable {
    #[serde(default)]
    modes: Vec<Mode>,
    #[serde(default)]
    threads: Vec<u32>,
}

/// Every shipped preset with its description, in a stable order.
pub fn list() -> Vec<(&'static str, String)> {
    SHIPPED
        .iter()
        .map(|(name, text)| {
            let desc = parse(name, text)
                .map(|p| p.description)
                .unwrap_or_else(|e| format!("(broken: {e})"));
            (*name, desc)
        })
        .collect()
}

/// `--preset list`: one line per shipped preset.
pub fn render_list() -> String {
    let items = list();
    let width = items.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    items
        .iter()
        .map(|(n, d)| format!("{n:width$}  {d}\n"))
        .collect()
}

/// A shipped preset by name, or a preset file by path (a name containing
/// `/` or ending in `.toml`).
pub fn load(name: &str) -> Result<Preset, UsageError> {
    if let Some((n, text)) = SHIPPED.iter().find(|(n, _)| *n == name) {
        return parse(n, text);
    }
    if name.contains('/') || name.ends_with(".toml") {
        let path = Path::new(name);
        let text = std::fs::read_to_string(path)
            .map_err(|e| UsageError::new(format!("cannot read preset {name}: {e}")))?;
        let stem = path
            .file_stem()
            .map_or(name.into(), |s| s.to_string_lossy());
        return parse(&stem, &text).map_err(|e| UsageError::new(format!("{name}: {e}")));
    }
    let known: Vec<&str> = SHIPPED.iter().map(|(n, _)| *n).collect();
    Err(UsageError::new(format!(
        "unknown preset '{name}' (known: {}; or a path to a preset .toml file)",
        known.join(", ")
    )))
}

/// Parses and validates preset text: the config and every variant it
/// asks `compare` to run must pass `Config::validate`.
pub fn parse(name: &str, text: &str) -> Result<Preset, UsageError> {
    let bad = |m: String| UsageError::new(format!("preset {name}: {m}"));
    let file: PresetFile<Config> = from_toml(text).map_err(bad)?;
    let raw: PresetFile<toml::Table> = from_toml(text).map_err(bad)?;
    let p = Preset {
        name: name.to_string(),
        description: file.description,
        config: file.config,
        modes: file.compare.modes,
        threads: file.compare.threads,
        table: raw.config,
    };
    for cfg in std::iter::once(p.config.clone()).chain(p.variants()) {
        cfg.validate()
            .map_err(|e| bad(format!("{} × {}: {e}", cfg.mode, cfg.threads)))?;
    }
    Ok(p)
}

impl Preset {
    /// The preset's config with every mode × thread-count variant applied.
    fn variants(&self) -> impl Iterator<Item = Config> + '_ {
        let modes = non_empty(&self.modes, self.config.mode);
        let threads = non_empty(&self.threads, self.config.threads);
        modes.into_iter().flat_map(move |mode| {
            threads.clone().into_iter().map(move |threads| Config {
                mode,
                threads,
                ..self.config.clone()
            })
        })
    }

    /// The preset with a config file's keys over it (not validated: the
    /// command line still goes on top).
    pub fn with_config_file(&self, file: Option<&Path>) -> Result<Config, UsageError> {
        let Some(path) = file else {
            return Ok(self.config.clone());
        };
        let read_err = |e: std::io::Error| {
            UsageError::new(format!("cannot read config {}: {e}", path.display()))
        };
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        let in_file = |m: String| UsageError::new(format!("{}: {m}", path.display()));
        // Parsed alone first, so errors name the file's key and line.
        Config::from_toml(&text).map_err(in_file)?;
        let over: toml::Table = from_toml(&text).map_err(in_file)?;
        let mut merged = self.table.clone();
        merged.extend(over);
        table_to_config(merged).map_err(in_file)
    }
}

fn non_empty<T: Clone>(v: &[T], default: T) -> Vec<T> {
    if v.is_empty() {
        vec![default]
    } else {
        v.to_vec()
    }
}

fn table_to_config(t: toml::Table) -> Result<Config, String> {
    toml::Value::Table(t)
        .try_into()
        .map_err(|e: toml::de::Error| e.message().replace('\n', " "))
}

/// Parses TOML; the error is one line with the line number.
fn from_toml<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    toml::from_str(text).map_err(|e: toml::de::Error| {
        let msg = e.message().replace('\n', " ");
        match e.span() {
            Some(s) => {
                let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                format!("line {line}: {msg}")
            }
            None => msg,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::units::{ByteSize, Dur};
    use crate::config::SyncPolicy;
    use std::time::Duration;

    #[test]
    fn every_shipped_preset_parses_and_validates() {
        let listed = list();
        assert_eq!(listed.len(), SHIPPED.len());
        for (name, desc) in listed {
            let p = load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(p.name, name);
            assert_eq!(p.description, desc);
            assert!(!desc.starts_with("(broken"), "{name}: {desc}");
            p.config.validate().unwrap();
            assert!(p.variants().count() >= 2, "{name} compares something");
        }
    }

    #[test]
    fn shipped_presets_say_what_the_issue_asks() {
        let c = load("cassandra-commitlog").unwrap();
        assert_eq!(c.config.mode, Mode::Mmap);
        assert_eq!(c.config.threads, 32);
        assert_eq!(c.config.record_size(), 818);
        assert_eq!(c.config.segment_size, ByteSize(32 << 20));
        assert_eq!(c.config.sync, SyncPolicy::Periodic(Duration::from_secs(10)));
        assert_eq!(c.modes, [Mode::Mmap, Mode::Buffered]);

        let d = load("cassandra-direct").unwrap();
        assert_eq!(d.config.mode, Mode::Direct);
        assert_eq!(d.modes[0], Mode::Direct);

        let r = load("rados-bench").unwrap();
        assert_eq!(r.config.mode, Mode::Journal);
        assert_eq!(r.config.record_size(), 4 << 20);
        assert_eq!(r.config.commit_interval, Dur(Duration::from_secs(5)));
        assert_eq!(r.threads, [1, 4]);
    }

    #[test]
    fn unknown_name_lists_the_known_ones() {
        let e = load("cassandra").unwrap_err().to_string();
        assert!(e.contains("unknown preset 'cassandra'"), "{e}");
        for (name, _) in SHIPPED {
            assert!(e.contains(name), "{e}");
        }
    }

    #[test]
    fn bad_preset_text_names_the_problem() {
        let e = parse("x", "description = \"d\"\n[config]\nthreadz = 2\n").unwrap_err();
        assert!(e.0.contains("threadz") && e.0.contains("line 3"), "{e}");
        let e = parse("x", "description = \"d\"\n[compare]\nmodes = [\"fsync\"]\n").unwrap_err();
        assert!(e.0.contains("line 3") && e.0.contains("fsync"), "{e}");
        // A variant that cannot run is refused up front.
        let e = parse("x", "description = \"d\"\n[compare]\nthreads = [1, 0]\n").unwrap_err();
        assert!(e.0.contains("--threads 0"), "{e}");
    }

    #[test]
    fn preset_file_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("mine.toml");
        std::fs::write(&f, "description = \"mine\"\n[config]\nthreads = 3\n").unwrap();
        let p = load(f.to_str().unwrap()).unwrap();
        assert_eq!((p.name.as_str(), p.config.threads), ("mine", 3));
        let e = load(dir.path().join("none.toml").to_str().unwrap()).unwrap_err();
        assert!(e.0.contains("cannot read preset"), "{e}");
    }

    #[test]
    fn config_file_goes_over_the_preset_only_where_it_says() {
        let p = load("cassandra-commitlog").unwrap();
        assert_eq!(p.with_config_file(None).unwrap(), p.config);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "threads = 8\ninterval = \"2s\"\n").unwrap();
        let c = p.with_config_file(Some(&f)).unwrap();
        assert_eq!(c.threads, 8, "the file beats the preset");
        assert_eq!(c.interval, Dur(Duration::from_secs(2)));
        assert_eq!(c.mode, Mode::Mmap, "the preset beats the default");
        assert_eq!(c.record_size, Some(ByteSize(818)));
        std::fs::write(&f, "\nbogus = 1\n").unwrap();
        let e = p.with_config_file(Some(&f)).unwrap_err();
        assert!(e.0.contains("bogus") && e.0.contains("line 2"), "{e}");
    }

    #[test]
    fn list_renders_one_line_each() {
        let text = render_list();
        assert_eq!(text.lines().count(), SHIPPED.len());
        assert!(text.starts_with("cassandra-commitlog  Cassandra"), "{text}");
    }
}
