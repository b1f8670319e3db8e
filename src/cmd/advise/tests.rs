//! The command's outputs for a fixture recording, knobs checked on a
//! fixture machine: reviewed snapshots of the text and the JSON.

use super::cmd::advise;
use super::Format;
use crate::source::proc::ProcRoot;
use std::path::Path;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/recording/observe-and-writers-v0.1.0.jsonl"
);

/// Another machine (`lab2`, Linux 6.8) with bdi 7:0's knobs and the dirty
/// sysctls.
fn machine() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (rel, v) in [
        ("proc/sys/kernel/osrelease", "6.8.0-49-generic"),
        ("proc/sys/kernel/hostname", "lab2"),
        ("proc/sys/vm/dirty_bytes", "0"),
        ("proc/sys/vm/dirty_background_bytes", "0"),
        ("sys/class/bdi/7:0/max_bytes", "0"),
        ("sys/class/bdi/7:0/strict_limit", "0"),
        ("sys/class/bdi/7:0/max_ratio", "100"),
    ] {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v).unwrap();
    }
    dir
}

#[test]
fn text_of_the_fixture_recording() {
    let dir = machine();
    let out = advise(
        Path::new(FIXTURE),
        Format::Text,
        &ProcRoot::under(dir.path()),
    )
    .unwrap();
    for l in out.lines().filter(|l| !l.contains("://")) {
        assert!(l.chars().count() <= 80, "{l}");
    }
    insta::assert_snapshot!(out);
}

#[test]
fn json_of_the_fixture_recording() {
    let dir = machine();
    let out = advise(
        Path::new(FIXTURE),
        Format::Json,
        &ProcRoot::under(dir.path()),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let first = v["proposals"][0].as_object().unwrap();
    let keys: Vec<&str> = first.keys().map(String::as_str).take(12).collect();
    assert_eq!(
        keys,
        [
            "change", "knob", "from", "to", "scope", "fidelity", "tradeoff", "source", "verdict",
            "before", "after", "interval"
        ]
    );
    insta::assert_snapshot!(out);
}

#[test]
fn an_empty_recording_has_nothing_to_advise() {
    let dir = machine();
    let rec = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/recording/dashboard-markers-v0.1.0.jsonl"
    );
    let out = advise(Path::new(rec), Format::Text, &ProcRoot::under(dir.path())).unwrap();
    assert!(out.contains("Nothing to advise: no stalls in the"), "{out}");
    assert!(out.contains(" 0 stalls, 0.00 s of stall time"), "{out}");
    let json = advise(Path::new(rec), Format::Json, &ProcRoot::under(dir.path())).unwrap();
    assert_eq!(json.trim(), "{\n  \"proposals\": []\n}");
}
