//! What an imitation does, read off a server's recording: one stream per
//! observed process and thread name that made write-path calls, each a
//! list of steps in time order (the recording's intervals), each step the
//! writes, their sizes and the syncs that interval saw. Pure: the runner
//! (`cmd::imitate`) turns it into threads and system calls, the gate
//! (`fidelity`) rebuilds it to name the imitation's threads.

use crate::model::pattern::CallPattern;
use crate::model::snapshot::Snapshot;
use std::collections::BTreeMap;

/// The sync calls an imitation makes, by what the server called.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum SyncKind {
    Fsync,
    #[default]
    Fdatasync,
    /// sync_file_range(SYNC_FILE_RANGE_WRITE) over the whole file: the
    /// flags were not captured; PostgreSQL's `*_flush_after` and RocksDB's
    /// `bytes_per_sync` ask for this one.
    SyncFileRange,
    /// syncfs, and `sync` made narrower: an imitation never syncs the
    /// whole machine.
    Syncfs,
}

impl SyncKind {
    fn of(call: &str) -> Option<SyncKind> {
        Some(match call {
            "fsync" => SyncKind::Fsync,
            "fdatasync" => SyncKind::Fdatasync,
            "sync_file_range" => SyncKind::SyncFileRange,
            "syncfs" | "sync" => SyncKind::Syncfs,
            _ => return None,
        })
    }
}

/// One interval of one stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    /// Start, seconds from the plan's start.
    pub start_s: f64,
    pub len_s: f64,
    /// Write sizes in bytes and how many of each, adding up to the
    /// interval's written bytes.
    pub writes: Vec<(u64, u64)>,
    pub syncs: BTreeMap<SyncKind, u64>,
}

impl Step {
    pub fn write_count(&self) -> u64 {
        self.writes.iter().map(|w| w.1).sum()
    }
    pub fn write_bytes(&self) -> u64 {
        self.writes.iter().map(|w| w.0 * w.1).sum()
    }
    pub fn sync_count(&self) -> u64 {
        self.syncs.values().sum()
    }
}

/// One thread of the imitation.
#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    /// The role it plays: the process's name, and its thread's name when
    /// the server's threads were told apart (`rocksdb/rocksdb:low`).
    pub role: String,
    /// The observed process it imitates.
    pub pid: u32,
    /// Distinct files it writes: the most fds the server wrote in one
    /// interval.
    pub files: u32,
    pub steps: Vec<Step>,
}

/// Everything an imitation runs, and what of the server it cannot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub streams: Vec<Stream>,
    /// Length of the recorded span, s.
    pub span_s: f64,
    /// Calls the server made that the imitation leaves out, with counts
    /// (msync: its stores are not system calls; fallocate, renames …).
    pub left_out: BTreeMap<String, u64>,
}

impl Plan {
    /// The plan of a recording's observed processes; empty when none had
    /// its calls captured (not root, call bounds off, an older build).
    pub fn of(snapshots: &[Snapshot]) -> Plan {
        let mut plan = Plan::default();
        let Some(t0) = snapshots.first().map(|s| s.t_s - s.interval_s) else {
            return plan;
        };
        let mut by_key: BTreeMap<(String, u32), Stream> = BTreeMap::new();
        for s in snapshots {
            for o in &s.observed {
                let Some(calls) = &o.calls else { continue };
                for (role, part) in parts(&o.comm, calls) {
                    let stream = by_key.entry((role.clone(), o.pid)).or_insert(Stream {
                        role,
                        pid: o.pid,
                        files: 0,
                        steps: Vec::new(),
                    });
                    stream.files = stream.files.max(part.files);
                    stream
                        .steps
                        .push(step(part, s.t_s - s.interval_s - t0, s.interval_s));
                    for (call, n) in left_out(part) {
                        *plan.left_out.entry(call).or_default() += n;
                    }
                }
            }
        }
        plan.span_s = snapshots.last().map_or(0.0, |s| s.t_s) - t0;
        plan.streams = by_key
            .into_values()
            .filter(|s| s.steps.iter().any(|x| x.write_count() + x.sync_count() > 0))
            .collect();
        plan
    }

    /// The roles in the order the imitation numbers its threads
    /// (`thread_name`).
    pub fn roles(&self) -> Vec<String> {
        let mut r: Vec<String> = self.streams.iter().map(|s| s.role.clone()).collect();
        r.dedup();
        r
    }

    /// The name of the imitation's threads playing `role`: `im0`, `im1`, …
    /// (a thread name holds 15 bytes; the gate maps it back).
    pub fn thread_name(&self, role: &str) -> String {
        let i = self.roles().iter().position(|r| r == role).unwrap_or(0);
        format!("im{i}")
    }
}

/// A process's pattern split by role: per thread name when it has them.
fn parts<'a>(comm: &str, calls: &'a CallPattern) -> Vec<(String, &'a CallPattern)> {
    if calls.threads.is_empty() {
        return vec![(comm.to_string(), calls)];
    }
    calls
        .threads
        .iter()
        .map(|(t, p)| {
            let role = if t == comm {
                comm.to_string()
            } else {
                format!("{comm}/{t}")
            };
            (role, p)
        })
        .collect()
}

fn step(p: &CallPattern, start_s: f64, len_s: f64) -> Step {
    let syncs = p
        .syncs
        .iter()
        .filter_map(|(c, s)| Some((SyncKind::of(c)?, s.calls)))
        .filter(|(_, n)| *n > 0)
        .fold(BTreeMap::new(), |mut m, (k, n)| {
            *m.entry(k).or_default() += n;
            m
        });
    Step {
        start_s,
        len_s,
        writes: sizes(&p.write_size_log2, p.writes, p.write_bytes),
        syncs,
    }
}

/// Write sizes from the ⌈log2⌉ histogram, scaled so that they add up to
/// the bytes written: each bucket at ¾ of its upper bound (the middle of
/// 2^(k-1)+1 … 2^k), then all by the one factor that makes the sum right.
/// Without a histogram: `writes` of the mean size.
pub fn sizes(log2: &BTreeMap<u8, u64>, writes: u64, bytes: u64) -> Vec<(u64, u64)> {
    if writes == 0 {
        return Vec::new();
    }
    let rep = |k: u8| {
        if k == 0 {
            1.0
        } else {
            (1u64 << k.min(40)) as f64 * 0.75
        }
    };
    let counted: u64 = log2.values().sum();
    if counted == 0 {
        return vec![((bytes / writes).max(1), writes)];
    }
    let sum: f64 = log2.iter().map(|(k, n)| rep(*k) * *n as f64).sum();
    let f = bytes as f64 / sum;
    let mut out: Vec<(u64, u64)> = log2
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| (((rep(*k) * f).round() as u64).max(1), *n))
        .collect();
    // Rounding leaves a few bytes over or short: the largest size takes them.
    let got: i64 = out.iter().map(|(s, n)| (s * n) as i64).sum();
    if let Some(last) = out.last_mut() {
        if last.1 == 1 {
            last.0 = (last.0 as i64 + bytes as i64 - got).max(1) as u64;
        }
    }
    out
}

fn left_out(p: &CallPattern) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = p
        .syncs
        .iter()
        .filter(|(c, s)| SyncKind::of(c).is_none() && s.calls > 0)
        .map(|(c, s)| (c.clone(), s.calls))
        .collect();
    v.extend(
        p.other
            .iter()
            .filter(|(c, n)| **n > 0 && c.as_str() != "close")
            .map(|(c, n)| (c.clone(), *n)),
    );
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::pattern::SyncCalls;
    use crate::model::snapshot::ObservedInterval;

    fn pattern(writes: u64, bytes: u64, log2: &[(u8, u64)], fdatasyncs: u64) -> CallPattern {
        let mut p = CallPattern {
            writes,
            write_bytes: bytes,
            write_size_log2: log2.iter().copied().collect(),
            files: 2,
            ..Default::default()
        };
        if fdatasyncs > 0 {
            p.syncs.insert(
                "fdatasync".into(),
                SyncCalls {
                    calls: fdatasyncs,
                    ..Default::default()
                },
            );
        }
        p.syncs.insert(
            "msync".into(),
            SyncCalls {
                calls: 3,
                ..Default::default()
            },
        );
        p
    }

    fn snap(t_s: f64, observed: Vec<ObservedInterval>) -> Snapshot {
        Snapshot {
            t_s,
            interval_s: 1.0,
            observed,
            ..Default::default()
        }
    }

    fn proc_(pid: u32, comm: &str, calls: Option<CallPattern>) -> ObservedInterval {
        ObservedInterval {
            pid,
            comm: comm.into(),
            calls,
            ..Default::default()
        }
    }

    #[test]
    fn sizes_add_up_to_the_bytes_written() {
        // 8 × 4096 and 2 × 65536, as tests/call_pattern.rs writes them.
        let s = sizes(
            &[(12, 8), (16, 2)].into_iter().collect(),
            10,
            8 * 4096 + 2 * 65536,
        );
        assert_eq!(
            s.iter().map(|(z, n)| z * n).sum::<u64>(),
            8 * 4096 + 2 * 65536
        );
        assert_eq!(s.len(), 2);
        assert!(s[0].0 > 2048 && s[0].0 <= 4096 * 2, "{s:?}");
        assert_eq!(sizes(&BTreeMap::new(), 4, 1000), vec![(250, 4)]);
        assert!(sizes(&BTreeMap::new(), 0, 0).is_empty());
    }

    #[test]
    fn a_stream_per_process_and_thread_name_in_time_order() {
        let mut rocks = pattern(0, 0, &[], 0);
        rocks
            .threads
            .insert("rocksdb:low".into(), pattern(4, 4 << 20, &[(20, 4)], 1));
        rocks
            .threads
            .insert("db_bench".into(), pattern(100, 100 << 10, &[(10, 100)], 0));
        let snaps = vec![
            snap(
                1.0,
                vec![proc_(
                    7,
                    "postgres",
                    Some(pattern(10, 81920, &[(13, 10)], 2)),
                )],
            ),
            snap(
                2.0,
                vec![
                    proc_(7, "postgres", Some(pattern(0, 0, &[], 1))),
                    proc_(9, "db_bench", Some(rocks)),
                    proc_(11, "idle", None),
                ],
            ),
        ];
        let p = Plan::of(&snaps);
        assert_eq!(p.span_s, 2.0);
        let roles: Vec<&str> = p.streams.iter().map(|s| s.role.as_str()).collect();
        assert_eq!(roles, ["db_bench", "db_bench/rocksdb:low", "postgres"]);
        let pg = &p.streams[2];
        assert_eq!(pg.steps.len(), 2);
        assert_eq!((pg.steps[0].start_s, pg.steps[1].start_s), (0.0, 1.0));
        assert_eq!(pg.steps[0].write_bytes(), 81920);
        assert_eq!(pg.steps[1].syncs[&SyncKind::Fdatasync], 1);
        // msync's stores are not calls the imitation can make.
        assert_eq!(p.left_out["msync"], 12, "3 in each of the 4 parts played");
        assert_eq!(p.thread_name("postgres"), "im2");
    }
}
