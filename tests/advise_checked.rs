//! Root-only: the trial's verdicts checked from outside (issue 24). For
//! each seed whose change a trial verified, this test makes the change
//! itself — its own writes to the knobs or its own `run` options, none of
//! stallscope's trial or advise code — reruns the seed's workload with the
//! `stallscope run` binary, puts the knobs back itself, and must see the
//! direction the trial's verdict gave on the figures the trial judged,
//! computed here from the runs' JSONL. Medians of `ORDER`'s short runs a
//! side, interleaved A B B A A B so a drift of the machine favours
//! neither side.
//!
//! A seed is a row of `SEEDS`: the lab, the workload, the change (knob
//! writes with the file that restores each, or the `run` options that
//! differ), and what must drop with it. The rows are the three seeds of
//! the issue: the mmap commitlog on xfs (mmap → O_DIRECT), the 4-thread
//! journal+apply shape (the device's own dirty limit keeps it off 0
//! MiB/s), and the buffered writer behind a huge dirty backlog (a
//! device-scoped limit cuts its sync stalls).

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
    /// Each run's length: long enough for the seed's stall to happen in it.
    secs: u32,
    change: Change,
    /// What must be lower with the change (the trial's verdict): each of
    /// these, median B below median A.
    lower: &'static [Judged],
    /// Needed for the change, else the seed is skipped (the kernel lacks
    /// it); `{bdi}` is the lab device's major:minor. Empty: nothing.
    needs: &'static str,
}

/// The change a seed's trial verified.
enum Change {
    /// Knob writes, in order, put back after each B run.
    Writes(&'static [Write]),
    /// `run` options: A's and B's, added to the seed's `run`.
    Args {
        a: &'static [&'static str],
        b: &'static [&'static str],
    },
}

/// A figure of one run, from its JSONL.
#[derive(Clone, Copy, Debug)]
enum Judged {
    /// Stall time of these causes per GiB written, ms (the summary's
    /// `by_cause`).
    StallOf(&'static [&'static str]),
    /// The longest stall, ms (the `stall` lines).
    MaxStall,
    /// The summary's write latency p99.9, µs.
    P999,
    /// Intervals in which nothing was written (the `interval` lines with
    /// no ops): seconds at 0 MiB/s.
    ZeroSeconds,
}

const LAB_256M: &[&str] = &[
    "--fs",
    "xfs",
    "--cap",
    "20MiB",
    "--dirty-bytes",
    "256MiB",
    "--dirty-background-bytes",
    "64MiB",
];

const SEEDS: &[Seed] = &[
    // The Cassandra commitlog seed as `advise --try` verified it (docs/advise-and-trial.md,
    // "What to change"): 32 writers of 818 B records into mmapped segments
    // on xfs capped at 20 MiB/s behind 256 MiB of dirty data sit in dirty
    // throttling for seconds; written with O_DIRECT they never queue behind
    // the page cache. The trial: max stall ×0.004, p99.9 ×0.36.
    Seed {
        name: "mmap commitlog, 32 threads, 818 B records (mmap → direct)",
        lab: LAB_256M,
        fs: "xfs",
        run: &["--threads", "32", "--record-size", "818B"],
        secs: 15,
        change: Change::Args {
            a: &["--mode", "mmap"],
            b: &["--mode", "direct"],
        },
        lower: &[Judged::MaxStall, Judged::P999],
        needs: "",
    },
    // The Ceph journal+apply seed with 4 threads as `advise --try
    // --measure zero` verified it: the apply's writeback behind 256 MiB of
    // dirty data takes the throughput to 0 MiB/s for seconds; the device
    // held to 20 MiB (strict) throttles it sooner and keeps it off zero.
    // The trial: 15 → 0 s at 0 MiB/s.
    Seed {
        name: "journal+apply, 4 threads (device max_bytes 20 MiB, strict)",
        lab: LAB_256M,
        fs: "xfs",
        run: &["--preset", "rados-bench", "--threads", "4"],
        secs: 20,
        change: Change::Writes(&[
            Write {
                file: "/sys/class/bdi/{bdi}/max_bytes",
                value: "20971520",
                restore: "/sys/class/bdi/{bdi}/max_ratio_fine",
            },
            Write {
                file: "/sys/class/bdi/{bdi}/strict_limit",
                value: "1",
                restore: "/sys/class/bdi/{bdi}/strict_limit",
            },
        ]),
        lower: &[Judged::ZeroSeconds],
        needs: "/sys/class/bdi/{bdi}/max_bytes",
    },
    // The trial in docs/advise-and-trial.md of a device-scoped limit: a buffered writer with
    // an fdatasync every 100 MiB (6400 records of 16 KiB at 960 a second,
    // 15 MiB/s offered) behind a 1 GiB dirty limit on a 20 MiB/s disk:
    // each sync waits for the ~100 MiB dirtied since the last one (~5 s);
    // with the device held to 32 MiB of dirty data (strict) it waits for
    // less. 14 s runs: the first sync comes at ~6.7 s and its stall ends
    // within the run.
    Seed {
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
        change: Change::Writes(&[
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
        ]),
        lower: &[
            Judged::StallOf(&["sync", "writeback_wait"]),
            Judged::MaxStall,
        ],
        needs: "/sys/class/bdi/{bdi}/max_bytes",
    },
];

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

/// One run's JSONL output, parsed.
struct RunOut {
    lines: Vec<Value>,
}

impl RunOut {
    fn parse(jsonl: &str) -> RunOut {
        let lines: Vec<Value> = jsonl
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let r = RunOut { lines };
        assert!(r.mib_written() > 0.0, "nothing written:\n{jsonl}");
        r
    }

    fn summary(&self) -> &Value {
        self.lines
            .iter()
            .find(|v| v["type"] == "summary")
            .expect("a summary line")
    }

    fn mib_written(&self) -> f64 {
        let s = self.summary();
        s["mib_per_s"].as_f64().unwrap() * s["duration_s"].as_f64().unwrap()
    }

    fn of(&self, j: Judged) -> f64 {
        match j {
            Judged::StallOf(causes) => {
                let ms: f64 = causes
                    .iter()
                    .map(|c| self.summary()["by_cause"][c]["ms"].as_f64().unwrap_or(0.0))
                    .sum();
                ms / (self.mib_written() / 1024.0)
            }
            Judged::MaxStall => self
                .lines
                .iter()
                .filter(|v| v["type"] == "stall")
                .map(|v| v["duration_ms"].as_f64().unwrap())
                .fold(0.0, f64::max),
            Judged::P999 => self.summary()["lat_us"]["p999"].as_f64().unwrap(),
            Judged::ZeroSeconds => self
                .lines
                .iter()
                .filter(|v| v["type"] == "interval" && v["ops"].as_u64() == Some(0))
                .count() as f64,
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The seed's workload once on `mnt` (with `extra` options), dirty data
/// written out first.
fn run_once(seed: &Seed, extra: &[&str], mnt: &Path) -> RunOut {
    let ok = Command::new("sync").arg("-f").arg(mnt).status().unwrap();
    assert!(ok.success(), "sync -f {}", mnt.display());
    let out = run_ok(
        bin()
            .arg("run")
            .arg("--target")
            .arg(mnt)
            .args(seed.run)
            .args(extra)
            .args(["--duration", &format!("{}s", seed.secs)])
            .args(["--format", "jsonl"]),
    );
    RunOut::parse(&String::from_utf8_lossy(&out.stdout))
}

/// One run of a side: B with the change made (and put back) here.
fn run_side(seed: &Seed, with_change: bool, mnt: &Path, bdi: &str) -> RunOut {
    match (&seed.change, with_change) {
        (Change::Writes(writes), true) => {
            let _changed = Changed::make(writes, bdi);
            run_once(seed, &[], mnt)
        }
        (Change::Writes(_), false) => run_once(seed, &[], mnt),
        (Change::Args { b, .. }, true) => run_once(seed, b, mnt),
        (Change::Args { a, .. }, false) => run_once(seed, a, mnt),
    }
}

/// One seed: A and B runs interleaved, the direction checked, the knobs
/// and then the machine as they were.
fn check(test: &str, seed: &Seed) {
    let before = Machine::now();
    let lab = TempLab::up(seed.lab);
    let mnt = lab.dir.join("mnt").join(seed.fs);
    let bdi = device_of(&mnt);
    if !seed.needs.is_empty() && !Path::new(&seed.needs.replace("{bdi}", &bdi)).exists() {
        skip(
            test,
            &format!("{}: this kernel has no {}", seed.name, seed.needs),
        );
        return;
    }
    let lab_knobs = Machine::now().bdis.get(&bdi).cloned();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for with_change in ORDER {
        let r = run_side(seed, with_change, &mnt, &bdi);
        let shown: Vec<String> = seed
            .lower
            .iter()
            .map(|&j| format!("{j:?} {:.1}", r.of(j)))
            .collect();
        eprintln!(
            "{} {}: {}, {:.0} MiB written",
            seed.name,
            if with_change { "B" } else { "A" },
            shown.join(", "),
            r.mib_written()
        );
        if with_change { &mut b } else { &mut a }.push(r);
        assert_eq!(
            Machine::now().bdis.get(&bdi),
            lab_knobs.as_ref(),
            "the change put back after the run"
        );
    }
    for &j in seed.lower {
        let side = |v: &[RunOut]| median(v.iter().map(|r| r.of(j)).collect());
        let (ma, mb) = (side(&a), side(&b));
        eprintln!("{}: {j:?} medians A {ma:.1} B {mb:.1}", seed.name);
        assert!(
            ma > 0.0,
            "{}: {j:?} is 0 without the change: no stall to cut",
            seed.name
        );
        assert!(
            mb < ma,
            "{}: {j:?} lower with the change (medians A {ma:.1}, B {mb:.1})",
            seed.name
        );
    }
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
    for mkfs in ["mkfs.ext4", "mkfs.xfs"] {
        if !have(mkfs) {
            skip(
                test,
                &format!("{mkfs} missing (apt-get install e2fsprogs xfsprogs)"),
            );
            return;
        }
    }
    for seed in SEEDS {
        check(test, seed);
    }
}
