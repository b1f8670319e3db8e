//! The catalog over synthetic diagnoses and machines probed from fixture
//! roots: gates, ranking, concrete values, fidelity.

use super::*;
use crate::analysis::advice::diagnosis::{DirtyLimits, Place, Server, Stalled};
use crate::analysis::advice::treatment::Setting;
use crate::config::{Mode, SyncPolicy};
use crate::model::snapshot::CauseTotal;
use crate::source::proc::{DirtySysctls, ProcRoot};
use std::collections::BTreeMap;

fn writers(mode: Mode, by: &[(Cause, f64)]) -> Subject {
    Subject {
        who: Stalled::Writers {
            mode,
            threads: 4,
            sync: Some(SyncPolicy::Periodic(std::time::Duration::from_secs(10))),
            commit_interval_s: Some(5.0),
        },
        place: Some(Place {
            path: "/mnt/lab/ext4".into(),
            fs: "ext4".into(),
            mount_options: "rw,relatime".into(),
            device: Some("7:0".into()),
            writeback_mib_per_s: Some(20.0),
        }),
        by_cause: totals(by),
        bytes: Some(1 << 30),
        journal_waits: 0,
    }
}

fn server(comm: &str, by: &[(Cause, f64)]) -> Subject {
    Subject {
        who: Stalled::Server {
            pid: 42,
            comm: comm.into(),
            kind: Server::of(comm),
        },
        place: Some(Place {
            device: Some("8:0".into()),
            ..Place::default()
        }),
        by_cause: totals(by),
        bytes: None,
        journal_waits: 0,
    }
}

fn totals(by: &[(Cause, f64)]) -> BTreeMap<Cause, CauseTotal> {
    by.iter()
        .map(|(c, ms)| (*c, CauseTotal { count: 3, ms: *ms }))
        .collect()
}

fn diag(kernel: &str, subjects: Vec<Subject>) -> Diagnosis {
    Diagnosis {
        kernel: kernel.into(),
        host: "lab".into(),
        title: "test".into(),
        span_s: 60.0,
        dirty: DirtyLimits {
            sysctls: Some(DirtySysctls {
                dirty_ratio: Some(20),
                dirty_bytes: Some(0),
                dirty_background_ratio: Some(10),
                dirty_background_bytes: Some(64 << 20),
                dirty_expire_centisecs: Some(3000),
                dirty_writeback_centisecs: Some(500),
            }),
            thresh_bytes: Some(1 << 30),
            bg_thresh_bytes: Some(64 << 20),
        },
        subjects,
    }
}

/// A fixture root: `release`, the dirty sysctls, and bdi 7:0 with
/// `max_bytes` and (`strict`) `strict_limit`.
fn machine(release: &str, strict: bool, max_bytes: bool) -> (tempfile::TempDir, Machine) {
    let dir = tempfile::tempdir().unwrap();
    let w = |rel: &str, v: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v).unwrap();
    };
    w("proc/sys/kernel/osrelease", release);
    w("proc/sys/kernel/hostname", "lab");
    w("proc/sys/vm/dirty_bytes", "0");
    w("proc/sys/vm/dirty_background_bytes", "67108864");
    w("sys/class/bdi/7:0/max_ratio", "100");
    if strict {
        w("sys/class/bdi/7:0/strict_limit", "0");
    }
    if max_bytes {
        w("sys/class/bdi/7:0/max_bytes", "0");
    }
    let m = Machine::probe(&ProcRoot::under(dir.path()), &["7:0".into()]);
    (dir, m)
}

fn find<'a>(cards: &'a [Proposal], knob: &str) -> Option<&'a Proposal> {
    cards.iter().find(|c| c.knob == knob)
}

#[test]
fn device_limit_applies_on_6_2_with_its_knobs() {
    let d = diag(
        "6.2.0",
        vec![writers(Mode::Buffered, &[(Cause::Sync, 9000.0)])],
    );
    let (_dir, m) = machine("6.2.0", true, true);
    let cards = propose(&d, &m);
    let c = find(&cards, "/sys/class/bdi/7:0/max_bytes").expect("device card");
    assert_eq!(c.gate, None, "{c:?}");
    assert_eq!(c.scope, Scope::Device);
    // 20 MiB/s of writeback: about a second of it.
    assert_eq!(c.to, (20u64 << 20).to_string());
    assert_eq!(c.from.as_deref(), Some("0"), "the value here: same host");
    let t = c.treatment.as_ref().unwrap();
    assert_eq!(
        t.settings[1],
        Setting::Sysfs {
            path: "/sys/class/bdi/7:0/strict_limit".into(),
            value: "1".into()
        }
    );
    assert!(
        find(&cards, "/sys/class/bdi/7:0/max_ratio").is_none(),
        "no fallback where max_bytes applies"
    );
}

#[test]
fn without_strict_limit_the_device_card_says_why() {
    let d = diag(
        "6.2.0",
        vec![writers(Mode::Buffered, &[(Cause::Sync, 9000.0)])],
    );
    let (_dir, m) = machine("6.2.0", false, true);
    let cards = propose(&d, &m);
    let c = find(&cards, "/sys/class/bdi/7:0/max_bytes").unwrap();
    let gate = c.gate.as_deref().expect("gated");
    assert!(
        gate.contains("/sys/class/bdi/7:0/strict_limit is not on this machine"),
        "{gate}"
    );
    // Gated cards come after those that apply, within the cause.
    let at = cards.iter().position(|x| x.knob == c.knob).unwrap();
    assert!(cards[..at].iter().all(|x| x.gate.is_none()));
    assert!(cards[at..]
        .iter()
        .all(|x| x.gate.is_some() || x.cause != "sync"));
}

#[test]
fn kernel_5_15_gets_max_ratio_instead_of_max_bytes() {
    let d = diag(
        "5.15.0-91-generic",
        vec![writers(Mode::Buffered, &[(Cause::DirtyThrottle, 5000.0)])],
    );
    let (_dir, m) = machine("5.15.0-91-generic", true, false);
    let cards = propose(&d, &m);
    let c = find(&cards, "/sys/class/bdi/7:0/max_bytes").unwrap();
    let gate = c.gate.as_deref().unwrap();
    assert!(
        gate.contains("needs Linux 6.2") && gate.contains("5.15"),
        "{gate}"
    );
    let r = find(&cards, "/sys/class/bdi/7:0/max_ratio").expect("5.15 fallback");
    assert_eq!(r.gate, None, "{r:?}");
    // 20 MiB of a 1 GiB limit: 2 % (rounded up).
    assert_eq!(r.to, "2");
    assert!(
        cards.iter().position(|x| x.knob == r.knob) < cards.iter().position(|x| x.knob == c.knob)
    );
}

#[test]
fn causes_rank_by_stall_time_and_narrow_scopes_come_first() {
    let d = diag(
        "6.8.0",
        vec![writers(
            Mode::Mmap,
            &[(Cause::DirtyThrottle, 2000.0), (Cause::Sync, 9000.0)],
        )],
    );
    let (_dir, m) = machine("6.8.0", true, true);
    let cards = propose(&d, &m);
    let first_dt = cards
        .iter()
        .position(|c| c.cause == "dirty_throttle")
        .unwrap();
    assert!(
        cards[..first_dt].iter().all(|c| c.cause == "sync"),
        "sync has more time"
    );
    assert!(first_dt > 0);
    for cause in ["sync", "dirty_throttle"] {
        let scopes: Vec<Scope> = cards
            .iter()
            .filter(|c| c.cause == cause && c.gate.is_none())
            .map(|c| c.scope)
            .collect();
        let mut sorted = scopes.clone();
        sorted.sort();
        assert_eq!(scopes, sorted, "{cause}: narrower first");
        if cause == "sync" {
            assert!(scopes.contains(&Scope::Global) && scopes.contains(&Scope::Device));
        }
    }
    // A global card says what else it changes.
    for c in cards.iter().filter(|c| c.scope == Scope::Global) {
        assert!(c.tradeoff.contains("global: also"), "{c:?}");
    }
    // One card per knob and value, under the first cause that asked.
    let bg: Vec<_> = cards
        .iter()
        .filter(|c| c.knob == "vm.dirty_background_bytes")
        .collect();
    assert_eq!(bg.len(), 1);
    assert_eq!(bg[0].cause, "sync");
    // Concrete values: recorded 64 MiB → 20 MiB, written as bytes.
    assert_eq!(bg[0].from.as_deref(), Some("67108864"));
    assert_eq!(bg[0].to, (20u64 << 20).to_string());
    // mmap writers: a write path change, tried by rerunning.
    let wp = cards
        .iter()
        .find(|c| c.to == "buffered")
        .expect("mmap → buffered");
    assert_eq!(wp.cause, "dirty_throttle");
}

#[test]
fn nothing_is_verified_without_an_outcome_and_servers_are_direction() {
    let d = diag(
        "6.8.0",
        vec![
            writers(
                Mode::Journal,
                &[(Cause::JournalFull, 500.0), (Cause::Sync, 100.0)],
            ),
            server("postgres", &[(Cause::Sync, 3000.0), (Cause::Device, 200.0)]),
            server("db_bench", &[(Cause::AppDelay, 4000.0)]),
            server("ceph-osd", &[(Cause::DirtyThrottle, 50.0)]),
        ],
    );
    let (_dir, m) = machine("6.8.0", true, true);
    let cards = propose(&d, &m);
    assert!(cards.len() > 10, "{}", cards.len());
    for c in &cards {
        assert_ne!(c.fidelity, Fidelity::Verified, "{c:?}");
        assert!(c.outcome.is_none());
        assert!(!c.source.is_empty() && !c.tradeoff.is_empty() && !c.to.is_empty());
        if c.scope == Scope::Application && c.subject.as_deref().is_some_and(|s| s.contains("pid"))
        {
            assert_eq!(c.fidelity, Fidelity::Direction, "{c:?}");
            assert!(c.treatment.is_none(), "a server's knob: {c:?}");
        }
    }
    for knob in [
        "checkpoint_flush_after",
        "wal_writer_flush_after",
        "backend_flush_after",
        "max_background_jobs",
        "level0_slowdown_writes_trigger",
        "filestore_queue_max_bytes",
        "--commit-interval",
        "commit",
    ] {
        assert!(find(&cards, knob).is_some(), "{knob}");
    }
    assert!(
        find(&cards, "filestore_queue_max_bytes")
            .unwrap()
            .gate
            .is_some(),
        "FileStore"
    );
    let dev = cards
        .iter()
        .filter(|c| c.cause == "device")
        .collect::<Vec<_>>();
    assert!(!dev.is_empty() && dev.iter().all(|c| c.fidelity == Fidelity::NotTestable));
    assert_eq!(cards[0].cause, "app_delay", "most stall time first");
}

#[test]
fn no_stalls_no_cards() {
    let d = diag("6.8.0", vec![writers(Mode::Mmap, &[])]);
    let (_dir, m) = machine("6.8.0", true, true);
    assert!(propose(&d, &m).is_empty());
}

#[test]
fn another_machine_says_where_it_looked() {
    let mut d = diag(
        "6.8.0",
        vec![writers(Mode::Buffered, &[(Cause::Sync, 900.0)])],
    );
    d.host = "db7".into();
    let (_dir, m) = machine("6.8.0", false, true);
    let cards = propose(&d, &m);
    let c = find(&cards, "/sys/class/bdi/7:0/max_bytes").unwrap();
    assert!(
        c.gate.as_deref().unwrap().contains("recorded on db7"),
        "{c:?}"
    );
    assert_eq!(c.from, None, "what it holds there is not known here");
}

#[test]
fn human_sizes() {
    assert_eq!(human(20 << 20), "20 MiB");
    assert_eq!(human(1536 << 20), "1.5 GiB");
    assert_eq!(human(818), "818 B");
}
