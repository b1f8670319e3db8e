//! Root-only: the trial's verdicts checked from outside (issue 24). For
//! each seed whose change a trial verified, this test makes the change
//! itself — its own writes to the knobs, none of stallscope's trial or
//! advise code — reruns the seed's workload with the `stallscope run`
//! binary, puts the knobs back itself, and must see the direction the
//! trial's verdict gave: the seed's stall time (its causes, per GiB
//! written) and the longest stall lower with the change. Medians of
//! `RUNS` short runs a side, interleaved A B B A A B so a drift of the
//! machine favours neither side.
//!
//! A seed is a row of `SEEDS`: the lab, the workload, the change as
//! writes (with the file that restores each), the causes it must cut.
//! The buffered writer behind a huge dirty backlog is the first; the mmap
//! commitlog on xfs and the 4-thread journal go in as rows once their
//! verified changes are known.

mod common;

use common::machine::{device_of, Machine};
use common::temp_lab::TempLab;
use common::{bin, have, need_root, run_ok, skip};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One write of a seed's change: `file` (`{bdi}` is the lab device's
/// major:minor) gets `value`; `restore` is the file whose text, saved
/// before, puts it back (writing a bdi's `max_bytes` sets its
/// `max_ratio_fine`, and `max_bytes` read back is a conversion, so the
/// ratio is the faithful original).
struct Write {
    file: &'static str,
    value: &'static str,
    restore: &'static str,
}

struct Seed {
    name: &'static str,
    /// `lab up` arguments besides `--dir`.
    lab: &'static [&'static str],
    /// The filesystem the workload writes on (`mnt/<fs>` of the lab).
    fs: &'static str,
    /// `run` arguments of the workload besides the target and length.
    run: &'static [&'static str],
    /// Each run's length: long enough for the seed's stall to happen and
    /// end in it.
    secs: u32,
    change: &'static [Write],
    /// The causes whose stall time the change cuts (the trial's verdict).
    causes: &'static [&'static str],
    /// Needed for the change, else the seed is skipped (the kernel lacks it).
    needs: &'static str,
}

/// The README's trial of a device-scoped limit: a buffered writer with an
/// fdatasync every 100 MiB (6400 records of 16 KiB at 960 a second, 15
/// MiB/s offered) behind a 1 GiB dirty limit on a 20 MiB/s disk: each
/// sync waits for the ~100 MiB dirtied since the last one (~5 s); with
/// the device held to 32 MiB of dirty data (strict) it waits for less.
/// 14 s runs: the first sync comes at ~6.7 s and its stall ends within
/// the run.
const SEEDS: &[Seed] = &[Seed {
    name: "buffered writer, periodic fsync, 1 GiB dirty backlog",
    lab: &["--fs", "ext4", "--cap", "20MiB", "--dirty-bytes", "1G"],
    fs: "ext4",
    run: &[
        "--mode",
        "buffered",
        "--threads",
        "1",
        "--record-size",
        "16KiB",
        "--rate",
        "960",
        "--sync",
        "every:6400",
    ],
    secs: 14,
    change: &[
        Write {
            file: "/sys/class/bdi/{bdi}/max_bytes",
            value: "33554432",
            restore: "/sys/class/bdi/{bdi}/max_ratio_fine",
        },
        Write {
            file: "/sys/class/bdi/{bdi}/strict_limit",
            value: "1",
            restore: "/sys/class/bdi/{bdi}/strict_limit",
        },
    ],
    causes: &["sync", "writeback_wait"],
    needs: "/sys/class/bdi/{bdi}/max_bytes",
}];

/// Runs a side; A and B interleaved in this order.
const ORDER: [bool; 6] = [false, true, true, false, false, true];

/// A seed's change in force; the saved originals are written back on
/// drop, last write first.
struct Changed {
    saved: Vec<(PathBuf, String)>,
}

impl Changed {
    fn make(writes: &[Write], bdi: &str) -> Changed {
        let path = |f: &str| PathBuf::from(f.replace("{bdi}", bdi));
        let mut c = Changed { saved: Vec::new() };
        for w in writes {
            let restore = path(w.restore);
            let original = std::fs::read_to_string(&restore).unwrap();
            c.saved.push((restore, original.trim().to_string()));
            let file = path(w.file);
            std::fs::write(&file, w.value)
                .unwrap_or_else(|e| panic!("writing {} to {}: {e}", w.value, file.display()));
        }
        c
    }
}

impl Drop for Changed {
    fn drop(&mut self) {
        for (file, original) in self.saved.iter().rev() {
            if let Err(e) = std::fs::write(file, original) {
                eprintln!("putting {original} back in {}: {e}", file.display());
            }
        }
    }
}

/// What one run measured, from its JSONL output.
struct Figures {
    /// Stall time of the seed's causes per GiB written, ms.
    stall_ms_per_gib: f64,
    /// The longest stall, ms.
    max_stall_ms: f64,
    mib_written: f64,
}

fn figures(jsonl: &str, causes: &[&str]) -> Figures {
    let lines: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let summary = lines
        .iter()
        .find(|v| v["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary:\n{jsonl}"));
    let mib = summary["mib_per_s"].as_f64().unwrap() * summary["duration_s"].as_f64().unwrap();
    assert!(mib > 0.0, "nothing written: {summary}");
    let ms: f64 = causes
        .iter()
        .map(|c| summary["by_cause"][c]["ms"].as_f64().unwrap_or(0.0))
        .sum();
    let max_stall_ms = lines
        .iter()
        .filter(|v| v["type"] == "stall")
        .map(|v| v["duration_ms"].as_f64().unwrap())
        .fold(0.0, f64::max);
    Figures {
        stall_ms_per_gib: ms / (mib / 1024.0),
        max_stall_ms,
        mib_written: mib,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The seed's workload once on `mnt`, dirty data written out first.
fn run_once(seed: &Seed, mnt: &Path) -> Figures {
    let ok = Command::new("sync").arg("-f").arg(mnt).status().unwrap();
    assert!(ok.success(), "sync -f {}", mnt.display());
    let out = run_ok(
        bin()
            .arg("run")
            .arg("--target")
            .arg(mnt)
            .args(seed.run)
            .args(["--duration", &format!("{}s", seed.secs)])
            .args(["--format", "jsonl"]),
    );
    figures(&String::from_utf8_lossy(&out.stdout), seed.causes)
}

/// One seed: A and B runs interleaved, the direction checked, the knobs
/// and then the machine as they were.
fn check(test: &str, seed: &Seed) {
    let before = Machine::now();
    let lab = TempLab::up(seed.lab);
    let mnt = lab.dir.join("mnt").join(seed.fs);
    let bdi = device_of(&mnt);
    if !Path::new(&seed.needs.replace("{bdi}", &bdi)).exists() {
        skip(
            test,
            &format!("{}: this kernel has no {}", seed.name, seed.needs),
        );
        return;
    }
    let lab_knobs = Machine::now().bdis.get(&bdi).cloned();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for with_change in ORDER {
        let f = if with_change {
            let _changed = Changed::make(seed.change, &bdi);
            run_once(seed, &mnt)
        } else {
            run_once(seed, &mnt)
        };
        eprintln!(
            "{} {}: {:.0} ms/GiB of {:?}, longest stall {:.0} ms, {:.0} MiB written",
            seed.name,
            if with_change { "B" } else { "A" },
            f.stall_ms_per_gib,
            seed.causes,
            f.max_stall_ms,
            f.mib_written
        );
        if with_change {
            b.push(f)
        } else {
            a.push(f)
        }
        assert_eq!(
            Machine::now().bdis.get(&bdi),
            lab_knobs.as_ref(),
            "the change put back after the run"
        );
    }
    let side = |v: &[Figures], f: fn(&Figures) -> f64| median(v.iter().map(f).collect());
    let (stall_a, stall_b) = (
        side(&a, |f| f.stall_ms_per_gib),
        side(&b, |f| f.stall_ms_per_gib),
    );
    let (max_a, max_b) = (side(&a, |f| f.max_stall_ms), side(&b, |f| f.max_stall_ms));
    eprintln!(
        "{}: medians, {:?} stall ms/GiB A {stall_a:.0} B {stall_b:.0}, max stall ms A {max_a:.0} B {max_b:.0}",
        seed.name, seed.causes
    );
    assert!(stall_a > 0.0, "the seed's stalls happen without the change");
    assert!(
        stall_b < stall_a,
        "{}: stall time of {:?} lower with the change (A {stall_a:.0}, B {stall_b:.0} ms/GiB)",
        seed.name,
        seed.causes
    );
    assert!(
        max_b < max_a,
        "{}: the longest stall shorter with the change (A {max_a:.0}, B {max_b:.0} ms)",
        seed.name
    );
    let dir = lab.dir.clone();
    drop(lab);
    Machine::now().assert_as(&before, &dir, &bdi);
}

#[test]
fn the_seeds_verified_changes_hold_when_made_by_hand() {
    let test = "the_seeds_verified_changes_hold_when_made_by_hand";
    if !need_root(test) {
        return;
    }
    if !have("mkfs.ext4") {
        skip(test, "mkfs.ext4 missing (apt-get install e2fsprogs)");
        return;
    }
    for seed in SEEDS {
        check(test, seed);
    }
}
