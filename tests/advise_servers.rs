//! An observed server's recording gets cards tagged honestly (issue 24).
//! The fixture is a real recording: PostgreSQL 15 under `pgbench -c 8 -j
//! 2`, observed by `run --observe-name postgres --record` on a lab ext4
//! capped at 10 MiB/s, none of our writers (`scripts/pg-fixture.sh` makes
//! it again). `advise` on it must tag no card `verified` (nothing was
//! tried) and PostgreSQL's own knobs `direction`, with nothing a trial
//! could apply: the lab runs our writers, not the server, so no trial
//! can vouch for them. Not root: it only reads the file.

mod common;

use common::{bin, run_ok};
use serde_json::Value;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recording/pgbench-observed.jsonl.gz"
);

/// PostgreSQL's own settings the catalog proposes.
const PG_KNOBS: [&str; 3] = [
    "checkpoint_flush_after",
    "wal_writer_flush_after",
    "backend_flush_after",
];

fn advise(format: &str) -> String {
    let out = run_ok(bin().args(["advise", FIXTURE, "--format", format]));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn an_observed_postgres_gets_direction_for_its_knobs_and_nothing_verified() {
    let v: Value = serde_json::from_str(&advise("json")).unwrap();
    let cards = v["proposals"].as_array().unwrap();
    let for_postgres: Vec<&Value> = cards
        .iter()
        .filter(|c| {
            c["subject"]
                .as_str()
                .is_some_and(|s| s.starts_with("postgres"))
        })
        .collect();
    assert!(
        !for_postgres.is_empty(),
        "the recording's stalls are postgres's: {v:#}"
    );
    for c in cards {
        assert_ne!(c["fidelity"], "verified", "nothing was tried: {c:#}");
        assert!(c["verdict"].is_null(), "{c:#}");
    }
    let pg: Vec<&Value> = cards
        .iter()
        .filter(|c| PG_KNOBS.contains(&c["knob"].as_str().unwrap()))
        .collect();
    assert!(!pg.is_empty(), "PostgreSQL's own knobs proposed: {v:#}");
    for c in &pg {
        assert_eq!(c["fidelity"], "direction", "{c:#}");
        assert_eq!(c["scope"], "application", "{c:#}");
        assert!(c["treatment"].is_null(), "no trial can apply it: {c:#}");
        assert!(
            c["source"].as_str().unwrap().contains("postgresql.org"),
            "{c:#}"
        );
    }
    // The text says the same, card by card.
    let text = advise("text");
    for c in &pg {
        let change = c["change"].as_str().unwrap();
        let at = text
            .find(change)
            .unwrap_or_else(|| panic!("{change} in:\n{text}"));
        let card = &text[at..];
        let fidelity = card.lines().nth(1).unwrap_or_default();
        assert!(
            fidelity.trim_start().starts_with("fidelity  direction"),
            "{change}: {fidelity}"
        );
    }
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with("fidelity  verified")),
        "{text}"
    );
}
