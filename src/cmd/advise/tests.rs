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

/// A tried card: `verified` with its verdict, both sides' figures (B's
/// factors over A's) and the recipe, in the text and the JSON.
#[test]
fn a_tried_card_shows_its_numbers() {
    use crate::analysis::advice::machine::Machine;
    use crate::analysis::advice::outcome::{Figures, Outcome, Verdict};
    let dir = machine();
    let rec = crate::sink::recording::read(Path::new(FIXTURE)).unwrap();
    let d = crate::analysis::advice::diagnosis::from_recording(&rec);
    let m = Machine::probe(&ProcRoot::under(dir.path()), &d.devices());
    let mut cards = crate::analysis::advice::catalog::propose(&d, &m);
    let fig = |max: f64, p999: f64| Figures {
        stall_ms_per_gib: [("sync".to_string(), max * 10.0)].into_iter().collect(),
        p99_ms: p999 / 2.0,
        p999_ms: p999,
        max_stall_ms: max,
        achieved_share: 1.0,
        mib_per_s: 19.5,
        peak_dirty_kib: 64 << 10,
        zero_s: 3.0,
        runs: 7,
        open_loop: false,
    };
    cards[1].verify(Outcome {
        verdict: Verdict::Improved,
        measure: "ln(B/A) of max_stall_ms".into(),
        difference: 0.2f64.ln(),
        interval: (0.1f64.ln(), 0.3f64.ln()),
        noise: 1.1f64.ln(),
        pairs_lower: 6,
        pairs_higher: 0,
        before: fig(5000.0, 4000.0),
        after: fig(1000.0, 400.0),
        moved: None,
        recipe: "stallscope lab up --fs ext4 --cap 20MiB\n# revert:\nstallscope lab down".into(),
        notes: vec!["closed loop".into()],
    });
    let text = crate::analysis::advice::text::render(&d, &m, &cards);
    let card: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("  2. "))
        .take_while(|l| !l.starts_with("  3. "))
        .collect();
    let card = card.join("\n");
    // As read: the wrapping's line breaks and indents as one space.
    let flat = card.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(card.contains("fidelity  verified (improved)"), "{card}");
    assert!(
        flat.contains(
            "verdict improved ln(B/A) of max_stall_ms ×0.20 (95 % interval ×0.10 … ×0.30)"
        ),
        "{card}"
    );
    assert!(
        flat.contains("before max stall 5000 ms, closed-loop p99.9 4000.0 ms"),
        "{card}"
    );
    assert!(
        flat.contains("after max stall 1000 ms (×0.20), closed-loop p99.9 400.0 ms (×0.10)"),
        "{card}"
    );
    assert!(flat.contains("19.5 MiB/s, 3 s at 0 MiB/s"), "{card}");
    assert!(card.contains("note      closed loop"), "{card}");
    assert!(
        card.contains(
            "recipe    stallscope lab up --fs ext4 --cap 20MiB\n               # revert:"
        ),
        "{card}"
    );
    assert_eq!(text.matches("verified").count(), 1, "only the tried card");

    let v: serde_json::Value = serde_json::from_str(&super::json::render(&cards, None)).unwrap();
    let c = &v["proposals"][1];
    assert!(c["fidelity"] == "verified" && c["verdict"] == "improved");
    assert_eq!(c["before"]["max_stall_ms"], 5000.0);
    assert_eq!(c["after"]["p999_ms"], 400.0);
    assert_eq!(c["interval"].as_array().unwrap().len(), 2);
    assert!(c["trial"]["recipe"].as_str().unwrap().contains("lab down"));
    let t = &c["trial"];
    assert!(t["pairs_lower"] == 6 && t["pairs_higher"] == 0, "{t}");
    let other = &v["proposals"][0];
    assert!(
        other["verdict"].is_null() && other.get("trial").is_none(),
        "{other}"
    );
}
