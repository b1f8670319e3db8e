//! What this kernel's tracefs gives: each event we read, found under the
//! name this kernel uses (older names included) with the fields we read
//! present in its `format` file, or why not. A missing event removes only
//! the evidence it gives: `TraceSession` enables the others.
//!
//! Pure over a directory (`events/` of tracefs, or a fixture tree of
//! another kernel's format files), so every kernel we claim is tested.

use crate::source::trace::sched_raw::PageLayout;
use std::path::Path;

/// Set to a comma-separated list of events (`writeback:folio_wait_writeback`,
/// `sched:sched_waking`, …) to run as if this kernel lacked them: how a
/// missing event degrades is checked on a kernel that has it.
pub const HIDE_ENV: &str = "STALLSCOPE_HIDE_EVENTS";

/// One event we read: the names it has had, the fields we need (`a|b`:
/// either), what it gives, and where it came from.
#[derive(Clone, Copy, Debug)]
pub struct EventSpec {
    pub system: &'static str,
    /// Newest first.
    pub names: &'static [&'static str],
    pub fields: &'static [&'static str],
    /// What is lost without it, for a person.
    pub gives: &'static str,
    /// Which kernels have it, for a person.
    pub history: &'static str,
}

/// balance_dirty_pages: each pause of a throttled writer.
pub const THROTTLE: EventSpec = EventSpec {
    system: "writeback",
    names: &["balance_dirty_pages"],
    fields: &[
        "bdi|name", "limit", "setpoint", "dirty", "pause", "paused", "period",
    ],
    gives: "throttle evidence",
    history: "since 3.2",
};

/// The wait on a page under writeback.
pub const PAGE_WAIT: EventSpec = EventSpec {
    system: "writeback",
    names: &["folio_wait_writeback", "wait_on_page_writeback"],
    fields: &["name|bdi", "ino", "index"],
    gives: "page waits",
    history: "wait_on_page_writeback 5.2-5.15, folio_wait_writeback from 5.16; none before 5.2",
};

/// writeback_start: why the flusher wrote.
pub const FLUSHER: EventSpec = EventSpec {
    system: "writeback",
    names: &["writeback_start"],
    fields: &["name|bdi", "nr_pages", "reason"],
    gives: "flusher reasons",
    history: "since 3.1",
};

/// sched_switch: when a watched thread blocks, and in which state.
pub const SWITCH: EventSpec = EventSpec {
    system: "sched",
    names: &["sched_switch"],
    fields: &["prev_comm", "prev_pid", "prev_state"],
    gives: "scheduler timing",
    history: "since 2.6.28",
};

/// sched_waking: who woke it, in the waker's context.
pub const WAKING: EventSpec = EventSpec {
    system: "sched",
    names: &["sched_waking"],
    fields: &["pid"],
    gives: "scheduler timing",
    history: "since 4.3",
};

/// The write-path system calls' entry and exit (the others are looked up
/// when the scheduler's events start: `sched_raw::SysEvent::read_all`);
/// fdatasync stands for them all here.
pub const CALLS: EventSpec = EventSpec {
    system: "syscalls",
    names: &["sys_enter_fdatasync"],
    fields: &["fd"],
    gives: "call boundaries",
    history: "CONFIG_FTRACE_SYSCALLS, on in Debian, Ubuntu and RHEL kernels",
};

/// Found under this name, or why not.
pub type Check = Result<&'static str, String>;

/// Every event we read, checked on one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceFeatures {
    pub throttle: Check,
    pub page_wait: Check,
    pub flusher: Check,
    pub switch: Check,
    pub waking: Check,
    /// The ring buffer's page (`events/header_page`): raw pages are read
    /// whole, in the kernel's page size.
    pub page: Result<PageLayout, String>,
    /// The write-path system calls' entry and exit events.
    pub calls: Check,
}

impl TraceFeatures {
    /// Checks the events under `events` (tracefs's `events/`), as if the
    /// ones named in `hidden` (`system:event`) were not there.
    pub fn detect(events: &Path, hidden: &[String]) -> TraceFeatures {
        let check = |spec: &EventSpec| check_event(events, spec, hidden);
        TraceFeatures {
            throttle: check(&THROTTLE),
            page_wait: check(&PAGE_WAIT),
            flusher: check(&FLUSHER),
            switch: check(&SWITCH),
            waking: check(&WAKING),
            page: read_header_page(events),
            calls: check(&CALLS),
        }
    }

    /// The writeback events to enable, by this kernel's names.
    pub fn writeback_events(&self) -> Vec<&'static str> {
        [&self.throttle, &self.page_wait, &self.flusher]
            .into_iter()
            .filter_map(|c| c.as_ref().ok().copied())
            .collect()
    }

    /// The scheduler's events time blocks: both are there and raw pages can
    /// be read. Err says what is missing.
    pub fn sched(&self) -> Result<(), String> {
        for (spec, c) in [(&SWITCH, &self.switch), (&WAKING, &self.waking)] {
            if let Err(why) = c {
                return Err(format!("sched:{} {why}", spec.names[0]));
            }
        }
        self.page.as_ref().map(drop).map_err(Clone::clone)
    }

    /// One line per missing event: `writeback:folio_wait_writeback (page
    /// waits): not on this kernel (…)`.
    pub fn missing(&self) -> Vec<String> {
        self.checks()
            .into_iter()
            .filter_map(|(spec, c)| {
                c.as_ref()
                    .err()
                    .map(|why| format!("{}:{} ({}): {why}", spec.system, spec.names[0], spec.gives))
            })
            .collect()
    }

    /// Each event with its check, in a fixed order.
    pub fn checks(&self) -> [(&'static EventSpec, &Check); 6] {
        [
            (&THROTTLE, &self.throttle),
            (&PAGE_WAIT, &self.page_wait),
            (&FLUSHER, &self.flusher),
            (&SWITCH, &self.switch),
            (&WAKING, &self.waking),
            (&CALLS, &self.calls),
        ]
    }
}

/// The page layout of `events/header_page` under `events`. One read: like
/// a filter file it answers only the first read (a second, at a non-zero
/// offset, returns nothing, and `read_to_string` starts with 32 bytes).
pub fn read_header_page(events: &Path) -> Result<PageLayout, String> {
    use std::io::Read;
    let mut buf = vec![0u8; 16 << 10];
    let n = std::fs::File::open(events.join("header_page"))
        .and_then(|mut f| f.read(&mut buf))
        .map_err(|e| format!("events/header_page: {e}"))?;
    PageLayout::parse(&String::from_utf8_lossy(&buf[..n]))
        .ok_or_else(|| "events/header_page: unexpected layout".into())
}

/// The events named in `STALLSCOPE_HIDE_EVENTS`.
pub fn hidden_from_env() -> Vec<String> {
    std::env::var(HIDE_ENV)
        .map(|v| {
            v.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The first of the spec's names this kernel has with every field we read.
fn check_event(events: &Path, spec: &EventSpec, hidden: &[String]) -> Check {
    let mut why = None;
    for &name in spec.names {
        let id = format!("{}:{name}", spec.system);
        if hidden.contains(&id) {
            why.get_or_insert(format!("hidden by {HIDE_ENV}"));
            continue;
        }
        let Ok(format) =
            std::fs::read_to_string(events.join(spec.system).join(name).join("format"))
        else {
            continue;
        };
        let have = format_fields(&format);
        match spec
            .fields
            .iter()
            .find(|f| !f.split('|').any(|alt| have.iter().any(|h| h == alt)))
        {
            None => return Ok(name),
            Some(f) => {
                why = Some(format!("{id} has no field {f} in its format"));
            }
        }
    }
    Err(why.unwrap_or_else(|| format!("not on this kernel ({})", spec.history)))
}

/// The field names of a `format` file (`field:unsigned long limit;` → limit).
pub fn format_fields(format: &str) -> Vec<String> {
    format
        .lines()
        .filter_map(|l| {
            let decl = l.trim().strip_prefix("field:")?.split(';').next()?;
            let name = decl.rsplit(' ').next()?;
            Some(name.split('[').next()?.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A fake `events/` tree with the given `system/event` format texts.
    fn tree(events: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (path, format) in events {
            let dir = d.path().join(path);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("format"), format).unwrap();
        }
        fs::write(
            d.path().join("header_page"),
            "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
             \tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
             \tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
             \tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n",
        )
        .unwrap();
        d
    }

    const WAIT: &str = "name: x\nID: 9\nformat:\n\tfield:char name[32];\toffset:8;\tsize:32;\tsigned:0;\n\tfield:unsigned long ino;\toffset:40;\tsize:8;\tsigned:0;\n\tfield:unsigned long index;\toffset:48;\tsize:8;\tsigned:0;\n";

    #[test]
    fn the_older_name_is_found_and_named() {
        let d = tree(&[("writeback/wait_on_page_writeback", WAIT)]);
        let f = TraceFeatures::detect(d.path(), &[]);
        assert_eq!(f.page_wait, Ok("wait_on_page_writeback"));
        assert_eq!(f.writeback_events(), ["wait_on_page_writeback"]);
        assert!(f
            .throttle
            .as_ref()
            .unwrap_err()
            .contains("not on this kernel"));
        let d = tree(&[
            ("writeback/wait_on_page_writeback", WAIT),
            ("writeback/folio_wait_writeback", WAIT),
        ]);
        let f = TraceFeatures::detect(d.path(), &[]);
        assert_eq!(f.page_wait, Ok("folio_wait_writeback"));
        assert_eq!(f.page.as_ref().map(|p| p.size), Ok(4096));
    }

    #[test]
    fn hidden_events_and_missing_fields_are_missing_with_the_reason() {
        let d = tree(&[("writeback/folio_wait_writeback", WAIT)]);
        let hide = vec!["writeback:folio_wait_writeback".to_string()];
        let f = TraceFeatures::detect(d.path(), &hide);
        assert_eq!(
            f.page_wait,
            Err(format!("hidden by {HIDE_ENV}")),
            "{:?}",
            f.missing()
        );
        let no_index = WAIT.replace("index", "idx");
        let d = tree(&[("writeback/folio_wait_writeback", &no_index)]);
        let f = TraceFeatures::detect(d.path(), &[]);
        assert_eq!(
            f.page_wait,
            Err("writeback:folio_wait_writeback has no field index in its format".into())
        );
        assert!(f.missing().iter().any(|m| m.starts_with(
            "writeback:folio_wait_writeback (page waits): writeback:folio_wait_writeback has no field index"
        )));
        assert!(f
            .sched()
            .unwrap_err()
            .starts_with("sched:sched_switch not on this kernel"));
    }
}
